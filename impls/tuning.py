"""Whether autotuned kernels benchmark their configs now.

``triton.autotune`` benchmarks every config (``do_bench``: about 125 ms
each, after compiling it) the first time it meets a size. That is the point
where a case is timed. It is waste where nothing is timed: the checks run
every Triton strategy at dozens of small adversarial sizes, and on an H100
the sweep's adversarial phase (8,094 items, 1,314 of them Triton's) outlasted
184 s in 16 workers. Inside ``untimed()`` (``harness/measuring/check.py``
enters it for each check item) a kernel meeting a new size takes its first
config without benchmarking (``prune``, its ``early_config_prune``), and on
leaving, the sizes first met inside are forgotten, so a timed call at one
of them later tunes for real. The check then judges the first config at its
sizes; the sweep judges the tuned config at the timed size, on every call
it times (call 1 and the call after the samples).

No Triton import here: the harness enters ``untimed()`` whether or not a
Triton strategy runs.
"""

from __future__ import annotations

import contextlib

_UNTIMED = False
_KERNELS: list = []  # the autotuned kernels (impls/kernels_triton.py registers each)


def benchmarking() -> bool:
    """Whether an autotuner meeting a new size should benchmark its configs."""
    return not _UNTIMED


def register(kernel):
    """Keeps an autotuned kernel, whose tuned sizes ``untimed()`` forgets on leaving; returns it."""
    _KERNELS.append(kernel)
    return kernel


def prune(configs, named_args=None, **kwargs):
    """``early_config_prune``: every config while benchmarking, else the first."""
    return list(configs) if benchmarking() else list(configs)[:1]


@contextlib.contextmanager
def untimed():
    """Within: new sizes take their kernel's first config, unbenchmarked (nested: the outer one rules)."""
    global _UNTIMED
    if _UNTIMED:
        yield
        return
    known = {id(kernel): set(getattr(kernel, "cache", None) or ()) for kernel in _KERNELS}
    _UNTIMED = True
    try:
        yield
    finally:
        try:
            # Forgotten first, then benchmarking again: an interruption in between leaves untimed
            # sizes forgotten (tuned again later), never an untuned config kept for a timed call.
            for kernel in _KERNELS:
                cache = getattr(kernel, "cache", None)
                if isinstance(cache, dict):
                    before = known.get(id(kernel), set())
                    for key in [key for key in cache if key not in before]:
                        cache.pop(key, None)
        finally:
            _UNTIMED = False
