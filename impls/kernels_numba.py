"""numba CPU kernels, one per operator; imported only by the numba strategies.

Each kernel is parallel over independent output rows (``prange``), and its
innermost loop runs along contiguous memory with selects instead of branches
so LLVM can vectorise it. Outputs are allocated by the caller (timed) and each
element is written once: no separate zero fill.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from numba import prange

_JIT = dict(parallel=True, cache=True, nogil=True, fastmath=False)


@functools.lru_cache(maxsize=None)
def maxpool2d_kernel(K: int):
    """The maxpool kernel for one window size K, a compile-time constant so the
    window loops unroll (a runtime K made the kernel compute-bound at ~2 ns per
    element; this one runs near the copy bandwidth).

    Flat C-order x of planes (H, W); one window at a time in registers, first
    maximum in row-major order, a NaN beats any number and the first NaN stays.
    Bitwise ``|``/``&`` and selects keep the window free of branches.
    """

    @numba.njit(parallel=True, nogil=True, fastmath=False)
    def kernel(x, H, W, values, indices):
        h, w = H // K, W // K
        planes = x.size // (H * W)
        for plane_row in prange(planes * h):
            plane, i = plane_row // h, plane_row % h
            top = i * K
            row_start = plane * H * W + top * W
            out = plane_row * w
            for j in range(w):
                left = j * K
                best = x[row_start + left]
                arg = left
                for kr in range(K):
                    for kc in range(K):
                        v = x[row_start + kr * W + left + kc]
                        take = (v > best) | ((v != v) & (best == best))
                        best = v if take else best
                        arg = (kr * W + left + kc) if take else arg
                values[out + j] = best
                indices[out + j] = top * W + arg

    return kernel


@numba.njit(**_JIT)
def maxunpool(values, positions, out):
    """Row-parallel: zero the (cache-resident) output row, then scatter into it.
    Returns how many positions were outside [0, P) (skipped, never written)."""
    rows, L = values.shape
    P = out.shape[1]
    bad = 0
    for row in prange(rows):
        for p in range(P):
            out[row, p] = 0
        for l in range(L):
            pos = positions[row, l]
            if 0 <= pos < P:
                out[row, pos] = values[row, l]
            else:
                bad += 1
    return bad


@numba.njit(**_JIT)
def dispersion(x, mask, S, y):
    """Per (b, h) row: y's row (W' values, in L1) zeroed, then each channel's
    masked row added at offset i*S along contiguous 1-D views (vectorised).
    x is read once, y written once."""
    B, C, H, W = x.shape
    out_W = y.shape[3]
    for plane_row in prange(B * H):
        b = plane_row // H
        h = plane_row % H
        y_row = y[b, 0, h]
        mask_row = mask[h]
        for col in range(out_W):
            y_row[col] = 0
        for i in range(C):
            x_row = x[b, i, h]
            offset = i * S
            for w in range(W):
                y_row[offset + w] += x_row[w] * mask_row[w]


@numba.njit(**_JIT)
def dispersion_pinv(y, mask, S, x):
    """Per (h, channel): the denominator coverage·mask of that row built once
    (W values, in L1) and shared by the batch; then each x row is one
    vectorised division of y's slice. y read once from memory, x written once."""
    B, C, H, W = x.shape
    out_W = y.shape[3]
    coverage = np.zeros(out_W, dtype=x.dtype)
    for i in range(C):
        for w in range(W):
            coverage[i * S + w] += 1
    for row in prange(H * C):
        h = row // C
        i = row % C
        offset = i * S
        mask_row = mask[h]
        denominator = np.empty(W, dtype=x.dtype)
        for w in range(W):
            denominator[w] = coverage[offset + w] * mask_row[w]
        for b in range(B):
            x_row = x[b, i, h]
            y_row = y[b, 0, h]
            for w in range(W):
                x_row[w] = y_row[offset + w] / denominator[w]
