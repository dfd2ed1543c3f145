"""Fault injection (issue 18): bad configs, selections of nothing, signals,
corrupted result directories, concurrent writers, unwritable outputs, hostile
names and the gate's blind spot, all through the CLI, ``report.py`` and
``dashboard`` as a user meets them.

The contract: bad input or data ends in exit 2 with exactly one line on
stderr, ``scatterbench: error:`` (``report.py: error:``) naming the file,
key, line or case, and no traceback; an interruption in 130 with the
directory and the ``--resume`` command; findings in 1.

Everything runs in real processes: commands that must be signalled, limited
(``RLIMIT_AS``) or run side by side are started as ``python -m harness``;
the others go through ``cli_zygote.py``, which forks a fresh child with the
harness already imported (the interpreter's start-up costs seconds here).
``SCATTERBENCH_FAULTS_SUBPROCESS=1`` runs those as ``python -m`` too. Runs
load ``quick_ceilings_plugin`` (a 4 MiB ceiling, as ``helpers.plugin_env``
does) unless a test needs the real start-up. Result files are read here with ``csv`` and ``json``, not with
the harness under test.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from tests import helpers
from tests.harness.terminal import sigint_as_at_a_terminal
from tests.helpers import FAST_TIMING, ROOT, benchmark, config_yaml, wait_for

HERE = Path(__file__).parent
PYTHON = sys.executable
META, ROWS, SAMPLES = "meta.json", "rows.csv", "samples.jsonl"
ERROR = "scatterbench: error: "
HOSTILE_NAME = r"tex_$\frac{1}{0}$"  # valid mathtext: drawn as a fraction unless escaped
BROKEN_NAME = r"bad_$\frac{1}$"  # mathtext that does not parse: drawing it as math raises


# ------------------------------------------------------------------ running
def plugin_env(*plugins: str, quick: bool = True, **variables: str) -> dict:
    """``helpers.plugin_env`` with the given plugins (plus the quick ceilings
    unless ``quick`` is false) loaded, wide output and no planted slowdown
    inherited."""
    env = helpers.plugin_env(*plugins, accurate_ceilings=not quick, COLUMNS="1000")
    env.pop("SCATTERBENCH_TEST_SLOWDOWN", None)
    env.update(variables)
    return env


class Zygote:
    """The fork server of cli_zygote.py: one request at a time."""

    def __init__(self):
        self.process = subprocess.Popen([PYTHON, str(HERE / "cli_zygote.py")], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                        env=plugin_env(quick=False))
        ready = self.process.stdout.readline()
        if not ready:
            raise RuntimeError("the fork server did not start")
        self.lock = threading.Lock()
        self.scratch = Path(tempfile.mkdtemp(prefix="faults-zygote-"))

    def run(self, argv: list[str], env: dict, cwd, timeout: float) -> subprocess.CompletedProcess:
        out, err = self.scratch / "out", self.scratch / "err"
        request = {"argv": argv, "env": env, "cwd": str(cwd), "out": str(out), "err": str(err),
                   "timeout": timeout}
        with self.lock:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
            answer = self.process.stdout.readline()
            if not answer:
                raise RuntimeError("the fork server died")
            status = json.loads(answer)["status"]
            stdout = out.read_bytes().decode("utf-8", errors="replace")
            stderr = err.read_bytes().decode("utf-8", errors="replace")
        return subprocess.CompletedProcess(argv, status, stdout, stderr)

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=30)
        shutil.rmtree(self.scratch, ignore_errors=True)


_zygote: Zygote | None = None


def use_zygote() -> bool:
    return os.environ.get("SCATTERBENCH_FAULTS_SUBPROCESS") != "1"


@pytest.fixture(scope="module", autouse=True)
def _zygote_for_the_module():
    global _zygote
    if use_zygote() and _zygote is None:
        _zygote = Zygote()  # started here, so its seconds are set-up, not the first test's
    yield
    if _zygote is not None:
        _zygote.close()
        _zygote = None


def _run(module: str, args, env, cwd, timeout) -> subprocess.CompletedProcess:
    global _zygote
    argv = [module, *map(str, args)]
    env = env or plugin_env()
    cwd = cwd or os.getcwd()
    if use_zygote():
        if _zygote is None:
            _zygote = Zygote()
        started = time.monotonic()
        result = _zygote.run(argv, env, cwd, timeout)
    else:
        started = time.monotonic()
        result = subprocess.run([PYTHON, "-m", *argv], capture_output=True, text=True, env=env, cwd=cwd,
                                timeout=timeout, errors="replace")
    result.seconds = time.monotonic() - started  # the command's own time, without the fork server's start
    return result


def cli(*args, env=None, cwd=None, timeout=180) -> subprocess.CompletedProcess:
    """``python -m harness ARGS``, to completion."""
    return _run("harness", args, env, cwd, timeout)


def report_py(*args, env=None, cwd=None, timeout=180) -> subprocess.CompletedProcess:
    """``python report.py ARGS``, to completion."""
    return _run("report", args, env, cwd, timeout)


def spawn(*args, env=None, rlimit_as: int | None = None) -> subprocess.Popen:
    """A real ``python -m harness ARGS`` left running, with SIGINT's default
    action (``sigint_as_at_a_terminal``)."""
    def setup():
        sigint_as_at_a_terminal()
        if rlimit_as:
            resource.setrlimit(resource.RLIMIT_AS, (rlimit_as, rlimit_as))

    return subprocess.Popen([PYTHON, "-m", "harness", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", env=env or plugin_env(),
                            preexec_fn=setup)


def finish(process: subprocess.Popen, timeout=180) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        pytest.fail(f"{process.args} did not finish in {timeout} s: {stderr[-2000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


# ------------------------------------------------------------------ reading
def rows_of(directory) -> list[dict]:
    with open(Path(directory) / ROWS, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def meta_of(directory) -> dict:
    return json.loads((Path(directory) / META).read_text())


def samples_of(directory) -> list[dict]:
    path = Path(directory) / SAMPLES
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines(keepends=True) if line.endswith("\n")]


def finished_rows(directory) -> int:
    path = Path(directory) / ROWS
    try:
        return max(path.read_bytes().count(b"\n") - 1, 0)
    except FileNotFoundError:
        return 0


def assert_one_run(directory, n_cases: int) -> list[dict]:
    """Exactly one run on disk: one run id everywhere, every case once, a
    samples record for each timed row and none for anything else."""
    meta, rows, samples = meta_of(directory), rows_of(directory), samples_of(directory)
    assert {row["run_id"] for row in rows} == {meta["run_id"]}
    ids = [row["case_id"] for row in rows]
    assert len(ids) == n_cases and len(set(ids)) == n_cases, ids
    timed = {row["case_id"] for row in rows if row["n_samples"] not in ("", "0", "0.0")}
    sampled = [record["case_id"] for record in samples]
    assert sorted(sampled) == sorted(timed)
    return rows


def stderr_lines(stderr: str) -> list[str]:
    """The non-empty lines of stderr without a run's progress notes: `resuming
    DIR: N cases done, M to run`, the start-up banner (`run ID: N cases ->
    DIR  cpu copy ceiling ... GB/s`, which the console wraps at 180 columns)
    and the notes under it (a busy ceiling, the verdicts from the cache)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if lines and lines[0].startswith("resuming ") and " cases done, " in lines[0]:
        lines.pop(0)
    if lines and lines[0].startswith("run ") and " cases -> " in lines[0]:
        lines.pop(0)
        while lines and lines[0].rstrip().endswith("GB/s") and not lines[0].startswith(("scatterbench", "interr")):
            lines.pop(0)
    # the start's notes: a busy or reused ceiling, the bandwidth curves measured or reused, the verdicts from the cache
    while lines and (lines[0].startswith("adversarial check: ") or " copy ceiling measured busy " in lines[0]
                     or " bandwidth curves (" in lines[0] or " bandwidth curves measured busy " in lines[0]):
        lines.pop(0)
    return lines


def error_line(result, *needles, code: int = 2, prefix: str = ERROR) -> str:
    """The one error line of a failed command: exit ``code``, no traceback,
    the only line on stderr but for a run's progress notes, starting with
    ``prefix`` and naming every needle."""
    lines = stderr_lines(result.stderr)
    context = f"exit {result.returncode}\nstderr:\n{result.stderr[-3000:]}\nstdout:\n{result.stdout[-1500:]}"
    assert result.returncode == code, context
    assert "Traceback" not in result.stderr, context
    assert len(lines) == 1, context
    line = lines[0]
    assert line.startswith(prefix), context
    for needle in needles:
        assert str(needle) in line, f"{needle!r} not in {line!r}\n{context}"
    return line


def assert_clean(result, code: int = 0):
    context = f"exit {result.returncode}\nstderr:\n{result.stderr[-3000:]}\nstdout:\n{result.stdout[-1500:]}"
    assert result.returncode == code, context
    assert "Traceback" not in result.stderr, context


# ------------------------------------------------------------------ configs
def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# The timing of most configs here: capped at 40 samples, a case timed out after 30 s.
TINY_TIMING = {**FAST_TIMING, "max_samples": 40, "timeout_s": 30}
POINT = {"N": 1, "C": 1, "H": 4, "W": 4, "k": 2}
TWO_SIZES = {**POINT, "H": [4, 8]}

TINY = config_yaml(benchmark("maxpool2d", ["numpy_sliding_window", "torch_max_pool2d_indices"], **TWO_SIZES),
                   timing=TINY_TIMING)
TINY_CASES = 4

# Eight cases of 2 ms calls for 0.3 s each: long enough to interrupt mid-way.
SLOW_TIMING = {"min_samples": 5, "max_samples": 400, "budget_s": 0.3, "warmup_s": 0}
SLOW_BENCHMARK = benchmark("maxpool2d", ["spin_steady"], N=1, C=1, H=[4, 6, 8, 10, 12, 14, 16, 18], W=4, k=2)
SLOW = config_yaml(SLOW_BENCHMARK, name="slow", timing=SLOW_TIMING)
SLOW_CASES = 8


def one_benchmark(params: dict, strategies=("numpy_sliding_window",), name: str | None = None,
                  timing: dict = TINY_TIMING, **top) -> str:
    """A config of one maxpool2d benchmark over ``params``, without a name
    or threads unless given."""
    return config_yaml(benchmark("maxpool2d", strategies, **params), name=name, timing=timing, threads=None, **top)


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    """One real run of TINY (4 cases), made once; tests copy it before damaging it."""
    root = tmp_path_factory.mktemp("base")
    config = write(root / "tiny.yaml", TINY)
    result = cli("run", config, "-o", root / "run", "--no-progress")
    assert_clean(result)
    assert_one_run(root / "run", TINY_CASES)
    return config, root / "run"


def copy_run(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns(".lock"))
    return target


# ============================================================== bad configs
@pytest.mark.parametrize("text, key", [
    (one_benchmark({**POINT, "N": True}), "benchmarks[0].params.N"),
    (one_benchmark(POINT, seed=-1), "seed"),
    (one_benchmark(POINT, timing={**TINY_TIMING, "timeout_s": 1e300}), "timing.timeout_s"),
], ids=["N-true", "negative-seed", "timeout-1e300"])
def test_bad_config_value_is_one_line_naming_file_and_key(tmp_path, text, key):
    config = write(tmp_path / "bad.yaml", text)
    result = cli("run", config, "-o", tmp_path / "never", "--no-progress")
    error_line(result, config, key)
    assert not (tmp_path / "never").exists()


def test_config_that_is_not_utf8_names_its_line(tmp_path):
    config = tmp_path / "latin1.yaml"
    config.write_bytes(b"# a config saved as Latin-1\nname: caf\xe9\n" + one_benchmark(POINT).encode())
    for command in ("run", "check"):
        result = cli(command, config, "--no-progress")
        error_line(result, config, "line 2", "UTF-8")


def test_grid_of_60_to_the_4_is_refused_before_expansion(tmp_path):
    sizes = list(range(2, 122, 2))  # 60 even sizes per axis
    config = write(tmp_path / "grid.yaml", one_benchmark({"N": sizes, "C": sizes, "H": sizes, "W": sizes, "k": 2}))
    result = cli("run", config, "-o", tmp_path / "never", "--no-progress", timeout=60)
    line = error_line(result, config, "benchmarks[0].params", "12,960,000")
    assert "MemoryError" not in result.stderr and "MemoryError" not in line
    assert result.seconds < 20
    assert not (tmp_path / "never").exists()


GIB = 1 << 30


@pytest.mark.slow
def test_check_skips_a_reference_that_cannot_fit_under_ulimit_v(tmp_path):
    """check.max_bytes raised over a point whose float64 check needs ~9 GiB,
    under a 3 GiB address-space limit: skipped with its reason, nothing allocated."""
    config = write(tmp_path / "huge-check.yaml", one_benchmark({"N": 4, "C": 64, "H": 1024, "W": 1024, "k": 2},
                                                               check={"max_bytes": 17179869184}))
    process = spawn("check", config, "--no-progress", rlimit_as=3 * GIB)
    result = finish(process, timeout=300)
    assert_clean(result)
    text = " ".join(result.stdout.split())
    assert "skipped before allocating" in text and "float64 reference" in text, result.stdout[-3000:]
    assert "MemoryError" not in result.stdout + result.stderr
    assert "0 failed" in result.stdout


@pytest.mark.slow
def test_sweep_memory_guard_respects_ulimit_v(tmp_path):
    """A case that needs ~6.5 GiB, on a machine with far more free, under a
    3 GiB address-space limit: skipped before allocating, not an OOM error; the
    small case beside it runs."""
    import psutil

    if psutil.virtual_memory().available < 10 * GIB:
        pytest.skip("needs 10 GiB free, so that only the address-space limit can explain a skip")
    config = write(tmp_path / "huge-run.yaml", config_yaml(
        benchmark("maxpool2d", ["numpy_sliding_window"], N=4, C=64, H=1024, W=1024, k=2),
        benchmark("maxpool2d", ["numpy_sliding_window"], N=1, C=1, H=8, W=8, k=2),
        name=None, timing={**TINY_TIMING, "timeout_s": 60}, threads=None))
    out = tmp_path / "out"
    result = finish(spawn("run", config, "-o", out, "--no-progress", rlimit_as=3 * GIB), timeout=300)
    assert_clean(result)
    by_n = {json.loads(row["params"])["N"]: row for row in rows_of(out)}
    assert by_n[4]["status"] == "skipped", by_n[4]["message"]
    assert "skipped before allocating" in by_n[4]["message"], by_n[4]["message"]
    assert by_n[1]["status"] == "ok", by_n[1]["message"]


@pytest.mark.slow
def test_a_case_the_memory_guard_admits_under_ulimit_v_does_not_run_out(tmp_path):
    config = write(tmp_path / "admitted.yaml", one_benchmark({"N": 1, "C": 16, "H": 1024, "W": 1024, "k": 2}))
    out = tmp_path / "out"
    result = finish(spawn("run", config, "-o", out, "--no-progress", rlimit_as=3 * GIB), timeout=300)
    assert_clean(result)
    (row,) = rows_of(out)
    # Admitted (its ~0.6 GiB fits what the 3 GiB limit leaves), so it must run, not be skipped: a guard that
    # skipped it would pass a looser assertion without anything being tested.
    assert row["status"] == "ok", row["message"]


# ================================================== selections of nothing
def test_run_with_an_unknown_strategy(tmp_path, base_run):
    config, _ = base_run
    error_line(cli("run", config, "--strategy", "bogus", "-o", tmp_path / "never", "--no-progress"),
               "--strategy", "bogus")
    assert not (tmp_path / "never").exists()


def test_check_with_an_unknown_operator(base_run):
    config, _ = base_run
    error_line(cli("check", config, "--op", "bogus", "--no-progress"), "--op", "bogus")


@pytest.mark.parametrize("command", ["run", "check"])
def test_config_selecting_only_a_cuda_strategy_on_the_cpu(tmp_path, command):
    config = write(tmp_path / "triton.yaml", one_benchmark(POINT, strategies=["triton_fused"]))
    env = plugin_env()
    env.pop("TRITON_INTERPRET", None)  # the test suite's stand-in for a GPU; a user's CPU has none
    output = ["-o", tmp_path / "never"] if command == "run" else []
    error_line(cli(command, config, *output, "--no-progress", env=env), "triton_fused", "cuda")
    assert not (tmp_path / "never").exists()


def test_compare_relative_to_an_unknown_strategy(base_run):
    _, run = base_run
    error_line(cli("compare", run, run, "--relative-to", "bogus"), "--relative-to", "bogus")


def test_compare_with_factor_nan(base_run):
    _, run = base_run
    error_line(cli("compare", run, run, "--factor", "nan"), "--factor", "nan")


def split_by_strategy(source: Path, target: Path, keep: str) -> Path:
    """A copy of a run holding only one strategy's rows and samples."""
    copy_run(source, target)
    lines = (target / ROWS).read_text().splitlines(keepends=True)
    (target / ROWS).write_text(lines[0] + "".join(line for line in lines[1:] if f"|{keep}|" in line))
    kept = [line for line in (target / SAMPLES).read_text().splitlines(keepends=True) if f"|{keep}|" in line]
    (target / SAMPLES).write_text("".join(kept))
    return target


def test_compare_two_runs_with_no_case_in_common(tmp_path, base_run):
    _, run = base_run
    numpy_only = split_by_strategy(run, tmp_path / "numpy", "numpy_sliding_window")
    torch_only = split_by_strategy(run, tmp_path / "torch", "torch_max_pool2d_indices")
    error_line(cli("compare", numpy_only, torch_only), numpy_only, torch_only, "no case in common")


# ============================================================ interruptions
def interrupted_line(result, out: Path, config: Path) -> str:
    """Exit 130 and one line naming the directory and the resume command (the
    start-up banner `run ID: N cases -> DIR ...` may precede it)."""
    context = f"exit {result.returncode}\nstderr:\n{result.stderr[-3000:]}"
    assert result.returncode == 130, context
    assert "Traceback" not in result.stderr, context
    lines = stderr_lines(result.stderr)
    assert len(lines) == 1, context
    assert str(out) in lines[0] and f"--resume {out}" in lines[0] and str(config) in lines[0], context
    return lines[0]


def resume_completes(config: Path, out: Path, n_cases: int, env: dict) -> list[dict]:
    result = cli("run", config, "--resume", out, "--no-progress", env=env)
    assert_clean(result)
    rows = assert_one_run(out, n_cases)
    meta = meta_of(out)
    assert meta["status"] == "complete" and meta["resumed"]
    return rows


@pytest.mark.slow
def test_ctrl_c_while_the_ceilings_are_measured_then_resume(tmp_path):
    config, out = write(tmp_path / "slow.yaml", SLOW), tmp_path / "out"
    env = plugin_env("spin_plugin", quick=False)  # the real ceilings: seconds to land in

    def starting():
        try:
            return meta_of(out).get("status") == "starting"
        except (OSError, ValueError):
            return False

    process = spawn("run", config, "-o", out, "--no-progress", env=env)
    wait_for(starting, "meta.json written with status starting", process=process)
    process.send_signal(signal.SIGINT)
    interrupted_line(finish(process), out, config)
    meta = meta_of(out)
    assert meta["status"] == "interrupted" and meta.get("interrupted_by") == "SIGINT"
    assert not meta.get("ceilings_gbps"), "the signal was meant to land while the ceilings were measured"
    assert finished_rows(out) == 0
    resume_completes(config, out, SLOW_CASES, plugin_env("spin_plugin"))


SIGINT_ON_IMPORT = """
# Written by test_faults.py: a real SIGINT, sent by the process to itself the
# moment it starts importing the module named in SCATTERBENCH_TEST_SIGINT_AT,
# as if Ctrl-C were pressed just then.
import os
import signal
import sys


class _SigintOnImport:
    def find_spec(self, name, path=None, target=None):
        if name == os.environ.get("SCATTERBENCH_TEST_SIGINT_AT"):
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None


sys.meta_path.insert(0, _SigintOnImport())
"""


@pytest.mark.parametrize("module", [
    "harness.measuring.sweep",  # inside main(): the run command loading what it needs
    "harness.cli",  # `python -m harness` importing the CLI itself
])
def test_ctrl_c_very_early_is_a_clean_130(tmp_path, module):
    """Ctrl-C while the command is still importing: exit 130, one line, no
    traceback; nothing written, nothing to resume."""
    (tmp_path / "trap").mkdir()
    (tmp_path / "trap" / "sitecustomize.py").write_text(SIGINT_ON_IMPORT)
    env = plugin_env("spin_plugin", SCATTERBENCH_TEST_SIGINT_AT=module)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "trap"), env["PYTHONPATH"]])
    config, out = write(tmp_path / "slow.yaml", SLOW), tmp_path / "out"
    result = finish(spawn("run", config, "-o", out, "--no-progress", env=env))
    assert result.returncode == 130 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert stderr_lines(result.stderr) == ["scatterbench: interrupted"], result.stderr
    assert not out.exists()


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler installed for ``signum`` (/proc's SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next((line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), "0")
    return bool(int(mask, 16) & (1 << (signum - 1)))


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc to see the handler installed")
def test_sigterm_during_check_is_one_line_and_130():
    """`check` under `timeout` or Slurm: SIGTERM ended it with 143 and no word."""
    process = spawn("check", ROOT / "configs" / "default.yaml", "--no-progress", env=plugin_env())
    wait_for(lambda: catches(process.pid, signal.SIGTERM), "the SIGTERM handler", process=process)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    result = finish(process)
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    assert stderr_lines(result.stderr)[-1] == "scatterbench: interrupted by SIGTERM", result.stderr[-2000:]
    assert "Traceback" not in result.stderr


SIGTERM_WHILE_SPAWNING = """
# Written by test_faults.py: a real SIGTERM, sent by the process to itself
# just after it started its first worker process and before it wrote that
# worker the data it starts from (the window a `timeout` hit in CI).
import os
import signal
import time
from multiprocessing import util

_spawnv_passfds = util.spawnv_passfds


def spawnv_passfds(path, args, passfds):
    pid = _spawnv_passfds(path, args, passfds)
    if any(b"spawn_main" in os.fsencode(arg) for arg in args) and os.environ.pop("SCATTERBENCH_TEST_SIGTERM_AT_SPAWN", None):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)  # the handler runs here, inside the worker's launch
    return pid


util.spawnv_passfds = spawnv_passfds
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the trap patches the POSIX spawn of multiprocessing")
def test_sigterm_while_a_check_worker_starts_is_one_line_and_130(tmp_path):
    """CI: a SIGTERM landing while `check` started its worker pool left a
    worker half-launched, outside the pool's list, so never stopped: it read
    its start-up data from a closed pipe and printed an EOFError traceback
    after "interrupted by SIGTERM"."""
    (tmp_path / "trap").mkdir()
    (tmp_path / "trap" / "sitecustomize.py").write_text(SIGTERM_WHILE_SPAWNING)
    env = plugin_env(SCATTERBENCH_TEST_SIGTERM_AT_SPAWN="1")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "trap"), env["PYTHONPATH"]])
    result = finish(spawn("check", ROOT / "configs" / "default.yaml", "--no-progress", env=env))
    assert result.returncode == 130, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr and "Error" not in result.stderr, result.stderr[-3000:]
    assert stderr_lines(result.stderr)[-1] == "scatterbench: interrupted by SIGTERM", result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_mid_sweep_then_resume_runs_every_case_once(tmp_path, signum):
    config, out = write(tmp_path / "slow.yaml", SLOW), tmp_path / "out"
    env = plugin_env("spin_plugin")
    process = spawn("run", config, "-o", out, "--no-progress", env=env)
    wait_for(lambda: finished_rows(out) >= 2, "two finished cases", process=process)
    process.send_signal(signum)
    interrupted_line(finish(process), out, config)
    meta = meta_of(out)
    assert meta["status"] == "interrupted" and meta["interrupted_by"] == signal.Signals(signum).name
    assert 2 <= len(rows_of(out)) < SLOW_CASES
    resume_completes(config, out, SLOW_CASES, env)


def test_strategy_calling_sys_exit_is_an_error_row_and_the_sweep_goes_on(tmp_path):
    config = write(tmp_path / "exits.yaml", one_benchmark(TWO_SIZES,
                                                          strategies=["fault_exits", "numpy_sliding_window"]))
    out = tmp_path / "out"
    result = cli("run", config, "-o", out, "--no-progress", env=plugin_env("misbehaving_plugin"))
    assert_clean(result)
    rows = assert_one_run(out, 4)
    for row in rows:
        if row["strategy"] == "fault_exits":
            assert row["status"] == "error" and "sys.exit(0)" in row["message"], row
        else:
            assert row["status"] == "ok", row
    assert meta_of(out)["status"] == "complete"


# ============================================ corrupted result directories
def replace_line(path: Path, number: int, edit) -> None:
    """Line ``number`` (1-based) of ``path`` through ``edit`` (bytes -> bytes)."""
    lines = path.read_bytes().splitlines(keepends=True)
    lines[number - 1] = edit(lines[number - 1])
    path.write_bytes(b"".join(lines))


def rows_not_utf8(run: Path):
    replace_line(run / ROWS, 3, lambda line: line.replace(b"maxpool2d", b"maxpool\xff\xfe", 1))
    return run / ROWS, "line 3", "UTF-8"


def samples_not_utf8(run: Path):
    replace_line(run / SAMPLES, 2, lambda line: line.replace(b"samples_s", b"samples\xe9s", 1))
    return run / SAMPLES, "line 2", "UTF-8"


def meta_not_utf8(run: Path):
    (run / META).write_bytes((run / META).read_bytes().replace(b'"run_id"', b'"run_\xe9id"', 1))
    return run / META, "UTF-8"


def meta_a_list(run: Path):
    (run / META).write_text(json.dumps([meta_of(run)]))
    return run / META, "JSON object"


def meta_without_run_id(run: Path):
    meta = meta_of(run)
    del meta["run_id"]
    (run / META).write_text(json.dumps(meta))
    return run / META, "run_id"


def duplicated_row(run: Path):
    lines = (run / ROWS).read_bytes().splitlines(keepends=True)
    (run / ROWS).write_bytes(b"".join(lines + [lines[1]]))
    case_id = rows_of(run)[0]["case_id"]
    return run / ROWS, f"line {len(lines) + 1}", "duplicate", case_id


def samples_case_id_not_a_string(run: Path):
    replace_line(run / SAMPLES, 2, lambda line: (json.dumps(dict(json.loads(line), case_id=[1, 2])) + "\n").encode())
    return run / SAMPLES, "line 2", "case_id"


DAMAGES = [rows_not_utf8, samples_not_utf8, meta_not_utf8, meta_a_list, meta_without_run_id, duplicated_row,
           samples_case_id_not_a_string]
TOOLS = ["resume", "compare", "report", "dashboard"]


def use(tool: str, damaged: Path, pristine: Path, config: Path, tmp_path: Path, *extra):
    if tool == "resume":
        return cli("run", config, "--resume", damaged, "--no-progress")
    if tool == "compare":
        return cli("compare", pristine, damaged, *extra)
    if tool == "report":
        return report_py(damaged, "-o", tmp_path / "report")
    assert damaged.parent == pristine.parent
    return cli("dashboard", damaged.parent, "-o", tmp_path / "site", "--no-reports")


def damaged_pair(base_run, tmp_path) -> tuple[Path, Path, Path]:
    config, run = base_run
    return config, copy_run(run, tmp_path / "runs" / "a-pristine"), copy_run(run, tmp_path / "runs" / "b-damaged")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("damage", DAMAGES, ids=lambda damage: damage.__name__)
def test_corrupted_result_directory_is_one_line_naming_file_and_line(tmp_path, base_run, damage, tool):
    config, pristine, damaged = damaged_pair(base_run, tmp_path)
    needles = damage(damaged)
    before = {name: (damaged / name).read_bytes() for name in (META, ROWS, SAMPLES)}
    prefix = "report.py: error: " if tool == "report" else ERROR
    error_line(use(tool, damaged, pristine, config, tmp_path), *needles, prefix=prefix)
    # Nothing was added to, or mended in, the damaged run: no duplicate kept, no case re-run.
    assert {name: (damaged / name).read_bytes() for name in (META, ROWS, SAMPLES)} == before


def empty_samples(line: bytes) -> bytes:
    record = json.loads(line)
    return (json.dumps(dict(record, samples_s=[])) + "\n").encode()


def string_samples(line: bytes) -> bytes:
    record = json.loads(line)
    return (json.dumps(dict(record, samples_s="0.001 0.002")) + "\n").encode()


def nan_samples(line: bytes) -> bytes:
    record = json.loads(line)
    return (json.dumps(dict(record, samples_s=[float("nan")] * len(record["samples_s"]))) + "\n").encode()


@pytest.mark.parametrize("tool", [pytest.param(tool, marks=pytest.mark.slow) if tool == "report" else tool
                                  for tool in TOOLS])  # the report draws every figure: seconds
@pytest.mark.parametrize("edit", [string_samples, empty_samples, nan_samples], ids=lambda edit: edit.__name__)
def test_unusable_samples_warn_and_are_never_compared_as_same(tmp_path, base_run, edit, tool):
    config, pristine, damaged = damaged_pair(base_run, tmp_path)
    if tool == "compare":  # compare judges times only between runs the fitness rule admits; a busy machine's are not
        helpers.as_quiet(pristine), helpers.as_quiet(damaged)
    replace_line(damaged / SAMPLES, 2, edit)
    case_id = json.loads((damaged / SAMPLES).read_text().splitlines()[1])["case_id"]
    result = use(tool, damaged, pristine, config, tmp_path, "--format", "json")
    assert_clean(result)
    assert not any(line.startswith(ERROR) for line in result.stderr.splitlines()), result.stderr
    if tool == "compare":
        assert f"{damaged / SAMPLES}: line 2" in result.stderr, result.stderr  # the warning names file and line
        verdicts = {case["case_id"]: case["verdict"] for case in json.loads(result.stdout)["cases"]}
        assert verdicts[case_id] not in ("same", "improved", "regressed"), verdicts[case_id]
        assert sum(verdict == "same" for verdict in verdicts.values()) <= TINY_CASES - 1
    if tool == "resume":  # nothing was left to run, and nothing was added
        assert_one_run(damaged, TINY_CASES)


def test_resume_after_a_stop_between_a_cases_two_writes(tmp_path, base_run):
    """A run stopped after a case's samples line and before its row (kill -9,
    a full disk): --resume runs that case again and keeps one samples record."""
    config, run = base_run
    stopped = copy_run(run, tmp_path / "stopped")
    lines = (stopped / ROWS).read_bytes().splitlines(keepends=True)
    (stopped / ROWS).write_bytes(b"".join(lines[:-1]))
    assert len(samples_of(stopped)) == TINY_CASES
    resume_completes(config, stopped, TINY_CASES, plugin_env())


def test_run_into_a_directory_whose_meta_was_deleted_is_refused(tmp_path, base_run):
    config, run = base_run
    orphan = copy_run(run, tmp_path / "orphan")
    (orphan / META).unlink()
    rows_before = (orphan / ROWS).read_bytes()
    error_line(cli("run", config, "-o", orphan, "--no-progress"), orphan, "not empty", "no run to resume")
    assert (orphan / ROWS).read_bytes() == rows_before and not (orphan / META).exists()
    error_line(cli("run", config, "--resume", orphan, "--no-progress"), orphan / META)


# ======================================================= concurrent writers
def lock_named(result, holder: subprocess.Popen, out: Path) -> str:
    return error_line(result, out, f"pid {holder.pid}")


def one_of_two_refused(out: Path, *args, env: dict, what: str) -> subprocess.Popen:
    """``python -m harness ARGS`` started twice at once, writing into
    ``out``: one is refused at once, naming the other's pid; the other,
    returned, holds the directory."""
    first, second = (spawn(*args, env=env) for _ in range(2))
    wait_for(lambda: first.poll() is not None or second.poll() is not None, f"one of the two {what} to be refused")
    refused, holder = (first, second) if first.poll() is not None else (second, first)
    lock_named(finish(refused), holder, out)
    return holder


# Two quick cases, then one whose calls wait for a file: the run holds its
# directory until the test lets it go.
HELD = config_yaml(benchmark("maxpool2d", ["numpy_sliding_window"], N=1, C=1, H=[4, 6], W=4, k=2),
                   benchmark("maxpool2d", ["held_open"], N=1, C=1, H=8, W=4, k=2),
                   name="held", timing={**TINY_TIMING, "timeout_s": 600})
HELD_CASES = 3


@pytest.mark.slow
def test_two_runs_into_one_directory_and_two_resumes_of_it(tmp_path):
    config, out, release = write(tmp_path / "held.yaml", HELD), tmp_path / "out", tmp_path / "release"
    env = plugin_env("misbehaving_plugin", SCATTERBENCH_TEST_RELEASE=str(release))
    # Two runs started together into one (missing) directory: one writes, the other is refused at once.
    winner = one_of_two_refused(out, "run", config, "-o", out, "--no-progress", env=env, what="runs")
    # A third, started while the winner writes (held in its last case), is refused the same way.
    wait_for(lambda: finished_rows(out) >= 2, "two finished cases", process=winner)
    lock_named(cli("run", config, "-o", out, "--no-progress", env=env), winner, out)
    assert winner.poll() is None
    winner.send_signal(signal.SIGINT)
    interrupted_line(finish(winner), out, config)
    assert len(assert_one_run(out, 2)) == 2
    # Two resumes at once: one holds the directory (held again), the other is refused naming its pid.
    holder = one_of_two_refused(out, "run", config, "--resume", out, "--no-progress", env=env, what="resumes")
    assert holder.poll() is None
    release.touch()
    assert_clean(finish(holder))
    assert_one_run(out, HELD_CASES)
    assert meta_of(out)["status"] == "complete"


# ======================================================== unwritable output
@pytest.fixture
def small_fs(tmp_path):
    """Mounts tmpfs file systems (root only; the test skips where it cannot)
    and unmounts every one afterwards, whatever happened."""
    mounted: list[Path] = []

    def mount(name: str, size: str = "256k") -> Path:
        target = tmp_path / name
        target.mkdir()
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(target)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
        mounted.append(target)
        return target

    yield mount
    for target in reversed(mounted):
        subprocess.run(["umount", str(target)], capture_output=True)
        if os.path.ismount(target):
            subprocess.run(["umount", "-l", str(target)], capture_output=True)


def remount(target: Path, options: str) -> None:
    result = subprocess.run(["mount", "-o", f"remount,{options}", str(target)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def fill(target: Path) -> None:
    """Writes into ``target`` until its file system is full."""
    with open(target / "filler", "wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 4096)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError:
            pass
    try:
        (target / "tiny-filler").write_bytes(b"\0" * 512)
    except OSError:
        pass


def unwritable(kind: str, tmp_path: Path, small_fs) -> tuple[Path, str]:
    """An output path nothing can be written to, and the reason's words."""
    if kind == "existing-file":
        path = write(tmp_path / "a-file", "not a directory\n")
        return path, "not a directory"
    if kind == "below-a-file":
        return write(tmp_path / "a-file", "not a directory\n") / "out", "a path component is a file"
    if kind == "read-only-fs":
        mount = small_fs("ro")
        remount(mount, "ro")
        return mount / "out", "read-only file system"
    mount = small_fs("full", "64k")
    (mount / "out").mkdir()
    fill(mount)
    return mount / "out", "no space left"


KINDS = ["existing-file", "below-a-file", "read-only-fs", "full-disk"]

@pytest.mark.parametrize("kind", KINDS)
def test_run_into_an_unwritable_place_fails_before_measuring(tmp_path, small_fs, base_run, kind):
    config, _ = base_run
    target, reason = unwritable(kind, tmp_path, small_fs)
    result = cli("run", config, "-o", target, "--no-progress")
    error_line(result, target, reason)
    assert "copy ceiling" not in result.stderr  # failed before the ceilings were measured
    assert result.seconds < 20
    assert not (target / META).exists() if target.is_dir() else True


@pytest.mark.parametrize("kind", KINDS)
def test_dashboard_into_an_unwritable_place(tmp_path, small_fs, base_run, kind):
    _, run = base_run
    root = tmp_path / "results"
    copy_run(run, root / "run")
    target, reason = unwritable(kind, tmp_path, small_fs)
    error_line(cli("dashboard", root, "-o", target), target, reason)


@pytest.mark.parametrize("kind", KINDS)
def test_report_into_an_unwritable_place(tmp_path, small_fs, base_run, kind):
    _, run = base_run
    target, reason = unwritable(kind, tmp_path, small_fs)
    error_line(report_py(run, "-o", target), target, reason, prefix="report.py: error: ")


# Twelve cases of up to 2000 samples (about 40 KB each on disk): a 192 KB file
# system fills a few cases in.
FILLING = config_yaml(benchmark("maxpool2d", ["torch_max_pool2d_indices"], N=1, C=1, H=list(range(4, 28, 2)), W=4,
                                k=2),
                      name="filling", timing={"min_samples": 2000, "max_samples": 2000, "budget_s": 0.001,
                                              "warmup_s": 0, "timeout_s": 60})
FILLING_CASES = 12


@pytest.mark.slow
def test_disk_full_mid_run_stops_cleanly_and_resumes_once_there_is_space(tmp_path, small_fs):
    config = write(tmp_path / "filling.yaml", FILLING)
    mount = small_fs("small", "192k")
    out = mount / "out"
    result = cli("run", config, "-o", out, "--no-progress")
    line = error_line(result, out, "no space left", f"--resume {out}")
    safe = finished_rows(out)
    assert 1 <= safe < FILLING_CASES, line
    assert f"stopped with {safe} cases safely on disk" in line
    assert len(rows_of(out)) == safe  # every row that is on disk reads back
    remount(mount, "size=16m")
    resume_completes(config, out, FILLING_CASES, plugin_env())


# ============================================================ hostile names
def test_config_name_cannot_move_the_default_output_out_of_results(tmp_path):
    config = write(tmp_path / "escape.yaml", one_benchmark(POINT, name="../../escape"))
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    result = cli("run", config, "--no-progress", cwd=cwd)
    assert_clean(result)
    made = list((cwd / "results").iterdir())
    assert len(made) == 1 and made[0].resolve().parent == (cwd / "results").resolve(), made
    assert (made[0] / META).exists() and len(rows_of(made[0])) == 1
    strays = [path for path in tmp_path.rglob("*escape*")
              if path != config and (cwd / "results").resolve() not in path.resolve().parents]
    assert not strays, strays


def hostile_names_for_html(text: str) -> list[str]:
    import html

    return [name for name in (HOSTILE_NAME, BROKEN_NAME) if html.escape(name) in text or name in text]


def names_in_report(run: Path, tmp_path: Path) -> list[str]:
    """The hostile names report.py's HTML for ``run`` shows; report.py must exit cleanly."""
    assert_clean(report_py(run, "-o", tmp_path / "report"))
    return hostile_names_for_html((tmp_path / "report" / "report.html").read_text())


def names_in_dashboard(root: Path, tmp_path: Path, *options: str) -> list[str]:
    """The hostile names the dashboard of ``root`` shows; the command must exit cleanly."""
    assert_clean(cli("dashboard", root, "-o", tmp_path / "site", *options))
    return hostile_names_for_html((tmp_path / "site" / "index.html").read_text())


@pytest.fixture(scope="module")
def hostile_runs(tmp_path_factory):
    """A run of numpy_sliding_window beside both hostile names, and a copy
    without the one whose mathtext does not parse, each in its own root."""
    root = tmp_path_factory.mktemp("hostile")
    config = write(root / "hostile.yaml", one_benchmark(TWO_SIZES, strategies=["numpy_sliding_window", HOSTILE_NAME,
                                                                               BROKEN_NAME]))
    both = root / "both" / "run"
    assert_clean(cli("run", config, "-o", both, "--no-progress", env=plugin_env("misbehaving_plugin")))
    assert len(rows_of(both)) == 6
    valid = copy_run(both, root / "valid" / "run")
    # By the strategy's own field: a raced row names the strategy it was decided against too.
    with open(valid / ROWS, newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames, [row for row in reader if row["strategy"] != BROKEN_NAME]
    with open(valid / ROWS, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    kept = [line for line in (valid / SAMPLES).read_text().splitlines(keepends=True)
            if json.loads(line)["case_id"].split("|")[1] != BROKEN_NAME]
    (valid / SAMPLES).write_text("".join(kept))
    assert len(rows_of(valid)) == 4
    # Both fit whatever the load: an unfit run's report draws no figure, so the names would
    # never reach matplotlib's mathtext parser and the tests below would test nothing.
    return helpers.as_quiet(both), helpers.as_quiet(valid)


def svg_env(tmp_path) -> dict:
    """Figures' SVG with real <text> elements, so a label drawn as text can be read back."""
    (tmp_path / "mplrc").mkdir()
    (tmp_path / "mplrc" / "matplotlibrc").write_text("svg.fonttype: none\n")
    return plugin_env(MATPLOTLIBRC=str(tmp_path / "mplrc"))


@pytest.mark.slow
def test_mathtext_in_a_strategy_name_does_not_crash_report_or_dashboard(tmp_path, hostile_runs):
    _, valid = hostile_runs
    assert HOSTILE_NAME in names_in_report(valid, tmp_path)
    assert HOSTILE_NAME in names_in_dashboard(valid.parent, tmp_path)


@pytest.mark.slow
def test_report_figures_show_a_mathtext_name_as_text(tmp_path, hostile_runs):
    _, valid = hostile_runs
    assert_clean(report_py(valid, "-o", tmp_path / "report", env=svg_env(tmp_path)))
    labels = " ".join((tmp_path / "report" / "figures").glob("*-time.svg").__next__().read_text().split())
    # As text (svg.fonttype none) or as glyphs, which matplotlib precedes with the string drawn.
    assert f">{HOSTILE_NAME}</text>" in labels or f"<!-- {HOSTILE_NAME} -->" in labels


@pytest.mark.slow
def test_report_survives_mathtext_that_does_not_parse(tmp_path, hostile_runs):
    both, _ = hostile_runs
    assert names_in_report(both, tmp_path) == [HOSTILE_NAME, BROKEN_NAME]


@pytest.mark.slow
def test_dashboard_survives_mathtext_that_does_not_parse(tmp_path, hostile_runs):
    both, _ = hostile_runs
    assert names_in_dashboard(both.parent, tmp_path, "--no-reports") == [HOSTILE_NAME, BROKEN_NAME]


# ====================================================== the gate's blind spot
# Three rounds of ten samples at least: R, 3x behind in the new run, leaves the race after two, and its
# twenty samples still let the test reach its alpha when a busy moment overlaps a few of them.
GATED = config_yaml(benchmark("maxpool2d", ["spin_steady", "spin_planted"], **POINT), name="gated",
                    timing={"min_samples": 30, "max_samples": 60, "budget_s": 0.05, "warmup_s": 0,
                            "max_rounds": 3})


@pytest.mark.slow
@pytest.mark.quiet  # a 3x slowdown of R told by wall time from R's neighbours
def test_compare_relative_to_r_still_flags_a_slowdown_of_r_itself(tmp_path):
    """R (spin_planted) is 3x slower in the second run; everything else is
    normalised by R, so R can only be judged on its own time."""
    config = write(tmp_path / "gated.yaml", GATED)
    base, new = tmp_path / "base", tmp_path / "new"
    assert_clean(cli("run", config, "-o", base, "--no-progress", env=plugin_env("spin_plugin")))
    assert_clean(cli("run", config, "-o", new, "--no-progress",
                     env=plugin_env("spin_plugin", SCATTERBENCH_TEST_SLOWDOWN="3")))
    helpers.as_quiet(base), helpers.as_quiet(new)  # compare judges only runs the fitness rule admits
    result = cli("compare", base, new, "--relative-to", "spin_planted", "--format", "json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    verdicts = {case["strategy"]: case for case in json.loads(result.stdout)["cases"]}
    assert verdicts["spin_planted"]["verdict"] == "regressed", verdicts
    assert verdicts["spin_planted"]["ratio"] > 2.5
    assert verdicts["spin_steady"]["verdict"] != "regressed"
