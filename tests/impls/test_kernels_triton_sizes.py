"""The Triton kernels at sizes past 2**31 elements and past CUDA's grid limits
(docs/SPEC.md §2, "Size"), checked without a GPU where possible.

Without a GPU: each wrapper runs on meta tensors (shapes and strides, no
memory) with its launch captured, which shows the integer width it picks and
the grid it would launch, for every config the autotuner may choose. The
int64 variants run under the interpreter on small inputs and must agree bit
for bit with the int32 ones. (That they compute in 64 bits throughout is
checked on their compiled code, in test_kernels_triton_compile.py.)

With a GPU (`cuda` marker): the strategies on a plane of more than 2**31
elements, their last rows checked against a reference computed from a slice.

The interpreter cannot check bfloat16 subnormals. Triton's interpreter
converts bfloat16 to float32 bit by bit (`_convert_float`), and it
renormalises a subnormal into an exponent that float32 cannot hold, then
clamps it: 1.0e-39 comes out as 4.4e-39, -2.8e-40 as -5.9e-39, 9.2e-41 as
0 (Triton 3.9). The maxpool kernel compares in float32 and stores the
converted value back, so under the interpreter bfloat16 subnormals can win
or lose the wrong comparisons and come back changed. Compiled kernels on a
GPU convert them exactly. The adversarial check holds bfloat16 subnormals:
under the interpreter, maxpool2d's triton_fused is reported there as the
known upstream defect triton-interpreter-bf16-subnormal (impls/defects.py),
and a GPU checks the kernel itself.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from impls import kernels_triton  # noqa: E402
from impls.registry import NotApplicable, get_operator  # noqa: E402

INT32_MAX = 2**31 - 1
LAUNCH = kernels_triton._launch  # the real one, before any test replaces it


def _capture(monkeypatch, call):
    """The launches `call` makes, captured instead of run."""
    launches = []
    monkeypatch.setattr(kernels_triton, "_launch",
                        lambda kernel, grid, *args, **constexprs: launches.append((kernel, grid, args, constexprs)))
    call()
    return launches


def _meta(*shape, dtype=torch.float16):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _pooled(N, C, h, w):
    return _meta(N, C, h, w), _meta(N, C, h, w, dtype=torch.int64)


# (call, rows, row width) on sizes where the grid's second axis used to pass
# 65,535 (one column block per 128 columns there), and one with many rows.
LARGE_GRIDS = {
    # 8192 x 8192 plane, k = 2: 16.7 M pooled values in one row
    "unpool_scatter 8192x8192 k2": (
        lambda: kernels_triton.unpool_scatter(*_pooled(1, 1, 4096, 4096), (1, 1, 8192, 8192)), 1, 4096 * 4096),
    "unpool_scatter 1d 2**30 f3": (
        lambda: kernels_triton.unpool_scatter(_meta(1, 1, 2**30), _meta(1, 1, 2**30, dtype=torch.int64),
                                              (1, 1, 3 * 2**30)), 1, 2**30),
    "unpool_gather 2x2**24 k2": (
        lambda: kernels_triton.unpool_gather(*_pooled(1, 1, 1, 2**23), (1, 1, 2, 2**24), (2, 2)), 2, 2**24),
    "maxpool2d 2x2**24 k2": (lambda: kernels_triton.maxpool2d(_meta(1, 1, 2, 2**24), 2), 1, 2**23),
    "unpool_backward 1d 2**30 f3": (
        lambda: kernels_triton.unpool_backward(_meta(1, 1, 3 * 2**30), _meta(1, 1, 2**30, dtype=torch.int64),
                                               (1, 1, 2**30)), 1, 2**30),
    "dispersion C2**15 S2**10": (
        lambda: kernels_triton.dispersion(_meta(1, 2**15, 1, 256), _meta(1, 256), 2**10), 1, 256 + (2**15 - 1) * 2**10),
    "dispersion_pinv W2**24": (
        lambda: kernels_triton.dispersion_pinv(_meta(1, 1, 1, 2**24 + 2), _meta(1, 2**24), 1, 3), 3, 2**24),
    "maxpool2d 2**27 rows": (lambda: kernels_triton.maxpool2d(_meta(64, 1024, 4096, 2), 2), 2**27, 1),
}


@pytest.mark.parametrize("name", list(LARGE_GRIDS))
def test_grids_stay_within_cuda_limits(monkeypatch, name):
    """For every config a GPU may tune to: at most 2**31 - 1 programs on axis
    x and 65,535 on y and z, and one program per tile of the rows."""
    call, rows, width = LARGE_GRIDS[name]
    [(kernel, grid, _, constexprs)] = _capture(monkeypatch, call)
    for config in getattr(kernel, "tuning_configs", [triton.Config({})]):
        meta = {**constexprs, **config.kwargs}
        sizes = tuple(grid(meta) if callable(grid) else grid)
        assert 0 < sizes[0] <= INT32_MAX and all(0 < size <= 65535 for size in sizes[1:]), (config, sizes)
        block_r, block_w = kernels_triton.block_shape(meta)
        assert sizes == (triton.cdiv(rows, block_r) * triton.cdiv(width, block_w),), (config, sizes)


# (call, whether some offset or index of it passes int32), on meta tensors
INDEX_WIDTHS = {
    "maxpool2d plane 2**31 + 2**17": (lambda: kernels_triton.maxpool2d(_meta(1, 1, 2**16, 2**15 + 2), 2), True),
    "maxpool2d plane 2**30": (lambda: kernels_triton.maxpool2d(_meta(1, 1, 2**15, 2**15), 2), False),
    # small planes, but the input spans 2**32 elements
    "maxpool2d input 2**32": (lambda: kernels_triton.maxpool2d(_meta(2**14, 2**4, 128, 128), 2), True),
    "maxpool2d channels_last input 2**32": (lambda: kernels_triton.maxpool2d(
        _meta(2**14, 2**4, 128, 128).to(memory_format=torch.channels_last), 2), True),
    "maxpool2d stem plane 2**31 + 2**17": (lambda: kernels_triton.maxpool2d(_meta(1, 1, 2**16, 2**15 + 2), 3, 2, 1),
                                           True),
    "maxpool2d backward stem plane 2**31 + 2**17": (lambda: kernels_triton.maxpool2d_backward(
        *_pooled(1, 1, 2**15, 2**14 + 1), (1, 1, 2**16, 2**15 + 2), 3, 2, 1), True),
    "maxpool2d backward stem plane 2**30": (lambda: kernels_triton.maxpool2d_backward(
        *_pooled(1, 1, 2**14, 2**14), (1, 1, 2**15, 2**15), 3, 2, 1), False),
    "unpool_gather plane 2**31 + 2**17": (lambda: kernels_triton.unpool_gather(
        *_pooled(1, 1, 2**15, 2**14 + 1), (1, 1, 2**16, 2**15 + 2), (2, 2)), True),
    "unpool_gather plane 2**30": (lambda: kernels_triton.unpool_gather(
        *_pooled(1, 1, 2**14, 2**14), (1, 1, 2**15, 2**15), (2, 2)), False),
    "unpool_scatter plane 2**31 + 2**17": (lambda: kernels_triton.unpool_scatter(
        *_pooled(1, 1, 2**15, 2**14 + 1), (1, 1, 2**16, 2**15 + 2)), True),
    "unpool_scatter 1d 2**30 f3": (lambda: kernels_triton.unpool_scatter(
        _meta(1, 1, 2**30), _meta(1, 1, 2**30, dtype=torch.int64), (1, 1, 3 * 2**30)), True),
    "unpool_backward plane 2**31 + 2**17": (lambda: kernels_triton.unpool_backward(
        _meta(1, 1, 2**16, 2**15 + 2), _pooled(1, 1, 2**15, 2**14 + 1)[1], (1, 1, 2**15, 2**14 + 1)), True),
    "unpool_backward plane 2**30": (lambda: kernels_triton.unpool_backward(
        _meta(1, 1, 2**15, 2**15), _pooled(1, 1, 2**14, 2**14)[1], (1, 1, 2**14, 2**14)), False),
    "dispersion input 2**32": (lambda: kernels_triton.dispersion(_meta(1, 2, 2**15, 2**16), _meta(2**15, 2**16), 2),
                               True),
    "dispersion input 2**30": (lambda: kernels_triton.dispersion(_meta(1, 2, 2**13, 2**16), _meta(2**13, 2**16), 2),
                               False),
    "dispersion_pinv output 3 * 2**31": (lambda: kernels_triton.dispersion_pinv(
        _meta(1, 1, 2**15, 2**16 + 4), _meta(2**15, 2**16), 2, 3), True),
    "dispersion_pinv output 3 * 2**28": (lambda: kernels_triton.dispersion_pinv(
        _meta(1, 1, 2**12, 2**16 + 4), _meta(2**12, 2**16), 2, 3), False),
}


@pytest.mark.parametrize("name", list(INDEX_WIDTHS))
def test_sizes_past_int32_launch_the_int64_kernels(monkeypatch, name):
    call, wide = INDEX_WIDTHS[name]
    [(_, _, _, constexprs)] = _capture(monkeypatch, call)
    assert constexprs.get("WIDE") is wide


def test_more_tiles_than_a_grid_holds_is_not_applicable(monkeypatch):
    """2**42 outputs (more than any GPU holds) need 2**31 programs even of
    the interpreter's 2048-element tiles: NotApplicable, before any launch."""
    launches = _capture(monkeypatch, lambda: None)
    with pytest.raises(NotApplicable, match="programs"):
        kernels_triton.maxpool2d(_meta(2**11, 2**11, 2**11, 2**11), 2)
    assert not launches


