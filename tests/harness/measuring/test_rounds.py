"""SPEC 3 "Rounds" and "Racing": the strategies of one point sampled in
rounds, a fresh random order and a fresh prepare each round, each leaving the
race when the rounds decide it, the budget split across the rounds.

The timers here run on a fake clock that only the calls move, so that a
machine "3x slower for a third of the run" is exactly that."""

import json
import types

import numpy as np
import pandas as pd
import pytest

from harness.base.config import Case, Timing, expand, parse_config
from harness.judging import analysis
from harness.measuring import check, sweep, timing
from impls.backends import get_backend
from impls.common import Verdict
from impls.registry import get_operator
from impls.status import OK

POOL = {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}
# Two real strategies of one point; their calls are replaced by the fake ones below.
FAST, SLOW = "numba_fused", "torch_max_pool2d_indices"


class FakeMachine:
    """A clock only the calls move. Each call costs its strategy's own time,
    ``slowdown`` times more while the machine is slow: for the first
    ``slow_calls`` calls of the run (a third of it, in the tests)."""

    def __init__(self, costs: dict, slow_calls: int = 0, slowdown: float = 3.0):
        self.now, self.calls, self.costs = 0.0, [], costs
        self.slow_calls, self.slowdown = slow_calls, slowdown
        self.prepares: dict[str, int] = {}

    def call_of(self, name: str):
        def call():
            slow = self.slowdown if len(self.calls) < self.slow_calls else 1.0
            self.calls.append(name)
            self.now += self.costs[name] * slow
            return (name, len(self.calls))  # which call made this output
        return call

    def prepare(self, strat, ref, params, dtype, device, layout="contiguous", watch_inputs=True):
        self.prepares[strat.name] = self.prepares.get(strat.name, 0) + 1
        return check.Prepared(self.call_of(strat.name), 0.0)


@pytest.fixture
def machine(monkeypatch):
    """A FakeMachine standing in for prepare and the host clock; the judge after the samples agrees."""
    def install(costs, **kwargs):
        fake = FakeMachine(costs, **kwargs)
        monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: fake.now))
        monkeypatch.setattr(check, "prepare_case", fake.prepare)
        monkeypatch.setattr(check, "judge_again", lambda strat, prepared, ref, dtype, device, layout, first,
                            **kwargs: first)
        return fake
    return install


def pending_case(name: str, timing_config: Timing) -> sweep.PendingCase:
    case = Case("maxpool2d", name, "cpu", "float32", tuple(sorted(POOL.items())))
    strat = get_operator("maxpool2d").strategies[name]
    return sweep.PendingCase(case, sweep.base_row(case, "r", 10.0), strat, get_backend("numpy"),
                             ref=types.SimpleNamespace(params=POOL),
                             verdict=Verdict(OK, ""), flush=None, cross_check=False, first_call_s=0.0,
                             timeout_s=1e6)


class InOrder:
    """An order generator that never shuffles: the strategies in blocks, one after the other."""

    @staticmethod
    def permutation(count):
        return np.arange(count)


# Exactly 30 samples a strategy, whatever the budget: the fake calls take no real time.
THIRTY = Timing(min_samples=30, max_samples=30, budget_s=1e-9, warmup_s=0, max_rounds=3)
# One block of 30 each: the sampling before rounds (below the two rounds a config may ask, so built past validation).
BLOCK = Timing.model_construct(min_samples=30, max_samples=30, budget_s=1e-9, warmup_s=0, max_rounds=1)


def _rows(pending):
    return pd.DataFrame([item.finish().row for item in pending])


