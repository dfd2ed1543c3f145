"""The device oracles (torch float64) against the numpy oracles, and the
device compares against the host compares, on CPU tensors standing in for a
GPU: the same answers bit for bit, and the same verdicts on planted wrong
outputs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import impls  # noqa: F401  (registers the operators)
from harness.measuring.check import MODES
from impls import common, dispersion, maxpool2d
from impls.registry import OPERATORS, get_operator

OPS = ("maxpool2d", "maxunpool", "dispersion", "dispersion_pinv")
DTYPES = ("float16", "bfloat16", "float32", "float64")


def tensors(arrays: dict) -> dict:
    return {key: torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value
            for key, value in arrays.items()}


def bits_equal(numpy_answer, torch_answer) -> bool:
    """Bit for bit (NaN payloads, the sign of zero), shape and dtype too."""
    if isinstance(numpy_answer, tuple):
        return len(numpy_answer) == len(torch_answer) and all(map(bits_equal, numpy_answer, torch_answer))
    got = torch_answer.cpu().numpy()
    if got.shape != numpy_answer.shape or got.dtype != numpy_answer.dtype:
        return False
    width = f"u{got.dtype.itemsize}"
    return bool(np.array_equal(np.ascontiguousarray(got).view(width), np.ascontiguousarray(numpy_answer).view(width)))


def input_modes(op) -> list[tuple[dict, str]]:
    """Every check case in both generator modes, and the operator's extra checks in theirs."""
    cases = [(params, mode) for params in op.check_cases() for mode in MODES]
    cases += [(extra["params"], mode) for extra in op.extra_checks() for mode in extra.get("modes", MODES)]
    return cases


def rounded(op, params, mode, dtype):
    raw = op.generate(params, mode, 3)
    return {key: common.round_to_dtype(value, dtype) if getattr(value, "dtype", None) is not None
            and value.dtype.kind == "f" else value for key, value in raw.items()}


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_device_oracles_give_the_numpy_oracles_answers_bit_for_bit(op_name, dtype):
    """Forward and backward, every adversarial case (NaN, ±inf, -0.0, ties,
    subnormals of every type, scattered positions, subnormal masks) in the
    dtype's values."""
    op = get_operator(op_name)
    checked = 0
    for params, mode in input_modes(op):
        inputs = rounded(op, params, mode, dtype)
        assert bits_equal(op.oracle(inputs, params), op.device_oracle(tensors(inputs), params)), (params, mode)
        grad = common.round_to_dtype(op.gradient.generate(params, mode, 3), dtype)
        assert bits_equal(op.gradient.oracle(inputs, grad, params),
                          op.gradient.device_oracle(tensors(inputs), torch.from_numpy(grad), params)), (params, mode)
        checked += 1
    assert checked >= 2 * len(op.check_cases())


def _relaid(tensor, layout: str):
    if layout == "channels_last" and tensor.dim() == 4:
        return tensor.contiguous(memory_format=torch.channels_last)
    wide = torch.zeros(tensor.shape[:-1] + (2 * tensor.shape[-1],), dtype=tensor.dtype)
    wide[..., ::2] = tensor
    return wide[..., ::2]


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("layout", ("noncontiguous", "channels_last"))
def test_device_oracles_do_not_depend_on_the_inputs_layout(op_name, layout):
    """A device-agnostic oracle given strided or channels-last tensors (as a
    caller on the device may hold them) gives the contiguous answer."""
    op = get_operator(op_name)
    for params in op.check_cases()[:4]:
        inputs = tensors(rounded(op, params, "adversarial", "float32"))
        grad = torch.from_numpy(op.gradient.generate(params, "adversarial", 3))
        relaid = {key: _relaid(value, layout) if torch.is_tensor(value) else value for key, value in inputs.items()}
        assert any(not value.is_contiguous() for value in relaid.values() if torch.is_tensor(value) and
                   value.dim() > 1) or layout == "channels_last"
        for want, got in ((op.device_oracle(inputs, params), op.device_oracle(relaid, params)),
                          (op.gradient.device_oracle(inputs, grad, params),
                           op.gradient.device_oracle(relaid, _relaid(grad, layout), params))):
            want, got = (want, got) if isinstance(want, tuple) else ((want,), (got,))
            assert all(bits_equal(w.numpy(), g) for w, g in zip(want, got)), params


# ------------------------------------------------------------- the compares
class Strat:
    """What the compares read of a strategy."""

    def __init__(self, returns="values+indices", ties="first"):
        self.returns, self.ties = returns, ties


