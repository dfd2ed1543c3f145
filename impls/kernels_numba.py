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
    """The maxpool kernel for one window size K (a compile-time constant).

    Per band of K input rows: a vertical pass keeps, for every column, the
    maximum over the K rows and the row it came from (contiguous rows, so it
    vectorises); a horizontal pass then picks each window's best column,
    breaking ties by row-major order (row*K + column), so the first maximum
    wins; a NaN beats any number. The column state lives in a per-thread
    scratch row (``scratch_values``/``scratch_rows``, one row per numba thread,
    W wide) that stays in L1. Flat C-order x; reads it once.

    A window-at-a-time version with runtime K ran at ~2 ns per element
    (compute-bound); this one runs at the copy bandwidth.
    """

    @numba.njit(parallel=True, nogil=True, fastmath=False)
    def kernel(x, H, W, values, indices, scratch_values, scratch_rows, rows_per_item):
        h, w = H // K, W // K
        span = w * K
        planes = x.size // (H * W)
        # Each parallel item is rows_per_item consecutive output rows: a whole plane
        # when there are planes enough to share out (less scheduling per element),
        # a single row when there are not (one large plane still uses every thread).
        for item in prange((planes * h) // rows_per_item):
            thread = numba.get_thread_id()
            column_best = scratch_values[thread]
            column_row = scratch_rows[thread]
            for plane_row in range(item * rows_per_item, (item + 1) * rows_per_item):
                plane, i = plane_row // h, plane_row % h
                top = i * K
                start = plane * H * W + top * W
                # Slices throughout, so loops index from 0: an index like start + c keeps
                # numba's negative-index wraparound in the loop and blocks SIMD.
                first = x[start:start + W]
                for c in range(span):
                    column_best[c] = first[c]
                    column_row[c] = 0
                for kr in range(1, K):
                    row = x[start + kr * W:start + (kr + 1) * W]
                    for c in range(span):
                        v = row[c]
                        best = column_best[c]
                        take = (v > best) | ((v != v) & (best == best))
                        column_best[c] = v if take else best
                        column_row[c] = kr if take else column_row[c]
                best_row = values[plane_row * w:(plane_row + 1) * w]
                arg_row = indices[plane_row * w:(plane_row + 1) * w]
                for j in range(w):
                    left = j * K
                    best = column_best[left]
                    order = column_row[left] * K
                    for kc in range(1, K):
                        v = column_best[left + kc]
                        candidate = column_row[left + kc] * K + kc
                        take = (v > best) | ((v == best) & (candidate < order)) | ((v != v) & (best == best))
                        best = v if take else best
                        order = candidate if take else order
                    best_row[j] = best
                    arg_row[j] = (top + order // K) * W + left + order % K

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
            # A slice, so the loop indexes with plain w: an index like offset + w
            # keeps numba's negative-index wraparound in the loop and blocks SIMD.
            y_slice = y_row[i * S:i * S + W]
            for w in range(W):
                y_slice[w] += x_row[w] * mask_row[w]


@numba.njit(**_JIT)
def dispersion_pinv(y, mask, S, x):
    """Coverage computed once per call (W' values); then per (b, h) row each
    channel's slice of y divided by coverage·mask along contiguous rows (one
    multiply and one division per element, vectorised, nothing allocated in
    the parallel loop): y read once from memory, x written once."""
    B, C, H, W = x.shape
    out_W = y.shape[3]
    coverage = np.zeros(out_W, dtype=x.dtype)
    for i in range(C):
        for w in range(W):
            coverage[i * S + w] += 1
    for plane_row in prange(B * H):
        b = plane_row // H
        h = plane_row % H
        y_row = y[b, 0, h]
        mask_row = mask[h]
        for i in range(C):
            x_row = x[b, i, h]
            # Slices, so the loop indexes with plain w (see dispersion): 6x faster.
            y_slice = y_row[i * S:i * S + W]
            coverage_slice = coverage[i * S:i * S + W]
            for w in range(W):
                x_row[w] = y_slice[w] / (coverage_slice[w] * mask_row[w])
