"""The Python API: ``import scatterbench; scatterbench.bench("dispersion", C=[4, 8, 16])``.

See harness/api.py; the command line is ``scatterbench`` (harness/cli.py).
"""

from harness.api import BenchResult, bench

__all__ = ["BenchResult", "bench"]
