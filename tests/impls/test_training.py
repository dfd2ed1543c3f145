"""Training modes (docs/SPEC.md §1.5, impls/training.py): every strategy with a
backward, in ``backward`` and ``forward+backward``, against the float64
oracle of the backward on each operator's adversarial set (ties, NaN and
all -inf windows, cropped rows and columns, unpool's scattered positions;
for the index operators, incoming gradients holding -0.0, subnormals, ±inf,
NaN and the largest finite values; strided, channels-last and transposed
gradients and saved positions), repeatably; a backward that flushes
subnormal gradients or misreads transposed positions is caught, and JAX's
max-pool backward, which flushes, is reported as its listed upstream
defect; a strategy whose
backward sends a tie's gradient to the last maximum is caught while its
forward passes; autograd agrees with the oracle's Jacobian (gradcheck); and
a thousand autograd replays keep memory flat."""

import dataclasses
import math
import os
import subprocess
import sys
import weakref

import numpy as np
import pytest

import impls
from harness.measuring import check
from harness.measuring.check import MODES as INPUT_MODES
from harness.measuring.check import adversarial_set, cached_reference, extra_set, known_defect
from impls import common, maxpool2d, training
from impls.backends import NotApplicable
from impls.registry import OPERATORS, Gradient, Operator, ParamSpec, get_operator, strategy
from tests.helpers import ROOT, strategy_dtype_params

HALF = ("float16", "bfloat16")
OPS = ("maxpool2d", "maxunpool", "dispersion", "dispersion_pinv")


def run_case(strat, params, dtype, input_mode, layout, mode, seed=0):
    """``strat`` prepared in ``mode`` on a case's inputs and gradient, called
    once: (verdict, the timed call, the float64 expected gradient)."""
    op = get_operator(strat.op)
    ref = cached_reference(strat.op, params, dtype, input_mode, seed)
    grad, expected_grad = training.gradient_case(op, ref.inputs, params, input_mode, seed, dtype)
    inputs = training.inputs_to_backend(op, ref.inputs, strat.backend, "cpu", dtype, layout)
    native_grad = training.gradient_to_backend(op, grad, strat.backend, "cpu", dtype, layout)
    call = training.prepare(strat, inputs, native_grad, params, mode, layout)
    verdict = training.compare(strat, call(), ref.expected, expected_grad, ref.inputs, grad, dtype, params, mode)
    # A listed upstream defect (numpy's max and -0.0; JAX's max-pool backward and subnormals) excuses its own kinds.
    verdict = known_defect(strat, verdict, device="cpu", dtype=dtype, layout=layout, mode=input_mode,
                           training_mode=mode)
    return verdict, call


def acceptable(strat, dtype, status):
    """ok, a listed upstream defect, or, in a half type, inexact for a
    backward that sums in its framework's accumulator (autograd, jax.vjp:
    torch's unfold backward sums 300 channels in bfloat16) or the seed's own
    code (docs/SPEC.md §2: it may sum in that type, and is reported for it)."""
    if status in ("ok", "upstream-defect"):
        return True
    framework = strat.differentiation in ("autograd", "jax.vjp")
    return status == "inexact" and dtype in HALF and (framework or strat.seed)


# torch.compile: each case, layout and mode is a compile of a forward and a backward graph (~25 s here).
CASES = strategy_dtype_params([strat for strat in impls.all_strategies(device="cpu")
                               if strat.op in OPS and not training.missing(strat)])


@pytest.mark.parametrize("strat,dtype", CASES)
def test_backward_matches_the_oracle_and_repeats(strat, dtype):
    if strat.available():
        pytest.skip(strat.available())
    if strat.op == "maxpool2d" and strat.interpreted_on("cpu") and dtype == "bfloat16":
        # The forward's known defect (impls/defects.py): the interpreter converts bfloat16
        # subnormals wrongly, so the forward's indices, and the backward's scatter to them, are
        # wrong under it; the check reports that forward as upstream-defect. A GPU checks the kernel.
        pytest.skip("triton-interpreter-bf16-subnormal: the Triton interpreter's bfloat16 subnormals")
    op = get_operator(strat.op)
    check_cases, layouts = adversarial_set(op, strat)
    input_modes = INPUT_MODES
    if strat.quick_check:  # compiled per shape: the first case, adversarial, contiguous and strided
        check_cases, input_modes = check_cases[:1], ("adversarial",)
    work = [(params, dtype, input_mode, layout, True) for params in check_cases for input_mode in input_modes
            for layout in layouts]
    # The gradient and the saved positions transposed (SPEC 1.5), hostile values.
    work += [(params, dtype, "adversarial", training.TRANSPOSED, True) for params in check_cases
             if training.transposed_applies(op, params, strat.backend)]
    # The extra checks (the half types' sums of 300 channels) are big: judged in backward
    # only (forward+backward adds the forward, which test_strategies judges), not replayed.
    work += [extra + (False,) for extra in extra_set(op, strat, dtype) if extra[1] == dtype]
    failures, ran = [], 0
    for params, this_dtype, input_mode, layout, small in work:
        for mode in training.TRAINING_MODES if small else (training.BACKWARD,):
            try:
                verdict, call = run_case(strat, params, this_dtype, input_mode, layout, mode)
            except NotApplicable:
                continue
            ran += 1
            where = f"{params} {this_dtype} {input_mode}/{layout} {mode}"
            if not acceptable(strat, this_dtype, verdict.status):
                failures.append(f"{where}: {verdict.status}: {verdict.message}")
            if mode == training.BACKWARD and small:
                # Replays: the same gradient every call, each a fresh array.
                results = [call() for _ in range(3)]
                first = common.to_numpy(results[0])
                for again in results[1:]:
                    assert again is not results[0], f"{where}: a call returned the previous call's array"
                    np.testing.assert_array_equal(common.to_numpy(again), first, err_msg=where)
    assert ran, "every case was skipped"
    assert not failures, "\n".join(failures[:5])


