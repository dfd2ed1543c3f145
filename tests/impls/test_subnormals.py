"""Subnormal numbers in the adversarial sets (issue 31, item 6): every dtype's
check holds subnormals of its own type where the contract covers them
(max-pool values, unpool values, the pinv mask); a strategy that flushes them
is caught; the JAX strategies pass, or show under their known defect."""

import contextlib
import io

import numpy as np
import pytest
import torch

from harness.measuring.check import (
    MODES,
    UPSTREAM_DEFECT,
    adversarial_set,
    check_strategy,
    extra_set,
    reference,
)
from impls import common, defects, dispersion, dispersion_pinv, maxpool2d, maxunpool
from impls.registry import every_case, get_operator
from tests.helpers import maxpool_windows

DTYPES = ("float64", "float32", "bfloat16", "float16")
NUMPY_DTYPES = ("float64", "float32", "float16")  # numpy has no bfloat16


def flush(values: np.ndarray, dtype: str) -> np.ndarray:
    """What a backend that flushes subnormals reads: each one a zero of its sign."""
    return np.where(common.is_subnormal(values, dtype), np.copysign(0.0, values), values)


def test_subnormal_table_is_each_types_own():
    for dtype in ("float64", "float32", "float16"):
        info = np.finfo(dtype)
        assert common.SUBNORMAL_UNIT[dtype] == info.smallest_subnormal
        assert common.SUBNORMAL_UNIT[dtype] * common.SUBNORMAL_STEPS[dtype] == info.smallest_normal
    info = torch.finfo(torch.bfloat16)
    assert common.SUBNORMAL_UNIT["bfloat16"] == info.tiny * info.eps
    assert common.SUBNORMAL_UNIT["bfloat16"] * common.SUBNORMAL_STEPS["bfloat16"] == info.tiny
    for dtype in DTYPES:
        # exact in their own type: the rounding the check applies keeps them
        values = common.subnormal(dtype, [1, -1, common.SUBNORMAL_STEPS[dtype] - 1])
        np.testing.assert_array_equal(common.round_to_dtype(values, dtype), values)
        assert common.is_subnormal(values, dtype).all()
        assert not common.is_subnormal(common.subnormal(dtype, [0, common.SUBNORMAL_STEPS[dtype]]), dtype).any()


