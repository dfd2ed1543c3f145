"""The report's and the dashboard's figures, inspected as matplotlib drew
them: one colour per strategy in every figure and operator, titles and labels
inside the figure and tick labels clear of each other, every bar inside the
GB/s axis, error bars from the quartiles, axes a far-off whisker cannot
stretch, speedups and percentages without exponents, line styles that say
what a strategy is."""

import json
import math
import os
import subprocess
import sys

from types import SimpleNamespace

import matplotlib.figure
import numpy as np
import pandas as pd
import pytest

from harness.presenting.report.load import load
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer

import report
from harness.base.format import fmt_ratio, fmt_time
from harness.presenting.dashboard import build_dashboard
from harness.presenting.report import figures as report_figures
from harness.presenting.report import load as report_load
from harness.results import metrics
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
        if str(fname).endswith(".png") or kwargs.get("format") == "png":  # figures.save draws into memory
            renderer = self.canvas.get_renderer()  # titles as drawn, before the figure is closed
            titles = [ax.title for ax in self.axes] + [text for text in [self._suptitle] if text]
            self.title_boxes = [(title.get_text(), title.get_window_extent(renderer)) for title in titles]
            self.width_px = self.bbox.width
            self.drawn_box = self.get_tightbbox(renderer).transformed(self.dpi_scale_trans)  # px, as the PNG
            self.tick_boxes = {(index, axis.axis_name): _tick_boxes(axis, renderer)
                               for index, ax in enumerate(self.axes) for axis in (ax.xaxis, ax.yaxis)}
            figures.append(self)

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    return figures


def _tick_boxes(axis, renderer):
    """(text, extent) of the tick labels drawn on ``axis``: those of ticks inside its view."""
    low, high = sorted(axis.get_view_interval())
    slack = (high - low) * 1e-9
    return [(label.get_text(), label.get_window_extent(renderer))
            for location, tick in zip(axis.get_majorticklocs(), axis.get_major_ticks())
            if low - slack <= location <= high + slack
            for label in (tick.label1, tick.label2) if label.get_visible() and label.get_text()]


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
        assert colours == {to_rgba(report_figures.strategy_colour(name))}, name
    for op in OPERATORS.values():  # distinct within an operator
        colours = [report_figures.strategy_colour(name) for name in op.strategies]
        assert len(set(colours)) == len(colours), op.name
    # A colour must not depend on the process (Python's str hash is salted per process): the
    # dashboard draws history figures in runs months apart.
    code = ("import impls; from harness.presenting.report import figures; "
            "print(figures.strategy_colour('not-registered'), figures.strategy_colour('numba_fused'))")
    colours = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                              env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout.strip() for seed in (1, 2, 3)}
    assert colours == {f"{report_figures.strategy_colour('not-registered')} "
                       f"{report_figures.strategy_colour('numba_fused')}"}


def test_titles_stay_inside_the_figure(tmp_path, drawn):
    long_machine = "Intel(R) Xeon(R) Platinum 8480+ engineering sample with a remarkably long model string"
    root = tmp_path / "results"
    fixture_run(root / "a", machine_cpu=long_machine)
    fixture_run(root / "b", machine_cpu=long_machine, start_time="2026-11-23T00:00:00+00:00")
    report.build([root / "b"], tmp_path / "out")
    build_dashboard(root, tmp_path / "site", with_reports=False)
    assert len(drawn) >= 3  # the report's time and scaling figures
    for fig in drawn:
        assert any(title for title, _ in fig.title_boxes)
        for title, box in fig.title_boxes:
            assert box.x0 >= 0 and box.x1 <= fig.width_px + 0.5, title


def test_gbps_axis_holds_every_bar_and_the_ceiling(tmp_path, drawn):
    # in cache: 3x the copy ceiling of 20 GB/s
    run = fixture_run(tmp_path / "run", row_fields={"torch_max_pool2d_indices": {"gbps": 60.0}})
    rows, _ = load([run])  # the report no longer draws it (issue 41: its table says as much); the dashboard's kind
    for _, group in rows.groupby("params"):
        report_figures.figure_gbps(group, report_figures.FigureDir(tmp_path / "figures", svg=False), "gbps")
    charts = [ax for fig in drawn for ax in fig.axes if "GB/s" in ax.get_xlabel()]
    assert charts
    for ax in charts:
        right = max(bar.get_x() + bar.get_width() for bar in ax.patches if bar.get_height() > 0)
        assert right >= 60.0 and ax.get_xlim()[1] > right


