"""The sweep in each memory layout (docs/SPEC.md §2, issue 50): a config's
``layouts:`` makes each layout its own case (its id, its group, its row), the
inputs reach every strategy in the case's layout (a strategy that works in
another converts inside its own timed call), a backend that cannot hold the
layout is skipped with its reason, and every call is judged by value."""

import json

import pytest

from harness.base.cases import CASE_GROUP
from harness.base.config import ConfigError, expand, parse_config
from harness.measuring import check, sweep
from impls.registry import get_operator
from tests.harness.measuring.test_sweep_modes import ListWriter
from tests.helpers import FAST_TIMING, ONE_THREAD

LAYOUTS = ["contiguous", "channels_last"]
POOL = {"N": 2, "C": 3, "H": 8, "W": 8, "k": 2}
STRATEGIES = ["torch_max_pool2d_indices", "numba_fused", "seed_reshape_argmax", "jax_reduce_window"]


def layouts_config(layouts=LAYOUTS, modes=("forward",), op="maxpool2d", params=POOL, strategies=STRATEGIES):
    return parse_config({"timing": FAST_TIMING, "threads": ONE_THREAD,
                         "benchmarks": [{"op": op, "strategies": list(strategies), "params": params,
                                         "modes": list(modes), "layouts": list(layouts)}]})


def test_each_layout_is_its_own_case_and_contiguous_ids_stay_as_they_were():
    cases = expand(layouts_config(modes=("forward", "backward")))
    contiguous = expand(layouts_config(layouts=["contiguous"], modes=("forward", "backward")))
    assert len(cases) == 2 * len(contiguous)
    assert [case for case in cases if case.layout == "contiguous"] == contiguous
    # the id a case had before layouts, then the layout where it is another
    assert {case.case_id for case in contiguous} == {case.case_id for case in cases if case.layout == "contiguous"}
    for case in cases:
        if case.layout == "channels_last":
            assert case.case_id.endswith("|channels_last") and case.case_id.count("|channels_last") == 1
    assert len({case.group for case in cases}) == 4 and "layout" in CASE_GROUP
    assert parse_config({"benchmarks": [{"op": "maxpool2d", "params": POOL}]}).benchmarks[0].layouts == ["contiguous"]


@pytest.mark.parametrize("bench, message", [
    ({"op": "maxpool2d", "params": POOL, "layouts": ["nhwc"]},
     r"benchmarks\[0\]\.layouts\[0\]: Input should be 'contiguous' or 'channels_last'"),
    ({"op": "maxpool2d", "params": POOL, "layouts": []}, r"benchmarks\[0\]\.layouts: List should have at least 1"),
    # y has one channel: channels-last would be the same memory under another name
    ({"op": "dispersion_pinv", "params": {"B": 1, "C": 4, "H": 8, "W": 8, "S": 2}, "layouts": LAYOUTS},
     r"benchmarks\[0\]\.layouts\[1\]: channels_last: it leaves every input of dispersion_pinv at these params in "
     r"the same memory order \(drop it\)"),
    # the 1-D unpool's rows are 3-D: channels-last is the 2-D form's
    ({"op": "maxunpool", "params": {"form": "1d", "B": 2, "F": 3, "L": 4, "f": 2}, "layouts": LAYOUTS},
     r"benchmarks\[0\]\.layouts\[1\]: channels_last: it leaves every input of maxunpool at these params in "
     r"the same memory order \(drop it\)"),
])
def test_a_layout_that_cannot_be_timed_is_one_line_naming_the_key(bench, message):
    with pytest.raises(ConfigError, match=message):
        parse_config({"benchmarks": [bench]}, "layouts.yaml")


def test_what_is_not_checked_in_a_layout_is_not_timed_in_it(monkeypatch):
    monkeypatch.setattr(get_operator("maxunpool"), "check_layouts", ("contiguous", "noncontiguous"))
    bench = {"op": "maxunpool", "params": {"form": "2d", "N": 1, "C": 2, "H": 4, "W": 4, "k": 2}, "layouts": LAYOUTS}
    with pytest.raises(ConfigError, match=r"benchmarks\[0\]\.layouts\[1\]: channels_last: maxunpool is not checked "
                                          r"in channels_last, so it is not timed in it"):
        parse_config({"benchmarks": [bench]}, "layouts.yaml")
    monkeypatch.undo()
    assert parse_config({"benchmarks": [bench]}).benchmarks[0].layouts == LAYOUTS  # the 2-D unpool is


def test_a_point_where_the_layout_changes_nothing_is_timed_contiguous_only():
    config = parse_config({"benchmarks": [{"op": "maxpool2d", "strategies": ["torch_max_pool2d_indices"],
                                           "params": {"N": 1, "C": [1, 3], "H": 4, "W": 4, "k": 2},
                                           "layouts": LAYOUTS}]})
    found = {(case.params_dict["C"], case.layout) for case in expand(config)}
    assert found == {(1, "contiguous"), (3, "contiguous"), (3, "channels_last")}


