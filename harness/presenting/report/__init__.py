"""The comparison report, as a package below the CLI and the dashboard.

- ``load``: result directories into rows labelled by machine;
- ``figures``: one function per figure (also drawn by the dashboard and the API);
- ``sections``: the text (case tables, conclusions, run tables, defects);
- ``document``: the blocks and their Markdown and HTML rendering;
- ``build``: the whole report, and ``main``, the command line that the
  top-level ``report.py`` (``python report.py DIR... -o OUT``) runs.

Judgements (fastest, unstable, ...) come from ``harness.judging.analysis``.
"""

from harness.presenting.report.build import build, main

__all__ = ["build", "main"]
