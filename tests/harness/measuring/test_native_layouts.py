"""Each strategy's native layouts (docs/SPEC.md §2, issue 50): a strategy takes the case layouts it
declares (``native_layouts``) as they are; in any other it is handed contiguous copies, and its timed
call starts by copying the case's arrays into them, so the conversion a user of that layout pays is
timed. Checked on the 2-D unpool, whose row strategies reshape in prepare and take contiguous rows
only, beside ``F.max_unpool2d``, which takes channels-last natively."""

from dataclasses import replace

import numpy as np
import pytest

from harness.measuring import check
from impls.registry import NotApplicable, get_operator, strategy
from impls.status import INPUT_MODIFIED, OK

UNPOOL = {"form": "2d", "N": 2, "C": 3, "H": 8, "W": 8, "k": 2}
OP = get_operator("maxunpool")


def _channels_last(array) -> bool:
    """(N, C, H, W) held N, H, W, C in memory, a torch tensor or a numpy array."""
    if hasattr(array, "is_contiguous"):
        import torch

        return array.is_contiguous(memory_format=torch.channels_last) and not array.is_contiguous()
    return array.strides[1] == array.itemsize and not array.flags.c_contiguous


def _contiguous(array) -> bool:
    return array.is_contiguous() if hasattr(array, "is_contiguous") else array.flags.c_contiguous


@pytest.mark.parametrize("name", ["torch_scatter", "numpy_put_along_axis", "numpy_seed_flat_set"])
@pytest.mark.parametrize("training", ["forward", "forward+backward"])
def test_a_strategy_is_handed_its_own_layout_and_converts_inside_its_call(name, training):
    """A row strategy in a channels-last case is prepared on contiguous copies, its call reads the
    case's own arrays (a change to them shows in the next call's output, so the copy is in the
    call), and its output is judged by value."""
    strat = OP.strategies[name]
    assert strat.native_layouts == ("contiguous",) and strat.handed_layout("channels_last") == "contiguous"
    ref = check.reference("maxunpool", UNPOOL, "float32", "random", 0, training)
    prepared = check.prepare_case(strat, ref, UNPOOL, "float32", "cpu", "channels_last")
    for key in ("values", "positions"):
        assert _channels_last(prepared.inputs[key]), key  # the case's arrays
        assert _contiguous(prepared.inputs[f"{key} as handed (contiguous)"]), key  # what it was given
    if training != "forward":
        assert _channels_last(prepared.inputs["grad_out"])
        assert _contiguous(prepared.inputs["grad_out as handed (contiguous)"])
    assert check.judge(strat, prepared.run(), ref, "float32", "cpu", "channels_last").status == OK
    values = prepared.inputs["values"]
    before = check.to_numpy(prepared.run())
    values[...] = values * 2  # the case's array, never what the strategy was given
    after = check.to_numpy(prepared.run())
    forward_before, forward_after = (before, after) if training == "forward" else (before[0], after[0])
    np.testing.assert_array_equal(forward_after, forward_before * 2)


def test_a_strategy_that_takes_the_layout_is_handed_the_cases_arrays():
    """``F.max_unpool2d`` takes channels-last natively: no copy, no conversion in its call, and its
    positions stay channels-last (made contiguous only when strided, for its backward's view)."""
    import torch

    strat = OP.strategies["torch_max_unpool2d"]
    assert strat.handed_layout("channels_last") == "channels_last"
    ref = check.reference("maxunpool", UNPOOL, "float32", "random", 0, "forward+backward")
    prepared = check.prepare_case(strat, ref, UNPOOL, "float32", "cpu", "channels_last")
    assert not any("as handed" in key for key in prepared.inputs)
    output, _ = prepared.run()
    assert output.is_contiguous(memory_format=torch.channels_last)
    assert check.judge(strat, prepared.run(), ref, "float32", "cpu", "channels_last").status == OK


def test_the_backward_converts_its_incoming_gradient_in_its_call():
    """In backward, the timed call is the backward alone: it converts the incoming gradient, the
    forward's inputs having been read once, making what it replays."""
    strat = OP.strategies["torch_scatter"]
    ref = check.reference("maxunpool", UNPOOL, "float32", "random", 0, "backward")
    prepared = check.prepare_case(strat, ref, UNPOOL, "float32", "cpu", "channels_last")
    grad = prepared.inputs["grad_out"]
    before = check.to_numpy(prepared.run())
    grad[...] = grad * 2
    np.testing.assert_array_equal(check.to_numpy(prepared.run()), before * 2)