@pytest.fixture(scope="module")
def small_calls():
    """Wrapper calls on small CPU inputs, run under the interpreter."""
    generator = torch.Generator().manual_seed(0)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=generator).to(dtype)

    # Integers in [-3, 3]: ties are common, so the first-maximum rule is exercised.
    x = torch.randint(-3, 4, (2, 3, 7, 300), generator=generator).to(torch.float16)
    pooled_values, pooled_indices = kernels_triton.maxpool2d(x, 2)
    stem_values, stem_indices = kernels_triton.maxpool2d(x, 3, 2, 1)
    mask = torch.rand(5, 300, generator=generator) + 0.5
    x_dispersion, x_half, y = randn(2, 4, 5, 300), randn(1, 3, 5, 300, dtype=torch.bfloat16), randn(2, 1, 5, 309)
    return {
        "maxpool2d": lambda: kernels_triton.maxpool2d(x, 2),
        "maxpool2d channels_last k3": lambda: kernels_triton.maxpool2d(x.to(memory_format=torch.channels_last), 3),
        "maxpool2d stem": lambda: kernels_triton.maxpool2d(x, 3, 2, 1),
        "maxpool2d stem backward": lambda: kernels_triton.maxpool2d_backward(stem_values, stem_indices,
                                                                             (2, 3, 7, 300), 3, 2, 1),
        "unpool_gather": lambda: kernels_triton.unpool_gather(pooled_values, pooled_indices, (2, 3, 7, 300), (2, 2)),
        "unpool_scatter": lambda: kernels_triton.unpool_scatter(pooled_values, pooled_indices, (2, 3, 7, 300)),
        "unpool_backward": lambda: kernels_triton.unpool_backward(x, pooled_indices, pooled_values.shape),
        "dispersion": lambda: kernels_triton.dispersion(x_dispersion, mask, 3),
        "dispersion S0 bfloat16": lambda: kernels_triton.dispersion(x_half, mask.to(torch.bfloat16), 0),
        "dispersion_pinv": lambda: kernels_triton.dispersion_pinv(y, mask, 3, 4),
    }