def test_rows_without_quartiles_fall_back_to_half_the_iqr_but_never_below_the_fastest_sample(tmp_path, drawn):
    # rows written before the quartiles were stored: median 20 ms, IQR 4 ms, fastest sample 10 ms
    run = fixture_run(tmp_path / "run", row_fields={"seed_loops": {"median_s": 0.02, "iqr_s": 0.004},
                                                    "numpy_sliding_window": {"iqr_s": 0.01}})
    # Drawn directly: a run this noisy is unfit, so the report draws no case figures for it.
    rows, _metas = report_load.load([run])
    for stem, (_, group) in enumerate(rows.groupby("params", sort=False)):
        report_figures.figure_times(group, report_figures.FigureDir(tmp_path / "figures"), f"case{stem}")
    spans = set()
    for fig in drawn:
        for ax in fig.axes:
            if ax.get_xlabel().startswith("median time"):
                spans |= {tuple(round(x, 6) for x in span) for span in _error_bars(ax).values()}
    assert (0.018, 0.022) in spans
    # numpy_sliding_window: median 1 ms, IQR 10 ms, fastest 1 ms: median − IQR/2 is below zero, the bar stops at 1 ms
    assert (0.001, 0.006) in spans


def _error_bars(ax) -> dict:
    """{bar position: (low, high)} of the error bars drawn on a horizontal bar chart."""
    found = {}
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            (x0, y), (x1, _) = container.lines[2][0].get_segments()[0]
            found[round(y)] = (x0, x1)
    return found


def _by_name(ax, found: dict) -> dict:
    names = {round(position): text.get_text() for position, text in zip(ax.get_yticks(), ax.get_yticklabels())}
    return {names[position]: value for position, value in found.items()}


def _case(op: str, entries, fields=None, params=None) -> pd.DataFrame:
    """One case as the report's rows: (strategy, backend, median) entries, their
    statistics from five equal samples unless ``fields`` (strategy -> columns) say otherwise."""
    rows = []
    slowest = max(median for _, _, median in entries)
    for name, backend, median in entries:
        row = {"op": op, "strategy": name, "backend": backend, "status": "ok", "source": "added",
               "params": json.dumps(params or {"N": 1, "C": 1, "H": 8, "W": 8, "k": 2}),
               "machine": "cpu: Fixture CPU, 2 cores, 2 threads per library", "dtype": "float32", "device": "cpu",
               **metrics.TIMING.compute(np.full(5, median)), "bytes": 1e6, "ceiling_gbps": 20.0,
               "floor_s": 1e6 / 20e9, "rel_err": 0.0, "xcheck_s": math.nan}
        row.update((fields or {}).get(name, {}))
        row.update(gbps=row["bytes"] / row["median_s"] / 1e9, pct_of_ceiling=100 * row["floor_s"] / row["median_s"],
                   speedup=slowest / row["median_s"])
        rows.append(row)
    return pd.DataFrame(rows)


def _skewed_samples() -> np.ndarray:
    """A heavily right-skewed sample: most calls fast, a long tail of slow ones."""
    return np.concatenate([np.full(40, 185e-6), 185e-6 * np.exp(np.random.default_rng(0).exponential(2.0, 60))])


def test_error_bars_span_the_quartiles_of_a_skewed_sample(tmp_path, drawn):
    samples = _skewed_samples()
    stats = metrics.TIMING.compute(samples)
    q1, q3, fastest = np.percentile(samples, 25), np.percentile(samples, 75), samples.min()
    # the premise: median ± IQR/2 reaches below the fastest sample here
    assert stats["median_s"] - stats["iqr_s"] / 2 < fastest
    group = _case("maxpool2d", [("seed_loops", "numpy", 1.0), ("torch_max_pool2d_indices", "torch", 1e-4),
                                ("numba_fused", "numba", 1e-5)], {"seed_loops": stats})
    where = report_figures.FigureDir(tmp_path, svg=False)
    report_figures.figure_times(group, where, "time")
    report_figures.figure_gbps(group, where, "gbps")
    report_figures.figure_speedup(group, where, "speedup", "seed_loops")
    times, gbps, speedup = (_by_name(fig.axes[0], _error_bars(fig.axes[0]))["seed_loops"] for fig in drawn)
    assert times == pytest.approx((q1, q3))
    assert times[0] >= fastest
    row = group.set_index("strategy").loc["seed_loops"]
    # GB/s and speedups are inversely proportional to the time: Q3 gives their low end, Q1 their high
    assert gbps == pytest.approx((row["gbps"] * row["median_s"] / q3, row["gbps"] * row["median_s"] / q1))
    assert speedup == pytest.approx((row["speedup"] * row["median_s"] / q3, row["speedup"] * row["median_s"] / q1))


