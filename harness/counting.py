"""The counting instrument: ``scatterbench run CONFIG --instrument callgrind``.

The selected CPU cases run in one process under Callgrind, with cache
simulation, and each row gets per-call ``instructions`` and ``est_cycles``
(harness/counts.py) instead of times. What makes that affordable and exact:

- **Uninstrumented until counted.** Callgrind starts with instrumentation off
  (``--instr-atstart=no``): importing torch then takes about 17 s instead of
  90-190 s (measured on the 2-core VM). Each case is checked against the
  oracle that way, by the sweep's own path (``sweep.run_sweep`` with a
  ``measure``), then instrumentation is switched on (a ``vgdb`` monitor
  command: Callgrind clears its simulated caches then, so a case's counts
  do not depend on the cases before it), the case is warmed up outside
  collection, and collection (``--collect-atstart=no``) is toggled on around
  ``CALLS`` calls and dumped (``torch._C._valgrind_toggle`` and
  ``_valgrind_toggle_and_dump_stats``, what ``torch.utils.benchmark``'s
  ``collect_callgrind`` uses). Each case's dump stays in ``DIR/callgrind/``
  for ``callgrind_annotate``.
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
- **The same simulated machine everywhere.** The cache geometry is fixed
  (``CACHE``) rather than read from the host, and valgrind presents one CPU
  to the program whatever the host, so counts depend on the code and the
  tool-and-library versions (recorded in meta.json, ``count_versions``), not
  on the machine: the counts baseline is kept per version set.

CUDA cases and kernels that reach the CPU only through an interpreter
(Triton) are rows with status ``skipped`` and the reason, never counted.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness import counts, env, store, sweep
from harness.config import Case, Threads
from harness.errors import ResultError, UsageError
from impls.registry import get_operator
from impls.status import SKIPPED

INSTRUMENT = "callgrind"
INSTRUMENTS = (INSTRUMENT,)
CALLS = 3  # counted calls per case; the row holds the count per call
WARMUP_CALLS = 2  # outside collection, after instrumentation is on: lazy set-ups, first touches
# (size in bytes, associativity, line size): a common x86 L1 and an 8 MiB last level.
CACHE = {"I1": (32768, 8, 64), "D1": (32768, 8, 64), "LL": (8388608, 16, 64)}
COUNT_THREADS = Threads(torch=1, blas=1, numba=1)
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
# A case's deadline (config timing.timeout_s) is stretched by this under Callgrind.
SLOWDOWN = 50
ROW_MARK = "@scatterbench-count "
DUMP_DIR = "callgrind"


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
    if shutil.which("valgrind") is None or shutil.which("vgdb") is None:
        return ("valgrind is not installed (Debian: apt-get install valgrind; `make regress` installs it when "
                "run as root)")
    if valgrind_version() is None:
        return "`valgrind --version` fails: valgrind is installed but cannot run here"
    import torch

    if not torch._C._valgrind_supported_platform():
        return f"torch {torch.__version__} was built without valgrind's client requests: it cannot toggle collection"
    return None


def count_versions(valgrind: str | None = None) -> dict:
    """What counts depend on besides the code: the tool's and the libraries'
    versions (glibc's too: memcpy and malloc are counted)."""
    return {"valgrind": valgrind or valgrind_version(), "python": platform.python_version(),
            "numpy": env.version("numpy"), "torch": env.version("torch"), "numba": env.version("numba"),
            "glibc": platform.libc_ver()[1] or None}


def settings() -> dict:
    """How counts are taken: recorded in meta.json beside the versions."""
    return {"calls": CALLS, "warmup_calls": WARMUP_CALLS, "cache": {k: list(v) for k, v in CACHE.items()},
            "est_cycles": counts.EST_CYCLES_FORMULA, "threads": COUNT_THREADS.model_dump()}


def valgrind_command(dump_file: Path, vgdb_prefix: str, log_file: Path) -> list[str]:
    cache = [f"--{level}={','.join(map(str, geometry))}" for level, geometry in CACHE.items()]
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", "--cache-sim=yes",
            *cache, f"--callgrind-out-file={dump_file}", f"--vgdb-prefix={vgdb_prefix}", f"--log-file={log_file}"]


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
    return dict(os.environ, **THREAD_ENV, **target, PYTHONHASHSEED="0", PYTHONUNBUFFERED="1")


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
            meta = env.run_metadata(COUNT_THREADS.model_dump(), plan.config_path, argv)
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
            writer.update_meta(status="complete", end_time=env.now_iso(), load_avg_end=env.load_average(),
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
    config = plan.config.model_dump()
    config["threads"] = COUNT_THREADS.model_dump()
    config["timing"]["timeout_s"] = config["timing"]["timeout_s"] * (SLOWDOWN if mode == "count" else 1)
    return json.dumps({"mode": mode, "run_id": plan.run_id, "config": config,
                       "cases": [[c.op, c.strategy, c.device, c.dtype, c.params_dict] for c in cases], **extra})


def _count_cases(cases: list[Case], plan: sweep.RunPlan, writer, clock, on_case) -> None:
    by_id = {case.case_id: case for case in cases}
    clock("prepare/compile")
    backends = {get_operator(c.op).strategies[c.strategy].backend for c in cases}
    target = llvm_target_env() if "numba" in backends else {}
    child_env = child_environment(target)
    # Warm-up pass, in a normal process: fills numba's (and inductor's) on-disk caches.
    warm = subprocess.run([sys.executable, "-m", "harness", "_count"], input=_request(cases, plan, "warm"),
                          capture_output=True, text=True, env=child_env)
    if warm.returncode != 0:
        tail = (warm.stderr.strip().splitlines() or ["no output"])[-1]
        raise ResultError(f"the warm-up pass before counting failed (exit {warm.returncode}): {tail}")
    clock("count")
    dumps = store.make_dir(plan.out_dir / DUMP_DIR)
    log = dumps / "valgrind.log"
    with tempfile.TemporaryDirectory(prefix="scatterbench-vgdb-") as vgdb_dir:
        command = valgrind_command(dumps / "callgrind.out", f"{vgdb_dir}/vgdb", log)
        request = _request(cases, plan, "count", dump_file=str(dumps / "callgrind.out"),
                           vgdb_prefix=f"{vgdb_dir}/vgdb")
        with open(dumps / "stderr.log", "w") as errors:
            child = subprocess.Popen([*command, sys.executable, "-m", "harness", "_count"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=errors, text=True, env=child_env)
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
                    writer.append(event["row"], [])
                    if on_case:
                        on_case(case, event["row"])
                child.wait()
            finally:
                if child.poll() is None:
                    child.kill()
                    child.wait()
    (dumps / "callgrind.out").unlink(missing_ok=True)  # the dump at exit: collection was off, all zeros
    if child.returncode != 0:
        tail = ((dumps / "stderr.log").read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise ResultError(f"the counting process under Callgrind failed (exit {child.returncode}; "
                          f"{dumps / 'stderr.log'} and {log}): {tail}")


# --------------------------------------------------------------- the child
class _RowPrinter:
    """The child's writer: each finished case as one marked line on stdout."""

    def append(self, row: dict, samples_s=None) -> None:
        clean = {key: (None if isinstance(value, float) and math.isnan(value) else value)
                 for key, value in row.items()}
        _emit({"event": "row", "case_id": row["case_id"], "row": clean})


def _emit(event: dict) -> None:
    print(ROW_MARK + json.dumps(event, default=str), flush=True)


class CallgrindCounter:
    """``execute_case``'s ``measure`` under Callgrind: instrumentation on,
    warm-up, ``CALLS`` collected calls dumped to the next part of
    ``dump_file``, instrumentation off; the counts per call as row fields."""

    def __init__(self, dump_file: str, vgdb_prefix: str, calls: int = CALLS, warmup_calls: int = WARMUP_CALLS):
        import torch

        self.toggle = torch._C._valgrind_toggle
        self.toggle_and_dump = torch._C._valgrind_toggle_and_dump_stats
        self.dump_file, self.vgdb_prefix = dump_file, vgdb_prefix
        self.calls, self.warmup_calls = calls, warmup_calls
        self.part = 0  # Callgrind numbers its dumps from 1

    def monitor(self, command: str) -> None:
        """A Callgrind monitor command to this process, through vgdb. The
        process keeps running Python while vgdb waits (a blocking wait would
        leave valgrind's gdbserver no point to poll at without ptrace)."""
        helper = subprocess.Popen(["vgdb", f"--pid={os.getpid()}", f"--vgdb-prefix={self.vgdb_prefix}",
                                   *command.split()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while helper.poll() is None:
            pass
        if helper.returncode != 0:
            raise RuntimeError(f"vgdb {command!r} failed (exit {helper.returncode}): "
                               f"{helper.stdout.read().strip().splitlines()[-1:]}")

    def __call__(self, run, backend, device) -> dict:
        from harness import timing

        self.monitor("instrumentation on")
        try:
            for _ in range(self.warmup_calls):
                run()
                backend.synchronize(device)
            with timing._collector_paused():
                self.toggle()
                try:
                    for _ in range(self.calls):
                        run()
                        backend.synchronize(device)
                finally:
                    self.toggle_and_dump()
                    self.part += 1
        finally:
            self.monitor("instrumentation off")
        dump = Path(f"{self.dump_file}.{self.part}")
        measured = counts.per_call(counts.read_dump(dump), self.calls)
        return {"instructions": measured["instructions"], "est_cycles": measured["est_cycles"],
                "extra": {"callgrind_dump": f"{DUMP_DIR}/{dump.name}", "events_per_call": measured["events_per_call"]}}


def child_main(stdin_text: str) -> None:
    """``python -m harness _count``: the warm-up pass (``mode`` warm: check,
    which compiles) or the counting pass under Callgrind (``mode`` count)."""
    from harness.config import parse_config

    request = json.loads(stdin_text)
    config = parse_config(request["config"], "<counting run>")
    env.apply_threads(config.threads)
    cases = [Case(op, strategy, device, dtype, tuple(sorted(params.items())))
             for op, strategy, device, dtype, params in request["cases"]]
    if request["mode"] == "count":
        measure = CallgrindCounter(request["dump_file"], request["vgdb_prefix"])
    else:
        def measure(run, backend, device):  # the check's call compiled it; nothing to measure
            return {}

    def on_case(case, row):
        if row == "start":
            _emit({"event": "start", "case_id": case.case_id})

    sweep.run_sweep(cases, config, _RowPrinter(), request["run_id"], {}, on_case=on_case, measure=measure)
