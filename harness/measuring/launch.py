"""``scatterbench launch CONFIG -o DIR``: one sweep as a job array of N shards,
submitted through submitit to Slurm (or run as local processes), followed until
every shard is done, and merged into DIR.

    DIR/launch.json            what was launched, and each shard's job id
    DIR/submitit/              submitit's pickles and each job's stdout/stderr
    DIR/shards/shardIofN/      shard I's result directory (`run CONFIG --shard I/N`)
    DIR/meta.json, rows.csv    the merged result, once every shard is done

A shard that fails or is pre-empted is submitted again once, with ``--resume``
on its own directory (a sweep keeps every finished case on disk), and named if
it fails again. Re-running the same command follows the jobs recorded in
``launch.json`` instead of submitting new ones.

Job states come from the scheduler's live queue (``squeue``, or this machine's
process table for local jobs) and outcomes from submitit's result files.
``sacct``, which submitit's own status calls use, is never asked: on a cluster
without an accounting database it fails and submitit then only warns that the
status "may be inaccurate", and a job that died without a result would look
unfinished for ever.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from harness.base.config import load_config, shard
from harness.base.errors import LaunchError, ResultError, ResultWarning, UsageError
from harness.results import store

# Each job imports this module to unpickle its ShardJob: what needs torch
# (the case selection, the merge) is imported where it is used, so a job does
# not pay that import a second time before its sweep does.

LAUNCH_FILE, SHARDS_DIR, SUBMITIT_DIR = "launch.json", "shards", "submitit"
EXECUTORS = ("slurm", "local")
RESUBMISSIONS = 1  # per shard and per invocation of `launch`
DEFAULT_TIME_MIN = 60
POLL_S = {"slurm": 2.0, "local": 0.5}
# A job that left the queue may need a moment to show its result file on a
# shared filesystem; submitit waits as long before it calls a job resultless.
RESULT_GRACE_S = 15.0
QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
SLURM_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "CONFIGURING", "RESV_DEL_HOLD"}
SLURM_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY",
               "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT"}


@dataclass(frozen=True)
class LaunchOptions:
    """The command line of one launch: re-running it must repeat these."""

    config: str  # absolute: the jobs may start in another directory
    executor: str
    shards: int
    partition: str | None = None
    gpus_per_task: int | None = None
    time_min: int = DEFAULT_TIME_MIN
    slurm_args: tuple[tuple[str, str], ...] = ()

    def as_json(self) -> dict:
        return {**asdict(self), "slurm_args": [list(pair) for pair in self.slurm_args]}


def parse_options(config: str, executor: str, shards: int, *, partition: str | None = None,
                  gpus_per_task: int | None = None, time_min: int = DEFAULT_TIME_MIN,
                  slurm_args: list[str] | None = None) -> LaunchOptions:
    """Checks the command line before anything is submitted (each problem is
    one line, exit 2): submitit importable, sbatch on PATH for Slurm, sane
    numbers, KEY=VALUE pairs."""
    if executor not in EXECUTORS:
        raise UsageError(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    submitit_module()
    if executor == "slurm" and shutil.which("sbatch") is None:
        raise UsageError("--executor slurm: no sbatch on PATH (launch from a Slurm login node, "
                         "or use --executor local)")
    if shards < 1:
        raise UsageError(f"--shards {shards}: need at least 1")
    if time_min < 1:
        raise UsageError(f"--time-min {time_min}: need at least 1 minute")
    if gpus_per_task is not None and gpus_per_task < 0:
        raise UsageError(f"--gpus-per-task {gpus_per_task}: cannot be negative")
    pairs = []
    for text in slurm_args or []:
        key, equals, value = text.partition("=")
        if not equals or not key.strip():
            raise UsageError(f"--slurm-arg {text!r}: expected KEY=VALUE, e.g. qos=high")
        pairs.append((key.strip(), value))
    if executor == "local" and (partition or pairs):
        raise UsageError("--partition and --slurm-arg apply to --executor slurm only")
    return LaunchOptions(str(Path(config).resolve()), executor, shards, partition, gpus_per_task, time_min,
                         tuple(pairs))


def submitit_module():
    try:
        import submitit
    except ImportError:
        raise UsageError("launch needs submitit: pip install 'scatterbench[launch]' "
                         "(or pip install 'submitit>=1.5')") from None
    return submitit


# ------------------------------------------------------------------ the job
class ShardFailed(RuntimeError):
    """The sweep of one shard ended with a non-zero exit status."""


def _ignore_usr2() -> None:
    # Slurm's warning signal before a time-out or pre-emption is for submitit's
    # handler in the job's own process; the sweep keeps measuring until the
    # SIGTERM that follows, which it records as an interruption.
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


@dataclass(frozen=True)
class ShardJob:
    """What one array task runs: the sweep's own ``run CONFIG --shard I/N``
    into the shard's directory, resuming it when it already holds part of the
    shard (a resubmission, or a job Slurm re-queued after pre-emption)."""

    config: str
    index: int
    count: int
    directory: str

    @property
    def name(self) -> str:
        return f"shard {self.index}/{self.count}"

    def argv(self) -> list[str]:
        target = ["--resume" if (Path(self.directory) / store.META).exists() else "-o", self.directory]
        return [sys.executable, "-m", "harness", "run", self.config, "--shard", f"{self.index}/{self.count}",
                *target, "--no-progress"]

    def __call__(self) -> int:
        argv = self.argv()
        print(shlex.join(argv), flush=True)
        code = subprocess.run(argv, preexec_fn=_ignore_usr2).returncode
        if code != 0:
            raise ShardFailed(f"the sweep {_exit_text(code)}: {shlex.join(['scatterbench', *argv[3:]])}")
        return len(store.read_rows(Path(self.directory)))


def shard_dir(out_dir: Path, index: int, count: int) -> Path:
    return out_dir / SHARDS_DIR / f"shard{index}of{count}"


def shard_sizes(options: LaunchOptions) -> list[int]:
    """Cases per shard; more shards than groups of cases sharing inputs would
    leave some empty."""
    from harness.measuring.sweep import select_cases

    cases = select_cases(load_config(options.config))
    groups = len({case.group for case in cases})
    if options.shards > groups:
        raise UsageError(f"--shards {options.shards}: {options.config} has {groups} groups of cases sharing "
                         f"inputs, so at most {groups} shards")
    return [len(shard(cases, index, options.shards)) for index in range(options.shards)]


# ---------------------------------------------------------------- executors
def make_executor(options: LaunchOptions, folder: Path):
    submitit = submitit_module()
    if options.executor == "local":
        executor = submitit.LocalExecutor(folder=folder)
        if options.gpus_per_task is not None:
            executor.update_parameters(timeout_min=options.time_min, gpus_per_node=options.gpus_per_task)
        else:
            # submitit hides every GPU from a local job that asks for none: the
            # shards see the devices this launcher sees instead
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            keep = ("unset CUDA_VISIBLE_DEVICES" if visible is None
                    else f"export CUDA_VISIBLE_DEVICES={shlex.quote(visible)}")
            executor.update_parameters(timeout_min=options.time_min, setup=[keep])
        return executor
    executor = submitit.SlurmExecutor(folder=folder)
    extra = dict(options.slurm_args)
    parameters = dict(job_name=f"scatterbench-{Path(options.config).stem}", time=options.time_min)
    if not {"cpus-per-task", "cpus_per_task"} & set(extra):
        # the threads the sweep will use: fewer CPUs would time a crowded sweep
        parameters["cpus_per_task"] = sweep_threads(options.config)
    if options.partition:
        parameters["partition"] = options.partition
    if options.gpus_per_task is not None:
        parameters["gpus_per_task"] = options.gpus_per_task
    executor.update_parameters(**parameters, additional_parameters=extra)
    return executor


def sweep_threads(config_path: str) -> int:
    """The CPUs a shard asks for: the most threads any backend's pool is set to (1 when none is pinned)."""
    return max([n for n in load_config(config_path).threads.values() if n] or [1])


