"""The sweep in the training modes (docs/SPEC.md §1.5, issue 32): every row says its
mode, a strategy with no backward is skipped with its reason, the backward
is checked against the gradient oracle, timed and judged again after timing,
and its bytes are the mode's."""

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from rich.console import Console

from harness.base.config import Case, expand, parse_config
from harness.measuring import check, sweep
from harness.results import stats
from impls import maxpool2d, training
from impls.backends import itemsize
from impls.registry import get_operator
from tests.helpers import FAST_TIMING, ONE_THREAD

MODES = ["forward", "backward", "forward+backward"]
POOL = {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}
POOL_PARAMS = tuple(sorted(POOL.items()))
FRESH_WRITE = {"malloc": 5.0}  # any measured fresh-write bandwidth: the forward rows get a fresh floor


class ListWriter:
    """What run_sweep writes to, kept in memory."""

    meta = {"fresh_write_gbps": FRESH_WRITE}

    def __init__(self):
        self.rows, self.samples = [], {}

    def begin_case(self, record):
        pass

    def append(self, row, samples_s, round_sizes=None):
        self.rows.append(row)
        self.samples[row["case_id"]] = samples_s


def modes_config(**timing):
    return parse_config({
        "timing": {**FAST_TIMING, **timing}, "threads": ONE_THREAD,
        "benchmarks": [
            {"op": "maxpool2d", "strategies": ["torch_max_pool2d_indices", "numba_fused", "seed_reshape_max"],
             "params": POOL, "modes": MODES},
            {"op": "dispersion", "strategies": ["torch_fold", "numba_fused"],
             "params": {"B": 1, "C": 4, "H": 8, "W": 8, "S": 2}, "modes": MODES}]})


@pytest.fixture(scope="module")
def swept():
    config = modes_config()
    cases = expand(config)
    writer = ListWriter()
    rows = sweep.run_sweep(cases, config, writer, "modes-test", {"cpu": 10.0})
    return cases, rows, writer


def test_every_row_says_its_mode_and_each_mode_is_its_own_case(swept):
    cases, rows, _ = swept
    assert [row["mode"] for row in rows] == [case.mode for case in cases]
    assert sorted({row["mode"] for row in rows}) == sorted(MODES)
    ids = [row["case_id"] for row in rows]
    assert len(set(ids)) == len(ids) == 15
    for row in rows:
        forward_id = row["case_id"].removesuffix(f"|{row['mode']}")
        assert (forward_id == row["case_id"]) == (row["mode"] == "forward")


def test_training_rows_are_checked_and_timed(swept):
    _, rows, writer = swept
    for row in rows:
        if row["strategy"] == "seed_reshape_max":
            continue
        assert row["status"] == "ok", (row["case_id"], row["message"])
        # SPEC 3 "Racing": every strategy runs two rounds at least, a call a round at least; the race
        # ends when its leader has spent its budget, with at least 5 samples. One still undecided
        # then keeps the rounds it ran (under load, a slow call can spend the leader's budget by the
        # second round: the others are undecided with two samples).
        count = len(writer.samples[row["case_id"]])
        assert row["median_s"] > 0 and count >= 2, (row["case_id"], row["decision"], count)
        assert math.isfinite(row["pct_of_ceiling"])
    timed = [row for row in rows if row["strategy"] != "seed_reshape_max"]
    for group in {(row["op"], row["params"], row["mode"]) for row in timed}:
        members = [row for row in timed if (row["op"], row["params"], row["mode"]) == group]
        counts = [len(writer.samples[row["case_id"]]) for row in members]
        # the leader raced to the end, unless the point was answered "equivalent" (SPEC 3: an
        # answer, and those strategies leave the race together, each with the rounds it ran)
        assert max(counts) >= 5 or any(row["decision"] == "equivalent" for row in members), \
            (group, counts, [row["decision"] for row in members])


def test_a_strategy_with_no_backward_is_skipped_with_its_reason_in_training_modes_only(swept):
    _, rows, writer = swept
    strat = get_operator("maxpool2d").strategies["seed_reshape_max"]
    reason = training.missing(strat, POOL)
    assert reason
    by_mode = {row["mode"]: row for row in rows if row["strategy"] == "seed_reshape_max"}
    assert by_mode["forward"]["status"] == "ok" and by_mode["forward"]["median_s"] > 0
    for mode in training.TRAINING_MODES:
        assert by_mode[mode]["status"] == "skipped"
        assert by_mode[mode]["message"] == reason
        assert writer.samples[by_mode[mode]["case_id"]] == []