def same_verdict(host, device):
    assert (host.status, host.message, host.differences) == (device.status, device.message, device.differences)
    for a, b in ((host.max_abs_err, device.max_abs_err), (host.rel_err, device.rel_err)):
        assert (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, rel=1e-9, abs=0.0)


def judged_both_ways(op_name, out, ref, inputs, dtype, strat, params, grad=None):
    """(host verdict, device verdict) of ``out`` (numpy, in ``dtype``; bfloat16 as float32 values)."""
    op = get_operator(op_name)

    def on_torch(value):
        if isinstance(value, tuple):
            return tuple(on_torch(v) for v in value)
        tensor = torch.from_numpy(np.ascontiguousarray(value))
        return tensor.to(torch.bfloat16) if dtype == "bfloat16" and tensor.is_floating_point() else tensor

    if grad is None:
        host = op.compare(out, ref, inputs, dtype, strat, params)
        device = op.device_compare(on_torch(out), on_torch_ref(ref), tensors(inputs), dtype, strat, params)
    else:
        host = op.gradient.compare(out, ref, inputs, grad, dtype, strat, params)
        device = op.gradient.device_compare(on_torch(out), on_torch_ref(ref), tensors(inputs),
                                            torch.from_numpy(grad), dtype, strat, params)
    return host, device


def on_torch_ref(ref):
    return tuple(torch.from_numpy(r) for r in ref) if isinstance(ref, tuple) else torch.from_numpy(ref)


def storage(values, dtype):
    """A float64 array as a strategy in ``dtype`` returns it (bfloat16: its values in float32, numpy has none)."""
    if dtype == "bfloat16":
        return common.round_to_dtype(values, dtype).astype(np.float32)
    return values.astype(dtype)


def flip_bit(array, where, dtype=""):
    """The lowest mantissa bit of one element flipped (bfloat16's, in its float32 storage)."""
    flipped = array.copy()
    flipped.reshape(-1).view(f"u{array.dtype.itemsize}")[where] ^= 1 << 16 if dtype == "bfloat16" else 1
    return flipped


POOL = dict(N=2, C=3, H=10, W=11, k=3)


def pool_case(dtype, mode="adversarial"):
    op = get_operator("maxpool2d")
    inputs = rounded(op, POOL, mode, dtype)
    return inputs, op.oracle(inputs, POOL)


def _plant_first(values, predicate):
    flat = values.reshape(-1)
    where = int(np.flatnonzero(predicate(flat))[0])
    return flat, where


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32", "float64"))
def test_maxpool_compares_agree_on_planted_wrong_outputs(dtype):
    inputs, (ref_values, ref_indices) = pool_case(dtype)
    x = inputs["x"]
    right = (storage(ref_values, dtype), ref_indices.copy())
    plants = {"right": right}
    finite = np.flatnonzero(np.isfinite(ref_values.reshape(-1)) & (ref_values.reshape(-1) != 0))
    plants["one flipped bit"] = (flip_bit(right[0], int(finite[0]), dtype), right[1])
    zeros = np.flatnonzero(ref_values.reshape(-1) == 0)
    signed = right[0].copy()
    signed.reshape(-1)[zeros[0]] = -signed.reshape(-1)[zeros[0]]  # -0.0 for +0.0 or the other way
    plants["-0.0 against +0.0"] = (signed, right[1])
    nan_moved = right[0].copy()
    nan_at = int(np.flatnonzero(np.isnan(ref_values.reshape(-1)))[0])
    nan_moved.reshape(-1)[nan_at], nan_moved.reshape(-1)[finite[1]] = 1.0, np.nan
    plants["a NaN moved"] = (nan_moved, right[1])
    off_by_one = right[1].copy()
    off_by_one.reshape(-1)[finite[2]] += 1
    plants["an index off by one"] = (right[0], off_by_one)
    outside = right[1].copy()
    outside.reshape(-1)[3] = POOL["H"] * POOL["W"]
    plants["an index outside the plane"] = (right[0], outside)
    neg_inf = np.isneginf(ref_values) & (ref_indices != 0)
    zero_index = np.where(neg_inf, 0, right[1])
    plants["index 0 for all -inf windows"] = (right[0], zero_index)
    plants["int32 indices"] = (right[0], right[1].astype(np.int32))
    plants["a wrong shape"] = (right[0][:, :, :-1], right[1])
    plants["values alone"] = right[0]
    for name, out in plants.items():
        host, device = judged_both_ways("maxpool2d", out, (ref_values, ref_indices), inputs, dtype, Strat(), POOL)
        same_verdict(host, device)
        assert (host.status == "ok") == (name == "right"), (name, host)
    # "any" ties: another maximum of the window, or another NaN of a NaN window, is right
    x_windows = maxpool2d._windows(x, POOL["k"])
    last = (x_windows.shape[-1] - 1 - np.argmax(x_windows[..., ::-1] == ref_values[..., None], axis=-1))
    nan_last = (x_windows.shape[-1] - 1 - np.argmax(np.isnan(x_windows[..., ::-1]), axis=-1))
    last = np.where(np.isnan(ref_values), nan_last, last)
    rows = np.arange(ref_values.shape[2])[:, None] * POOL["k"] + last // POOL["k"]
    cols = np.arange(ref_values.shape[3])[None, :] * POOL["k"] + last % POOL["k"]
    last_indices = rows * POOL["W"] + cols
    assert (last_indices != ref_indices).any()
    pointed = np.take_along_axis(x.reshape(2, 3, -1), last_indices.reshape(2, 3, -1), -1).reshape(last_indices.shape)
    for ties, want in (("any", "ok"), ("first", "mismatch")):
        host, device = judged_both_ways("maxpool2d", (storage(pointed, dtype), last_indices),
                                        (ref_values, ref_indices), inputs, dtype, Strat(ties=ties), POOL)
        same_verdict(host, device)
        assert host.status == want


