import numpy as np
import pytest

from impls import maxpool2d
from impls.registry import get_operator


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


# ------------------------------------------------ signed zeros (issue 13, class 3)
def _windows(x, k):
    N, C, H, W = x.shape
    h, w = H // k, W // k
    return (x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).transpose(0, 1, 2, 4, 3, 5)
            .reshape(N, C, h, w, k * k))


@pytest.mark.parametrize("params", [p for p in maxpool2d.check_cases() if p["k"] > 1 and p["H"] * p["W"] > p["k"] ** 2],
                         ids=lambda p: "x".join(str(v) for v in p.values()))
def test_adversarial_inputs_tie_zeros_of_both_signs_in_both_orders(params):
    """Windows whose maximum is zero with -0.0 first and +0.0 later, and the
    reverse: the first maximum's own bits are the answer (docs/SPEC.md §1.1)."""
    x = maxpool2d.generate(params, "adversarial", 0)["x"]
    windows = _windows(x, params["k"]).reshape(-1, params["k"] ** 2)
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
    k = params["k"]
    h, w = params["H"] // k, params["W"] // k
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