# ------------------------------------------------------------------ oracles
def test_maxpool_backward_oracle_hand_worked():
    nan, inf = np.nan, np.inf
    x = np.array([[2, 2, 1, 5, 9],
                  [0, 2, 5, 1, 9],
                  [nan, 1, -inf, -inf, 9],
                  [4, nan, -inf, -inf, 9],
                  [9, 9, 9, 9, 9]])[None, None]
    grad = np.array([[[[10, 20], [30, 40]]]], dtype=float)
    grad_x = maxpool2d.grad_oracle({"x": x}, grad, {"k": 2})
    expected = np.zeros((5, 5))
    expected[0, 0] = 10  # the tie 2, 2 / 2: the first maximum
    expected[0, 3] = 20  # 5 and 5: the first in row-major order
    expected[2, 0] = 30  # the NaN window: the forward's index, its first NaN
    expected[2, 2] = 40  # all -inf: its first element
    np.testing.assert_array_equal(grad_x[0, 0], expected)  # the last row and column (cropped) stay 0


def test_unpool_and_dispersion_backward_oracles_hand_worked():
    unpool = get_operator("maxunpool").gradient
    grad_out = np.arange(12.0).reshape(1, 2, 6)
    positions = np.array([[[5, 0, 3], [1, 2, 4]]])
    got = unpool.oracle({"values": np.zeros((1, 2, 3)), "positions": positions}, grad_out,
                        dict(form="1d", B=1, F=2, L=3, f=2))
    np.testing.assert_array_equal(got, [[[5, 0, 3], [7, 8, 10]]])
    # The seed's toy: C=3, W=3, S=1, mask 1; channel i reads y at w + i.
    dispersion = get_operator("dispersion").gradient
    grad_y = np.array([1.0, 3, 6, 5, 3]).reshape(1, 1, 1, 5)
    got = dispersion.oracle({"x": np.zeros((1, 3, 1, 3)), "mask": np.ones((1, 3))}, grad_y,
                            dict(B=1, C=3, H=1, W=3, S=1))
    np.testing.assert_array_equal(got[0, :, 0], [[1, 3, 6], [3, 6, 5], [6, 5, 3]])
    # pinv's adjoint: alpha = [1, 2, 3, 2, 1] divides each column's sum; S > W leaves a column at 0.
    pinv = get_operator("dispersion_pinv").gradient
    got = pinv.oracle({"y": np.zeros((1, 1, 1, 5)), "mask": np.ones((1, 3))}, np.ones((1, 3, 1, 3)),
                      dict(B=1, C=3, H=1, W=3, S=1))
    np.testing.assert_allclose(got[0, 0, 0], [1, 1, 1, 1, 1])
    got = pinv.oracle({"y": np.zeros((1, 1, 1, 7)), "mask": np.ones((1, 2))}, np.ones((1, 2, 1, 2)),
                      dict(B=1, C=2, H=1, W=2, S=5))
    np.testing.assert_array_equal(got[0, 0, 0], [1, 1, 0, 0, 0, 1, 1])


ADJOINT_CASES = [pytest.param(name, params, id=f"{name}-{i}")
                 for name in OPS for i, params in enumerate(get_operator(name).check_cases())]


@pytest.mark.parametrize("name,params", ADJOINT_CASES)
def test_backward_oracle_is_the_forward_oracles_adjoint(name, params):
    """<f(x), g> == <x, backward(g)>: every operator here is linear in its
    differentiated input (maxpool2d and maxunpool for their fixed indices),
    so the backward oracle must be the forward oracle's adjoint."""
    op = get_operator(name)
    inputs = op.generate(params, "random", 3)
    grad = op.gradient.generate(params, "random", 3)
    forward = op.gradient.output(op.oracle(inputs, params))
    backward = op.gradient.oracle(inputs, grad, params)
    x = inputs[op.gradient.input]
    assert backward.shape == x.shape and grad.shape == forward.shape
    assert np.vdot(forward, grad) == pytest.approx(np.vdot(x, backward), rel=1e-12)


def test_shift_gradients_are_seeded_distinct_non_zero_integers():
    params = dict(B=2, C=3, H=4, W=5, S=1)
    grad = get_operator("dispersion").gradient.generate(params, "adversarial", 0)
    assert grad.shape == (2, 1, 4, 7)
    assert np.all(grad == np.round(grad)) and np.all(grad != 0) and np.abs(grad).max() <= common.GRADIENT_CYCLE
    flat = grad.reshape(-1)
    assert np.all(np.abs(flat[1:]) != np.abs(flat[:-1]))  # neighbouring gradients differ
    np.testing.assert_array_equal(grad, get_operator("dispersion").gradient.generate(params, "adversarial", 0))
    assert not np.array_equal(grad, get_operator("dispersion").gradient.generate(params, "adversarial", 1))
    # Every dtype holds them exactly: normal values only for the two shift operators (SPEC 1.5).
    for dtype in HALF:
        np.testing.assert_array_equal(common.round_to_dtype(grad, dtype), grad)
    pinv = get_operator("dispersion_pinv").gradient.generate(dict(B=2, C=3, H=4, W=5, S=1), "adversarial", 0)
    assert np.all(np.isfinite(pinv)) and np.all(np.abs(pinv) >= 1)


@pytest.mark.parametrize("name,params", [("maxpool2d", dict(N=2, C=3, H=9, W=9, k=2)),
                                         ("maxunpool", dict(form="1d", B=2, F=3, L=4, f=5))])