# ------------------------------------------------------------------ maxpool2d
def _pooled_windows(x, params):
    """Every window of the case's geometry (stride, padding) as a row, its padding -inf."""
    return maxpool_windows(x, params).reshape(-1, params["k"] ** 2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_maxpool_adversarial_set_holds_each_dtypes_subnormal_windows(dtype):
    """Across the check cases, in each dtype: windows whose maximum is one of
    its subnormals, ties among subnormals, and subnormals of both signs beside
    -0.0 and +0.0."""
    maximum, tie, both_signs_by_zeros, negative_maximum = 0, 0, 0, 0
    for params in maxpool2d.check_cases():
        ref = reference("maxpool2d", params, dtype, "adversarial", 0)
        values, _ = ref.expected
        maximum += int(common.is_subnormal(values, dtype).sum())
        negative_maximum += int((common.is_subnormal(values, dtype) & (values < 0)).sum())
        for row in _pooled_windows(ref.inputs["x"], params):
            if np.isnan(row).any():
                continue
            tiny = common.is_subnormal(row, dtype)
            top = row.max()
            tie += bool(common.is_subnormal(np.array([top]), dtype)[0] and (row == top).sum() > 1)
            zeros = row[row == 0]
            both_signs_by_zeros += bool(tiny.any() and (row[tiny] > 0).any() and (row[tiny] < 0).any()
                                        and np.signbit(zeros).any() and (~np.signbit(zeros)).any())
    assert maximum >= 5 and negative_maximum and tie and both_signs_by_zeros, \
        (maximum, negative_maximum, tie, both_signs_by_zeros)


def test_the_issues_window_is_planted_in_float64():
    """[1e-323, 3e-323, 2e-323, 5e-324]: numpy's argmax is 1, a flushed one 0."""
    x = maxpool2d.generate(maxpool2d.check_cases()[0], "adversarial", 0)["x"]
    rows = _pooled_windows(x, maxpool2d.check_cases()[0])
    assert any(np.array_equal(row, [1e-323, 3e-323, 2e-323, 5e-324]) for row in rows)


def _flushing_sliding_window(inputs, params):
    """numpy_sliding_window on x as a backend that flushes subnormals reads
    it, its values then gathered from the unflushed x (a flush in the
    compare only, as JAX's was)."""
    x = inputs["x"]
    dtype = {np.float64: "float64", np.float32: "float32", np.float16: "float16"}[x.dtype.type]
    run = maxpool2d.numpy_sliding_window({"x": flush(x.astype(np.float64), dtype).astype(x.dtype)}, params)

    def call():
        _, indices = run()
        N, C, H, W = x.shape
        values = np.take_along_axis(x.reshape(N, C, H * W), indices.reshape(N, C, -1), axis=-1)
        return values.reshape(indices.shape), indices
    return call


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_a_max_pool_that_flushes_subnormals_fails_the_adversarial_check(planted, dtype):
    """Would pass if the generator held no subnormals: every case's random
    mode does, and so does an adversarial case without them."""
    strat = planted("maxpool2d", "flushes_subnormals", _flushing_sliding_window, ties="first",
                    returns="values+indices", dtypes=NUMPY_DTYPES, outside_when=every_case)  # as numpy_sliding_window
    failed = []
    for params in maxpool2d.check_cases():
        random = check_strategy(strat, params, dtype, "cpu", reference("maxpool2d", params, dtype, "random", 0))
        assert random.status == "ok", random.message
        verdict = check_strategy(strat, params, dtype, "cpu", reference("maxpool2d", params, dtype, "adversarial", 0))
        if verdict.status != "ok":
            assert verdict.status == "mismatch"
            assert verdict.differences <= {common.FLUSHED_SUBNORMAL, common.SUBNORMAL, common.SUBNORMAL_WINDOW_INDEX,
                                           common.ZERO_SIGN}
            failed.append(params)
    assert len(failed) >= 5, failed


def test_index_differences_in_subnormal_windows_are_named_apart():
    """A wrong index in a window holding a subnormal is its own kind; one
    elsewhere stays "index", so no defect of the first excuses the second."""
    params = maxpool2d.check_cases()[0]
    ref = reference("maxpool2d", params, "float32", "adversarial", 0)
    values, indices = ref.expected
    strat = get_operator("maxpool2d").strategies["numpy_sliding_window"]
    x = ref.inputs["x"]
    windows = maxpool2d._windows_holding_subnormals(x, maxpool2d.window(params), "float32")
    assert x.shape[-1] % 2 == 0  # flipping an index's lowest bit moves it to the other column of its window
    wrong = indices.copy()
    tiny_window = tuple(np.argwhere(windows & np.isfinite(values))[0])
    wrong[tiny_window] ^= 1
    verdict = maxpool2d.compare((values.astype(np.float32), wrong), ref.expected, ref.inputs, "float32", strat, params)
    assert verdict.differences == {common.SUBNORMAL_WINDOW_INDEX}
    plain_window = tuple(np.argwhere(~windows & np.isfinite(values))[0])
    wrong[plain_window] ^= 1
    verdict = maxpool2d.compare((values.astype(np.float32), wrong), ref.expected, ref.inputs, "float32", strat, params)
    assert verdict.differences == {common.SUBNORMAL_WINDOW_INDEX, common.INDEX}


def test_bitwise_compare_names_subnormal_differences():
    tiny = common.subnormal("float32", 3)
    ref = np.array([tiny, -tiny, 1.0, 0.0])
    flushed = np.array([0.0, -0.0, 1.0, 0.0], dtype=np.float32)
    assert common.compare_bitwise("v", flushed, ref, "float32").differences == {common.FLUSHED_SUBNORMAL}
    changed = np.array([tiny * 2, -tiny, 1.0, common.subnormal("float32", 1)], dtype=np.float32)
    assert common.compare_bitwise("v", changed, ref, "float32").differences == {common.SUBNORMAL}
    # a normal number where a subnormal belongs is a wrong value, not a flush
    wrong = np.array([1.0, -tiny, 1.0, 0.0], dtype=np.float32)
    assert common.compare_bitwise("v", wrong, ref, "float32").differences == {common.VALUE}
    # float16 subnormals are judged by float16's range
    half = common.subnormal("float16", 5)
    out = np.array([0.0], dtype=np.float16)
    assert common.compare_bitwise("v", out, np.array([half]), "float16").differences == {common.FLUSHED_SUBNORMAL}


# ------------------------------------------------------------------ maxunpool
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["adversarial", "scattered"])
def test_unpool_adversarial_values_hold_each_dtypes_subnormals(dtype, mode):
    cases = maxunpool.check_cases() if mode == "adversarial" else [e["params"] for e in maxunpool.extra_checks()]
    for form in ("1d", "2d"):
        found = np.concatenate([reference("maxunpool", params, dtype, mode, 0).inputs["values"].ravel()
                                for params in cases if params["form"] == form])
        tiny = found[common.is_subnormal(found, dtype)]
        assert (tiny > 0).any() and (tiny < 0).any(), (form, tiny)


