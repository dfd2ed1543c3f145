"""The one regression rule, used by ``compare`` (and so the CI gate) and the
dashboard.

A case regresses when its typical time (the median; the gate uses the 10th
percentile, see harness/judging/wall_gate.py) grew by more than ``factor`` *and* a
Mann–Whitney U test on the raw samples says the shift is real (p < ``alpha``):
the ratio guards against flagging tiny real changes, the test against
flagging noise. With few samples (5 or 6 a side: a slow case in a 0.5 s
budget) the test cannot reach ``alpha`` at all, and a 3x slowdown would pass
as "same"; there the rule asks for what the test would say at its strongest,
every sample of one run beyond every sample of the other. A case that was
correct and now fails its check is broken.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness.results import counts, metrics, stats
from impls.status import CORRECT

DEFAULT_FACTOR = 1.10
DEFAULT_ALPHA = 0.002

REGRESSED, IMPROVED, SAME, BROKEN, FIXED, NOT_TIMED = "regressed", "improved", "same", "broken", "fixed", "not timed"
ONLY_IN_BASE, ONLY_IN_NEW = "only in base", "only in new"
# Verdicts that fail the gate.
FAILING = (REGRESSED, BROKEN)


STATISTICS = ("median", "p10")


@dataclass(frozen=True)
class Rule:
    factor: float = DEFAULT_FACTOR
    alpha: float = DEFAULT_ALPHA
    # "median", or "p10": the 10th percentile, which load from other
    # processes moves far less than the median (it only ever adds time).
    statistic: str = "median"

    def __post_init__(self):
        if not (isinstance(self.factor, (int, float)) and math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"--factor {self.factor}: must be a finite number > 1")
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha < 1):
            raise ValueError(f"--alpha {self.alpha}: must be in (0, 1)")
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic {self.statistic!r}: expected one of {', '.join(STATISTICS)}")

    def typical(self, samples) -> float:
        return stats.typical_s(samples, self.statistic)


@dataclass(frozen=True)
class Change:
    verdict: str
    base_s: float = math.nan
    new_s: float = math.nan
    ratio: float = math.nan
    p_value: float = math.nan


def status_change(base_status: str, new_status: str) -> str | None:
    """BROKEN / FIXED / NOT_TIMED from the two statuses, or None when both are correct."""
    base_ok, new_ok = base_status in CORRECT, new_status in CORRECT
    if base_ok and not new_ok:
        return BROKEN
    if new_ok and not base_ok:
        return FIXED
    if not (base_ok or new_ok):
        return NOT_TIMED
    return None


def timing_change(base_samples, new_samples, rule: Rule) -> Change:
    """The verdict on two sets of raw samples of one case."""
    if not len(base_samples) or not len(new_samples):
        raise ValueError("no samples to compare")
    base_s, new_s = rule.typical(base_samples), rule.typical(new_samples)
    ratio = new_s / base_s if base_s > 0 else math.inf
    p_value = stats.mann_whitney_p(base_samples, new_samples)
    if stats.smallest_p(len(base_samples), len(new_samples)) >= rule.alpha:
        shift = stats.separated(base_samples, new_samples)  # too few samples for the test to reach alpha
    else:
        shift = 1 if p_value < rule.alpha and ratio > 1 else -1 if p_value < rule.alpha else 0
    verdict = SAME
    if ratio > rule.factor and shift > 0:
        verdict = REGRESSED
    elif ratio < 1 / rule.factor and shift < 0:
        verdict = IMPROVED
    return Change(verdict, base_s, new_s, ratio, p_value)


def judge_change(base_status: str, new_status: str, base_samples, new_samples, rule: Rule) -> Change:
    by_status = status_change(base_status, new_status)
    if by_status:
        return Change(by_status)
    if not base_samples or not new_samples:
        return Change(NOT_TIMED)
    return timing_change(base_samples, new_samples, rule)


# Counts: they barely move between runs of the same code, so no test is needed.
DEFAULT_COUNT_FACTOR = metrics.COUNTS.factor


def count_verdict(base: float, new: float, factor: float = DEFAULT_COUNT_FACTOR) -> tuple[float, str]:
    """(ratio, verdict) of two counts of one case: regressed past ``factor``,
    improved below its inverse, else the same. Either count missing: not counted."""
    if not (math.isfinite(base) and math.isfinite(new)) or base <= 0:
        return math.nan, counts.NOT_COUNTED
    ratio = new / base
    if ratio > factor:
        return ratio, REGRESSED
    if ratio < 1 / factor:
        return ratio, IMPROVED
    return ratio, SAME