def test_index_gradients_hold_every_hostile_value_of_every_dtype(name, params):
    """SPEC 1.5: -0.0, subnormals, ±inf, NaN and the dtype's largest finite
    value, in each dtype once rounded to it; the rest distinct integers."""
    grad = get_operator(name).gradient.generate(params, "adversarial", 0)
    np.testing.assert_array_equal(grad, get_operator(name).gradient.generate(params, "adversarial", 0))
    for dtype in ("float64", "float32", "float16", "bfloat16"):
        stored = common.round_to_dtype(grad, dtype)
        assert ((stored == 0) & np.signbit(stored)).any(), dtype
        assert np.isnan(stored).any() and np.isposinf(stored).any() and np.isneginf(stored).any(), dtype
        assert (np.abs(stored) == common.largest_finite(dtype)).any(), dtype
        assert common.is_subnormal(stored, dtype).any(), dtype
    plain = grad[np.isfinite(grad) & (np.abs(grad) >= 1) & (np.abs(grad) <= common.GRADIENT_CYCLE)]
    assert plain.size > grad.size / 2 and np.all(plain == np.round(plain))
    assert np.isfinite(get_operator(name).gradient.generate(params, "random", 0)).all()  # random: normal


def holds_every_hostile_kind(grad, dtype) -> bool:
    stored = common.round_to_dtype(grad, dtype)
    return bool(((stored == 0) & np.signbit(stored)).any() and np.isnan(stored).any() and np.isposinf(stored).any()
                and np.isneginf(stored).any() and (np.abs(stored) == common.largest_finite(dtype)).any()
                and common.is_subnormal(stored, dtype).any())


def test_the_harness_adds_every_hostile_value_a_generator_lacks_and_leaves_half_ordinary():
    """Issue 51: hostile incoming gradients are the harness's (``common.with_hostile_values``), for
    whatever a generator draws: normal values get every kind, in every dtype once rounded; a
    gradient holding them all is returned unchanged; at least half the values stay ordinary."""
    normal = common.gradient_values(np.random.default_rng(3), (6, 40), "adversarial")
    assert np.isfinite(normal).all() and not any(holds_every_hostile_kind(normal, d) for d in common.SUBNORMAL_UNIT)
    hostile = common.with_hostile_values(normal, np.random.default_rng(4))
    assert all(holds_every_hostile_kind(hostile, dtype) for dtype in ("float64", "float32", "float16", "bfloat16"))
    changed = hostile != normal
    assert 0 < changed.sum() <= normal.size // 2 and not np.isnan(normal).any()
    np.testing.assert_array_equal(hostile, common.with_hostile_values(normal, np.random.default_rng(4)))
    np.testing.assert_array_equal(common.with_hostile_values(hostile, np.random.default_rng(5)), hostile)
    tiny = np.array([3.0, -4.0])  # no room: half must stay ordinary, so one value at most
    assert (common.with_hostile_values(tiny, np.random.default_rng(0)) != tiny).sum() <= 1


@pytest.mark.parametrize("name", ["maxpool2d", "maxunpool", "dispersion", "dispersion_pinv"])
def test_every_operators_adversarial_gradients_are_hostile_unless_it_says_why_not(name):
    """The check's incoming gradient (``training.incoming_gradient``) on every check case with room
    for them all (twice as many values as kinds) holds every hostile kind in every dtype; the two
    shift operators declare normal values only, with their reason, and get none."""
    op = get_operator(name)
    kinds = len(common.hostile_kinds()) + len(common.SUBNORMAL_UNIT)
    for params in op.check_cases():
        grad = training.incoming_gradient(op, params, "adversarial", 0)
        if op.gradient.normal_values_only:
            assert np.isfinite(grad).all() and (np.abs(grad) >= 1).all(), params
            continue
        if grad.size >= 2 * kinds:
            assert all(holds_every_hostile_kind(grad, dtype) for dtype in common.SUBNORMAL_UNIT), params
        assert np.isfinite(training.incoming_gradient(op, params, "random", 0)).all()
    assert bool(op.gradient.normal_values_only) == name.startswith("dispersion")


def test_gradient_compare_is_bitwise_but_for_the_sign_of_zero():
    ref = np.array([-0.0, 0.0, np.nan, np.inf, common.subnormal("float32", 3), 5.0])
    scattered = np.array([0.0, -0.0, np.nan, np.inf, common.subnormal("float32", 3), 5.0], dtype=np.float32)
    assert common.compare_gradient_bitwise("g", scattered, ref, "float32").status == "ok"
    # The forward's rule is untouched: there the sign of a zero is a difference.
    assert common.compare_bitwise("g", scattered, ref, "float32").differences == {common.ZERO_SIGN}
    flushed = scattered.copy()
    flushed[4] = 0.0
    verdict = common.compare_gradient_bitwise("g", flushed, ref, "float32")
    assert verdict.status == "mismatch" and verdict.differences == {common.FLUSHED_SUBNORMAL}, verdict
    for bad in (np.float32(np.nan), np.float32(-np.inf)):
        wrong = scattered.copy()
        wrong[5 if np.isnan(bad) else 3] = bad
        assert common.compare_gradient_bitwise("g", wrong, ref, "float32").differences == {common.VALUE}
    # Both index operators' gradient compares are this one.
    params = dict(form="1d", B=1, F=1, L=2, f=1)
    unpool = get_operator("maxunpool")
    assert unpool.gradient.compare(np.array([[[0.0, 1.0]]], dtype=np.float32), np.array([[[-0.0, 1.0]]]), {},
                                   None, "float32", None, params).status == "ok"


