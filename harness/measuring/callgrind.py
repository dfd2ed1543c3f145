"""The counting instrument: ``scatterbench run CONFIG --instrument callgrind``.

The selected CPU cases run under Callgrind, with cache simulation, and each
row gets per-call ``instructions`` and ``est_cycles`` (harness/results/counts.py)
instead of times. What makes that affordable and exact:

- **One valgrind process, uninstrumented until a case is counted.**
  Callgrind starts with instrumentation off (``--instr-atstart=no``):
  importing torch then takes about 17 s instead of 90-190 s (measured on the
  2-core VM). Each case is checked against the oracle that way, by the
  sweep's own path (``sweep.run_sweep`` with a ``measure``); then
  instrumentation goes on (Callgrind clears its simulated caches), the case
  is warmed up outside collection, collection (``--collect-atstart=no``) is
  toggled on around ``CALLS`` calls, and the dump is named after the case
  and kept in ``DIR/callgrind/`` for ``callgrind_annotate``. The switches are
  Callgrind's client requests (``<valgrind/callgrind.h>``, compiled into a
  small library with the system's C compiler: torch's
  ``_valgrind_toggle`` covers collection only, and switching instrumentation
  from outside, through vgdb, does not reach a forked process).
- **Each case in a fork.** The process imports everything once, then counts
  each case in a fork of itself, so every case starts from the same heap and
  its counts do not depend on the cases before it (``_count_in_fork``).
- **Compiled before, in a normal process.** numba kernels are compiled by a
  warm-up pass in a normal process and loaded from numba's on-disk cache
  under Callgrind (importing numba and compiling one small kernel there took
  3.5 minutes). numba keys its cache on the CPU it compiles for, and under
  valgrind LLVM sees valgrind's CPU ("haswell", no AVX-512), so both
  processes compile for the CPU valgrind shows (``NUMBA_CPU_NAME``,
  ``NUMBA_CPU_FEATURES``, asked of LLVM under valgrind).
- **One thread everywhere.** A multithreaded runtime's spin-waits are not
  deterministic: torch, BLAS and numba run one thread, from the environment
  on (``OMP_NUM_THREADS`` and the rest), whatever the config says; and hash
  randomisation is off, so dict and set orders repeat.
- **An allocator that does the same thing every run** (``MALLOC_TUNABLES``):
  where an array lands decides which simulated cache sets it uses and
  whether ``calloc`` must clear it.
- **The same inputs, so the same heap.** The counting process gets nothing
  that differs between two runs: it runs in one fixed working directory
  (``_work_directory``; a second counting run waits for it), without that
  directory on ``sys.path`` (``python -P``), and is not told the run's id.
  The counted calls run in a thread started first in the case's fork, which
  prepares the strategy itself (``CallgrindCounter``). Each of these was
  measured: a random working-directory name of fixed length, a random run id
  or a strategy prepared after the check each moved seed_loop's est_cycles
  by 0.03-0.15 % between two runs of the same code; together, two runs
  under load now agree to the count on most cases (README, "Counts").
- **The same simulated machine everywhere.** The cache geometry is fixed
  (``CACHE``) rather than read from the host, and valgrind presents one CPU
  to the program whatever the host, so counts depend on the code and the
  tool-and-library versions (recorded in meta.json, ``count_versions``), not
  on the machine: the counts baseline is kept per version set.

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

from harness.base.config import Case
from harness.base.errors import ResultError, UsageError
from harness.measuring import facts, pinning, sweep
from harness.results import counts, store
from impls.registry import get_operator
from impls.status import ERROR, SKIPPED

INSTRUMENT = "callgrind"
CALLS = 3  # counted calls per case; the row holds the count per call
WARMUP_CALLS = 2  # outside collection, after instrumentation is on: lazy set-ups, first touches
# (size in bytes, associativity, line size): a common x86 L1, and the 32 MiB 16-way last level
# of an AMD EPYC core complex (Zen 3, Zen 4). With 8 MiB, a 5 MB working set (torch_index_add's
# at 2x20x128x128) took 650 more last-level misses per call in one run than in another, as its
# arrays landed in other sets: 0.4 % of its est_cycles.
CACHE = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (33554432, 16, 64)}


def count_threads() -> dict:
    """Every backend's threads knob at 1: a multithreaded runtime's spin-waits are not deterministic."""
    from impls.backends import thread_knobs

    return {backend.name: 1 for backend in thread_knobs()}


THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
# glibc's allocator made deterministic: every block of this many bytes or more a fresh
# mapping (page-aligned), the heap's top never padded or kept (README, "Counts"). With its
# defaults, the same case's arrays landed at other page offsets from run to run (the heap
# grows by mappings under valgrind), and its simulated L1 misses moved by up to 0.14 %.
# No per-thread cache (tcache): with it, a freed block of the main thread's heap could serve the
# counted thread's next allocation, and whether it did varied from run to run (0.04 % of
# seed_loop's instructions, all of it in free()).
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
    versions (glibc's too: memcpy and malloc are counted)."""
    return {"valgrind": valgrind or valgrind_version(), "python": platform.python_version(),
            "numpy": facts.version("numpy"), "torch": facts.version("torch"), "numba": facts.version("numba"),
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


def llvm_target_env(python: str = sys.executable) -> dict:
    """numba's target pinned to the CPU LLVM sees under valgrind, so that
    kernels compiled in a normal process are found in numba's cache by the
    process under Callgrind (which would otherwise compile them again, for
    minutes)."""
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
    return {"NUMBA_CPU_NAME": lines[0], "NUMBA_CPU_FEATURES": lines[1]}


def child_environment(target: dict) -> dict:
    """The children's environment: one thread per library, no hash
    randomisation, the allocator's settings; this checkout goes first on the
    path (the counting process runs in its own working directory)."""
    tunables = ":".join(filter(None, [os.environ.get("GLIBC_TUNABLES"), *MALLOC_TUNABLES]))
    path = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))
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
    outcome = sweep.RunOutcome(plan.out_dir, plan.run_id)
    writer = None
    clock = sweep.PhaseClock(on_phase)
    with sweep._Signals():
        try:
            # The children apply these (and the environment's) thread counts; the config's are overridden.
            meta = facts.run_metadata(count_threads(), plan.config_path, argv)
            meta.update(run_id=plan.run_id, config=plan.config.model_dump(),
                        shard=list(plan.shard_spec) if plan.shard_spec else None, n_cases=len(plan.cases),
                        isolate=False, status="starting", instrument=INSTRUMENT,
                        count_versions=count_versions(), count_settings=settings())
            writer = store.RunWriter(plan.out_dir, meta)
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
                _count_cases(counted, plan, writer, clock, on_case)
            writer.update_meta(status="complete", end_time=facts.now_iso(), load_avg_end=facts.load_average(),
                               phase_s=clock.totals())
        except (KeyboardInterrupt, sweep.Interrupted) as signal_error:
            outcome.interrupted = getattr(signal_error, "signal_name", "SIGINT")
            if writer is not None:
                sweep._safely(writer.update_meta, status="interrupted", interrupted_by=outcome.interrupted)
        finally:
            if writer is not None:
                outcome.cases_on_disk = writer.written
                writer.close()
    return outcome