def _flushing_put_along_axis(inputs, params):
    values = inputs["values"]
    dtype = {np.float64: "float64", np.float32: "float32", np.float16: "float16"}[values.dtype.type]
    flushed = flush(values.astype(np.float64), dtype).astype(values.dtype)
    return maxunpool.numpy_put_along_axis({"values": flushed, "positions": inputs["positions"]}, params)


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_an_unpool_that_flushes_subnormals_fails_the_adversarial_check(planted, dtype):
    strat = planted("maxunpool", "flushes_subnormals", _flushing_put_along_axis, dtypes=NUMPY_DTYPES)
    op = get_operator("maxunpool")
    check_cases, _ = adversarial_set(op, strat)
    work = [(params, mode) for params in check_cases for mode in MODES]
    work += [(params, mode) for params, this_dtype, mode, _ in extra_set(op, strat, dtype) if this_dtype == dtype]
    verdicts = [check_strategy(strat, params, dtype, "cpu", reference("maxunpool", params, dtype, mode, 0))
                for params, mode in work]
    assert {v.status for v in verdicts} == {"ok", "mismatch"}
    assert all(v.differences == {common.FLUSHED_SUBNORMAL} for v in verdicts if v.status == "mismatch")
    assert sum(v.status == "mismatch" for v in verdicts) >= len(check_cases)


# ------------------------------------------------------------ dispersion_pinv
@pytest.mark.parametrize("dtype", DTYPES)
def test_pinv_has_a_subnormal_mask_check_in_each_dtype(dtype):
    mode = dispersion_pinv.subnormal_mask_mode(dtype)
    extras = [e for e in dispersion_pinv.extra_checks() if mode in e.get("modes", ())]
    assert len(extras) == 1 and extras[0]["dtypes"] == (dtype,)
    params = extras[0]["params"]
    ref = reference("dispersion_pinv", params, dtype, mode, 0)
    mask = ref.inputs["mask"]
    assert common.is_subnormal(mask, dtype).sum() == params["H"]  # one per row
    assert (mask > 0).all()
    assert np.isfinite(ref.expected).all()
    # y stays in dispersion's range of normal numbers (docs/SPEC.md §2)
    assert not common.is_subnormal(ref.inputs["y"], dtype).any()


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_pinv_entry_point_accepts_a_subnormal_mask(dtype):
    params = dispersion.check_cases()[0]
    ref = reference("dispersion_pinv", params, dtype, dispersion_pinv.subnormal_mask_mode(dtype), 0)
    y, mask = ref.inputs["y"].astype(dtype), ref.inputs["mask"].astype(dtype)
    for backend_y, backend_mask in ((y, mask), (torch.from_numpy(y), torch.from_numpy(mask))):
        x = common.to_numpy(dispersion_pinv.dispersion_pinv(backend_y, backend_mask, params["S"], params["C"]))
        assert dispersion_pinv.compare(x, ref.expected, ref.inputs, dtype, None).status == "ok"


@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16"])
def test_a_pinv_that_flushes_the_mask_fails(planted, dtype):
    def flushes_mask(inputs, params):
        mask = inputs["mask"]
        flushed = torch.from_numpy(flush(mask.double().numpy(), dtype)).to(mask.dtype)
        return dispersion_pinv.seed_loop_cat({"y": inputs["y"], "mask": flushed}, params)

    strat = planted("dispersion_pinv", "flushes_mask", flushes_mask, backend="torch", dtypes=DTYPES)
    params = dispersion.check_cases()[0]
    for mode in ("adversarial", dispersion_pinv.subnormal_mask_mode(dtype)):
        verdict = check_strategy(strat, params, dtype, "cpu", reference("dispersion_pinv", params, dtype, mode, 0))
        if mode == "adversarial":
            assert verdict.status == "ok"
        else:
            assert verdict.status == "mismatch" and verdict.differences == {common.NON_FINITE}, verdict


