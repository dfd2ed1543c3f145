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
    flushed = Verdict("mismatch", "", differences=frozenset({"subnormal", "flushed-subnormal", "subnormal-window-index"}))
    where = dict(device="cpu", dtype="bfloat16", layout="contiguous", mode="adversarial")
    assert defects.match(strat, flushed, versions=versions, **where).id == "triton-interpreter-bf16-subnormal"
    for other in (dict(where, device="cuda"), dict(where, dtype="float32"), dict(where, dtype="float16")):
        assert defects.match(strat, flushed, versions=versions, **other) is None, other
    for kind in ("value", "index", "zero-sign"):
        mixed = Verdict("mismatch", "", differences=frozenset({"subnormal", kind}))
        assert defects.match(strat, mixed, versions=versions, **where) is None, kind
    assert defects.match(strategy("numba_fused"), flushed, versions=versions, **where) is None


def _cuda_nhwc_backward(x, grad, k, *, origin_window_too=False, sum_at_index_0=False):
    """A model of torch's CUDA channels-last max-pool backward as seen on an H200:
    given the forward's indices (index 0 for every all -inf window), each input
    element gathers the gradients of the windows covering it whose index is that
    element, so an index outside its own window is never visited. The two
    flags plant what the kernel does not do: drop the origin's window too, or
    sum the lost gradients at element 0 (a scatter)."""
    N, C, H, W = x.shape
    h, w = H // k, W // k
    _, indices = maxpool2d.oracle({"x": x}, dict(N=N, C=C, H=H, W=W, k=k))
    windows = x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k)
    neg_inf = np.isneginf(windows).all(axis=(3, 5))
    indices = np.where(neg_inf, 0, indices)
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    inside = ((indices // W) // k == rows) & ((indices % W) // k == cols)
    if origin_window_too:
        inside &= ~(neg_inf & (rows == 0) & (cols == 0))
    out = np.zeros((N, C, H * W), dtype=grad.dtype)
    with np.errstate(over="ignore", invalid="ignore"):  # hostile gradients summed at element 0
        for n, c, i, j in zip(*np.nonzero(inside | sum_at_index_0)):
            out[n, c, indices[n, c, i, j]] += grad[n, c, i, j]
    return out.reshape(N, C, H, W), neg_inf


@pytest.mark.parametrize("params", [PARAMS, dict(N=1, C=2, H=10, W=11, k=3), dict(N=2, C=2, H=5, W=5, k=1)])
def test_torch_cuda_channels_last_backward_of_neg_inf_windows_is_the_same_defect(params):
    """Seen on an H200 (torch 2.11.0+cu130): in the training modes, the
    channels-last backward of torch_max_pool2d (values only: autograd saves
    the same wrong indices) and torch_max_pool2d_indices loses the gradient of
    every all -inf window but the origin's (`_cuda_nhwc_backward`); the same
    defect explains it there and only there, and a gradient wrong anywhere
    else, or lost at the origin too, or summed at element 0, is not excused.
    The shapes are three of those the H200's check failed on before the
    matcher modelled the kernel."""
    ref = reference("maxpool2d", params, "float32", "adversarial", 0)
    x = ref.inputs["x"].astype(np.float32)
    grad = common.round_to_dtype(maxpool2d.generate_grad(params, "adversarial", 0), "float32")  # as the check stores it
    expected = maxpool2d.grad_oracle(ref.inputs, grad, params)
    got, neg_inf = _cuda_nhwc_backward(x, grad.astype(np.float32), params["k"])
    assert neg_inf[..., 1:, :].any() or neg_inf[..., 1:].any(), "the adversarial set has all -inf windows"
    cuda_nhwc = dict(device="cuda", dtype="float32", layout="channels_last", mode="adversarial")
    for name in ("torch_max_pool2d", "torch_max_pool2d_indices"):
        strat = strategy(name)
        verdict = maxpool2d.grad_compare(got, expected, ref.inputs, grad, "float32", strat, params)
        assert verdict.status == "mismatch" and verdict.differences == {"neg-inf-window-grad-0"}, verdict
        found = defects.match(strat, verdict, versions=VERSIONS, **cuda_nhwc)
        assert found and found.id == "torch-cuda-nhwc-maxpool-neg-inf-index"
        assert defects.match(strat, verdict, versions=VERSIONS, **dict(cuda_nhwc, device="cpu")) is None
        assert defects.match(strat, verdict, versions=VERSIONS, **dict(cuda_nhwc, layout="contiguous")) is None
    assert defects.match(strategy("triton_fused"), verdict, versions=VERSIONS, **cuda_nhwc) is None
    strat = strategy("torch_max_pool2d")
    # what the kernel does not do: not the defect's, so not excused
    planted = {"one more wrong element": got.copy()}
    finite = np.argwhere((expected != 0) & np.isfinite(expected) & (np.abs(expected) > 1))
    planted["one more wrong element"][tuple(finite[-1])] += 1.0
    planted["summed at element 0"] = _cuda_nhwc_backward(x, grad.astype(np.float32), params["k"],
                                                         sum_at_index_0=True)[0]
    if neg_inf[..., 0, 0].any():
        planted["the origin's window lost too"] = _cuda_nhwc_backward(x, grad.astype(np.float32), params["k"],
                                                                      origin_window_too=True)[0]
    for what, wrong in planted.items():
        verdict = maxpool2d.grad_compare(wrong, expected, ref.inputs, grad, "float32", strat, params)
        assert verdict.status == "mismatch" and "neg-inf-window-grad-0" not in verdict.differences, (what, verdict)
        assert defects.match(strat, verdict, versions=VERSIONS, **cuda_nhwc) is None, what


def test_the_adversarial_set_holds_an_all_neg_inf_window_at_the_origin():
    """What made the H200's failures: the matcher must keep the origin's window."""
    x = reference("maxpool2d", PARAMS, "float32", "adversarial", 0).inputs["x"]
    N, C, H, W = x.shape
    assert np.isneginf(x[:, :, :2, :2]).all(axis=(2, 3)).any()


def test_cuda_float32_atomic_flush_is_matched_only_there():
    """The scatter-add backwards on CUDA flush subnormal float32 gradients
    (atom.add.f32): listed for exactly that; a normal value lost, a subnormal
    misplaced, float16, the forward or the CPU are still mismatches."""
    flushed = Verdict("mismatch", "", differences=frozenset({common.FLUSHED_SUBNORMAL}))
    where = dict(device="cuda", dtype="float32", layout="contiguous", mode="adversarial", training_mode="backward")
    versions = {"torch": "2.11.0+cu130", "jaxlib": "0.11.2"}
    for name in ("torch_reshape_argmax", "torch_compile_reshape_argmax", "jax_reshape_argmax"):
        for layout in ("contiguous", "noncontiguous", "channels_last"):
            for training_mode in ("backward", "forward+backward"):
                found = defects.match(strategy(name), flushed, versions=versions,
                                      **dict(where, layout=layout, training_mode=training_mode))
                assert found and found.id == f"{name.split('_')[0]}-cuda-float32-atomic-add-flushes-subnormals", (
                    name, layout)
        for other in (dict(where, device="cpu"), dict(where, dtype="float16"), dict(where, training_mode="forward")):
            assert defects.match(strategy(name), flushed, versions=versions, **other) is None, (name, other)
        for kinds in ({common.VALUE}, {common.SUBNORMAL}, {common.FLUSHED_SUBNORMAL, common.VALUE}):
            other = Verdict("mismatch", "", differences=frozenset(kinds))
            assert defects.match(strategy(name), other, versions=versions, **where) is None, (name, kinds)
    assert defects.match(strategy("numpy_sliding_window"), flushed, versions=versions, **where) is None


def test_a_flush_is_told_from_a_lost_normal_value_and_a_moved_subnormal():
    """The compare's kinds the atomic-flush record rests on, on a gradient as
    the H200 returned it: subnormal incoming gradients 0.0, the rest exact."""
    tiny, largest = common.subnormal("float32", 3), -(2.0 ** -126 - 2.0 ** -149)
    ref = np.array([tiny, largest, 4.0, 0.0])
    flushed = np.array([0.0, -0.0, 4.0, 0.0], dtype=np.float32)
    assert common.compare_gradient_bitwise("g", flushed, ref, "float32").differences == {common.FLUSHED_SUBNORMAL}
    lost_normal = np.array([tiny, largest, 0.0, 0.0], dtype=np.float32)
    assert common.compare_gradient_bitwise("g", lost_normal, ref, "float32").differences == {common.VALUE}
    moved = np.array([0.0, largest, 4.0, tiny], dtype=np.float32)
    assert common.compare_gradient_bitwise("g", moved, ref, "float32").differences == {
        common.FLUSHED_SUBNORMAL, common.SUBNORMAL}
