"""The CPU rehearsal of `make gpu`: gpu.yaml's plan at small sizes on the CPU
(its benchmarks, dtypes and modes; one eager torch strategy each, tiny
parameters), stopped midway and resumed, gives the same rows as one run that
was never stopped: by a budget (`run --budget`, then `--resume`), and by
SIGTERM in the middle of `make gpu`'s sweep, then `make gpu` again."""

import os
import re
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import yaml

from harness import cli
from harness.base import caches
from harness.base.config import expand, load_config, parse_config
from harness.measuring import gpu_steps
from harness.measuring import plan as window
from harness.results.store import lock_holder, read_meta, read_rows
from impls.registry import get_operator
from tests.helpers import ROOT, plugin_env

pytestmark = pytest.mark.slow  # whole sweeps, and `make gpu`'s steps in subprocesses

# gpu.yaml's sizes made small: every operator's parameters that size its arrays
SMALL = {"N": 1, "C": 2, "H": 8, "W": 8, "B": 1, "F": 2, "L": 40}


def rehearsal_config() -> dict:
    """gpu.yaml on the CPU: its benchmarks, dtypes and modes, each with its
    first eager torch strategy that runs on the CPU, at ``SMALL`` sizes, timed
    in a hundredth of a second."""
    gpu = yaml.safe_load((ROOT / "configs" / "gpu.yaml").read_text())
    benchmarks = []
    for bench in gpu["benchmarks"]:
        strategies = get_operator(bench["op"]).strategies
        first = next(name for name, strat in strategies.items() if name not in bench.get("exclude", [])
                     and strat.backend == "torch" and not strat.quick_check and "cpu" in strat.devices)
        benchmarks.append({"op": bench["op"], "strategies": [first],
                           "params": {key: SMALL.get(key, value) for key, value in bench["params"].items()},
                           "modes": bench.get("modes", ["forward"])})
    config = {"name": "rehearsal", "devices": ["cpu"], "dtypes": gpu["dtypes"],
              "timing": {"min_samples": 5, "budget_s": 0.01, "warmup_s": 0, "timeout_s": 60},
              "threads": 1, "benchmarks": benchmarks}
    parse_config(config, "<rehearsal>")
    return config


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The rehearsal config, and the rows of one run of it never stopped."""
    folder = tmp_path_factory.mktemp("rehearsal")
    config = folder / "rehearsal.yaml"
    config.write_text(yaml.safe_dump(rehearsal_config(), sort_keys=False))
    whole = folder / "whole"
    assert cli.main(["run", str(config), "-o", str(whole), "--no-progress"]) == 0
    return SimpleNamespace(config=config, rows=rows_of(whole))


def rows_of(directory) -> dict:
    """What must not depend on being stopped: each case's status and strategy (times do)."""
    rows = read_rows(directory)
    assert rows["case_id"].is_unique
    return {row["case_id"]: (row["status"], row["strategy"], row["mode"]) for _, row in rows.iterrows()}


def test_the_rehearsal_holds_gpu_yamls_shape(rehearsal):
    gpu = yaml.safe_load((ROOT / "configs" / "gpu.yaml").read_text())
    rows = read_rows(rehearsal.config.parent / "whole")
    assert set(rows["op"]) == {bench["op"] for bench in gpu["benchmarks"]}
    assert set(rows["dtype"]) == set(gpu["dtypes"]) and set(rows["mode"]) == {"forward", "backward", "forward+backward"}
    assert len(rows) == len(expand(load_config(rehearsal.config))) > 20
    assert set(rows["status"]) <= {"ok", "ok_approx", "skipped"}


