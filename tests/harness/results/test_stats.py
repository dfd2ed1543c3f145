"""The statistics of one case's samples and the tests the verdicts rest on."""

import math

import pytest

from harness.results import metrics, stats


def test_a_summary_holds_every_stored_statistic_of_the_samples():
    summary = stats.summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert set(summary.as_row()) == set(metrics.TIMING.names)
    assert (summary.median_s, summary.min_s, summary.max_s, summary.n_samples) == (3.0, 1.0, 5.0, 5)
    assert summary.iqr_s == summary.q3_s - summary.q1_s == 2.0
    with pytest.raises(ValueError, match="no samples"):
        stats.summarize([])


def test_a_slow_start_is_leading_samples_past_twice_the_median_and_at_most_half():
    assert stats.slow_start([9.0, 8.0, 1.0, 1.0, 1.1, 0.9]) == 2
    assert stats.slow_start([1.0, 9.0, 1.0, 1.0]) == 0  # only leading ones
    assert stats.slow_start([9.0, 9.0, 9.0, 1.0, 1.0]) == 0  # slow most of the time: that is the case
    assert stats.slow_start([]) == 0


def test_a_few_samples_past_a_baseline_with_a_tie_get_the_exact_p_value():
    """Three raced samples, each past all 125 of a baseline in which two
    samples tie: the exact p (6e-6) is what the gate's alpha (0.002) is
    held to, not the normal approximation's 0.0032."""
    base = [1.0 + i / 1000 for i in range(124)] + [1.0]
    new = [3.0, 3.1, 3.2]
    assert stats.mann_whitney_p(base, new) == pytest.approx(stats.smallest_p(125, 3))
    assert stats.mann_whitney_p(base, new) < 1e-5
    assert stats.mann_whitney_p(base, [1.05, 1.06, 1.07]) > 0.5  # inside the baseline: no shift
    from harness.judging import regression
    assert regression.timing_change(base, new, regression.Rule(1.41, 0.002, "p10")).verdict == regression.REGRESSED


def test_too_few_samples_cannot_reach_alpha_and_then_only_separation_counts():
    assert stats.smallest_p(3, 3) == pytest.approx(0.1)  # 2 / C(6, 3)
    assert stats.smallest_p(200, 200) < 1e-100
    assert stats.separated([1, 2], [3, 4]) == 1 and stats.separated([3, 4], [1, 2]) == -1
    assert stats.separated([1, 3], [2, 4]) == 0


def test_rates_and_ratios_are_nan_where_undefined():
    assert stats.gbps(2e9, 1.0) == 2.0 and math.isnan(stats.gbps(1.0, 0.0))
    assert stats.pct_of_ceiling(1e9, 0.5, 1.0) == pytest.approx(200.0)
    assert math.isnan(stats.rel_iqr(1.0, 0.0)) and stats.rel_iqr(0.1, 1.0) == pytest.approx(0.1)
    assert stats.typical_s([1.0, 2.0, 3.0, 100.0], "p10") < stats.typical_s([1.0, 2.0, 3.0, 100.0])


def test_the_fresh_output_floor_reads_at_the_copy_rate_and_writes_at_the_fresh_rate():
    # 3 GB read at 30 GB/s (0.1 s) + 1 GB written fresh at 5 GB/s (0.2 s)
    assert stats.fresh_floor_s(4e9, 1e9, 30.0, 5.0) == pytest.approx(0.3)
    assert stats.pct_of_floor(0.3, 0.4) == pytest.approx(75.0)
    for bad in ((4e9, 5e9, 30.0, 5.0), (4e9, -1, 30.0, 5.0), (4e9, 1e9, 0.0, 5.0), (4e9, 1e9, 30.0, math.nan)):
        assert math.isnan(stats.fresh_floor_s(*bad))
    assert math.isnan(stats.pct_of_floor(0.3, math.nan)) and math.isnan(stats.pct_of_floor(math.nan, 0.4))
