"""What the dashboard calls red: the CI gate's verdict between runs fit to
judge (harness/judging/history.py, analysis.unfit_reasons), screened from the
runs' summaries without ever missing a change the gate fails."""

import html
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.judging import analysis, history, regression
from harness.presenting import dashboard
from harness.results import runmeta, stats, store
from tests.harness.presenting.test_report import fixture_run
from tests.helpers import ROOT

QUIET = {"load_avg_start": [0.5, 0.5, 0.5], "load_avg_end": [0.7, 0.6, 0.5], "cpu_count": 2,
         "hardware": {"cpu_model": "Fixture CPU", "cpu_count": 2, "cpu_family_model": "25-1",
                      "caches": {"L2": "512K", "L3": "32768K"}}, "count_versions": {"torch": "2.13.0"}}


def _rows(medians: dict, iqr_share: float = 0.01, load=None) -> pd.DataFrame:
    return pd.DataFrame([{"case_id": name, "strategy": name, "status": "ok", "median_s": median,
                          "iqr_s": iqr_share * median, "load_avg": load} for name, median in medians.items()])


def test_unfit_reasons_name_load_busy_ceilings_and_cpu():
    rows = _rows({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0})
    assert analysis.unfit_reasons(QUIET, rows, QUIET, rows) == []
    busy = dict(QUIET, load_avg_end=[3.1, 2.0, 1.0])
    assert analysis.unfit_reasons(QUIET, rows, busy, rows) == ["load 3.1 on 2 cores"]
    assert analysis.unfit_reasons(busy, rows, QUIET, rows) == ["load 3.1 on 2 cores (base)"]
    # a case that finished under load counts as much as the run's start and end
    assert analysis.unfit_reasons(QUIET, rows, QUIET, _rows({"a": 1.0}, load=2.0)) == ["load 2 on 2 cores"]
    # Fitness judges the machine, the race judges the point: noisy cases on a quiet machine are fit.
    unsteady = rows.assign(iqr_s=[0.5, 1.0, 0.03, 0.04])
    assert analysis.unfit_reasons(QUIET, rows, QUIET, unsteady) == []
    busy_ceiling = dict(QUIET, ceiling_busy={"cpu": "load 3.4 on 2 cores"})
    assert analysis.unfit_reasons(QUIET, rows, busy_ceiling, rows) == ["cpu ceiling measured busy (load 3.4 on 2 cores)"]
    busy_curves = dict(QUIET, bandwidth_curves={"cpu": {"busy": "load 3 on 2 cores"}})
    assert analysis.unfit_reasons(QUIET, rows, busy_curves, rows) == ["cpu curves measured busy (load 3 on 2 cores)"]
    zen4 = dict(QUIET, hardware=dict(QUIET["hardware"], cpu_family_model="25-17"))
    assert analysis.unfit_reasons(QUIET, rows, zen4, rows) == ["different CPU (? [25-1] → ? [25-17])"]
    unknown = {key: value for key, value in QUIET.items() if not key.startswith("load")}
    assert analysis.unfit_reasons(unknown, rows, QUIET, rows) == ["load not recorded (base)"]


def test_a_quiet_run_whose_small_cases_are_noisy_is_fit_and_a_run_at_load_8_is_not():
    """docs/GUARANTEES.md: a quiet run's noisy sub-millisecond cases (within-round
    IQRs of 25-36 % of the median, as the second make bench saw) leave it fit."""
    rows = _rows({f"small{index}": 1e-4 for index in range(30)}, iqr_share=0.3, load=0.1)
    assert analysis.run_unfit_reasons(QUIET, rows) == []
    loaded = dict(QUIET, load_avg_start=[8.0, 8.0, 8.0])
    assert analysis.run_unfit_reasons(loaded, rows) == ["load 8 on 2 cores"]


def test_counts_are_judged_whatever_the_load_but_not_across_library_versions():
    rows = _rows({"a": 1.0})
    busy = dict(QUIET, load_avg_end=[3.1, 2.0, 1.0])
    assert analysis.unfit_reasons(QUIET, rows, busy, rows, "instructions") == []
    newer = dict(QUIET, count_versions={"torch": "2.14.0"})
    assert analysis.unfit_reasons(QUIET, rows, newer, rows, "instructions") == [
        "different library versions (torch 2.13.0 → 2.14.0)"]