def test_bytes_and_the_fresh_floor_are_the_modes(swept):
    """Each mode's bytes, and its fresh-output floor: what the timed call
    writes afresh is the forward's outputs, the gradient, or both."""
    _, rows, _ = swept
    for row in rows:
        op = get_operator(row["op"])
        params = json.loads(row["params"])
        returns = op.strategies[row["strategy"]].returns
        expected = training.bytes_moved(op, params, itemsize("float32"), row["mode"], returns)
        assert row["bytes"] == expected, row["case_id"]
        assert row["floor_s"] == pytest.approx(expected / 10.0e9)
        if row["status"] != "ok":
            continue
        written = training.bytes_written(op, params, itemsize("float32"), row["mode"], returns)
        gradient = op.gradient.bytes_written(params, itemsize("float32"))
        assert written == {"forward": op.bytes_written(params, 4, returns), "backward": gradient,
                           "forward+backward": op.bytes_written(params, 4, op.whole_output) + gradient}[row["mode"]]
        assert 0 < written < expected
        assert row["fresh_floor_s"] == pytest.approx(stats.fresh_floor_s(expected, written, 10.0, 5.0))
        assert row["pct_of_fresh_floor"] == pytest.approx(100 * row["fresh_floor_s"] / row["median_s"])
    forward_backward = {r["op"]: r["bytes"] for r in rows if r["mode"] == "forward+backward"}
    backward = {r["op"]: r["bytes"] for r in rows if r["mode"] == "backward"}
    assert all(forward_backward[op] > backward[op] for op in backward)


def test_the_grid_names_a_training_mode_in_its_title(swept):
    import pandas as pd

    from harness.presenting.tables import grid_tables

    tables = grid_tables(pd.DataFrame.from_records(swept[1]))
    titles = [str(table.title) for table in tables]
    assert titles == ["maxpool2d  cpu float32", "maxpool2d  cpu float32  backward",
                      "maxpool2d  cpu float32  forward+backward", "dispersion  cpu float32",
                      "dispersion  cpu float32  backward", "dispersion  cpu float32  forward+backward"]


def test_list_shows_how_each_strategy_differentiates():
    from harness.presenting.tables import strategies_table

    strategies = get_operator("maxpool2d").strategies
    table = strategies_table([strategies[name] for name in ("numba_fused", "seed_reshape_max",
                                                            "torch_max_pool2d_indices")], width=400)
    console = Console(width=400, record=True)
    console.print(table)
    text = console.export_text()
    assert "backward" in text.splitlines()[2]  # the header, under the title and the rule
    assert "explicit (numba_scatter_backward)" in text and "autograd" in text
    assert "none: it returns the values only" in text


# ------------------------------------------------------------ planted backwards
def _pool_prepare(inputs, params):
    return maxpool2d.numpy_sliding_window(inputs, params)


def _backward_wrong_after(calls: int, how: str):
    """maxpool2d's numpy backward, right for its first ``calls`` calls and
    then wrong: its gradient off by one (``answer``), or written into the
    incoming gradient (``grad``)."""
    def backward(inputs, params):
        right = maxpool2d.numpy_scatter_backward(inputs, params)
        made = []

        def call(saved, grad):
            made.append(1)
            grad_x = right(saved, grad)
            if len(made) > calls:
                if how == "answer":
                    grad_x = grad_x + 1
                else:
                    grad[(0,) * grad.ndim] = 99.0
            return grad_x
        return call
    return backward


def _case(name: str, mode: str) -> Case:
    return Case("maxpool2d", name, "cpu", "float32", POOL_PARAMS, mode)


@pytest.mark.parametrize("mode", training.TRAINING_MODES)
def test_a_wrong_backward_is_a_mismatch_in_its_training_modes_and_ok_in_forward(planted, mode):
    planted("maxpool2d", "wrong_backward", _pool_prepare, returns="values+indices", ties="first",
            backward=_backward_wrong_after(0, "answer"))
    config = modes_config()
    forward = sweep.execute_case(_case("wrong_backward", "forward"), config, "r", 10.0)
    assert forward.row["status"] == "ok", forward.row["message"]
    wrong = sweep.execute_case(_case("wrong_backward", mode), config, "r", 10.0)
    assert wrong.row["status"] == "mismatch" and wrong.samples_s == [] and "median_s" not in wrong.row
    assert wrong.row["mode"] == mode


@pytest.mark.parametrize("how,status,start", [
    ("answer", "unrepeatable", "call 1 matched the oracle, the last of its "),
    ("grad", "input-modified", "overwrote its input 'grad_values'")])
def test_a_backward_going_wrong_during_timing_publishes_no_time(planted, how, status, start):
    planted("maxpool2d", "late_wrong_backward", _pool_prepare, returns="values+indices", ties="first",
            backward=_backward_wrong_after(sweep.check.SWEEP_REPEAT_CALL + 1, how))
    assert get_operator("maxpool2d").gradient.name == "grad_values"
    result = sweep.execute_case(_case("late_wrong_backward", "backward"), modes_config(), "r", 10.0)
    assert result.row["status"] == status, result.row["message"]
    assert result.samples_s == [] and "median_s" not in result.row
    assert result.row["message"].startswith(start), result.row["message"]
    assert re.search(r"the last of its \d+ timed samples.*; its timing is not published$", result.row["message"])


def test_a_backward_wrong_from_its_second_call_publishes_no_time(planted):
    planted("maxpool2d", "wrong_from_call_2", _pool_prepare, returns="values+indices", ties="first",
            backward=_backward_wrong_after(1, "answer"))
    phases = []
    result = sweep.execute_case(_case("wrong_from_call_2", "backward"), modes_config(), "r", 10.0,
                                on_phase=phases.append)
    assert result.row["status"] == "unrepeatable", result.row["message"]
    assert result.row["message"].startswith("call 1 matched the oracle, the last of its ")
    assert result.samples_s == [] and "median_s" not in result.row
    assert "time" in phases and phases[-1] == "check"


