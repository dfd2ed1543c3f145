"""The compares walk their arrays in pieces over threads (common.over_chunks):
a difference in any piece is found, named where it is, and the relative error
is the whole-array formula's."""

import numpy as np
import pytest

from impls import common


@pytest.fixture
def small_pieces(monkeypatch):
    monkeypatch.setattr(common, "CHUNK_ELEMENTS", 64)  # 1,000 elements: 16 pieces on the thread pool


def test_a_bitwise_difference_in_the_last_piece_is_found_where_it_is(small_pieces):
    ref = np.arange(1000, dtype=np.float64).reshape(10, 100)
    out = ref.astype(np.float32)
    assert common.compare_bitwise("v", out, ref, "float32").status == "ok"
    out[9, 99] = -0.5
    verdict = common.compare_bitwise("v", out, ref, "float32")
    assert verdict.status == "mismatch" and "(9, 99)" in verdict.message and "1 elements differ" in verdict.message


def test_a_non_contiguous_output_is_compared_in_c_order(small_pieces):
    ref = np.arange(1000, dtype=np.float64).reshape(10, 100)
    out = np.asfortranarray(ref.astype(np.float32))
    assert common.compare_bitwise("v", out, ref, "float32").status == "ok"
    out[3, 7] += 1
    assert "(3, 7)" in common.compare_bitwise("v", out, ref, "float32").message
    out[3, 7] += 1000
    assert "(3, 7)" in common.compare_relative("v", out, ref, "float32").message


def test_relative_error_is_the_whole_array_formula(small_pieces):
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((7, 143))
    out = (ref * (1 + rng.standard_normal(ref.shape) * 1e-3)).astype(np.float32)
    verdict = common.compare_relative("x", out, ref, "float32")
    diff = out.astype(np.float64) - ref
    assert verdict.rel_err == pytest.approx(np.linalg.norm(diff) / np.linalg.norm(ref), rel=1e-12)
    assert verdict.max_abs_err == np.abs(diff).max()
    assert verdict.status == "inexact"
    worst = tuple(int(i) for i in np.unravel_index(np.abs(diff).argmax(), ref.shape))
    assert f"first difference at {worst}" in verdict.message


def test_a_non_finite_element_in_a_later_piece_is_named(small_pieces):
    ref = np.ones((1000,))
    out = ref.astype(np.float16)
    out[777] = np.inf
    verdict = common.compare_relative("x", out, ref, "float16")
    assert verdict.differences == {common.NON_FINITE} and "(777,)" in verdict.message


def test_rounding_to_a_dtype_in_pieces_is_numpys_cast(small_pieces):
    values = np.random.default_rng(1).standard_normal(1000) * 1e5
    with np.errstate(over="ignore"):
        for dtype in ("float16", "float32", "float64"):
            assert np.array_equal(common.round_to_dtype(values, dtype), values.astype(dtype).astype(np.float64))


def test_a_nan_in_the_reference_is_a_mismatch_wherever_it_lies(small_pieces):
    """Combined over the pieces with NaN carried through (Python's max() keeps
    a NaN only when it comes first): the verdict does not depend on which
    piece holds it, and the message names it instead of raising."""
    for where in (0, 999):
        ref = np.ones(1000)
        ref[where] = np.nan
        verdict = common.compare_relative("x", np.ones(1000, dtype=np.float32), ref, "float32")
        assert verdict.status == "mismatch" and f"({where},)" in verdict.message, (where, verdict)


def test_rounding_keeps_a_scalars_and_a_fortran_arrays_form():
    assert common.round_to_dtype(np.float64(7e4), "float32") == 7e4
    fortran = np.asfortranarray(np.random.default_rng(2).standard_normal((30, 40)))
    assert common.round_to_dtype(fortran, "float16").flags.f_contiguous
