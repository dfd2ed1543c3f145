"""The one rule of "A is clearly faster than B" (SPEC 3 "Rounds"), and what
the answer makes of it: ties naming every strategy not clearly beaten, no
clear win for a case whose timers disagree or that is incomplete, the
training step faster than its parts, and bench()'s speed-ups."""

import json
import math

import pandas as pd
import pytest

from harness.api import clear_speedups
from harness.judging import analysis
from harness.judging.analysis import answer, clearly_faster, winner_text, winners

PARAMS = json.dumps({"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}, sort_keys=True)  # as rows store it


def row(strategy, rounds=None, median=None, spread=0.02, status="ok", mode="forward", **extra):
    """A maxpool2d row; its median is its rounds' median unless given, its Q1–Q3 ± ``spread`` of it."""
    median = median if median is not None else (sorted(rounds)[len(rounds) // 2] if rounds else math.nan)
    return {"op": "maxpool2d", "strategy": strategy, "backend": "numpy", "device": "cpu", "dtype": "float32",
            "params": PARAMS, "mode": mode, "status": status, "median_s": median,
            "q1_s": median * (1 - spread), "q3_s": median * (1 + spread), "iqr_s": 2 * spread * median,
            "min_s": median * (1 - 2 * spread), "max_s": median * (1 + 2 * spread), "xcheck_s": math.nan,
            "round_medians_s": json.dumps(rounds) if rounds else "", "message": "", **extra}


def test_the_rounds_must_agree_beyond_their_spread():
    fast = row("numba_fused", [1.0, 1.0, 1.0])
    for rounds, expected in (([1.5, 1.52, 1.48], True),  # every round, tightly
                             ([1.05, 1.10, 1.30], False),  # every round, but scattered beyond the lead
                             ([2.0, 2.0, 0.9], False),  # one round says the opposite
                             ([1.0, 1.0, 1.0], False)):
        assert clearly_faster(fast, row("seed_reshape_argmax", rounds)) is expected, rounds
    # Pooled quartiles that overlap do not veto rounds that agree (a slow third widens both).
    wide = row("seed_reshape_argmax", [1.5, 1.5, 1.5], spread=0.6)
    assert analysis.spread(fast)[1] >= analysis.spread(row("x", [1.0] * 3, spread=0.6))[0]
    assert clearly_faster(row("numba_fused", [1.0] * 3, spread=0.6), wide)


def test_a_tie_names_every_strategy_the_winner_does_not_clearly_beat_and_prints_no_speedup():
    """SegNet upsample2's tie named two strategies when the winner's Q3 overlapped seven."""
    rows = pd.DataFrame([row("numba_fused", [1.0, 1.0, 1.0]),
                         row("torch_max_pool2d_indices", [1.02, 0.99, 1.05]),
                         row("torch_reshape_argmax", [1.1, 1.0, 1.3]),
                         row("seed_reshape_argmax", [2.0, 2.0, 2.0])])
    found = answer(rows)
    assert found.tie and not found.clear
    assert winners(found) == ["numba_fused", "torch_max_pool2d_indices", "torch_reshape_argmax"]
    text = winner_text(found)
    assert "numba_fused, torch_max_pool2d_indices and torch_reshape_argmax (a tie" in text
    assert "seed_reshape_argmax" not in text
    # bench(): the speed-up over the seed is blank where the rounds do not separate the row from it.
    renamed = rows.assign(strategy=["numba_fused", "torch_max_pool2d_indices", "seed_loops", "torch_reshape_argmax"])
    speedups = clear_speedups(analysis.with_speedups(renamed))
    by_name = speedups.set_index("strategy")["speedup"]
    assert by_name["seed_loops"] == pytest.approx(1.0)  # the seed's own (maxpool2d's baseline): rounds 1.1, 1.0, 1.3
    assert math.isnan(by_name["numba_fused"])  # rounds 1.0, 1.0, 1.0 against the seed's: one round level, a tie
    assert math.isnan(by_name["torch_max_pool2d_indices"])
    assert by_name["torch_reshape_argmax"] == pytest.approx(1.1 / 2.0)  # clearly slower than the seed: kept


def test_timers_that_disagree_or_an_incomplete_case_are_never_a_clear_win():
    beaten = row("seed_reshape_argmax", [3.0, 3.0, 3.0])
    disputed = pd.DataFrame([row("triton_fused", [1.0, 1.0, 1.0], xcheck_s=1.0 / 0.78), beaten])
    found = answer(disputed)
    assert not found.tie and not found.clear and "timers disagree" in found.unclear
    assert "no clear win" in winner_text(found)
    # A strategy that ran and failed is no contender (torch's max_unpool2d backward raises): still a clear win.
    failed = pd.DataFrame([row("numba_fused", [1.0, 1.0, 1.0]), beaten, row("torch_reshape_argmax", status="error")])
    assert answer(failed).clear
    # Strategies the benchmark planned that have no row (the GPU window ended first).
    found = answer(pd.DataFrame([row("numba_fused", [1.0, 1.0, 1.0]), beaten]),
                   planned=["numba_fused", "seed_reshape_argmax", "triton_fused", "torch_scatter"])
    assert found.unclear == "incomplete: triton_fused, torch_scatter not timed"
    assert answer(pd.DataFrame([row("numba_fused", [1.0, 1.0, 1.0]), beaten])).clear


def test_a_run_without_rounds_falls_back_to_the_quartiles_and_says_so():
    rows = pd.DataFrame([row("numba_fused", median=1.0), row("seed_reshape_argmax", median=1.01)])
    found = answer(rows)
    assert found.basis == analysis.QUARTILE_RULE and found.tie
    assert "(a tie: their Q1–Q3 ranges overlap)" in winner_text(found)
    assert "no rounds stored" in analysis.tie_reason(rows.iloc[0], rows.iloc[1])
    apart = answer(pd.DataFrame([row("numba_fused", median=1.0), row("seed_reshape_argmax", median=2.0)]))
    assert apart.clear and apart.basis == analysis.QUARTILE_RULE and winner_text(apart) == "numba_fused"
    rounds = answer(pd.DataFrame([row("numba_fused", [1.0] * 3), row("seed_reshape_argmax", [1.01, 0.99, 1.0])]))
    assert rounds.basis == analysis.ROUNDS_RULE
    assert "(a tie: numba_fused does not beat it beyond the rounds' spread)" in winner_text(rounds)


def test_a_training_step_faster_than_either_of_its_parts_is_flagged():
    rows = pd.DataFrame([row("numba_fused", [1.0] * 3), row("numba_fused", [2.0] * 3, mode="backward"),
                         row("numba_fused", [1.5] * 3, mode="forward+backward"),
                         row("seed_reshape_argmax", [1.0] * 3), row("seed_reshape_argmax", [2.0] * 3, mode="backward"),
                         row("seed_reshape_argmax", [3.1] * 3, mode="forward+backward"),
                         # within the rounds' spread of its backward: not flagged
                         row("torch_reshape_argmax", [1.0] * 3),
                         row("torch_reshape_argmax", [2.0, 2.0, 2.0], mode="backward"),
                         row("torch_reshape_argmax", [1.9, 2.1, 2.0], mode="forward+backward")])
    flagged = analysis.training_faster_than_parts(rows)
    assert [(found["strategy"], found["part"]) for found in flagged] == [("numba_fused", "backward")]
    assert flagged[0]["step_s"] == 1.5 and flagged[0]["part_s"] == 2.0


def test_the_dashboard_marks_red_only_a_change_that_holds_in_every_round():
    """The two red rows of the committed history (numba_fused 4.43 -> 44.4 ms,
    jax_at_set 185 -> 454 µs, sources unchanged) were one prepare's slow
    state. A suspect 10x slower in one round of three, against its partners,
    is cleared; 10x slower in every round stays red."""
    import numpy as np

    from harness.judging import history, wall_gate

    names = ["numba_fused", "torch_max_pool2d_indices", "torch_reshape_argmax"]
    base = pd.DataFrame([row(name, [1.0, 1.0, 1.0]) for name in names])
    suspect = base.iloc[0]
    for slow_rounds, red in (([10.0, 1.0, 1.0], False), ([10.0, 9.0, 11.0], True)):
        new = pd.DataFrame([row(names[0], slow_rounds)] + [row(name, [1.0, 1.0, 1.0]) for name in names[1:]])
        changes = history.stored_changes(base, {}, new, {}, suspect, names)
        assert changes == pytest.approx(list(np.asarray(slow_rounds) / 1.0))
        table = pd.DataFrame({"verdict": ["regressed"]})
        assert wall_gate.settle(table, 0, changes, 2.0) is red
        assert table.loc[0, "verdict"] == ("regressed" if red else "same")
    # Runs without rounds: one change, from the samples' 10th percentiles, as before.
    plain = base.assign(round_medians_s="", case_id=names)
    later = plain.assign(median_s=[10.0, 1.0, 1.0])
    samples = {name: [1.0] * 5 for name in names}
    slower = dict(samples, numba_fused=[10.0] * 5)
    assert history.stored_changes(plain, samples, later, slower, plain.iloc[0], names) == [pytest.approx(10.0)]


def test_the_gates_re_measurement_takes_rounds_in_fresh_orders_with_fresh_prepares(monkeypatch):
    """`regress`'s confirmation of a suspect: each of its rounds prepares every
    strategy afresh, in an order drawn afresh (the sweep's rounds)."""
    from harness.judging import wall_gate

    prepared = []
    real = wall_gate.prepare_case

    def counting(strat, *args, **kwargs):
        prepared.append(strat.name)
        return real(strat, *args, **kwargs)

    monkeypatch.setattr(wall_gate, "prepare_case", counting)
    names = ["numba_fused", "torch_max_pool2d_indices", "seed_reshape_argmax"]
    times = wall_gate.paired_times("maxpool2d", {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}, "float32", "cpu", names,
                                   seed=3, rounds=4)
    assert len(times) == 4 and all(len(t) == 3 and all(s > 0 for s in t) for t in times)
    orders = [tuple(prepared[i:i + 3]) for i in range(0, 12, 3)]
    assert all(sorted(order) == sorted(names) for order in orders) and len(set(orders)) > 1


def test_an_unfinished_runs_plan_names_the_strategies_it_never_reached():
    config = {"timing": {"min_samples": 5}, "threads": 1,
              "benchmarks": [{"op": "maxpool2d", "params": {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2},
                              "strategies": ["numba_fused", "seed_reshape_argmax", "torch_reshape_argmax"]}]}
    plan = analysis.planned_strategies({"status": "interrupted", "config": config})
    key = ("maxpool2d", "cpu", "float32", PARAMS, "forward", "contiguous")
    assert plan[key] == ["numba_fused", "seed_reshape_argmax", "torch_reshape_argmax"]
    rows = pd.DataFrame([row("numba_fused", [1.0] * 3), row("seed_reshape_argmax", [3.0] * 3)])
    assert answer(rows, planned=plan[key]).unclear == "incomplete: torch_reshape_argmax not timed"
    assert analysis.planned_strategies({"status": "complete", "config": config}) is None
    assert analysis.planned_strategies({"status": "interrupted", "config": {"benchmarks": [{"op": "nope"}]}}) is None


def test_bench_names_each_points_winner_or_its_whole_tie():
    from harness.api import answer_notes

    tied = pd.DataFrame([row("numba_fused", [1.0] * 3), row("torch_reshape_argmax", [1.02, 0.99, 1.0]),
                         row("seed_reshape_argmax", [3.0] * 3)])
    [note] = answer_notes(tied)
    assert note.startswith("fastest for maxpool2d") and "numba_fused and torch_reshape_argmax (a tie" in note
    assert answer_notes(tied.iloc[:1]) == []  # one strategy: nothing compared


def test_steadiness_is_judged_within_rounds_so_a_state_set_at_prepare_time_is_not_noise():
    """Rounds pool samples of states each prepare set (one prepare of numba's
    1-D unpool ran 11x slower for a whole run): the pooled IQR then reads
    'unstable' for a machine that timed every state steadily, and a fit run
    of make bench came out 62 of 94 unstable. The unstable mark and the
    fitness rule read the spread within a round; a busy machine shows there."""
    from harness.results import stats

    steady_states = [[1.0, 1.01, 0.99, 1.0], [2.0, 2.02, 1.98, 2.0], [1.5, 1.51, 1.49, 1.5]]
    pooled = stats.summarize([s for r in steady_states for s in r])
    within = stats.within_round_iqr_s(steady_states, pooled.median_s)
    assert pooled.iqr_s / pooled.median_s > 0.3 and within / pooled.median_s < 0.02
    row = pd.Series({"median_s": pooled.median_s, "iqr_s": pooled.iqr_s, "within_round_iqr_s": within})
    assert not analysis.unstable(row)
    noisy = [[1.0, 1.5, 0.7, 1.2], [1.0, 1.4, 0.8, 1.1], [1.0, 1.3, 0.6, 1.2]]
    noisy_summary = stats.summarize([s for r in noisy for s in r])
    assert analysis.unstable(pd.Series({"median_s": noisy_summary.median_s, "iqr_s": 0.0,
                                        "within_round_iqr_s": stats.within_round_iqr_s(noisy,
                                                                                       noisy_summary.median_s)}))
    # a run before rounds (no within-round figure): its samples' IQR, as before
    assert analysis.unstable(pd.Series({"median_s": pooled.median_s, "iqr_s": pooled.iqr_s,
                                        "within_round_iqr_s": math.nan}))
    assert stats.within_round_iqr_s([[1.0], [2.0]], 1.5) != stats.within_round_iqr_s([[1.0], [2.0]], 1.5)  # NaN


def test_the_a_a_test_finds_a_clear_winner_the_other_run_clearly_beats():
    """Issue 40's A/A: two runs of one commit contradict each other where one
    run's clear winner is clearly slower than another strategy in the other;
    a tie is no claim, and agreeing runs give nothing."""
    first = pd.DataFrame([row("numba_fused", [1.0, 1.0, 1.0]), row("torch_max_pool2d_indices", [1.5, 1.5, 1.5])])
    agreeing = pd.DataFrame([row("numba_fused", [1.1, 1.1, 1.1]),
                             row("torch_max_pool2d_indices", [1.6, 1.6, 1.6])])
    assert analysis.contradictions(first, agreeing) == []
    flipped = pd.DataFrame([row("numba_fused", [4.4, 4.4, 4.4]), row("torch_max_pool2d_indices", [1.6, 1.6, 1.6])])
    found = analysis.contradictions(first, flipped)
    assert [(named, winner, rival) for _, named, winner, rival in found] == [
        ("first", "numba_fused", "torch_max_pool2d_indices"), ("second", "torch_max_pool2d_indices", "numba_fused")]
    tied = pd.DataFrame([row("numba_fused", [1.0, 1.3, 0.9]), row("torch_max_pool2d_indices", [1.2, 1.0, 1.1])])
    assert analysis.contradictions(tied, tied) == []
    assert [named for _, named, *_ in analysis.contradictions(first, tied)] == []  # a tie beats no claim clearly
