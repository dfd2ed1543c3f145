"""The one status vocabulary of a checked or timed case (SPEC 4).

Every module that writes, reads, colours or counts a status imports it from
here.
"""

from __future__ import annotations

OK = "ok"  # matches the oracle within the contract
INEXACT = "inexact"  # over the dtype's rounding bound, under the "wrong" bound (SPEC 1.3)
MISMATCH = "mismatch"  # a wrong answer
UPSTREAM_DEFECT = "upstream-defect"  # a wrong answer a listed library defect explains (SPEC 2)
ERROR = "error"  # raised, crashed, or ran out of memory
TIMEOUT = "timeout"  # exceeded the case's time limit
SKIPPED = "skipped"  # not applicable by design, not installed, or too big for the memory

STATUSES = (OK, INEXACT, MISMATCH, UPSTREAM_DEFECT, ERROR, TIMEOUT, SKIPPED)
# Results that may be timed and compared: the answer is the operator's.
CORRECT = (OK, INEXACT)
# Findings: they fail `check` and the regression gate; `run` records them as rows.
FAILED = (MISMATCH, ERROR, TIMEOUT)
# Worst first: the status that stands for a group of checks.
SEVERITY = (MISMATCH, ERROR, TIMEOUT, UPSTREAM_DEFECT, INEXACT, SKIPPED, OK)


def worst(statuses) -> str:
    return min(statuses, key=SEVERITY.index)
