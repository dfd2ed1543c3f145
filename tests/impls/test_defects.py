"""Known upstream defects (impls/defects.py, docs/SPEC.md §2): a listed defect turns
exactly its own mismatch into ``upstream-defect``; nothing else is excused."""

import numpy as np
import pytest

from harness.measuring.check import UPSTREAM_DEFECT, check_strategy, reference
from impls import common, defects, maxpool2d
from impls.common import Verdict
from impls.registry import get_operator

PARAMS = dict(N=2, C=3, H=8, W=8, k=2)
VERSIONS = {"numpy": "2.4.6", "torch": "2.13.0+cpu"}
WHERE = dict(device="cpu", dtype="float32", layout="contiguous", mode="adversarial")


def strategy(name):
    return get_operator("maxpool2d").strategies[name]


def test_records_are_complete_frozen_and_name_real_strategies():
    import dataclasses

    from packaging.specifiers import SpecifierSet

    assert defects.DEFECTS
    for defect in defects.DEFECTS:
        op, name = defect.strategy.split("/")
        assert name in get_operator(op).strategies, defect.strategy
        SpecifierSet(defect.versions)  # a valid PEP 440 specifier
        assert defect.library and defect.description and "\n" not in defect.description
        assert "import" in defect.reproduction and defect.condition.differences
        with pytest.raises(dataclasses.FrozenInstanceError):
            defect.description = "changed"


@pytest.mark.parametrize("name", ["seed_loops", "seed_reshape_max"])
def test_numpy_max_zero_sign_is_a_known_defect_in_the_check(name):
    verdict = check_strategy(strategy(name), PARAMS, "float32", "cpu",
                             reference("maxpool2d", PARAMS, "float32", "adversarial", 0))
    assert verdict.status == UPSTREAM_DEFECT
    assert "numpy-max-zero-sign" in verdict.message and "sign of zero differs at" in verdict.message


def test_match_is_precise():
    zero_sign = Verdict("mismatch", "values: sign of zero differs", differences=frozenset({"zero-sign"}))
    assert defects.match(strategy("seed_loops"), zero_sign, versions=VERSIONS, **WHERE).id == "numpy-max-zero-sign"
    assert defects.match("maxpool2d/seed_reshape_max", zero_sign, versions=VERSIONS, **WHERE)
    # another strategy with the same symptom is not excused
    assert defects.match(strategy("numpy_sliding_window"), zero_sign, versions=VERSIONS, **WHERE) is None
    # a sign difference beside any other difference is not excused
    for other in ("value", "index", "shape", "dtype"):
        mixed = Verdict("mismatch", "", differences=frozenset({"zero-sign", other}))
        assert defects.match(strategy("seed_loops"), mixed, versions=VERSIONS, **WHERE) is None, other
    # nor a mismatch without classified differences, nor a library outside the range or not installed
    assert defects.match(strategy("seed_loops"), Verdict("mismatch", "?"), versions=VERSIONS, **WHERE) is None
    assert defects.match(strategy("seed_loops"), zero_sign, versions={"numpy": "0.9"}, **WHERE) is None
    assert defects.match(strategy("seed_loops"), zero_sign, versions={}, **WHERE) is None
    # only mismatches
    assert defects.match(strategy("seed_loops"), Verdict("ok"), versions=VERSIONS, **WHERE) is None


def test_an_unrelated_mismatch_of_the_same_strategy_still_fails():
    """The seed's own strategy (same key) with one value wrong beyond the sign
    of zero: a mismatch, not an upstream defect."""
    import dataclasses

    original = strategy("seed_loops")

    def wrong(inputs, params):
        run = original.prepare(inputs, params)

        def spoiled():
            values, indices = run()
            values = values.copy()
            first_finite = tuple(np.argwhere(np.isfinite(values))[0])
            values[first_finite] += 1
            return values, indices
        return spoiled

    strat = dataclasses.replace(original, prepare=wrong)
    assert strat.key == "maxpool2d/seed_loops"
    verdict = check_strategy(strat, PARAMS, "float32", "cpu",
                             reference("maxpool2d", PARAMS, "float32", "adversarial", 0))
    assert verdict.status == "mismatch"
    assert verdict.differences == {"zero-sign", "value"}