def test_a_write_into_what_it_was_handed_is_caught():
    """The call's copy would restore what a strategy overwrote before the next call: what it was
    handed is watched as its inputs are, and named."""
    honest = OP.strategies["numpy_put_along_axis"]

    def overwrites(inputs, params):
        run = honest.prepare(inputs, params)

        def call():
            output = run()
            inputs["values"][0, 0, 0, 0] += 1
            return output

        return call

    strat = replace(honest, name="overwrites_what_it_was_handed", prepare=overwrites)
    ref = check.reference("maxunpool", UNPOOL, "float32", "random", 0)
    verdict = check.attempt(strat, ref, "float32", "cpu", "channels_last").verdict
    assert verdict.status == INPUT_MODIFIED
    assert "overwrote its input 'values as handed (contiguous)'" in verdict.message


@pytest.mark.parametrize("declared, message", [
    (("channels_last",), "must name contiguous"),
    (("contiguous", "nhwc"), "only case layouts"),
    (("contiguous", "noncontiguous"), "only case layouts"),
])
def test_a_declaration_outside_the_case_layouts_is_one_line(declared, message):
    with pytest.raises(ValueError, match=rf"strategy maxunpool/badly_declared: native_layouts=.*{message}"):
        strategy("maxunpool", backend="numpy", name="badly_declared", native_layouts=declared)(lambda i, p: None)
    assert "badly_declared" not in OP.strategies


def test_every_maxunpool_strategy_reads_the_cases_arrays_in_its_call():
    """Whatever it declares, no strategy converts a channels-last case outside its timed call: a
    change to the case's values shows in its next call's output. A strategy that reshaped the
    case's arrays in prepare (a copy, for channels-last) while declaring that layout native would
    keep its own copy and fail here."""
    ref = check.reference("maxunpool", UNPOOL, "float32", "random", 0)
    tried = []
    for name, strat in OP.strategies.items():
        if not strat.runs_on("cpu") or check.layout_skipped(strat, "channels_last"):
            continue
        try:
            prepared = check.prepare_case(strat, ref, UNPOOL, "float32", "cpu", "channels_last")
        except NotApplicable:  # by design (max_unpool1d takes the 1-D form)
            continue
        before = check.to_numpy(prepared.run())
        values = prepared.inputs["values"]
        values[...] = values * 2
        np.testing.assert_array_equal(check.to_numpy(prepared.run()), before * 2, err_msg=name)
        tried.append(name)
    assert {"numba_fused", "torch_max_unpool2d", "torch_scatter", "numpy_seed_row_loop"} <= set(tried), tried


def test_numba_fused_unpools_a_channels_last_case_as_it_is_held():
    """The numba kernel takes channels-last natively (``kernels_numba.maxunpool_nhwc``): handed the
    case's arrays, no copy, a channels-last output and gradient, right on positions far from their
    window (its second pass) and on a gradient held contiguous (converted in its call)."""
    strat = OP.strategies["numba_fused"]
    assert strat.handed_layout("channels_last") == "channels_last"
    for mode in ("random", "scattered"):
        ref = check.reference("maxunpool", UNPOOL, "float32", mode, 0, "forward+backward")
        prepared = check.prepare_case(strat, ref, UNPOOL, "float32", "cpu", "channels_last")
        assert not any("as handed" in key for key in prepared.inputs)
        output, grad_values = prepared.run()
        assert _channels_last(output) and _channels_last(grad_values)
        assert check.judge(strat, (output, grad_values), ref, "float32", "cpu", "channels_last").status == OK, mode
    inputs = {key: prepared.inputs[key] for key in ("values", "positions")}
    grad = np.ascontiguousarray(prepared.inputs["grad_out"])
    expected = OP.gradient.oracle(inputs, grad, UNPOOL)
    np.testing.assert_array_equal(strat.backward(inputs, UNPOOL)(None, grad), expected)