def _clip_marks(ax) -> list:
    return [line for line in ax.get_lines() if line.get_gid() == report_figures.CLIP_MARK]


def _notes(fig) -> list[str]:
    """The notes column's texts (the twin axis right of the bars)."""
    return [label.get_text() for ax in fig.axes[1:] for label in ax.get_yticklabels()]


def test_a_far_off_whisker_neither_moves_the_axis_nor_goes_unmarked(tmp_path, drawn):
    entries = [("seed_loops", "numpy", 1e-2), ("torch_max_pool2d_indices", "torch", 1e-4),
               ("numba_fused", "numba", 1e-5)]
    median = 1e-2
    far = {"seed_loops": {"q3_s": 100 * median, "max_s": 200 * median},  # a time whisker at 100x its median
           "numba_fused": {"q1_s": 1e-7, "min_s": 1e-7}}  # a GB/s and speedup whisker at 100x theirs
    where = report_figures.FigureDir(tmp_path, svg=False)
    for fields, suffix in ((None, "plain"), (far, "far")):
        group = _case("maxpool2d", entries, fields)
        report_figures.figure_times(group, where, f"time-{suffix}")
        report_figures.figure_gbps(group, where, f"gbps-{suffix}")
        report_figures.figure_speedup(group, where, f"speedup-{suffix}", "seed_loops")
    plain, far_off = drawn[:3], drawn[3:]
    # The time axis gets both: the seed's Q3 past its right edge, numba_fused's Q1 past its left; GB/s
    # only numba_fused's (its Q1 is its top GB/s); the speedups both (the seed's Q3 is its lowest speedup).
    for quiet, stretched, sides in zip(plain, far_off, ({"<", ">"}, {">"}, {"<", ">"})):
        assert stretched.axes[0].get_xlim() == pytest.approx(quiet.axes[0].get_xlim())  # the axis did not move
        assert not _clip_marks(quiet.axes[0])
        left, right = stretched.axes[0].get_xlim()
        marks = {line.get_marker(): line.get_xdata()[0] for line in _clip_marks(stretched.axes[0])}
        assert set(marks) == sides  # each whisker past an edge is marked there...
        assert marks.get(">", right) == pytest.approx(right) and marks.get("<", left) == pytest.approx(left)
        ends = list(_error_bars(stretched.axes[0]).values())
        assert max(high for _, high in ends) == pytest.approx(right)  # ...and drawn to it, no further
        assert min(low for low, _ in ends) == pytest.approx(left if "<" in sides else min(low for low, _ in ends))
        assert min(low for low, _ in ends) >= left * (1 - 1e-9)
    times, gbps, speedup = far_off
    assert any(f"whisker › {fmt_time(100 * median)}" in note for note in _notes(times))  # the value, in words
    numba = _case("maxpool2d", entries, far).set_index("strategy").loc["numba_fused"]
    assert any(f"whisker › {fmt_ratio(numba['speedup'] * 100)}" in note for note in _notes(speedup))
    assert any("whisker › " in note and "GB/s" in note for note in _notes(gbps))


def test_a_far_off_band_does_not_stretch_a_scaling_figure(tmp_path, drawn):
    """The scaling figure's Q1–Q3 bands: one whose Q3 sits at 100× its
    median is cut at the axis's top and marked there; the axis is the one
    the same runs draw without it."""
    def sized(fields):
        frames = []
        for size in (16, 64, 256):
            entries = [("seed_loops", "numpy", 1e-5 * size), ("numba_fused", "numba", 1e-7 * size)]
            frame = _case("maxpool2d", entries, fields if size == 64 else None,
                          params={"N": 1, "C": 1, "H": size, "W": size, "k": 2})
            frames.append(frame.assign(bytes=1e4 * size, floor_s=5e-9 * size))
        return pd.concat(frames, ignore_index=True)

    where = report_figures.FigureDir(tmp_path, svg=False)
    far = {"seed_loops": {"q3_s": 100 * 1e-5 * 64, "max_s": 200 * 1e-5 * 64}}
    assert report_figures.figure_scaling(sized(None), where, "plain", "plain")
    assert report_figures.figure_scaling(sized(far), where, "far", "far")
    quiet, stretched = drawn[0].axes[0], drawn[1].axes[0]
    assert stretched.get_ylim() == pytest.approx(quiet.get_ylim()) and not _clip_marks(quiet)
    (mark,) = _clip_marks(stretched)
    assert mark.get_marker() == "^" and mark.get_ydata()[0] == pytest.approx(stretched.get_ylim()[1])
    top = max(path.vertices[:, 1].max() for band in stretched.collections for path in band.get_paths())
    assert top <= stretched.get_ylim()[1] * (1 + 1e-9)


