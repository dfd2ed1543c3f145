"""Peak memory of one call, outside the timed region, and the memory a case
(or a check) may plan to use: one estimate (`needed_bytes`) and one headroom
(`fits`), for the sweep's guard and the check's alike.

A backend that tracks its own device memory reports the peak (torch on
CUDA: the caching allocator's peak over the call). Otherwise: growth of the
process's resident-set high-water mark, reset before the call through
/proc/self/clear_refs (Linux); it sees torch, numpy and numba allocations
alike. Elsewhere, and on a device whose backend cannot tell its peak, the
figure is unavailable (NaN)."""

from __future__ import annotations

import os
from typing import Any, Callable

from impls.backends import itemsize

_STATUS = "/proc/self/status"


def _status_bytes(key: str) -> int:
    with open(_STATUS) as status:
        for line in status:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def cpu_peak_supported() -> bool:
    return os.path.exists("/proc/self/clear_refs") and os.path.exists(_STATUS)


def call_with_peak(fn: Callable[[], Any], backend, device: str) -> tuple[Any, float]:
    """Calls ``fn`` once; returns its output and the bytes it needed at peak."""
    if backend.peak_memory is not None:
        measured = backend.peak_memory(fn, device)
        if measured is not None:
            return measured
    # The resident set says nothing about a device's own memory.
    if device != "cpu" or not cpu_peak_supported():
        return fn(), float("nan")
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current RSS
    except OSError:
        return fn(), float("nan")
    before = _status_bytes("VmRSS:")
    out = fn()
    return out, float(max(_status_bytes("VmHWM:") - before, 0))


# ------------------------------------------------------------ what may be used
def _read_int(path: str) -> int | None:
    try:
        with open(path) as handle:
            text = handle.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def cgroup_free_bytes() -> int | None:
    """Room left under this process's cgroup memory limit (v2, then v1), or
    None where there is no limit."""
    for limit_path, usage_path in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        # v1 reports "no limit" as a huge number
        if limit is not None and usage is not None and limit < 1 << 60:
            return max(limit - usage, 0)
    return None


def rlimit_free_bytes() -> int | None:
    """Room left under the address-space limit (``ulimit -v``), or None."""
    import resource

    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        virtual = _status_bytes("VmSize:")
    except (OSError, KeyError):
        return None
    return max(soft - virtual, 0)


def host_free_bytes() -> int:
    """The smallest of what the machine, the cgroup and the rlimits allow."""
    import psutil

    candidates = [int(psutil.virtual_memory().available), cgroup_free_bytes(), rlimit_free_bytes()]
    return min(value for value in candidates if value is not None)


def free_bytes(backend, device: str) -> int:
    """What ``device`` has free, as its backend tells (else the host's)."""
    if backend.free_bytes is not None:
        measured = backend.free_bytes(device)
        if measured is not None:
            return measured
    return host_free_bytes()


# ------------------------------------------------------------ what a case needs
# Fraction of the free memory a case or a check may plan to use before it is
# skipped: the rest is for what no estimate sees (the interpreter, libraries'
# pools and caches).
HEADROOM = 0.8


def needed_bytes(op, strat, params: dict, dtype: str, mode: str = "forward") -> int:
    """What checking ``strat`` on one point in the training ``mode`` needs:
    inputs + outputs at ``dtype`` (the incoming gradient and the gradient
    too in a training mode), the strategy's temporaries, the float64
    reference the check holds beside them (``reference_bytes``), and the
    comparison's own float64 temporaries (the output widened, and its
    difference from the reference), about as large again, plus the copy of
    the inputs the check compares them with after the last call (at most the
    traffic again). Timing needs no more than its check. Where the case is
    judged on its device (harness/measuring/check.py) the reference is
    there too: this is the device's need, and the check's memory guard asks
    the host for ``reference_bytes`` besides."""
    traffic = _bytes(op, params, itemsize(dtype), mode)
    return int(traffic * (2 + strat.temp_factor) + 2 * reference_bytes(op, params, mode))


def reference_bytes(op, params: dict, mode: str = "forward") -> int:
    """The float64 reference of one point in ``mode``: its inputs, its
    oracle's output and, in a training mode, the incoming gradient and the
    oracle's gradient (the operator's bytes formulas at 8 bytes a value)."""
    return _bytes(op, params, 8, mode)


def _bytes(op, params: dict, size: int, mode: str) -> int:
    from impls import training

    if mode == training.FORWARD or op.gradient is None:
        return op.bytes_moved(params, size)
    return training.bytes_moved(op, params, size, training.FORWARD_BACKWARD)


def fits(needed: float, free: float) -> bool:
    """Whether ``needed`` bytes leave the `HEADROOM` of ``free`` bytes."""
    return needed <= HEADROOM * free


def shortfall(needed: float, free: float, where: str, carrying: str = "") -> str | None:
    """What a memory guard says when ``needed`` bytes do not fit ``free`` on
    ``where`` (``fits``): "needs about N GiB on WHERE<carrying>, F GiB free";
    None when they fit. ``carrying`` names what the need includes (" with its
    float64 reference")."""
    if fits(needed, free):
        return None
    return f"needs about {needed / 2**30:.2f} GiB on {where}{carrying}, {free / 2**30:.2f} GiB free"
