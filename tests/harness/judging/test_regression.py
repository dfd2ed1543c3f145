"""The verdict rules of compare and the gates: a change counts only past the
factor and when the samples say it is real; counts by the factor alone."""

import math

import numpy as np
import pytest

from harness.judging.regression import (
    BROKEN,
    FIXED,
    IMPROVED,
    NOT_TIMED,
    REGRESSED,
    SAME,
    Rule,
    count_verdict,
    judge_change,
    status_change,
)
from harness.results.counts import NOT_COUNTED


def samples(scale: float, seed: int, n: int = 100) -> list[float]:
    return list(1e-3 * scale * (1 + 0.02 * np.random.default_rng(seed).standard_normal(n)))


def test_a_real_slowdown_past_the_factor_regresses_and_a_speedup_improves():
    rule = Rule()
    slow = judge_change("ok", "ok", samples(1.0, 0), samples(1.5, 1), rule)
    assert slow.verdict == REGRESSED and slow.ratio == pytest.approx(1.5, rel=0.02) and slow.p_value < rule.alpha
    assert judge_change("ok", "ok", samples(1.5, 0), samples(1.0, 1), rule).verdict == IMPROVED


def test_a_shift_within_the_factor_or_within_the_noise_is_the_same():
    assert judge_change("ok", "ok", samples(1.0, 0), samples(1.05, 1), Rule()).verdict == SAME
    # 3 samples a side cannot reach alpha: only fully separated samples count, and these overlap
    assert judge_change("ok", "ok", [1.0, 2.0, 3.0], [1.5, 2.5, 3.5], Rule()).verdict == SAME
    assert judge_change("ok", "ok", [1.0, 1.0, 1.0], [3.0, 3.0, 3.0], Rule()).verdict == REGRESSED


def test_statuses_decide_before_times_do():
    assert status_change("ok", "mismatch") == BROKEN and status_change("error", "ok") == FIXED
    assert status_change("error", "timeout") == NOT_TIMED and status_change("ok", "ok") is None
    assert judge_change("ok", "ok", [], samples(1.0, 0), Rule()).verdict == NOT_TIMED


def test_bad_rules_are_refused_in_one_line_naming_the_option():
    with pytest.raises(ValueError, match="--factor 1: must be a finite number > 1"):
        Rule(factor=1)
    with pytest.raises(ValueError, match="--alpha 1.5"):
        Rule(alpha=1.5)
    with pytest.raises(ValueError, match="statistic 'mean'"):
        Rule(statistic="mean")


def test_counts_are_judged_by_the_factor_alone():
    assert count_verdict(100, 104) == (1.04, REGRESSED)
    assert count_verdict(100, 102)[1] == SAME and count_verdict(100, 90)[1] == IMPROVED
    ratio, verdict = count_verdict(math.nan, 100)
    assert math.isnan(ratio) and verdict == NOT_COUNTED
    assert count_verdict(0, 100)[1] == NOT_COUNTED
