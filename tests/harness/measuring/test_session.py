"""One run lifecycle (harness/measuring/session.py) for every run mode: the
sweep (``run``), the counting run (``run --instrument callgrind``) and
``bench()``, each stopped mid-run in a real process by SIGTERM and by a
full disk (a small tmpfs filled once cases are on it, as test_faults.py
does; root only). Whatever stopped it, every case finished before is on disk
and reads back, meta.json says ``interrupted`` and why, and the case in
flight is not left looking like a crash."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.harness.test_faults import (
    PYTHON,
    SLOW,
    SLOW_BENCHMARK,
    SLOW_CASES,
    SLOW_TIMING,
    TINY_TIMING,
    error_line,
    fill,
    finish,
    finished_rows,
    interrupted_line,
    meta_of,
    plugin_env,
    rows_of,
    small_fs,  # noqa: F401 - the fixture
    spawn,
    write,
)
from tests.helpers import ONE_THREAD, ROOT, benchmark, config_yaml, wait_for

from harness.measuring import callgrind  # noqa: E402
from harness.results.store import IN_FLIGHT, RESERVE  # noqa: E402

pytestmark = pytest.mark.slow  # real runs in subprocesses

# Counted under Callgrind, a case takes about 40 s on the 2-core VM: three are enough to stop mid-run.
COUNTING = config_yaml(benchmark("maxpool2d", ["numpy_sliding_window"], N=1, C=1, H=[4, 6, 8], W=4, k=2),
                       name="counting-stopped", timing=TINY_TIMING)
COUNTING_CASES = 3
# SLOW's cases (its benchmark and timing) through bench(): 2 ms calls for 0.3 s each.
BENCH = f"""
import sys

import scatterbench
from harness.base.errors import ResultError

try:
    scatterbench.bench({SLOW_BENCHMARK["op"]!r}, {SLOW_BENCHMARK["strategies"]!r}, **{SLOW_BENCHMARK["params"]!r},
                       timing={SLOW_TIMING!r}, threads={ONE_THREAD!r}, plot=False, out=sys.argv[1])
except ResultError as error:
    print(f"bench: error: {{error}}", file=sys.stderr)
    sys.exit(2)