def test_one_strategy_has_one_colour_in_two_operators_figures(tmp_path, drawn):
    where = report_figures.FigureDir(tmp_path, svg=False)
    maxpool = _case("maxpool2d", [("numba_fused", "numba", 1e-5), ("seed_loops", "numpy", 1e-2),
                                  ("torch_max_pool2d_indices", "torch", 1e-4)])
    dispersion = _case("dispersion", [("numba_fused", "numba", 2e-5), ("seed_loop", "numpy", 1e-2),
                                      ("torch_fold", "torch", 1e-4), ("jax_conv", "jax", 3e-4)],
                       params={"B": 2, "C": 4, "H": 8, "W": 8, "S": 2})
    # numba_fused sorts third among maxpool2d's and dispersion's strategies but second among maxunpool's:
    # a colour taken from the operator's own list changed between them
    maxunpool = _case("maxunpool", [("numba_fused", "numba", 1e-5), ("numpy_seed_row_loop", "numpy", 1e-2),
                                    ("jax_at_set", "jax", 1e-4)],
                      params={"form": "1d", "B": 2, "F": 3, "L": 4, "f": 5})
    report_figures.figure_times(maxpool, where, "maxpool")
    report_figures.figure_times(dispersion, where, "dispersion")
    report_figures.figure_times(maxunpool, where, "maxunpool")
    drawn_colours = [_bar_colours(fig.axes[0]) for fig in drawn]
    assert {colours["numba_fused"] for colours in drawn_colours} == {
        to_rgba(report_figures.strategy_colour("numba_fused"))}
    for colours in drawn_colours:
        assert len(set(colours.values())) == len(colours)  # and distinct within each figure
    # numba_fused and triton_fused are registered for several operators: each has one colour for all of them
    shared = [name for name in {n for op in OPERATORS.values() for n in op.strategies}
              if sum(name in op.strategies for op in OPERATORS.values()) > 1]
    assert "numba_fused" in shared


def test_long_labels_stay_inside_the_figure_and_tick_labels_never_overlap(tmp_path, drawn):
    """Long strategy and machine names, a speedup axis over eight decades, a
    note on every bar: every text drawn inside the figure, as the renderer
    measures it, and no two tick labels of an axis overlapping."""
    long_names = [f"strategy_with_a_remarkably_long_descriptive_name_{i}_{'x' * 12}" for i in range(3)]
    entries = [(long_names[0], "numpy", 10.0), (long_names[1], "torch", 1e-2), (long_names[2], "numba", 1e-6),
               ("seed_loops", "numpy", 1e-4)]
    fields = {long_names[1]: {"iqr_s": 5e-3, "q1_s": 9e-3, "q3_s": 1.4e-2, "status": "inexact", "rel_err": 1e-3},
              long_names[0]: {"q3_s": 1e3}}
    group = _case("maxpool2d", entries, fields)
    group["machine"] = "cpu: Intel(R) Xeon(R) Platinum 8480+ engineering sample with a remarkably long model string ×2"
    failed = group.iloc[:1].assign(strategy="a_failed_strategy_with_another_very_long_name_indeed", status="mismatch",
                                   median_s=math.nan)
    where = report_figures.FigureDir(tmp_path, svg=False)
    report_figures.figure_times(pd.concat([group, failed], ignore_index=True), where, "time")
    report_figures.figure_gbps(group, where, "gbps")
    report_figures.figure_speedup(group, where, "speedup", "seed_loops")
    sizes = [{"N": 1, "C": 1, "H": h, "W": h, "k": 2} for h in (8, 64, 512, 4096)]
    scaling = pd.concat([_case("maxpool2d", entries, params=p).assign(bytes=10.0 ** (3 + 2 * i))
                         for i, p in enumerate(sizes)], ignore_index=True)
    report_figures.figure_scaling(scaling, where, "scaling", "maxpool2d scaling · " + group["machine"].iloc[0])
    assert len(drawn) == 4
    speedup_ticks = drawn[2].tick_boxes[(0, "x")]
    assert len(speedup_ticks) >= 3  # thinned, not emptied
    for fig in drawn:
        box = fig.drawn_box
        assert box.x0 >= -0.5 and box.y0 >= -0.5 and box.x1 <= fig.bbox.width + 0.5 and box.y1 <= fig.bbox.height + 0.5
        for axis, labels in fig.tick_boxes.items():
            for (text, extent), (other, other_extent) in zip(labels, labels[1:]):
                assert not extent.shrunk(0.98, 0.98).overlaps(other_extent), (axis, text, other)
            for text, _ in labels:
                assert "e+" not in text and "e-" not in text, (axis, text)


