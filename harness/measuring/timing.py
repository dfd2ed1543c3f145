"""Timers (docs/SPEC.md §3): raw per-call samples in seconds, taken the way the
strategy's backend needs.

Host clock (the CPU, and any device without an event timer): warm-up by
time (at least one call; the calls the check just made count, so a call
slower than the warm-up is not made once more for it), then ``perf_counter`` around each call *and the backend's
synchronize*, so an asynchronous backend is timed to completion, not to
dispatch; samples until both ``min_samples`` and ``budget_s`` are met
(capped at ``max_samples``).

Device events (CUDA): one event pair per call, the cache flush before each
call outside the pair, and a device-side delay queued before the flush, so
the device is still busy with the delay while the host launches the flush,
the start event and the call. Without it the device would sit idle inside the
pair whenever the host's launch cost (Python, guards, launchers: 20–80 µs for
Triton and compiled functions) exceeds the flush's ~90 µs of device time, and
that idle time would be counted as the kernel's. The delay is sized from the
call's measured host cost. Two alternatives were weighed: CUDA-graph replay
(only for capturable strategies, and it removes host cost users do pay) and
batches of calls without a per-call synchronise (no per-call samples, and the
flush between calls must still be launched). The delay keeps one sample per
call for every strategy.

Both clocks stop only once the case has settled: while the latest quarter
of the samples runs more than 1.5x faster than all of them, sampling goes on
(up to ``SETTLE_BUDGETS`` times the budget), and leading samples more than
twice the median are then dropped as a slow start and counted
(``slow_start``; see ``stats.SLOW_START_FACTOR`` for the stall that made this
necessary). Python's
cyclic garbage collector is paused while a case is sampled, as ``timeit`` and
``torch.utils.benchmark`` do: after a torch.compile case a full collection
of its ~500,000 objects took 265 ms, and it would land in whichever call
allocated the object that triggered it.

Every call's host cost (``host_s``: median CPU time of the call without
synchronising) is measured too; on the CPU it is the call itself.
The device ceiling is a large buffer copy: bytes read + written / time.

Rounds (SPEC 3): the sweep samples the strategies of one point in rounds,
each round a fresh prepare and a fresh random order (harness/measuring/sweep.py,
``time_in_rounds``); each round's call to ``time_call`` gets its share of the
config's budget, warm-up and sample counts (``round_share``), so a case's
sampling costs what one block did.

One timing path: a ``Clock`` (a backend on a device) times one call, and
everything that times anything uses it: the sweep's samples, the copy
ceiling, the regression gate's re-measurement and the pytest-benchmark view
(which times ``Clock.call``: the call and the backend's synchronize).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import signal
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from harness.results import stats

CPU_CEILING_BYTES = 256 << 20
CUDA_CEILING_BYTES = 1 << 30
FRESH_WRITE_BYTES = 256 << 20
# The device delay is this many times the host cost it must cover, plus a
# margin for the flush's and the event's own launches; capped so that a very
# slow host (a pure-Python strategy on a GPU tensor) does not spin the GPU for
# seconds per sample.
DELAY_HOST_MULTIPLE = 1.5
DELAY_MARGIN_S = 50e-6
DELAY_CAP_S = 20e-3
HOST_COST_CALLS = 20
# Sampling past the budget to let a slow start settle stops at this many budgets.
SETTLE_BUDGETS = 4
# The cross-check's triton.testing.do_bench, in ms: its warm-up and its repetitions (Triton's defaults
# are 25 and 100). It judges our median within ±5 % (``analysis``), and a GPU kernel's calls vary by
# well under 1 %: 25 ms is 10 or more calls of gpu.yaml's slowest kernel (about 2 ms), each after its
# 256 MiB flush, and hundreds of its 50-100 µs ones. At Triton's defaults it took 0.15 s of every
# case, more than a third of gpu.yaml's timing (issue 58: the sweep in one lease).
XCHECK_WARMUP_MS, XCHECK_REP_MS = 5, 25


@dataclass(frozen=True)
class RoundShare:
    """One round's part of a case's sampling (SPEC 3 "Rounds" and "Racing"):
    the config's budget and warm-up divided by its ``max_rounds``, and at
    least one sample, so a strategy that races to the end has had its
    budget, and one that leaves early has spent only its rounds' share.
    Duck-typed as the config's ``Timing`` wherever the timers read it."""
    min_samples: int
    max_samples: int
    budget_s: float
    warmup_s: float


