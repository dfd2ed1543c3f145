"""The report's figures, also drawn by the dashboard and ``scatterbench.bench``:
one function per figure, each writing PNG (and SVG) and returning its stem.
Colours, labels and log axes are shared so every figure reads alike."""

from __future__ import annotations

import json
import math
import re
import textwrap
import zlib
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness.base.format import fmt_ratio, fmt_time, slug  # noqa: E402
from harness.judging import analysis  # noqa: E402
from harness.judging.analysis import finite, spread, unstable  # noqa: E402
from harness.presenting.report.load import case_title  # noqa: E402
from impls.backends import BACKENDS  # noqa: E402
from impls.status import CORRECT, INEXACT  # noqa: E402

FIGURE_WIDTH_IN, DPI = 8.0, 100  # every PNG is 800 px wide

# Text from result files (strategy names, messages, machine names) goes into a
# figure through ``label``: matplotlib reads "$...$" as mathtext, and an
# unknown command there ("$\oops$") fails every figure that shows it. An
# escaped dollar ("\$") is drawn as a plain "$". (Mathtext cannot be switched
# off for the whole figure: the log axes' tick labels are mathtext.)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def label(text, limit: int = 60) -> str:
    """Text from a result file as a figure label, drawn as written: one line,
    no control characters, at most ``limit`` characters, every "$" escaped."""
    text = " ".join(_CONTROL.sub(" ", str(text)).split())
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("$", "\\$")


def backend_colour(name: str) -> str:
    backend = BACKENDS.get(name)
    return backend.colour if backend else "grey"


# One colour per strategy in every figure of the report and the dashboard.
# Qualitative, distinguishable on white, no black (the floor and ceiling lines
# are black): tab10, then darker and lighter hues unlike any of it.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf", "#000075", "#800000", "#469990", "#f032e6", "#9dcc00", "#c9a000",
           "#a6cee3", "#fb9a99", "#cab2d6", "#fdbf6f", "#b2df8a", "#4d4d4d", "#ffd8b1", "#aaffc3")


def strategy_colour(op: str, name: str) -> str:
    """The strategy's colour, the same in every figure: the operator's
    registered strategies take the palette in name order (distinct colours up
    to the palette's size); a name the registry does not know (a removed
    strategy, a plugin's) a stable hash of it."""
    from impls.registry import OPERATORS

    names = sorted(OPERATORS[op].strategies) if op in OPERATORS else []
    if name in names:
        return PALETTE[names.index(name) % len(PALETTE)]
    return PALETTE[zlib.crc32(f"{op}/{name}".encode()) % len(PALETTE)]


def wrap(text: str, width_in: float, fontsize: float = 9) -> str:
    """Lines that fit ``width_in`` inches at ``fontsize`` points (a long
    machine name would otherwise run off the figure)."""
    chars = max(20, int(width_in * 72 / (0.62 * fontsize)))
    return "\n".join(textwrap.wrap(text, chars, break_long_words=True, break_on_hyphens=False)) or text


def set_title(ax, text: str, width_in: float = FIGURE_WIDTH_IN, fontsize: float = 9) -> None:
    """The figure's title, centred on the figure (an axes title is centred on
    the axes, which long tick labels push right) and wrapped to its width."""
    ax.figure.suptitle(wrap(label(text, 300), width_in - 0.4, fontsize), fontsize=fontsize)



def _bytes_text(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.3g} B"


AXIS_TEXT = {"time": fmt_time, "ratio": fmt_ratio, "bytes": _bytes_text, "count": lambda v: f"{v:.4g}"}