@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_maxpool_subnormal_flush_is_named_alike(dtype):
    """A backend flushing subnormals: the same subnormal kinds both ways."""
    inputs, (ref_values, ref_indices) = pool_case(dtype)
    flushed_x = np.where(common.is_subnormal(inputs["x"], dtype), 0.0 * np.sign(inputs["x"]), inputs["x"])
    out_values, out_indices = maxpool2d.oracle({"x": flushed_x}, POOL)
    host, device = judged_both_ways("maxpool2d", (storage(out_values, dtype), out_indices),
                                    (ref_values, ref_indices), inputs, dtype, Strat(), POOL)
    same_verdict(host, device)
    assert host.status == "mismatch" and host.differences & {common.SUBNORMAL, common.SUBNORMAL_WINDOW_INDEX}


@pytest.mark.parametrize("ties", ("first", "any"))
def test_maxpool_gradient_compares_agree_on_planted_wrong_gradients(ties):
    dtype = "float32"
    op = get_operator("maxpool2d")
    inputs, _ = pool_case(dtype)
    grad = common.round_to_dtype(op.gradient.generate(POOL, "adversarial", 3), dtype)
    ref = op.gradient.oracle(inputs, grad, POOL)
    right = storage(ref, dtype)
    plants = {"right": right, "one flipped bit": flip_bit(right, int(np.flatnonzero(right.reshape(-1))[0]))}
    _, indices = maxpool2d.oracle(inputs, POOL)
    # a NaN window's gradient on another NaN of the window: allowed (SPEC 1.1)
    x = inputs["x"]
    nan_windows = np.argwhere(np.isnan(maxpool2d._windows(x, POOL["k"])).sum(axis=-1) >= 2)
    moved = right.copy()
    if len(nan_windows):
        n, c, i, j = nan_windows[0]
        k = POOL["k"]
        block = x[n, c, i * k:(i + 1) * k, j * k:(j + 1) * k]
        spots = np.argwhere(np.isnan(block))
        first, other = spots[0], spots[-1]
        value = moved[n, c, i * k + first[0], j * k + first[1]]
        moved[n, c, i * k + first[0], j * k + first[1]] = 0.0
        moved[n, c, i * k + other[0], j * k + other[1]] = value
        plants["a NaN window's gradient on another NaN"] = moved
    # every all -inf window's gradient sent to the plane's element 0 (summed there)
    neg_inf_windows = np.isneginf(maxpool2d._windows(x, POOL["k"])).all(axis=-1)
    sent = right.copy()
    for n, c, i, j in np.argwhere(neg_inf_windows):
        if (i, j) != (0, 0):
            k = POOL["k"]
            sent[n, c, 0, 0] += sent[n, c, i * k, j * k]
            sent[n, c, i * k, j * k] = 0.0
    plants["all -inf windows' gradients at index 0"] = sent
    for name, out in plants.items():
        host, device = judged_both_ways("maxpool2d", out, ref, inputs, dtype, Strat(ties=ties), POOL, grad=grad)
        same_verdict(host, device)
    assert judged_both_ways("maxpool2d", sent, ref, inputs, dtype, Strat(), POOL, grad=grad)[0].differences \
        == {common.NEG_INF_WINDOW_GRAD_0}