def test_backward_bytes():
    params = dict(N=2, C=3, H=9, W=8, k=2)
    pooled = 2 * 3 * 4 * 4
    backward = pooled * 4 + pooled * 8 + 2 * 3 * 9 * 8 * 4
    assert training.bytes_moved("maxpool2d", params, 4, "backward") == backward
    assert training.bytes_moved("maxpool2d", params, 4, "forward", "values") == 2 * 3 * 9 * 8 * 4 + pooled * 4
    # forward+backward: the whole forward output (the indices are saved whatever a strategy returns)
    assert training.bytes_moved("maxpool2d", params, 4, "forward+backward", "values") == \
        maxpool2d.bytes_moved(params, 4, "values+indices") + backward
    dispersion = dict(B=2, C=3, H=4, W=5, S=2)
    assert training.bytes_moved("dispersion", dispersion, 2, "backward") == (2 * 4 * 9 + 4 * 5 + 2 * 3 * 4 * 5) * 2
    unpool = dict(form="1d", B=2, F=3, L=4, f=5)
    assert training.bytes_moved("maxunpool", unpool, 8, "backward") == 2 * 3 * 20 * 8 + 2 * 3 * 4 * 16
    with pytest.raises(ValueError, match="unknown mode"):
        training.bytes_moved("maxpool2d", params, 4, "sideways")


def test_written_buffers_are_each_fresh_output_and_sum_to_the_bytes_written():
    params = dict(N=2, C=3, H=9, W=8, k=2)
    pooled, x_bytes = 2 * 3 * 4 * 4, 2 * 3 * 9 * 8 * 4
    expected = {"forward": (pooled * 4, pooled * 8), "backward": (x_bytes,),
                "forward+backward": (pooled * 4, pooled * 8, x_bytes)}
    for mode, buffers in expected.items():
        assert training.written_buffers("maxpool2d", params, 4, mode) == buffers
        assert training.bytes_written("maxpool2d", params, 4, mode) == sum(buffers)
    assert training.written_buffers("maxpool2d", params, 4, "forward", "values") == (pooled * 4,)
    # one output: the operator's bytes written, alone
    unpool = dict(form="1d", B=2, F=3, L=4, f=5)
    assert training.written_buffers("maxunpool", unpool, 4, "forward") == (2 * 3 * 20 * 4,)


# ------------------------------------------------------------ the maxpool compare
def _maxpool_case(x, grad_x, ties="first"):
    strat = dataclasses.replace(get_operator("maxpool2d").strategies["numpy_sliding_window"], ties=ties)
    params = dict(N=1, C=1, H=x.shape[2], W=x.shape[3], k=2)
    grad = np.array([[[[7.0]]]])
    ref = maxpool2d.grad_oracle({"x": x}, grad, params)
    return maxpool2d.grad_compare(grad_x, ref, {"x": x}, grad, "float64", strat, params)


def test_nan_window_gradient_may_land_on_any_of_its_nans():
    x = np.array([[np.nan, 1], [np.nan, 3]])[None, None]
    on_second_nan = np.array([[0, 0], [7.0, 0]])[None, None]
    assert _maxpool_case(x, on_second_nan).status == "ok"  # PyTorch's CPU index: the last NaN
    on_a_number = np.array([[0, 0], [0, 7.0]])[None, None]
    assert _maxpool_case(x, on_a_number).status == "mismatch"
    on_both = np.array([[7.0, 0], [7.0, 0]])[None, None]
    assert _maxpool_case(x, on_both).status == "mismatch"


def test_tied_gradient_lands_on_the_first_maximum_unless_ties_any():
    x = np.array([[3.0, 1], [3, 3]])[None, None]
    on_last = np.array([[0, 0], [0, 7.0]])[None, None]
    verdict = _maxpool_case(x, on_last)
    assert verdict.status == "mismatch" and "grad_x" in verdict.message
    assert _maxpool_case(x, on_last, ties="any").status == "ok"
    on_a_smaller = np.array([[0, 7.0], [0, 0]])[None, None]
    assert _maxpool_case(x, on_a_smaller, ties="any").status == "mismatch"


