"""SPEC 3 "Rounds": the strategies of one point sampled in rounds, a fresh
random order and a fresh prepare each round, the budget split across them.

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
THIRTY = Timing(min_samples=30, max_samples=30, budget_s=1e-9, warmup_s=0, rounds=3)


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
    blocks = [pending_case(FAST, THIRTY), pending_case(SLOW, THIRTY)]
    sweep.time_in_rounds(blocks, 1, THIRTY, InOrder())
    block_rows = _rows(blocks)
    assert analysis.answer(block_rows).best["strategy"] == SLOW  # flipped by the slow third
    assert block_rows.set_index("strategy").loc[FAST, "median_s"] == pytest.approx(3e-3)

    machine(costs, slow_calls=20)
    rounds = [pending_case(FAST, THIRTY), pending_case(SLOW, THIRTY)]
    sweep.time_in_rounds(rounds, 3, THIRTY, np.random.default_rng(7))
    round_rows = _rows(rounds)
    found = analysis.answer(round_rows)
    assert found.best["strategy"] == FAST and found.clear and found.basis == analysis.ROUNDS_RULE
    by_name = round_rows.set_index("strategy")
    assert analysis.round_ratios(by_name.loc[FAST], by_name.loc[SLOW]) == pytest.approx([1.2] * 3)
    assert by_name.loc[FAST, "n_samples"] == 30  # the same samples as the block, split in three


def test_rounds_interleave_in_fresh_random_orders_and_prepare_afresh_each_round(machine):
    names = [FAST, SLOW, "seed_reshape_max", "torch_reshape_argmax"]
    fake = machine({name: 1e-3 * (index + 1) for index, name in enumerate(names)})
    config = Timing(min_samples=6, max_samples=6, budget_s=1e-9, warmup_s=0, rounds=3)
    pending = [pending_case(name, config) for name in names]
    started = []
    orders = sweep.time_in_rounds(pending, 3, config, np.random.default_rng(11), before=lambda c: started.append(c))
    assert [sorted(order) for order in orders] == [[0, 1, 2, 3]] * 3
    assert len({tuple(order) for order in orders}) > 1  # not one order for every round
    assert fake.prepares == {name: 3 for name in names}  # a fresh prepare each round
    # Each round's calls come in its order, two samples per strategy (6 split in three).
    expected = [names[position] for order in orders for position in order for _ in range(2)]
    assert fake.calls == expected
    assert [case.strategy for case in started] == [names[p] for order in orders for p in order]
    rows = _rows(pending)
    assert all(len(json.loads(text)) == 3 for text in rows["round_medians_s"])
    # Reproducible: the same seed and point draw the same orders.
    group = pending[0].case.group
    first = [list(sweep.round_order(5, group).permutation(4)) for _ in range(1)]
    assert first == [list(sweep.round_order(5, group).permutation(4))]


def test_the_round_share_keeps_the_case_budget():
    share = timing.round_share(Timing(min_samples=5, max_samples=2000, budget_s=0.5, warmup_s=0.05), 3)
    assert share.budget_s * 3 == pytest.approx(0.5) and share.warmup_s * 3 == pytest.approx(0.05)
    assert share.min_samples == 2 and share.max_samples == 667  # a median per round
    counts = [timing.round_share(Timing(min_samples=5, max_samples=2000, budget_s=0.5, warmup_s=0.05), 3, i)
              for i in range(3)]
    assert [c.min_samples for c in counts] == [2, 2, 1]  # exactly 5 in all: a slow case makes no extra call


def test_a_failure_in_a_later_round_ends_the_case_with_its_status(machine, monkeypatch):
    """A strategy whose second prepare raises is recorded with that error, not timed from round 1 alone."""
    fake = machine({FAST: 1e-3, SLOW: 1e-3})
    real_prepare = fake.prepare

    def flaky(strat, *args, **kwargs):
        if strat.name == SLOW and fake.prepares.get(SLOW, 0) >= 1:
            raise RuntimeError("deliberate failure on a fresh prepare")
        return real_prepare(strat, *args, **kwargs)

    monkeypatch.setattr(check, "prepare_case", flaky)
    config = Timing(min_samples=6, max_samples=6, budget_s=1e-9, warmup_s=0, rounds=3)
    pending = [pending_case(FAST, config), pending_case(SLOW, config)]
    sweep.time_in_rounds(pending, 3, config, np.random.default_rng(0))
    rows = _rows(pending).set_index("strategy")
    assert rows.loc[SLOW, "status"] == "error" and "deliberate failure" in rows.loc[SLOW, "message"]
    assert rows.loc[FAST, "status"] == OK and len(json.loads(rows.loc[FAST, "round_medians_s"])) == 3


def test_a_case_slower_than_its_budget_makes_its_minimum_calls_and_the_last_is_judged(machine, monkeypatch):
    """Rounds deal out the 5 samples (2, 2, 1): a 4-second seed costs 5 timed
    calls, not 6, and no sixth call to judge: the judge gets the last timed
    call's own output, and the inputs are copied only for that round."""
    fake = machine({SLOW: 4.0})
    judged, watched = [], []
    monkeypatch.setattr(check, "judge_again", lambda strat, prepared, ref, dtype, device, layout, first, **kwargs:
                        judged.append(kwargs) or first)
    real_prepare = fake.prepare
    monkeypatch.setattr(check, "prepare_case", lambda *args, **kwargs: watched.append(kwargs["watch_inputs"])
                        or real_prepare(*args, **kwargs))
    config = Timing(min_samples=5, max_samples=2000, budget_s=0.5, warmup_s=0, rounds=3)
    pending = [pending_case(SLOW, config)]
    sweep.time_in_rounds(pending, 3, config, np.random.default_rng(0))
    assert fake.calls == [SLOW] * 5
    assert [len(timed.samples_s) for timed in pending[0].rounds] == [2, 2, 1]
    assert len(judged) == 1 and judged[0]["calls"] == 0 and judged[0]["output"] == (SLOW, 5)
    assert "the last of its 5 timed samples" in judged[0]["which"]
    assert watched == [False, False, True]
    assert _rows(pending).loc[0, "n_samples"] == 5


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
    config = parse_config({"timing": {"min_samples": 6, "budget_s": 0.03, "warmup_s": 0.003, "rounds": 3},
                           "threads": 1, "benchmarks": [{"op": "maxpool2d", "params": POOL,
                                                         "strategies": [FAST, SLOW, "seed_reshape_max"]}]})
    writer = ListWriter()
    rows = sweep.run_sweep(expand(config), config, writer, "rounds", {"cpu": 10.0})
    assert isinstance(writer.meta["round_order_seed"], int) and writer.meta["rounds"] == 3
    for row in rows:
        assert row["status"] == OK, row["message"]
        medians = json.loads(row["round_medians_s"])
        assert len(medians) == 3 and len(writer.sizes[row["case_id"]]) == 3
        assert sum(writer.sizes[row["case_id"]]) == row["n_samples"] == len(writer.samples[row["case_id"]])
        assert row["n_samples"] >= 6
        assert row["host_s"] == row["median_s"]  # on the host clock, the call itself over all rounds
