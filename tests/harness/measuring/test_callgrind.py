"""The counting instrument (`run --instrument callgrind`), compare by count
and the count gate of `make regress`.

The slow tests share the Callgrind runs they can (session-scoped): a baseline
counted on a quiet machine and an A/A repeat counted while two CPU hogs run.
Then one gate run counting two planted changes: 5 % more real work in a test
strategy (caught by the count gate, and only it, in one line) with a 3x sleep
in another (caught by the wall-time gate, and not by counts)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from harness.base.config import Case, expand, load_config
from harness.base.errors import ResultError, UsageError
from harness.judging import compare, count_gate, regression
from harness.measuring import callgrind
from harness.results import counts, metrics, store
from tests import helpers
from tests.helpers import BASELINE_TIMING, GATE_TIMING, ROOT, benchmark, config_yaml, plugin_env

PROBE = "probe_channel_steps"
# C=20: 5 % more work is one more channel step of the probe. Big enough that what still
# varies between two runs (a few hundred L1 misses a call, as allocations land elsewhere) stays
# well under 0.1 % of a count; numba_fused exercises numba's cache.
COUNTED = benchmark("dispersion", ["seed_loop", "numpy_loop", "numba_fused", PROBE], B=2, C=20, H=256, W=128, S=2)
needs_valgrind = pytest.mark.skipif(callgrind.unavailable() is not None,
                                    reason=f"no counts here: {callgrind.unavailable()}")


def scatterbench(*args, **env_vars) -> subprocess.CompletedProcess:
    return helpers.scatterbench(*args, env=plugin_env("counting_probe", COLUMNS="200", **env_vars), timeout=900)


def hog() -> subprocess.Popen:
    """A process spinning on a core, at the lowest priority: it loads the
    machine (the load average, the caches, the scheduler's switches) without
    taking the counting run's core from it, which would only make the count
    take twice as long."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=lambda: os.nice(19))


@pytest.fixture(scope="session")
def counted(tmp_path_factory):
    """The test config; its counts baseline counted on a quiet machine, then an
    A/A repeat counted while two CPU hogs run (counts do not depend on load);
    a wall-time baseline. The two counts run one after the other: Callgrind
    passes take a per-user lock (callgrind._work_directory), so counting them
    "at once" only kept the hogs running through both."""
    if callgrind.unavailable():
        pytest.skip(callgrind.unavailable())
    root = tmp_path_factory.mktemp("counting")
    config, baseline_config = root / "callgrind.yaml", root / "baseline.yaml"
    config.write_text(config_yaml(COUNTED, name="counting-test", timing=GATE_TIMING))
    baseline_config.write_text(config_yaml(COUNTED, name="counting-test", timing=BASELINE_TIMING))
    env = plugin_env("counting_probe")

    def count(name: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", "run", str(config), "--instrument", "callgrind",
                               "-o", str(root / name), "--no-progress"], capture_output=True, text=True, env=env,
                              timeout=900)

    runs = [count("base")]
    hogs = [hog(), hog()]
    try:
        runs.append(count("again"))
        load = os.getloadavg()[0]
    finally:
        for process in hogs:
            process.kill()
            process.wait()
    for run in runs:
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    wall = scatterbench("run", baseline_config, "-o", root / "wall-base", "--no-progress")
    assert wall.returncode == 0, wall.stderr[-2000:]
    return {"root": root, "config": config, "base": root / "base", "again": root / "again",
            "wall": root / "wall-base", "load": load}


# ------------------------------------------------------------ with Callgrind
# How far two counting runs of unchanged code may differ: instructions 0.1 % (issue 26), est_cycles
# 0.5 %, six times under the gate's 3 %. Measured on the 2-core VM with the counting process's inputs
# made the same on every run (harness/measuring/callgrind.py: fixed working directory, no run id, no
# tcache, the counted thread started first and preparing the strategy itself): this test's two runs
# gave identical counts but for one est_cycles 0.0012 % apart, yet on CI (2026-12-06) seed_loop's
# est_cycles 0.12 % apart, instructions within 0.1 % (five counts of it on the dev VM, two beside
# hogs: within 0.03 %). The Python-loop seeds' simulated L1 misses still
# follow where objects made before the fork landed: 0.22 % on configs/quick.yaml (docs/COUNTING.md).
A_A_TOLERANCE = {"instructions": 1e-3, "est_cycles": 5e-3}