# ---------------------------------------------------- a backward wrong on ties
def _last_tie_backward(inputs, params):
    """Scatters each window's gradient to its LAST maximum (recomputed from
    x), not to the forward's index (the first): right without ties."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    windows = maxpool2d._windows(x, k)
    last = k * k - 1 - windows[..., ::-1].argmax(axis=-1)
    flat = (np.arange(h)[:, None] * k + last // k) * W + np.arange(w)[None, :] * k + last % k

    def backward(saved, grad):
        grad_x = np.zeros((N, C, H * W), dtype=grad.dtype)
        np.put_along_axis(grad_x, flat.reshape(N, C, -1), grad.reshape(N, C, -1), axis=-1)
        return grad_x.reshape(N, C, H, W)

    return backward


def test_a_backward_sending_ties_to_the_last_maximum_fails_while_its_forward_passes(planted):
    honest = get_operator("maxpool2d").strategies["numpy_sliding_window"]
    strat = planted("maxpool2d", "last_tie_backward", honest.prepare, returns="values+indices", ties="first",
                    backward=_last_tie_backward)
    params = dict(N=2, C=3, H=8, W=8, k=2)
    op = get_operator("maxpool2d")
    for input_mode in INPUT_MODES:
        ref = cached_reference("maxpool2d", params, "float32", input_mode, 0)
        forward = training.prepare(strat, op.to_backend(ref.inputs, "numpy", "cpu", "float32"), None, params,
                                   "forward")
        verdict = training.compare(strat, forward(), ref.expected, None, ref.inputs, None, "float32", params, "forward")
        assert verdict.status == "ok", verdict.message
    for mode in training.TRAINING_MODES:
        verdict, _ = run_case(strat, params, "float32", "random", "contiguous", mode)
        assert verdict.status == "ok", verdict.message  # no ties in random inputs
        verdict, _ = run_case(strat, params, "float32", "adversarial", "contiguous", mode)
        assert verdict.status == "mismatch" and "grad_x" in verdict.message, verdict


# ------------------------------------------------------------ hostile layouts
def test_transposed_layout_swaps_the_gradient_and_the_positions_only():
    op = get_operator("maxunpool")
    params = dict(form="1d", B=2, F=3, L=4, f=5)
    ref = cached_reference("maxunpool", params, "float32", "adversarial", 0, "backward")
    for backend in ("numpy", "torch"):
        inputs = training.inputs_to_backend(op, ref.inputs, backend, "cpu", "float32", training.TRANSPOSED)
        grad = training.gradient_to_backend(op, ref.grad, backend, "cpu", "float32", training.TRANSPOSED)
        for array, expected in ((inputs["positions"], ref.inputs["positions"]), (grad, ref.grad)):
            strides = tuple(array.strides if backend == "numpy" else array.stride())
            assert strides[-1] > strides[-2], (backend, strides)  # the last axis is the slow one
            np.testing.assert_array_equal(common.to_numpy(array), expected.astype(common.to_numpy(array).dtype))
        assert str(inputs["positions"].dtype).endswith("int64")
        values = inputs["values"]
        assert (values.flags.c_contiguous if backend == "numpy" else values.is_contiguous()), backend
    # JAX's arrays have no strides; a case whose gradient has a last axis of 1 gains nothing.
    assert not training.transposed_applies(op, params, "jax")
    assert not training.transposed_applies(op, dict(form="1d", B=2, F=1, L=4, f=5), "numpy")
    # Every strategy with a backward on a strided backend has transposed items in both training modes.
    for strat in impls.all_strategies(device="cpu"):
        if training.missing(strat) is None and "noncontiguous" in impls.backends.get_backend(strat.backend).layouts:
            for mode in training.TRAINING_MODES:
                layouts = {item.layout for item in check.adversarial_items(strat, "cpu", strat.dtypes[0], mode)}
                assert training.TRANSPOSED in layouts, (strat.key, mode)
            assert training.TRANSPOSED not in {item.layout for item in
                                               check.adversarial_items(strat, "cpu", strat.dtypes[0])}


def test_strided_and_channels_last_gradients_and_positions_are_laid_out_so():
    """The incoming gradient and the saved positions reach a backward in the
    case's layout, as the inputs do (SPEC 1.5): strided where the backend has
    strides, channels-last on torch, the values unchanged."""
    import torch

    op = get_operator("maxunpool")
    params = dict(form="2d", N=2, C=3, H=6, W=6, k=2)
    ref = cached_reference("maxunpool", params, "float32", "adversarial", 0, "backward")
    for backend, layout in (("numpy", "noncontiguous"), ("torch", "noncontiguous"), ("torch", "channels_last")):
        grad = training.gradient_to_backend(op, ref.grad, backend, "cpu", "float32", layout)
        positions = training.inputs_to_backend(op, ref.inputs, backend, "cpu", "float32", layout)["positions"]
        for array, expected in ((grad, ref.grad), (positions, ref.inputs["positions"])):
            np.testing.assert_array_equal(common.to_numpy(array), expected.astype(common.to_numpy(array).dtype))
            if backend == "numpy":
                assert not array.flags.c_contiguous, (backend, layout, array.strides)
            elif layout == "channels_last":
                assert array.is_contiguous(memory_format=torch.channels_last) and not array.is_contiguous(), \
                    array.stride()
            else:
                assert not array.is_contiguous() and not array.is_contiguous(memory_format=torch.channels_last), \
                    array.stride()


def _flushing_take_along_axis_backward(inputs, params):
    """maxunpool's take_along_axis backward, then subnormals flushed to zero (as FTZ does)."""
    inner = get_operator("maxunpool").strategies["numpy_put_along_axis"].backward(inputs, params)

    def backward(saved, grad_out):
        grad = inner(saved, grad_out)
        tiny = np.abs(grad) < np.finfo(grad.dtype).tiny
        return np.where(tiny, np.zeros_like(grad), grad)

    return backward


def _memory_order_backward(inputs, params):
    """maxunpool's gather reading positions in memory order (``ravel(order="K")``, no copy): right for
    contiguous and strided positions, wrong for transposed ones."""
    values, positions = inputs["values"], inputs["positions"]
    rows = math.prod(values.shape[:2])

    def backward(saved, grad_out):
        flat_positions = positions.ravel(order="K").reshape(rows, -1)
        return np.take_along_axis(grad_out.reshape(rows, -1), flat_positions, axis=-1).reshape(values.shape)

    return backward


def _memory_order_indices_backward(inputs, params):
    """maxpool2d's scatter to the saved indices, read in memory order: wrong for transposed indices."""
    N, C, H, W = inputs["x"].shape

    def backward(saved, grad):
        indices = saved[1]
        grad_x = np.zeros((N, C, H * W), dtype=grad.dtype)
        np.put_along_axis(grad_x, indices.ravel(order="K").reshape(N, C, -1),
                          np.ascontiguousarray(grad).reshape(N, C, -1), axis=-1)
        return grad_x.reshape(N, C, H, W)

    return backward


def _item_verdicts(strat, mode, dtype="float32", layout=None, input_mode=None):
    items = [item for item in check.adversarial_items(strat, "cpu", dtype, mode)
             if (layout is None or item.layout == layout) and (input_mode is None or item.mode == input_mode)]
    assert items
    return [(item, check.run_one_check(item, 0)) for item in items]


def test_a_backward_flushing_subnormal_gradients_is_caught(planted):
    honest = get_operator("maxunpool").strategies["numpy_put_along_axis"]
    strat = planted("maxunpool", "flushing_backward", honest.prepare, backward=_flushing_take_along_axis_backward)
    for mode in training.TRAINING_MODES:
        verdicts = [verdict for item, verdict in _item_verdicts(strat, mode) if item.mode != "random"]
        failed = [verdict for verdict in verdicts if verdict.status == "mismatch"]
        assert failed and all(v.differences == {common.FLUSHED_SUBNORMAL} for v in failed), verdicts
        assert "grad_values" in failed[0].message and "got 0.0" in failed[0].message, failed[0].message
        # random inputs' gradients are normal: it passes them, and its forward is the honest one
        assert {v.status for item, v in _item_verdicts(strat, mode) if item.mode == "random"} == {"ok"}
    summary = check.summarize_checks([check.CheckResult(item, verdict, 0.0)
                                      for item, verdict in _item_verdicts(strat, "backward")])
    assert summary.failed and not summary.defect_lines  # nothing listed excuses it


