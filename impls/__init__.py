"""Strategies, one module per operator. Importing ``impls`` registers them all.

Operator modules import only numpy at import time; torch and the optional
backends (triton, numba, pytensor) are imported inside the strategies.
"""

from impls import dispersion, dispersion_pinv, maxpool2d, maxunpool  # noqa: F401  (registration)
from impls.registry import OPERATORS, all_strategies, get_operator  # noqa: F401