def _random_pair(rng, strategies: int):
    """Two runs of one case of ``strategies`` strategies, each strategy's
    samples scaled between the runs by a random factor (0.3-4x)."""
    names = [f"s{index}" for index in range(strategies)]
    params = '{"C": 1, "H": 4, "N": 1, "W": 4, "k": 2}'
    runs = []
    for scale in (np.ones(strategies), np.exp(rng.uniform(np.log(0.3), np.log(4.0), strategies))):
        rows, samples = [], {}
        for name, factor in zip(names, scale):
            values = (1e-3 * (1 + names.index(name)) * factor * rng.uniform(0.95, 1.05, 12)).tolist()
            case_id = f"maxpool2d|{name}|cpu|float32|{params}"
            samples[case_id] = values
            rows.append({"case_id": case_id, "op": "maxpool2d", "strategy": name, "device": "cpu",
                         "dtype": "float32", "params": params, "status": "ok", "median_s": float(np.median(values)),
                         "p10_s": stats.typical_s(values, "p10"), "source": "", "machine": "m"})
        runs.append((pd.DataFrame(rows), samples))
    return runs


def test_the_screen_never_clears_a_change_the_gate_fails():
    rng = np.random.default_rng(7)
    rule, failed = history.gate_rule(), 0
    for trial in range(60):
        (base_rows, base_samples), (new_rows, new_samples) = _random_pair(rng, int(rng.integers(1, 7)))
        table = history.gate_table(base_rows, base_samples, new_rows, new_samples, rule)
        failing = set(table.loc[table["verdict"].isin(regression.FAILING), "case_id"])
        cases = pd.concat([base_rows.assign(run=0), new_rows.assign(run=1)], ignore_index=True)
        suspects = history.screen(cases, history.consecutive(cases), rule.factor)
        screened = set(cases[cases["params"].isin(suspects["params"]) & (cases["run"] == 1)]["case_id"])
        assert failing <= screened, (trial, failing - screened)
        failed += len(failing)
    assert failed >= 10  # the trials did make the gate fail cases


def test_a_reference_that_got_faster_fails_nobody_else():
    """Normalised to a reference that got 3x faster, every other strategy
    reads 3x slower; the gate's confirmation against all the others clears
    them (it fails the reference only when it gets slower)."""
    rng = np.random.default_rng(1)
    (base_rows, base_samples), _ = _random_pair(rng, 4)
    new_samples = {case: list(values) for case, values in base_samples.items()}
    reference = "maxpool2d|torch_max_pool2d_indices|cpu|float32|" + base_rows["params"][0]
    rows = base_rows.copy()
    rows.loc[0, ["case_id", "strategy"]] = [reference, "torch_max_pool2d_indices"]
    base_samples[reference] = [3 * value for value in base_samples.pop(base_rows["case_id"][0])]
    new_samples[reference] = new_samples.pop(base_rows["case_id"][0])
    table = history.gate_table(rows, base_samples, rows, new_samples, history.gate_rule())
    assert not table["verdict"].isin(regression.FAILING).any(), table[["strategy", "verdict", "confirmed_ratio"]]
    slower = history.gate_table(rows, new_samples, rows, base_samples, history.gate_rule())
    assert list(slower.loc[slower["verdict"] == regression.REGRESSED, "strategy"]) == ["torch_max_pool2d_indices"]


def test_a_case_is_judged_against_the_latest_run_that_measured_it(tmp_path):
    """Interleaved configs: the default run's case is judged against the
    previous default run, not against the seeds run in between."""
    root = tmp_path / "results"
    fixture_run(root / "a", meta=QUIET, start_time="2026-11-22T00:00:00+00:00")
    fixture_run(root / "b", meta=QUIET, start_time="2026-11-23T00:00:00+00:00",
                entries=[("numpy_sliding_window", "numpy", "ok", 1e-3)])
    fixture_run(root / "c", meta=QUIET, start_time="2026-11-24T00:00:00+00:00")
    cases, runs = history.load_history(root)
    changes = history.consecutive(cases)
    bases = {(run, strategy): base for run, strategy, base in zip(changes["run"], changes["strategy"],
                                                                   changes["base_run"])}
    assert bases[(2, "seed_loops")] == 0 and bases[(2, "numpy_sliding_window")] == 1


