"""The dashboard does only the work a change asks for: a second build reads
no raw samples and rebuilds nothing; a new run adds its own summary, its
report and one judged pair; what left the history leaves the site. Runs are
read from their summaries, rebuilt when stale, kept in the site's cache when
the results cannot be written."""

import re
import shutil

import report
from harness.judging import history
from harness.presenting import dashboard
from harness.presenting.report import figures
from harness.results import stats, store, summary

from .test_report import fixture_run

QUIET = {"load_avg_start": [0.5, 0.5, 0.5], "load_avg_end": [0.7, 0.6, 0.5]}


def _history(root):
    fixture_run(root / "a", meta=QUIET)
    fixture_run(root / "b", meta=QUIET, start_time="2026-11-23T00:00:00+00:00")
    return root


def _count_work(monkeypatch):
    """Counts reports built, summaries made from raw results, samples files
    read and pairs of runs judged."""
    calls = {"reports": [], "summaries": [], "samples": [], "pairs": []}
    build, summarize, read_samples, judge_pairs = (dashboard.build_run_report, summary.summarize,
                                                   store.read_samples, history.judge_pairs)

    def counting_build(directory, target):
        calls["reports"].append(directory.name)
        return build(directory, target)

    def counting_summarize(meta, rows, samples, key):
        calls["summaries"].append(meta["run_id"])
        return summarize(meta, rows, samples, key)

    def counting_samples(directory):
        calls["samples"].append(directory.name)
        return read_samples(directory)

    def counting_pairs(cases, runs, changes, pairs, *args):
        calls["pairs"] += [(runs.at[base, "run_id"], runs.at[new, "run_id"])
                           for base, new in zip(pairs["base_run"], pairs["run"])]
        return judge_pairs(cases, runs, changes, pairs, *args)

    monkeypatch.setattr(dashboard, "build_run_report", counting_build)
    monkeypatch.setattr(summary, "summarize", counting_summarize)
    monkeypatch.setattr(store, "read_samples", counting_samples)
    monkeypatch.setattr(history, "judge_pairs", counting_pairs)
    return calls


def _files(site):
    return {path.relative_to(site): path.read_bytes() for path in site.rglob("*") if path.is_file()
            and ".cache" not in path.parts}


def test_a_second_build_reads_no_samples_and_rebuilds_nothing(tmp_path, monkeypatch):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    calls = _count_work(monkeypatch)
    dashboard.build_dashboard(root, site)
    assert sorted(calls["reports"]) == ["a", "b"] and calls["pairs"] == [("a", "b")]
    assert calls["summaries"] == []  # each run's writer left its summary when it closed
    before = _files(site)
    for kind in calls.values():
        kind.clear()
    index = dashboard.build_dashboard(root, site)
    assert calls == {"reports": [], "summaries": [], "samples": [], "pairs": []}
    assert _files(site) == before
    assert "runs/a/report.html" in index.read_text() and (site / "runs" / "b" / "report.html").exists()


def test_one_more_run_adds_its_own_work_only(tmp_path, monkeypatch):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    dashboard.build_dashboard(root, site)
    fixture_run(root / "c", meta=QUIET, start_time="2026-11-24T00:00:00+00:00",
                row_fields={"numpy_sliding_window": {"median_s": 3e-3}})
    calls = _count_work(monkeypatch)
    dashboard.build_dashboard(root, site)
    assert calls["reports"] == ["c"] and calls["pairs"] == [("b", "c")] and calls["summaries"] == []
    # Its samples are read only because the screen could not clear a 3x change (the fixture's samples
    # stay at 1 ms: the gate then finds no shift, and nothing turns red).
    assert set(calls["samples"]) <= {"b", "c"}


def test_a_warm_build_writes_the_site_a_cold_one_writes(tmp_path):
    """The site's cache (history, judged pairs, hashed files) changes how much is read, never what is shown."""
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    dashboard.build_dashboard(root, site, with_reports=False)
    fixture_run(root / "c", meta=QUIET, start_time="2026-11-24T00:00:00+00:00",
                row_fields={"numpy_sliding_window": {"median_s": 3e-3}})
    (root / "b" / "rows.csv").write_text((root / "b" / "rows.csv").read_text().replace("ok,,0.01,", "ok,,0.02,", 1))
    dashboard.build_dashboard(root, site, with_reports=False)
    dashboard.build_dashboard(root, tmp_path / "cold", with_reports=False)
    assert _files(site) == _files(tmp_path / "cold")


def test_a_changed_run_rebuilds_its_summary_report_and_pairs(tmp_path, monkeypatch):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    dashboard.build_dashboard(root, site)
    rows = (root / "b" / "rows.csv").read_text()
    # the seed's median at the smaller size only: 0.01 s -> 0.03 s, the same number of bytes
    changed = rows.replace("ok,,0.01,0.001,0.01,", "ok,,0.03,0.001,0.01,", 1)
    assert changed != rows and len(changed) == len(rows)
    (root / "b" / "rows.csv").write_text(changed)
    calls = _count_work(monkeypatch)
    dashboard.build_dashboard(root, site)
    assert calls["summaries"] == ["b"] and calls["reports"] == ["b"] and calls["pairs"] == [("a", "b")]
    assert history.load_summary(root / "b")["cases"]["median_s"][0] == 0.03