def _run_recording_width(monkeypatch, call) -> tuple[tuple, set]:
    """`call`'s outputs, and the WIDE flags its launches had."""
    widths = set()

    def recording(kernel, grid, *args, **constexprs):
        widths.add(constexprs["WIDE"])
        LAUNCH(kernel, grid, *args, **constexprs)

    monkeypatch.setattr(kernels_triton, "_launch", recording)
    out = call()
    return (out if isinstance(out, tuple) else (out,)), widths


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8) if t.is_floating_point() else t


@pytest.mark.parametrize("name", ["maxpool2d", "maxpool2d channels_last k3", "maxpool2d stem", "maxpool2d stem backward",
                                  "unpool_gather", "unpool_scatter", "unpool_backward", "dispersion",
                                  "dispersion S0 bfloat16", "dispersion_pinv"])
def test_int64_kernels_compute_what_int32_kernels_do(monkeypatch, small_calls, name):
    """Under the interpreter, the int64 variant (forced here, as sizes past
    2**31 choose it) gives the same bits as the int32 one, which the oracle
    checks in test_strategies.py cover."""
    narrow, narrow_widths = _run_recording_width(monkeypatch, small_calls[name])
    monkeypatch.setattr(kernels_triton, "needs_int64", lambda *extents: True)
    wide, wide_widths = _run_recording_width(monkeypatch, small_calls[name])
    assert narrow_widths == {False} and wide_widths == {True}
    for a, b in zip(narrow, wide, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(_bits(a), _bits(b))


# ----------------------------------------------------------------- on a GPU
# H x W = 2**31 + 2**17: the flat indices of the last rows pass int32, and one
# row of the pooled plane (2**29 values, for unpool_scatter) needs far more than
# 65,535 column blocks.
BIG_H, BIG_W, BIG_K = 2**16, 2**15 + 2, 2
TAIL_ROWS = 3  # pooled rows checked at the end of the plane


def _prepared(op, name, inputs, params):
    return get_operator(op).strategies[name].prepare(inputs, params)


def _tail_reference(x, k, rows):
    """Values and flat indices of the last `rows` pooled rows, from a slice of
    x: the first maximum of each window in row-major order (torch.argmax
    returns the first of equal maxima)."""
    _, _, H, W = x.shape
    h, w = H // k, W // k
    top = (h - rows) * k
    band = x[0, 0, top:h * k, :w * k].float().reshape(rows, k, w, k).permute(0, 2, 1, 3).reshape(rows, w, k * k)
    first = band.argmax(dim=-1)
    values = band.gather(-1, first[..., None])[..., 0]
    row = top + torch.arange(rows, device=x.device)[:, None] * k + first // k
    col = torch.arange(w, device=x.device)[None, :] * k + first % k
    return values.to(x.dtype), row * W + col


@pytest.mark.cuda
def test_maxpool_and_unpool_on_a_plane_past_2_31_elements():
    """maxpool2d/triton_fused, then maxunpool/triton_gather and triton_scatter
    on its output, on one 2**16 x (2**15 + 2) float16 plane (about 15 GB in
    all): the last rows' values and indices match a reference from a slice, no
    index is negative, and unpooling puts each value back at its position and
    zeros elsewhere."""
    params = dict(N=1, C=1, H=BIG_H, W=BIG_W, k=BIG_K)
    x = torch.randn(1, 1, BIG_H, BIG_W, device="cuda", dtype=torch.float16)
    values, indices = _prepared("maxpool2d", "triton_fused", {"x": x}, params)()
    torch.cuda.synchronize()
    assert int(indices.min()) >= 0 and int(indices.max()) < BIG_H * BIG_W
    assert int(indices[0, 0, -1, -1]) > INT32_MAX  # the case this test is for
    ref_values, ref_indices = _tail_reference(x, BIG_K, TAIL_ROWS)
    assert torch.equal(values[0, 0, -TAIL_ROWS:], ref_values)
    assert torch.equal(indices[0, 0, -TAIL_ROWS:], ref_indices)
    del x

    tail_values, tail_indices = values[0, 0, -TAIL_ROWS:].reshape(-1), indices[0, 0, -TAIL_ROWS:].reshape(-1)
    for name in ("triton_gather", "triton_scatter"):
        out = _prepared("maxunpool", name, {"values": values, "positions": indices}, dict(form="2d", **params))()
        torch.cuda.synchronize()
        assert torch.equal(out.view(-1)[tail_indices], tail_values), name
        band = out[0, 0, (BIG_H // BIG_K - TAIL_ROWS) * BIG_K:]
        assert int((band != 0).sum()) == int((tail_values != 0).sum()), f"{name}: stray writes in the last rows"
        del out, band
