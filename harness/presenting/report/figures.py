"""The report's figures, also drawn by the dashboard and ``scatterbench.bench``:
one function per figure, each writing PNG (and SVG) and returning its stem.
Colours, labels, error bars and axes are shared so every figure reads alike:

- a strategy has one colour in every figure of the report and the dashboard
  (``strategy_colour``);
- error bars span the samples' first to third quartile (``quartiles``), never
  below the fastest sample;
- an axis holds the bars and its reference lines, never a whisker: a whisker
  past the axis's room is drawn to the edge, marked "›" and its value written
  beside the bar (``axis_limits``, ``_bars``);
- tick labels are thinned until they do not overlap (``ReadableLogLocator``),
  long labels are wrapped, notes sit in a column of their own right of the
  plot and legends below it, where a long one cannot run over a bar.
"""

from __future__ import annotations

import functools
import io
import json
import math
import os
import re
import sys
import textwrap
import zlib
from dataclasses import dataclass
from pathlib import Path

import matplotlib

# Headless by default (report.py, the dashboard, CI), but never over a backend
# someone chose: bench() draws with these helpers in a notebook's own backend.
if "MPLBACKEND" not in os.environ and "matplotlib.pyplot" not in sys.modules:
    matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.font_manager import FontProperties  # noqa: E402
from matplotlib.textpath import text_to_path  # noqa: E402
from matplotlib.ticker import FuncFormatter, Locator, NullLocator  # noqa: E402
from PIL import Image  # noqa: E402

from harness.base.cases import CASE_DEFAULTS, POINT_LAYOUT_KEY  # noqa: E402
from harness.base.format import fmt_plain, fmt_ratio, fmt_time, slug  # noqa: E402
from harness.judging import analysis  # noqa: E402
from harness.judging.analysis import finite, unstable  # noqa: E402
from harness.presenting.report.load import case_title  # noqa: E402
from harness.results import floors  # noqa: E402
from impls.backends import BACKENDS  # noqa: E402
from impls.status import INEXACT  # noqa: E402

FIGURE_WIDTH_IN, DPI = 8.0, 100  # every PNG is 800 px wide
NOTE_SIZE = 8  # points: tick labels of the bars, their notes, legends