def test_a_slow_third_of_the_run_flips_block_order_and_the_rounds_keep_the_right_winner(machine):
    """Done-when bullet of issue 40: FAST takes 1.0 ms, SLOW 1.2 ms; the
    machine runs 3x slower for the first third of the run's calls (20 of 60).
    Sampled in blocks (FAST's 30, then SLOW's), the slow third lands on FAST
    alone and the ranking flips; in three rounds it falls on round 1, on both
    strategies, and every round's ratio says FAST is faster."""
    costs = {FAST: 1.0e-3, SLOW: 1.2e-3}
    machine(costs, slow_calls=20)
    blocks = [pending_case(FAST, BLOCK), pending_case(SLOW, BLOCK)]
    sweep.time_in_rounds(blocks, BLOCK, InOrder())
    block_rows = _rows(blocks)
    assert block_rows.set_index("strategy").loc[FAST, "median_s"] == pytest.approx(3e-3)
    assert block_rows.sort_values("median_s")["strategy"].iloc[0] == SLOW  # flipped by the slow third

    machine(costs, slow_calls=20)
    rounds = [pending_case(FAST, THIRTY), pending_case(SLOW, THIRTY)]
    sweep.time_in_rounds(rounds, THIRTY, np.random.default_rng(7))
    round_rows = _rows(rounds)
    found = analysis.answer(round_rows)
    # Every round puts FAST 1.2x ahead, beyond the 5 % margin: three rounds of it are a win, never a tie.
    assert found.best["strategy"] == FAST and found.clear and found.basis == analysis.RACING_RULE
    by_name = round_rows.set_index("strategy")
    assert analysis.round_ratios(by_name.loc[FAST], by_name.loc[SLOW]) == pytest.approx([1.2] * 3)
    assert by_name.loc[SLOW, "decision"] == "slower" and by_name.loc[SLOW, "decision_round"] == 3
    assert by_name.loc[FAST, "decision"] == "faster"
    assert by_name.loc[FAST, "n_samples"] == 30  # the same samples as the block, split in three


def test_rounds_interleave_in_fresh_random_orders_and_prepare_afresh_each_round(machine):
    """Four strategies 1, 2, 3 and 4 ms: the three slow ones are 2x to 4x
    behind in every round, so they leave after round 2 (two rounds whose
    mean puts them 1.65x behind), and the race is decided there; the
    winner stays to its end, alone in round 3, for its min_samples (SPEC 3:
    a strategy that stays in the race to its end gets at least that)."""
    names = [FAST, SLOW, "seed_reshape_max", "torch_reshape_argmax"]
    fake = machine({name: 1e-3 * (index + 1) for index, name in enumerate(names)})
    config = Timing(min_samples=6, max_samples=6, budget_s=1e-9, warmup_s=0, max_rounds=3)
    pending = [pending_case(name, config) for name in names]
    started = []
    orders = sweep.time_in_rounds(pending, config, np.random.default_rng(11), before=lambda c: started.append(c))
    assert [sorted(order) for order in orders] == [[0, 1, 2, 3]] * 3
    assert len({tuple(order) for order in orders}) > 1  # not one order for every round
    assert fake.prepares == {name: 3 if name == FAST else 2 for name in names}  # a fresh prepare each round
    # Each round's calls come in its order, two samples per strategy (6 over at most 3 rounds); round 3
    # is the winner's alone.
    in_race = [position for order in orders[:2] for position in order] + [0]
    assert fake.calls == [names[position] for position in in_race for _ in range(2)]
    assert [case.strategy for case in started] == [names[position] for position in in_race]
    rows = _rows(pending).set_index("strategy")
    assert [len(json.loads(text)) for text in rows["round_medians_s"]] == [3, 2, 2, 2]
    assert rows.loc[FAST, "n_samples"] == config.min_samples
    assert list(rows["decision"]) == ["faster", "slower", "slower", "slower"]
    assert set(rows["decided_against"].iloc[1:]) == {FAST} and set(rows["decision_round"].iloc[1:]) == {2}
    # Reproducible: the same seed and point draw the same orders.
    group = pending[0].case.group
    first = [list(sweep.round_order(5, group).permutation(4)) for _ in range(1)]
    assert first == [list(sweep.round_order(5, group).permutation(4))]