def _neg_inf_index_zero(values, indices, x):
    """What the CUDA channels-last kernel returns: index 0 for every all -inf window."""
    indices = indices.copy()
    indices[np.isneginf(values)] = 0
    return values.astype(x.dtype), indices


def test_torch_cuda_channels_last_neg_inf_index_is_matched_only_there():
    ref = reference("maxpool2d", PARAMS, "float32", "adversarial", 0)
    x = ref.inputs["x"].astype(np.float32)
    out = _neg_inf_index_zero(*maxpool2d.oracle(ref.inputs, PARAMS), x)
    strat = strategy("torch_max_pool2d_indices")
    verdict = maxpool2d.compare(out, ref.expected, ref.inputs, "float32", strat, ref.params)
    assert verdict.status == "mismatch" and verdict.differences == {"neg-inf-window-index-0"}
    cuda_nhwc = dict(device="cuda", dtype="float32", layout="channels_last", mode="adversarial")
    found = defects.match(strat, verdict, versions=VERSIONS, **cuda_nhwc)
    assert found and found.id == "torch-cuda-nhwc-maxpool-neg-inf-index"
    for where in (dict(cuda_nhwc, device="cpu"), dict(cuda_nhwc, layout="contiguous"),
                  dict(cuda_nhwc, layout="noncontiguous")):
        assert defects.match(strat, verdict, versions=VERSIONS, **where) is None, where
    # the same symptom from our own kernel is ours to fix
    assert defects.match(strategy("triton_fused"), verdict, versions=VERSIONS, **cuda_nhwc) is None
    # index 0 plus any other wrong index is not excused
    values, indices = out
    indices = indices.copy()
    indices[0, 0, 1, 1] = indices[0, 0, 1, 1] + 1 if indices[0, 0, 1, 1] % 8 == 0 else indices[0, 0, 1, 1] - 1
    worse = maxpool2d.compare((values, indices), ref.expected, ref.inputs, "float32", strat, ref.params)
    assert worse.differences >= {"index"}
    assert defects.match(strat, worse, versions=VERSIONS, **cuda_nhwc) is None


def test_installed_versions_name_every_library():
    versions = defects.installed_versions()
    assert set(versions) == {d.library for d in defects.DEFECTS}
    assert versions["numpy"] == np.__version__


def test_jax_cpu_flush_is_matched_only_for_a_subnormal_mask():
    strat = "dispersion_pinv/jax_gather"
    versions = {"jax": "0.10.2"}
    inf = Verdict("mismatch", "x: 24 non-finite elements", differences=frozenset({"non-finite"}))
    where = dict(device="cpu", dtype="float32", layout="contiguous", mode="subnormal-mask-float32")
    assert defects.match(strat, inf, versions=versions, **where).id == "jax-cpu-flushes-subnormals"
    assert defects.match("dispersion_pinv/jax_conv_adjoint", inf, versions=versions, **where)
    for other in (dict(where, mode="adversarial"), dict(where, mode="random"), dict(where, device="cuda"),
                  dict(where, dtype="float16", mode="subnormal-mask-float16")):
        assert defects.match(strat, inf, versions=versions, **other) is None, other
    # a relative error over the bound is not what a flush does, nor a NumPy strategy's inf
    assert defects.match(strat, Verdict("mismatch", "relative error"), versions=versions, **where) is None
    assert defects.match("dispersion_pinv/numpy_window_view", inf, versions=versions, **where) is None