def test_relative_compare_of_values_near_float64s_largest():
    """A float64 subnormal mask makes quotients near 2**1023: their squares
    overflow, the relative error must not."""
    ref = np.array([2.0**1023, -(2.0**1022), 3.0])
    assert common.compare_relative("x", ref * (1 + 2**-52), ref, "float64").status == "ok"
    assert common.compare_relative("x", ref * 1.5, ref, "float64").status == "mismatch"
    assert common.compare_relative("x", np.array([np.inf, 1.0, 3.0]), ref, "float64").differences == {common.NON_FINITE}


def test_dispersion_forward_inputs_stay_normal():
    """docs/SPEC.md §2: dispersion's inputs are normal numbers (flushing is outside its contract)."""
    for params in dispersion.check_cases():
        for mode in MODES:
            for dtype in DTYPES:
                inputs = reference("dispersion", params, dtype, mode, 0).inputs
                assert not any(common.is_subnormal(inputs[key], dtype).any() for key in ("x", "mask"))


# ---------------------------------------------------------------------- JAX
JAX_MAXPOOL = [get_operator("maxpool2d").strategies[name] for name in ("jax_reshape_argmax", "jax_reduce_window")]
JAX_PINV = [get_operator("dispersion_pinv").strategies[name] for name in ("jax_gather", "jax_conv_adjoint")]


@pytest.mark.parametrize("strat", JAX_MAXPOOL, ids=lambda s: s.name)
def test_jax_max_pools_keep_subnormals(strat):
    """Compared on integer keys of the bits, the windows of subnormals come
    out right in every dtype (a float compare on XLA's CPU backend flushes)."""
    if strat.available():
        pytest.skip(strat.available())
    for dtype in DTYPES:
        for params in maxpool2d.check_cases()[:3]:
            verdict = check_strategy(strat, params, dtype, "cpu",
                                     reference("maxpool2d", params, dtype, "adversarial", 0))
            assert verdict.status == "ok", (dtype, params, verdict.message)


def test_order_key_orders_as_the_values_and_ties_zeros():
    pytest.importorskip("jax")
    from impls.backends import _jax

    jnp = _jax().numpy  # with float64 on, as the strategies run
    for dtype in ("float64", "float32", "bfloat16", "float16"):
        unit = common.SUBNORMAL_UNIT[dtype]
        values = np.array([-np.inf, -1.0, -3 * unit, -unit, -0.0, 0.0, unit, 2 * unit, 1.0, np.inf, np.nan])
        keys = np.asarray(maxpool2d.order_key(jnp.asarray(values, dtype=getattr(jnp, dtype))))
        assert (np.diff(keys[:-1].astype(np.int64)) >= 0).all(), (dtype, keys)
        assert keys[4] == keys[5] and keys[-1] > keys[-2]
        assert len(set(keys[:4].tolist())) == 4 and keys[6] < keys[7]


@pytest.mark.parametrize("strat", JAX_PINV, ids=lambda s: s.name)
def test_jax_pinv_is_reported_under_its_known_defect(strat):
    """XLA's CPU backend reads a subnormal mask as 0: inf or NaN, shown as
    the listed upstream defect (float16 divides in float32, where the mask
    is normal, and passes)."""
    if strat.available():
        pytest.skip(strat.available())
    params = dispersion.check_cases()[0]
    for dtype in DTYPES:
        mode = dispersion_pinv.subnormal_mask_mode(dtype)
        verdict = check_strategy(strat, params, dtype, "cpu", reference("dispersion_pinv", params, dtype, mode, 0))
        if dtype == "float16":
            assert verdict.status == "ok", verdict.message
        else:
            assert verdict.status == UPSTREAM_DEFECT, (dtype, verdict.status, verdict.message)
            assert "jax-cpu-flushes-subnormals" in verdict.message


def test_jax_flush_reproduction_still_shows():
    """The listed reproduction, run: if JAX stops flushing, the record goes."""
    pytest.importorskip("jax")
    from impls.backends import _jax

    _jax()  # float64 on, for the issue's float64 window
    record = next(d for d in defects.DEFECTS if d.id == "jax-cpu-flushes-subnormals")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(record.reproduction, {})
    assert printed.getvalue().split() == ["1.7014118e+38", "inf"]
    import jax
    import jax.numpy as jnp

    window = np.array([1e-323, 3e-323, 2e-323, 5e-324])
    assert float(jax.jit(jnp.max)(window)) == 0.0 and window.max() == 3e-323  # the issue's case