def round_share(timing) -> RoundShare:
    """Each round's share of ``timing`` (the config's) over its ``max_rounds``:
    at least ``min_samples / max_rounds`` samples (one, at the defaults), so a
    strategy slower than its budget takes one call a round, and two rounds
    of one call each show a seed 1,000× slower than the leader the door."""
    rounds = max(1, int(timing.max_rounds))
    return RoundShare(min_samples=max(1, math.ceil(timing.min_samples / rounds)),
                      max_samples=max(1, math.ceil(timing.max_samples / rounds)),
                      budget_s=timing.budget_s / rounds, warmup_s=timing.warmup_s / rounds)


@dataclass(frozen=True)
class Timed:
    samples_s: np.ndarray  # one per timed call
    host_s: float  # median host cost of one call, without synchronising
    xcheck_s: float = float("nan")  # an independent timer's median (CUDA: triton.testing.do_bench)
    slow_start: int = 0  # leading samples dropped as a slow start (not in samples_s)
    # The last timed call's output, kept only when asked (``time_call(keep_last=True)``): the
    # sweep judges it, so every timed call is shown right without one more call to judge.
    last_output: Any = dataclasses.field(default=None, repr=False, compare=False)


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


def _done(samples: list[float], elapsed_s: float, timing) -> bool:
    """Enough samples, and not in the middle of leaving a slow start (unless
    the settling allowance or ``max_samples`` is used up)."""
    if not _enough(len(samples), elapsed_s, timing):
        return False
    if len(samples) >= timing.max_samples or elapsed_s >= SETTLE_BUDGETS * timing.budget_s:
        return True
    if stats.settling(samples):
        return False
    # after dropping a slow start, still min_samples left
    return len(samples) - stats.slow_start(samples) >= timing.min_samples


def _settled(samples: list[float], timing, host_s: float | None = None,
             xcheck: float = float("nan")) -> "Timed":
    # A slow start is dropped like warm-up, but never below min_samples (docs/SPEC.md §3: at least 5).
    dropped = min(stats.slow_start(samples), max(0, len(samples) - timing.min_samples))
    kept = np.asarray(samples[dropped:])
    return Timed(kept, float(np.median(kept)) if host_s is None else host_s, xcheck, dropped)


@contextlib.contextmanager
def _collector_paused():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _NothingQueued:
    """A host with no device queue: the clock of a call with no backend's work to wait for."""
    device_delay = None

    @staticmethod
    def events(device):
        return None

    @staticmethod
    def wait(device, output=None):
        return None


_NOTHING_QUEUED = _NothingQueued()


class Clock:
    """Times one call on ``backend``'s ``device`` the way the backend needs:
    its device events where it has them (a device delay queued first, then
    the cache flush, both outside the event pair), else the host clock around
    the call *and* the backend's synchronize."""

    def __init__(self, backend, device: str, flush: Callable[[], None] | None = None):
        self.backend, self.device, self.flush = backend, device, flush
        self.has_events = backend.events(device) is not None

    def wait(self, output: Any = None) -> None:
        """Until ``output`` and every call queued on the device have finished."""
        self.backend.wait(self.device, output)

    def call(self, fn: Callable[[], Any]) -> Any:
        """``fn()`` to completion: the unit every host-clock sample times."""
        out = fn()
        self.wait(out)
        return out

    def sample_s(self, fn: Callable[[], Any], delay_s: float = 0.0) -> float:
        """Seconds of one call of ``fn``; its output dropped at once."""
        elapsed, out = self.sample_kept(fn, delay_s)
        del out  # the next call allocates its output afresh, as users' calls do
        return elapsed

    def sample_kept(self, fn: Callable[[], Any], delay_s: float = 0.0) -> tuple[float, Any]:
        """Seconds of one call of ``fn``, and its output (dropped outside the
        clock either way: the caller drops it before the next call)."""
        if not self.has_events:
            t0 = time.perf_counter()
            out = self.call(fn)
            t1 = time.perf_counter()
            return t1 - t0, out
        if self.backend.device_delay is not None and delay_s > 0:
            self.backend.device_delay(self.device, delay_s)
        if self.flush is not None:
            self.flush()
        events = self.backend.events(self.device)
        events.start()
        out = fn()
        events.stop()
        # One sample at a time keeps the wall-clock budget honest; the events
        # measure only the device time between them.
        return events.elapsed_s(), out


