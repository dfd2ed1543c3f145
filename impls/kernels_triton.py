"""Triton kernels, one fused kernel per operator; imported only by the Triton
strategies. On a machine without a GPU they run under ``TRITON_INTERPRET=1``
on CPU tensors, which is how CI checks them.

Every kernel takes element strides, so non-contiguous and channels-last
inputs are read in place; outputs are contiguous and written exactly once.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _maxpool2d_kernel(x_ptr, values_ptr, indices_ptr, total, C, h, w, W,
                      sn, sc, sh, sw, K: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < total
    j = offsets % w
    i = (offsets // w) % h
    c = (offsets // (w * h)) % C
    n = offsets // (w * h * C)
    base = n * sn + c * sc
    top, left = i * K, j * K
    # Compared in float32: exact for the half types, and Triton's interpreter
    # orders bfloat16 by its raw bits. Stored back unchanged.
    best = tl.load(x_ptr + base + top * sh + left * sw, mask=live, other=0.0).to(tl.float32)
    arg = top * W + left
    for kr in tl.static_range(K):
        for kc in tl.static_range(K):
            if kr + kc > 0:
                v = tl.load(x_ptr + base + (top + kr) * sh + (left + kc) * sw, mask=live, other=0.0).to(tl.float32)
                # first maximum in row-major order; a NaN wins and the first NaN stays
                take = (v > best) | ((v != v) & (best == best))
                best = tl.where(take, v, best)
                arg = tl.where(take, (top + kr) * W + left + kc, arg)
    tl.store(values_ptr + offsets, best.to(values_ptr.dtype.element_ty), mask=live)
    tl.store(indices_ptr + offsets, arg, mask=live)


def maxpool2d(x: torch.Tensor, k: int):
    N, C, H, W = x.shape
    h, w = H // k, W // k
    values = torch.empty((N, C, h, w), dtype=x.dtype, device=x.device)
    indices = torch.empty((N, C, h, w), dtype=torch.int64, device=x.device)
    total = values.numel()
    if total:
        _maxpool2d_kernel[(triton.cdiv(total, BLOCK),)](x, values, indices, total, C, h, w, W, *x.stride(),
                                                       K=k, BLOCK=BLOCK)
    return values, indices


@triton.jit
def _unpool_gather_kernel(values_ptr, positions_ptr, out_ptr, total, H, W, h, w,
                          KH: tl.constexpr, KW: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < total
    col = offsets % W
    row = (offsets // W) % H
    plane = offsets // (W * H)
    i, j = row // KH, col // KW
    inside = live & (i < h) & (j < w)
    pooled = plane * (h * w) + i * w + j
    pos = tl.load(positions_ptr + pooled, mask=inside, other=-1)
    val = tl.load(values_ptr + pooled, mask=inside, other=0.0)
    hit = pos == row * W + col
    tl.store(out_ptr + offsets, tl.where(hit, val, tl.zeros_like(val)), mask=live)


def unpool_gather(values: torch.Tensor, positions: torch.Tensor, out_shape, window):
    """Each output element reads the one pooled value whose window holds it:
    a gather, no zero fill, no atomics. Valid when every position lies inside
    its own (KH, KW) window, as max-pooling's indices do."""
    KH, KW = window
    rows = out_shape[0] * out_shape[1]
    H, W = (out_shape[2], out_shape[3]) if len(out_shape) == 4 else (1, out_shape[2])
    h, w = (values.shape[2], values.shape[3]) if values.dim() == 4 else (1, values.shape[2])
    values, positions = values.contiguous(), positions.contiguous()
    out = torch.empty(out_shape, dtype=values.dtype, device=values.device)
    total = rows * H * W
    if total:
        _unpool_gather_kernel[(triton.cdiv(total, BLOCK),)](values, positions, out, total, H, W, h, w,
                                                           KH=KH, KW=KW, BLOCK=BLOCK)
    return out


@triton.jit
def _unpool_scatter_kernel(values_ptr, positions_ptr, out_ptr, total, L, P, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < total
    row = offsets // L
    pos = tl.load(positions_ptr + offsets, mask=live, other=0)
    val = tl.load(values_ptr + offsets, mask=live, other=0.0)
    tl.store(out_ptr + row * P + pos, val, mask=live & (pos >= 0) & (pos < P))


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
    total = rows * L
    if total:
        _unpool_scatter_kernel[(triton.cdiv(total, BLOCK),)](values, positions, out, total, L, P, BLOCK=BLOCK)
    return out


@triton.jit
def _dispersion_kernel(x_ptr, mask_ptr, y_ptr, total, C, H, W, out_W, S,
                       sb, sc, sh, sw, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < total
    col = offsets % out_W
    row = (offsets // out_W) % H
    b = offsets // (out_W * H)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for i in range(0, C):
        w = col - i * S
        valid = live & (w >= 0) & (w < W)
        xv = tl.load(x_ptr + b * sb + i * sc + row * sh + w * sw, mask=valid, other=0.0)
        mv = tl.load(mask_ptr + row * W + w, mask=valid, other=0.0)
        acc += xv.to(tl.float32) * mv.to(tl.float32)
    tl.store(y_ptr + offsets, acc.to(y_ptr.dtype.element_ty), mask=live)


def dispersion(x: torch.Tensor, mask: torch.Tensor, S: int):
    """Each output sums the C inputs that land on it (a gather): every x element
    read once, the mask multiply fused, y written once, no atomics, float32
    accumulation for the half types."""
    B, C, H, W = x.shape
    out_W = W + (C - 1) * S
    y = torch.empty((B, 1, H, out_W), dtype=x.dtype, device=x.device)
    mask = mask.contiguous()
    total = y.numel()
    if total:
        _dispersion_kernel[(triton.cdiv(total, BLOCK),)](x, mask, y, total, C, H, W, out_W, S, *x.stride(),
                                                        BLOCK=BLOCK)
    return y


@triton.jit
def _dispersion_pinv_kernel(y_ptr, mask_ptr, x_ptr, total, C, H, W, S, syb, syh, syw, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < total
    w = offsets % W
    row = (offsets // W) % H
    i = (offsets // (W * H)) % C
    b = offsets // (W * H * C)
    col = w + i * S
    # coverage of column col: channels i' with 0 <= col - i'*S < W
    step = tl.maximum(S, 1)
    low = tl.maximum((col - W + step) // step, 0)
    high = tl.minimum(col // step, C - 1)
    coverage = tl.where(S == 0, C, high - low + 1).to(tl.float32)
    yv = tl.load(y_ptr + b * syb + row * syh + col * syw, mask=live, other=0.0).to(tl.float32)
    mv = tl.load(mask_ptr + row * W + w, mask=live, other=1.0).to(tl.float32)
    tl.store(x_ptr + offsets, (yv / coverage / mv).to(x_ptr.dtype.element_ty), mask=live)


def dispersion_pinv(y: torch.Tensor, mask: torch.Tensor, S: int, C: int):
    """One pass: each x element reads its y element, computes the coverage of
    that column in registers (no alpha table), divides by it and the mask."""
    B, _, H, _ = y.shape
    W = mask.shape[1]
    x = torch.empty((B, C, H, W), dtype=y.dtype, device=y.device)
    mask = mask.contiguous()
    total = x.numel()
    if total:
        _dispersion_pinv_kernel[(triton.cdiv(total, BLOCK),)](y, mask, x, total, C, H, W, S,
                                                             y.stride(0), y.stride(2), y.stride(3), BLOCK=BLOCK)
    return x
