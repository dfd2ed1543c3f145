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
