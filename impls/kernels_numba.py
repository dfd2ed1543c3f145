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


def compiled_into_fresh(kernel, shape, dtype, *arguments):
    """A strategy's timed call for a kernel that writes its whole result into
    its last argument: each call allocates ``np.empty(shape, dtype)``, runs
    ``kernel(*arguments, out)`` and returns ``out``. Called once here, so the
    JIT compiles for these types outside the timed region."""
    def run():
        out = np.empty(shape, dtype=dtype)
        kernel(*arguments, out)
        return out

    run()
    return run


def backward_into_fresh(kernel, shape, *arguments):
    """An explicit backward for a kernel that writes its whole result into its
    last argument: each call allocates ``np.empty(shape)`` in the incoming
    gradient's dtype, runs ``kernel(grad, *arguments, out)`` and returns ``out``."""
    def backward(saved, grad):
        out = np.empty(shape, dtype=grad.dtype)
        kernel(grad, *arguments, out)
        return out

    return backward


@numba.njit(inline="always")
def _start_columns(first, best, index, base, n):
    """The vertical pass's first row: each of the ``n`` columns' best so far is that row's element,
    its flat index ``base + c``. Inlined, so its loop vectorises where it is compiled; ``n`` is
    passed, not read from the slice: with ``first.shape[0]`` the band kernel ran 8-10 % slower at
    64x16x28x28 (the 2-core VM, 1 thread)."""
    for c in range(n):
        best[c] = first[c]
        index[c] = base + c


@numba.njit(inline="always")
def _fold_row(row, best, index, row_base, n):
    """The vertical pass's next row, its ``n`` columns one by one: its element takes the column's
    place only when greater, or the first NaN (a later row loses a tie: the first maximum,
    row-major). One select per element, no branch, so LLVM vectorises it."""
    for c in range(n):
        v = row[c]
        kept = best[c]
        take = (v > kept) | ((v != v) & (kept == kept))
        best[c] = v if take else kept
        index[c] = row_base + c if take else index[c]


# The vertical pass's padding pays where it replaces a scalar tail of a few columns, not where it
# adds a vector's worth of work: measured on the Xeon 6-167 VM, 1 thread, 2026-12-06 (medians, old ->
# padded): spans 10, 12, 14, 28 and 30 (6, 4, 2, 4 and 2 columns added) 0.053 -> 0.039, 0.40 -> 0.36,
# 0.19 -> 0.11, 0.35 -> 0.34 and 0.81 -> 0.59 ms; spans 8, 20 and 24 (8, 12 and 8 added) 0.68 -> 0.79,
# 0.41 -> 0.43 and 0.31 -> 0.33 ms; 56 rounded to 64 was 1-2 % slower.
PAD_COLUMNS_AT_MOST = 6