def _warm_up(fn: Callable[[], Any], clock: Clock, warmup_s: float) -> None:
    start = time.perf_counter()
    while True:  # at least one call, then by time
        clock.call(fn)  # the output is dropped at once, as in every sample
        if time.perf_counter() - start >= warmup_s:
            return


def host_cost_s(fn: Callable[[], Any], clock: Clock, calls: int = HOST_COST_CALLS) -> float:
    """Median CPU time of one call without waiting for the device; each call
    is synchronised afterwards, outside the measurement, so queued work never
    backs up into the next call's launch."""
    costs = []
    for _ in range(calls):
        t0 = time.perf_counter()
        out = fn()
        t1 = time.perf_counter()
        clock.wait(out)
        del out
        costs.append(t1 - t0)
    return statistics.median(costs)


def _sample(fn: Callable[[], Any], timing, clock: Clock, delay_s: float = 0.0, host_s: float | None = None,
            keep_last: bool = False) -> Timed:
    """Samples until ``_done``, one ``clock.sample_kept`` at a time, each
    output dropped before the next call (the allocator sees what it sees when
    a user drops a result), the last one kept when ``keep_last``."""
    samples: list[float] = []
    begin = time.perf_counter()
    while True:
        out = None  # the kept output (keep_last) let go before the next call, as a user lets a result go
        elapsed, out = clock.sample_kept(fn, delay_s)
        if not keep_last:
            out = None
        samples.append(elapsed)
        if _done(samples, time.perf_counter() - begin, timing):
            timed = _settled(samples, timing, host_s)
            return dataclasses.replace(timed, last_output=out) if keep_last else timed


def time_host(fn: Callable[[], Any], timing, clock: Clock | None = None, warmed_s: float = 0.0,
              keep_last: bool = False) -> Timed:
    """Host clock around the call and the backend's synchronize (``clock``:
    a host clock of a backend; without one, nothing to wait for).
    ``warmed_s``: how long the calls of ``fn`` already made took (the
    check's call 1, just before); at least the warm-up's time, they are its
    warm-up, and no further call is made for it: a seed taking 1.2 s a call
    was called once more for nothing (the slow seeds' warm-ups were 5 s of a
    `make bench`)."""
    clock = clock or Clock(_NOTHING_QUEUED, "cpu")
    with _collector_paused():
        if warmed_s < timing.warmup_s:
            _warm_up(fn, clock, timing.warmup_s)
        return _sample(fn, timing, clock, keep_last=keep_last)


def device_delay_s(host_s: float) -> float:
    return min(DELAY_CAP_S, DELAY_HOST_MULTIPLE * host_s + DELAY_MARGIN_S)


def time_device(fn: Callable[[], Any], timing, clock: Clock, host_s: float | None = None,
                keep_last: bool = False) -> Timed:
    """Device events around each call; see the module docstring for the delay.
    ``host_s``: the call's host cost, already measured (an earlier round's),
    or None to measure it here."""
    with _collector_paused():
        _warm_up(fn, clock, timing.warmup_s)
        host_s = host_cost_s(fn, clock) if host_s is None else host_s
        return _sample(fn, timing, clock, device_delay_s(host_s), host_s, keep_last)