def log_axis(axis, kind: str) -> None:
    """A log axis labelled in plain units ("10 µs", "100×", "1 MB"): at each
    decade over a wide range, at 1-2-5 steps over a narrow one, with no
    unlabelled minor ticks. Call it once the axis's limits are set. Readable,
    and a third cheaper to draw than matplotlib's mathtext labels and minor
    ticks."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    low, high = axis.get_view_interval()
    decades = math.log10(high / low) if 0 < low < high else 3.0
    subs = (1.0,) if decades > 3 else (1.0, 2.0, 5.0) if decades > 0.8 else (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda value, _: AXIS_TEXT[kind](value) if value > 0 else ""))
    axis.set_minor_locator(NullLocator())


@dataclass(frozen=True)
class FigureDir:
    """Where figures go, and whether an SVG is written beside each PNG."""
    path: Path
    svg: bool = True


def save(fig, figures: FigureDir, stem: str) -> str:
    figures.path.mkdir(parents=True, exist_ok=True)
    # No date, and SVG ids from the figure's own name: the same data makes the
    # same files, so re-publishing unchanged runs leaves docs/ unchanged.
    fig.savefig(figures.path / f"{stem}.png", dpi=DPI, metadata={"Software": None})
    if figures.svg:
        with plt.rc_context({"svg.hashsalt": stem}):
            fig.savefig(figures.path / f"{stem}.svg", metadata={"Date": None})
    plt.close(fig)
    return stem


def _bars(ax, group: pd.DataFrame, positions, values, low, high) -> None:
    """Horizontal bars in each strategy's colour, outlined in its backend's,
    hatched when inexact, with error bars from ``low`` to ``high``."""
    for position, (_, row), value, lo, hi in zip(positions, group.iterrows(), values, low, high):
        inexact = row["status"] == INEXACT
        ax.barh(position, value, color=strategy_colour(row["op"], row["strategy"]),
                edgecolor=backend_colour(row["backend"]), linewidth=2, hatch="//" if inexact else None)
        if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
            ax.errorbar(value, position, xerr=[[value - lo], [hi - value]], fmt="none", ecolor="black",
                        elinewidth=1, capsize=3)


def _legend_backends(ax, backends, extra=()):
    """Beside the plot (never over a bar or its note): the backends' outline
    colours, then ``extra`` (handle, text) pairs."""
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor="white", edgecolor=backend_colour(b), linewidth=2)
               for b in backends]
    texts = [label(b) for b in backends]
    for handle, text in extra:
        handles.append(handle)
        texts.append(text)
    ax.legend(handles, texts, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, title="backend (outline)",
              title_fontsize=8)


def figure_times(group: pd.DataFrame, figures: FigureDir, stem: str) -> str:
    """Median time per strategy on a log axis, sorted, with median ± IQR/2 as
    error bars and % of ceiling beside each bar; failed strategies listed at
    the bottom with their status, not dropped."""
    timed = group[group["median_s"].notna()].sort_values("median_s", ascending=False)
    failed = group[group["median_s"].isna()]
    n = len(timed) + len(failed)
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 1.4 + 0.32 * max(n, 1)), layout="constrained")
    labels = [label(f"{row['strategy']}  [{row['status']}]") for _, row in failed.iterrows()]
    positions = list(range(len(failed)))
    offset = len(failed)
    top = timed["median_s"].max() if len(timed) else 1.0
    spreads = [spread(row) for _, row in timed.iterrows()]
    timed_positions = list(range(offset, offset + len(timed)))
    _bars(ax, timed, timed_positions, timed["median_s"], [lo for lo, _ in spreads], [hi for _, hi in spreads])
    for position, (_, row), (_, hi) in zip(timed_positions, timed.iterrows(), spreads):
        pct = row["pct_of_ceiling"]
        # Short notes, clipped to the axes: a long one ran under the legend and off the figure.
        # The xlabel says what "unstable" means.
        notes = [f"{pct:.3g} % of ceiling"] if math.isfinite(pct) else []
        if row["status"] == INEXACT:
            notes.append(f"inexact {row['rel_err']:.1g}")
        if unstable(row):
            notes.append("unstable")
        ax.text(hi, position, " " + " · ".join(notes), va="center", fontsize=8, clip_on=True)
        labels.append(label(row["strategy"]))
        positions.append(position)
    xcheck = [(row["xcheck_s"], position) for position, (_, row) in zip(timed_positions, timed.iterrows())
              if finite(row["xcheck_s"]) and row["xcheck_s"] > 0]
    if xcheck:  # the independent timer's median (CUDA: triton.testing.do_bench)
        ax.plot([x for x, _ in xcheck], [y for _, y in xcheck], linestyle="none", marker="D", markersize=4,
                color="black", label="_do_bench")
    floor = group["floor_s"].dropna()
    if len(floor):
        ax.axvline(floor.iloc[0], color="black", linestyle="--", linewidth=1)
        ax.text(floor.iloc[0], offset - 0.45, " bandwidth floor", fontsize=8, va="top")
    ax.set_xscale("log")
    if len(timed):
        highest = max([hi for _, hi in spreads] + [top])
        ax.set_xlim(min(min(lo for lo, _ in spreads), floor.min() if len(floor) else math.inf) / 2, highest * 30)
    log_axis(ax.xaxis, "time")
    ax.set_yticks(positions, labels, fontsize=8)
    for tick, position in zip(ax.get_yticklabels(), positions):
        if position < offset:
            tick.set_color("red")
    ax.set_xlabel("median time per call (log scale); error bars: median ± IQR/2"
                  + (f"; unstable: IQR > {100 * analysis.UNSTABLE_REL_IQR:.0f} % of the median"
                     if any(unstable(row) for _, row in timed.iterrows()) else ""))
    set_title(ax, case_title(group.iloc[0]))
    diamond = plt.Line2D([], [], linestyle="none", marker="D", markersize=4, color="black")
    _legend_backends(ax, sorted(group["backend"].unique()), [(diamond, "do_bench median")] if xcheck else ())
    return save(fig, figures, stem)


def figure_gbps(group: pd.DataFrame, figures: FigureDir, stem: str) -> str:
    """Achieved bandwidth per strategy against the copy ceiling; the axis
    holds every bar (a case in cache goes past the ceiling) and the ceiling."""
    timed = group[group["gbps"].notna() & (group["median_s"] > 0)].sort_values("gbps")
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 1.4 + 0.32 * max(len(timed), 1)), layout="constrained")
    # bandwidth = bytes / time: the time's spread, inverted
    low, high = [], []
    for _, row in timed.iterrows():
        t_lo, t_hi = spread(row)
        low.append(row["gbps"] * row["median_s"] / t_hi)
        high.append(row["gbps"] * row["median_s"] / t_lo)
    _bars(ax, timed, range(len(timed)), timed["gbps"], low, high)
    ax.set_yticks(range(len(timed)), [label(name) for name in timed["strategy"]], fontsize=8)
    ceiling = group["ceiling_gbps"].dropna()
    right = max(high + list(timed["gbps"]) + [0.0])
    if len(ceiling):
        ax.axvline(ceiling.iloc[0], color="black", linestyle="--", linewidth=1)
        ax.text(ceiling.iloc[0], -0.45, f" copy ceiling {ceiling.iloc[0]:.1f} GB/s", fontsize=8, va="top")
        right = max(right, ceiling.iloc[0])
    if right > 0:
        ax.set_xlim(0, right * 1.3)
    ax.set_xlabel("achieved GB/s (operator bytes / median time); error bars from median ± IQR/2")
    set_title(ax, case_title(group.iloc[0]))
    _legend_backends(ax, sorted(timed["backend"].unique()))
    return save(fig, figures, stem)


def figure_speedup(group: pd.DataFrame, figures: FigureDir, stem: str, baseline: str) -> str | None:
    timed = group[group["speedup"].notna() & group["status"].isin(CORRECT)].sort_values("speedup")
    if len(timed) < 2:
        return None
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 1.4 + 0.32 * len(timed)), layout="constrained")
    low, high = [], []
    for _, row in timed.iterrows():  # the strategy's own spread (the seed's median as the unit)
        t_lo, t_hi = spread(row)
        low.append(row["speedup"] * row["median_s"] / t_hi)
        high.append(row["speedup"] * row["median_s"] / t_lo)
    _bars(ax, timed, range(len(timed)), timed["speedup"], low, high)
    for position, value, hi in zip(range(len(timed)), timed["speedup"], high):
        ax.text(hi, position, f" {fmt_ratio(value)}", va="center", fontsize=8)
    ax.set_yticks(range(len(timed)), [label(name) for name in timed["strategy"]], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(min(min(low), 1) / 2, max(high) * 20)
    log_axis(ax.xaxis, "ratio")
    ax.axvline(1, color="black", linewidth=1)
    ax.set_xlabel(f"speedup over the seed's original ({label(baseline)}), log scale; error bars from median ± IQR/2")
    set_title(ax, case_title(group.iloc[0]))
    _legend_backends(ax, sorted(timed["backend"].unique()))
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
    labels = params.map(lambda p: " ".join(f"{key}={p.get(key)}" for key in keys))
    return [(label_text, rows[labels == label_text]) for label_text in dict.fromkeys(labels)]


def figure_scaling(rows: pd.DataFrame, figures: FigureDir, stem: str, title: str) -> str | None:
    """Time against problem size per strategy, log-log, with the bandwidth floor."""
    ok = rows[rows["status"].isin(CORRECT) & rows["median_s"].notna()].copy()
    if ok.empty:
        return None
    params = ok["params"].map(json.loads)
    varying = [key for key in params.iloc[0] if params.map(lambda p: p.get(key)).nunique() > 1]
    if not varying:
        return None
    # Against the parameter when only one varies (C for dispersion), else against the bytes moved.
    sweep_key = varying[0] if len(varying) == 1 else None
    ok["x"] = params.map(lambda p: p[sweep_key]) if sweep_key else ok["bytes"]
    strategies = [(name, line.sort_values("x")) for name, line in ok.groupby("strategy")]
    strategies = [(name, line) for name, line in strategies if len(line) >= 2]
    fig, ax = plt.subplots(figsize=(FIGURE_WIDTH_IN, 4.6 + 0.16 * ((len(strategies) + 3) // 3)),
                           layout="constrained")
    # Solid: the seeds' own strategies, dashed: added; the band is median ± IQR/2.
    for name, line in strategies:
        seed = str(line["source"].iloc[0]).startswith("seed")
        colour = strategy_colour(line["op"].iloc[0], name)
        ax.plot(line["x"], line["median_s"], marker="o", markersize=3, color=colour,
                label=label(f"{name} ({line['backend'].iloc[0]})"), linestyle="-" if seed else "--")
        bounds = [spread(row) for _, row in line.iterrows()]
        ax.fill_between(line["x"], [lo for lo, _ in bounds], [hi for _, hi in bounds], color=colour, alpha=0.15,
                        linewidth=0)
    floor = ok.groupby("x")["floor_s"].min().sort_index()
    ax.plot(floor.index, floor.values, color="black", linewidth=2, label="bandwidth floor")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel({"C": "channels C"}.get(sweep_key, sweep_key) if sweep_key else "bytes moved by the operator")
    ax.set_ylabel("median time per call; band: median ± IQR/2")
    set_title(ax, title)
    # Below the plot, never over a line.
    fig.legend(loc="outside lower center", fontsize=7, ncol=3,
               title="solid: the seeds' strategies, dashed: added", title_fontsize=7)
    log_axis(ax.xaxis, "count" if sweep_key else "bytes")
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