def test_a_strategy_three_times_slower_leaves_after_two_rounds_and_equals_race_on(machine):
    """SPEC 3 "Racing": the seed 1,000x behind takes two rounds of one call
    each, not five calls; two equal strategies run every round of the
    budget, and come out equivalent (the fake clock has no noise), an answer."""
    fake = machine({FAST: 1e-3, SLOW: 1e-3, "seed_loops": 1.0})
    config = Timing(min_samples=5, max_samples=2000, budget_s=0.08, warmup_s=0, max_rounds=8)
    pending = [pending_case(name, config) for name in (FAST, SLOW, "seed_loops")]
    sweep.time_in_rounds(pending, config, np.random.default_rng(3))
    rows = _rows(pending).set_index("strategy")
    assert fake.calls.count("seed_loops") == 2 and rows.loc["seed_loops", "decision"] == "slower"
    assert rows.loc["seed_loops", "decision_round"] == 2
    assert {rows.loc[FAST, "decision"], rows.loc[SLOW, "decision"]} == {"equivalent"}
    found = analysis.answer(rows.reset_index())
    assert found.outcome == analysis.EQUIVALENT and "equivalent within ±5%" in analysis.winner_text(found)


def test_a_point_whose_budget_runs_out_is_undecided_and_says_so(machine):
    """Two strategies 3 % apart on a noisy machine: undecided after the
    budget's rounds, the rows say so, and `run`'s summary names them."""
    from harness.presenting import tables

    noise = iter(np.random.default_rng(0).lognormal(0.0, 0.3, size=10_000))
    fake = machine({FAST: 1e-3, SLOW: 1.03e-3})
    real_call_of = fake.call_of

    def noisy(name):
        call = real_call_of(name)

        def timed():
            before = fake.now
            out = call()
            fake.now = before + (fake.now - before) * next(noise)
            return out
        return timed
    fake.call_of = noisy
    config = Timing(min_samples=5, max_samples=2000, budget_s=1e-9, warmup_s=0, max_rounds=3)
    pending = [pending_case(name, config) for name in (FAST, SLOW)]
    sweep.time_in_rounds(pending, config, np.random.default_rng(1))
    rows = _rows(pending)
    assert set(rows["decision"]) == {"undecided"}
    found = analysis.answer(rows)
    assert found.outcome == analysis.UNDECIDED and "undecided after 3 rounds" in analysis.winner_text(found)
    [(label, names, rounds)] = analysis.undecided_points(rows)
    assert set(names) == {FAST, SLOW} and rounds == 3 and label.startswith("maxpool2d cpu float32")
    rendered = " ".join(str(item) for item in tables.run_summary(rows, grid=True))
    assert "undecided after 3 rounds" in rendered and "timing.max_rounds" in rendered


def test_the_round_share_keeps_the_case_budget():
    share = timing.round_share(Timing(min_samples=5, max_samples=2000, budget_s=0.5, warmup_s=0.05, max_rounds=4))
    assert share.budget_s * 4 == pytest.approx(0.5) and share.warmup_s * 4 == pytest.approx(0.05)
    assert share.min_samples == 2 and share.max_samples == 500  # a strategy racing to the end: at least 5
    assert timing.round_share(Timing(max_rounds=16)).min_samples == 1  # a slow seed: one call a round


def test_a_failure_in_a_later_round_ends_the_case_with_its_status(machine, monkeypatch):
    """A strategy whose second prepare raises is recorded with that error, not timed from round 1 alone."""
    fake = machine({FAST: 1e-3, SLOW: 1e-3, "seed_reshape_max": 1e-3})
    real_prepare = fake.prepare

    def flaky(strat, *args, **kwargs):
        if strat.name == SLOW and fake.prepares.get(SLOW, 0) >= 1:
            raise RuntimeError("deliberate failure on a fresh prepare")
        return real_prepare(strat, *args, **kwargs)

    monkeypatch.setattr(check, "prepare_case", flaky)
    config = Timing(min_samples=6, max_samples=6, budget_s=1e-9, warmup_s=0, max_rounds=3)
    pending = [pending_case(name, config) for name in (FAST, SLOW, "seed_reshape_max")]
    sweep.time_in_rounds(pending, config, np.random.default_rng(0))
    rows = _rows(pending).set_index("strategy")
    assert rows.loc[SLOW, "status"] == "error" and "deliberate failure" in rows.loc[SLOW, "message"]
    assert rows.loc[FAST, "status"] == OK and len(json.loads(rows.loc[FAST, "round_medians_s"])) == 3