class SlurmQueue:
    """Live states from ``squeue`` (slurmctld's memory, no accounting needed)."""

    def __init__(self):
        self.error = ""

    def live(self, job_ids: list[str]) -> dict[str, str] | None:
        """``queued`` or ``running`` for each of ``job_ids`` still in the queue;
        None when squeue fails (the states are then unknown, not ended)."""
        command = ["squeue", "--noheader", "--array", f"--user={os.getuid()}", "--format=%i|%T"]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as error:
            self.error = f"squeue: {error}"
            return None
        if result.returncode != 0:
            self.error = f"squeue: {(result.stderr.strip().splitlines() or ['exit ' + str(result.returncode)])[-1]}"
            return None
        self.error = ""
        wanted, states = set(job_ids), {}
        for line in result.stdout.splitlines():
            job_id, _, state = line.strip().partition("|")
            state = state.split()[0] if state else ""
            if job_id in wanted and state not in SLURM_ENDED:
                states[job_id] = QUEUED if state in SLURM_QUEUED else RUNNING
        return states


class LocalQueue:
    """Local jobs are processes (submitit's job id is the pid of the shell
    that starts its controller): alive, not a zombie, and still naming this
    launch's folder on its command line."""

    def __init__(self, folder: Path):
        self.folder = str(folder)
        self.error = ""

    def live(self, job_ids: list[str]) -> dict[str, str]:
        states = {}
        for job_id in job_ids:
            try:
                process = psutil.Process(int(job_id))
                if process.status() != psutil.STATUS_ZOMBIE and any(self.folder in part
                                                                    for part in process.cmdline()):
                    states[job_id] = RUNNING
            except (psutil.Error, ValueError):
                pass
        return states