@pytest.mark.slow
def test_over_the_committed_results_red_holds_only_what_the_gate_fails(tmp_path):
    results = shutil.copytree(ROOT / "results", tmp_path / "results", ignore=shutil.ignore_patterns("*.lock"))
    index = dashboard.build_dashboard(results, tmp_path / "site", with_reports=False).read_text()
    cases, runs = history.load_history(results)
    judgement = history.judge(cases, runs, history.gate_rule())
    rule, expected, unfit = history.gate_rule(), set(), 0
    for base, new in zip(judgement.pairs["base_run"], judgement.pairs["run"]):
        base_meta, base_rows, base_samples = store.read_run(Path(runs.at[base, "directory"]))
        meta, rows, samples = store.read_run(Path(runs.at[new, "directory"]))
        table = history.gate_table(base_rows, base_samples, rows, samples, rule)
        mine = set(judgement.changes.loc[(judgement.changes["base_run"] == base)
                                         & (judgement.changes["run"] == new), "case_id"])
        failing = set(table.loc[table["verdict"].isin(regression.FAILING), "case_id"]) & mine
        reasons = analysis.unfit_reasons(base_meta, base_rows, meta, rows)
        unfit += bool(reasons)
        if not reasons:
            expected |= {(case, runs.at[base, "run_id"], runs.at[new, "run_id"]) for case in failing}
    red = re.search(r"<ul id='red'>(.*?)</ul>", index, re.S).group(1)
    listed = set(re.findall(r"data-case='([^']*)' data-base='([^']*)' data-new='([^']*)'", red))
    assert {tuple(html.unescape(part) for part in item) for item in listed} == expected
    pairs = len(judgement.pairs)
    assert f"{pairs} pairs of consecutive runs on one machine" in index
    assert f"; {pairs - unfit} judged" in index and f"{unfit} not judged" in index
    assert "load not recorded" in index
    # The committed runs come from two CPUs (a Zen 5 and a Xeon), interleaved: each pair is one machine's.
    assert runs["machine"].nunique() >= 2
    for base, new in zip(judgement.pairs["base_run"], judgement.pairs["run"]):
        assert runmeta.same_machine(runs.at[base, "meta"], runs.at[new, "meta"]), (base, new)
    assert "different CPU" not in re.search(r"<p id='pairs'>(.*?)</p>", index, re.S).group(1)


def test_runs_are_grouped_by_hardware_not_by_host_name():
    """A CI runner's host name changes every run; its hardware does not. Two
    CPUs alike but for their family-model are two machines."""
    zen4 = dict(QUIET, hardware=dict(QUIET["hardware"], cpu_family_model="25-17"))
    gpu = dict(QUIET, gpu_name="NVIDIA H100 80GB HBM3")
    metas = [dict(QUIET, machine="runner-a"), dict(zen4, machine="runner-b"), dict(QUIET, machine="runner-c"),
             dict(gpu, machine="node-1"), dict(zen4, machine="runner-d")]
    labels = runmeta.machine_groups(metas)
    assert labels == ["Fixture CPU x2 [25-1]", "Fixture CPU x2 [25-17]", "Fixture CPU x2 [25-1]",
                      "Fixture CPU x2 [25-1] / NVIDIA H100 80GB HBM3", "Fixture CPU x2 [25-17]"]
    # The same label for different hardware (a cache size recorded) stays apart.
    bigger = dict(QUIET, hardware=dict(QUIET["hardware"], caches={"L2": "1024K", "L3": "32768K"}))
    assert runmeta.machine_groups([QUIET, bigger]) == ["Fixture CPU x2 [25-1]", "Fixture CPU x2 [25-1]'"]
    # A run that recorded only the model name matches either Zen; it must not bind the two together.
    vague = {"hardware": {"cpu_model": "Fixture CPU", "cpu_count": 2}}
    zen5 = dict(QUIET, hardware=dict(QUIET["hardware"], cpu_family_model="26-2"))
    assert runmeta.machine_groups([vague, zen4, zen5, zen4]) == ["Fixture CPU x2", "Fixture CPU x2",
                                                             "Fixture CPU x2 [26-2]", "Fixture CPU x2"]


