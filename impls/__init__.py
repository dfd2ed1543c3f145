"""Strategies, one module per operator. Importing ``impls`` registers them all.

Operator modules import only numpy at import time; torch and the optional
backends (triton, numba, pytensor) are imported inside the strategies.
"""

from impls import backends, dispersion, dispersion_pinv, maxpool2d, maxunpool  # noqa: F401  (registration)
from impls.backends import BACKENDS, get_backend  # noqa: F401
from impls.registry import OPERATORS, all_strategies, check_registry, get_operator  # noqa: F401

check_registry()