def test_a_budget_stops_the_sweep_midway_in_the_plans_order_and_resume_completes_it(rehearsal, tmp_path,
                                                                                      monkeypatch, capsys):
    out = tmp_path / "stopped"
    # The budget's clock made of the cases written: each costs 1000 s of it, so a budget of 3500 s
    # holds exactly four cases, however fast this machine runs them (every estimate is far below 500 s).
    monkeypatch.setattr(window, "time", SimpleNamespace(monotonic=lambda: 1000.0 * (
        len(read_rows(out)) if (out / "rows.csv").exists() else 0)))
    status = cli.main(["run", str(rehearsal.config), "-o", str(out), "--no-progress", "--budget", "3500"])
    err = capsys.readouterr().err
    assert status == 130, err
    meta = read_meta(out)
    assert meta["status"] == "interrupted" and meta["interrupted_by"].startswith("budget of 3500 s: the next case needs")
    assert "interrupted (budget of 3500 s" in err and f"continue with: scatterbench run {rehearsal.config} --resume {out}" in err
    first = list(read_rows(out)["case_id"])
    planned = window.plan_config(str(rehearsal.config), "cpu", window.DEFAULT_ROOTS).order()
    assert first == [case.case_id for case in planned[:4]]  # the plan's order, not the config's
    assert first != [case_id for case_id in list(rehearsal.rows)[:4]]

    monkeypatch.undo()
    assert cli.main(["run", str(rehearsal.config), "--resume", str(out), "--no-progress"]) == 0
    assert rows_of(out) == rehearsal.rows
    assert read_meta(out)["status"] == "complete" and len(read_meta(out)["resumed"]) == 1


def make_gpu(results, config, *extra):
    """`make gpu`'s command line for the rehearsal: this interpreter, no venv to build, the CUDA tests
    of one file (skipped without a GPU)."""
    return ["make", "-s", "gpu", f"PY={sys.executable}", f"GPU_CONFIG={config}", f"GPU_RESULTS={results}",
            "GPU_TESTS=-m cuda tests/harness/measuring/test_timing_cuda.py", *extra]


def test_make_gpu_stopped_in_its_sweep_and_called_again_loses_nothing(rehearsal, tmp_path):
    results = tmp_path / "gpu"
    env = plugin_env()
    del env[caches.ENV]  # make gpu's own: the results directory's steps/cache
    first = subprocess.Popen(make_gpu(results, rehearsal.config), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.time() + 600
    while time.time() < deadline and first.poll() is None:
        if (results / "rows.csv").exists() and len(read_rows(results)) >= 3:
            break
        time.sleep(0.1)
    else:
        first.kill()
        pytest.fail(f"make gpu's sweep never got going: {first.communicate()[0][-2000:]}")
    os.killpg(first.pid, signal.SIGTERM)  # as a window's end: make, its shell and the sweep at once
    output = first.communicate(timeout=120)[0]
    assert first.returncode != 0
    # make and its shell end at once; the sweep first writes that it was interrupted, then lets go of the run
    waited = time.time() + 120
    while lock_holder(results) is not None and time.time() < waited:
        time.sleep(0.1)
    steps = results / "steps"
    assert sorted(gpu_steps.read_steps(results)) == ["check", "pytest"], output
    # the check step says what it cost, per operator, beside its record
    assert sorted(gpu_steps.read_counts(results)) == sorted(("maxpool2d", "maxunpool", "dispersion", "dispersion_pinv"))
    assert all(counts["calls"] > 0 for counts in gpu_steps.read_counts(results).values())
    assert read_meta(results)["status"] == "interrupted" and 3 <= len(read_rows(results)) < len(rehearsal.rows)
    assert not (steps / "sweep.json").exists()
    # the check kept its verdicts where the second call (on a bare machine: with the directory) finds them
    assert list((steps / "cache" / "verdicts").glob("*.json"))

    second = subprocess.run(make_gpu(results, rehearsal.config), cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=900)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    for step in ("check", "pytest"):
        assert f"make gpu: {step} finished before ({steps}/{step}.json)" in second.stdout
    assert "resuming" in (steps / "sweep.log").read_text()
    # the sweep's adversarial check was the check step's: every verdict from the cache
    assert re.search(r"adversarial check: (\d+) of \1 verdicts from the cache .*, 0 to check",
                     (steps / "sweep.log").read_text())
    assert rows_of(results) == rehearsal.rows
    assert (results / "report" / "report.md").exists()
    assert f"make gpu: every step finished: {results}" in second.stdout
    # a third call has nothing left to do
    third = subprocess.run(make_gpu(results, rehearsal.config), cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=300)
    assert third.returncode == 0 and third.stdout.count("finished before") == 4