def test_triton_interpreter_bf16_subnormals_are_matched_only_there():
    strat = strategy("triton_fused")
    versions = {"triton": "3.9.0"}
    flushed = Verdict("mismatch", "", differences=frozenset({"subnormal", "subnormal-window-index"}))
    where = dict(device="cpu", dtype="bfloat16", layout="contiguous", mode="adversarial")
    assert defects.match(strat, flushed, versions=versions, **where).id == "triton-interpreter-bf16-subnormal"
    for other in (dict(where, device="cuda"), dict(where, dtype="float32"), dict(where, dtype="float16")):
        assert defects.match(strat, flushed, versions=versions, **other) is None, other
    for kind in ("value", "index", "zero-sign"):
        mixed = Verdict("mismatch", "", differences=frozenset({"subnormal", kind}))
        assert defects.match(strat, mixed, versions=versions, **where) is None, kind
    assert defects.match(strategy("numba_fused"), flushed, versions=versions, **where) is None


@pytest.mark.parametrize("where_the_gradient_goes", ["dropped", "summed at element 0"])
def test_torch_cuda_channels_last_backward_of_neg_inf_windows_is_the_same_defect(where_the_gradient_goes):
    """Seen on an H200 (torch 2.11.0+cu130): in the training modes, the
    channels-last backward of torch_max_pool2d (values only: autograd saves
    the same wrong indices) and torch_max_pool2d_indices misplaces the
    gradient of every all -inf window; the same defect explains it there and
    only there, and a gradient wrong anywhere else is not excused."""
    ref = reference("maxpool2d", PARAMS, "float32", "adversarial", 0)
    x = ref.inputs["x"]
    grad = common.round_to_dtype(maxpool2d.generate_grad(PARAMS, "adversarial", 0), "float32")  # as the check stores it
    expected = maxpool2d.grad_oracle(ref.inputs, grad, PARAMS)
    N, C, H, W = x.shape
    neg_inf = np.isneginf(x.reshape(N, C, H // 2, 2, W // 2, 2)).all(axis=(3, 5))
    assert neg_inf.any(), "the adversarial set has all -inf windows"
    got = expected.astype(np.float32).copy()
    for n, c, i, j in zip(*np.nonzero(neg_inf)):
        moved = got[n, c, 2 * i, 2 * j]
        got[n, c, 2 * i, 2 * j] = 0.0
        if where_the_gradient_goes != "dropped":
            got[n, c, 0, 0] += moved
    cuda_nhwc = dict(device="cuda", dtype="float32", layout="channels_last", mode="adversarial")
    for name in ("torch_max_pool2d", "torch_max_pool2d_indices"):
        strat = strategy(name)
        verdict = maxpool2d.grad_compare(got, expected, ref.inputs, grad, "float32", strat, PARAMS)
        assert verdict.status == "mismatch" and verdict.differences == {"neg-inf-window-grad-0"}, verdict
        found = defects.match(strat, verdict, versions=VERSIONS, **cuda_nhwc)
        assert found and found.id == "torch-cuda-nhwc-maxpool-neg-inf-index"
        assert defects.match(strat, verdict, versions=VERSIONS, **dict(cuda_nhwc, device="cpu")) is None
        assert defects.match(strat, verdict, versions=VERSIONS, **dict(cuda_nhwc, layout="contiguous")) is None
    assert defects.match(strategy("triton_fused"), verdict, versions=VERSIONS, **cuda_nhwc) is None
    # one more wrong element anywhere: a plain value difference, not excused
    worse = got.copy()
    finite = np.argwhere((expected != 0) & ~np.isnan(expected))
    worse[tuple(finite[-1])] += 1.0
    verdict = maxpool2d.grad_compare(worse, expected, ref.inputs, grad, "float32", strategy("torch_max_pool2d"),
                                     PARAMS)
    assert verdict.differences == {"value"}
    assert defects.match(strategy("torch_max_pool2d"), verdict, versions=VERSIONS, **cuda_nhwc) is None