# ------------------------------------------------------------------- shards
@dataclass
class Shard:
    index: int
    job_id: str
    submissions: int = 1
    state: str = QUEUED
    reason: str = ""
    cases: int = 0  # in the shard
    finished: int = 0  # rows on disk
    left_queue_at: float | None = None  # first poll that found it out of the queue without a result

    @property
    def record(self) -> dict:
        return {"index": self.index, "job_id": self.job_id, "submissions": self.submissions, "state": self.state,
                "reason": self.reason}


def read_launch(out_dir: Path) -> dict | None:
    path = out_dir / LAUNCH_FILE
    if not path.exists():
        return None
    try:
        recorded = json.loads(path.read_text())
        if not isinstance(recorded, dict) or not isinstance(recorded.get("shards"), list):
            raise ValueError("not a launch record")
        return recorded
    except (ValueError, OSError) as error:
        raise ResultError(f"{path}: unreadable ({error}); launch into another -o") from None


def write_launch(out_dir: Path, options: LaunchOptions, shards: list[Shard], merged: bool = False) -> None:
    store.write_json_atomic(out_dir / LAUNCH_FILE, {"options": options.as_json(), "merged": merged,
                                                    "shards": [s.record for s in shards]})


def _require_empty(out_dir: Path) -> None:
    if out_dir.exists() and any(entry.name != store.LOCK for entry in out_dir.iterdir()):
        raise UsageError(f"-o {out_dir}: not empty and holds no launch ({LAUNCH_FILE}); launch writes into a new "
                         f"or empty directory")


def _differences(recorded: dict, options: LaunchOptions) -> list[str]:
    now = options.as_json()
    return [f"{key} {recorded.get(key)!r} then, {now[key]!r} now" for key in now if recorded.get(key) != now[key]]


