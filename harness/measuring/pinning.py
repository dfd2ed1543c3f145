"""Thread settings: each backend's threads knob applied, read back and
restored, and the warnings for unpinned or oversubscribed threads."""

from __future__ import annotations

import contextlib
import os
from typing import Mapping

from harness.measuring.facts import at_capacity, competing_load


def apply_threads(threads: Mapping[str, int | None]) -> dict:
    """Sets each backend's threads knob (``threads`` is keyed by backend
    name; None or absent leaves it alone) in the knobs' setting order, then
    reads every installed knob back: what is in force once all are set, which
    the run records. The order and why are each knob's (impls/backends.py):
    starting numba's threading layer resets the OpenMP runtime torch shares,
    so torch set first ran with every core again."""
    from impls.backends import thread_knobs

    knobs = [backend for backend in thread_knobs() if not backend.unavailable()]
    for backend in knobs:
        if threads.get(backend.name):
            backend.threads.set(threads[backend.name])
        # Read at its turn too: reading can start a library's threading layer
        # (numba's resets the OpenMP runtime), which must not happen after the
        # knobs set later in the order (torch's went from 1 back to 2).
        backend.threads.get()
    return {backend.name: backend.threads.get() for backend in knobs}


def threads_in_force() -> dict:
    """What each installed backend's thread pool runs now (its knob read
    back), enough for ``restore_threads`` to put it back. Read in the reverse
    of the setting order: reading a knob can start its library's threading
    layer, and numba's resets the OpenMP runtime torch shares, so read first
    it turned a caller's torch at 1 thread into 2 before torch's was read
    (and that 2 was "put back")."""
    from impls.backends import thread_knobs

    return {backend.name: backend.threads.get() for backend in reversed(thread_knobs()) if not backend.unavailable()}


def restore_threads(saved: dict) -> None:
    """Puts back what ``threads_in_force`` saw, in the knobs' setting order."""
    apply_threads({name: count for name, count in saved.items() if count})


@contextlib.contextmanager
def threads_applied(threads):
    """``apply_threads(threads)`` for the block (yields what is in force),
    and the caller's own settings back afterwards: how ``bench()`` pins a
    notebook's thread pools without leaving them pinned."""
    saved = threads_in_force()
    try:
        yield apply_threads(threads)
    finally:
        restore_threads(saved)


def unpinned_threads(threads, backends=None) -> list[str]:
    """The installed backends whose threads a config (keyed by backend) left
    to the library's default (every core); only those among ``backends``
    (the ones a sweep's strategies run on) where given."""
    from impls.backends import thread_knobs

    return [backend.name for backend in thread_knobs()
            if not backend.unavailable() and not (threads or {}).get(backend.name)
            and (backends is None or backend.name in backends)]


def oversubscription_warning(threads, load: float | None = None, cores: int | None = None,
                             backends=None) -> str | None:
    """One line when some thread pools are unpinned and the machine is at or
    above its core count at the start: a pool sized to every core then waits
    for cores the other work holds (on the 2-core VM with a CPU hog per core,
    a 5.5 µs max_pool2d call measured 34 ms that way unpinned, 5.5-6.0 µs
    with every pool at one thread). ``backends``: those the timed strategies
    run on (a torch-only sweep does not wait on JAX's pool). None otherwise."""
    unpinned = unpinned_threads(threads, backends)
    if not unpinned:
        return None
    cores = cores or os.cpu_count() or 1
    load = competing_load() if load is None else load
    if not at_capacity(load, cores):
        return None
    names = ", ".join(f"threads.{name}" for name in unpinned)
    return (f"the machine is loaded ({load:.1f} runnable against {cores} cores) and {names} "
            f"{'is' if len(unpinned) == 1 else 'are'} unpinned, so each pool starts one thread per core and "
            f"waits for cores the other work holds: timings may be many times too slow; pin them, e.g. "
            f"threads: 1 in the config (every backend's pool at one thread), or bench(..., threads=1)")
