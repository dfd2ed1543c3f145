"""The report's and the dashboard's figures, inspected as matplotlib drew
them: one colour per strategy everywhere, titles inside the figure, every bar
inside the GB/s axis, IQR error bars, speedups without exponents."""

import json
import math
import os
import subprocess
import sys

import matplotlib.figure
import pytest
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer

import report
from harness.base.format import fmt_ratio
from harness.presenting.dashboard import build_dashboard
from harness.presenting.report import figures as report_figures
from impls.registry import OPERATORS
from tests.helpers import ROOT

from .test_report import fixture_run


@pytest.fixture
def drawn(monkeypatch):
    """Every figure saved as PNG while the test runs, after it was drawn."""
    figures = []
    original = matplotlib.figure.Figure.savefig

    def savefig(self, fname, *args, **kwargs):
        original(self, fname, *args, **kwargs)
        if str(fname).endswith(".png"):
            renderer = self.canvas.get_renderer()  # titles as drawn, before the figure is closed
            titles = [ax.title for ax in self.axes] + [text for text in [self._suptitle] if text]
            self.title_boxes = [(title.get_text(), title.get_window_extent(renderer)) for title in titles]
            self.width_px = self.bbox.width
            figures.append(self)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return figures


def _bar_colours(ax):
    """{tick label: face colour} of a horizontal bar chart."""
    ticks = {round(position): text.get_text() for position, text in zip(ax.get_yticks(), ax.get_yticklabels())}
    return {ticks[round(bar.get_y() + bar.get_height() / 2)]: bar.get_facecolor() for bar in ax.patches
            if bar.get_height() > 0 and round(bar.get_y() + bar.get_height() / 2) in ticks}


def _draw_report_and_dashboard(tmp_path):
    """Two fixture runs; the second's report and the dashboard over both."""
    root = tmp_path / "results"
    fixture_run(root / "a")
    fixture_run(root / "b", start_time="2026-11-23T00:00:00+00:00")
    report.build([root / "b"], tmp_path / "out")
    build_dashboard(root, tmp_path / "site", with_reports=False)


def test_each_strategy_has_one_colour_in_every_figure(tmp_path, drawn):
    _draw_report_and_dashboard(tmp_path)
    seen = {}
    for fig in drawn:
        for ax in fig.axes:
            for name, colour in _bar_colours(ax).items():
                seen.setdefault(name.split("  [")[0].replace("\\$", "$"), set()).add(colour)
            for line in ax.get_lines():
                name = line.get_label().rsplit(" (", 1)[0]
                if not name.startswith("_") and name != "bandwidth floor":
                    seen.setdefault(name, set()).add(to_rgba(line.get_color()))
    assert {"seed_loops", "torch_max_pool2d_indices", "numpy_sliding_window"} <= set(seen)
    for name, colours in seen.items():
        assert colours == {to_rgba(report_figures.strategy_colour("maxpool2d", name))}, name
    for op in OPERATORS.values():  # distinct within an operator
        colours = [report_figures.strategy_colour(op.name, name) for name in op.strategies]
        assert len(set(colours)) == len(colours), op.name
    # An unregistered name's colour must not depend on the process (Python's str hash is salted per
    # process): the dashboard draws history figures in runs months apart.
    code = "import impls; from harness.presenting.report import figures; print(figures.strategy_colour('maxpool2d', 'not-registered'))"
    colours = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout.strip() for seed in (1, 2, 3)}
    assert colours == {report_figures.strategy_colour("maxpool2d", "not-registered")}


def test_titles_stay_inside_the_figure(tmp_path, drawn):
    long_machine = "Intel(R) Xeon(R) Platinum 8480+ engineering sample with a remarkably long model string"
    root = tmp_path / "results"
    fixture_run(root / "a", machine_cpu=long_machine)
    fixture_run(root / "b", machine_cpu=long_machine, start_time="2026-11-23T00:00:00+00:00")
    report.build([root / "b"], tmp_path / "out")
    build_dashboard(root, tmp_path / "site", with_reports=False)
    assert len(drawn) >= 6
    for fig in drawn:
        assert any(title for title, _ in fig.title_boxes)
        for title, box in fig.title_boxes:
            assert box.x0 >= 0 and box.x1 <= fig.width_px + 0.5, title


