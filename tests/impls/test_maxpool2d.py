import numpy as np
import pytest

from impls import maxpool2d
from impls.registry import get_operator
from tests.helpers import maxpool_windows


def test_oracle_hand_worked_case():
    x = np.array([[1, 5, 2, 2, 9],
                  [3, 4, 2, 1, 9],
                  [7, 7, 0, 8, 9]], dtype=np.float64)[None, None]
    values, indices = maxpool2d.oracle({"x": x}, {"k": 2})
    # the last row and column are cropped; ties (2, 2 / 2) take the first
    np.testing.assert_array_equal(values, [[[[5, 2]]]])
    np.testing.assert_array_equal(indices, [[[[1, 2]]]])
    assert indices.dtype == np.int64


def test_oracle_index_uses_full_width_and_first_nan():
    x = np.zeros((1, 1, 4, 5))
    x[0, 0, 3, 2] = 10
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 1, 1] = np.nan
    values, indices = maxpool2d.oracle({"x": x}, {"k": 2})
    assert np.isnan(values[0, 0, 0, 0]) and indices[0, 0, 0, 0] == 0
    assert values[0, 0, 1, 1] == 10 and indices[0, 0, 1, 1] == 3 * 5 + 2


def test_oracle_agrees_with_a_plain_loop():
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, size=(2, 3, 7, 9)).astype(float)
    k = 2
    values, indices = maxpool2d.oracle({"x": x}, {"k": k})
    for n in range(2):
        for c in range(3):
            for i in range(3):
                for j in range(4):
                    window = x[n, c, i * k:(i + 1) * k, j * k:(j + 1) * k]
                    r, s = np.unravel_index(np.argmax(window), window.shape)
                    assert values[n, c, i, j] == window.max()
                    assert indices[n, c, i, j] == (i * k + r) * 9 + (j * k + s)


def test_adversarial_inputs_have_ties_nan_and_inf():
    x = maxpool2d.generate(dict(N=2, C=2, H=9, W=9, k=2), "adversarial", 0)["x"]
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    finite = x[np.isfinite(x)]
    # beside the planted windows of subnormals (tests/impls/test_subnormals.py), small integers
    integers = finite[(finite == 0) | (np.abs(finite) >= 1)]
    assert np.all(integers == np.round(integers)) and len(np.unique(integers)) <= 7
    assert (np.abs(finite[finite != 0]) < 1e-4).sum() == len(finite) - len(integers) > 0


def test_same_seed_same_inputs():
    a = maxpool2d.generate(dict(N=1, C=2, H=4, W=4, k=2), "random", 7)["x"]
    b = maxpool2d.generate(dict(N=1, C=2, H=4, W=4, k=2), "random", 7)["x"]
    np.testing.assert_array_equal(a, b)


def test_bytes_formula():
    params = dict(N=64, C=32, H=128, W=128, k=2)
    pooled = 64 * 32 * 64 * 64
    assert maxpool2d.bytes_moved(params, 4) == 64 * 32 * 128 * 128 * 4 + pooled * (4 + 8)
    assert maxpool2d.bytes_moved(params, 4, "values") == 64 * 32 * 128 * 128 * 4 + pooled * 4


def test_k_larger_than_plane_is_rejected():
    with pytest.raises(ValueError, match="k=5 is larger than the plane 4x4"):
        get_operator("maxpool2d").validate(dict(N=1, C=1, H=4, W=4, k=5))
    with pytest.raises(ValueError, match="k=7 is larger than the plane 4x4 padded by 1"):
        get_operator("maxpool2d").validate(dict(N=1, C=1, H=4, W=4, k=7, p=1))
    with pytest.raises(ValueError, match=r"p=2 is more than half the window k=3 \(PyTorch's limit"):
        get_operator("maxpool2d").validate(dict(N=1, C=1, H=8, W=8, k=3, s=2, p=2))
    get_operator("maxpool2d").validate(dict(N=1, C=1, H=4, W=4, k=5, p=2))  # a padded plane holds it


