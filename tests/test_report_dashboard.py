"""The dashboard regenerates only what changed: a run's (light) report when
its rows or metadata changed, a history plot when its data did; what no
longer exists is removed."""

import os
import re
import shutil

from PIL import Image

import report
from harness import report as report_package
from harness import dashboard
from test_report import fixture_run


def _history(root):
    fixture_run(root / "a")
    fixture_run(root / "b", start_time="2026-11-23T00:00:00+00:00")
    return root


def _count_drawing(monkeypatch):
    calls = {"reports": [], "plots": []}
    build, plot = report.build, dashboard._history_plot

    def counting_build(dirs, out, *args, **kwargs):
        calls["reports"].append(os.path.basename(str(dirs[0])))
        return build(dirs, out, *args, **kwargs)

    def counting_plot(series, path, title):
        calls["plots"].append(path.name)
        return plot(series, path, title)

    monkeypatch.setattr(report_package, "build", counting_build)
    monkeypatch.setattr(dashboard, "_history_plot", counting_plot)
    return calls


def test_a_second_build_redraws_nothing(tmp_path, monkeypatch):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    calls = _count_drawing(monkeypatch)
    dashboard.build_dashboard(root, site)
    assert sorted(calls["reports"]) == ["a", "b"] and len(calls["plots"]) == 2
    calls["reports"].clear(), calls["plots"].clear()
    index = dashboard.build_dashboard(root, site)
    assert calls == {"reports": [], "plots": []}
    assert "runs/a/report.html" in index.read_text() and (site / "runs" / "b" / "report.html").exists()


def test_a_changed_run_redraws_only_its_report_and_the_plots_whose_data_changed(tmp_path, monkeypatch):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    dashboard.build_dashboard(root, site)
    rows = (root / "b" / "rows.csv").read_text()
    # the seed's median at the smaller size only: 0.01 s -> 0.03 s
    changed = rows.replace("ok,,0.01,0.001,0.01,", "ok,,0.03,0.001,0.01,", 1)  # the first row: seed_loops4
    assert changed != rows
    (root / "b" / "rows.csv").write_text(changed)
    calls = _count_drawing(monkeypatch)
    dashboard.build_dashboard(root, site)
    assert calls["reports"] == ["b"]
    assert calls["plots"] == ["maxpool2d-n-1-c-1-h-4-w-4-k-2-cpu-float32.png"]


def test_runs_and_cases_that_left_the_history_leave_the_site(tmp_path):
    root, site = _history(tmp_path / "results"), tmp_path / "site"
    fixture_run(root / "c", start_time="2026-11-24T00:00:00+00:00",
                entries=[("numpy_sliding_window", "numpy", "ok", 1e-3)])
    dashboard.build_dashboard(root, site)
    assert (site / "runs" / "c").exists()
    shutil.rmtree(root / "c")
    (site / "runs" / "mine").mkdir()  # not the dashboard's: kept
    dashboard.build_dashboard(root, site)
    assert not (site / "runs" / "c").exists() and (site / "runs" / "mine").exists()
    assert sorted(p.name for p in (site / "plots").glob("*.png")) == [
        "maxpool2d-n-1-c-1-h-4-w-4-k-2-cpu-float32.png", "maxpool2d-n-1-c-1-h-8-w-8-k-2-cpu-float32.png"]


def test_per_run_reports_are_light_and_plots_small(tmp_path):
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
    for plot in (site / "plots").glob("*.png"):
        with Image.open(plot) as image:
            assert image.width == 800 and image.height == 320


def test_report_cli_writes_the_light_kind_on_request(tmp_path):
    run = fixture_run(tmp_path / "run")
    assert report.main([str(run), "-o", str(tmp_path / "out"), "--light"]) == 0
    figures = sorted(p.name for p in (tmp_path / "out" / "figures").iterdir())
    assert figures == ["maxpool2d-scaling-cpu-fixture-cpu-2-float32.png"]


def test_sparklines_draw_noise_flat_and_a_real_change_tall():
    from harness.dashboard import SPARK_LEVELS, sparkline

    def SPARK(char):
        return SPARK_LEVELS.index(char)

    flat = sparkline([1.0, 0.999])
    assert abs(SPARK(flat[0]) - SPARK(flat[1])) <= 1, flat
    tall = sparkline([1.0, 1.74])
    assert tall[0] in "▁▂" and tall[1] in "▇█"
    assert sparkline([1.0, float("nan"), 1.0]) [1] == "·" and sparkline([]) == ""
