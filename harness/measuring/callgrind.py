"""The counting instrument: ``scatterbench run CONFIG --instrument callgrind``.

The selected CPU cases run under Callgrind, with cache simulation, and each
row gets per-call ``instructions`` and ``est_cycles`` (harness/results/counts.py)
instead of times. Affordable: one valgrind process, instrumentation on only
around a counted case, numba compiled beforehand in a normal process.
Exact: each case in a fork of that process, one thread per library, a
deterministic allocator, the same inputs on every run, the counted calls in a
thread of their own, a fixed simulated cache. Each choice and the measurement
behind it: docs/COUNTING.md.

CUDA cases and kernels that reach the CPU only through an interpreter
(Triton) are rows with status ``skipped`` and the reason, never counted.
"""

from __future__ import annotations

import _thread
import contextlib
import ctypes
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.base.checkout import ROOT
from harness.base.config import Case
from harness.base.errors import ResultError, UsageError
from harness.measuring import facts, pinning, sweep
from harness.measuring.session import NoCaseInFlight, RunSession
from harness.results import counts, metrics, store
from impls.backends import BACKENDS, get_backend
from impls.registry import get_operator
from impls.status import ERROR, SKIPPED

INSTRUMENT = "callgrind"
CALLS = 3  # counted calls per case; the row holds the count per call
WARMUP_CALLS = 2  # outside collection, after instrumentation is on: lazy set-ups, first touches
# (size in bytes, associativity, line size): a common x86 L1, and the 32 MiB 16-way last level
# of an AMD EPYC core complex; fixed, not the host's, so counts do not depend on the machine
# (a smaller one moved est_cycles by 0.4 % between runs: docs/COUNTING.md).
CACHE = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (33554432, 16, 64)}


def count_threads() -> dict:
    """Every backend's threads knob at 1: a multithreaded runtime's spin-waits are not deterministic."""
    from impls.backends import thread_knobs

    return {backend.name: 1 for backend in thread_knobs()}


THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
# glibc's allocator made deterministic: where an array lands decides which simulated cache sets
# it uses. Every block of this many bytes or more a fresh mapping, the heap's top never padded
# or kept, no per-thread cache (each measured moving counts between runs: docs/COUNTING.md).
MALLOC_TUNABLES = ("glibc.malloc.mmap_threshold=16384", "glibc.malloc.top_pad=0", "glibc.malloc.trim_threshold=16384",
                   "glibc.malloc.tcache_count=0")
# Python's objects from glibc too, from the counting thread's own arena (CallgrindCounter).
PYTHON_MALLOC = "malloc"
# A case's deadline (config timing.timeout_s) is stretched by this under Callgrind.
SLOWDOWN = 50
ROW_MARK = "@scatterbench-count "
DUMP_DIR = "callgrind"
DUMP_PREFIX = "callgrind.out."
ERRORS_LOG, VALGRIND_LOG = "stderr.log", "valgrind.log"
WORK_DIR = "scatterbench-count"
CHILD_RUN_ID = "counting"  # the rows' run_id in the child; the parent writes the run's own
CLIENT_REQUESTS_C = r"""
#include <valgrind/callgrind.h>
void start_instrumentation(void) { CALLGRIND_START_INSTRUMENTATION; }
void stop_instrumentation(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void toggle_collect(void) { CALLGRIND_TOGGLE_COLLECT; }
void dump_stats_at(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
unsigned running_on_valgrind(void) { return RUNNING_ON_VALGRIND; }
"""