"""
DISK_FULL_REASON = "no space left on the device"


def start(mode: str, tmp_path: Path, out: Path) -> tuple[subprocess.Popen, Path | None, int]:
    """The run in ``mode``, writing into ``out``: the process, its config
    file (None for bench()) and how many cases it has."""
    if mode == "sweep":
        config = write(tmp_path / "slow.yaml", SLOW)
        return spawn("run", config, "-o", out, "--no-progress", env=plugin_env("spin_plugin")), config, SLOW_CASES
    if mode == "counting":
        config = write(tmp_path / "counting.yaml", COUNTING)
        return spawn("run", config, "--instrument", "callgrind", "-o", out, "--no-progress"), config, COUNTING_CASES
    env = plugin_env("spin_plugin")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env["PYTHONPATH"]])
    process = subprocess.Popen([PYTHON, "-c", BENCH, str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, errors="replace", env=env)
    return process, None, SLOW_CASES


def stop_mid_run(mode: str, tmp_path: Path, out: Path, stop) -> tuple[subprocess.CompletedProcess, Path | None,
                                                                         set[str], int]:
    """Starts the run, waits for its first finished case (the sweeps: two),
    notes which are on disk, then ``stop()``s it. Returns how the process
    ended, the config, the cases finished before the stop, and how many
    cases the run has."""
    process, config, n_cases = start(mode, tmp_path, out)
    enough = 1 if mode == "counting" else 2
    wait_for(lambda: finished_rows(out) >= enough, f"{enough} finished cases", timeout=600, process=process)
    before = {row["case_id"] for row in rows_of(out)}
    stop(process)
    result = finish(process, timeout=600)
    # A progress note, not an error: another counting run (a parallel test's) held the working directory.
    result.stderr = "\n".join(line for line in result.stderr.splitlines()
                              if not line.startswith("counting: waiting for another counting run"))
    return result, config, before, n_cases


def assert_stopped_in_order(out: Path, before: set[str], n_cases: int, reason: str) -> None:
    """Nothing finished is lost, the run says it was interrupted and why, and
    it is stopped in an orderly way (no case in flight, no room left kept)."""
    meta, rows = meta_of(out), rows_of(out)
    ids = {row["case_id"] for row in rows}
    assert before <= ids, f"finished cases lost: {sorted(before - ids)}"
    assert len(ids) == len(rows) < n_cases  # each once, and the run did stop early
    assert {row["status"] for row in rows} == {"ok"} and {row["run_id"] for row in rows} == {meta["run_id"]}
    assert meta["status"] == "interrupted" and meta["interrupted_by"] == reason, meta
    assert "end_time" not in meta
    assert not (out / IN_FLIGHT).exists() and not (out / RESERVE).exists()
    # where the time went up to the stop (a GPU lease's limit cuts runs short: this is how to size the next)
    assert sum(meta["phase_s"].values()) > 0, meta.get("phase_s")


# As the counting tests skip (test_counting.py): where valgrind or a C compiler is missing, saying which.
needs_valgrind = pytest.mark.skipif(callgrind.unavailable() is not None,
                                    reason=f"no counts here: {callgrind.unavailable()}")
MODES = ["sweep", pytest.param("counting", marks=needs_valgrind), "bench"]


@pytest.mark.parametrize("mode", MODES)
def test_sigterm_mid_run_keeps_every_finished_case_and_says_so(tmp_path, mode):
    out = tmp_path / "out"
    result, config, before, n_cases = stop_mid_run(mode, tmp_path, out, lambda process: process.terminate())
    if config is not None:
        interrupted_line(result, out, config)
    else:  # bench(): SIGTERM sent again once the record was safe, to the script's default action
        assert result.returncode == -signal.SIGTERM, (result.returncode, result.stderr[-3000:])
    assert_stopped_in_order(out, before, n_cases, "SIGTERM")


@pytest.mark.parametrize("mode", MODES)
def test_a_full_disk_mid_run_keeps_every_finished_case_and_says_so(tmp_path, small_fs, mode):  # noqa: F811
    out = small_fs("small", "1m") / "out"
    result, config, before, n_cases = stop_mid_run(mode, tmp_path, out, lambda process: fill(out.parent))
    if config is not None:
        line = error_line(result, out, DISK_FULL_REASON, f"--resume {out}")
    else:
        line = error_line(result, out, DISK_FULL_REASON, prefix="bench: error: ")
    assert f"stopped with {finished_rows(out)} cases safely on disk" in line
    assert_stopped_in_order(out, before, n_cases, DISK_FULL_REASON)


def test_a_resumed_runs_seconds_per_phase_go_on_from_its_stop(tmp_path):
    """phase_s is written at a stop too, and the attempt that completes the
    run adds its seconds to the stopped one's: where a whole run's time went."""
    from harness.base.config import parse_config
    from harness.measuring.session import RunSession

    config = parse_config({"benchmarks": [{"op": "maxpool2d", "params": {"N": 1, "C": 1, "H": 4, "W": 4, "k": 2}}]})
    out = tmp_path / "run"
    with RunSession(out, "r") as session:
        session.open(config, None, [])
        session.clock.absorb({"check": 2.0})  # as if the check had run 2 s
        raise KeyboardInterrupt
    first = meta_of(out)
    assert first["status"] == "interrupted" and first["phase_s"]["check"] >= 2.0
    with RunSession(out, "r") as session:
        session.open(config, None, [], status="running")
        session.clock.absorb({"time": 1.0})
        session.complete()
    assert meta_of(out)["phase_s"]["check"] >= 2.0 and meta_of(out)["phase_s"]["time"] >= 1.0


def test_an_error_ends_the_run_as_failed_with_its_reason_never_running(tmp_path):
    """Issue 51: an error during a run (a plugin's generate raising at a config point) left
    meta.json at ``running`` with an in-flight.json, as if the process had crashed; it now says
    ``failed`` and why, the case in flight is not blamed, and what was written stays."""
    from harness.base.config import parse_config
    from harness.measuring.session import RunSession

    config = parse_config({"benchmarks": [{"op": "maxpool2d", "params": {"N": 1, "C": 1, "H": 4, "W": 4, "k": 2}}]})
    out = tmp_path / "run"
    with pytest.raises(ValueError, match="shape +mismatch"):
        with RunSession(out, "r") as session:
            session.open(config, None, [], status="running")
            session.writer.begin_case({"case_id": "maxpool2d|x"})
            raise ValueError("shape   mismatch\nat the gradient")
    meta = meta_of(out)
    assert meta["status"] == "failed" and meta["interrupted_by"] == "ValueError: shape mismatch at the gradient", meta
    assert not (out / IN_FLIGHT).exists() and "phase_s" in meta


def test_a_plugin_error_midway_through_run_is_one_line_and_a_failed_run(tmp_path):
    """Through the CLI: exit 2, one line, meta.json ``failed`` naming the error."""
    from tests.helpers import benchmark, config_yaml, plugin_env, scatterbench

    plugin = tmp_path / "raising_plugin.py"
    plugin.write_text(RAISING_PLUGIN)
    config = tmp_path / "raising.yaml"
    config.write_text(config_yaml(benchmark("rowmax_raising", R=[3, 7], L=5)))
    out = tmp_path / "out"
    result = scatterbench("run", config, "-o", out, "--no-progress",
                          env=plugin_env("quiet_machine_plugin", str(plugin)))
    assert result.returncode == 2, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("scatterbench: error:")]
    assert len(errors) == 1 and "R=7 is drawn wrong" in errors[0], result.stderr[-3000:]
    meta = meta_of(out)
    assert meta["status"] == "failed" and "R=7 is drawn wrong" in meta["interrupted_by"], meta
    assert not (out / IN_FLIGHT).exists()


RAISING_PLUGIN = '''
import numpy as np

from impls import common
from impls.registry import Operator, ParamSpec, register_operator, strategy


def generate(params, mode="random", seed=0):
    if params["R"] == 7:  # a generator wrong at one size only: the run meets it midway
        raise ValueError("R=7 is drawn wrong")
    return {"x": np.random.default_rng(seed).standard_normal((params["R"], params["L"]))}


register_operator(Operator(
    name="rowmax_raising", doc="rows' maxima", params=(ParamSpec("R"), ParamSpec("L")), generate=generate,
    oracle=lambda inputs, params: inputs["x"].max(axis=-1), bytes_moved=lambda params, itemsize, returns="output": 8,
    compare=lambda out, ref, inputs, dtype, strat, params=None: common.compare_bitwise("output", out, ref, dtype),
    validate=lambda params: None, check_cases=lambda: [dict(R=3, L=5)], reference="numpy_max",
    check_layouts=("contiguous",)))


@strategy("rowmax_raising", backend="numpy", baseline=True)
def numpy_max(inputs, params):
    x = inputs["x"]
    return lambda: x.max(axis=-1)
'''
