"""The judgements the report, the tables and the dashboard share: unstable,
timers that disagree, a busy machine, a dropped ceiling. (Whether a pair of
runs is fit to judge, ``unfit_reasons``, is tested with the history in
test_history.py.)"""

import math

from harness.judging import analysis


def test_unstable_is_an_iqr_beyond_a_tenth_of_the_median():
    assert not analysis.is_unstable(0.10e-3, 1e-3)
    assert analysis.is_unstable(0.11e-3, 1e-3)
    assert not analysis.is_unstable(math.nan, 1e-3) and not analysis.is_unstable(0.5, 0.0)
    assert analysis.unstable({"iqr_s": 2.0, "median_s": 1.0})


def test_timers_disagree_past_five_percent_and_say_by_how_much():
    agree, disagree = {"median_s": 1.04e-3, "xcheck_s": 1e-3}, {"median_s": 1.2e-3, "xcheck_s": 1e-3}
    assert not analysis.timers_disagree(agree) and analysis.timer_disagreement(agree) == ""
    assert analysis.timers_disagree(disagree)
    assert analysis.timer_disagreement(disagree).endswith("(+20 %)")
    # a CPU row has no second timer: nothing to disagree with
    assert math.isnan(analysis.xcheck_ratio({"median_s": 1e-3})) and not analysis.timers_disagree({"median_s": 1e-3})


def test_a_run_is_busy_at_a_load_of_its_core_count_from_either_record():
    assert analysis.cores({"hardware": {"cpu_count": 4}}) == 4
    assert analysis.cores({"cpu_count": 2}) == 2 and analysis.cores({}) is None
    assert analysis.busy(2.0, {"cpu_count": 2}) and not analysis.busy(1.9, {"cpu_count": 2})
    assert not analysis.busy(None, {"cpu_count": 2}) and not analysis.busy(99.0, {})
    assert analysis.first_load([1.5, 1.0, 0.5]) == 1.5 and analysis.first_load(None) is None


def test_a_ceiling_dropped_only_more_than_twenty_percent_below_its_history():
    assert analysis.ceiling_dropped({"deviation_pct": -25.0})
    assert not analysis.ceiling_dropped({"deviation_pct": -15.0})
    assert not analysis.ceiling_dropped({"deviation_pct": None}) and not analysis.ceiling_dropped("garbage")


def test_finite_excludes_booleans_and_non_numbers():
    assert analysis.finite(1) and analysis.finite(0.5)
    assert not any(analysis.finite(value) for value in (True, math.nan, math.inf, "1", None))
