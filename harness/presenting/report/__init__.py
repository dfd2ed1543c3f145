"""The comparison report, a package of the presenting layer: the CLI builds it
(``run --report``, ``report``), so does the top-level ``report.py``, and the
dashboard builds each run's light report and takes its strategy colours from
``figures``.

- ``load``: result directories into rows labelled by machine;
- ``figures``: one function per figure of the report, and the colour of each
  backend and strategy (the dashboard's too; the API's ``bench`` draws its own);
- ``sections``: the text (case tables, conclusions, run tables, defects);
- ``document``: the blocks and their Markdown and HTML rendering;
- ``build``: the whole report, and ``main``, the command line that the
  top-level ``report.py`` (``python report.py DIR... -o OUT``) runs.

Judgements (fastest, unstable, ...) come from ``harness.judging.analysis``.
"""

from harness.presenting.report.build import build, main

__all__ = ["build", "main"]
