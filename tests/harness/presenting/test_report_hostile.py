"""Hostile text from result files through the report and the dashboard:
matplotlib must draw "$...$" in a strategy or machine name as written, never
as mathtext (an unknown command there used to fail every figure)."""

import html
import json
import math

import numpy as np
from PIL import Image

import report
from harness.base.format import md_escape
from harness.presenting.dashboard import build_dashboard
from harness.presenting.report import figures as report_figures

from .test_report import fixture_run

HOSTILE = ["evil$\\frac{1}{0}$_name", "bad$\\undefinedcommand$x", "sub$_$script"]
ENTRIES = [("seed_loops", "numpy", "ok", 1e-2)] + [(name, "torch", "ok", 1e-4 * (i + 1))
                                                   for i, name in enumerate(HOSTILE)]
MACHINE = "CPU $\\oops$ model"


def _not_blank(png):
    with Image.open(png) as image:
        return len(np.unique(np.asarray(image.convert("L")))) > 10


def test_hostile_names_through_the_report(tmp_path):
    run = fixture_run(tmp_path / "run1", machine_cpu=MACHINE, entries=ENTRIES)
    written = report.build([run], tmp_path / "out")
    md = written.read_text()
    page = (tmp_path / "out" / "report.html").read_text()
    for name in HOSTILE:
        assert html.escape(name) in page
        assert md_escape(name) in md
    pngs = sorted((tmp_path / "out" / "figures").glob("*.png"))
    assert len(pngs) >= 3 and all(_not_blank(png) for png in pngs)


def test_hostile_names_through_the_dashboard(tmp_path):
    root = tmp_path / "results"
    fixture_run(root / "a", machine_cpu=MACHINE, entries=ENTRIES)
    fixture_run(root / "b", machine_cpu=MACHINE, entries=ENTRIES, start_time="2026-11-23T00:00:00+00:00")
    index = build_dashboard(root, tmp_path / "site")
    text = index.read_text()
    for name in HOSTILE:
        assert html.escape(name) in text
    # The history is drawn in the browser from data scripts: the names reach them as JSON strings, intact.
    scripts = list((tmp_path / "site" / "data" / "cases").glob("*.js"))
    assert scripts
    for script in scripts:
        data = json.loads(script.read_text().split("=", 2)[-1].rstrip(";\n"))
        assert set(HOSTILE) <= {series["name"] for series in data["series"]}
    assert len(list((tmp_path / "site" / "runs").glob("*/report.html"))) == 2


def test_labels_are_one_plain_line():
    assert report_figures.label("a\nb\tc\x00d") == "a b c d"
    assert report_figures.label("x" * 100, 10) == "x" * 9 + "…"
    assert report_figures.label("a$b$c") == "a\\$b\\$c"  # drawn as "a$b$c", never as mathtext
    assert report_figures.label(math.nan) == "nan"