@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32"))
def test_maxunpool_compares_agree_on_planted_wrong_outputs(dtype):
    op = get_operator("maxunpool")
    params = dict(form="2d", N=2, C=2, H=7, W=9, k=2)
    inputs = rounded(op, params, "adversarial", dtype)
    ref = op.oracle(inputs, params)
    right = storage(ref, dtype)
    nonzero = np.flatnonzero(np.isfinite(ref.reshape(-1)) & (ref.reshape(-1) != 0))
    subnormal_at = np.flatnonzero(common.is_subnormal(ref.reshape(-1), dtype))
    flushed = right.copy()
    flushed.reshape(-1)[subnormal_at] = 0.0
    zero_sign = right.copy()
    zero_sign.reshape(-1)[np.flatnonzero(ref.reshape(-1) == 0)[:3]] *= -1
    for out in (right, flip_bit(right, int(nonzero[0]), dtype), flushed, zero_sign):
        same_verdict(*judged_both_ways("maxunpool", out, ref, inputs, dtype, Strat("output"), params))
    grad = common.round_to_dtype(op.gradient.generate(params, "adversarial", 3), dtype)
    grad_ref = op.gradient.oracle(inputs, grad, params)
    for out in (storage(grad_ref, dtype), flip_bit(storage(grad_ref, dtype), 5, dtype)):
        same_verdict(*judged_both_ways("maxunpool", out, grad_ref, inputs, dtype, Strat("output"), params, grad))


@pytest.mark.parametrize("op_name", ("dispersion", "dispersion_pinv"))
@pytest.mark.parametrize("dtype", ("float16", "bfloat16", "float32", "float64"))
def test_relative_compares_agree_either_side_of_the_bounds(op_name, dtype):
    """An error just under and just over the dtype's bound, past the wrong
    bound, and non-finite: the same status, message and figures."""
    op = get_operator(op_name)
    params = dict(B=2, C=5, H=3, W=6, S=1)
    inputs = rounded(op, params, "random", "float64")
    ref = op.oracle(inputs, params)
    direction = np.random.default_rng(0).standard_normal(ref.shape)
    direction *= np.linalg.norm(ref) / np.linalg.norm(direction)
    tol, wrong = common.REL_TOL[dtype], common.WRONG_REL_ERR[dtype]
    statuses = []
    for scale in (0.0, 0.5 * tol, 2 * tol, 2 * wrong):
        out = ref + scale * direction
        if dtype != "float64":  # only float64 can hold these errors exactly: the rounding is part of the plant
            out = common.round_to_dtype(out, dtype)
        host, device = judged_both_ways(op_name, storage(out, dtype), ref, inputs, dtype, Strat("output"), params)
        same_verdict(host, device)
        statuses.append(host.status)
    if dtype == "float64":
        assert statuses == ["ok", "ok", "inexact", "mismatch"]
    infinite = storage(ref, dtype)
    infinite.reshape(-1)[4] = np.inf
    host, device = judged_both_ways(op_name, infinite, ref, inputs, dtype, Strat("output"), params)
    same_verdict(host, device)
    assert host.differences == {common.NON_FINITE}
    grad = common.round_to_dtype(op.gradient.generate(params, "adversarial", 3), "float64")
    grad_ref = op.gradient.oracle(inputs, grad, params)
    for scale in (0.0, 2 * tol):
        out = storage(grad_ref * (1 + scale), dtype)
        same_verdict(*judged_both_ways(op_name, out, grad_ref, inputs, dtype, Strat("output"), params, grad))


def test_relative_compare_just_either_side_of_the_float32_bound():
    """A planted relative error of 0.99 and 1.01 times float32's bound (in a
    float64-held output, so the plant is exact): ok, then inexact, both ways."""
    ref = np.linspace(1.0, 2.0, 64)
    direction = np.cos(np.arange(64.0))
    direction *= np.linalg.norm(ref) / np.linalg.norm(direction)
    for factor, want in ((0.99, "ok"), (1.01, "inexact")):
        out = (ref + factor * common.REL_TOL["float32"] * direction).astype(np.float32).astype(np.float64)
        # the float32 rounding adds its own error: plant around it, judging the float64 values as float32 would
        host = common.compare_relative("y", out.astype(np.float32), ref, "float32")
        device = common.device_compare_relative("y", torch.from_numpy(out.astype(np.float32)), torch.from_numpy(ref),
                                                "float32")
        same_verdict(host, device)
        assert host.status == want, (factor, host)


