"""Whether autotuned kernels tune now.

``triton.autotune`` benchmarks every config (``do_bench``: about 0.1 s
each, after compiling it) the first time it meets a key (the sizes); Triton
before 3.9 does so even for the single config a prune leaves. That is the
point where a case is timed, and waste where nothing is timed: the check
runs every Triton strategy at dozens of small adversarial sizes, forward and
backward, and on an H200 (Triton 3.6) those benchmarks were about 250 s of
gpu.yaml's check. Inside ``untimed()`` (``harness/measuring/check.py``
enters it for each check item) a registered kernel does not enter its
autotuner at all: it launches its first config directly (the autotuner's
``fn.run`` with that config's arguments, what the autotuner itself launches
once it has chosen), so nothing is benchmarked, whatever the Triton version,
and the autotuner's cache is left as it was. A timed call at the same sizes
later tunes for real. The check judges the first config at its sizes; the
sweep judges the tuned config at the timed size, on every call it times
(call 1 and the call after the samples).

No Triton import here: the harness enters ``untimed()`` whether or not a
Triton strategy runs.
"""

from __future__ import annotations

import contextlib

_UNTIMED = False


def benchmarking() -> bool:
    """Whether an autotuned kernel meeting a new size should benchmark its configs."""
    return not _UNTIMED


def register(kernel):
    """``kernel`` (a ``triton.autotune`` autotuner), launching its first
    config without its autotuner while ``untimed()``; returns it."""
    def run(*args, **kwargs):
        if benchmarking():
            return type(kernel).run(kernel, *args, **kwargs)  # the class's: whatever wraps it is seen
        return kernel.fn.run(*args, **kwargs, **kernel.configs[0].all_kwargs())

    kernel.run = run  # what ``kernel[grid](...)`` calls
    return kernel


@contextlib.contextmanager
def untimed():
    """Within: registered kernels launch their first config, unbenchmarked (nested: the outer one rules)."""
    global _UNTIMED
    if _UNTIMED:
        yield
        return
    _UNTIMED = True
    try:
        yield
    finally:
        _UNTIMED = False