def test_gbps_axis_holds_every_bar_and_the_ceiling(tmp_path, drawn):
    # in cache: 3x the copy ceiling of 20 GB/s
    run = fixture_run(tmp_path / "run", row_fields={"torch_max_pool2d_indices": {"gbps": 60.0}})
    report.build([run], tmp_path / "out")
    charts = [ax for fig in drawn for ax in fig.axes if "GB/s" in ax.get_xlabel()]
    assert charts
    for ax in charts:
        right = max(bar.get_x() + bar.get_width() for bar in ax.patches if bar.get_height() > 0)
        assert right >= 60.0 and ax.get_xlim()[1] > right


def test_time_error_bars_span_median_plus_minus_half_the_iqr(tmp_path, drawn):
    run = fixture_run(tmp_path / "run", row_fields={"seed_loops": {"median_s": 0.02, "iqr_s": 0.004}})
    report.build([run], tmp_path / "out")
    spans = []
    for fig in drawn:
        for ax in fig.axes:
            if not ax.get_xlabel().startswith("median time"):
                continue
            for container in ax.containers:
                if isinstance(container, ErrorbarContainer):
                    (x0, _), (x1, _) = container.lines[2][0].get_segments()[0]
                    spans.append((round(x0, 6), round(x1, 6)))
    assert (0.018, 0.022) in spans  # median 20 ms, IQR 4 ms


def test_speedups_print_without_exponents(tmp_path, drawn):
    run = fixture_run(tmp_path / "run", row_fields={"seed_loops": {"median_s": 0.576}})
    md = report.build([run], tmp_path / "out").read_text()
    texts = [text.get_text() for fig in drawn for ax in fig.axes for text in ax.texts]
    assert any("5,760×" in text for text in texts)  # 0.576 s / 0.1 ms
    assert "5,760×" in md and "e+03" not in md and not any("e+03" in text for text in texts)
    assert math.isfinite(float(fmt_ratio(5760.0).replace(",", "").rstrip("×")))


def test_log_axes_read_in_plain_units(tmp_path, drawn):
    _draw_report_and_dashboard(tmp_path)
    time_axes = [axis for fig in drawn for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
                 if axis.get_label().get_text().startswith("median time")]
    assert len(time_axes) >= 3  # the report's time and scaling figures (the dashboard draws in the browser)
    for axis in time_axes:
        labels = [tick.get_text() for tick in axis.get_ticklabels() if tick.get_text()]
        assert labels and all(label.split()[-1] in ("s", "ms", "µs", "ns") for label in labels), \
            (axis.get_label().get_text(), axis.get_scale(), labels)


def test_the_same_runs_make_byte_identical_figures(tmp_path):
    """Re-publishing unchanged runs must leave docs/ unchanged: no date in
    the files, SVG ids that do not change from one process to the next."""
    run = fixture_run(tmp_path / "run")
    code = f"import impls, report; report.build([{str(run)!r}], __import__('pathlib').Path(__import__('sys').argv[1]))"
    for out in ("a", "b"):
        subprocess.run([sys.executable, "-c", code, str(tmp_path / out)], check=True, cwd=ROOT, capture_output=True)
    first = sorted((tmp_path / "a").rglob("*.svg")) + sorted((tmp_path / "a").rglob("*.png"))
    assert first
    for path in first:
        assert path.read_bytes() == (tmp_path / "b" / path.relative_to(tmp_path / "a")).read_bytes(), path.name


def test_scaling_figures_never_join_two_forms_of_an_operator():
    """maxunpool's 1-D and 2-D cases are different problems: a line through
    both (against bytes moved) read as one strategy's scaling."""
    import pandas as pd

    params = [json.dumps(p) for p in ({"form": "1d", "B": 8, "F": 4, "L": 64, "f": 5},
                                      {"form": "1d", "B": 64, "F": 4, "L": 64, "f": 5},
                                      {"form": "2d", "N": 1, "C": 2, "H": 8, "W": 8, "k": 2})]
    rows = pd.DataFrame({"params": params, "strategy": ["a", "a", "a"]})
    families = report_figures.categorical_families(rows)
    assert [kind for kind, _ in families] == ["form=1d", "form=2d"]
    assert [len(family) for _, family in families] == [2, 1]
    maxpool = pd.DataFrame({"params": [json.dumps({"N": 1, "k": 2}), json.dumps({"N": 2, "k": 2})]})
    assert [(kind, len(family)) for kind, family in report_figures.categorical_families(maxpool)] == [("", 2)]