def test_non_arrays_and_wrong_dtypes_are_refused_alike():
    ref = np.zeros((2, 3))
    for out, device_out in ((None, None), (ref.astype(np.float16), torch.zeros((2, 3), dtype=torch.float16)),
                            (np.zeros((3, 2), np.float32), torch.zeros((3, 2)))):
        for compare, device_compare in ((common.compare_bitwise, common.device_compare_bitwise),
                                        (common.compare_relative, common.device_compare_relative)):
            host = compare("y", out, ref, "float32")
            device = device_compare("y", device_out, torch.from_numpy(ref), "float32")
            same_verdict(host, device)
            assert host.status == "mismatch"


def test_on_device_keeps_a_tensor_and_takes_numpy_without_a_copy_of_its_values():
    array = np.arange(6.0).reshape(2, 3)
    moved = common.on_device((array, torch.ones(2)), "cpu")
    assert torch.is_tensor(moved[0]) and moved[0].tolist() == array.tolist() and moved[1].tolist() == [1.0, 1.0]
    assert isinstance(common.on_device(np.array([object()]), "cpu"), np.ndarray)  # refused by the compare


def test_every_builtin_operator_declares_its_device_judge():
    for op in (OPERATORS[name] for name in OPS):
        assert op.device_oracle and op.device_compare
        assert op.gradient.device_oracle and op.gradient.device_compare


def test_channel_windows_is_each_channels_slice():
    row = torch.arange(2 * 11, dtype=torch.float64).reshape(2, 11)
    for C, W, S in ((4, 5, 2), (3, 11, 0), (1, 11, 3)):
        width = W + (C - 1) * S
        windows = dispersion.channel_windows(row[:, :width], C, W, S)
        for i in range(C):
            assert windows[:, i].tolist() == row[:, i * S:i * S + W].tolist()


def test_a_planted_device_oracle_error_is_caught_by_the_agreement_test():
    """The agreement test can fail: a device oracle taking the last maximum
    on ties gives other indices than numpy's."""
    op = get_operator("maxpool2d")
    inputs = rounded(op, POOL, "adversarial", "float32")
    values, indices = op.device_oracle(tensors(inputs), POOL)
    wrong = replace(op, device_oracle=lambda t, p: (values, torch.flip(indices, (-1,))))
    assert not bits_equal(op.oracle(inputs, POOL), wrong.device_oracle(tensors(inputs), POOL))


@pytest.mark.cuda
@pytest.mark.parametrize("op_name", OPS)
def test_on_a_gpu_the_device_oracles_and_compares_agree_with_the_host(op_name):
    """The same agreement on CUDA tensors (GPU kernels, atomics-free
    formulas): the oracles bit for bit, a right answer ok, a wrong one the
    host's verdict."""
    op = get_operator(op_name)
    for params, mode in input_modes(op)[:6]:
        inputs = rounded(op, params, mode, "float32")
        on_gpu = {key: value.cuda() if torch.is_tensor(value) else value for key, value in tensors(inputs).items()}
        expected = op.oracle(inputs, params)
        assert bits_equal(expected, op.device_oracle(on_gpu, params)), (params, mode)
        grad = common.round_to_dtype(op.gradient.generate(params, mode, 3), "float32")
        assert bits_equal(op.gradient.oracle(inputs, grad, params),
                          op.gradient.device_oracle(on_gpu, torch.from_numpy(grad).cuda(), params))
    strat = Strat() if op_name == "maxpool2d" else Strat("output")
    params = op.check_cases()[0]
    inputs = rounded(op, params, "adversarial", "float32")
    expected = op.oracle(inputs, params)
    wrong = tuple(e.copy() for e in expected) if isinstance(expected, tuple) else expected.copy()
    first = wrong[0] if isinstance(wrong, tuple) else wrong
    first.reshape(-1)[np.flatnonzero(np.isfinite(first.reshape(-1)))[0]] += 1.0
    for out in (expected, wrong):
        out32 = tuple(o.astype(np.float32) if o.dtype.kind == "f" else o for o in out) \
            if isinstance(out, tuple) else out.astype(np.float32)
        host = op.compare(out32, expected, inputs, "float32", strat, params)
        device = op.device_compare(common.on_device(out32, "cuda"), common.on_device(expected, "cuda"),
                                   {key: value.cuda() if torch.is_tensor(value) else value
                                    for key, value in tensors(inputs).items()}, "float32", strat, params)
        same_verdict(host, device)