def _request(cases: list[Case], plan: sweep.RunPlan, mode: str, **extra) -> str:
    """What the child is asked. Not the run's id: a random part, whose
    content reaches the counting process's heap and moved est_cycles by a few
    hundredths of a percent; the parent writes the run's id into each row."""
    config = plan.config.model_dump()
    config["threads"] = count_threads()
    config["timing"]["timeout_s"] = config["timing"]["timeout_s"] * (SLOWDOWN if mode == "count" else 1)
    return json.dumps({"mode": mode, "run_id": CHILD_RUN_ID, "config": config,
                       "cases": [[c.op, c.strategy, c.device, c.dtype, c.params_dict] for c in cases], **extra})


def _tail(path: Path) -> str:
    try:
        return (path.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
    except OSError:
        return "no output"


def _count_cases(cases: list[Case], plan: sweep.RunPlan, writer, clock, on_case) -> None:
    by_id = {case.case_id: case for case in cases}
    clock("prepare/compile")
    backends = {get_operator(c.op).strategies[c.strategy].backend for c in cases}
    child_env = child_environment(llvm_target_env() if "numba" in backends else {})
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
    waits for the first. Its path reaches that process's heap (its content
    too: a random name of the same length moved seed_loop's est_cycles by
    up to 0.06 % between runs), so a fixed one keeps every run's heap the
    same. Emptied when taken: what a killed run left there is no one's."""
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
class _RowPrinter:
    """The child's writer: each finished case as one marked line on stdout."""

    def append(self, row: dict, samples_s=None) -> None:
        clean = {key: (None if isinstance(value, float) and math.isnan(value) else value)
                 for key, value in row.items()}
        _emit({"event": "row", "case_id": row["case_id"], "row": clean})

    # The parent, not the counting child, keeps the run's directory: a case the
    # child dies in is the parent's to record (a missing row), so nothing is marked here.
    def begin_case(self, case: dict) -> None:
        pass

    def end_case(self) -> None:
        pass


def _emit(event: dict) -> None:
    print(ROW_MARK + json.dumps(event, default=str), flush=True)


class CallgrindCounter:
    """``execute_case``'s ``measure`` under Callgrind: instrumentation on,
    warm-up, ``CALLS`` collected calls dumped under the case's name,
    instrumentation off; the counts per call as row fields.

    The calls run in a thread of their own, started when the counter is made
    (first thing in the case's fork) and waiting until the case is checked.
    Its allocations then come from a fresh glibc arena (and, with
    ``PYTHONMALLOC=malloc``, Python's too), and its thread state is allocated
    before anything that differs between runs: the strategy is prepared again
    in that thread (``make_run``), so that everything the counted calls touch
    lands at the same addresses in every run. What the check before it
    allocates varies (the lines of /proc files it reads, for one): preparing
    in the main thread after it moved the simulated L1 misses of seed_loop by
    up to 0.15 % between two runs (README, "Counts")."""

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
        measured = counts.per_call(counts.read_dump(dump), self.calls)
        dump.replace(named)
        return {"instructions": measured["instructions"], "est_cycles": measured["est_cycles"],
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
    not depend on the cases before it. Measured: numpy_loop's instructions
    moved 2.5 % between a 4-case and a 19-case sweep when all ran in one
    process (np.zeros took memory from the heap, zeroed by memset, or fresh
    pages, zeroed by the kernel, depending on what ran before)."""
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
    cases = [Case(op, strategy, device, dtype, tuple(sorted(params.items())))
             for op, strategy, device, dtype, params in request["cases"]]
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
