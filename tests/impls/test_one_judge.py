"""One judge for every device: each operator's oracle and compare are written
once over the array namespace of their inputs, and give the same answers and
verdicts, bit for bit, on numpy arrays (the host's judge) and on torch
tensors (the device's, here on the CPU standing in for a GPU): every
operator, every training mode, random and adversarial inputs, right outputs
and planted wrong ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import impls  # noqa: F401  (registers the operators)
from harness.measuring.check import MODES
from impls import common, maxpool2d, status, training
from impls.backends import DTYPE, DTYPES
from impls.registry import OPERATORS, get_operator
from tests.helpers import maxpool_windows

OPS = ("maxpool2d", "maxunpool", "dispersion", "dispersion_pinv")
RELATIVE = ("dispersion", "dispersion_pinv")


def tensors(arrays: dict, device: str = "cpu") -> dict:
    return {key: torch.from_numpy(np.ascontiguousarray(value)).to(device) if isinstance(value, np.ndarray)
            else value for key, value in arrays.items()}


def on_torch(value, device: str = "cpu"):
    if isinstance(value, tuple):
        return tuple(on_torch(item, device) for item in value)
    return torch.from_numpy(np.ascontiguousarray(value)).to(device)


def bits_equal(numpy_answer, torch_answer) -> bool:
    """Bit for bit (NaN payloads, the sign of zero), shape and dtype too."""
    if isinstance(numpy_answer, tuple):
        return len(numpy_answer) == len(torch_answer) and all(map(bits_equal, numpy_answer, torch_answer))
    got = torch_answer.cpu().numpy()
    if got.shape != numpy_answer.shape or got.dtype != numpy_answer.dtype:
        return False
    width = f"u{got.dtype.itemsize}"
    return bool(np.array_equal(np.ascontiguousarray(got).view(width), np.ascontiguousarray(numpy_answer).view(width)))


def input_modes(op, dtype: str | None = None) -> list[tuple[dict, str]]:
    """Every check case in both generator modes, and the operator's extra
    checks in theirs (those of ``dtype``, when given, as the check runs them)."""
    cases = [(params, mode) for params in op.check_cases() for mode in MODES]
    cases += [(extra["params"], mode) for extra in op.extra_checks() for mode in extra.get("modes", MODES)
              if dtype is None or dtype in (extra.get("dtypes") or (dtype,))]
    return cases


def rounded(op, params, mode, dtype):
    raw = op.generate(params, mode, 3)
    return {key: common.round_to_dtype(value, dtype) if getattr(value, "dtype", None) is not None
            and value.dtype.kind == "f" else value for key, value in raw.items()}


def verdict_bits(verdict) -> tuple:
    """Everything a verdict says, its figures as their float64 bits (NaN as NaN)."""
    def figure(value):
        return "nan" if math.isnan(value) else np.float64(value).tobytes()
    return (verdict.status, verdict.message, verdict.differences, figure(verdict.max_abs_err),
            figure(verdict.rel_err))


@pytest.mark.parametrize("op_name", OPS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_oracles_give_the_same_bits_on_numpy_and_on_torch(op_name, dtype):
    """Forward and backward, every check case and extra check (NaN, ±inf,
    -0.0, ties, subnormals of every type, scattered positions, subnormal
    masks) in the dtype's values."""
    op = get_operator(op_name)
    for params, mode in input_modes(op):
        inputs = rounded(op, params, mode, dtype)
        assert bits_equal(op.oracle(inputs, params), op.oracle(tensors(inputs), params)), (params, mode)
        grad = common.round_to_dtype(op.gradient.generate(params, mode, 3), dtype)
        assert bits_equal(op.gradient.oracle(inputs, grad, params),
                          op.gradient.oracle(tensors(inputs), torch.from_numpy(grad), params)), (params, mode)


# ------------------------------------------------------------- the verdicts
class Strat:
    """What the compares read of a strategy."""

    def __init__(self, op: str, returns: str, ties: str = "first"):
        self.op, self.returns, self.ties, self.key = op, returns, ties, f"{op}.planted"


def in_dtype(values: np.ndarray, dtype: str) -> torch.Tensor:
    """A float64 array as a torch strategy in ``dtype`` returns it (integers as they are)."""
    tensor = torch.from_numpy(np.ascontiguousarray(values))
    return tensor.to(getattr(torch, dtype)) if tensor.is_floating_point() else tensor


def float_part(output):
    return output[0] if isinstance(output, tuple) else output