def maxpool2d_scratch(dtype, index_dtype, W: int, K: int, threads: int):
    """``maxpool2d_kernel``'s last four arguments for rows of ``W`` columns: each thread's scratch
    rows (values, indices), the bands a chunk takes (~16 KiB of scratch, in L1 between the two
    passes) and the vertical pass's columns: ``span`` rounded up to whole vector steps of 16 where
    that adds at most ``PAD_COLUMNS_AT_MOST`` columns to a row of under 32 (the kernel's docstring)."""
    span = (W // K) * K
    rounded = -(-span // 16) * 16
    padded = rounded if span < 32 and rounded - span <= PAD_COLUMNS_AT_MOST else span
    bands_per_item = max(1, (16384 // (np.dtype(dtype).itemsize + np.dtype(index_dtype).itemsize)) // max(span, 1))
    # The last band's padded columns, then a cache line of padding between threads' rows, so that
    # they never share one.
    row_length = -(-(bands_per_item * span + padded - span) // 16) * 16 + 16
    return (np.empty((threads, row_length), dtype=dtype), np.empty((threads, row_length), dtype=index_dtype),
            bands_per_item, padded)


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

    Still in the way at small planes (the 25-17 VM, 1 thread, 2026-12-05):
    64x16x28x28 takes 0.55 ms, 0.47 of them in the vertical pass, 0.59 ns an
    element against 0.16-0.17 at 64 and 128 columns. LLVM's vector body there
    takes 64 columns a step (16 lanes, interleaved 4), so a 28-column band
    never enters it and runs the scalar remainder.

    So the vertical pass runs ``padded`` columns (``span`` rounded up by the
    caller), not ``span``: the columns past it are read from the row's rest or
    the next row and written into the next band's scratch, which that band's
    own pass then writes over, so the loop takes whole vector steps where its
    vector body is short enough. Never past x's end: there a band runs
    ``span``. On the Xeon 6-167 VM (2026-12-06), rounding to 16, medians at 1
    thread, then 2: 64x512x14x14 k2 8.9-9.2 -> 5.5-5.6 ms, then 4.0 -> 2.3 ms;
    64x16x14x14 0.20 -> 0.12 ms; 16x16x30x30 k3 0.14 -> 0.10 ms; 64x16x28x28
    unchanged at 1 thread, 0.22 -> 0.19 ms at 2. Where the rounding adds 8 or
    more columns it costs more than it saves (``maxpool2d_scratch``).

    What is still in the way (the Xeon 6-167 VM, 1 thread, 2026-12-06, outputs
    touched): the vertical pass. At LeNet's 64x50x8x8 the kernel takes 0.168 ms,
    the vertical pass alone 0.145 and the horizontal alone 0.023 (numpy's
    ``x.max()`` reads x in 0.009); at 32x512x14x14, 1.91, 1.47 and 0.41 ms. An
    8-column band is 16 scalar element steps. Tried and dropped: a vertical pass
    over the whole chunk as one flat loop (each row against the row under it,
    half the results unused), then the pairs, then a copy of each band's w
    outputs: 0.146 ms at 8x8 but 0.44 against 0.30 at 24x24; the loop over
    pairs carrying loaded indices stays scalar (LLVM vectorises a stride-2
    max, not a pick that loads two interleaved arrays).
    """

    # Cached like the others: numba keys a closure's cache entry by its cell
    # values too, so each K has its own entry beside this file's.
    @numba.njit(**_JIT)
    def kernel(x, H, W, values, indices, scratch_values, scratch_indices, bands_per_item, padded):
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
                n = padded if start + (K - 1) * W + padded <= x.size else span
                best_slice = column_best[local * span:local * span + n]
                index_slice = column_index[local * span:local * span + n]
                _start_columns(x[start:start + n], best_slice, index_slice, base, n)
                for kr in range(1, K):
                    _fold_row(x[start + kr * W:start + kr * W + n], best_slice, index_slice, base + kr * W, n)
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
def maxunpool_nhwc(values, positions, k, W, out):
    """The 2-D unpool in channels-last: ``values`` and ``positions`` (N, Ho, Wo, C),
    ``out`` (N, H*W*C), contiguous: in a plane held so, position ``pos`` of
    channel c is element ``pos*C + c``, with no division. One task per (n,
    pooled row ho): zero output rows [k*ho, k*ho + k) (the last band takes the
    rows past k*Ho) while they sit in cache, then write the values whose
    position falls in that band; a position outside its band (the scattered
    positions SPEC §1.2 allows) is written by a second pass, once every band is
    zero. Returns how many positions were outside [0, H*W) (skipped, never
    written)."""
    N, Ho, Wo, C = values.shape
    P = out.shape[1] // C
    away = 0
    for task in prange(N * Ho):
        n, ho = task // Ho, task % Ho
        first = ho * k * W  # the band's positions: [first, last)
        last = P if ho == Ho - 1 else first + k * W
        band = out[n, first * C:last * C]
        for e in range(band.shape[0]):
            band[e] = 0
        plane = out[n]
        for wo in range(Wo):
            source, where = values[n, ho, wo], positions[n, ho, wo]
            for c in range(C):
                pos = where[c]
                if first <= pos < last:
                    plane[pos * C + c] = source[c]
                else:
                    away += 1
    if away == 0:
        return 0
    bad = 0
    for n in prange(N):
        plane = out[n]
        for ho in range(Ho):
            first = ho * k * W
            last = P if ho == Ho - 1 else first + k * W
            for wo in range(Wo):
                source, where = values[n, ho, wo], positions[n, ho, wo]
                for c in range(C):
                    pos = where[c]
                    if 0 <= pos < P:
                        if not first <= pos < last:
                            plane[pos * C + c] = source[c]
                    else:
                        bad += 1
    return bad


@numba.njit(**_JIT)
def maxunpool_nhwc_backward(grad_out, positions, grad_values):
    """The gather of ``maxunpool_nhwc`` in channels-last: ``grad_values[n, ho, wo, c] =
    grad_out[n, pos*C + c]``, parallel over (n, ho). A position outside [0, P)
    is counted (its gradient left NaN), never read."""
    N, Ho, Wo, C = positions.shape
    P = grad_out.shape[1] // C
    bad = 0
    for task in prange(N * Ho):
        n, ho = task // Ho, task % Ho
        plane = grad_out[n]
        for wo in range(Wo):
            where, target = positions[n, ho, wo], grad_values[n, ho, wo]
            for c in range(C):
                pos = where[c]
                if 0 <= pos < P:
                    target[c] = plane[pos * C + c]
                else:
                    target[c] = np.nan
                    bad += 1
    return bad


@numba.njit(inline="always")
def _spread_row(narrow, b, h, mask_row, S, W, wide_row, divide):
    """One (b, h) row of the dispersion's sum (the forward, and the
    pseudo-inverse's adjoint): ``wide_row`` (W' values, in L1) zeroed, then
    each channel's row of ``narrow`` times ``mask_row`` (divided by it, with
    ``divide``) added at offset i*S along contiguous 1-D views (vectorised).
    Inlined, so ``divide`` is a constant where the loop is compiled."""
    for col in range(wide_row.shape[0]):
        wide_row[col] = 0
    for i in range(narrow.shape[1]):
        row = narrow[b, i, h]
        # A slice, so the loop indexes with plain w: an index like offset + w
        # keeps numba's negative-index wraparound in the loop and blocks SIMD.
        wide_slice = wide_row[i * S:i * S + W]
        for w in range(W):
            wide_slice[w] += row[w] / mask_row[w] if divide else row[w] * mask_row[w]


@numba.njit(**_JIT)
def dispersion(x, mask, S, y):
    """Per (b, h) row, y's row summed from x's (`_spread_row`): x read once,
    y written once."""
    B, C, H, W = x.shape
    for plane_row in prange(B * H):
        b, h = plane_row // H, plane_row % H
        _spread_row(x, b, h, mask[h], S, W, y[b, 0, h], False)


@numba.njit(cache=True)
def _coverage(C, W, S, out_W, dtype):
    """How many channels cover each of the W' columns (alpha, docs/SPEC.md §1.4): what
    the pseudo-inverse and its adjoint both divide by."""
    coverage = np.zeros(out_W, dtype=dtype)
    for i in range(C):
        for w in range(W):
            coverage[i * S + w] += 1
    return coverage


@numba.njit(**_JIT)
def dispersion_pinv(y, mask, S, x):
    """Coverage computed once per call (W' values); then per (b, h) row each
    channel's slice of y divided by coverage·mask along contiguous rows (one
    multiply and one division per element, vectorised, nothing allocated in
    the parallel loop): y read once from memory, x written once."""
    B, C, H, W = x.shape
    out_W = y.shape[3]
    coverage = _coverage(C, W, S, out_W, x.dtype)
    for plane_row in prange(B * H):
        b, h = plane_row // H, plane_row % H
        y_row = y[b, 0, h]
        mask_row = mask[h]
        for i in range(C):
            x_row = x[b, i, h]
            # Slices, so the loop indexes with plain w (see _spread_row): 6x faster.
            y_slice = y_row[i * S:i * S + W]
            coverage_slice = coverage[i * S:i * S + W]
            for w in range(W):
                x_row[w] = y_slice[w] / (coverage_slice[w] * mask_row[w])


# ------------------------------------------------------------ backward kernels
# docs/SPEC.md §1.5: the explicit backwards of the numba strategies. Same shape as the
# forwards: parallel over independent rows of the gradient they write, each
# element of it written once, no separate zero fill.
@numba.njit(**_JIT)
def maxunpool_backward(grad_out, positions, grad_values):
    """The gather: ``grad_values[row, l] = grad_out[row, positions[row, l]]``,
    row-parallel. A position outside [0, P) is counted (and its gradient
    left NaN), never read."""
    rows, L = positions.shape
    P = grad_out.shape[1]
    bad = 0
    for row in prange(rows):
        source = grad_out[row]
        for l in range(L):
            pos = positions[row, l]
            if 0 <= pos < P:
                grad_values[row, l] = source[pos]
            else:
                grad_values[row, l] = np.nan
                bad += 1
    return bad


@numba.njit(**_JIT)
def dispersion_backward(grad_y, mask, S, grad_x):
    """The adjoint Aᵀ: per (b, h) row, each channel's row of grad_x is grad_y's
    row read at offset i*S times the mask's row (contiguous slices, so the
    inner loop vectorises): grad_y read once, grad_x written once."""
    B, C, H, W = grad_x.shape
    for plane_row in prange(B * H):
        b, h = plane_row // H, plane_row % H
        source = grad_y[b, 0, h]
        mask_row = mask[h]
        for i in range(C):
            out_row = grad_x[b, i, h]
            source_slice = source[i * S:i * S + W]
            for w in range(W):
                out_row[w] = source_slice[w] * mask_row[w]


@numba.njit(**_JIT)
def dispersion_pinv_backward(grad_x, mask, S, grad_y):
    """The pseudo-inverse's adjoint: per (b, h) row, grad_y's row (W' values,
    in L1) zeroed, each channel's row of grad_x divided by the mask's row and
    added at offset i*S, then the row divided by the coverage (columns no
    channel covers stay 0: their gradient is an empty sum). grad_x read once,
    grad_y written once."""
    B, C, H, W = grad_x.shape
    out_W = grad_y.shape[3]
    coverage = _coverage(C, W, S, out_W, grad_y.dtype)
    for plane_row in prange(B * H):
        b, h = plane_row // H, plane_row % H
        out_row = grad_y[b, 0, h]
        _spread_row(grad_x, b, h, mask[h], S, W, out_row, True)
        for col in range(out_W):
            out_row[col] = out_row[col] / coverage[col] if coverage[col] > 0 else out_row[col]


# ------------------------------------------------------- windows of any stride and padding
@numba.njit(inline="always")
def _pick_column(column_best, column_index, first_col, last_col):
    """The horizontal pass of one window: the best of the vertical pass's columns
    ``first_col`` to ``last_col`` (excluded). A tie goes to the smaller flat index
    (row-major window order: the first maximum), a NaN beats any number and the
    first NaN stays. Returns (value, flat index)."""
    best = column_best[first_col]
    best_index = column_index[first_col]
    for c in range(first_col + 1, last_col):
        v = column_best[c]
        index = column_index[c]
        nan_v, nan_best = v != v, best != best
        take = ((v > best) | ((v == best) & (index < best_index)) | (nan_v & ~nan_best)
                | (nan_v & nan_best & (index < best_index)))
        best = v if take else best
        best_index = index if take else best_index
    return best, best_index


@functools.lru_cache(maxsize=None)
def maxpool2d_window_kernel(K: int, S: int, P: int):
    """The maxpool kernel for k×k windows at stride S padded by P (docs/SPEC.md §1.1),
    overlapping (S < K, ResNet's stem) or with gaps (S > K); K, S and P are
    compile-time constants. Parallel over planes (a thread a plane: tens to
    thousands of them, so no thread waits on tiny items); per output row two
    passes, each a plain loop along contiguous memory:

    - vertical: for every input column, the maximum over the window's real rows
      (the padding is never read, so never a maximum) and its plane-relative
      flat index, into the thread's scratch row; a later row takes the place
      only when greater, or the first NaN;
    - horizontal: each output picks among the scratch of its window's columns
      (``_pick_column``). The outputs whose window lies wholly inside the row
      pick over exactly K columns, a trip count LLVM sees as the constant K and
      unrolls; the few at a padded edge clip their columns. Clipping every
      output's columns took 13 ms at 8x64x112x112 (the stem, 1 thread, the
      2-core VM) against 5 ms. A window of -inf only keeps its first real
      element.

    At the stem (8x64x112x112, the Xeon 6-167 VM, 1 thread, 2026-12-06, outputs
    touched) the kernel takes 3.9 ms, its vertical pass alone 2.2 (x read at
    11.5 GB/s, where numpy's ``x.max()`` reads it at 29) and the horizontal
    pick the rest. Keeping each column's maximum over a window's K rows in
    registers, written once, instead of folding row by row into the scratch,
    changed nothing (3.74 -> 3.67 ms; 21.5 -> 19.7 at batch 32).
    """
    inside_first = -(-P // S)  # the first output whose window starts at column 0 or later

    @numba.njit(**_JIT)
    def kernel(x, H, W, h, w, values, indices, scratch_values, scratch_indices):
        planes = x.shape[0]
        inside_last = min((W + P - K) // S, w - 1)  # the last output whose window ends at column W or before
        for plane in prange(planes):
            thread = numba.get_thread_id()
            column_best = scratch_values[thread, :W]
            column_index = scratch_indices[thread, :W]
            source = x[plane]
            for i in range(h):
                top = i * S - P
                first_row, last_row = max(top, 0), min(top + K, H)
                _start_columns(source[first_row], column_best, column_index, first_row * W, W)
                for r in range(first_row + 1, last_row):
                    _fold_row(source[r], column_best, column_index, r * W, W)
                out_values = values[plane, i]
                out_indices = indices[plane, i]
                for j in range(min(inside_first, w)):
                    left = j * S - P
                    out_values[j], out_indices[j] = _pick_column(column_best, column_index, max(left, 0),
                                                                 min(left + K, W))
                for j in range(inside_first, inside_last + 1):  # wholly inside: exactly K columns
                    left = j * S - P
                    out_values[j], out_indices[j] = _pick_column(column_best, column_index, left, left + K)
                for j in range(max(inside_last + 1, inside_first), w):
                    left = j * S - P
                    out_values[j], out_indices[j] = _pick_column(column_best, column_index, max(left, 0),
                                                                 min(left + K, W))

    return kernel


@numba.njit(**_JIT)
def maxpool2d_backward(grad, indices, grad_x):
    """max-pool's backward for every window (docs/SPEC.md §1.5), race-free:
    parallel over planes, each plane's grad_x zeroed while in cache and then
    every window's gradient added at its forward index, windows in row-major
    order, by the one thread that owns the plane (a sum of colliding windows is
    added in the same order on every call). ``grad`` and ``indices`` are
    (planes, h, w), ``grad_x`` (planes, H*W). An index outside the plane is
    never written: returns how many there were.

    The plane, not a band of k rows, is the unit of work: an index needs no
    division to find its row, and the zeroing is one long loop. Against a
    band-wise scatter, which divided each index by W to refuse one outside its
    window, it is 1.6-5x faster (64x50x8x8, 0.34 -> 0.06 ms; 32x512x14x14,
    4.2 -> 0.8 ms; 4x64x360x480, 50 -> 31 ms; float32, Xeon 6-167 VM, 1 thread);
    a row-wise gather that writes grad_x once is 10-20 % faster still on planes
    of 128x128 and more, 5x slower on 8x8."""
    planes, h, w = grad.shape
    size = grad_x.shape[1]
    bad = 0
    for plane in prange(planes):
        out = grad_x[plane]
        for e in range(size):
            out[e] = 0
        plane_grad, plane_indices = grad[plane], indices[plane]
        for i in range(h):
            for j in range(w):
                index = plane_indices[i, j]
                if 0 <= index < size:
                    out[index] += plane_grad[i, j]
                else:
                    bad += 1
    return bad


# ------------------------------------------------------- channels-last (NHWC in memory)
@functools.lru_cache(maxsize=None)
def maxpool2d_nhwc_kernel(K: int, S: int, P: int):
    """The maxpool kernel for a channels-last x (N, H, W, C in memory), any
    window (K, S, P compile-time constants): parallel over (image, output
    row); for each output, the window's real elements in row-major order,
    each a contiguous run of C channels, compared lane by lane (LLVM
    vectorises across C). A window wholly inside the plane loops channels
    outermost over its K*K elements unrolled, each channel's maximum and index
    in registers (2x faster at 64x16x28x28 than a running maximum kept in the
    output); a window cut by the padding keeps that running maximum in the
    output. A later element takes a channel only when greater,
    or the first NaN; the first real element is taken whatever it holds (an
    all -inf window's index). Values and indices are written channels-last
    too, each once: (N, h, w, C) in memory, as torch's channels-last kernel
    returns them."""

    @numba.njit(**_JIT)
    def kernel(x, h, w, values, indices):
        N, H, W, C = x.shape
        for item in prange(N * h):
            n, i = item // h, item % h
            top = i * S - P
            first_row, last_row = max(top, 0), min(top + K, H)
            rows_inside = top >= 0 and top + K <= H
            for j in range(w):
                left = j * S - P
                first_col, last_col = max(left, 0), min(left + K, W)
                if rows_inside and left >= 0 and left + K <= W:
                    # Wholly inside: K*K elements, K a constant, so the window
                    # unrolls and each channel's maximum and index stay in
                    # registers, written once (vectorised across C).
                    for ch in range(C):
                        b = x[n, top, left, ch]
                        b_index = top * W + left
                        for dr in range(K):
                            for dc in range(K):
                                if dr + dc > 0:
                                    v = x[n, top + dr, left + dc, ch]
                                    take = (v > b) | ((v != v) & (b == b))
                                    b = v if take else b
                                    b_index = (top + dr) * W + left + dc if take else b_index
                        values[n, i, j, ch] = b
                        indices[n, i, j, ch] = b_index
                    continue
                best = values[n, i, j]
                best_index = indices[n, i, j]
                start = x[n, first_row, first_col]
                for ch in range(C):
                    best[ch] = start[ch]
                    best_index[ch] = first_row * W + first_col
                for r in range(first_row, last_row):
                    for c in range(first_col, last_col):
                        if r == first_row and c == first_col:
                            continue
                        element = x[n, r, c]
                        flat = r * W + c
                        for ch in range(C):
                            v = element[ch]
                            b = best[ch]
                            take = (v > b) | ((v != v) & (b == b))
                            best[ch] = v if take else b
                            best_index[ch] = flat if take else best_index[ch]

    return kernel


@functools.lru_cache(maxsize=None)
def maxpool2d_nhwc_backward(K: int, S: int, P: int):
    """The backward of ``maxpool2d_nhwc_kernel`` (docs/SPEC.md §1.5) as a gather,
    race-free: parallel over (image, input row); each input element reads the
    indices of the windows covering it (at most ceil(K/S) a side) and adds,
    channel by channel (vectorised across C), the gradients of those whose
    index is itself, windows in row-major order. ``grad``, ``indices``:
    (N, h, w, C) in memory; ``grad_x`` (N, H, W, C), each element written once."""
    span = -(-K // S)

    @numba.njit(**_JIT)
    def backward(grad, indices, grad_x):
        N, H, W, C = grad_x.shape
        h, w = grad.shape[1], grad.shape[2]
        for item in prange(N * H):
            n, r = item // H, item % H
            for c in range(W):
                out = grad_x[n, r, c]
                for ch in range(C):
                    out[ch] = 0
                # A zero of grad_x's dtype: with the literal 0 below, numba typed the select as
                # float64 and added in double (vcvtps2pd, vaddpd, vcvtpd2ps), half the lanes; on the
                # Xeon 6-167 VM the stem's backward at batch 32 took 34.5 ms that way.
                zero = out[0]
                flat = r * W + c
                for di in range(span - 1, -1, -1):
                    i = (r + P) // S - di
                    if i < 0 or i >= h or r + P - i * S >= K:
                        continue
                    for dj in range(span - 1, -1, -1):
                        j = (c + P) // S - dj
                        if j < 0 or j >= w or c + P - j * S >= K:
                            continue
                        window_grad = grad[n, i, j]
                        window_index = indices[n, i, j]
                        for ch in range(C):
                            out[ch] += window_grad[ch] if window_index[ch] == flat else zero
    return backward
