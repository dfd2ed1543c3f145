"""The adversarial check asked of worker processes: the run's verdicts
before its first case is timed (``prefetch``), and ``scatterbench check``'s
adversarial items (``check_items``).

The adversarial check of a strategy is mostly single-threaded: Python,
imports, the libraries' compiles (Inductor, numba, XLA) and small arrays, one
core idle on the 2-core VM. Here each strategy key (strategy, device, dtype,
training mode) is one task for a pool of one worker per core: measured there,
31 s against 40 s in-process for ``make bench``'s 52 keys with the compile
caches warm (each worker pays its own imports, and the two share the cores
with their libraries' threads), and the on-disk compile caches it fills are
warm for the cases that follow. Nothing is timed meanwhile, so the workers
disturb no measurement.

A verdict is the same as the in-process one: each worker runs
``check.AdversarialCheck`` with the run's seed, case time limit and thread
settings. What a worker cannot answer (a strategy registered only in this
process, as a notebook or a test does; a worker that died in native code)
is left to the sweep, which asks it in-process as before.
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
import time
from harness.base.loaded_code import loaded_code
from harness.measuring import check, work_counts

# Below this many keys to check, starting workers (each imports the libraries:
# 2-4 s) costs more than it saves.
MIN_KEYS = 4


# Workers checking strategies on a device other than the CPU share it: each
# holds its own context and memory pool there, and at check sizes their work
# is mostly the host's (Python, imports, Inductor's, XLA's and Triton's
# compiles), so the device's workers are a quarter of the cores, at most
# DEVICE_WORKERS_MAX: 4 on the 16-core GPU machines lent so far, where the
# H200's check of 2026-12-04 ran one worker and left 15 cores idle for 8
# minutes. A quarter leaves each worker's compiles cores of their own
# (Inductor compiles in a pool of its own). Not yet timed against one worker
# on a GPU: the next `make gpu` records the check's seconds at this default;
# DEVICE_WORKERS_ENV sets another count (1: the old one).
DEVICE_WORKERS_ENV = "SCATTERBENCH_DEVICE_CHECK_WORKERS"
DEVICE_WORKERS_MAX = 4
CORES_PER_DEVICE_WORKER = 4


def device_workers(cores: int) -> int:
    """Workers per device (not the CPU) for the adversarial check on a machine of ``cores``:
    ``DEVICE_WORKERS_ENV``, else a quarter of the cores, at least 1 and at most ``DEVICE_WORKERS_MAX``."""
    text = os.environ.get(DEVICE_WORKERS_ENV, "").strip()
    if not text:
        return max(1, min(DEVICE_WORKERS_MAX, cores // CORES_PER_DEVICE_WORKER))
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{DEVICE_WORKERS_ENV}={text!r}: expected a whole number of workers, at least 1")
    return int(text)


def workers_for(keys, cores: int | None = None) -> int:
    """How many workers ``keys`` (the strategy keys, (strategy, device,
    dtype, mode), or how many there are) get: one per core, no more than
    keys; where every key is on a device other than the CPU, no more than
    ``device_workers`` per device. 0: none worth starting."""
    count = keys if isinstance(keys, int) else len(keys)
    cores = cores or os.cpu_count() or 1
    if cores < 2 or count < MIN_KEYS:
        return 0
    workers = min(cores, count)
    devices = set() if isinstance(keys, int) else {key[1] for key in keys}
    if devices and "cpu" not in devices:
        workers = min(workers, device_workers(cores) * len(devices))
    return workers


def compiles_first(keys) -> list:
    """``keys`` in the order the workers should take them: those whose
    strategy compiles (per shape, or its backend compiles at all) first, the
    backends in turn (the one with the most such keys first), each backend's
    keys by how many compiles they cost (distinct shape and dtype pairs of
    their adversarial items), most first; the rest after in their order. The
    long tasks start at once and the cheap ones fill the gaps, instead of one
    worker compiling alone at the end (a cold ``make bench``: PyTensor's three
    seeds, 10 to 40 s each, came last); and two workers do not start the same
    library cold at once, each paying its first compile (Inductor's: 9 s of
    checks of the CPU's vector units, kept on disk for whoever comes next)."""
    from impls.backends import get_backend

    def compiles(key) -> int:
        strat, device, dtype, mode = key
        if not (strat.quick_check or get_backend(strat.backend).compiles):
            return 0
        return len({(item.params, item.dtype) for item in check.adversarial_items(strat, device, dtype, mode)})

    weights = [compiles(key) for key in keys]
    by_backend: dict[str, list] = {}
    for weight, key in sorted(zip(weights, keys), key=lambda pair: -pair[0]):
        if weight:
            by_backend.setdefault(key[0].backend, []).append(key)
    turns = sorted(by_backend.values(), key=len, reverse=True)
    ordered = [group[index] for index in range(len(turns[0]) if turns else 0) for group in turns
               if index < len(group)]
    return ordered + [key for weight, key in zip(weights, keys) if not weight]


# ------------------------------------------------------------- in the worker
_CHECK: check.AdversarialCheck | None = None


def _start_worker(seed: int, timeout_s: float | None, threads: dict) -> None:
    from harness.base import caches
    from harness.measuring import pinning

    global _CHECK
    pinning.apply_threads(threads)
    caches.enable_compile_caches()
    _CHECK = check.AdversarialCheck(seed, timeout_s)


def _answer(op: str, name: str, device: str, dtype: str, mode: str):
    """(found, failure, depends): whether this worker has the strategy, its first adversarial failure
    (None: passed), and the code this worker had loaded once it was reached (``loaded_code``)."""
    from impls.registry import get_operator

    try:
        strat = get_operator(op).strategies[name]
    except KeyError:
        return False, None, None
    failure = _CHECK.failure(strat, device, dtype, mode=mode)
    return True, failure, loaded_code()


def _run_items(op: str, name: str, device: str, dtype: str, mode: str):
    """Each adversarial item of a key, run here, and what they cost:
    ([(verdict, seconds)] in ``check.adversarial_items`` order, the key's
    ``work_counts``, the code this worker had loaded once they ran); None
    when this worker lacks the strategy."""
    from impls.registry import get_operator

    try:
        strat = get_operator(op).strategies[name]
    except KeyError:
        return None
    before = work_counts.snapshot()
    answers = []
    for item in check.adversarial_items(strat, device, dtype, mode):
        start = time.perf_counter()
        verdict = check.run_one_check(item, _CHECK.seed, _CHECK.timeout_s)
        answers.append((verdict, time.perf_counter() - start))
    return answers, work_counts.since(before), loaded_code()


# ------------------------------------------------------------- in the caller
def _in_workers(task, keys, seed: int, timeout_s: float | None, threads: dict, workers: int, on_answer) -> None:
    """``task(op, name, device, dtype, mode)`` for each (strategy, device,
    dtype, mode) in ``keys``, in ``workers`` spawned processes, each set up as
    the run is (seed, case time limit, threads); ``on_answer(key, answer)``
    as each comes back. A worker dying in native code ends the pool early
    (what is left is the caller's to ask in-process); Ctrl-C or SIGTERM stop
    the workers at once (``_stop``)."""
    # spawn, not fork: the run has started thread pools (torch, numba) that a fork would copy mid-state
    pool = concurrent.futures.ProcessPoolExecutor(
        workers, mp_context=multiprocessing.get_context("spawn"), initializer=_start_worker,
        initargs=(seed, timeout_s, dict(threads)))
    try:
        futures = {pool.submit(task, strat.op, strat.name, device, dtype, mode): (strat, device, dtype, mode)
                   for strat, device, dtype, mode in compiles_first(keys)}
        for future in concurrent.futures.as_completed(futures):
            try:
                answer = future.result()
            except concurrent.futures.process.BrokenProcessPool:
                break
            on_answer(futures[future], answer)
    except BaseException:
        _stop(pool)
        raise
    pool.shutdown(wait=True, cancel_futures=True)


def check_items(keys, seed: int, timeout_s: float | None, threads: dict, workers: int,
                on_item=None, results: dict | None = None, counts: dict | None = None, on_key=None) -> dict:
    """``scatterbench check``'s adversarial items, key by key in ``workers``
    processes: {item: CheckResult} for every item of each key a worker
    answered (``on_item(item)`` as each comes), put in ``results`` when
    given (a caller stopped midway keeps what came before the stop); what
    is missing (a worker died, a strategy only this process has) the caller
    runs itself. ``counts``: each answered key's ``work_counts`` put there
    (key -> counts); ``on_key(key, results)`` as each key's items come back
    whole (the check's journal, ``verdict_cache.ItemJournal``). On a 16-core GPU machine the check is mostly compiling,
    one core busy."""
    results = {} if results is None else results
    if not keys or workers < 1:
        return results

    def take(key, answer):
        if answer is None:  # the worker lacks the strategy
            return
        answers, cost, depends = answer
        if counts is not None:
            counts[key] = cost
        came = []
        for item, (verdict, seconds) in zip(check.adversarial_items(*key), answers):
            if item not in results:
                results[item] = check.CheckResult(item, verdict, seconds, depends=depends)
                came.append(results[item])
                if on_item:
                    on_item(item)
        if on_key:
            on_key(key, came)

    _in_workers(_run_items, keys, seed, timeout_s, threads, workers, take)
    return results


# ------------------------------------------------------------- in the run
def prefetch(adversarial: check.AdversarialCheck, keys, threads: dict, workers: int) -> int:
    """Asks ``workers`` processes for the failure of each (strategy, device,
    dtype, mode) in ``keys`` (the caller's: those ``adversarial`` does not
    know yet), and tells ``adversarial`` each answer (``remember``). Returns
    how many were answered; the rest the sweep asks in-process. Ctrl-C or
    SIGTERM stop the workers at once."""
    if not keys or workers < 1:
        return 0
    answered = 0

    def take(key, answer):
        nonlocal answered
        found, failure, depends = answer
        if found:
            strat, device, dtype, mode = key
            adversarial.remember(strat, device, dtype, failure, mode=mode, depends=depends)
            answered += 1

    _in_workers(_answer, keys, adversarial.seed, adversarial.timeout_s, threads, workers, take)
    return answered


# Seconds a stopped worker gets to end on SIGTERM before it is killed.
STOP_GRACE_S = 5.0


def _stop(pool: concurrent.futures.ProcessPoolExecutor) -> None:
    """Ends the workers now, a case in flight included (shutdown alone waits
    for it): SIGTERM, then SIGKILL for any still alive after ``STOP_GRACE_S``.
    A worker left alive is joined for ever at the interpreter's exit: on an
    H100, ``check`` said "interrupted" and then held its 10-minute lease to
    the end, its workers busy compiling."""
    processes = list((pool._processes or {}).values())  # noqa: SLF001 - the executor offers no kill
    manager = getattr(pool, "_executor_manager_thread", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        process.join(timeout=max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.kill()
    for process in processes:
        process.join(timeout=STOP_GRACE_S)
    # The executor's own thread ends once its workers are gone, closing its wake-up pipe; left to
    # end by itself, it raced the interpreter's exit, which wrote to that pipe as it closed
    # ("Exception ignored ... OSError: Bad file descriptor" after a check stopped by SIGTERM).
    # A signal can land between the executor creating that thread and starting it: nothing to join
    # then (joining it raised "cannot join thread before it is started", exit 2 instead of 130).
    if manager is not None and manager.ident is not None:
        manager.join(timeout=STOP_GRACE_S)