# ------------------------------------------------------------------- launch
@dataclass
class LaunchPlan:
    """Everything decided before anything is submitted."""

    options: LaunchOptions
    out_dir: Path
    sizes: list[int]  # cases per shard
    recorded: dict | None  # DIR/launch.json of an earlier invocation of the same command
    merged: bool = False  # that invocation merged already: nothing is left to do

    @property
    def tasks(self) -> list[ShardJob]:
        n = self.options.shards
        return [ShardJob(self.options.config, i, n, str(shard_dir(self.out_dir, i, n))) for i in range(n)]


def plan_launch(options: LaunchOptions, out_dir) -> LaunchPlan:
    """Checks the config, the shard count and DIR: new or empty, or holding
    the launch of this same command (one line, exit 2, otherwise)."""
    out_dir = Path(out_dir)
    sizes = shard_sizes(options)
    recorded = read_launch(out_dir)
    if recorded is None:
        _require_empty(out_dir)
        return LaunchPlan(options, out_dir, sizes, None)
    differences = _differences(recorded.get("options") or {}, options)
    if differences:
        raise UsageError(f"-o {out_dir}: holds another launch ({'; '.join(differences)}); repeat its own "
                         f"command to follow it, or launch into another -o")
    merged = bool(recorded.get("merged")) and (out_dir / store.META).exists()
    return LaunchPlan(options, out_dir, sizes, recorded, merged)


def execute_launch(plan: LaunchPlan, *, on_update=None, log=print, poll_s: float | None = None) -> Path:
    """Submits the shards (or follows those recorded), waits, resubmits a
    failed shard once with ``--resume``, and merges into the plan's DIR.
    Raises LaunchError naming a shard that failed again."""
    options, out_dir, tasks = plan.options, plan.out_dir, plan.tasks
    if plan.merged:
        log(f"{out_dir}: every shard was done and merged already")
        return out_dir
    store.writable_dir(out_dir, "the launch")
    lock = store.DirectoryLock(out_dir)  # one launcher follows a directory at a time
    try:
        executor = make_executor(options, out_dir / SUBMITIT_DIR)
        if plan.recorded is None:
            jobs = _submit(executor, tasks)
            shards = [Shard(i, job.job_id) for i, job in enumerate(jobs)]
            write_launch(out_dir, options, shards)
            log(f"submitted {options.shards} shards of {options.config} ({options.executor}): "
                f"job {_describe_ids(shards)}; state in {out_dir / LAUNCH_FILE}")
        else:
            shards = [Shard(int(r["index"]), str(r["job_id"]), int(r.get("submissions", 1)),
                            r.get("state", QUEUED), r.get("reason", "")) for r in plan.recorded["shards"]]
            jobs = [executor.job_class(folder=executor.folder, job_id=s.job_id) for s in shards]
            log(f"following job {_describe_ids(shards)} recorded in {out_dir / LAUNCH_FILE}")
        for s, size in zip(shards, plan.sizes):
            s.cases = size
        queue = SlurmQueue() if options.executor == "slurm" else LocalQueue(executor.folder)
        _follow(shards, jobs, tasks, executor, queue, options, out_dir, on_update, log,
                POLL_S[options.executor] if poll_s is None else poll_s)
    finally:
        lock.release()
    failed = [s for s in shards if s.state == FAILED]
    if failed:
        raise LaunchError("; ".join(f"{tasks[s.index].name} failed {s.submissions} times ({s.reason}); its "
                                    f"finished cases are in {tasks[s.index].directory}" for s in failed)
                          + "; run the same command again to resubmit it")
    from harness.results.merge import merge_runs

    merge_runs([task.directory for task in tasks], out_dir)
    write_launch(out_dir, options, shards, merged=True)
    return out_dir