# ------------------------------------------------------------------ the tool
def valgrind_version() -> str | None:
    """``3.19.0``, or None where valgrind cannot be run."""
    try:
        done = subprocess.run(["valgrind", "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text.removeprefix("valgrind-") if done.returncode == 0 and text else None


def unavailable() -> str | None:
    """None when counts can be taken here, else one line saying why not."""
    if shutil.which("valgrind") is None:
        return ("valgrind is not installed (Debian: apt-get install valgrind; `make regress` installs it when "
                "run as root)")
    if valgrind_version() is None:
        return "`valgrind --version` fails: valgrind is installed but cannot run here"
    if shutil.which("cc") is None:
        return "no C compiler (cc) to build Callgrind's client requests with (Debian: apt-get install gcc)"
    return None


def build_client_requests(directory: Path) -> Path:
    """Callgrind's client requests (``CLIENT_REQUESTS_C``) as a shared
    library in ``directory``: the official macros, compiled here."""
    source, library = directory / "client_requests.c", directory / "client_requests.so"
    source.write_text(CLIENT_REQUESTS_C)
    try:
        done = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(library), str(source)],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as error:
        raise ResultError(f"cannot compile Callgrind's client requests: {error}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ResultError(f"cannot compile Callgrind's client requests ({source}): {tail} "
                          f"(<valgrind/callgrind.h> comes with Debian's valgrind package)")
    source.unlink()
    return library


class ClientRequests:
    """The compiled client requests, loaded with ctypes: no-ops outside valgrind."""

    def __init__(self, library):
        self.library = ctypes.CDLL(str(library))
        self.library.dump_stats_at.argtypes = [ctypes.c_char_p]
        self.library.running_on_valgrind.restype = ctypes.c_uint
        if not self.library.running_on_valgrind():
            raise RuntimeError("the counting pass is not running under valgrind")
        self.start_instrumentation = self.library.start_instrumentation
        self.stop_instrumentation = self.library.stop_instrumentation
        self.toggle_collect = self.library.toggle_collect

    def dump_stats_at(self, name: str) -> None:
        self.library.dump_stats_at(name.encode())


def count_versions(valgrind: str | None = None) -> dict:
    """What counts depend on besides the code: the tool's and the libraries'
    versions (the backends that say so: ``Backend.counts_version``; glibc's
    too: memcpy and malloc are counted)."""
    libraries = {backend.name: facts.version(backend.distribution or backend.module)
                 for backend in BACKENDS.values() if backend.counts_version}
    return {"valgrind": valgrind or valgrind_version(), "python": platform.python_version(), **libraries,
            "glibc": platform.libc_ver()[1] or None}


def settings() -> dict:
    """How counts are taken: recorded in meta.json beside the versions."""
    return {"calls": CALLS, "warmup_calls": WARMUP_CALLS, "cache": {k: list(v) for k, v in CACHE.items()},
            "est_cycles": counts.EST_CYCLES_FORMULA, "threads": count_threads(),
            "malloc": list(MALLOC_TUNABLES), "python_malloc": PYTHON_MALLOC,
            "counted_in": "a thread started first in the case's fork, preparing the strategy itself",
            "working_directory": f"{WORK_DIR}-<uid> in the temporary directory, the same on every run"}


def valgrind_command() -> list[str]:
    """Callgrind as counting runs it, in its working directory (where its dumps are written)."""
    cache = [f"--{level}={','.join(map(str, geometry))}" for level, geometry in CACHE.items()]
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--cache-sim=yes",
            *cache, f"--callgrind-out-file={DUMP_PREFIX}%p", f"--log-file={VALGRIND_LOG}"]


def not_counted(case: Case) -> str | None:
    """Why a case is not counted (a skipped row's message), or None."""
    strat = get_operator(case.op).strategies[case.strategy]
    if case.device != "cpu":
        return (f"not counted: Callgrind simulates the host CPU, and a {case.device} kernel's work is not "
                f"done there")
    if strat.interpreted_on(case.device):
        return (f"not counted: {strat.backend} reaches the CPU only through its interpreter, whose instructions "
                f"say nothing about the compiled kernel's")
    return None


def llvm_target_env(backends: set[str], python: str = sys.executable) -> dict:
    """The LLVM targets of ``backends`` (names) pinned to the CPU LLVM sees
    under valgrind (``Backend.llvm_target_env``), so that kernels compiled in
    a normal process are found in their cache by the process under Callgrind
    (which would otherwise compile them again, for minutes); empty when none
    of them compiles with LLVM."""
    pins = [get_backend(name).llvm_target_env for name in sorted(backends)]
    pins = [pin for pin in pins if pin is not None]
    if not pins:
        return {}
    code = ("import llvmlite.binding as b\nb.initialize_native_target()\n"
            "print(b.get_host_cpu_name())\nprint(b.get_host_cpu_features().flatten())\n")
    try:
        done = subprocess.run(["valgrind", "--tool=none", "-q", python, "-c", code], capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.SubprocessError) as error:
        raise ResultError(f"asking LLVM for valgrind's CPU failed: {error}") from None
    lines = done.stdout.split()
    if done.returncode != 0 or len(lines) != 2:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ResultError(f"asking LLVM for valgrind's CPU failed (exit {done.returncode}): {tail}")
    return {key: value for pin in pins for key, value in pin(lines[0], lines[1]).items()}