def test_every_round_is_judged_on_its_last_timed_call(machine, monkeypatch):
    """Any round may be a strategy's last, so each round's last timed call is
    judged (its own output: no extra call), and a wrong answer in round 2
    publishes no time. A 4-second seed takes one call a round."""
    fake = machine({SLOW: 4.0, FAST: 1e-3})
    judged = []

    def judge(strat, prepared, ref, dtype, device, layout, first, **kwargs):
        judged.append((strat.name, kwargs))
        if strat.name == FAST and len([name for name, _ in judged if name == FAST]) == 2:
            return Verdict("mismatch", "deliberately wrong in round 2")
        return first
    monkeypatch.setattr(check, "judge_again", judge)
    config = Timing(min_samples=5, max_samples=2000, budget_s=0.5, warmup_s=0, max_rounds=16)
    pending = [pending_case(SLOW, config)]
    sweep.time_in_rounds(pending, config, np.random.default_rng(0))
    assert fake.calls == [SLOW] * 5  # alone: its budget, at least min_samples calls, one a round
    assert [len(timed.samples_s) for timed in pending[0].rounds] == [1] * 5
    outputs = [kwargs["output"] for name, kwargs in judged]
    assert outputs == [(SLOW, index) for index in range(1, 6)] and all(k["calls"] == 0 for _, k in judged)
    assert "the last of its 5 timed samples (round 5)" in judged[-1][1]["which"]
    assert _rows(pending).loc[0, "n_samples"] == 5
    judged.clear()
    wrong = [pending_case(FAST, config), pending_case("seed_reshape_max", config)]
    fake.costs["seed_reshape_max"] = 1e-3
    sweep.time_in_rounds(wrong, config, np.random.default_rng(0))
    row = _rows(wrong).set_index("strategy").loc[FAST]
    assert row["status"] == "mismatch" and "its timing is not published" in row["message"]


class ListWriter:
    """What run_sweep writes to, kept in memory, with a meta it may record into."""

    def __init__(self):
        self.rows, self.samples, self.sizes, self.meta = [], {}, {}, {}

    def begin_case(self, record):
        pass

    def update_meta(self, **fields):
        self.meta.update(fields)

    def append(self, row, samples_s, round_sizes=None):
        self.rows.append(row)
        self.samples[row["case_id"]], self.sizes[row["case_id"]] = samples_s, round_sizes


@pytest.mark.slow
def test_a_sweep_times_each_point_in_rounds_and_records_its_order_seed():
    """The real path of `run`, `bench()` and `regress`: every timed row has
    its three rounds' medians, its samples their round sizes, and the run's
    metadata the seed its orders were drawn from."""
    config = parse_config({"timing": {"min_samples": 6, "budget_s": 0.03, "warmup_s": 0.003, "max_rounds": 3},
                           "threads": 1, "benchmarks": [{"op": "maxpool2d", "params": POOL,
                                                         "strategies": [FAST, SLOW, "seed_reshape_max"]}]})
    writer = ListWriter()
    rows = sweep.run_sweep(expand(config), config, writer, "rounds", {"cpu": 10.0})
    assert isinstance(writer.meta["round_order_seed"], int) and writer.meta["rounds"] == 3
    for row in rows:
        assert row["status"] == OK, row["message"]
        medians = json.loads(row["round_medians_s"])
        assert 2 <= len(medians) <= 3 and len(writer.sizes[row["case_id"]]) == len(medians)
        assert sum(writer.sizes[row["case_id"]]) == row["n_samples"] == len(writer.samples[row["case_id"]])
        assert row["decision"] in ("faster", "equivalent", "undecided", "slower")
        assert row["host_s"] == row["median_s"]  # on the host clock, the call itself over all rounds
