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

    The kernel works on chunks of consecutive bands (a band is the K input
    rows under one output row; the caller sizes a chunk to fit in L1) in two
    passes, each a plain loop along contiguous memory, so LLVM vectorises both:

    - vertical: for every column of every band in the chunk, the maximum over
      the band's K rows and its plane-relative flat index, into the thread's
      scratch rows (packed: ``span`` = (W // K) * K columns per band);
    - horizontal: one flat loop over the chunk's outputs, output ``o`` picking
      among scratch ``o*K .. o*K+K-1``; a tie goes to the smaller flat index,
      which is row-major window order, so the first maximum wins. A NaN beats
      any number.

    Chunks of several bands matter for small planes: with one 28-wide band at
    a time, the horizontal pass read scratch values still in flight from the
    vertical pass's vector stores (store-forwarding stalls) and every loop ran
    shorter than one unrolled vector step; 64x16x28x28 took 1.0 ms, chunked it
    takes 0.2 ms. A window-at-a-time loop with a runtime K ran at ~2 ns per
    element (compute-bound).
    """

    @numba.njit(parallel=True, nogil=True, fastmath=False)
    def kernel(x, H, W, values, indices, scratch_values, scratch_indices, bands_per_item):
        h, w = H // K, W // K
        span = w * K
        bands = (x.size // (H * W)) * h
        for item in prange((bands + bands_per_item - 1) // bands_per_item):
            # Per-thread scratch rows, padded by the caller so threads share no cache line.
            thread = numba.get_thread_id()
            column_best = scratch_values[thread]
            column_index = scratch_indices[thread]
            first_band = item * bands_per_item
            last_band = min(first_band + bands_per_item, bands)
            for local in range(last_band - first_band):
                plane, i = (first_band + local) // h, (first_band + local) % h
                base = i * K * W  # plane-relative flat index of the band's first element
                start = plane * H * W + base
                # Slices throughout, so loops index from 0: an index like start + c keeps
                # numba's negative-index wraparound in the loop and blocks SIMD.
                best_slice = column_best[local * span:(local + 1) * span]
                index_slice = column_index[local * span:(local + 1) * span]
                first = x[start:start + span]
                for c in range(span):
                    best_slice[c] = first[c]
                    index_slice[c] = base + c
                for kr in range(1, K):
                    row = x[start + kr * W:start + kr * W + span]
                    row_base = base + kr * W
                    for c in range(span):
                        v = row[c]
                        best = best_slice[c]
                        take = (v > best) | ((v != v) & (best == best))
                        best_slice[c] = v if take else best
                        index_slice[c] = row_base + c if take else index_slice[c]
            out_values = values[first_band * w:last_band * w]
            out_indices = indices[first_band * w:last_band * w]
            for o in range((last_band - first_band) * w):
                best = column_best[o * K]
                best_index = column_index[o * K]
                for kc in range(1, K):
                    v = column_best[o * K + kc]
                    index = column_index[o * K + kc]
                    take = (v > best) | ((v == best) & (index < best_index)) | ((v != v) & (best == best))
                    best = v if take else best
                    best_index = index if take else best_index
                out_values[o] = best
                out_indices[o] = best_index

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