def planted_outputs(op_name: str, ref, inputs, dtype: str, params: dict) -> dict:
    """The right output and wrong ones, as float64 arrays (indices int64):
    one value changed, a zero's sign, a NaN moved, subnormals flushed,
    non-finite values, relative errors either side of the bounds, and
    maxpool2d's wrong indices."""
    plants = {"right": ref}
    values = float_part(ref)

    def with_values(changed):
        return (changed, ref[1]) if isinstance(ref, tuple) else changed

    flat = values.reshape(-1)
    finite = np.flatnonzero(np.isfinite(flat) & (flat != 0))
    if len(finite):
        changed = values.copy()
        changed.reshape(-1)[finite[0]] *= 3
        plants["one value tripled"] = with_values(changed)
        nan = values.copy()
        nan.reshape(-1)[finite[-1]] = np.nan
        plants["a NaN for a number"] = with_values(nan)
    zeros = np.flatnonzero(flat == 0)
    if len(zeros):
        signed = values.copy()
        signed.reshape(-1)[zeros[:3]] *= -1
        plants["zeros' signs flipped"] = with_values(signed)
    tiny = common.is_subnormal(values, dtype)
    if tiny.any():
        plants["subnormals flushed"] = with_values(np.where(tiny, 0.0 * values, values))
    if op_name in RELATIVE and len(finite):
        direction = np.cos(np.arange(flat.size, dtype=np.float64)).reshape(values.shape)
        direction *= np.linalg.norm(values) / max(np.linalg.norm(direction), 1e-300)
        record = DTYPE[dtype]
        for scale in (2 * record.rel_tol, 2 * record.wrong_rel_err):
            plants[f"relative error {scale:g}"] = values + scale * direction
    if op_name == "maxpool2d" and isinstance(ref, tuple):
        indices = ref[1]
        off_by_one = indices.copy()
        off_by_one.reshape(-1)[-1] += 1
        plants["an index off by one"] = (values, off_by_one)
        outside = indices.copy()
        outside.reshape(-1)[0] = params["H"] * params["W"]
        plants["an index outside the plane"] = (values, outside)
        neg_inf = np.isneginf(values) & (indices != 0)
        if neg_inf.any():
            plants["index 0 for all -inf windows"] = (values, np.where(neg_inf, 0, indices))
        plants["the last maximum"] = last_maximum(inputs["x"], values, params)
    return plants


def last_maximum(x, values, params):
    """Each window's last maximum (last NaN), its value and flat index: right only under
    ``ties="any"``. Windows of the case's geometry; the padding (-inf) is never taken: an all
    -inf window keeps its first real element."""
    k, s, p = maxpool2d.window(params)
    W = x.shape[3]
    h, w = values.shape[2:]
    windows = maxpool_windows(x, params)
    is_max = np.where(np.isnan(values)[..., None], np.isnan(windows), windows == values[..., None])
    is_max &= ~np.isneginf(values)[..., None]  # an all -inf window: its first real element, below
    last = windows.shape[-1] - 1 - np.argmax(is_max[..., ::-1], axis=-1)
    first_real = maxpool2d.oracle({"x": x}, params)[1]
    rows = np.arange(h)[:, None] * s - p + last // k
    cols = np.arange(w)[None, :] * s - p + last % k
    flat = np.where(np.isneginf(values), first_real, rows * W + cols)
    pointed = np.take_along_axis(x.reshape(*x.shape[:2], -1), flat.reshape(*x.shape[:2], -1), -1)
    return pointed.reshape(flat.shape), flat


def planted_gradients(op_name: str, grad_ref, inputs, params: dict, dtype: str) -> dict:
    """The right gradient and wrong ones; for maxpool2d also the moves its
    compare must judge: a NaN window's gradient on another NaN, and every
    all -inf window's gradient summed into the plane's element 0."""
    plants = planted_outputs(op_name if op_name in RELATIVE else "bitwise", grad_ref, inputs, dtype, params)
    if op_name == "maxpool2d" and maxpool2d.plain_windows_only(params) is None:
        k, x = params["k"], inputs["x"]
        windows = maxpool2d._windows(x, k)
        nan_windows = np.argwhere(np.isnan(windows).sum(axis=-1) >= 2)
        if len(nan_windows):
            n, c, i, j = nan_windows[0]
            spots = np.argwhere(np.isnan(x[n, c, i * k:(i + 1) * k, j * k:(j + 1) * k]))
            moved = grad_ref.copy()
            (a, b), (d, e) = spots[0], spots[-1]
            moved[n, c, i * k + d, j * k + e] = moved[n, c, i * k + a, j * k + b]
            moved[n, c, i * k + a, j * k + b] = 0.0
            plants["a NaN window's gradient on another NaN"] = moved
        sent = grad_ref.copy()
        for n, c, i, j in np.argwhere(np.isneginf(windows).all(axis=-1)):
            if (i, j) != (0, 0):
                sent[n, c, 0, 0] += sent[n, c, i * k, j * k]
                sent[n, c, i * k, j * k] = 0.0
        plants["all -inf windows' gradients at index 0"] = sent
    return plants