@pytest.mark.parametrize("op_name,name,backward", [
    ("maxunpool", "numpy_put_along_axis", _memory_order_backward),
    ("maxpool2d", "numpy_sliding_window", _memory_order_indices_backward)])
def test_a_backward_reading_positions_in_memory_order_is_caught_where_that_is_not_their_order(
        planted, op_name, name, backward):
    honest = get_operator(op_name).strategies[name]
    strat = planted(op_name, f"memory_order_{name}", honest.prepare, backward=backward, returns=honest.returns,
                    ties=honest.ties)
    verdicts = _item_verdicts(strat, "backward")
    # (skipped: maxpool2d's overlapping and padded windows, which its forward does not compute)
    wrong = {item.layout for item, verdict in verdicts if verdict.status not in ("ok", "skipped")}
    # transposed, and channels-last: the 2-D unpool's 4-D positions, maxpool2d's 4-D saved indices
    # relaid in the case's layout (a strategy taking every layout natively is handed them so)
    expected = {training.TRANSPOSED, "channels_last"}
    assert wrong == expected, [(item.label, v.status, v.message) for item, v in verdicts
                               if v.status not in ("ok", "skipped")]
    assert any(item.layout == "noncontiguous" for item, _ in verdicts)  # strided ones it reads right
    # maxpool2d's saved indices are relaid only where the backward is replayed alone: in
    # forward+backward it gets its own forward's fresh output, as a training step does.
    if op_name == "maxpool2d":
        assert {v.status for _, v in _item_verdicts(strat, "forward+backward")} - {"skipped"} == {"ok"}


def test_torch_max_unpool2d_passes_transposed_positions_where_the_builtin_raises(planted):
    strat = get_operator("maxunpool").strategies["torch_max_unpool2d"]
    for mode in training.TRAINING_MODES:
        verdicts = _item_verdicts(strat, mode, layout=training.TRANSPOSED)
        assert {v.status for _, v in verdicts} == {"ok"}, [v.message for _, v in verdicts]

    def unfixed(inputs, params):
        """torch_max_unpool2d without its contiguous positions (the 2-D form)."""
        import torch.nn.functional as F

        values, positions = inputs["values"], inputs["positions"]
        return lambda: F.max_unpool2d(values, positions, params["k"], output_size=(params["H"], params["W"]))

    # torch 2.13's own backward raises on the transposed positions: why the strategy copies them.
    raw = planted("maxunpool", "unfixed_max_unpool2d", unfixed, backend="torch")
    params = dict(form="2d", N=2, C=3, H=8, W=8, k=2)
    item = check.CheckItem(raw, tuple(sorted(params.items())), "float32", "cpu", "adversarial", training.TRANSPOSED,
                           training="backward")
    verdict = check.run_one_check(item, 0)
    assert verdict.status == "error" and "view size is not compatible" in verdict.message, verdict


@pytest.mark.skipif(impls.backends.get_backend("jax").unavailable() is not None, reason="JAX not installed")
def test_jax_max_pool_backward_flush_is_its_listed_upstream_defect():
    from impls import defects

    strat = get_operator("maxpool2d").strategies["jax_reshape_argmax"]
    listed = [d for d in defects.DEFECTS if d.strategy == strat.key and "cpu" in d.condition.devices
              and common.FLUSHED_SUBNORMAL in d.condition.differences]
    assert len(listed) == 1 and listed[0].condition.training_modes == training.TRAINING_MODES
    assert listed[0].affects(defects.installed_version(listed[0].library)), "re-measure it on this version"
    for mode in training.TRAINING_MODES:
        results = [check.CheckResult(item, verdict, 0.0)
                   for item, verdict in _item_verdicts(strat, mode, input_mode="adversarial")]
        statuses = {r.verdict.status for r in results}
        assert statuses - {"skipped"} == {"ok", "upstream-defect"}, statuses  # skipped: windows it does not pool
        summary = check.summarize_checks(results)
        assert summary.failed == 0 and len(summary.defect_lines) == 1
        assert listed[0].id in summary.defect_lines[0] and "got 0.0" in summary.defect_lines[0]
    # The same difference in the forward is not excused: the record is the backward's.
    flushed = common.Verdict("mismatch", "values differ", differences=frozenset({common.FLUSHED_SUBNORMAL}))
    assert defects.match(strat, flushed, device="cpu", dtype="float32", layout="contiguous", mode="adversarial",
                         versions=defects.installed_versions()) is None
    assert defects.match(strat, flushed, device="cpu", dtype="float32", layout="contiguous", mode="adversarial",
                         versions=defects.installed_versions(), training_mode="backward") is listed[0]
    # Its reproduction shows the library alone doing it (no suite code).
    assert "impls" not in listed[0].reproduction and "jax.vjp" in listed[0].reproduction


