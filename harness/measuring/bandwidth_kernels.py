"""numba loops that read and write a buffer again and again, for the CPU's bandwidth curves
(harness/measuring/ceilings.py, ``measure_curves_here``): beside torch's ``sum`` and ``fill_`` and
numpy's, so that each rate of a curve is the fastest of several ways of moving the bytes, an upper
bound, not one library's speed (docs/SPEC.md §3, "Floors by size").

Each runs over as many chunks as numba has threads (``numba.get_num_threads()``: the run's thread
setting, which the measuring child applies), each thread its own contiguous slice, every pass over
the whole slice. Each pass must really move its bytes: a read sums the slice into an accumulator
carried from the pass before (so no pass is invariant, and none can be hoisted), a write stores the
pass's own number (so no pass's stores are dead). ``fastmath`` lets LLVM vectorise the sum across
lanes, as a real kernel would.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange


# Each thread loops over its own slice from 0: a loop index from ``start`` may be negative as far
# as numba knows, and its wraparound check kept the loop scalar (9 GB/s at 256 KiB on the 25-17 VM,
# against 113 GB/s over the slice).
@numba.njit(parallel=True, fastmath=True, cache=True)
def read_passes(buffer: np.ndarray, passes: int, chunks: int) -> float:
    """The sum of ``buffer`` taken ``passes`` times (float32 reads, vectorised), in ``chunks``
    slices, one a thread."""
    n = buffer.size
    total = 0.0
    for chunk in prange(chunks):
        part = buffer[chunk * n // chunks:(chunk + 1) * n // chunks]
        acc = np.float32(0.0)
        for _ in range(passes):
            for i in range(part.size):
                acc += part[i]
        total += acc
    return total


@numba.njit(parallel=True, cache=True)
def write_passes(buffer: np.ndarray, passes: int, chunks: int) -> None:
    """Writes every element of ``buffer`` ``passes`` times, pass p storing p (the last leaves
    ``passes - 1`` everywhere), in ``chunks`` slices, one a thread."""
    n = buffer.size
    for chunk in prange(chunks):
        part = buffer[chunk * n // chunks:(chunk + 1) * n // chunks]
        for p in range(passes):
            value = np.float32(p)
            for i in range(part.size):
                part[i] = value
