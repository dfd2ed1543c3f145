"""The CI gate (`scatterbench regress`): quiet on an unchanged checkout,
failing on a planted 3x slowdown, of an ordinary strategy and of the
reference strategy everything is normalised by."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.base.errors import ResultError
from harness.judging.wall_gate import (
    choose_baseline,
    measure_baseline_at,
    screening_factor,
)
from harness.measuring import facts
from harness.results import runmeta
from tests import helpers
from tests.helpers import BASELINE_TIMING, GATE_TIMING, ROOT, benchmark, config_yaml, plugin_env

GATE_BENCHMARK = benchmark("maxunpool", ["torch_scatter", "torch_max_unpool1d", "numpy_put_along_axis",
                                         "numpy_seed_flat_set"], form="1d", B=16, F=16, L=256, f=5)


def gate_config(timing: dict) -> str:
    return config_yaml(GATE_BENCHMARK, name="gate", timing=timing)


def scatterbench(*args, plant=""):
    return helpers.scatterbench(*args, env=plugin_env("plant_slowdown", SCATTERBENCH_PLANT=plant))


@pytest.mark.slow  # subprocesses and sweeps: `make test` runs it, `make test-fast` does not
@pytest.mark.quiet  # the gate times things
def test_gate_passes_unchanged_and_fails_on_planted_slowdowns(tmp_path, tiny_config):
    config = tiny_config(gate_config(GATE_TIMING), "gate.yaml")
    baseline_config = tiny_config(gate_config(BASELINE_TIMING), "baseline.yaml")
    baseline = tmp_path / "baseline"
    made = scatterbench("run", baseline_config, "-o", baseline, "--no-progress")
    assert made.returncode == 0, made.stderr
    same = scatterbench("regress", baseline, config, "-o", tmp_path / "same", "--no-progress")
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-2000:]
    assert "screened at 1.41" in same.stdout  # suspects are picked below the factor, re-measurement decides
    # 5x, not 3x: a strategy's speed at this size can differ 2x between processes, whatever the
    # prepares (torch_scatter: 165 us in one process, 320 us in the next, every round), and a
    # baseline that landed in the slow state saw a planted 3x re-measured at 1.67x and 1.83x,
    # under the 2.0 factor (docs/REGRESSION.md). 5x clears factor times that spread.
    for planted in ("maxunpool/numpy_put_along_axis:5", "maxunpool/torch_scatter:5"):
        slow = scatterbench("regress", baseline, config, "-o", tmp_path / planted.replace("/", "-"),
                            "--no-progress", plant=planted)
        assert slow.returncode == 1, planted + "\n" + slow.stdout[-3000:] + slow.stderr[-2000:]
        strategy = planted.split("/")[1].split(":")[0]
        assert f"FAIL maxunpool/{strategy}" in slow.stdout


@pytest.mark.parametrize("factor", [1.05, 1.1, 2.0, 10.0])
def test_screen_is_looser_than_the_gate_and_still_a_threshold(factor):
    assert 1 < screening_factor(factor) < factor


def _baseline(directory: Path, cpu_model: str, cpu_count: int, start_time: str, git_commit: str | None = None,
              hardware: dict | None = None) -> Path:
    directory.mkdir(parents=True)
    (directory / "meta.json").write_text(json.dumps({
        "schema_version": 2, "run_id": directory.name, "cpu_model": cpu_model, "cpu_count": cpu_count,
        "start_time": start_time, "git_commit": git_commit, "hardware": hardware or {}}))
    return directory


def _head() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("not a git checkout: the gate measures a missing baseline from a commit")
    return done.stdout.strip()


def test_gate_picks_the_baseline_measured_on_this_cpu(tmp_path):
    this = _baseline(tmp_path / "this", facts.cpu_model(), os.cpu_count(), "2026-01-01T00:00:00",
                     hardware=facts.hardware())
    _baseline(tmp_path / "newer-other", "Some Other CPU", os.cpu_count(), "2026-06-01T00:00:00")
    _baseline(tmp_path / "same-model-more-cores", facts.cpu_model(), os.cpu_count() + 2, "2026-06-02T00:00:00")
    choice = choose_baseline(tmp_path)
    assert choice.run == this and choice.commit is None
    assert "measured on this CPU" in choice.line


def test_same_model_name_is_not_the_same_cpu_when_the_microarchitecture_differs():
    # Both report "AMD EPYC": a Zen 3 and a Zen 4, told apart by family-model,
    # or, in runs recorded before family-model was, by their L2 size.
    zen3_old = {"cpu_model": "AMD EPYC", "cpu_count": 2, "caches": {"L2": "512K", "L3": "32768K"}}
    zen4 = {"cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_family_model": "25-17",
            "caches": {"L2": "1024K", "L3": "32768K"}}
    zen3 = {**zen3_old, "cpu_family_model": "25-1"}
    assert not runmeta.same_cpu(zen4, zen3_old)
    assert not runmeta.same_cpu(zen4, {**zen3, "caches": zen4["caches"]})
    assert runmeta.same_cpu(zen4, dict(zen4))
    assert runmeta.same_cpu(zen3, zen3_old)  # what both recorded agrees
    assert not runmeta.same_cpu(zen4, {**zen4, "cpu_count": 4})


def test_gate_without_a_baseline_from_this_cpu_measures_one_from_the_newest_baselines_commit(tmp_path):
    _baseline(tmp_path / "old", "CPU A", 2, "2026-01-01T00:00:00", git_commit="aaaa")
    newest = _baseline(tmp_path / "new", "CPU B", 2, "2026-06-01T00:00:00", git_commit="0123456789abcdef-dirty")
    choice = choose_baseline(tmp_path)
    assert choice.commit == "0123456789abcdef"
    assert choice.run == newest  # the fallback where that commit cannot be measured
    assert "measuring one here from commit 0123456789ab" in choice.line and "make baseline" in choice.line


def test_gate_refuses_a_foreign_baseline_without_a_commit_and_a_commit_it_does_not_have(tmp_path):
    _baseline(tmp_path / "stored" / "other", "CPU B", 2, "2026-06-01T00:00:00")
    with pytest.raises(ResultError, match="records no git commit"):
        choose_baseline(tmp_path / "stored")
    _head()
    with pytest.raises(ResultError, match="not in the git history"):
        measure_baseline_at("0" * 40, ROOT / "configs" / "quick.yaml", tmp_path / "baseline")


def test_gate_takes_one_result_directory_as_before_and_refuses_an_empty_one(tmp_path):
    single = _baseline(tmp_path / "one", "CPU A", 2, "2026-01-01T00:00:00")
    assert choose_baseline(single).run == single
    (tmp_path / "empty").mkdir()
    with pytest.raises(ResultError, match="no baseline result directory"):
        choose_baseline(tmp_path / "empty")


@pytest.mark.slow  # two sweeps in subprocesses
@pytest.mark.quiet  # the gate times things
def test_gate_on_a_cpu_without_a_stored_baseline_measures_one_from_that_commit_and_gates(tmp_path, tiny_config):
    """The CI gate on a CPU the stored baselines were not measured on: it
    measures the baseline from the commit's own code on this machine, then
    still catches a planted 3x slowdown."""
    _baseline(tmp_path / "stored" / "other-cpu", "Some Other CPU", 2, "2026-06-01T00:00:00", git_commit=_head())
    config = tiny_config(gate_config(BASELINE_TIMING), "gate.yaml")
    gated = scatterbench("regress", tmp_path / "stored", config, "-o", tmp_path / "out", "--no-progress",
                         plant="maxunpool/numpy_put_along_axis:3")
    assert "measuring one here from commit" in gated.stderr
    assert (tmp_path / "out" / "baseline" / "rows.csv").exists()
    assert not (tmp_path / "out" / "baseline-source").exists()  # the old code's copy is removed
    assert gated.returncode == 1, gated.stdout[-3000:] + gated.stderr[-2000:]
    assert "FAIL maxunpool/numpy_put_along_axis" in gated.stdout


@pytest.mark.parametrize("baseline", sorted(path.name for path in (ROOT / "results" / "baseline-quick").iterdir()))
def test_each_committed_baseline_holds_every_case_of_the_quick_config_correct(baseline):
    """A baseline that misses a case of configs/quick.yaml leaves that case
    ungated (compare has nothing to hold it to): after changing the config,
    `make baseline` on each CPU."""
    from harness.base.config import expand, load_config
    from harness.results import store

    wanted = {case.case_id for case in expand(load_config(ROOT / "configs" / "quick.yaml"))}
    rows = store.read_rows(ROOT / "results" / "baseline-quick" / baseline)
    correct = set(rows.loc[rows["status"] == "ok", "case_id"])
    assert wanted - correct == set()


@pytest.mark.slow  # a sweep
@pytest.mark.quiet  # the gate times things
def test_gate_falls_back_to_the_stored_baseline_when_its_commit_cannot_be_measured(tmp_path, tiny_config):
    import shutil

    from harness.judging import regression
    from harness.judging.wall_gate import run_gate

    stored = tmp_path / "stored" / "other-cpu"
    shutil.copytree(ROOT / "results" / "baseline-quick" / "amd-epyc-25-17-x2", stored)
    meta = json.loads((stored / "meta.json").read_text())
    meta.update(cpu_model="Some Other CPU", hardware={}, git_commit="0" * 40)
    (stored / "meta.json").write_text(json.dumps(meta))
    config = tiny_config(gate_config(GATE_TIMING), "gate.yaml")
    lines = []
    result = run_gate(tmp_path / "stored", config, regression.Rule(2.0, 0.002, "p10"), output=tmp_path / "out",
                      log=lines.append)
    assert any("not in the git history" in line and f"gating against {stored} instead" in line for line in lines)
    assert result.table["base_s"].notna().sum() == 4  # the four strategies compared with the stored run


def test_one_partner_that_got_faster_cannot_fail_the_suspect_and_a_real_slowdown_still_does():
    """The confirmation's statistic is the lower median over partners: with two, the plain median is
    their mean, and on CI a partner 4x faster (numba's max-pool backward) failed an unchanged torch
    strategy at 14.4x. A slowdown of the suspect shows against every partner, so it still fails."""
    from harness.judging.wall_gate import partner_change

    names = ["suspect", "got_faster", "unchanged"]
    base = {"suspect": 1.0, "got_faster": 1.0, "unchanged": 1.0}
    assert partner_change(base, [[1.0, 0.04, 1.1]], names) == pytest.approx(1 / 1.1)  # the mean: 12.95
    assert partner_change(base, [[3.0, 1.0, 1.0], [3.2, 1.0, 1.0]], names) == pytest.approx(3.1)
    assert partner_change(base, [[3.0, 0.25, 1.0]], names) == pytest.approx(3.0)  # still past 2.0
    three = ["suspect", "a", "b", "c"]
    assert partner_change({name: 1.0 for name in three}, [[2.5, 1.0, 0.1, 1.0]], three) == pytest.approx(2.5)
    assert partner_change({"suspect": 1.0}, [[2.0], [4.0]], ["suspect"]) == pytest.approx(3.0)