def child_environment(target: dict) -> dict:
    """The children's environment: one thread per library, no hash
    randomisation, the allocator's settings; this checkout goes first on the
    path (the counting process runs in its own working directory)."""
    tunables = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), *MALLOC_TUNABLES]))
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return dict(os.environ, **THREAD_ENV, **target, PYTHONHASHSEED="0", PYTHONUNBUFFERED="1",
                GLIBC_TUNABLES=tunables, PYTHONMALLOC=PYTHON_MALLOC, PYTHONPATH=path)


# -------------------------------------------------------------- the parent
def execute_counting_run(plan: sweep.RunPlan, argv: list[str], *, on_start=None, on_case=None,
                         on_phase=None) -> sweep.RunOutcome:
    """``sweep.execute_run``'s counterpart: metadata, skipped rows for what
    is not counted, the warm-up pass in a normal process, then one process
    under Callgrind counting every other case, each row written as it comes."""
    reason = unavailable()
    if reason:
        raise UsageError(f"--instrument {INSTRUMENT}: {reason}")
    with RunSession(plan.out_dir, plan.run_id, on_phase=on_phase) as session:
        # The children apply these (and the environment's) thread counts; the config's are overridden.
        writer = session.open(plan.config, plan.config_path, argv, threads=count_threads(), **sweep.plan_meta(plan),
                              isolate=False, instrument=INSTRUMENT, count_versions=count_versions(),
                              count_settings=settings())
        if on_start:
            on_start({}, {})
        counted = []
        for case in plan.cases:
            skip = not_counted(case)
            if skip is None:
                counted.append(case)
                continue
            row = sweep.base_row(case, plan.run_id, math.nan)
            row.update(status=SKIPPED, message=skip)
            writer.append(row, [])
            if on_case:
                on_case(case, row)
        writer.update_meta(status="running")
        if counted:
            _count_cases(counted, plan, writer, session.clock, on_case)
        session.complete()
    return session.outcome


def _request(cases: list[Case], plan: sweep.RunPlan, mode: str, **extra) -> str:
    """What the child is asked. Not the run's id: its random part would reach
    the counting process's heap (docs/COUNTING.md); the parent writes the
    run's id into each row."""
    config = plan.config.model_dump()
    config["threads"] = count_threads()
    config["timing"]["timeout_s"] = config["timing"]["timeout_s"] * (SLOWDOWN if mode == "count" else 1)
    return json.dumps({"mode": mode, "run_id": CHILD_RUN_ID, "config": config,
                       "cases": [case_fields(case) for case in cases], **extra})


def case_fields(case: Case) -> list:
    """A case as the child is sent it (JSON); ``case_of`` reads it back. The
    mode and layout travel too: without them a backward or channels-last case came back as another."""
    return [case.op, case.strategy, case.device, case.dtype, case.params_dict, case.mode, case.layout]


def case_of(fields: list) -> Case:
    op, strategy, device, dtype, params, mode, layout = fields
    return Case(op, strategy, device, dtype, tuple(sorted(params.items())), mode, layout)


