"""Timers (SPEC 3): one per device, per-call raw samples in seconds.

CPU: ``perf_counter`` around each call; warm-up by time, then samples until
both ``min_samples`` and ``budget_s`` are met (capped at ``max_samples``).
CUDA: one CUDA-event pair per call, a 256 MiB L2 flush before each call
outside the pair, warm-up by time, same stopping rule.
The device ceiling is a large buffer copy: bytes read + written / time.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any, Callable

import numpy as np

L2_FLUSH_BYTES = 256 << 20
CPU_CEILING_BYTES = 256 << 20
CUDA_CEILING_BYTES = 1 << 30
FRESH_WRITE_BYTES = 256 << 20


class CaseTimeout(BaseException):
    """A BaseException, like KeyboardInterrupt: libraries that catch Exception
    broadly (PyTensor's compiler does) must not swallow the time limit."""


@contextlib.contextmanager
def deadline(seconds: float | None):
    """Raises CaseTimeout in the main thread once ``seconds`` have passed.

    Interrupts Python code between bytecodes; a native call finishes first
    (``--isolate`` is the cure for a native kernel that never returns).
    """
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise CaseTimeout(f"exceeded the case time limit of {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _enough(count: int, elapsed_s: float, timing) -> bool:
    if count >= timing.max_samples:
        return True
    return count >= timing.min_samples and elapsed_s >= timing.budget_s


def time_cpu(fn: Callable[[], Any], timing) -> np.ndarray:
    start = time.perf_counter()
    while True:  # warm-up: at least one call, then by time
        out = fn()
        del out
        if time.perf_counter() - start >= timing.warmup_s:
            break
    samples: list[float] = []
    begin = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        del out  # the next call allocates its output afresh, as users' calls do
        samples.append(t1 - t0)
        if _enough(len(samples), t1 - begin, timing):
            return np.asarray(samples)


class CudaFlush:
    """A 256 MiB buffer zeroed before each timed call, evicting L2."""

    def __init__(self):
        import torch

        self.buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")

    def __call__(self):
        self.buffer.zero_()


def time_cuda(fn: Callable[[], Any], timing, flush: CudaFlush) -> np.ndarray:
    import torch

    start = time.perf_counter()
    while True:
        out = fn()
        torch.cuda.synchronize()
        del out
        if time.perf_counter() - start >= timing.warmup_s:
            break
    samples: list[float] = []
    begin = time.perf_counter()
    while True:
        flush()
        before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        before.record()
        out = fn()
        after.record()
        # Synchronising every call keeps the wall-clock budget honest; the events
        # measure only the GPU time between them.
        after.synchronize()
        del out
        samples.append(before.elapsed_time(after) / 1e3)
        if _enough(len(samples), time.perf_counter() - begin, timing):
            return np.asarray(samples)


def time_call(fn, device: str, timing, flush: CudaFlush | None = None) -> np.ndarray:
    if device == "cuda":
        return time_cuda(fn, timing, flush or CudaFlush())
    return time_cpu(fn, timing)


def copy_ceiling_gbps(device: str, nbytes: int | None = None, repeats: int = 10) -> float:
    """Copy bandwidth of ``device`` (bytes read + written per second, in GB/s).

    torch's ``copy_`` uses every thread torch is allowed, like the strategies;
    the best of ``repeats`` copies after a warm-up is the ceiling.
    """
    import torch

    nbytes = nbytes or (CUDA_CEILING_BYTES if device == "cuda" else CPU_CEILING_BYTES)
    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up, and the pages of dst are touched once
    seconds: list[float] = []
    for _ in range(repeats):
        if device == "cuda":
            before, after = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            before.record()
            dst.copy_(src)
            after.record()
            after.synchronize()
            seconds.append(before.elapsed_time(after) / 1e3)
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            seconds.append(time.perf_counter() - t0)
    return 2 * nbytes / min(seconds) / 1e9


def fresh_write_gbps(allocator: str, nbytes: int = FRESH_WRITE_BYTES, repeats: int = 5) -> float:
    """Write bandwidth into a freshly allocated CPU buffer (bytes written per second,
    in GB/s): what a strategy pays per byte of an output it allocates in the
    timed call, the OS zeroing each new page on first touch included. The copy
    ceiling writes into a buffer already touched and does not pay that.

    ``allocator`` is "numpy" (``np.empty``, which asks for transparent huge
    pages) or "torch" (``torch.empty``, which does not by default); the write
    is torch's ``fill_`` on every thread torch may use. Best of ``repeats``.
    """
    import numpy as np
    import torch

    if allocator not in ("numpy", "torch"):
        raise ValueError(f"allocator={allocator!r}: expected 'numpy' or 'torch'")
    seconds: list[float] = []
    for _ in range(repeats + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        if allocator == "numpy":
            buffer = torch.from_numpy(np.empty(nbytes // 4, dtype=np.float32))
        else:
            buffer = torch.empty(nbytes // 4, dtype=torch.float32)
        buffer.fill_(1.0)
        seconds.append(time.perf_counter() - t0)
        del buffer
    return nbytes / min(seconds[1:]) / 1e9
