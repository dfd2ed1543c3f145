"""numba CPU kernels, one per operator; imported only by the numba strategies.

Each kernel is parallel over independent output rows (``prange``), and its
innermost loop runs along contiguous memory with selects instead of branches
so LLVM can vectorise it. Outputs are allocated by the caller (timed) and each
element is written once: no separate zero fill.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

_JIT = dict(parallel=True, cache=True, nogil=True, fastmath=False)


@numba.njit(**_JIT)
def maxpool2d(x, k, values, indices):
    """First maximum in row-major window order; a NaN beats any number and the
    first NaN is kept. One pass over x; the running best lives in the output."""
    N, C, H, W = x.shape
    h, w = values.shape[2], values.shape[3]
    for plane_row in prange(N * C * h):
        n = plane_row // (C * h)
        c = (plane_row // h) % C
        i = plane_row % h
        top = i * k
        for j in range(w):
            values[n, c, i, j] = x[n, c, top, j * k]
            indices[n, c, i, j] = top * W + j * k
        for kr in range(k):
            r = top + kr
            for kc in range(k):
                if kr == 0 and kc == 0:
                    continue
                for j in range(w):
                    v = x[n, c, r, j * k + kc]
                    best = values[n, c, i, j]
                    take = (v > best) or (v != v and best == best)
                    values[n, c, i, j] = v if take else best
                    indices[n, c, i, j] = (r * W + j * k + kc) if take else indices[n, c, i, j]


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
    masked row added at offset i*S. x is read once, y written once."""
    B, C, H, W = x.shape
    out_W = y.shape[3]
    for plane_row in prange(B * H):
        b = plane_row // H
        h = plane_row % H
        for col in range(out_W):
            y[b, 0, h, col] = 0
        for i in range(C):
            offset = i * S
            for w in range(W):
                y[b, 0, h, offset + w] += x[b, i, h, w] * mask[h, w]


@numba.njit(**_JIT)
def dispersion_pinv(y, mask, S, x):
    """Coverage computed once per call (W' integers); then per (b, h) row each
    channel's slice of y divided by coverage and mask. y read C/…-fold from L1,
    x written once."""
    B, C, H, W = x.shape
    out_W = y.shape[3]
    coverage = np.zeros(out_W, dtype=x.dtype)
    for i in range(C):
        for w in range(W):
            coverage[i * S + w] += 1
    for plane_row in prange(B * H):
        b = plane_row // H
        h = plane_row % H
        for i in range(C):
            offset = i * S
            for w in range(W):
                x[b, i, h, w] = y[b, 0, h, offset + w] / coverage[offset + w] / mask[h, w]