# ------------------------------------------------------------ declarations
def test_how_each_strategy_differentiates():
    for strat in impls.all_strategies():
        if not strat.prepare.__module__.startswith("impls.") or strat.op not in OPS:
            continue
        how = strat.differentiation
        if strat.backend == "torch":
            assert how == "autograd", strat.key
        elif strat.backend == "jax":
            assert how in ("jax.vjp", "none"), strat.key
        elif strat.backend == "triton":
            assert how == "explicit" or strat.no_backward == "backward kernel not written yet", strat.key
        else:
            assert how in ("explicit", "none"), strat.key
        # A built-in strategy without a backward always says why.
        assert how != "none" or len(strat.no_backward) > 20, strat.key
    # The numba strategies have numba backward kernels; the seeds' baselines an explicit or autograd backward.
    for name in OPS:
        op = get_operator(name)
        assert op.strategies["numba_fused"].differentiation == "explicit"
        for triton_name in ("triton_gather", "triton_scatter") if name == "maxunpool" else ("triton_fused",):
            assert op.strategies[triton_name].differentiation == "explicit", (name, triton_name)
        assert training.missing(op.strategies[op.baseline]) is None, name


@pytest.mark.parametrize("key", ["maxunpool/pytensor_seed_flat_set", "maxpool2d/seed_reshape_max",
                                 "maxunpool/pytensor_seed_broadcast"])
def test_a_strategy_without_a_backward_is_not_applicable_with_its_reason(key):
    op_name, name = key.split("/")
    strat = get_operator(op_name).strategies[name]
    reason = training.missing(strat)
    assert reason and strat.no_backward in reason
    assert training.describe(strat).startswith("none: ")
    assert training.applies(strat, "forward") is None and training.applies(strat, "backward") == reason
    for mode in training.TRAINING_MODES:
        with pytest.raises(NotApplicable, match="no backward"):
            training.prepare(strat, {}, None, {}, mode)


def test_undeclared_backward_on_a_backend_without_a_framework_is_none_with_a_reason(planted):
    strat = planted("maxunpool", "no_backward_declared", lambda inputs, params: (lambda: None))
    assert strat.differentiation == "none"
    assert "explicit backward" in training.missing(strat)


def test_seed_pinv_backward_is_skipped_where_autograd_makes_nan():
    """The declaration is needed: without it, autograd's gradient of the
    seed's ``y / alpha`` is NaN in the columns no channel covers (S > W)."""
    import torch

    op = get_operator("dispersion_pinv")
    seed = op.strategies["seed_loop_cat"]
    params = dict(B=1, C=4, H=2, W=3, S=7)
    assert "0/0" in training.missing(seed, params)
    assert training.missing(seed, dict(params, S=2)) is None
    with pytest.raises(NotApplicable, match="alpha = 0"):
        run_case(seed, params, "float64", "random", "contiguous", "backward")
    undeclared = dataclasses.replace(seed, no_backward_when=None)
    ref = cached_reference("dispersion_pinv", params, "float64", "random", 0)
    grad, expected = training.gradient_case(op, ref.inputs, params, "random", 0, "float64")
    call = training.prepare(undeclared, op.to_backend(ref.inputs, "torch", "cpu", "float64"),
                            torch.from_numpy(grad), params, "backward")
    got = call().numpy()
    uncovered = expected == 0
    assert uncovered.any() and np.isnan(got[uncovered]).all() and np.isfinite(got[~uncovered]).all()


def test_an_operator_without_a_gradient_has_no_training_modes():
    name = "toy_no_gradient"
    op = Operator(name=name, doc="a plugin's operator", params=(ParamSpec("n"),),
                  generate=lambda params, mode, seed: {"x": np.ones(params["n"])},
                  oracle=lambda inputs, params: inputs["x"], bytes_moved=lambda params, itemsize, returns: 0,
                  compare=lambda *args: common.Verdict("ok"), validate=lambda params: None,
                  check_cases=lambda: [dict(n=3)], reference="copy")
    OPERATORS[name] = op
    try:
        @strategy(name, backend="torch")
        def copy(inputs, params):
            """A copy, registered by a plugin that knows nothing of training modes."""
            return lambda: inputs["x"].clone()

        strat = op.strategies["copy"]
        assert strat.differentiation == "autograd"  # its backend could, the operator defines no backward
        assert "defines no backward" in training.missing(strat)
        with pytest.raises(NotApplicable, match="defines no backward"):
            training.prepare(strat, {"x": None}, None, dict(n=3), "backward")
        with pytest.raises(NotApplicable):
            training.bytes_moved(name, dict(n=3), 4, "backward")
        assert training.prepare(strat, {"x": np.ones(2)}, None, dict(n=2), "forward")  # forward as ever
    finally:
        OPERATORS.pop(name, None)


def test_a_strategy_cannot_declare_a_backward_and_none():
    with pytest.raises(ValueError, match="drop one"):
        strategy("maxpool2d", backend="numpy", backward=_last_tie_backward, no_backward="why")(
            lambda inputs, params: None)


def test_unknown_mode_is_an_error():
    strat = get_operator("maxpool2d").strategies["numpy_sliding_window"]
    with pytest.raises(ValueError, match="unknown mode 'training'"):
        training.prepare(strat, {}, None, {}, "training")


def test_gradient_record_defaults_the_differentiable_output_to_the_whole():
    record = Gradient(input="x", name="g", generate=None, oracle=None, bytes_moved=None, compare=None)
    assert record.output(42) == 42
    assert get_operator("maxpool2d").gradient.output(("values", "indices")) == "values"
    assert get_operator("maxpool2d").gradient.output("values") == "values"


# ------------------------------------------------- autograd against the oracle
GRADCHECK = {
    "maxpool2d": dict(N=1, C=2, H=5, W=7, k=2),
    "maxunpool": dict(form="2d", N=1, C=2, H=5, W=6, k=2),
    "dispersion": dict(B=2, C=3, H=2, W=4, S=2),
    "dispersion_pinv": dict(B=1, C=3, H=2, W=4, S=1),
}
EAGER_TORCH = [pytest.param(strat, id=strat.key) for strat in impls.all_strategies(device="cpu")
               if strat.op in GRADCHECK and strat.differentiation == "autograd" and not strat.quick_check]