def test_runs_and_cases_that_left_the_history_leave_the_site(tmp_path):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    fixture_run(root / "c", meta=QUIET, start_time="2026-11-24T00:00:00+00:00",
                entries=[("numpy_sliding_window", "numpy", "ok", 1e-3)], variants=(("cpu", "float64"),))
    dashboard.build_dashboard(root, site)
    assert (site / "runs" / "c").exists()
    assert len(list((site / "data" / "cases").glob("*float64.js"))) == 2
    shutil.rmtree(root / "c")
    (site / "runs" / "mine").mkdir()  # not the dashboard's: kept
    dashboard.build_dashboard(root, site)
    assert not (site / "runs" / "c").exists() and (site / "runs" / "mine").exists()
    assert sorted(p.name for p in (site / "data" / "cases").glob("*.js")) == [
        "maxpool2d-n-1-c-1-h-4-w-4-k-2-cpu-float32.js", "maxpool2d-n-1-c-1-h-8-w-8-k-2-cpu-float32.js"]


def test_only_the_newest_runs_keep_a_report(tmp_path):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    dashboard.build_dashboard(root, site)
    index = dashboard.build_dashboard(root, site, reports=1).read_text()
    assert not (site / "runs" / "a").exists() and (site / "runs" / "b" / "report.html").exists()
    assert "runs/b/report.html" in index and "runs/a/report.html" not in index


def test_summaries_of_results_that_cannot_be_written_go_to_the_site(tmp_path, monkeypatch):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    for run in root.iterdir():
        (run / summary.SUMMARY).unlink()
    write = summary.write

    def read_only_results(path, content):
        if root in path.parents:
            raise PermissionError(13, "Permission denied", str(path))
        write(path, content)

    monkeypatch.setattr(summary, "write", read_only_results)
    dashboard.build_dashboard(root, site, with_reports=False)
    assert not any((run / summary.SUMMARY).exists() for run in root.iterdir())
    assert len(list((site / dashboard.CACHE / "summaries").glob("*.json"))) == 2
    calls = _count_work(monkeypatch)
    dashboard.build_dashboard(root, site, with_reports=False)
    assert calls["summaries"] == []  # read back from the site's cache


def test_a_summary_records_what_the_dashboard_needs_of_each_case(tmp_path):
    run = fixture_run(tmp_path / "run", meta=QUIET, row_fields={"torch_max_pool2d_indices": {"slow_start": 2}})
    meta, rows, samples = store.read_run(run)
    found = history.load_summary(run)
    assert found["fingerprint"] == summary.fingerprint(run, history.FILES)
    assert found["meta"]["load_avg_end"] == [0.7, 0.6, 0.5]
    cases = summary.cases_frame(found).set_index("case_id")
    assert list(cases.index) == list(rows["case_id"])
    for case_id, values in samples.items():
        assert cases.at[case_id, "p10_s"] == stats.typical_s(values, "p10")
    assert (cases.loc[cases["strategy"] == "torch_max_pool2d_indices", "flags"] == summary.SLOW_START).all()
    assert (cases.loc[cases["status"] == "ok", "n_samples"] == 5).all()
    failed = cases[~cases["status"].isin(["ok", "inexact"])]
    assert len(failed) and failed["p10_s"].isna().all()  # no samples: no 10th percentile


def test_per_run_reports_are_light(tmp_path):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    dashboard.build_dashboard(root, site)
    run = site / "runs" / "a"
    figures = sorted(p.name for p in (run / "figures").iterdir())
    assert figures and all(name.endswith(".png") and "scaling" in name for name in figures)  # no per-case, no SVG
    page = (run / "report.html").read_text()
    assert "data:image/png" not in page and "src='figures/" in page
    for source in re.findall(r"src='([^']+)'", page):
        assert (run / source).is_file(), source  # relative links that work from disk
    assert "light version" in page and "<table>" in page


def test_report_cli_writes_the_light_kind_on_request(tmp_path):
    run = fixture_run(tmp_path / "run")
    assert report.main([str(run), "-o", str(tmp_path / "out"), "--light"]) == 0
    figures = sorted(p.name for p in (tmp_path / "out" / "figures").iterdir())
    assert figures == ["maxpool2d-scaling-cpu-fixture-cpu-2-cores-2-threads-per-library-float32.png"]


def test_each_strategy_keeps_the_report_figures_colour(tmp_path):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    dashboard.build_dashboard(root, site, with_reports=False)
    script = (site / "data" / "cases" / "maxpool2d-n-1-c-1-h-4-w-4-k-2-cpu-float32.js").read_text()
    colours = dict(re.findall(r'"name":"([^"]+)","colour":"(#[0-9a-f]{6})"', script))
    assert colours and all(colour == figures.strategy_colour(name) for name, colour in colours.items())


def test_sparklines_draw_noise_flat_and_a_real_change_tall():
    from harness.presenting.dashboard import SPARK_LEVELS, sparkline

    def SPARK(char):
        return SPARK_LEVELS.index(char)

    flat = sparkline([1.0, 0.999])
    assert abs(SPARK(flat[0]) - SPARK(flat[1])) <= 1, flat
    tall = sparkline([1.0, 1.74])
    assert tall[0] in "▁▂" and tall[1] in "▇█"
    assert sparkline([1.0, float("nan"), 1.0])[1] == "·" and sparkline([]) == ""