# Text from result files (strategy names, messages, machine names) goes into a
# figure through ``label``: matplotlib reads "$...$" as mathtext, and an
# unknown command there ("$\oops$") fails every figure that shows it. An
# escaped dollar ("\$") is drawn as a plain "$". (Mathtext cannot be switched
# off for the whole figure: the log axes' tick labels are mathtext.)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _plain(text, limit: int) -> str:
    """One line, no control characters, at most ``limit`` characters."""
    text = " ".join(_CONTROL.sub(" ", str(text)).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _escaped(text: str) -> str:
    # After any wrapping: a line break between "\\" and "$" would unescape the dollar.
    return text.replace("$", "\\$")


def label(text, limit: int = 60) -> str:
    """Text from a result file as a figure label, drawn as written: one line,
    no control characters, at most ``limit`` characters, every "$" escaped."""
    return _escaped(_plain(text, limit))


def wrapped_label(text, width: int = 30, lines: int = 2) -> str:
    """``label`` over at most ``lines`` lines of ``width`` characters (a bar's
    name, a note): a long name would otherwise squeeze the plot or run off
    the figure. What does not fit ends in "…"."""
    one_line = _plain(text, width * lines + 20)
    parts = textwrap.wrap(one_line, width, break_long_words=True, break_on_hyphens=False) or [one_line]
    if len(parts) > lines:
        parts = parts[:lines]
        parts[-1] = parts[-1][: width - 1] + "…"
    return _escaped("\n".join(parts))


def backend_colour(name: str) -> str:
    backend = BACKENDS.get(name)
    return backend.colour if backend else "grey"


# ------------------------------------------------------------------ colours
# One colour per strategy in every figure of the report and the dashboard.
# Qualitative, distinguishable on white, no black (the floor and ceiling lines
# are black): tab10, then Dark2 and deeper hues, no pale one. 24 colours:
# more than the strategies of any one operator (19 at most today), so the
# strategies drawn together always get distinct ones.
PALETTE = (  # tab10's hues, then Dark2's and deeper ones: every colour reads on white beside any other
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#000075", "#800000", "#469990",
    "#f032e6", "#4d4d4d", "#0b6e4f", "#b8860b")


def _hashed(name: str) -> int:
    # crc32, not hash(): Python salts str hashes per process, and the dashboard
    # draws a strategy's history in runs months apart.
    return zlib.crc32(name.encode())


@functools.lru_cache(maxsize=8)
def _colours(registry: tuple[tuple[str, ...], ...]) -> dict[str, str]:
    """{strategy name: colour} over every operator's strategies (``registry``:
    each operator's names). A name takes the palette colour its hash points
    at, or the next one that no strategy sharing an operator with it took
    before it (names in sorted order): a strategy keeps its colour across
    operators (numba_fused is one colour in maxpool2d's figures and in
    dispersion's), two strategies of one operator never share one, and a
    strategy added to the registry moves only the colours it collides with."""
    neighbours: dict[str, set[str]] = {}
    for names in registry:
        for name in names:
            neighbours.setdefault(name, set()).update(names)
    taken: dict[str, int] = {}
    for name in sorted(neighbours):
        used = {taken[other] for other in neighbours[name] if other in taken and other != name}
        start = _hashed(name) % len(PALETTE)
        taken[name] = next((index % len(PALETTE) for index in range(start, start + len(PALETTE))
                            if index % len(PALETTE) not in used), start)
    return {name: PALETTE[index] for name, index in taken.items()}


def strategy_colour(name: str) -> str:
    """The strategy's colour, the same in every figure and every operator:
    the one function every figure and the dashboard take colours from. A name
    the registry does not know (a removed strategy, an unloaded plugin's)
    takes its hash's colour, stable from one process to the next."""
    from impls.registry import OPERATORS

    colours = _colours(tuple(tuple(sorted(op.strategies)) for _, op in sorted(OPERATORS.items())))
    return colours.get(name) or PALETTE[_hashed(name) % len(PALETTE)]


# ------------------------------------------------------------------ text
def wrap(text: str, width_in: float, fontsize: float = 9) -> str:
    """Lines that fit ``width_in`` inches at ``fontsize`` points (a long
    machine name would otherwise run off the figure)."""
    chars = max(20, int(width_in * 72 / (0.62 * fontsize)))
    return "\n".join(textwrap.wrap(text, chars, break_long_words=True, break_on_hyphens=False)) or text


def set_title(ax, text: str, width_in: float = FIGURE_WIDTH_IN, fontsize: float = 9) -> None:
    """The figure's title, centred on the figure (an axes title is centred on
    the axes, which long tick labels push right) and wrapped to its width."""
    ax.figure.suptitle(_escaped(wrap(_plain(text, 300), width_in - 0.4, fontsize)), fontsize=fontsize)


def set_xlabel(ax, text: str, fontsize: float = 9) -> None:
    """The axis's label, wrapped to well inside the figure (centred under a
    plot that the bars' names and notes leave about half the figure to)."""
    ax.set_xlabel(_escaped(wrap(text, FIGURE_WIDTH_IN - 3, fontsize)), fontsize=fontsize)


@functools.lru_cache(maxsize=4096)
def text_width_pt(text: str, fontsize: float) -> float:
    """The drawn width of ``text`` (its widest line) in points, from the
    font's metrics: the same for the PNG and the SVG renderer, and cached (a
    figure's layout asks for its tick labels' widths many times over)."""
    font = FontProperties(size=fontsize)
    return max((text_to_path.get_text_width_height_descent(line, font, ismath=False)[0]
                for line in text.split("\n") if line), default=0.0)


def _bytes_text(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"


AXIS_TEXT = {"time": fmt_time, "ratio": fmt_ratio, "bytes": _bytes_text, "count": fmt_plain}


class ReadableLogLocator(Locator):
    """Log ticks whose labels never overlap: 1-1.5-2-3-5-7 steps over a
    narrow range, 1-2-5 over a wider one, decades over a wide one, then every
    2nd, 3rd, ... decade until each label (``AXIS_TEXT[kind]``, as drawn at
    the axis's font size) clears its neighbours on the axis as laid out.
    matplotlib's LogLocator picks a tick count without looking at the labels:
    "10,000×100,000×1,000,000×" ran together."""

    STEPS = ((1.0, 1.5, 2.0, 3.0, 5.0, 7.0), (1.0, 2.0, 5.0), (1.0, 2.0), (1.0,))
    GAP_EM = 1.0  # the least space between two labels, in the labels' font size

    def __init__(self, kind: str):
        self.kind = kind

    def __call__(self):
        low, high = self.axis.get_view_interval()
        return self.tick_values(low, high)

    def candidates(self, low: float, high: float):
        """Tick sets from the densest to the sparsest."""
        first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
        decades = math.log10(high / low)
        steps = self.STEPS[0 if decades <= 0.8 else 1 if decades <= 3 else 3:]

        def inside(values):
            return [v for v in values if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)]

        for subs in steps:
            yield inside([s * 10.0 ** d for d in range(first, last + 1) for s in subs])
        for stride in range(2, max(2, last - first) + 1):
            yield inside([10.0 ** d for d in range(first, last + 1) if d % stride == 0])

    def fits(self, ticks: list[float]) -> bool:
        """Whether the labels of ``ticks`` clear each other on the axis as laid out now."""
        axis = self.axis
        if axis is None or getattr(axis, "axes", None) is None or len(ticks) < 2:
            return True
        horizontal = axis.axis_name == "x"
        fontsize = FontProperties(size=matplotlib.rcParams[f"{axis.axis_name}tick.labelsize"]).get_size_in_points()
        dpi = axis.figure.dpi
        transform = axis.get_transform()
        low, high = axis.get_view_interval()
        scaled = np.asarray(transform.transform(np.reshape([low, high] + list(ticks), (-1, 1)))).ravel()
        length = axis.axes.bbox.width if horizontal else axis.axes.bbox.height
        where = (scaled[2:] - scaled[0]) / (scaled[1] - scaled[0]) * length
        if horizontal:
            sizes = [text_width_pt(AXIS_TEXT[self.kind](t), fontsize) * dpi / 72 for t in ticks]
        else:
            sizes = [1.2 * fontsize * dpi / 72] * len(ticks)
        gap = self.GAP_EM * fontsize * dpi / 72
        return all(b - a >= (sa + sb) / 2 + gap for a, b, sa, sb in zip(where, where[1:], sizes, sizes[1:]))

    def tick_values(self, vmin, vmax):
        low, high = sorted((vmin, vmax))
        if not (0 < low < high and math.isfinite(high)):
            return []
        chosen: list[float] = []
        for ticks in self.candidates(low, high):
            if len(ticks) < 2 and chosen:
                break  # thinner would leave fewer than two labels: keep the last with two
            chosen = ticks
            if self.fits(ticks):
                break
        return chosen


def log_axis(axis, kind: str) -> None:
    """A log axis labelled in plain units ("10 µs", "100×", "1 MB") at ticks
    whose labels do not overlap, with no unlabelled minor ticks. Readable,
    and a third cheaper to draw than matplotlib's mathtext labels and minor
    ticks."""
    axis.set_major_locator(ReadableLogLocator(kind))
    axis.set_major_formatter(FuncFormatter(lambda value, _: AXIS_TEXT[kind](value) if value > 0 else ""))
    axis.set_minor_locator(NullLocator())


# ------------------------------------------------------------------ error bars and axes
def _value(row, column: str) -> float:
    value = row.get(column, math.nan) if hasattr(row, "get") else math.nan
    return float(value) if finite(value) else math.nan


# A row's error bar is its spread, the one the tie rule compares (Q1-Q3).
quartiles = analysis.spread


# An axis is set by what the figure is about, the bars (medians, GB/s,
# speedups) and its reference lines (floor, ceiling, 1×), never by a whisker:
# one far-off whisker stretched a GB/s axis to 200 GB/s and squeezed every bar
# into its left 3 %. The axis leaves room for whiskers up to 10× past the
# extreme bars on a log axis, a decade each side (a Q3 at 10× its median is an
# IQR of 9 medians, ninety times what marks a case unstable: such a whisker
# says "unstable", its length to scale says nothing more; a right-skewed
# sample's Q3 at 3× its median, common on a busy machine, is still drawn
# whole), and 30 % past the longest bar on a linear one (the bars keep three
# quarters of the width). A longer whisker is drawn to the edge, marked there
# "›" (or "‹"), and its value is written beside its bar.
WHISKER_ROOM_LOG = 10.0
WHISKER_ROOM_LINEAR = 1.3


def axis_limits(values, references=(), log: bool = True) -> tuple[float, float]:
    """(low, high) of a bar chart's value axis from its bars and reference lines only."""
    held = [v for v in list(values) + list(references) if finite(v) and (v > 0 or not log)]
    if not held:
        return (1e-9, 1.0) if log else (0.0, 1.0)
    if log:
        return min(held) / WHISKER_ROOM_LOG, max(held) * WHISKER_ROOM_LOG
    return min(0.0, min(held)), max(held) * WHISKER_ROOM_LINEAR


CLIP_MARK = "whisker-clipped"  # the gid of the marks at the axis's edge, for whoever inspects a figure


def clip_spreads(bounds, limits) -> tuple[list[float], list[float], list[tuple[bool, bool]]]:
    """Each (low, high) spread cut to the axis's ``limits``: the lows, the
    highs, and per spread whether it was cut below and above (to be marked
    at that edge). The scaling figures' bands and bench()'s bars use it."""
    bottom, top = limits
    return ([min(max(lo, bottom), top) for lo, _ in bounds], [max(min(hi, top), bottom) for _, hi in bounds],
            [(lo < bottom, hi > top) for lo, hi in bounds])


def _bars(ax, group: pd.DataFrame, positions, values, low, high, limits, text) -> list[str]:
    """Horizontal bars in each strategy's colour, outlined in its backend's,
    hatched when inexact, with error bars from ``low`` to ``high`` clipped to
    ``limits`` (the value axis's). Returns, per bar, the note on what was
    clipped ("whisker › 2.1 s", ``text`` writing the value), or ""."""
    left, right = limits
    notes = []
    for position, (_, row), value, lo, hi in zip(positions, group.iterrows(), values, low, high):
        inexact = row["status"] == INEXACT
        ax.barh(position, value, color=strategy_colour(row["strategy"]),
                edgecolor=backend_colour(row["backend"]), linewidth=2, hatch="//" if inexact else None)
        clipped = []
        if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
            # min/max with the value: a bar inverted from the time (GB/s) can land a rounding off its ends
            shown_lo, shown_hi = min(max(lo, left), value), max(min(hi, right), value)
            ax.errorbar(value, position, xerr=[[value - shown_lo], [shown_hi - value]], fmt="none",
                        ecolor="black", elinewidth=1, capsize=3)
            for beyond, edge, marker, arrow in ((lo < left, left, "<", "‹"), (hi > right, right, ">", "›")):
                if beyond:
                    ax.plot([edge], [position], linestyle="none", marker=marker, markersize=7, color="black",
                            clip_on=False, gid=CLIP_MARK, label="_clipped")
                    clipped.append(f"whisker {arrow} {text(lo if marker == '<' else hi)}")
        notes.append(" · ".join(clipped))
    ax.set_xlim(left, right)  # barh and errorbar autoscale: the limits are the chart's, not theirs
    return notes


def _notes(ax, positions, notes) -> None:
    """Each bar's note in a column right of the plot, level with its bar
    (tick labels of a twin axis): a note drawn in the plot ran under the
    legend and was cut at the axes' edge ("· unsta")."""
    if not any(notes):
        return
    column = ax.twinx()
    column.set_ylim(ax.get_ylim())
    column.set_yticks(list(positions), [wrapped_label(note, 34, 3) if note else "" for note in notes],
                      fontsize=NOTE_SIZE)
    column.tick_params(axis="y", length=0)


def _legend(fig, handles, texts, title: str, fontsize: float = NOTE_SIZE) -> None:
    """Below the plot (never over a bar, a line or a note), in as many
    columns as the figure's width holds."""
    if not handles:
        return
    widest = max(text_width_pt(text, fontsize) for text in texts) + 3.5 * fontsize  # the handle and its gap
    columns = max(1, min(len(texts), int((FIGURE_WIDTH_IN * 72 - 30) // widest)))
    fig.legend(handles, texts, loc="outside lower center", ncol=columns, fontsize=fontsize,
               title=_escaped(wrap(title, FIGURE_WIDTH_IN - 0.6, fontsize)), title_fontsize=fontsize)


def _backend_handles(backends):
    return [plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor=backend_colour(b), linewidth=2)
            for b in backends], [label(b) for b in backends]


def _bar_figure(rows: int):
    return plt.subplots(figsize=(FIGURE_WIDTH_IN, 1.9 + 0.34 * max(rows, 1)), layout="constrained")


def _name_ticks(ax, positions, names) -> None:
    ax.set_yticks(list(positions), [wrapped_label(name) for name in names], fontsize=NOTE_SIZE)


@dataclass(frozen=True)
class FigureDir:
    """Where figures go, and whether an SVG is written beside each PNG."""
    path: Path
    svg: bool = True


def save(fig, figures: FigureDir, stem: str) -> str:
    figures.path.mkdir(parents=True, exist_ok=True)
    # No date, and SVG ids from the figure's own name: the same data makes the
    # same files, so re-publishing unchanged runs leaves docs/ unchanged.
    drawn = io.BytesIO()
    fig.savefig(drawn, format="png", dpi=DPI, metadata={"Software": None})
    # A palette of 256 colours, optimised: a line plot has few colours and their anti-aliasing, and
    # a third of the bytes (126 figures of docs/ took 9.7 MB as RGBA, over their 8 MiB budget).
    drawn.seek(0)
    with Image.open(drawn) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
            figures.path / f"{stem}.png", format="PNG", optimize=True)
    if figures.svg:
        with plt.rc_context({"svg.hashsalt": stem}):
            fig.savefig(figures.path / f"{stem}.svg", metadata={"Date": None})
    plt.close(fig)
    return stem


# ------------------------------------------------------------------ per case
BARS_TEXT = "error bars: first to third quartile of the samples"


def figure_times(group: pd.DataFrame, figures: FigureDir, stem: str) -> str:
    """Median time per strategy on a log axis, sorted, with Q1–Q3 error bars
    and % of ceiling beside each bar; failed strategies listed at the bottom
    with their status, not dropped."""
    timed = group[group["median_s"].notna()].sort_values("median_s", ascending=False)
    failed = group[group["median_s"].isna()]
    fig, ax = _bar_figure(len(timed) + len(failed))
    names = [f"{row['strategy']}  [{row['status']}]" for _, row in failed.iterrows()] + list(timed["strategy"])
    offset = len(failed)
    positions = list(range(offset + len(timed)))
    bounds = [quartiles(row) for _, row in timed.iterrows()]
    floor = group["floor_s"].dropna()
    ax.set_xscale("log")
    # The independent timer's median (CUDA: triton.testing.do_bench) is data too: the axis holds it.
    xcheck = [(row["xcheck_s"], position) for position, (_, row) in zip(positions[offset:], timed.iterrows())
              if finite(row["xcheck_s"]) and row["xcheck_s"] > 0]
    limits = axis_limits(list(timed["median_s"]) + [x for x, _ in xcheck], floor.iloc[:1])
    clipped = _bars(ax, timed, positions[offset:], timed["median_s"], [lo for lo, _ in bounds],
                    [hi for _, hi in bounds], limits, fmt_time)
    notes = [""] * offset
    for (_, row), clip in zip(timed.iterrows(), clipped):
        pct = row["pct_of_ceiling"]
        note = [f"{floors.ceiling_cell(pct)} of ceiling"] if finite(pct) else []
        if row["status"] == INEXACT:
            note.append(f"inexact {row['rel_err']:.1g}")
        if unstable(row):
            note.append("unstable")
        notes.append(" · ".join(note + ([clip] if clip else [])))
    extra_handles, extra_texts = [], []
    if xcheck:
        ax.plot([x for x, _ in xcheck], [y for _, y in xcheck], linestyle="none", marker="D", markersize=4,
                color="black", label="_do_bench")
        extra_handles.append(plt.Line2D([], [], linestyle="none", marker="D", markersize=4, color="black"))
        extra_texts.append("do_bench median")
    if len(floor):
        ax.axvline(floor.iloc[0], color="black", linestyle="--", linewidth=1)
        extra_handles.append(plt.Line2D([], [], color="black", linestyle="--", linewidth=1))
        extra_texts.append("bandwidth floor")
    log_axis(ax.xaxis, "time")
    _name_ticks(ax, positions, names)
    for tick, position in zip(ax.get_yticklabels(), positions):
        if position < offset:
            tick.set_color("red")
    ax.set_ylim(-0.6, max(len(positions), 1) - 0.4)
    _notes(ax, positions, notes)
    set_xlabel(ax, f"median time per call (log scale); {BARS_TEXT}"
               + (f"; unstable: IQR > {100 * analysis.UNSTABLE_REL_IQR:.0f} % of the median"
                  if any(unstable(row) for _, row in timed.iterrows()) else ""))
    set_title(ax, case_title(group.iloc[0]))
    handles, texts = _backend_handles(sorted(group["backend"].unique()))
    _legend(fig, handles + extra_handles, texts + extra_texts, "outline: backend")
    return save(fig, figures, stem)


def _inverse_bounds(timed: pd.DataFrame, column: str) -> tuple[list[float], list[float]]:
    """(low, high) of a value inversely proportional to the time (GB/s, a
    speedup): the time's Q3 gives the low end, its Q1 the high."""
    low, high = [], []
    for _, row in timed.iterrows():
        t_lo, t_hi = quartiles(row)
        low.append(row[column] * row["median_s"] / t_hi)
        high.append(row[column] * row["median_s"] / t_lo)
    return low, high


def _gbps_text(value: float) -> str:
    return f"{fmt_plain(value)} GB/s"


def figure_gbps(group: pd.DataFrame, figures: FigureDir, stem: str) -> str:
    """Achieved bandwidth per strategy against the copy ceiling; the axis
    holds every bar (a case in cache goes past the ceiling) and the ceiling."""
    timed = group[group["gbps"].notna() & (group["median_s"] > 0)].sort_values("gbps")
    fig, ax = _bar_figure(len(timed))
    low, high = _inverse_bounds(timed, "gbps")
    ceiling = group["ceiling_gbps"].dropna()
    limits = axis_limits(timed["gbps"], ceiling.iloc[:1], log=False)
    notes = _bars(ax, timed, range(len(timed)), timed["gbps"], low, high, limits, _gbps_text)
    _name_ticks(ax, range(len(timed)), timed["strategy"])
    ax.set_ylim(-0.6, max(len(timed), 1) - 0.4)
    handles, texts = _backend_handles(sorted(timed["backend"].unique()))
    if len(ceiling):
        ax.axvline(ceiling.iloc[0], color="black", linestyle="--", linewidth=1)
        handles.append(plt.Line2D([], [], color="black", linestyle="--", linewidth=1))
        texts.append(f"copy ceiling {fmt_plain(ceiling.iloc[0])} GB/s")
    _notes(ax, range(len(timed)), notes)
    set_xlabel(ax, f"achieved GB/s (operator bytes / median time); {BARS_TEXT}, as bandwidth")
    set_title(ax, case_title(group.iloc[0]))
    _legend(fig, handles, texts, "outline: backend")
    return save(fig, figures, stem)


def figure_speedup(group: pd.DataFrame, figures: FigureDir, stem: str, baseline: str) -> str | None:
    timed = group[analysis.timed(group) & group["speedup"].notna()].sort_values("speedup")
    if len(timed) < 2:
        return None
    fig, ax = _bar_figure(len(timed))
    low, high = _inverse_bounds(timed, "speedup")  # the strategy's own spread (the seed's median as the unit)
    ax.set_xscale("log")
    limits = axis_limits(timed["speedup"], [1.0])
    clipped = _bars(ax, timed, range(len(timed)), timed["speedup"], low, high, limits, fmt_ratio)
    notes = [" · ".join([fmt_ratio(value)] + ([clip] if clip else [])) for value, clip in zip(timed["speedup"], clipped)]
    _name_ticks(ax, range(len(timed)), timed["strategy"])
    ax.set_ylim(-0.6, len(timed) - 0.4)
    log_axis(ax.xaxis, "ratio")
    ax.axvline(1, color="black", linewidth=1)
    _notes(ax, range(len(timed)), notes)
    set_xlabel(ax, f"speedup over the seed's original ({_plain(baseline, 60)}), log scale; {BARS_TEXT}, as speedup")
    set_title(ax, case_title(group.iloc[0]))
    _legend(fig, *_backend_handles(sorted(timed["backend"].unique())), "outline: backend")
    return save(fig, figures, stem)


def one_parameter_families(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """Sets of cases that differ in a single parameter over 3 or more values (a sweep)."""
    params = rows["params"].map(json.loads)
    families = []
    for key in sorted({k for p in params for k in p}):
        rest = params.map(lambda p: json.dumps({k: v for k, v in p.items() if k != key}, sort_keys=True))
        for _, members in rows.groupby(rest):
            if members["params"].map(lambda text: json.loads(text).get(key)).nunique() >= 3:
                families.append((key, members))
    return families


def categorical_families(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The rows split by the values of their non-numeric parameters
    ("form=1d", "form=2d"), or one family ("", rows) where there are none."""
    params = rows["params"].map(json.loads)
    keys = sorted({key for p in params for key, value in p.items() if isinstance(value, str)})
    if not keys:
        return [("", rows)]
    # a report point's layout (load.layout_in_params) is given where it is not contiguous
    labels = params.map(lambda p: " ".join(f"{key}={p.get(key, CASE_DEFAULTS['layout'] if key == POINT_LAYOUT_KEY else None)}"
                                           for key in keys))
    return [(label_text, rows[labels == label_text]) for label_text in dict.fromkeys(labels)]


# ------------------------------------------------------------------ scaling
# How a strategy's line is drawn, by what the registry says it is (a plugin's
# baseline need not come from a seed, nor its source say "seed"): the
# operator's baseline, the one its speedups are over, thick and solid; the
# seeds' other strategies solid; the strategies added since, dashed.
BASELINE, SEED, ADDED = "baseline", "seed", "added"
LINE_STYLE = {BASELINE: ("-", 2.6), SEED: ("-", 1.3), ADDED: ("--", 1.3)}


def strategy_kind(op: str, name: str, source: str = "") -> str:
    """BASELINE, SEED or ADDED, from the registry's flags; a strategy it
    does not know (removed, an unloaded plugin's) from its recorded source
    (never the baseline: only the registry knows that)."""
    found = analysis.strategy(op, name)
    if found is not None:
        return BASELINE if found.baseline else SEED if found.seed else ADDED
    return SEED if str(source).startswith("seed") else ADDED


def line_legend_title(op: str, kinds) -> str:
    """What the line styles drawn (``kinds``) mean, in words."""
    parts = []
    if BASELINE in kinds:
        parts.append(f"thick: the baseline, {_plain(analysis.baseline_name(op), 60)} (speedups are over it)")
    if SEED in kinds:
        parts.append(f"solid: the seeds' {'other ' if BASELINE in kinds else ''}strategies")
    if ADDED in kinds:
        parts.append("dashed: strategies added since")
    return "; ".join(parts) + "; band: first to third quartile"


MAX_SERIES = 8  # lines a scaling figure draws: more cannot be told apart


def figure_scaling(rows: pd.DataFrame, figures: FigureDir, stem: str, title: str) -> str | None:
    """Time against problem size per strategy, log-log, with the bandwidth floor."""
    ok = rows[analysis.timed(rows)].copy()
    if ok.empty:
        return None
    params = ok["params"].map(json.loads)
    varying = [key for key in params.iloc[0] if params.map(lambda p: p.get(key)).nunique() > 1]
    if not varying:
        return None
    # Against the parameter when only one varies (C for dispersion), else against the case's size: the
    # most bytes any of its strategies moves, so a values-only strategy sits at its case's x, not left of it.
    sweep_key = varying[0] if len(varying) == 1 else None
    ok["x"] = params.map(lambda p: p[sweep_key]) if sweep_key else ok.groupby("params")["bytes"].transform("max")
    # A strategy timed at one size only is drawn as its point. At most MAX_SERIES lines: the fastest at the
    # largest size each reached; the others are in the case tables beside the figure.
    lines = {name: line.sort_values("x") for name, line in ok.groupby("strategy")}
    order = sorted(lines, key=lambda name: (-lines[name]["x"].iloc[-1], lines[name]["median_s"].iloc[-1], name))
    strategies = [(name, lines[name]) for name in order[:MAX_SERIES]]
    left = len(order) - len(strategies)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.6 + 0.2 * ((len(strategies) + 1) // 2)),
                           layout="constrained")
    op = ok["op"].iloc[0]
    kinds = set()
    floor = ok.groupby("x")["floor_s"].max().sort_index()  # the whole output's floor, at its size
    # The time axis holds the medians and the floor; a band (Q1–Q3) reaching
    # past it is cut at the edge and marked there, as the bar charts' whiskers are.
    bottom, top = axis_limits([v for _, line in strategies for v in line["median_s"]], floor.values)
    for name, line in strategies:
        kind = strategy_kind(op, name, line["source"].iloc[0])
        kinds.add(kind)
        style, width = LINE_STYLE[kind]
        colour = strategy_colour(name)
        ax.plot(line["x"], line["median_s"], marker="o", markersize=5, color=colour, linewidth=width,
                label=label(f"{name} ({line['backend'].iloc[0]})"), linestyle=style)
        bounds = [quartiles(row) for _, row in line.iterrows()]
        low, high, cut = clip_spreads(bounds, (bottom, top))
        ax.fill_between(line["x"], low, high, color=colour, alpha=0.15, linewidth=0)
        for x, sides in zip(line["x"], cut):
            for beyond, edge, marker in zip(sides, (bottom, top), ("v", "^")):
                if beyond:
                    ax.plot([x], [edge], linestyle="none", marker=marker, markersize=6, color=colour,
                            clip_on=False, gid=CLIP_MARK, label="_clipped")
    ax.plot(floor.index, floor.values, color="black", linewidth=2, label="bandwidth floor")
    ax.set_xscale("log")
    ax.set_yscale("log")
    set_xlabel(ax, {"C": "channels C"}.get(sweep_key, sweep_key) if sweep_key else "bytes moved by the operator")
    ax.set_ylabel("median time per call", fontsize=9)
    set_title(ax, title)
    handles, texts = ax.get_legend_handles_labels()
    more = f"; {left} slower strategies are in the case tables" if left else ""
    _legend(fig, handles, texts, line_legend_title(op, kinds) + more, fontsize=7)
    log_axis(ax.xaxis, "count" if sweep_key else "bytes")
    ax.set_ylim(bottom, top)
    log_axis(ax.yaxis, "time")
    ax.grid(True, alpha=0.3)
    return save(fig, figures, stem)


def scaling_figures(section: pd.DataFrame, figures: FigureDir) -> list[tuple[str, str]]:
    """A section's (one operator, machine and dtype) scaling figures as
    (title, stem): one against bytes moved per value of the categorical
    parameters (maxunpool's form: a line through a 1-D and a 2-D case joins
    two different problems), one against each parameter that alone varies in
    a family of cases."""
    op, machine, dtype = (section[key].iloc[0] for key in ("op", "machine", "dtype"))
    mode = section["mode"].iloc[0] if "mode" in section else "forward"
    # A training mode's figures are named apart; forward keeps its published names.
    dtype = dtype if mode == "forward" else f"{dtype} · {mode}"
    drawn = []
    for kind, family in categorical_families(section):
        if family["params"].nunique() < 2:
            continue
        title = f"{op}{' ' + kind if kind else ''} scaling · {machine} · {dtype}"
        stem = slug(f"{op}-scaling-{kind + '-' if kind else ''}{machine}-{dtype}")
        drawn.append((title, figure_scaling(family, figures, stem, title)))
    for key, family in one_parameter_families(section):
        fixed = {k: v for k, v in json.loads(family["params"].iloc[0]).items() if k != key}
        fixed_text = " ".join(f"{k}={v}" for k, v in fixed.items())
        title = f"{op} against {key} ({fixed_text}) · {machine} · {dtype}"
        stem = slug(f"{op}-sweep-{key}-{fixed_text}-{machine}-{dtype}")
        drawn.append((title, figure_scaling(family, figures, stem, title)))
    return [(title, stem) for title, stem in drawn if stem]