def test_interleaved_machines_are_each_judged_against_their_own_runs(tmp_path):
    """Two machines' nightly runs interleaved: every pair is one machine's, so
    nothing goes unjudged for "different CPU", and a slowdown on one machine
    is red against that machine's run before."""
    root = tmp_path / "results"
    other = dict(QUIET, hardware=dict(QUIET["hardware"], cpu_family_model="25-17"))
    for day in range(6):
        fixture_run(root / f"r{day}", meta=dict(other if day % 2 else QUIET, machine=f"runner-{day}"),
                    start_time=f"2026-11-{10 + day}T00:00:00+00:00",
                    entries=[("seed_loops", "python", "ok", 2e-3 if day == 5 else 1e-3),
                             ("torch_max_pool2d_indices", "torch", "ok", 1e-4),
                             ("numpy_sliding_window", "numpy", "ok", 5e-4)],
                    row_fields={name: {"iqr_s": 1e-7} for name in ("seed_loops", "torch_max_pool2d_indices",
                                                                   "numpy_sliding_window")})
    cases, runs = history.load_history(root)
    assert list(runs["machine"]) == ["Fixture CPU x2 [25-1]", "Fixture CPU x2 [25-17]"] * 3
    # 5 equal samples a case here: Mann–Whitney can reach p = 0.008 at best, so alpha 0.01 for this test
    judgement = history.judge(cases, runs, history.gate_rule(factor=1.5, alpha=0.01))
    assert sorted(zip(judgement.pairs["base_run"], judgement.pairs["run"])) == [(0, 2), (1, 3), (2, 4), (3, 5)]
    assert not judgement.pairs[f"reasons_{history.TIME}"].map(bool).any()
    red = judgement.changes[judgement.changes["mark"] == history.RED]
    assert set(zip(red["strategy"], red["base_run"], red["run"])) == {("seed_loops", 3, 5)}


def test_another_thread_setting_or_timing_protocol_is_never_judged_a_regression(tmp_path):
    """Issue 51: the dashboard listed a 2-thread run against a 1-thread one as a 4.99x regression.
    A change of thread setting, or of timing protocol (before rounds against rounds), measures
    another thing: grey, with the reason; the same pair at one setting is red."""
    rows = _rows({"a": 1.0, "b": 2.0})
    two, one = dict(QUIET, threads={"numpy": 2, "torch": 2}), dict(QUIET, threads={"blas": 1, "torch": 1})
    assert analysis.unfit_reasons(two, rows, one, rows) == [
        "different thread settings (numpy 2, torch 2 → numpy 1, torch 1)"]
    assert analysis.unfit_reasons(two, rows, dict(two, threads={"numpy": 2, "torch": 2, "jax": 1}), rows) == []
    assert analysis.unfit_reasons(two, rows, one, rows, metric="instructions") == []  # counting runs at 1 thread
    before, raced = dict(two, schema_written=6), dict(two, schema_written=10)
    assert analysis.unfit_reasons(before, rows, raced, rows) == [
        "different timing protocol (one stretch of samples (before rounds) → rounds)"]
    assert analysis.unfit_reasons(dict(two, schema_written=7), rows, raced, rows) == []

    def pair(root, second_threads):
        for day, (threads, slow) in enumerate([({"torch": 2}, 1e-3), (second_threads, 5e-3)]):
            fixture_run(root / f"r{day}", meta=dict(QUIET, threads=threads, schema_written=10),
                        start_time=f"2026-11-{10 + day}T00:00:00+00:00",
                        entries=[("seed_loops", "python", "ok", slow), ("numpy_sliding_window", "numpy", "ok", 5e-4)],
                        row_fields={name: {"iqr_s": 1e-7} for name in ("seed_loops", "numpy_sliding_window")})
        cases, runs = history.load_history(root)
        judgement = history.judge(cases, runs, history.gate_rule(factor=1.5, alpha=0.01))
        return judgement.changes[judgement.changes["strategy"] == "seed_loops"]

    planted = pair(tmp_path / "threads", {"torch": 1})
    assert set(planted["mark"]) == {history.NOT_JUDGED}, planted[["mark", "why"]]
    assert all(why.startswith("different thread settings (torch 2 → torch 1)") for why in planted["why"])
    assert set(pair(tmp_path / "alike", {"torch": 2})["mark"]) == {history.RED}


def test_a_red_between_two_runs_before_rounds_says_the_rule_it_rests_on(tmp_path):
    root = tmp_path / "results"
    for day, slow in enumerate([1e-3, 5e-3]):
        fixture_run(root / f"r{day}", meta=dict(QUIET, schema_written=6), start_time=f"2026-11-{10 + day}T00:00:00+00:00",
                    entries=[("seed_loops", "python", "ok", slow), ("numpy_sliding_window", "numpy", "ok", 5e-4)],
                    row_fields={name: {"iqr_s": 1e-7} for name in ("seed_loops", "numpy_sliding_window")})
    cases, runs = history.load_history(root)
    changes = history.judge(cases, runs, history.gate_rule(factor=1.5, alpha=0.01)).changes
    red = changes[changes["mark"] == history.RED]
    assert len(red) and all(why.startswith("judged on one stretch of samples a run (both before rounds)")
                            for why in red["why"])