@pytest.mark.slow
@pytest.mark.quiet  # its baseline is counted quiet, then the repeat beside two hogs of its own
@needs_valgrind
def test_a_quiet_and_a_loaded_counting_run_agree_within_a_thousandth(counted):
    assert counted["load"] >= 2  # the hogs and the repeat were on the 2 cores together
    rows = store.read_rows(counted["base"]).set_index("strategy")
    assert set(rows["status"]) == {"ok"} and rows["instructions"].gt(0).all() and rows["est_cycles"].gt(0).all()
    meta = store.read_meta(counted["base"])
    from impls.backends import thread_knobs

    # every installed backend's pool at one thread: spin-waits are not deterministic
    every = {backend.name: 1 for backend in thread_knobs() if not backend.unavailable()}
    assert meta["instrument"] == "callgrind" and meta["threads"] == every and {"torch", "numpy", "numba"} <= set(every)
    assert set(meta["count_versions"]) == {"valgrind", "python", "numpy", "torch", "numba", "glibc"}
    for name in rows.index:  # each case's own dump, for callgrind_annotate
        assert (counted["base"] / json.loads(rows.loc[name, "extra"])["callgrind_dump"]).is_file()
    for metric in metrics.COUNTS.names:
        done = scatterbench("compare", counted["base"], counted["again"], "--metric", metric, "--format", "json")
        assert done.returncode == 0, done.stdout + done.stderr
        cases = json.loads(done.stdout)["cases"]
        assert {case["verdict"] for case in cases} == {"same"} and len(cases) == 4
        worst = max(abs(case["ratio"] - 1) for case in cases)
        assert worst < A_A_TOLERANCE[metric], (metric, [(case["strategy"], case["ratio"]) for case in cases])


@pytest.mark.slow
@pytest.mark.quiet  # the wall-time gate times things
@needs_valgrind
def test_the_gates_catch_5_percent_more_work_by_counts_in_one_line_and_a_3x_sleep_by_wall_time(counted):
    out = counted["root"] / "gate-5"
    done = scatterbench("regress", counted["wall"], counted["config"], "--counts", counted["base"], "-o", out,
                        "--no-progress", SCATTERBENCH_PROBE_EXTRA_PCT="5",
                        SCATTERBENCH_PROBE_SLEEP="dispersion/numpy_loop:3")
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    count_fails = [line for line in lines if line.startswith("FAIL regressed: ")]
    assert count_fails and all(f"dispersion/{PROBE} cpu float32" in line for line in count_fails), count_fails
    # One line says it all: the case, its count before and after per call, the ratio, the factor.
    fail = next(line for line in count_fails if " instructions " in line)
    assert " -> " in fail and "factor 1.03" in fail
    base, new = (float(text.replace(",", "")) for text in fail.split("instructions ")[1].split(" per call")[0].split(" -> "))
    ratio = float(fail.split("per call (")[1].split("x")[0])
    assert ratio == pytest.approx(new / base, rel=1e-3) and 1.04 < ratio < 1.06
    assert "FAIL dispersion/numpy_loop" in done.stdout  # the wall-time gate saw the sleep
    assert "FAIL dispersion/probe" not in done.stdout  # ... and not 5 % more work
    # and nothing else failed
    assert [line for line in lines if line.startswith("FAIL ") and PROBE not in line
            and not line.startswith("FAIL dispersion/numpy_loop")] == []
    by_count = compare.compare_counts(counted["base"], out / "counts-run", "instructions").table.set_index("strategy")
    assert by_count.loc[PROBE, "ratio"] == pytest.approx(1.05, abs=0.01)
    # A sleep costs no instructions (its wrapper's clock reads and call: 0.14 % of numpy_loop's count).
    assert by_count.loc["numpy_loop", "verdict"] == "same" and by_count.loc["numpy_loop", "ratio"] < 1.005
    assert (by_count.drop(index=[PROBE, "numpy_loop"])["ratio"] - 1).abs().max() < 1e-3


# ------------------------------------------------------------------- without
def test_dump_totals_are_read_with_trailing_zeros_left_out(tmp_path):
    dump = tmp_path / "callgrind.out.1"
    dump.write_text("# callgrind format\nversion: 1\nevents: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\n"
                    "summary: 18446744073709377075 1\n\nfn=(1) f\n5 300\n\ntotals: 3000 900 600 30 20 10 3 2\n")
    events = counts.read_dump(dump)
    assert events == {"Ir": 3000, "Dr": 900, "Dw": 600, "I1mr": 30, "D1mr": 20, "D1mw": 10, "ILmr": 3, "DLmr": 2,
                      "DLmw": 0}
    per_call = metrics.per_call(events, 3)
    assert per_call["instructions"] == 1000
    assert per_call["est_cycles"] == pytest.approx((3000 + 10 * 60 + 100 * 5) / 3)
    dump.write_text("events: Ir\nsummary: 5\n")  # cut off before its totals
    with pytest.raises(counts.DumpError, match="no events header or totals line"):
        counts.read_dump(dump)
    with pytest.raises(counts.DumpError, match="without --cache-sim=yes"):
        counts.est_cycles({"Ir": 10})