# ------------------------------------ overlapping and padded windows (SPEC 1.1, issue 50)
def _loop(x, params):
    """The contract read literally: per window, its real elements in row-major order, the
    first taken, a later one only when greater or the first NaN."""
    k, s, p = maxpool2d.window(params)
    N, C, H, W = x.shape
    h, w = maxpool2d.pooled_size(params)
    values, indices = np.empty((N, C, h, w)), np.empty((N, C, h, w), dtype=np.int64)
    for n, c, i, j in np.ndindex(N, C, h, w):
        best = where = None
        for di, dj in np.ndindex(k, k):
            r, q = i * s - p + di, j * s - p + dj
            if 0 <= r < H and 0 <= q < W:
                e = x[n, c, r, q]
                if best is None or e > best or (np.isnan(e) and not np.isnan(best)):
                    best, where = e, r * W + q
        values[n, c, i, j], indices[n, c, i, j] = best, where
    return values, indices


@pytest.mark.parametrize("params", maxpool2d.window_cases(), ids=lambda p: "x".join(str(v) for v in p.values()))
@pytest.mark.parametrize("mode", ["random", "adversarial"])
def test_the_window_oracle_agrees_with_a_direct_loop_and_torch_in_float64(params, mode):
    import torch
    import torch.nn.functional as F

    x = maxpool2d.generate(params, mode, 0)["x"]
    values, indices = maxpool2d.oracle({"x": x}, params)
    assert values.shape[2:] == maxpool2d.pooled_size(params)
    looped_values, looped_indices = _loop(x, params)
    np.testing.assert_array_equal(indices, looped_indices)
    np.testing.assert_array_equal(values.view(np.int64), looped_values.view(np.int64))  # bitwise: -0.0, NaN
    on_torch = maxpool2d.oracle({"x": torch.from_numpy(x)}, params)
    np.testing.assert_array_equal(on_torch[1].numpy(), indices)
    np.testing.assert_array_equal(on_torch[0].numpy().view(np.int64), values.view(np.int64))
    k, s, p = maxpool2d.window(params)
    torch_values, torch_indices = F.max_pool2d(torch.from_numpy(x), k, s, p, return_indices=True)
    if mode == "random":  # no ties, no NaN: torch's CPU kernel takes a NaN window's last NaN
        np.testing.assert_array_equal(torch_indices.numpy(), indices)
        np.testing.assert_array_equal(torch_values.numpy(), values)


def test_padding_is_never_the_maximum_nor_the_index():
    """An all -inf window at a padded edge points at its first real element (index 1 for the
    window whose padding and real elements start at column 1, not 0 nor a padded place); a
    window's maximum is its real elements' even when all are negative."""
    x = np.full((1, 1, 4, 4), -5.0)
    x[0, 0, :2, :] = -np.inf  # the first two rows
    values, indices = maxpool2d.oracle({"x": x}, dict(k=3, s=2, p=1))
    assert values.shape == (1, 1, 2, 2)
    assert np.isneginf(values[0, 0, 0, 0]) and indices[0, 0, 0, 0] == 0  # rows -1..1, cols -1..1
    assert np.isneginf(values[0, 0, 0, 1]) and indices[0, 0, 0, 1] == 1  # rows -1..1, cols 1..3: (0, 1)
    assert values[0, 0, 1, 1] == -5.0 and indices[0, 0, 1, 1] == 2 * 4 + 1  # rows 1..3, cols 1..3: (2, 1)
    np.testing.assert_array_equal(indices, _loop(x, dict(N=1, C=1, H=4, W=4, k=3, s=2, p=1))[1])


def test_an_index_in_an_overlapping_neighbours_window_is_wrong():
    """With ties="any", an index must point at a maximum inside its own window: one in the
    next window (they share a column at s=2, k=3), equal to the maximum, is still wrong."""
    from impls import common
    from impls.status import MISMATCH, OK

    params = dict(N=1, C=1, H=3, W=5, k=3, s=2)
    x = np.zeros((1, 1, 3, 5))
    x[0, 0, 0, 2] = x[0, 0, 0, 4] = 7.0  # window 0 (cols 0-2) and window 1 (cols 2-4) both hold a 7
    values, indices = maxpool2d.oracle({"x": x}, params)
    np.testing.assert_array_equal(indices, [[[[2, 2]]]])  # the shared column's 7 is first in both
    strat = get_operator("maxpool2d").strategies["torch_max_pool2d_indices"]
    import dataclasses
    anywhere = dataclasses.replace(strat, ties="any")
    ok = maxpool2d.compare((values, np.array([[[[2, 4]]]])), (values, indices), {"x": x}, "float64", anywhere, params)
    assert ok.status == OK  # col 4 is window 1's own, and a maximum
    x[0, 0, 0, 0] = 7.0
    values, indices = maxpool2d.oracle({"x": x}, params)
    wrong = maxpool2d.compare((values, np.array([[[[4, 2]]]])), (values, indices), {"x": x}, "float64",
                              anywhere, params)  # window 0 pointing at col 4: a 7, but window 1's
    assert wrong.status == MISMATCH and wrong.differences == {common.INDEX}