@pytest.mark.parametrize("op_name", ["maxpool2d", "dispersion", "dispersion_pinv", "maxunpool"])
def test_the_check_and_the_sweep_decide_a_layout_by_one_rule(op_name):
    """Channels-last on a one-channel or one-pixel array is contiguous under another name: the
    check makes no item of it and the sweep times no case of it, and where it reorders an input
    both take it (``backends.layout_reorders``, one rule, on drawn arrays and declared shapes)."""
    op = get_operator(op_name)
    if op.layout_shapes is None or "channels_last" not in op.check_layouts:
        assert not op.layout_changes({}, "channels_last")
        return
    points = op.check_cases() + [dict(POOL, C=1), dict(POOL, H=1, W=1)] * (op_name == "maxpool2d")
    decided = {json.dumps(params, sort_keys=True): (check.layout_applies(op, params, "channels_last", "numpy"),
                                                    op.layout_changes(params, "channels_last"))
               for params in points}
    assert all(in_check == in_sweep for in_check, in_sweep in decided.values()), decided
    if op_name == "maxpool2d":
        assert decided[json.dumps(dict(POOL, C=1), sort_keys=True)] == (False, False)
        assert decided[json.dumps(POOL, sort_keys=True)] == (True, True)
    if op_name == "dispersion_pinv":  # its one-channel y: never an item, never a case
        assert not any(in_check for in_check, _ in decided.values())


@pytest.fixture(scope="module")
def swept():
    config = layouts_config(modes=("forward", "backward"))
    delivered = []
    prepare = check.prepare_case

    def watched(strat, ref, params, dtype, device, layout="contiguous", watch_inputs=True):
        prepared = prepare(strat, ref, params, dtype, device, layout, watch_inputs)
        if ref.mode == "random" and dict(params) == POOL:  # the sweep's case, not an adversarial check's
            delivered.append((strat.name, ref.training, layout, prepared.inputs["x"]))
        return prepared

    check.prepare_case = watched
    try:
        rows = sweep.run_sweep(expand(config), config, ListWriter(), "layouts-test", {"cpu": 10.0})
    finally:
        check.prepare_case = prepare
    return rows, delivered


def test_every_row_says_its_layout_and_is_checked_and_timed_in_it(swept):
    rows, _ = swept
    by_case = {(row["strategy"], row["mode"], row["layout"]): row for row in rows}
    assert len(by_case) == len(rows) == len(STRATEGIES) * 2 * 2
    for (name, mode, layout), row in by_case.items():
        if name == "jax_reduce_window" and (layout == "channels_last" or mode == "backward"):
            continue
        assert row["status"] == "ok", (name, mode, layout, row["message"])
        assert row["median_s"] > 0 and row["case_id"].endswith("|channels_last") == (layout == "channels_last")


def test_a_backend_that_cannot_hold_the_layout_is_skipped_with_its_reason(swept):
    rows, _ = swept
    jax = next(row for row in rows if row["strategy"] == "jax_reduce_window" and row["layout"] == "channels_last"
               and row["mode"] == "forward")
    assert jax["status"] == "skipped" and jax["message"].startswith("not for this layout: jax arrays cannot be held "
                                                                    "channels_last")
    assert check.layout_skipped(get_operator("maxpool2d").strategies["torch_max_pool2d_indices"],
                                "channels_last") is None


def test_the_inputs_reach_each_strategy_in_the_cases_layout(swept):
    """Every prepare of a channels-last case, the check's and each round's,
    hands the strategy x held N, H, W, C in memory; a strategy written for
    contiguous x (the seed's reshape) gets it so too, and its conversion is
    inside its own call, so inside its timed samples."""
    import torch

    _, delivered = swept
    seen = {(name, training, layout) for name, training, layout, _ in delivered}
    for name in ("torch_max_pool2d_indices", "numba_fused", "seed_reshape_argmax"):
        assert {(name, "forward", "channels_last"), (name, "forward", "contiguous")} <= seen
    for name, _training, layout, x in delivered:
        if isinstance(x, torch.Tensor):
            assert x.is_contiguous(memory_format=torch.channels_last) == (layout == "channels_last")
            assert x.is_contiguous() == (layout == "contiguous")
        elif name == "jax_reduce_window":  # no strides: contiguous cases only (its channels-last one is skipped)
            assert layout == "contiguous"
        else:  # numpy's and numba's: (N, C, H, W) with N, H, W, C strides
            assert (x.strides[1] == x.itemsize) == (layout == "channels_last"), name
            assert x.flags.c_contiguous == (layout == "contiguous"), name


def test_check_checks_each_config_point_in_its_layout():
    """`scatterbench check` of a config checks its points as the sweep times them: each layout's, in
    that layout, and none for a case the sweep skips (JAX channels-last)."""
    point = {"N": 1, "C": 5, "H": 6, "W": 6, "k": 2}  # no adversarial case's size
    config = layouts_config(params=point)
    points = [item for item in check.check_plan(config, expand(config)) if dict(item.params) == point]
    found = {(item.strategy.name, item.layout) for item in points}
    assert found == {(name, layout) for name in STRATEGIES for layout in LAYOUTS} - {
        ("jax_reduce_window", "channels_last")}
    assert len(points) == len(set(points)) == 2 * len(found)  # random and adversarial inputs, once each
    assert {item.label.split()[0] for item in points} == {"random/contiguous", "random/channels_last",
                                                          "adversarial/contiguous", "adversarial/channels_last"}
