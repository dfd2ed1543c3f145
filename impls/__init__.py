"""Strategies, one module per operator. Importing ``impls`` registers them all.

Operator modules import only numpy at import time; torch and the optional
backends (triton, numba, pytensor) are imported inside the strategies.
"""

from impls import maxpool2d  # noqa: F401  (registers the operator)
from impls.registry import OPERATORS, all_strategies, get_operator  # noqa: F401