EVERY_WINDOW = ("torch_max_pool2d", "torch_max_pool2d_indices", "jax_reduce_window", "numpy_sliding_window",
                "numba_fused", "triton_fused")


def test_a_strategy_written_for_plain_windows_is_skipped_on_others_never_wrong():
    from harness.measuring import check
    from impls import training
    from impls.backends import get_backend
    from impls.status import OK, SKIPPED

    op = get_operator("maxpool2d")
    params = maxpool2d.window_cases()[0]
    for name, strat in op.strategies.items():
        reason = training.applies(strat, "forward", params)
        if name in EVERY_WINDOW:
            assert reason is None, name
        else:
            assert reason.startswith("not for this case: written for k×k windows at stride k"), name
            assert training.applies(strat, "forward", dict(N=1, C=1, H=4, W=4, k=2)) is None
    ref = check.reference("maxpool2d", params, "float32", "adversarial", 0)
    skipped = check.attempt(op.strategies["torch_reshape_argmax"], ref, "float32", "cpu")
    assert skipped.verdict.status == SKIPPED and "not overlapping or padded ones" in skipped.verdict.message
    for name in EVERY_WINDOW:
        for layout in get_backend(op.strategies[name].backend).layouts:
            judged = check.attempt(op.strategies[name], ref, "float32", "cpu", layout)
            assert judged.verdict.status == OK, (name, layout, judged.verdict.message)
    # the training modes are judged too, for every strategy with a backward that takes the window
    for name in ("torch_max_pool2d", "torch_max_pool2d_indices", "numpy_sliding_window", "numba_fused",
                 "triton_fused"):
        for mode in training.TRAINING_MODES:
            assert training.applies(op.strategies[name], mode, params) is None, (name, mode)
            training_ref = check.reference("maxpool2d", params, "float32", "adversarial", 0, mode)
            judged = check.attempt(op.strategies[name], training_ref, "float32", "cpu")
            assert judged.verdict.status == OK, (name, mode, judged.verdict.message)


@pytest.mark.parametrize("params", maxpool2d.window_cases(), ids=lambda p: "x".join(str(v) for v in p.values()))
def test_the_backward_oracle_sums_collisions_as_a_scatter_add_does(params):
    """Where windows overlap, one input may be the maximum of several: the oracle sends it their
    sum (SPEC 1.5), as numpy_sliding_window's backward (np.add.at) does; with s = 1 some input
    collects several, so the case holds a collision."""
    x = maxpool2d.generate(params, "random", 1)["x"]
    grad = np.random.default_rng(2).standard_normal((params["N"], params["C"], *maxpool2d.pooled_size(params)))
    _, indices = maxpool2d.oracle({"x": x}, params)
    expected = maxpool2d.grad_oracle({"x": x}, grad, params)
    got = maxpool2d.numpy_scatter_backward({"x": x}, params)((None, indices), grad)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    counts = np.bincount((indices + x.shape[2] * x.shape[3] * np.arange(x.shape[0] * x.shape[1]).reshape(
        x.shape[0], x.shape[1], 1, 1)).reshape(-1))
    k, s, _ = maxpool2d.window(params)
    if s >= k:
        assert counts.max() == 1  # no overlap, no collision
    if s == 1:
        assert counts.max() > 1  # stride 1: a maximum shared by neighbouring windows


# ------------------------------------------------ the backward where windows overlap (SPEC 1.5)
def _landing(x, params):
    """(N*C*h*w,) each window's input, flat over the whole tensor, by the oracle's indices."""
    _, indices = maxpool2d.oracle({"x": x}, params)
    N, C, H, W = x.shape
    return (indices + H * W * np.arange(N * C).reshape(N, C, 1, 1)).reshape(-1)


