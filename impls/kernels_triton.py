"""Triton kernels, one fused kernel per operator; imported only by the Triton
strategies. On a machine without a GPU they run under ``TRITON_INTERPRET=1``
on CPU tensors, which is how CI checks them.

Every kernel takes element strides, so non-contiguous and channels-last
inputs are read in place; outputs are contiguous and written exactly once.
"""

from __future__ import annotations

import os

# Fused multiply-add in the dispersion sums (one rounding, not two); said
# explicitly because Triton 3.9 warns that its default is about to change.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# Every kernel works on a 2-D tile: BLOCK_R output rows by BLOCK_W contiguous
# columns, so the integer division that splits a row number into its
# (plane, row) coordinates runs once per row of the tile, not once per
# element, and column arithmetic stays in int32 (per-row bases are int64, so
# tensors past 2**31 elements still address correctly). Rows go on grid axis
# 0 (up to 2**31 - 1 programs), column blocks on axis 1 (few).
TILE = 1024


def _tile(width: int) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_W) for rows `width` elements wide: a power of two wide
    enough for the row (capped at 128 columns), TILE elements in all."""
    block_w = min(128, triton.next_power_of_2(max(width, 1)))
    return max(1, TILE // block_w), block_w


def _launch(kernel, grid, *args, **constexprs):
    # One place that launches, so a test can capture the arguments and compile
    # the kernel for a GPU target without one.
    kernel[grid](*args, **constexprs)


@triton.jit
def _maxpool2d_kernel(x_ptr, values_ptr, indices_ptr, rows, C, h, w, W, sn, sc, sh, sw,
                      K: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    out_row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # over N*C*h
    j = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    live = (out_row < rows)[:, None] & (j < w)[None, :]
    plane = out_row // h
    top = (out_row % h) * K
    row_base = (plane // C).to(tl.int64) * sn + (plane % C).to(tl.int64) * sc + top.to(tl.int64) * sh
    left = j * K
    window = x_ptr + row_base[:, None] + left.to(tl.int64)[None, :] * sw
    # Compared in float32: exact for the half types, and Triton's interpreter
    # orders bfloat16 by its raw bits. Stored back unchanged.
    best = tl.load(window, mask=live, other=0.0).to(tl.float32)
    first = (top * W)[:, None] + left[None, :]
    arg = first
    for kr in tl.static_range(K):
        for kc in tl.static_range(K):
            if kr + kc > 0:
                v = tl.load(window + kr * sh + kc * sw, mask=live, other=0.0).to(tl.float32)
                # first maximum in row-major order; a NaN wins and the first NaN stays
                take = (v > best) | ((v != v) & (best == best))
                best = tl.where(take, v, best)
                arg = tl.where(take, first + (kr * W + kc), arg)
    out = out_row.to(tl.int64)[:, None] * w + j[None, :]
    tl.store(values_ptr + out, best.to(values_ptr.dtype.element_ty), mask=live)
    tl.store(indices_ptr + out, arg.to(tl.int64), mask=live)


def maxpool2d(x: torch.Tensor, k: int):
    N, C, H, W = x.shape
    h, w = H // k, W // k
    values = torch.empty((N, C, h, w), dtype=x.dtype, device=x.device)
    indices = torch.empty((N, C, h, w), dtype=torch.int64, device=x.device)
    rows = N * C * h
    if values.numel():
        block_r, block_w = _tile(w)
        _launch(_maxpool2d_kernel, (triton.cdiv(rows, block_r), triton.cdiv(w, block_w)),
                x, values, indices, rows, C, h, w, W, *x.stride(), K=k, BLOCK_R=block_r, BLOCK_W=block_w)
    return values, indices


@triton.jit
def _unpool_gather_kernel(values_ptr, positions_ptr, out_ptr, rows, H, W, h, w,
                          KH: tl.constexpr, KW: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    out_row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # over planes*H
    col = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    live = (out_row < rows)[:, None] & (col < W)[None, :]
    row = out_row % H
    i, j = row // KH, col // KW
    inside = live & (i < h)[:, None] & (j < w)[None, :]
    pooled = ((out_row // H).to(tl.int64) * (h * w) + i * w)[:, None] + j[None, :]
    pos = tl.load(positions_ptr + pooled, mask=inside, other=-1)
    val = tl.load(values_ptr + pooled, mask=inside, other=0.0)
    hit = pos == ((row * W)[:, None] + col[None, :]).to(tl.int64)
    out = out_row.to(tl.int64)[:, None] * W + col[None, :]
    tl.store(out_ptr + out, tl.where(hit, val, 0.0), mask=live)


def unpool_gather(values: torch.Tensor, positions: torch.Tensor, out_shape, window):
    """Each output element reads the one pooled value whose window holds it:
    a gather, no zero fill, no atomics. Valid when every position lies inside
    its own (KH, KW) window, as max-pooling's indices do."""
    KH, KW = window
    planes = out_shape[0] * out_shape[1]
    H, W = (out_shape[2], out_shape[3]) if len(out_shape) == 4 else (1, out_shape[2])
    h, w = (values.shape[2], values.shape[3]) if values.dim() == 4 else (1, values.shape[2])
    values, positions = values.contiguous(), positions.contiguous()
    out = torch.empty(out_shape, dtype=values.dtype, device=values.device)
    if out.numel():
        block_r, block_w = _tile(W)
        _launch(_unpool_gather_kernel, (triton.cdiv(planes * H, block_r), triton.cdiv(W, block_w)),
                values, positions, out, planes * H, H, W, h, w, KH=KH, KW=KW, BLOCK_R=block_r, BLOCK_W=block_w)
    return out


