"""The comparison report: ``python report.py RESULT_DIR [RESULT_DIR ...] [-o OUT]``.

Reads result directories (a CPU run and a GPU run, say) and writes
``OUT/<name>.md``, ``OUT/<name>.html`` (one self-contained file, figures
embedded) and the figures as PNG and SVG under ``OUT/figures``. Every number
comes from the result files; every text from them is escaped.

This file is the documented entry point only: the report is built by the
``harness.presenting.report`` package (loading, figures, sections, rendering).
"""

import sys

from harness.presenting.report import build, main

__all__ = ["build", "main"]

if __name__ == "__main__":
    sys.exit(main())