def test_line_styles_follow_the_registrys_baseline_flag_and_say_so(tmp_path, drawn, monkeypatch):
    """A plugin's baseline whose source is no seed's is drawn as the baseline,
    and the legend says what each style means."""
    strategies = {"naive_loops": SimpleNamespace(baseline=True, seed=False),
                  "vectorised": SimpleNamespace(baseline=False, seed=False)}
    monkeypatch.setitem(OPERATORS, "avgpool2d", SimpleNamespace(name="avgpool2d", baseline="naive_loops",
                                                                strategies=strategies))
    where = report_figures.FigureDir(tmp_path, svg=False)
    sizes = [{"N": 1, "C": 1, "H": h, "W": h, "k": 2} for h in (8, 16, 32)]
    plugin = pd.concat([_case("avgpool2d", [("naive_loops", "numpy", 1e-3 * h), ("vectorised", "numpy", 1e-5 * h)],
                              {"naive_loops": {"source": "example: the naive original"}}, params=p)
                        .assign(bytes=1e3 * h) for h, p in zip((1, 4, 16), sizes)], ignore_index=True)
    report_figures.figure_scaling(plugin, where, "plugin", "avgpool2d scaling")
    seeds = pd.concat([_case("maxpool2d", [("seed_loops", "numpy", 1e-3 * h), ("seed_reshape_max", "numpy", 1e-4 * h),
                                           ("numba_fused", "numba", 1e-5 * h)], params=p).assign(bytes=1e3 * h)
                       for h, p in zip((1, 4, 16), sizes)], ignore_index=True)
    report_figures.figure_scaling(seeds, where, "seeds", "maxpool2d scaling")
    thick, solid, dashed = (report_figures.LINE_STYLE[kind] for kind in ("baseline", "seed", "added"))

    def styles(fig):
        return {line.get_label().rsplit(" (", 1)[0]: (line.get_linestyle(), line.get_linewidth())
                for line in fig.axes[0].get_lines()}

    def legend_title(fig):
        return fig.legends[0].get_title().get_text().replace("\n", " ")

    plugin_fig, seeds_fig = drawn
    assert styles(plugin_fig)["naive_loops"] == thick and styles(plugin_fig)["vectorised"] == dashed
    assert thick[1] > solid[1]
    title = legend_title(plugin_fig)
    assert "the baseline, naive_loops" in title and "seeds" not in title and "dashed" in title
    found = styles(seeds_fig)
    assert found["seed_loops"] == thick and found["seed_reshape_max"] == solid and found["numba_fused"] == dashed
    assert "the baseline, seed_loops" in legend_title(seeds_fig) and "seeds' other strategies" in legend_title(seeds_fig)


def test_speedups_and_percentages_print_without_exponents(tmp_path, drawn):
    # the seed 5,760x slower; torch_max_pool2d_indices at 1,420 % of the ceiling (a case in cache)
    run = fixture_run(tmp_path / "run", row_fields={"seed_loops": {"median_s": 0.576},
                                                    "torch_max_pool2d_indices": {"pct_of_ceiling": 1420.4}})
    md = report.build([run], tmp_path / "out").read_text()
    rows, _ = load([run])
    for _, group in rows.groupby("params"):
        report_figures.figure_speedup(group, report_figures.FigureDir(tmp_path / "figures", svg=False), "speedup",
                                      "seed_loops")
    texts = [text.get_text() for fig in drawn for ax in fig.axes
             for text in ax.texts + ax.get_yticklabels() + ax.get_xticklabels()]
    assert any("5,760×" in text for text in texts)  # 0.576 s / 0.1 ms
    assert any("1,420 % of ceiling" in text for text in texts)
    assert "5,760×" in md and "1,420 %" in md
    assert "e+03" not in md and not any("e+03" in text for text in texts)
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