@triton.jit
def _unpool_scatter_kernel(values_ptr, positions_ptr, out_ptr, rows, L, P,
                           BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    col = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    live = (row < rows)[:, None] & (col < L)[None, :]
    pooled = row.to(tl.int64)[:, None] * L + col[None, :]
    pos = tl.load(positions_ptr + pooled, mask=live, other=0)
    val = tl.load(values_ptr + pooled, mask=live, other=0.0)
    out = row.to(tl.int64)[:, None] * P + pos
    tl.store(out_ptr + out, val, mask=live & (pos >= 0) & (pos < P))


def unpool_scatter(values: torch.Tensor, positions: torch.Tensor, out_shape):
    """General positions: a zero fill, then one scatter kernel (out-of-range
    positions are masked, never written)."""
    rows = out_shape[0] * out_shape[1]
    values, positions = values.reshape(rows, -1).contiguous(), positions.reshape(rows, -1).contiguous()
    L = values.shape[1]
    P = 1
    for size in out_shape[2:]:
        P *= size
    out = torch.zeros(out_shape, dtype=values.dtype, device=values.device)
    if values.numel():
        block_r, block_w = _tile(L)
        _launch(_unpool_scatter_kernel, (triton.cdiv(rows, block_r), triton.cdiv(L, block_w)),
                values, positions, out, rows, L, P, BLOCK_R=block_r, BLOCK_W=block_w)
    return out


@triton.jit
def _dispersion_kernel(x_ptr, mask_ptr, y_ptr, rows, C, H, W, out_W, S, sb, sc, sh, sw,
                       BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    out_row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # over B*H
    first_col = tl.program_id(1) * BLOCK_W
    col = first_col + tl.arange(0, BLOCK_W)
    row_live = out_row < rows
    row = out_row % H
    x_row = (out_row // H).to(tl.int64) * sb + row.to(tl.int64) * sh
    # Only the channels that land on this block of columns, 0 <= col - i*S < W:
    # about W/S of them, not C. Written without branches so S may be 0.
    step = tl.maximum(S, 1)
    low = tl.where(S > 0, tl.maximum((first_col - W + step) // step, 0), 0)
    high = tl.where(S > 0, tl.minimum((first_col + BLOCK_W - 1) // step, C - 1), C - 1)
    channel_stride = tl.full((BLOCK_R,), 0, dtype=tl.int64) + sc  # int64 products past 2**31
    acc = tl.full((BLOCK_R, BLOCK_W), 0.0, dtype=tl.float32)
    for i in range(low, high + 1):
        in_col = col - i * S
        valid = row_live[:, None] & ((in_col >= 0) & (in_col < W))[None, :]
        channel = x_row + channel_stride * i
        xv = tl.load(x_ptr + channel[:, None] + in_col.to(tl.int64)[None, :] * sw, mask=valid, other=0.0)
        mv = tl.load(mask_ptr + (row * W)[:, None] + in_col[None, :], mask=valid, other=0.0)
        acc += xv.to(tl.float32) * mv.to(tl.float32)
    out = out_row.to(tl.int64)[:, None] * out_W + col[None, :]
    tl.store(y_ptr + out, acc.to(y_ptr.dtype.element_ty), mask=row_live[:, None] & (col < out_W)[None, :])


def dispersion(x: torch.Tensor, mask: torch.Tensor, S: int):
    """Each output sums the C inputs that land on it (a gather): every x element
    read once, the mask multiply fused, y written once, no atomics, float32
    accumulation for the half types. Each program loops over only the
    channels that reach its columns (about W/S of them, not C)."""
    B, C, H, W = x.shape
    out_W = W + (C - 1) * S
    y = torch.empty((B, 1, H, out_W), dtype=x.dtype, device=x.device)
    mask = mask.contiguous()
    if y.numel():
        block_r, block_w = _tile(out_W)
        _launch(_dispersion_kernel, (triton.cdiv(B * H, block_r), triton.cdiv(out_W, block_w)),
                x, mask, y, B * H, C, H, W, out_W, S, *x.stride(), BLOCK_R=block_r, BLOCK_W=block_w)
    return y


@triton.jit
def _dispersion_pinv_kernel(y_ptr, mask_ptr, x_ptr, rows, C, H, W, S, syb, syh, syw,
                            BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr):
    out_row = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)  # over B*C*H
    w = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)
    live = (out_row < rows)[:, None] & (w < W)[None, :]
    row = out_row % H
    channel = (out_row // H) % C
    b = out_row // (H * C)
    col = (channel * S)[:, None] + w[None, :]
    # Coverage of column col = w + i*S: the channels i' with 0 <= col - i'*S < W,
    # i' from i - (W-1-w)//S to i + w//S, clipped to [0, C). The divisions are of
    # the column alone, so they run once per column of the tile, not per element.
    step = tl.maximum(S, 1)
    first = tl.maximum(channel[:, None] - ((W - 1 - w) // step)[None, :], 0)
    last = tl.minimum(channel[:, None] + (w // step)[None, :], C - 1)
    coverage = tl.where(S > 0, last - first + 1, C).to(tl.float32)
    y_row = b.to(tl.int64) * syb + row.to(tl.int64) * syh
    yv = tl.load(y_ptr + y_row[:, None] + col.to(tl.int64) * syw, mask=live, other=0.0).to(tl.float32)
    mv = tl.load(mask_ptr + (row * W)[:, None] + w[None, :], mask=live, other=1.0).to(tl.float32)
    out = out_row.to(tl.int64)[:, None] * W + w[None, :]
    tl.store(x_ptr + out, (yv / (coverage * mv)).to(x_ptr.dtype.element_ty), mask=live)


def dispersion_pinv(y: torch.Tensor, mask: torch.Tensor, S: int, C: int):
    """One pass: each x element reads its y element, computes the coverage of
    that column in registers (no alpha table), divides by it and the mask."""
    B, _, H, _ = y.shape
    W = mask.shape[1]
    x = torch.empty((B, C, H, W), dtype=y.dtype, device=y.device)
    mask = mask.contiguous()
    if x.numel():
        block_r, block_w = _tile(W)
        _launch(_dispersion_pinv_kernel, (triton.cdiv(B * C * H, block_r), triton.cdiv(W, block_w)),
                y, mask, x, B * C * H, C, H, W, S, y.stride(0), y.stride(2), y.stride(3),
                BLOCK_R=block_r, BLOCK_W=block_w)
    return x