def _scattered(x, grad, params, dtype, order=slice(None), add=True):
    """A backward in ``dtype``: each window's gradient added (or written) at the oracle's index, windows
    taken in ``order``."""
    landing, sent = _landing(x, params)[order], grad.reshape(-1).astype(dtype)[order]
    grad_x = np.zeros(x.size, dtype=dtype)
    if add:
        for where, value in zip(landing, sent):  # one at a time, in the dtype: the sum's own rounding
            grad_x[where] = grad_x[where] + value
    else:
        grad_x[landing] = sent
    return grad_x.reshape(x.shape)


def _judged(out, x, grad, params, dtype, ties="first"):
    class Declared:
        pass

    Declared.ties = ties
    return maxpool2d.grad_compare(out, maxpool2d.grad_oracle({"x": x}, grad, params), {"x": x}, grad, dtype,
                                  Declared, params)


OVERLAPPING = [p for p in maxpool2d.window_cases() if maxpool2d.window(p)[1] < p["k"]]


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("params", OVERLAPPING, ids=lambda p: "x".join(str(v) for v in p.values()))
def test_colliding_gradients_are_judged_by_their_sum_in_any_order_and_a_lost_one_is_caught(params, dtype):
    """Adversarial inputs and hostile gradients: the sums added in the dtype, in window order and
    reversed, are ok (a different rounding, or overflow, in some order); the gradients written, not
    added (the last window wins an input), and one colliding gradient dropped, are mismatches."""
    from impls.common import round_to_dtype

    x = round_to_dtype(maxpool2d.generate(params, "adversarial", 0)["x"], dtype)
    grad = round_to_dtype(maxpool2d.generate_grad(params, "adversarial", 0), dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        for order in (slice(None), slice(None, None, -1)):
            verdict = _judged(_scattered(x, grad, params, dtype, order), x, grad, params, dtype)
            assert verdict.status == "ok", verdict.message
        written = _scattered(x, grad, params, dtype, add=False)
        assert _judged(written, x, grad, params, dtype).status == "mismatch"
        landing, sent = _landing(x, params), grad.reshape(-1)
        ordinary = {where for where in np.flatnonzero(np.bincount(landing) >= 2)  # inputs where only integers collide
                    if all(1 <= abs(value) <= 251 for value in sent[landing == where])}
        dropped = grad.copy()
        dropped.reshape(-1)[next(t for t, where in enumerate(landing) if where in ordinary)] = 0.0
        lost = _scattered(x, dropped, params, dtype)
        verdict = _judged(lost, x, grad, params, dtype)
        assert verdict.status == "mismatch" and "compared with their sum within its rounding" in verdict.message


def test_colliding_sums_hold_each_rule_of_their_rounding():
    """One input, the maximum of two windows (k=2, s=1 on a 1x3 row... planted as a 2x3 plane whose
    middle column holds the maximum of both windows): overflow is ±inf, a flushed subnormal sum and a
    finite answer to an overflowing sum are wrong, NaN + anything is NaN, L + 1 - L may be 0 or 1."""
    params = dict(N=1, C=1, H=2, W=3, k=2, s=1)
    x = np.array([[[[0.0, 5.0, 0.0], [0.0, 0.0, 0.0]]]])
    f32 = np.finfo(np.float32)
    tiny = float(f32.smallest_subnormal)

    def judged(a, b, got):
        out = np.zeros((1, 1, 2, 3), dtype=np.float32)
        out[0, 0, 0, 1] = got
        return _judged(out, x, np.array([[[[a, b]]]]), params, "float32").status

    largest = float(f32.max)
    assert judged(largest, largest, np.inf) == "ok"  # overflows in any float32 order
    assert judged(largest, largest, largest) == "mismatch"
    assert judged(tiny, 2 * tiny, 3 * tiny) == "ok"  # subnormal sums are exact
    assert judged(tiny, 2 * tiny, 0.0) == "mismatch"  # flushed
    assert judged(np.nan, 5.0, np.nan) == "ok"
    assert judged(np.nan, 5.0, 5.0) == "mismatch"
    assert judged(np.inf, -np.inf, np.nan) == "ok"
    assert judged(np.inf, 7.0, np.inf) == "ok" and judged(np.inf, 7.0, -np.inf) == "mismatch"
    assert judged(1.0, 2.0 ** -30, 1.0) == "ok"  # rounded to float32
    assert judged(1.0, 2.0 ** -10, 1.0) == "mismatch"  # beyond any float32 rounding


def test_a_nan_windows_gradient_may_land_on_any_of_its_nans_among_overlapping_windows():
    """Stride 1, a 2x2 block of NaNs shared by several windows: PyTorch's CPU kernel points each
    at its last NaN, the oracle at its first; both are arrangements the judge finds. A gradient
    moved onto a number of the window is a mismatch."""
    import torch

    params = maxpool2d.window_cases()[1]  # k3 s1 p1
    x = maxpool2d.generate(params, "adversarial", 0)["x"]
    grad = maxpool2d.generate_grad(params, "adversarial", 0)
    values, _ = maxpool2d.oracle({"x": x}, params)
    assert (np.isnan(maxpool_windows(x, params)).sum(axis=-1) >= 2).any()  # windows with a choice
    leaf = torch.from_numpy(x).requires_grad_(True)
    k, s, p = maxpool2d.window(params)
    (torch_grad,) = torch.autograd.grad(torch.nn.functional.max_pool2d(leaf, k, s, p), leaf, torch.from_numpy(grad))
    assert not np.array_equal(np.nan_to_num(torch_grad.numpy(), nan=9.0),
                              np.nan_to_num(maxpool2d.grad_oracle({"x": x}, grad, params), nan=9.0))
    assert _judged(torch_grad.numpy(), x, grad, params, "float64").status == "ok"
    # the first NaN window's gradient moved onto a real number of its window
    n, c, i, j = np.argwhere(np.isnan(values) & np.isfinite(grad) & (grad != 0))[0]
    window_rows = range(max(i * s - p, 0), min(i * s - p + k, x.shape[2]))
    window_cols = range(max(j * s - p, 0), min(j * s - p + k, x.shape[3]))
    r, col = next((r, col) for r in window_rows for col in window_cols if np.isfinite(x[n, c, r, col]))
    wrong = torch_grad.numpy().copy()
    wrong[n, c, r, col] += grad[n, c, i, j] * 1024
    assert _judged(wrong, x, grad, params, "float64").status == "mismatch"


@pytest.mark.parametrize("params", OVERLAPPING, ids=lambda p: "x".join(str(v) for v in p.values()))
def test_adversarial_overlapping_windows_hold_shared_maxima_nans_ties_and_colliding_hostile_gradients(params):
    """SPEC 1.5's hostile cases where windows overlap: an input the maximum of every window covering
    it, a NaN there, a tie across windows, and the colliding windows' gradients overflowing,
    subnormal, NaN and infinite, in every float type."""
    x = maxpool2d.generate(params, "adversarial", 0)["x"]
    grad = maxpool2d.generate_grad(params, "adversarial", 0).reshape(-1)
    k, s, _ = maxpool2d.window(params)
    most = (-(-k // s)) ** 2  # windows covering one input, at most
    landing = _landing(x, params)
    counts = np.bincount(landing)
    flat = x.reshape(-1)
    counts = np.bincount(landing, minlength=x.size)
    assert (flat[counts == most] == 4).any(), "no input the maximum of every window covering it"
    assert np.isnan(flat[counts == most]).any(), "no NaN the maximum of every window covering it"
    groups = [np.flatnonzero(landing == where) for where in np.flatnonzero(counts >= 2)]
    sent = [list(map(float, grad[group])) for group in groups]
    largest32, tiny32 = float(np.finfo(np.float32).max), float(np.finfo(np.float32).smallest_subnormal)
    assert any(np.isnan(values).any() for values in sent)
    assert any({np.inf, -np.inf} <= set(values) for values in sent)
    assert any(values.count(largest32) >= 2 for values in sent), "no two float32 largest values colliding"
    assert any({tiny32, 2 * tiny32} <= set(values) for values in sent)
    if most >= 3:
        assert any({largest32, 1.0, -largest32} <= set(values) for values in sent)
    # a tie across windows: a window whose first maximum is not the input it shares with its neighbours
    windows = maxpool_windows(x, params)
    tied = (windows == np.max(np.where(np.isnan(windows), -np.inf, windows), axis=-1, keepdims=True)).sum(-1) >= 2
    assert tied.any()


# ------------------------------------------------ signed zeros (issue 13, class 3)
@pytest.mark.parametrize("params", [p for p in maxpool2d.check_cases() if p["k"] > 1 and p["H"] * p["W"] > p["k"] ** 2],
                         ids=lambda p: "x".join(str(v) for v in p.values()))
def test_adversarial_inputs_tie_zeros_of_both_signs_in_both_orders(params):
    """Windows whose maximum is zero with -0.0 first and +0.0 later, and the
    reverse: the first maximum's own bits are the answer (docs/SPEC.md §1.1)."""
    x = maxpool2d.generate(params, "adversarial", 0)["x"]
    windows = maxpool_windows(x, params).reshape(-1, params["k"] ** 2)
    zero_max = windows[(np.nanmax(np.where(np.isnan(windows), -np.inf, windows), axis=1) == 0)
                       & ~np.isnan(windows).any(axis=1)]
    first_zero = np.array([row[row == 0][0] for row in zero_max])
    mixed = np.array([np.signbit(row[row == 0]).any() and (~np.signbit(row[row == 0])).any() for row in zero_max])
    assert (mixed & np.signbit(first_zero)).any(), "no window with -0.0 first and +0.0 later"
    assert (mixed & ~np.signbit(first_zero)).any(), "no window with +0.0 first and -0.0 later"


def test_oracle_keeps_the_first_zeros_sign():
    x = np.array([[-0.0, 0.0, 0.0, -0.0], [-1.0, -1.0, -1.0, -1.0]])[None, None]
    values, indices = maxpool2d.oracle({"x": x}, {"k": 2})
    assert np.signbit(values[0, 0, 0, 0]) and not np.signbit(values[0, 0, 0, 1])
    np.testing.assert_array_equal(indices, [[[[0, 2]]]])


@pytest.mark.parametrize("name", ["seed_loops", "seed_reshape_max"])
def test_numpy_max_seeds_are_reported_for_the_sign_of_zero(name):
    """The seeds keep numpy's ``max``, which returns the later zero: the
    compare says so in words (the check then names the known defect)."""
    from harness.measuring.check import reference

    strat = get_operator("maxpool2d").strategies[name]
    params = dict(N=2, C=3, H=8, W=8, k=2)
    ref = reference("maxpool2d", params, "float32", "adversarial", 0)
    out = strat.prepare(get_operator("maxpool2d").to_backend(ref.inputs, "numpy", "cpu", "float32"), params)()
    verdict = maxpool2d.compare(out, ref.expected, ref.inputs, "float32", strat, ref.params)
    assert verdict.status == "mismatch"
    assert verdict.differences == {"zero-sign"}
    assert "values: sign of zero differs at" in verdict.message
    assert "(got +0.0, expected -0.0)" in verdict.message or "(got -0.0, expected +0.0)" in verdict.message


# --------------------------------------- all -inf windows everywhere (class 4)
@pytest.mark.parametrize("params", maxpool2d.check_cases(), ids=lambda p: "x".join(str(v) for v in p.values()))
def test_all_neg_inf_windows_away_from_the_origin(params):
    """Where the plane has more than one window, some all -inf windows are not
    at (0, 0): in the middle, on the last row or the last column, each to
    yield its own first element's index (never 0)."""
    h, w = maxpool2d.pooled_size(params)
    x = maxpool2d.generate(params, "adversarial", 0)["x"]
    values, indices = maxpool2d.oracle({"x": x}, params)
    where = [tuple(int(v) for v in p[2:]) for p in np.argwhere(np.isneginf(values))]
    if h * w == 1:
        return  # one window per plane: only the origin exists
    away = [p for p in where if p != (0, 0)]
    assert away, f"every all -inf window is at the origin: {where}"
    if h > 2 and w > 2:
        assert any(0 < i < h - 1 and 0 < j < w - 1 for i, j in away), f"none inside the plane: {where}"
    if h > 1:
        assert any(i == h - 1 for i, _ in away), f"none on the last row: {where}"
    if w > 1:
        assert any(j == w - 1 for _, j in away), f"none on the last column: {where}"
    neg = np.isneginf(values)
    assert (indices[neg] != 0).any()
