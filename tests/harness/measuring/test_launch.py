"""`scatterbench launch`: the command line refused before anything is
submitted; a local launch of six groups of cases interrupted, one shard killed,
followed again and merged into what one process measures; and, where the
machine can start one, the same through a one-node Slurm cluster."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest
import torch

from harness.base.errors import ResultWarning
from harness.cli import main
from harness.measuring import launch
from harness.results import store
from tests.harness import slurm_cluster
from tests.harness.terminal import sigint_as_at_a_terminal
from tests.helpers import ROOT, benchmark, config_yaml, plugin_env, wait_for

# Imported now, while pytest's session-wide capture is sys.stderr: submitit's
# log handlers keep the stream they find at import, and one test's capsys
# stream is closed by the next.
try:
    import submitit
except ImportError:  # the launch extra is missing: launch's own test says so
    submitit = None
needs_submitit = pytest.mark.skipif(submitit is None, reason="submitit not installed (pip install -e '.[launch]')")

QUICK = ROOT / "configs" / "quick.yaml"
SAME_CASE = ["case_id", "op", "strategy", "device", "dtype", "params", "status"]


def tiny(device: str = "cpu") -> str:
    """Two groups of cases sharing inputs (two sizes), so two shards; small
    enough that a shard is its start-up and its machine ceilings."""
    return config_yaml(benchmark("maxunpool", ["torch_scatter", "numpy_put_along_axis"], form="1d", B=2, F=4,
                                 L=[32, 64], f=5),
                       name="tiny-launch", devices=[device], dtypes=["float32"],
                       timing={"min_samples": 5, "max_samples": 20, "budget_s": 0.02, "warmup_s": 0.0,
                               "timeout_s": 60})


def launch_argv(config, out, *extra, executor="local", shards=3):
    return [sys.executable, "-m", "harness", "launch", str(config), "--executor", executor, "--shards", str(shards),
            "-o", str(out), "--no-progress", *extra]


def launched() -> str:
    """Six groups of cases sharing inputs (six sizes), two per shard of three,
    of two strategies that need no compiling: each case takes its 0.5 s
    budget, so a shard is still measuring when its first case is written.
    (configs/quick.yaml made this fixture cost 2.5 min: four of its sweeps
    and a resumed one, each checking 28 cases and measuring the machine.)"""
    return config_yaml(benchmark("maxpool2d", ["torch_max_pool2d_indices", "numpy_sliding_window"], N=2, C=4,
                                 H=[8, 12, 16, 20, 24, 28], W=16, k=2),
                       name="launched", devices=["cpu"], dtypes=["float32"],
                       timing={"min_samples": 5, "max_samples": 200, "budget_s": 0.5, "warmup_s": 0.02,
                               "timeout_s": 60})


def cases_in(config: Path) -> int:
    from harness.base.config import expand, load_config

    return len(expand(load_config(config)))


def cases_of(directory) -> list[dict]:
    rows = store.read_rows(Path(directory))
    return rows[SAME_CASE].sort_values("case_id").to_dict("records")


# ------------------------------------------------------------ usage errors
def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_without_submitit_launch_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "submitit", None)  # import submitit now raises ImportError
    assert main(["launch", str(QUICK), "--executor", "local", "--shards", "2", "-o", str(tmp_path / "l")]) == 2
    assert "scatterbench[launch]" in one_error_line(capsys)
    assert not (tmp_path / "l").exists()


def test_slurm_without_sbatch_on_path_says_so_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no sbatch
    assert main(["launch", str(QUICK), "--executor", "slurm", "--shards", "2", "-o", str(tmp_path / "l")]) == 2
    assert "no sbatch on PATH" in one_error_line(capsys)


@pytest.mark.parametrize("extra, named", [
    (["--slurm-arg", "qos"], "--slurm-arg 'qos'"),
    (["--partition", "gpu"], "--executor slurm only"),
    (["--time-min", "0"], "--time-min 0"),
])
def test_bad_options_are_one_line(extra, named, capsys, tmp_path):
    assert main(["launch", str(QUICK), "--executor", "local", "--shards", "2", "-o", str(tmp_path / "l"),
                 *extra]) == 2
    assert named in one_error_line(capsys)


def test_more_shards_than_groups_of_cases_is_refused(capsys, tiny_config, tmp_path):
    config = tiny_config(tiny())
    assert main(["launch", str(config), "--executor", "local", "--shards", "3", "-o", str(tmp_path / "l")]) == 2
    assert "has 2 groups of cases sharing inputs, so at most 2 shards" in one_error_line(capsys)


def test_a_directory_holding_something_else_is_refused(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    assert main(["launch", str(QUICK), "--executor", "local", "--shards", "2", "-o", str(tmp_path)]) == 2
    assert "not empty and holds no launch" in one_error_line(capsys)


def fake_sbatch(tmp_path, monkeypatch, script: str) -> None:
    """An ``sbatch`` that runs ``script`` (shell) and an ``srun`` that fails,
    first on PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\n{script}")
    (bin_dir / "srun").write_text("#!/bin/sh\nexit 1\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


@needs_submitit
def test_slurm_args_reach_sbatch_unchanged(tmp_path, monkeypatch):
    """A fake sbatch keeps the script it is given: every --slurm-arg is a line
    of it as written, beside the options launch sets itself."""
    kept = tmp_path / "script.sh"
    fake_sbatch(tmp_path, monkeypatch, f"cp \"$1\" {kept}\necho 'Submitted batch job 4242'\n")
    options = launch.parse_options(str(QUICK), "slurm", 2, partition="h100", gpus_per_task=1, time_min=30,
                                   slurm_args=["qos=high", "mail-type=END,FAIL", "constraint=h100|h200"])
    executor = launch.make_executor(options, tmp_path / "submitit")
    tasks = [launch.ShardJob(options.config, i, 2, str(tmp_path / f"s{i}")) for i in range(2)]
    jobs = launch._submit(executor, tasks)
    assert [job.job_id for job in jobs] == ["4242_0", "4242_1"]
    script = kept.read_text().splitlines()
    for line in ("#SBATCH --qos=high", "#SBATCH --mail-type=END,FAIL", "#SBATCH --constraint='h100|h200'",
                 "#SBATCH --partition=h100", "#SBATCH --gpus-per-task=1", "#SBATCH --time=30",
                 "#SBATCH --array=0-1%2",
                 # quick.yaml times with one thread per library: one CPU per shard
                 "#SBATCH --cpus-per-task=1"):
        assert line in script, (line, script)


@needs_submitit
@pytest.mark.parametrize("visible", [None, "1,3"])
def test_local_shards_see_the_gpus_the_launcher_sees(visible, tmp_path, monkeypatch):
    """submitit's LocalExecutor sets CUDA_VISIBLE_DEVICES="" for a job that
    asks for no GPU: a local launch of a CUDA config would find none."""
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    options = launch.parse_options(str(QUICK), "local", 2)
    job = launch.make_executor(options, tmp_path / "submitit").submit(os.environ.get, "CUDA_VISIBLE_DEVICES")
    assert job.result() == visible


@needs_submitit
def test_a_refused_submission_is_one_line(tmp_path, monkeypatch, capsys):
    fake_sbatch(tmp_path, monkeypatch, "echo 'sbatch: error: invalid partition specified: nope' >&2\nexit 1\n")
    assert main(["launch", str(QUICK), "--executor", "slurm", "--shards", "2", "--partition", "nope",
                 "-o", str(tmp_path / "l")]) == 2
    assert "invalid partition specified: nope" in one_error_line(capsys)


def test_failure_line_is_the_jobs_own_last_line():
    text = ("Job (task=0) failed during processing with trace:\n----------------------\nTraceback (most recent "
            "call last):\n  File \"x.py\", line 1\nharness.launch.ShardFailed: the sweep was killed by SIGKILL: "
            "scatterbench run q.yaml\n\n----------------------\nYou can check full logs with 'job.stderr(0)'")
    assert launch._failure_line(text) == "the sweep was killed by SIGKILL: scatterbench run q.yaml"


# ------------------------------------------------- local: the whole story
def rows_after_a_kill(directory: Path):
    """What a killed sweep left: a line it was writing when killed is dropped
    (and redone by --resume), whether or not the kill landed mid-write."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultWarning)
        return store.read_rows(directory)


def _sweep_process(shard_directory: Path) -> psutil.Process:
    """The `harness run` process writing this shard (matched by its own directory)."""
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "run" in cmdline and str(shard_directory) in cmdline:
            return process
    raise AssertionError(f"no sweep process writes {shard_directory}")


@pytest.fixture(scope="module")
def interrupted_launch(tmp_path_factory):
    """``launched()`` in 3 local shards: the launcher is interrupted once
    the shards run; shard 0's sweep is then killed (SIGKILL) after its first
    finished cases; the same command again follows the recorded jobs,
    resubmits shard 0 with --resume and merges. A one-process run of the same
    config runs alongside, for comparison."""
    if submitit is None:
        pytest.skip("submitit not installed (pip install -e '.[launch]')")
    base = tmp_path_factory.mktemp("launch")
    out, single, config = base / "launch", base / "single" / "run", base / "launched.yaml"
    config.write_text(launched())
    # Its shards' jobs inherit the launcher's environment: quick ceilings, as every test sweep.
    env = plugin_env()
    one_process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(config), "-o", str(single),
                                    "--no-progress"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env=env)
    # Files, not pipes: the local jobs inherit the launcher's streams and keep a pipe open after it exits.
    first_log = base / "first-launcher.err"
    with open(first_log, "w") as stream:
        first = subprocess.Popen(launch_argv(config, out), stdout=subprocess.DEVNULL, stderr=stream,
                                 preexec_fn=sigint_as_at_a_terminal, env=env)
    shard0 = launch.shard_dir(out, 0, 3)
    try:
        wait_for(lambda: (out / launch.LAUNCH_FILE).exists(), "the submission", timeout=180, process=first)
        # The launch file is written before the first poll prints the shards' states: interrupting
        # right after it raced that poll (a CI run saw no shard line at all).
        wait_for(lambda: {m for m in re.findall(r"^shard (\d)/3 ", first_log.read_text(), re.M)} == {"0", "1", "2"},
                 "the launcher's first line for each shard", timeout=180, process=first)
        recorded = launch.read_launch(out)
        first.send_signal(signal.SIGINT)  # the launcher only: its jobs go on, as Slurm's would
        first.wait(timeout=60)
        wait_for(lambda: launch._rows_on_disk(shard0, 0) >= 1, "shard 0's first finished case", timeout=180)
        _sweep_process(shard0).kill()
        before_kill = rows_after_a_kill(shard0)
        second = subprocess.run(launch_argv(config, out), capture_output=True, text=True, timeout=600, env=env)
        single_err = one_process.communicate(timeout=600)[1]
    finally:
        for process in (first, one_process):
            if process.poll() is None:
                process.kill()
    assert one_process.returncode == 0, single_err
    return dict(out=out, single=single, config=config, recorded=recorded, first=(first.returncode, first_log.read_text()),
                second=second, before_kill=before_kill)


@pytest.mark.slow
def test_an_interrupted_launcher_leaves_its_jobs_and_says_how_to_follow_them(interrupted_launch):
    code, err = interrupted_launch["first"]
    assert code == 130, err
    assert "the same command again follows the running jobs" in err
    assert [s["submissions"] for s in interrupted_launch["recorded"]["shards"]] == [1, 1, 1]


@pytest.mark.slow
def test_the_launcher_says_each_shards_state_and_finished_cases(interrupted_launch):
    """The progress a launch shows: without a bar (--no-progress, as in CI
    logs) a line per shard per change of state, naming its job and its
    finished cases, read from the shard's rows."""
    pattern = r"^shard (\d)/3 (queued|running|done|failed) \(job (\S+), (\d+)/(\d+) cases\)$"
    first = re.findall(pattern, interrupted_launch["first"][1], re.M)
    assert {index for index, *_ in first} == {"0", "1", "2"}  # each shard said, once submitted
    second = re.findall(pattern, interrupted_launch["second"].stderr, re.M)
    last = {index: (state, int(finished), int(cases)) for index, state, _, finished, cases in second}
    assert sorted(last) == ["0", "1", "2"] and all(state == "done" for state, _, _ in last.values())
    assert all(finished == cases for _, finished, cases in last.values())
    assert sum(cases for _, _, cases in last.values()) == cases_in(interrupted_launch["config"])  # split in three
    # shard 0 was killed and resubmitted: the launcher said so as it ran again, under a new job
    jobs = {job for index, state, job, *_ in second + first if index == "0"}
    assert len(jobs) >= 2, jobs


@pytest.mark.slow
def test_the_same_command_follows_the_recorded_jobs_and_resubmits_the_killed_shard(interrupted_launch):
    second, out, config = interrupted_launch["second"], interrupted_launch["out"], interrupted_launch["config"]
    assert second.returncode == 0, second.stderr
    assert "following job" in second.stderr
    shard0 = launch.shard_dir(out, 0, 3)
    assert (f"shard 0/3: the sweep was killed by SIGKILL: scatterbench run {config} --shard 0/3 -o {shard0} "
            f"--no-progress; resubmitted with --resume {shard0} as job ") in second.stderr
    before = {s["index"]: s["job_id"] for s in interrupted_launch["recorded"]["shards"]}
    after = launch.read_launch(out)
    # shards 1 and 2 were followed, not submitted again; shard 0 was, once
    assert [s["submissions"] for s in after["shards"]] == [2, 1, 1]
    assert [after["shards"][i]["job_id"] == before[i] for i in range(3)] == [False, True, True]
    assert after["merged"] and all(s["state"] == "done" for s in after["shards"])
    # the resubmitted job ran the sweep with --resume on the shard's own directory
    resubmitted = out / launch.SUBMITIT_DIR / f"{after['shards'][0]['job_id']}_0_log.out"
    assert f"--shard 0/3 --resume {shard0}" in resubmitted.read_text()
    assert store.read_meta(shard0).get("resumed")


@pytest.mark.slow
def test_nothing_the_killed_shard_finished_is_lost_or_redone(interrupted_launch):
    shard0 = launch.shard_dir(interrupted_launch["out"], 0, 3)
    before = interrupted_launch["before_kill"].set_index("case_id")
    after = store.read_rows(shard0).set_index("case_id")
    assert set(before.index) <= set(after.index)
    # the same measurements, not re-measured ones
    assert after.loc[before.index, "median_s"].tolist() == before["median_s"].tolist()
    assert after.index.is_unique


@pytest.mark.slow
def test_the_merge_equals_a_one_process_run_case_for_case(interrupted_launch):
    merged, single = cases_of(interrupted_launch["out"]), cases_of(interrupted_launch["single"])
    assert len(single) == cases_in(interrupted_launch["config"]) == 12
    assert merged == single
    meta = store.read_meta(interrupted_launch["out"])
    assert sorted(source["shard"] for source in meta["merged_from"]) == [[0, 3], [1, 3], [2, 3]]


@pytest.mark.slow
def test_a_finished_launch_is_not_run_again_and_another_command_is_refused(interrupted_launch, capsys):
    out, config = interrupted_launch["out"], interrupted_launch["config"]
    rows_before = (out / store.ROWS).read_text()
    assert main(["launch", str(config), "--executor", "local", "--shards", "3", "-o", str(out), "--no-progress"]) == 0
    assert "merged already" in capsys.readouterr().err
    assert (out / store.ROWS).read_text() == rows_before
    assert main(["launch", str(config), "--executor", "local", "--shards", "2", "-o", str(out)]) == 2
    assert "holds another launch (shards 3 then, 2 now)" in one_error_line(capsys)


@pytest.mark.slow
def test_the_shards_inside_a_launch_are_not_runs_of_their_own(interrupted_launch):
    """The dashboard lists runs with find_runs: the merged launch once, not
    its shards beside it."""
    out, single = interrupted_launch["out"], interrupted_launch["single"]
    assert len(list(out.rglob(store.META))) == 4  # the merge and its three shards
    assert store.find_runs(out) == [out]
    assert sorted(store.find_runs(out.parent)) == sorted([out, single])


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA, where a CUDA sweep cannot start")
@needs_submitit
def test_a_shard_that_fails_again_is_named_and_nothing_is_merged(tmp_path):
    """A CUDA config launched from a machine without a GPU (as from a login
    node) passes the launcher's checks, and each shard's sweep then refuses
    to start: resubmitted once, then named with why and where."""
    config = tmp_path / "cuda.yaml"
    config.write_text(tiny("cuda"))
    out = tmp_path / "launch"
    done = subprocess.run(launch_argv(config, out, shards=1), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("resubmitted from the start (it had written no run) as job") == 1
    shard = launch.shard_dir(out, 0, 1)
    assert done.stderr.strip().splitlines()[-1] == (
        f"scatterbench: error: shard 0/1 failed 2 times (the sweep exited with status 2: scatterbench run {config} "
        f"--shard 0/1 -o {shard} --no-progress); its finished cases are in {shard}; run the same command again to "
        f"resubmit it")
    assert not (out / store.META).exists()
    assert [s["state"] for s in launch.read_launch(out)["shards"]] == ["failed"]
    # each job's log holds the sweep's own one line
    logs = sorted((out / launch.SUBMITIT_DIR).glob("*_0_log.err"))
    assert len(logs) == 2 and all("devices: cuda requested but no cuda device is available here" in log.read_text()
                                  for log in logs)


# ------------------------------------------------------ Slurm end to end
@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """A one-node Slurm cluster on localhost for the session, or a skip
    saying why this machine cannot start one."""
    reason = slurm_cluster.why_not_here() or (submitit is None and "submitit not installed")
    if reason:
        pytest.skip(f"no local Slurm cluster: {reason}")
    started = time.monotonic()
    with slurm_cluster.local_cluster(tmp_path_factory.mktemp("slurm")) as env:
        env["SCATTERBENCH_CLUSTER_START_S"] = f"{time.monotonic() - started:.1f}"
        yield env


@pytest.mark.slow
def test_launch_through_slurm_end_to_end(slurm, tmp_path, tiny_config, monkeypatch, caplog, capsys):
    """sbatch, squeue and srun of a real slurmctld and slurmd: one job array of
    two shards; shard 1's job is killed (SIGKILL) while it measures, leaves
    the queue without a result, is resubmitted with --resume, and both are
    merged. The cluster has no accounting: sacct fails here, and submitit's
    own status calls warn that the status "may be inaccurate"; launch asks
    squeue and the result files instead, and no such warning comes."""
    sacct = subprocess.run(["sacct", "--noheader"], env=slurm, capture_output=True, text=True)
    assert sacct.returncode != 0 and "accounting storage is disabled" in sacct.stderr
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    monkeypatch.setattr(launch, "RESULT_GRACE_S", 2.0)  # this cluster's files are local: no need to wait 15 s
    config, out = tiny_config(tiny()), tmp_path / "launch"
    shard1 = launch.shard_dir(out, 1, 2)
    killed = {}

    def kill_shard_1_once_it_measures():
        # as the kernel's OOM killer would: the job's own process first, so no result file is written
        wait_for(lambda: (shard1 / store.META).exists(), "shard 1's sweep to start", timeout=180)
        killed["job"] = launch.read_launch(out)["shards"][1]["job_id"]
        sweep = _sweep_process(shard1)
        job_process = sweep.parent()
        assert "submitit.core._submit" in job_process.cmdline()
        for process in (job_process, sweep):
            process.kill()

    killer = threading.Thread(target=kill_shard_1_once_it_measures, daemon=True)
    killer.start()
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="submitit"):
        code = main(["launch", str(config), "--executor", "slurm", "--shards", "2", "-o", str(out),
                     "--slurm-arg", "comment=scatterbench-e2e", "--no-progress"])
    seconds = time.monotonic() - started
    killer.join(timeout=10)
    err = capsys.readouterr().err
    assert code == 0, err
    assert not [r for r in caplog.records if "may be inaccurate" in r.getMessage()]
    assert "shard 1/2: ended without a result (cancelled, pre-empted, out of memory or killed; log: " in err
    assert f"; resubmitted with --resume {shard1} as job " in err

    recorded = launch.read_launch(out)
    array = recorded["shards"][0]["job_id"].split("_")[0]
    assert killed["job"] == f"{array}_1"
    assert [s["submissions"] for s in recorded["shards"]] == [1, 2]
    assert recorded["shards"][1]["job_id"] not in (f"{array}_0", f"{array}_1")
    script = (out / launch.SUBMITIT_DIR / f"{array}_submission.sh").read_text()
    assert "#SBATCH --comment=scatterbench-e2e" in script and "#SBATCH --array=0-1%2" in script
    assert store.read_meta(shard1).get("resumed")
    rows = store.read_rows(out)
    assert len(rows) == 4 and set(rows["status"]) == {"ok"}

    # What launch does not do: submitit's own status call asks sacct, and on this cluster only warns.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="submitit"):
        state = submitit.SlurmJob(out / launch.SUBMITIT_DIR, recorded["shards"][0]["job_id"]).state
    assert state == "UNKNOWN"
    assert any("status may be inaccurate" in r.getMessage() for r in caplog.records)
    print(f"\nSlurm end to end: cluster up in {slurm['SCATTERBENCH_CLUSTER_START_S']} s, launch {seconds:.1f} s")