def _tail(path: Path) -> str:
    try:
        return (path.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
    except OSError:
        return "no output"


def _count_cases(cases: list[Case], plan: sweep.RunPlan, writer, clock, on_case) -> None:
    by_id = {case.case_id: case for case in cases}
    clock("prepare/compile")
    backends = {get_operator(c.op).strategies[c.strategy].backend for c in cases}
    child_env = child_environment(llvm_target_env(backends))
    # Warm-up pass, in a normal process: fills numba's (and inductor's) on-disk caches.
    warm = subprocess.run([sys.executable, "-m", "harness", "_count"], input=_request(cases, plan, "warm"),
                          capture_output=True, text=True, env=child_env)
    if warm.returncode != 0:
        tail = (warm.stderr.strip().splitlines() or ["no output"])[-1]
        raise ResultError(f"the warm-up pass before counting failed (exit {warm.returncode}): {tail}")
    clock("count")
    dumps = store.make_dir(plan.out_dir / DUMP_DIR)
    first = plan.done + sum(1 for case in plan.cases if not_counted(case))  # dumps numbered after resumed ones
    with _work_directory() as work:
        _count_in(work, dumps, cases, by_id, first, plan, writer, child_env, on_case)


@contextlib.contextmanager
def _work_directory():
    """The counting process's working directory, one per user, the same path
    on every run (``WORK_DIR``), taken under a lock: a second counting run
    waits for the first. Its path reaches that process's heap, so a fixed
    one keeps every run's heap the same (docs/COUNTING.md). Emptied when
    taken: what a killed run left there is no one's."""
    import fcntl

    work = Path(tempfile.gettempdir()) / f"{WORK_DIR}-{os.getuid()}"
    work.mkdir(exist_ok=True)
    with open(work.with_name(work.name + ".lock"), "a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"counting: waiting for another counting run, which uses {work}", file=sys.stderr, flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
        for stale in work.iterdir():
            stale.unlink()
        try:
            yield work
        finally:
            for stale in work.iterdir():
                stale.unlink(missing_ok=True)


def _count_in(work: Path, dumps: Path, cases, by_id, first: int, plan, writer, child_env, on_case) -> None:
    """Runs the counting process in ``work``; each dump moves into the run's
    DIR/callgrind/ as its row arrives, the logs at the end."""
    try:
        request = _request(cases, plan, "count", client_requests=f"./{build_client_requests(work).name}",
                           indices=list(range(first, first + len(cases))))
        with open(work / ERRORS_LOG, "w") as stderr:
            # -P: the working directory is not put on sys.path (this checkout is, by PYTHONPATH)
            child = subprocess.Popen([*valgrind_command(), sys.executable, "-P", "-m", "harness", "_count"],
                                     cwd=work, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                     text=True, env=child_env)
            try:
                child.stdin.write(request)
                child.stdin.close()
                for line in child.stdout:
                    if not line.startswith(ROW_MARK):
                        continue
                    event = json.loads(line[len(ROW_MARK):])
                    case = by_id[event["case_id"]]
                    if event["event"] == "start":
                        if on_case:
                            on_case(case, "start")
                        continue
                    extra = event["row"].get("extra")
                    dump = extra.get("callgrind_dump") if isinstance(extra, dict) else None
                    if dump and (work / Path(dump).name).exists():
                        shutil.move(work / Path(dump).name, plan.out_dir / dump)
                    event["row"]["run_id"] = plan.run_id
                    writer.append(event["row"], [])
                    if on_case:
                        on_case(case, event["row"])
                child.wait()
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    finally:
        for leftover in work.glob(f"{DUMP_PREFIX}*"):  # each process's dump at exit: collection was off, all zeros
            leftover.unlink()
        for kept in work.iterdir():  # the logs (and any dump whose row never came)
            if kept.suffix != ".so":
                shutil.move(kept, dumps / kept.name)
    if child.returncode != 0:
        raise ResultError(f"the counting process under Callgrind failed (exit {child.returncode}; see "
                          f"{dumps / ERRORS_LOG} and {dumps / VALGRIND_LOG}): {_tail(dumps / ERRORS_LOG)}")


# --------------------------------------------------------------- the child
class _RowPrinter(NoCaseInFlight):
    """The child's writer: each finished case as one marked line on stdout.
    The parent, not the counting child, keeps the run's directory: a case
    the child dies in is the parent's to record (a missing row), so the
    child marks no case in flight."""

    def append(self, row: dict, samples_s=None, round_sizes=None) -> None:
        clean = {key: (None if isinstance(value, float) and math.isnan(value) else value)
                 for key, value in row.items()}
        _emit({"event": "row", "case_id": row["case_id"], "row": clean})


def _emit(event: dict) -> None:
    print(ROW_MARK + json.dumps(event, default=str), flush=True)


class CallgrindCounter:
    """``execute_case``'s ``measure`` under Callgrind: instrumentation on,
    warm-up, ``CALLS`` collected calls dumped under the case's name,
    instrumentation off; the counts per call as row fields.

    The calls run in a thread of their own, started when the counter is made
    (first thing in the case's fork) and waiting until the case is checked;
    it prepares the strategy again itself (``make_run``), in its fresh glibc
    arena, so that what the counted calls touch lands at the same addresses
    in every run whatever the check allocated before (docs/COUNTING.md)."""

    def __init__(self, requests: ClientRequests, name: str, calls: int = CALLS, warmup_calls: int = WARMUP_CALLS):
        self.requests, self.name = requests, name
        self.calls, self.warmup_calls = calls, warmup_calls
        self._job, self._failure = None, []
        self._go, self._finished = _thread.allocate_lock(), _thread.allocate_lock()
        self._go.acquire()
        self._finished.acquire()
        _thread.start_new_thread(self._serve, ())

    def _serve(self) -> None:
        self._go.acquire()  # the one job, or None when the case was never counted
        try:
            if self._job is not None:
                make_run, synchronize = self._job
                self._collect(make_run(), synchronize)
        except BaseException as error:  # noqa: BLE001 - raised again in the case's thread
            self._failure.append(error)
        finally:
            self._finished.release()

    def close(self) -> None:
        """Lets the waiting thread end when the case was not counted (skipped, or failed its check)."""
        if self._job is None and self._go.locked():
            self._go.release()

    def __call__(self, make_run, backend, device) -> dict:
        from harness.measuring import timing

        self._job = (make_run, lambda: backend.synchronize(device))
        with timing._collector_paused():
            self._go.release()
            self._finished.acquire()
        if self._failure:
            raise self._failure[0]
        # This process's only dump (a fresh fork per case): callgrind.out.<pid>.1
        dump = Path(f"{DUMP_PREFIX}{os.getpid()}.1")  # in the counting process's working directory
        named = Path(f"{self.name}.callgrind")
        measured = metrics.per_call(counts.read_dump(dump), self.calls)
        dump.replace(named)
        return {**{name: measured[name] for name in metrics.COUNTS.names},
                "extra": {"callgrind_dump": f"{DUMP_DIR}/{named.name}",
                          "events_per_call": measured["events_per_call"]}}

    def _collect(self, run, synchronize) -> None:
        self.requests.start_instrumentation()
        try:
            for _ in range(self.warmup_calls):
                run()
                synchronize()
            self.requests.toggle_collect()  # this thread's collection: the others wait
            try:
                for _ in range(self.calls):
                    run()
                    synchronize()
            finally:
                self.requests.toggle_collect()
                self.requests.dump_stats_at(self.name)
        finally:
            self.requests.stop_instrumentation()


def _count_in_fork(index: int, case: Case, config, run_id: str, requests: ClientRequests) -> None:
    """Counts one case in a fork of this process, so that every case starts
    from the same state (heap, collector, caches): a case's counts then do
    not depend on the cases before it (in one process they moved by 2.5 %
    with the cases before: docs/COUNTING.md)."""
    name = f"{index:03d}-{sweep.safe_name(case.strategy)}"
    pid = os.fork()
    if pid == 0:
        status = 0
        try:
            counter = CallgrindCounter(requests, name)  # first: its thread state before anything that varies
            pinning.apply_threads(config.threads)
            try:
                sweep.run_sweep([case], config, _RowPrinter(), run_id, {}, measure=counter)
            finally:
                counter.close()
        except BaseException as error:  # noqa: BLE001 - the parent turns any death into a row
            print(f"counting {case.case_id} failed: {error!r}", file=sys.stderr)
            status = 1
        finally:
            sys.stdout.flush()
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    if status != 0:
        row = sweep.base_row(case, run_id, math.nan)
        reason = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status)
                  else f"exited with status {os.WEXITSTATUS(status)}")
        row.update(status=ERROR, message=f"the counting process {reason}")
        _RowPrinter().append(row)


def child_main(stdin_text: str) -> None:
    """``python -m harness _count``: the warm-up pass (``mode`` warm: each
    case checked, which compiles it) or the counting pass under Callgrind
    (``mode`` count: each case in its own fork)."""
    import importlib

    from harness.base.config import parse_config
    from impls.backends import get_backend

    request = json.loads(stdin_text)
    config = parse_config(request["config"], "<counting run>")
    cases = [case_of(fields) for fields in request["cases"]]
    if request["mode"] != "count":
        pinning.apply_threads(config.threads)
        sweep.run_sweep(cases, config, _RowPrinter(), request["run_id"], {}, measure=lambda make_run, backend, device: {})
        return
    # Imported once, before the forks, so that no case pays for it; thread pools start in each fork.
    for module in {get_backend(get_operator(c.op).strategies[c.strategy].backend).module for c in cases}:
        importlib.import_module(module)
    requests = ClientRequests(request["client_requests"])
    for index, case in zip(request["indices"], cases):
        _emit({"event": "start", "case_id": case.case_id})
        _count_in_fork(index, case, config, request["run_id"], requests)
