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
    assert np.all(finite == np.round(finite)) and len(np.unique(finite)) <= 7


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