def strategies_of(op_name: str) -> list[Strat]:
    if op_name == "maxpool2d":
        return [Strat(op_name, "values+indices"), Strat(op_name, "values+indices", ties="any"),
                Strat(op_name, "values")]
    return [Strat(op_name, "output")]


def judged_both_ways(strat, output, forward_ref, grad_ref, inputs, grad, dtype, params, mode,
                     device: str = "cpu") -> tuple:
    """(numpy's verdict, torch's verdict on ``device``) of one output in
    ``mode``, through training.compare, the harness's path (the output
    moved to the torch device or brought to the host, as the check does)."""
    host = training.compare(strat, output, forward_ref, grad_ref, inputs, grad, dtype, params, mode)
    on = training.compare(strat, output, on_torch(forward_ref, device), on_torch(grad_ref, device),
                          tensors(inputs, device), torch.from_numpy(grad).to(device), dtype, params, mode,
                          device=device)
    return host, on


def all_verdicts(op_name: str, dtype: str, cases: list[tuple[dict, str]], device: str = "cpu") -> list[tuple]:
    """Every (plant, strategy, mode) verdict over ``cases``, both ways: a list of
    (label, numpy's verdict, torch's verdict on ``device``)."""
    op = get_operator(op_name)
    found = []
    for params, mode in cases:
        inputs = rounded(op, params, mode, dtype)
        forward_ref = op.oracle(inputs, params)
        grad = common.round_to_dtype(op.gradient.generate(params, mode, 3), dtype)
        grad_ref = op.gradient.oracle(inputs, grad, params)
        forwards = planted_outputs(op_name, forward_ref, inputs, dtype, params)
        gradients = planted_gradients(op_name, grad_ref, inputs, params, dtype)
        for strat in strategies_of(op_name):
            def output_of(plant):
                if strat.returns == "values":
                    return in_dtype(float_part(plant), dtype)
                return tuple(in_dtype(part, dtype) for part in plant) if isinstance(plant, tuple) \
                    else in_dtype(plant, dtype)

            judged = [(training.FORWARD, name, output_of(plant)) for name, plant in forwards.items()]
            judged += [(training.BACKWARD, name, in_dtype(plant, dtype)) for name, plant in gradients.items()]
            judged += [(training.FORWARD_BACKWARD, f"{f_name} / {g_name}", (output_of(f_plant), in_dtype(g_plant, dtype)))
                       for f_name, f_plant in forwards.items() for g_name, g_plant in gradients.items()
                       if "right" in (f_name, g_name)]
            for training_mode, name, output in judged:
                host, on = judged_both_ways(strat, output, forward_ref, grad_ref, inputs, grad, dtype,
                                            params, training_mode, device)
                label = (params, mode, strat.returns, strat.ties, training_mode, name)
                found.append((label, host, on))
    return found


def assert_same_verdicts(found: list[tuple]) -> None:
    for label, host, device in found:
        assert verdict_bits(host) == verdict_bits(device), label


# maxpool2d's planted outputs in the other dtypes take 20-50 s each on the
# 2-core VM (its wide check cases, half a dozen plants, three tie rules):
# `make test` judges them, `make test-fast` bfloat16's (the dtype numpy lacks).
VERDICT_CASES = [pytest.param(op_name, dtype, marks=[pytest.mark.slow] if op_name == "maxpool2d"
                              and dtype != "bfloat16" else []) for op_name in OPS for dtype in DTYPES]


@pytest.mark.parametrize(("op_name", "dtype"), VERDICT_CASES)
def test_the_judge_gives_the_same_verdicts_on_numpy_and_on_torch(op_name, dtype):
    """Every check case and extra check, in both input modes, every training
    mode (forward, backward, forward+backward), right and planted wrong
    outputs: status, message, kinds of difference and figures, bit for bit.
    And the plants are found: not every verdict is ok."""
    found = all_verdicts(op_name, dtype, input_modes(get_operator(op_name), dtype))
    assert_same_verdicts(found)
    statuses = {host.status for _, host, _ in found}
    assert {status.OK, status.MISMATCH} <= statuses, statuses
    if op_name in RELATIVE:
        assert status.INEXACT in statuses
    right = [host.status for (*_, mode, name), host, _ in found if name in ("right", "right / right")]
    assert set(right) == {status.OK}
    modes = {label[4] for label, *_ in found}
    assert modes == set(training.MODES)