@pytest.mark.parametrize("new, verdict", [(1031, "regressed"), (1029, "same"), (971, "same"), (970, "improved"),
                                          (float("nan"), "not counted")])
def test_the_count_rule_is_the_factor_alone(new, verdict):
    assert regression.count_verdict(1000.0, new)[1] == verdict


def _rows(values: dict, status: dict | None = None) -> pd.DataFrame:
    records = []
    for name, value in values.items():
        case = Case("dispersion", name, "cpu", "float32", (("B", 1),))
        records.append({"case_id": case.case_id, "op": case.op, "strategy": name, "device": "cpu",
                        "dtype": "float32", "params": case.params_json, "status": (status or {}).get(name, "ok"),
                        "instructions": value, "est_cycles": 2 * value})
    return pd.DataFrame.from_records(records)


def test_compare_by_count_judges_each_case_and_says_it_in_one_line():
    base = _rows({"a": 1000.0, "b": 2000.0, "c": 500.0, "gone": 10.0})
    new = _rows({"a": 1050.0, "b": 2001.0, "c": 500.0, "added": 7.0}, status={"c": "mismatch"})
    table = compare.compare_count_frames(base, new, "instructions").set_index("strategy")
    assert table["verdict"].to_dict() == {"a": "regressed", "b": "same", "c": "broken", "gone": "only in base",
                                          "added": "only in new"}
    line = compare.count_verdict_line(table.reset_index().iloc[0])
    assert line == "regressed: dispersion/a cpu float32 B=1: instructions 1,000 -> 1,050 per call (1.050x, factor 1.03)"
    assert list(compare.regressed(table)["verdict"]) == ["regressed", "broken"]


def _counting_run(directory: Path, values: dict, versions: dict | None = None, commit: str | None = None,
                  start: str = "2026-01-01T00:00:00") -> Path:
    directory.mkdir(parents=True)
    meta = {"schema_version": 2, "run_id": directory.name, "start_time": start, "git_commit": commit,
            "instrument": "callgrind", "count_versions": versions or callgrind.count_versions()}
    (directory / "meta.json").write_text(json.dumps(meta))
    frame = _rows(values)
    frame["run_id"] = directory.name
    frame.reindex(columns=store.COLUMNS).to_csv(directory / "rows.csv", index=False)
    return directory


def test_compare_by_count_refuses_a_timed_run_and_time_only_options(tmp_path):
    counted_run = _counting_run(tmp_path / "counted", {"a": 1000.0})
    timed = _counting_run(tmp_path / "timed", {"a": float("nan")})
    with pytest.raises(UsageError, match="timed.*no est_cycles counts"):
        compare.compare_counts(counted_run, timed, "est_cycles")
    done = scatterbench("compare", counted_run, counted_run, "--metric", "instructions", "--normalise")
    assert done.returncode == 2 and done.stderr.strip().endswith(
        "--normalise: applies to times; counts (--metric instructions) are compared as they are")
    done = scatterbench("compare", counted_run, counted_run, "--metric", "instructions", "--factor", "0.9")
    assert done.returncode == 2 and "--factor 0.9" in done.stderr
    slower = _counting_run(tmp_path / "slower", {"a": 1040.0})
    done = scatterbench("compare", counted_run, slower, "--metric", "instructions")
    assert done.returncode == 1
    assert "regressed: dispersion/a cpu float32 B=1: instructions 1,000 -> 1,040 per call" in done.stdout
    assert scatterbench("compare", counted_run, slower, "--metric", "instructions", "--factor", "1.05").returncode == 0


def test_compare_by_count_warns_when_the_versions_differ(tmp_path):
    base = _counting_run(tmp_path / "base", {"a": 1000.0}, {**callgrind.count_versions(), "numpy": "1.0"})
    new = _counting_run(tmp_path / "new", {"a": 1000.0})
    warnings = compare.compare_counts(base, new, "instructions").warnings
    assert len(warnings) == 1 and "numpy 1.0 →" in warnings[0]