def xcheck_s(fn: Callable[[], Any], device: str) -> float:
    """An independent timer's median for the same call (CUDA:
    ``triton.testing.do_bench``, which flushes L2 and times with its own
    events); NaN where none is available."""
    if device != "cuda":
        return float("nan")
    try:
        from triton.testing import do_bench
    except ImportError:
        return float("nan")
    return float(do_bench(fn, warmup=XCHECK_WARMUP_MS, rep=XCHECK_REP_MS, return_mode="median")) / 1e3


def time_call(fn: Callable[[], Any], backend, device: str, timing, flush: Callable[[], None] | None = None,
              cross_check: bool = True, warmed_s: float = 0.0, host_s: float | None = None,
              keep_last: bool = False) -> Timed:
    """Times ``fn`` with the timer its backend needs on ``device``;
    ``warmed_s``: the host clock's (``time_host``). Device events always warm
    up by time: the device's clocks ramp up under load, which a check's one
    call need not have done. ``timing``: the config's, or one round's share
    of it (``round_share``); ``host_s``: the device path's (``time_device``).
    ``keep_last``: the last timed call's output comes back in ``last_output``."""
    clock = Clock(backend, device, flush)
    if not clock.has_events:
        return time_host(fn, timing, clock, warmed_s, keep_last)
    timed = time_device(fn, timing, clock, host_s, keep_last)
    if cross_check:
        return dataclasses.replace(timed, xcheck_s=xcheck_s(fn, device))
    return timed


def copy_ceilings_gbps(device: str, nbytes: int | None = None, repeats: int = 10) -> dict[str, float]:
    """Copy bandwidth of ``device`` (bytes read + written per second, in GB/s)
    per backend that can copy there (``Backend.copy``), each timed by its own
    clock: the best of ``repeats`` copies after a warm-up."""
    from impls.backends import BACKENDS

    nbytes = nbytes or (CUDA_CEILING_BYTES if device != "cpu" else CPU_CEILING_BYTES)
    found = {}
    for backend in BACKENDS.values():
        if backend.copy is None or device not in backend.devices or backend.unavailable() \
                or not backend.present(device):
            continue
        copy = backend.copy(device, nbytes)
        if copy is None:
            continue
        clock = Clock(backend, device)
        clock.sample_s(copy)  # warm-up
        found[backend.name] = 2 * nbytes / min(clock.sample_s(copy) for _ in range(repeats)) / 1e9
        del copy
    return found


def copy_ceiling_gbps(device: str, nbytes: int | None = None, repeats: int = 10) -> float:
    """The device's copy ceiling: the best copy bandwidth any backend reaches
    there (``copy_ceilings_gbps``); NaN where none can copy."""
    return max(copy_ceilings_gbps(device, nbytes, repeats).values(), default=float("nan"))


def fresh_write_gbps(allocator: str, nbytes: int = FRESH_WRITE_BYTES, repeats: int = 5) -> float:
    """Write bandwidth into a freshly allocated CPU buffer (bytes written per second,
    in GB/s): what a strategy pays per byte of an output it allocates in the
    timed call, the OS zeroing each new page on first touch included. The copy
    ceiling writes into a buffer already touched and does not pay that.

    ``allocator`` names a backend with a ``fresh_buffer`` (numpy's asks for
    transparent huge pages, torch's does not by default); the write is torch's
    ``fill_`` on every thread torch may use, whoever allocated. Best of ``repeats``.
    """
    import torch

    from impls.backends import fresh_allocators, get_backend

    known = fresh_allocators()
    if allocator not in known:
        raise ValueError(f"allocator={allocator!r}: expected one of {', '.join(map(repr, known))}")
    allocate = get_backend(allocator).fresh_buffer
    seconds: list[float] = []
    for _ in range(repeats + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        buffer = torch.as_tensor(allocate(nbytes))
        buffer.fill_(1.0)
        seconds.append(time.perf_counter() - t0)
        del buffer
    return nbytes / min(seconds[1:]) / 1e9
