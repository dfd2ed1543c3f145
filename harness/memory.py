"""Peak memory of one call, outside the timed region.

CUDA: the caching allocator's peak over the call. CPU: growth of the
process's resident-set high-water mark, reset before the call through
/proc/self/clear_refs (Linux); it sees torch, numpy and numba allocations
alike. Elsewhere the CPU figure is unavailable (NaN)."""

from __future__ import annotations

import os
from typing import Any, Callable

_STATUS = "/proc/self/status"


def _status_bytes(key: str) -> int:
    with open(_STATUS) as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def cpu_peak_supported() -> bool:
    return os.path.exists("/proc/self/clear_refs") and os.path.exists(_STATUS)


def call_with_peak(fn: Callable[[], Any], device: str) -> tuple[Any, float]:
    """Calls ``fn`` once; returns its output and the bytes it needed at peak."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        out = fn()
        torch.cuda.synchronize()
        return out, float(torch.cuda.max_memory_allocated() - before)
    if not cpu_peak_supported():
        return fn(), float("nan")
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current RSS
    except OSError:
        return fn(), float("nan")
    before = _status_bytes("VmRSS:")
    out = fn()
    return out, float(max(_status_bytes("VmHWM:") - before, 0))