def test_the_counts_baseline_is_chosen_by_version_set_or_counted_from_its_commit(tmp_path):
    here = callgrind.count_versions()
    _counting_run(tmp_path / "stored" / "older", {"a": 1.0}, {**here, "torch": "0.1"}, "aaaa", "2026-01-01T00:00:00")
    same = _counting_run(tmp_path / "stored" / "same", {"a": 1.0}, here, "bbbb", "2026-02-01T00:00:00")
    assert count_gate.choose_counts_baseline(tmp_path / "stored", here).run == same
    other = {**here, "numpy": "9.9"}
    choice = count_gate.choose_counts_baseline(tmp_path / "stored", other)
    assert choice.run == same and choice.commit == "bbbb"
    assert f"numpy {here['numpy']} → 9.9" in choice.line and "counting one here from commit bbbb" in choice.line
    _counting_run(tmp_path / "nocommit" / "only", {"a": 1.0}, here)
    with pytest.raises(ResultError, match="records no git commit"):
        count_gate.choose_counts_baseline(tmp_path / "nocommit", other)


def test_the_count_gate_is_skipped_in_one_line_where_valgrind_is_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    lines = []
    result = count_gate.run_count_gate(tmp_path / "none", ROOT / "configs" / "quick.yaml", log=lines.append)
    assert not result.failed and result.table.empty
    assert lines == [result.summary] and result.summary.startswith(
        "regress: count gate skipped: valgrind is not installed")


def test_gpu_and_interpreted_cases_are_skipped_with_their_reason():
    assert "not done there" in callgrind.not_counted(Case("dispersion", "seed_loop", "cuda", "float32", ()))
    interpreted = callgrind.not_counted(Case("dispersion", "triton_fused", "cpu", "float32", ()))
    assert "interpreter" in interpreted
    assert callgrind.not_counted(Case("dispersion", "seed_loop", "cpu", "float32", ())) is None


def test_a_case_reaches_the_counting_child_with_its_mode():
    """A backward case once reached the child as its forward (the mode was
    not sent) and the counts baseline of quick.yaml held the forward twice."""
    cases = [Case("maxpool2d", "numba_fused", "cpu", "float32", (("C", 2), ("H", 8), ("N", 1), ("W", 8), ("k", 2)),
                  mode) for mode in ("forward", "backward", "forward+backward")]
    sent = json.loads(json.dumps([callgrind.case_fields(case) for case in cases]))
    assert [callgrind.case_of(fields) for fields in sent] == cases
    assert len({case.case_id for case in cases}) == 3


def test_counting_refuses_isolate_and_report(tmp_path):
    for flag in ("--isolate", "--report"):
        done = scatterbench("run", ROOT / "configs" / "quick.yaml", "--instrument", "callgrind", flag,
                            "-o", tmp_path / flag.strip("-"))
        assert done.returncode == 2 and f"drop {flag}" in done.stderr


@pytest.mark.parametrize("baseline", sorted(path.name for path in (ROOT / "results" / "baseline-counts").iterdir()))
def test_each_committed_counts_baseline_counts_every_case_of_the_quick_config_as_counting_does_now(baseline):
    """The count gate runs configs/quick.yaml; a baseline without one of its
    cases leaves it ungated, and one counted with other settings (calls,
    simulated caches, allocator) would differ for that reason alone."""
    directory = ROOT / "results" / "baseline-counts" / baseline
    meta = store.read_meta(directory)
    assert baseline == count_gate.versions_slug(meta["count_versions"])
    assert meta["count_settings"] == json.loads(json.dumps(callgrind.settings()))
    rows = store.read_rows(directory)
    counted_ok = set(rows.loc[(rows["status"] == "ok") & rows["instructions"].gt(0), "case_id"])
    assert {case.case_id for case in expand(load_config(ROOT / "configs" / "quick.yaml"))} - counted_ok == set()
    assert not (directory / callgrind.DUMP_DIR).exists()  # the dumps stay out of git



def test_a_timed_run_is_not_resumed_by_counting(tmp_path):
    config = ROOT / "configs" / "quick.yaml"
    timed = _counting_run(tmp_path / "timed", {"a": float("nan")})
    meta = json.loads((timed / "meta.json").read_text())
    meta.pop("instrument")
    meta["config"] = load_config(config).model_dump()
    (timed / "meta.json").write_text(json.dumps(meta))
    done = scatterbench("run", config, "--instrument", "callgrind", "--resume", timed)
    assert done.returncode == 2 and "that run was timed; resume it the same way" in done.stderr