def _submit(executor, tasks):
    import contextlib
    import io

    submitit = submitit_module()
    printed = io.StringIO()  # submitit prints a refusing sbatch's stderr too: it goes into the one line
    try:
        with contextlib.redirect_stderr(printed):
            return executor.submit_array(tasks)
    except (submitit.core.utils.FailedJobError, submitit.core.utils.FailedSubmissionError,
            subprocess.CalledProcessError) as error:
        lines = [line for line in (str(error) or printed.getvalue()).splitlines() if line.strip()]
        raise UsageError(f"the scheduler refused the job array: {lines[-1] if lines else error}") from None


def _describe_ids(shards: list[Shard]) -> str:
    ids = [s.job_id for s in shards]
    arrays = {job_id.split("_")[0] for job_id in ids}
    return f"{arrays.pop()}_[0-{len(ids) - 1}]" if len(arrays) == 1 and all("_" in i for i in ids) \
        else ", ".join(ids)


def _follow(shards, jobs, tasks, executor, queue, options, out_dir, on_update, log, poll_s) -> None:
    budget = {s.index: RESUBMISSIONS for s in shards}
    last_error = ""
    while True:
        active = [s for s in shards if s.state in (QUEUED, RUNNING, FAILED)]
        live = queue.live([s.job_id for s in active if s.state != FAILED]) if active else {}
        if queue.error and queue.error != last_error:
            log(f"{queue.error}; states unknown until it answers")
        last_error = queue.error
        changed = False
        for s in active:
            before = (s.state, s.job_id)
            if s.state != FAILED:
                _update(s, jobs[s.index], live)
            if s.state == FAILED and budget[s.index] > 0:
                budget[s.index] -= 1
                jobs[s.index] = _resubmit(s, tasks[s.index], executor, log)
            changed |= (s.state, s.job_id) != before
        for s in shards:
            s.finished = _rows_on_disk(Path(tasks[s.index].directory), s.finished)
        if changed:
            write_launch(out_dir, options, shards)
        if on_update:
            on_update(shards)
        if all(s.state in (DONE, FAILED) for s in shards):
            return
        time.sleep(poll_s)


def _resubmit(s: Shard, task: ShardJob, executor, log):
    job = executor.submit(task)
    how = (f"with --resume {task.directory}" if (Path(task.directory) / store.META).exists()
           else "from the start (it had written no run)")
    log(f"{task.name}: {s.reason}; resubmitted {how} as job {job.job_id}")
    s.job_id, s.state, s.submissions, s.left_queue_at = job.job_id, QUEUED, s.submissions + 1, None
    return job


def _update(s: Shard, job, live: dict | None) -> None:
    """The shard's state from its result file, else from the queue."""
    if job.paths.result_pickle.exists():
        error = job.exception()
        s.state, s.reason = (DONE, "") if error is None else (FAILED, _failure_line(str(error)))
        return
    if live is None:  # the queue did not answer: keep what we knew
        return
    if s.job_id in live:
        s.state, s.left_queue_at = live[s.job_id], None
        return
    now = time.monotonic()
    s.left_queue_at = s.left_queue_at or now
    if now - s.left_queue_at >= RESULT_GRACE_S:
        s.state = FAILED
        s.reason = (f"ended without a result (cancelled, pre-empted, out of memory or killed; log: "
                    f"{job.paths.stderr})")


def _failure_line(text: str) -> str:
    """The last line of the job's traceback, from submitit's FailedJobError
    (the trace sits between two lines of dashes)."""
    parts = re.split(r"\n-{10,}\n", text)
    trace = parts[1] if len(parts) >= 3 else text
    lines = [line.strip() for line in trace.splitlines() if line.strip()]
    last = lines[-1] if lines else "failed"
    return re.sub(r"^[\w.]*(Error|Exception|Failed|Interrupt): ", "", last)


def _rows_on_disk(directory: Path, previous: int) -> int:
    """Finished cases of a shard that may be writing its next one right now:
    an unfinished last line is expected here, not worth a warning."""
    if not (directory / store.ROWS).exists():
        return previous
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResultWarning)
            return len(store.read_rows(directory))
    except ResultError:  # mid-write: the next poll reads it
        return previous