def oracle_jacobian(op, inputs, params, out_shape):
    """Row j: the backward oracle applied to the j-th unit gradient (Jᵀ e_j)."""
    rows = []
    for j in range(math.prod(out_shape)):
        unit = np.zeros(math.prod(out_shape))
        unit[j] = 1
        rows.append(op.gradient.oracle(inputs, unit.reshape(out_shape), params).reshape(-1))
    return np.stack(rows)


@pytest.mark.parametrize("strat", EAGER_TORCH)
def test_autograd_agrees_with_the_oracle_jacobian(strat):
    """gradcheck (autograd against finite differences, float64) shows the
    strategy's autograd is its own function's derivative; its Jacobian then
    equals the one built from docs/SPEC.md §1.5's oracle. The oracle stays the judge."""
    import torch

    op = get_operator(strat.op)
    params = GRADCHECK[strat.op]
    inputs64 = op.generate(params, "random", 5)
    native = op.to_backend(inputs64, "torch", "cpu", "float64")
    key = op.gradient.input

    def differentiable(value):
        return op.gradient.output(strat.prepare({**native, key: value}, params)())

    x = native[key].detach().clone().requires_grad_(True)
    try:
        differentiable(x)
    except NotApplicable as reason:
        pytest.skip(str(reason))
    assert torch.autograd.gradcheck(differentiable, (x,), eps=1e-6, atol=1e-7)
    jacobian = torch.autograd.functional.jacobian(differentiable, x.detach())
    out_shape = tuple(jacobian.shape[:jacobian.dim() - x.dim()])
    expected = oracle_jacobian(op, inputs64, params, out_shape)
    np.testing.assert_allclose(jacobian.reshape(expected.shape).numpy(), expected, rtol=1e-12, atol=0)


# ------------------------------------------------------------ memory stays flat
def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def growth_over(call, calls: int, keep=None) -> int:
    """Resident memory sampled every 100 calls and at the end; the largest
    rise over the first sample. ``keep``: a list each call's result is appended to (a leak)."""
    samples = []
    for i in range(calls):
        result = call()
        if keep is not None:
            keep.append(result)
        del result
        if i % 100 == 0:
            samples.append(resident_bytes())
    samples.append(resident_bytes())
    return max(samples) - samples[0]


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads resident memory from /proc")
def test_a_thousand_autograd_replays_keep_memory_flat():
    """1,000 backward calls (retain_graph replays of one graph) of the seed's
    dispersion, 256 KiB of gradient each: were a graph or a gradient kept
    alive from one call to the next, memory would grow by ~250 MiB; it stays
    within a few MiB. The same loop keeping its gradients shows the growth."""
    # In a fresh process: in a worker that ran other tests, the heap those tests freed
    # absorbs the leak probe's 100 MiB without the resident set growing.
    # One thread: on a loaded machine torch's OpenMP barriers made a 2 ms call take 150 ms.
    script = ("import torch\ntorch.set_num_threads(1)\n"
              "from tests.impls.test_training import check_replays_keep_memory_flat\n"
              "check_replays_keep_memory_flat(torch)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


def check_replays_keep_memory_flat(torch):
    strat = get_operator("dispersion").strategies["seed_loop"]
    op = get_operator("dispersion")
    params = dict(B=2, C=8, H=64, W=64, S=2)
    inputs = op.to_backend(op.generate(params, "random", 0), "torch", "cpu", "float32")
    grad = torch.from_numpy(op.gradient.generate(params, "random", 0).astype(np.float32))
    call = training.prepare(strat, inputs, grad, params, "backward")
    first = call()
    alive = weakref.ref(first)
    del first
    assert alive() is None, "the backward keeps its gradient alive after returning it"
    call()  # the allocator's first growth, before the baseline sample
    assert growth_over(call, 1000) < 16 << 20
    leaked = []
    # The probe sees a leak: 100 MiB kept (some of it may land in pages freed earlier, not new ones).
    assert growth_over(call, 400, keep=leaked) > 50 << 20
    leaked.clear()
    step = training.prepare(strat, inputs, grad, params, "forward+backward")
    assert growth_over(step, 1000) < 16 << 20


@pytest.mark.slow  # compiles the numba kernels
def test_numba_backward_kernels_refuse_indices_outside_their_plane():
    params = dict(N=1, C=2, H=4, W=4, k=2)
    inputs = {"x": np.zeros((1, 2, 4, 4))}
    backward = maxpool2d.numba_scatter_backward(inputs, params)
    grad = np.arange(1.0, 9.0).reshape(1, 2, 2, 2)
    own = np.array([[[0, 3], [8, 15]], [[5, 2], [13, 10]]])[None]  # each inside its own 2x2 window
    expected = np.zeros((2, 16))
    np.put_along_axis(expected, own.reshape(2, 4), grad.reshape(2, 4), axis=1)
    np.testing.assert_array_equal(backward((None, own), grad), expected.reshape(1, 2, 4, 4))
    # Window (0, 0) pointing at column 2, the next window's, which points there too: summed, as torch does.
    shared = own.copy()
    shared[0, 0, 0, 0] = 3
    expected[0] = 0
    expected[0, [3, 8, 15]] = [1 + 2, 3, 4]
    np.testing.assert_array_equal(backward((None, shared), grad), expected.reshape(1, 2, 4, 4))
    with pytest.raises(ValueError, match="1 outside their own plane"):
        backward((None, np.where(own == 10, 16, own)), grad)  # the second plane's last window past its plane
    unpool = get_operator("maxunpool").strategies["numba_fused"]
    unpool_params = dict(form="1d", B=1, F=1, L=2, f=2)
    apply = unpool.backward({"values": np.zeros((1, 1, 2)), "positions": np.array([[[0, 4]]])}, unpool_params)
    with pytest.raises(ValueError, match="outside"):
        apply(None, np.ones((1, 1, 4)))
