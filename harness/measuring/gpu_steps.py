"""``scatterbench gpu`` (``make gpu``): everything a GPU machine should do, as
steps a later call resumes. The check (one step: every operator of the
config in one process, so the libraries are imported and the device's
workers started once), the CUDA tests, the config's sweep and its report. Each step that finishes is
recorded in ``DIR/steps/<step>.json`` (its exit status, seconds and end; its
output, as printed, in ``<step>.log``), and the same command again on the same
directory skips those and resumes the sweep (``run --resume``): nothing
measured is lost.

A budget (seconds, optional) is this call's share of a short window: each step
gets what is left of it, a step still running when it ends is stopped (TERM to
its process group, KILL 30 s later) and run again by the next call, and the
sweep gets the rest as its own ``--budget``, so that it stops before a case
that would outlast it (``scatterbench plan`` prints the estimate).

The check's verdicts (which the sweep then reuses), its journal of judged
items (a cut check resumes from it) and the libraries' compile caches are
kept in ``DIR/steps/cache`` unless ``$SCATTERBENCH_CACHE_DIR`` or
``$SCATTERBENCH_COMPILE_CACHE_DIR`` name other folders, so that a second call
on a bare machine, or a later lease given the committed directory, finds them
and loads what was compiled instead of compiling it again. This module is the one home of the steps' names and of their records'
format; harness/measuring/plan.py reads both to estimate a window.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.base import caches
from harness.base.checkout import ROOT
from harness.base.config import load_config
from harness.base.errors import EXIT_FINDINGS, EXIT_INTERRUPTED, EXIT_OK, ResultError, UsageError
from harness.measuring import facts
from harness.results import store

# The steps, as their records in DIR/steps name them. Runs before 2026-12-05 checked one operator a step
# (check-<op>); their records are read as parts of the check (``step_of``).
STEP_CHECK, STEP_PYTEST, STEP_SWEEP, STEP_REPORT = "check", "pytest", "sweep", "report"
# The exit statuses with which a step has finished (its record is written): the others stopped it midway.
# check: 1 is failures found; pytest: 1 failures, 5 no test collected (no CUDA test on this machine).
FINISHED = {STEP_CHECK: (EXIT_OK, EXIT_FINDINGS), STEP_PYTEST: (0, 1, 5), STEP_SWEEP: (EXIT_OK,),
            STEP_REPORT: (EXIT_OK,)}

DEFAULT_CONFIG = "configs/gpu.yaml"  # in the checkout
DEFAULT_TESTS = "-m cuda"  # pytest's arguments: the tests that need a GPU
KILL_AFTER_S = 30  # from a step's TERM (the budget's end, an interrupt) to its KILL: a sweep writes its state
CACHE = "cache"  # under DIR/steps: the verdicts, the check's journal and the compile caches, committed with DIR
# What of DIR/steps git leaves out: the libraries' lock and temporary files, never what they compiled.
GITIGNORE = "*.lock\n*.tmp\n"
COUNTS_SUFFIX = ".counts.json"  # a check step's work_counts, beside its record
HEAD = "make gpu"  # what every line this command prints starts with: the command users type


def counts_path(directory, step: str) -> Path:
    """Where a check step writes what it cost (``scatterbench check --counts``): ``steps/<step>.counts.json``."""
    return Path(directory) / store.STEPS / f"{step}{COUNTS_SUFFIX}"


def step_of(name: str) -> str:
    """The step a record's name is of: ``check``, and an older run's ``check-maxpool2d``, are of ``check``."""
    return STEP_CHECK if name.startswith(f"{STEP_CHECK}-") else name


def checked_ops(config) -> list[str]:
    """The operators of a parsed config, in its order: what the check step checks."""
    return list(dict.fromkeys(bench.op for bench in config.benchmarks))


# ------------------------------------------------------------------ records
def _read_json(paths):
    """(path, what it holds) for each of ``paths`` that reads as JSON; one torn or gone is left out."""
    for path in paths:
        try:
            yield path, json.loads(path.read_text())
        except (OSError, ValueError):
            continue


def read_steps(directory) -> dict[str, dict]:
    """The records the steps left in ``directory/steps`` (name -> record), those that read."""
    paths = [path for path in sorted((Path(directory) / store.STEPS).glob("*.json"))
             if not path.name.endswith(COUNTS_SUFFIX)]
    return {path.stem: record for path, record in _read_json(paths)
            if isinstance(record, dict) and isinstance(record.get("seconds"), (int, float))}


def read_counts(directory) -> dict[str, dict]:
    """The check's ``work_counts`` per operator, from the counts files in ``directory/steps`` that read
    (the check step's; an older run's, one per operator, each of one operator)."""
    paths = sorted((Path(directory) / store.STEPS).glob("*" + COUNTS_SUFFIX))
    found: dict[str, dict] = {}
    for _, data in _read_json(paths):
        per_operator = data.get("per_operator") if isinstance(data, dict) else None
        if isinstance(per_operator, dict):
            found.update((op, counts) for op, counts in per_operator.items() if isinstance(counts, dict))
    return found


def write_record(steps: Path, name: str, exit_status: int, seconds: float) -> Path:
    """``steps/<name>.json``: {"step", "exit", "seconds" (whole), "end" (UTC, ISO 8601)}, one line."""
    record = {"step": name, "exit": exit_status, "seconds": int(seconds),
              "end": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    path = steps / f"{name}.json"
    path.write_text(json.dumps(record) + "\n")
    return path


# ------------------------------------------------------------------ the steps
@dataclass(frozen=True)
class Step:
    name: str
    finished: tuple[int, ...]  # the exit statuses that end it (its record is written)
    command: Callable[[float | None], list[str]]  # given the seconds left (None: no budget), built when it starts
    cwd: Path | None = None  # None: the caller's directory


def plan_steps(config_path: str, directory: Path, tests: str, budgeted: bool) -> list[Step]:
    """The steps for ``config_path`` (read by ``load_config``) into ``directory``, in their order."""
    load_config(config_path)  # a config that does not read stops here, before anything is made
    try:
        pytest_args = shlex.split(tests)
    except ValueError as error:
        raise UsageError(f"--tests {tests!r}: {error} (pytest's arguments, as a shell would split them)") from None
    python = sys.executable
    harness = [python, "-m", "harness"]
    steps = [Step(STEP_CHECK, FINISHED[STEP_CHECK],
                  lambda left: [*harness, "check", str(config_path), "--no-progress",
                                "--counts", str(counts_path(directory, STEP_CHECK))])]
    # pytest in the checkout, where its tests and their conftest are
    steps.append(Step(STEP_PYTEST, FINISHED[STEP_PYTEST],
                      lambda left: [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args], ROOT))

    def sweep(left):
        into = ["--resume", str(directory)] if (directory / store.META).exists() else ["-o", str(directory)]
        return [*harness, "run", str(config_path), "--grid", "--no-progress", *into,
                *(["--budget", repr(left)] if budgeted else [])]

    steps.append(Step(STEP_SWEEP, FINISHED[STEP_SWEEP], sweep))
    steps.append(Step(STEP_REPORT, FINISHED[STEP_REPORT],
                      lambda left: [*harness, "report", str(directory), "-o", str(directory / "report")]))
    return steps


def step_environment(steps: Path) -> dict[str, str]:
    """The steps' environment: every cache of the suite in ``steps/cache`` (the verdicts and the
    check's journal) unless ``$SCATTERBENCH_CACHE_DIR`` names a folder, and the libraries' compile
    caches in its ``compile`` folder (Inductor's and AOTAutograd's, Triton's, JAX's:
    ``caches.enable_compile_caches``) unless ``$SCATTERBENCH_COMPILE_CACHE_DIR`` names one. The
    directory then carries them to the next call or lease, which loads what this one compiled."""
    kept = Path(os.environ.get(caches.ENV) or (steps / CACHE).resolve())
    return dict(os.environ, **{caches.ENV: str(kept),
                               caches.COMPILE_ENV: os.environ.get(caches.COMPILE_ENV) or str(kept / "compile")})


def run_step(command: list[str], log: Path | None = None, env: dict | None = None, timeout_s: float | None = None,
             cwd=None, echo=None) -> tuple[int, str]:
    """``command`` in its own process group, its output to ``echo`` (bytes; default this process's
    stdout) and to ``log`` as it comes (without a log, straight to this process's stdout and stderr);
    stopped with TERM, then KILL ``KILL_AFTER_S`` later, when ``timeout_s`` passes or this process
    is interrupted (Ctrl-C, SIGTERM). Returns its exit status and, where it was stopped, why ("" where
    it ended by itself)."""
    echo = echo or _stdout_bytes
    kept = open(log, "wb") if log is not None else None
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE if kept else None,
                                   stderr=subprocess.STDOUT if kept else None, env=env, cwd=cwd,
                                   start_new_session=True)

        def copy():
            for chunk in iter(lambda: process.stdout.read1(1 << 16), b""):
                echo(chunk)
                kept.write(chunk)
                kept.flush()

        copier = threading.Thread(target=copy, daemon=True) if kept else None
        if copier:
            copier.start()
        stopped = ""
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stopped = "the budget ran out"
            _stop(process)
        except KeyboardInterrupt as interrupt:
            stopped = f"interrupted{f' by {interrupt.args[0]}' if interrupt.args else ''}"
            _stop(process)
        if copier:
            copier.join()
            process.stdout.close()
    finally:
        if kept:
            kept.close()
    return process.returncode, stopped


def _stop(process: subprocess.Popen) -> None:
    """TERM to the step's process group (every command of the suite takes it as an interrupt and
    keeps what finished), KILL if it is still there ``KILL_AFTER_S`` later."""
    for signum, wait_s in ((signal.SIGTERM, KILL_AFTER_S), (signal.SIGKILL, None)):
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:  # a second interrupt while it winds down: no more waiting
            continue


def _stdout_bytes(chunk: bytes) -> None:
    """A step's output to this process's stdout, after any text printed before it."""
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a stdout that takes text only (a test's capture)
        sys.stdout.write(chunk.decode(errors="replace"))
        sys.stdout.flush()
    else:
        out.write(chunk)
        out.flush()


def _say(text: str) -> None:
    print(text, flush=True)  # before the step's output, which goes to stdout's bytes


def run_gpu(config_path: str, directory, *, budget_s: float | None = None, tests: str = DEFAULT_TESTS,
            say: Callable[[str], None] = _say, clock: Callable[[], float] = time.monotonic) -> int:
    """Every step not recorded yet in ``directory/steps``, in order, each given what is left of
    ``budget_s`` (None: no budget). Returns 0 when every step has finished without findings, 1 when
    every step has finished and one found failures, 130 when the budget ran out or the call was
    interrupted before the last step finished, and a step's own exit status when it stopped otherwise
    (128 + the signal's number where a signal ended it)."""
    directory = Path(directory)
    if budget_s is not None and not budget_s > 0:
        raise UsageError(f"--budget {budget_s:g}: must be a positive number of seconds")
    steps = plan_steps(config_path, directory, tests, budget_s is not None)  # a config that does not read: nothing made
    steps_dir = directory / store.STEPS
    try:
        (steps_dir / CACHE).mkdir(parents=True, exist_ok=True)
        (steps_dir / ".gitignore").write_text(GITIGNORE)
    except OSError as error:
        raise ResultError(f"{steps_dir}: cannot write ({store.describe_os_error(error, steps_dir)})") from None
    env = step_environment(steps_dir)
    end = clock() + budget_s if budget_s is not None else None
    again = f"the same command again goes on: make gpu GPU_RESULTS={directory}"
    findings = False
    recorded = read_steps(directory)
    for step in steps:
        if step.name in recorded:
            say(f"{HEAD}: {step.name} finished before ({steps_dir / step.name}.json)")
            findings = findings or recorded[step.name].get("exit") != 0
            continue
        if (steps_dir / f"{step.name}.json").exists():
            say(f"{HEAD}: {steps_dir / step.name}.json cannot be read as a step's record: {step.name} runs again")
        left = None if end is None else round(end - clock(), 3)
        if left is not None and left <= 0:
            say(f"{HEAD}: GPU_BUDGET spent before {step.name}; {again}")
            return EXIT_INTERRUPTED
        say(f"{HEAD}: {step.name} ({'no budget' if left is None else f'{left:.0f} s of the budget left'})")
        start = clock()
        status, stopped = run_step(step.command(left), steps_dir / f"{step.name}.log", env, left, step.cwd)
        seconds = clock() - start
        if stopped or status not in step.finished:
            said = f"{stopped}, exit {status}" if stopped else f"exit {status}"
            say(f"{HEAD}: {step.name} stopped ({said}) after {seconds:.0f} s; {again}")
            if stopped:
                return EXIT_INTERRUPTED
            return status if status >= 0 else 128 - status  # ended by a signal: its status as a shell gives it
        findings = findings or status != 0
        write_record(steps_dir, step.name, status, seconds)
    say(f"{HEAD}: every step finished: {directory}" + (" (with failures: see its steps/*.log)" if findings else ""))
    return EXIT_FINDINGS if findings else EXIT_OK


# ------------------------------------------------------------ where it goes
def default_config() -> Path:
    """The checkout's configs/gpu.yaml."""
    return shown(ROOT / DEFAULT_CONFIG)


def default_directory(config_path=None) -> Path:
    """``results/<commit date>-<config's name>-<commit>-<GPU>`` in the checkout (the config's ``name``,
    else its file's stem; gpu.yaml's is ``gpu``): one directory per commit, config and GPU, so that
    gpu-more.yaml's run never resumes gpu.yaml's; named by the commit's date so that the newest
    commit's run sorts last (``make report``'s newest)."""
    path = Path(config_path) if config_path else default_config()  # as given: from the working directory
    config_name = load_config(path).name or path.stem
    date = _git("log", "-1", "--format=%cd", "--date=format:%Y%m%dT%H%M%S") or time.strftime("%Y%m%dT%H%M%S")
    commit = (facts.git_commit() or "unknown")[:10]  # the commit the run records (a copy's SCATTERBENCH_GIT_COMMIT)
    label = re.sub(r"[^A-Za-z0-9]+", "-", config_name).strip("-") or "gpu"
    return shown(ROOT / "results" / f"{date}-{label}-{commit}-{_gpu_label()}")


def shown(path: Path) -> Path:
    """``path`` relative to the working directory where it lies under it (as printed and recorded), else whole."""
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def _gpu_label() -> str:
    """The first GPU's name as nvidia-smi (else torch) says it, in letters, digits and dashes; ``nogpu``."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=60)
        name = done.stdout.splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        name = None
    if name is None:
        name = facts.gpu_name()
    return re.sub(r"[^A-Za-z0-9]+", "-", name or "").strip("-") or "nogpu"