def test_a_judge_that_differs_by_namespace_is_caught(monkeypatch):
    """The agreement test can fail: a first difference named from the last
    True on torch (and the first on numpy) gives other messages."""
    real = common.first_true

    def last_on_torch(mask):
        if torch.is_tensor(mask):
            flipped = torch.flip(mask.reshape(-1), (0,))
            return tuple(int(i) for i in np.unravel_index(mask.numel() - 1 - int(flipped.to(torch.uint8).argmax()),
                                                          tuple(mask.shape)))
        return real(mask)

    monkeypatch.setattr(common, "first_true", last_on_torch)
    params = get_operator("maxunpool").check_cases()[3]
    with pytest.raises(AssertionError):
        assert_same_verdicts(all_verdicts("maxunpool", "float32", [(params, "adversarial")]))


def test_relative_figures_are_the_same_bits_however_the_arrays_are_cut(monkeypatch):
    """The norms' pairwise tree makes the figures independent of numpy's
    pieces (on threads) and torch's (in turn), and of where the array ends."""
    rng = np.random.default_rng(5)
    for size in (1, 7, 64, 1000, 4099):
        ref = rng.standard_normal(size)
        out = (ref * (1 + 3e-5 * rng.standard_normal(size))).astype(np.float32)
        whole = common.compare_relative("y", out, ref, "float32")
        for chunk in (8, 256):
            monkeypatch.setattr(common, "CHUNK_ELEMENTS", chunk)
            cut = common.compare_relative("y", out, ref, "float32")
            on_torch_cut = common.compare_relative("y", torch.from_numpy(out), torch.from_numpy(ref), "float32")
            assert verdict_bits(cut) == verdict_bits(whole) == verdict_bits(on_torch_cut), (size, chunk)
        monkeypatch.undo()
    assert whole.status == status.INEXACT


def test_tree_sum_adds_in_its_fixed_pairs():
    values = np.array([1.0, 2.0**-53, 2.0**-53, 0.0, 3.0])
    # (1 + 0) + (2**-53 + 3) ... p = 8: pairs (0,4), (1,5), (2,6), (3,7), then halves again
    assert common.tree_sum(values) == ((1.0 + 3.0) + 2.0**-53) + (2.0**-53 + 0.0)
    assert common.tree_sum(np.zeros(0)) == 0.0
    assert math.isnan(common.tree_sum(np.array([1.0, np.nan, 2.0])))
    assert common.tree_sum(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)) == 6.0


def test_non_arrays_and_wrong_dtypes_are_refused_alike():
    ref = np.zeros((2, 3))
    for out, device_out in ((None, None), (ref.astype(np.float16), torch.zeros((2, 3), dtype=torch.float16)),
                            (np.zeros((3, 2), np.float32), torch.zeros((3, 2))),
                            (np.array([object()] * 6).reshape(2, 3), np.array([object()] * 6).reshape(2, 3))):
        for compare in (common.compare_bitwise, common.compare_relative):
            host = compare("y", out, ref, "float32")
            device = compare("y", device_out, torch.from_numpy(ref), "float32")
            assert verdict_bits(host) == verdict_bits(device)
            assert host.status == status.MISMATCH


def test_on_device_keeps_a_tensor_and_takes_numpy_without_a_copy_of_its_values():
    array = np.arange(6.0).reshape(2, 3)
    moved = common.on_device((array, torch.ones(2)), "cpu")
    assert torch.is_tensor(moved[0]) and moved[0].tolist() == array.tolist() and moved[1].tolist() == [1.0, 1.0]
    assert isinstance(common.on_device(np.array([object()]), "cpu"), np.ndarray)  # refused by the compare


def test_every_builtin_operator_is_judged_in_any_namespace():
    assert all(OPERATORS[name].any_namespace for name in OPS)


@pytest.mark.cuda
@pytest.mark.parametrize("op_name", OPS)
def test_on_a_gpu_the_one_judge_gives_the_hosts_answers_and_verdicts(op_name):
    """The same on CUDA tensors (GPU kernels, float64 there): the oracles bit
    for bit, and every verdict of the first check cases, right and wrong."""
    op = get_operator(op_name)
    cases = input_modes(op)[:4]
    for params, mode in cases:
        inputs = rounded(op, params, mode, "float32")
        assert bits_equal(op.oracle(inputs, params), op.oracle(tensors(inputs, "cuda"), params)), (params, mode)
        grad = common.round_to_dtype(op.gradient.generate(params, mode, 3), "float32")
        assert bits_equal(op.gradient.oracle(inputs, grad, params),
                          op.gradient.oracle(tensors(inputs, "cuda"), torch.from_numpy(grad).cuda(), params))
    found = all_verdicts(op_name, "float32", cases[:2], device="cuda")
    assert_same_verdicts(found)
    assert {status.OK, status.MISMATCH} <= {host.status for _, host, _ in found}
