"""The one status vocabulary of a checked or timed case (docs/SPEC.md §4).

Every module that writes, reads, colours or counts a status imports it from
here.
"""

from __future__ import annotations

OK = "ok"  # matches the oracle within the contract
INEXACT = "inexact"  # over the dtype's rounding bound, under the "wrong" bound (docs/SPEC.md §1.3)
MISMATCH = "mismatch"  # a wrong answer
# Right on its first call, wrong on a later call on the same prepared inputs (a
# state kept between calls: an accumulator zeroed once in prepare and added into
# on every call). Every call is what is timed, so each must give the answer.
UNREPEATABLE = "unrepeatable"
# Wrote into (or freed) one of its inputs: a caller's tensor is not the strategy's
# scratch space, and every later call would be judged and timed on other inputs.
INPUT_MODIFIED = "input-modified"
UPSTREAM_DEFECT = "upstream-defect"  # a wrong answer a listed library defect explains (docs/SPEC.md §2)
ERROR = "error"  # raised, crashed, or ran out of memory
TIMEOUT = "timeout"  # exceeded the case's time limit
SKIPPED = "skipped"  # not applicable by design, not installed, or too big for the memory

STATUSES = (OK, INEXACT, MISMATCH, UNREPEATABLE, INPUT_MODIFIED, UPSTREAM_DEFECT, ERROR, TIMEOUT, SKIPPED)
# Results that may be timed and compared: the answer is the operator's.
CORRECT = (OK, INEXACT)
# Findings: they fail `check` and the regression gate; `run` records them as rows.
FAILED = (MISMATCH, INPUT_MODIFIED, UNREPEATABLE, ERROR, TIMEOUT)
# Worst first: the status that stands for a group of checks. A changed input
# comes before an unrepeatable answer: it is the likelier cause of one.
SEVERITY = (MISMATCH, INPUT_MODIFIED, UNREPEATABLE, ERROR, TIMEOUT, UPSTREAM_DEFECT, INEXACT, SKIPPED, OK)


def worst(statuses) -> str:
    return min(statuses, key=SEVERITY.index)