def test_the_gradient_reference_comes_from_the_forwards_rounded_inputs():
    ref = sweep.reference("maxpool2d", POOL, "float32", "random", 0, "backward")
    forward = sweep.reference("maxpool2d", POOL, "float32", "random", 0)
    grad, expected = training.gradient_case("maxpool2d", forward.inputs, POOL, "random", 0, "float32")
    np.testing.assert_array_equal(ref.grad, grad)
    np.testing.assert_array_equal(ref.expected_grad, expected)
    np.testing.assert_array_equal(ref.grad, ref.grad.astype(np.float32))  # float32's values


def test_an_isolated_case_runs_in_its_mode():
    result, _ = sweep.execute_isolated(_case("seed_reshape_max", "backward"), modes_config(), "r", 10.0)
    assert result.row["mode"] == "backward" and result.row["status"] == "skipped"
    assert result.row["case_id"].endswith("|backward")
    result, _ = sweep.execute_isolated(_case("numba_fused", "forward+backward"), modes_config(), "r", 10.0)
    assert result.row["mode"] == "forward+backward" and result.row["status"] == "ok", result.row["message"]
    assert result.row["median_s"] > 0


@pytest.mark.slow  # measures (or reuses) the copy ceiling
def test_bench_takes_a_mode_as_the_config_does():
    from harness.api import bench

    result = bench("maxpool2d", ["numba_fused", "seed_reshape_max"], mode=["forward", "backward"], plot=False,
                   timing=FAST_TIMING, threads=ONE_THREAD, **POOL)
    rows = result.rows.set_index(["strategy", "mode"])
    assert set(rows.index) == {(name, mode) for name in ("numba_fused", "seed_reshape_max")
                               for mode in ("forward", "backward")}
    assert rows.loc[("numba_fused", "backward"), "status"] == "ok"
    assert rows.loc[("seed_reshape_max", "backward"), "status"] == "skipped"
    assert rows.loc[("seed_reshape_max", "forward"), "status"] == "ok"
    only = bench("maxpool2d", ["numba_fused"], mode="backward", plot=False, timing=FAST_TIMING,
                 threads=ONE_THREAD, **POOL)
    assert list(only.rows["mode"]) == ["backward"]


def test_the_modes_of_one_case_share_one_forward_oracle_and_one_gradient_oracle(monkeypatch):
    """At a real network's size the float64 oracle takes seconds: a sweep in
    three modes computes it once per case, not once per mode, and the gradient
    oracle once for backward and forward+backward."""
    op = get_operator("maxpool2d")
    calls = {"oracle": 0, "grad": 0}

    def counted(name, function):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return function(*args, **kwargs)
        return wrapper

    # the Gradient first: declaring one runs the forward oracle once to check it (registry.check_gradient)
    monkeypatch.setattr(op, "gradient", dataclasses.replace(op.gradient, oracle=counted("grad", op.gradient.oracle)))
    monkeypatch.setattr(op, "oracle", counted("oracle", op.oracle))
    config = parse_config({"timing": FAST_TIMING, "threads": ONE_THREAD,
                           "benchmarks": [{"op": "maxpool2d", "strategies": ["torch_max_pool2d_indices"],
                                           "params": POOL, "modes": MODES}]})
    passed = check.AdversarialCheck(config.seed, config.timing.timeout_s)  # its oracles are not counted here
    for mode in MODES:
        passed.remember(op.strategies["torch_max_pool2d_indices"], "cpu", "float32", None, mode=mode)
    rows = sweep.run_sweep(expand(config), config, ListWriter(), "oracle-once", {"cpu": 10.0},
                           adversarial=passed)
    assert [row["mode"] for row in rows] == MODES and all(row["status"] == "ok" for row in rows), rows
    assert calls == {"oracle": 1, "grad": 1}


def test_a_reused_reference_is_the_one_computed_afresh():
    from harness.measuring.check import reference

    forward = reference("maxpool2d", POOL, "float16", "random", 3)
    for mode in ("backward", "forward+backward"):
        fresh = reference("maxpool2d", POOL, "float16", "random", 3, mode)
        reused = reference("maxpool2d", POOL, "float16", "random", 3, mode, reuse=forward)
        assert reused.training == fresh.training == mode
        np.testing.assert_array_equal(reused.grad, fresh.grad)
        np.testing.assert_array_equal(reused.expected_grad, fresh.expected_grad)
        for got, want in zip(reused.expected, fresh.expected):
            np.testing.assert_array_equal(got, want)
    back = reference("maxpool2d", POOL, "float16", "random", 3, "forward", reuse=fresh)
    assert back.training == "forward" and back.grad is None and back.expected_grad is None
    with pytest.raises(ValueError, match="reuse"):
        reference("maxpool2d", dict(POOL, N=2), "float16", "random", 3, "backward", reuse=forward)
