"""The comparison report: ``python report.py RESULT_DIR [RESULT_DIR ...] [-o OUT]``.

Reads result directories (a CPU run and a GPU run, say) and writes
``OUT/<name>.md``, ``OUT/<name>.html`` (one self-contained file, figures
embedded) and the figures as PNG and SVG under ``OUT/figures``. Every number
comes from the result files; every text from them is escaped.
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import math
import re
import sys
import textwrap
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from harness import env, plugins, stats, store  # noqa: E402
from harness.errors import ResultError  # noqa: E402
from harness.format import fmt_num, fmt_ratio, fmt_time, md_escape, params_label  # noqa: E402
from harness.tables import partial_output, with_speedups  # noqa: E402
from impls.backends import BACKENDS  # noqa: E402
from impls.status import CORRECT, FAILED, INEXACT, OK, UPSTREAM_DEFECT  # noqa: E402

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


# ------------------------------------------------------------------ loading
def load(dirs) -> tuple[pd.DataFrame, list[dict]]:
    """All rows of the given runs, each labelled with its machine, plus their metadata."""
    frames, metas = [], []
    for directory in dirs:
        meta, rows, _samples = store.read_run(directory)
        meta = dict(meta, directory=str(directory))
        meta["plugins_missing"] = plugins.load_recorded(meta)  # before the registry is asked anything
        for line in meta["plugins_missing"]:
            print(f"report: {line}", file=sys.stderr)
        metas.append(meta)
        if rows.empty:
            continue
        if rows["load_avg"].notna().any():
            meta["case_load_max"] = float(rows["load_avg"].max())
        rows = rows.copy()
        rows["machine"] = rows["device"].map(lambda d: device_label(meta, d))
        rows["run_dir"] = str(directory)
        frames.append(rows)
    if not frames:
        raise ResultError(f"{', '.join(map(str, dirs))}: no result rows to report")
    rows = pd.concat(frames, ignore_index=True)
    # A case measured by several runs on one machine: the latest run's measurement.
    rows["_start"] = rows["run_dir"].map({m["directory"]: m.get("start_time", "") for m in metas})
    rows = rows.sort_values("_start", kind="stable").drop_duplicates(["case_id", "machine"], keep="last")
    return with_speedups(rows.drop(columns="_start").sort_index()), metas


def device_label(meta: dict, device: str) -> str:
    if device == "cuda":
        return f"cuda: {meta.get('gpu_name') or 'GPU'}"
    # Two CPUs may share a model name (every AMD EPYC VM reports "AMD EPYC"):
    # the family-model tells them apart, or their rows would be taken for one machine's.
    hardware = meta.get("hardware") if isinstance(meta.get("hardware"), dict) else {}
    family_model = f" ({hardware['cpu_family_model']})" if hardware.get("cpu_family_model") else ""
    return f"cpu: {meta.get('cpu_model', '?')}{family_model} ×{meta.get('cpu_count', '?')}"


def case_title(row) -> str:
    return f"{row['op']} {params_label(row['params'])} · {row['machine']} · {row['dtype']}"


def slug(text: str) -> str:
    """A file and anchor name; a long one keeps a hash of the whole text, so
    two texts that differ only past the cut never share a file."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return name if len(name) <= 80 else f"{name[:71]}-{zlib.crc32(text.encode()):08x}"


# ------------------------------------------------------------------ document
@dataclass
class Doc:
    blocks: list = field(default_factory=list)

    def heading(self, level: int, text: str):
        self.blocks.append(("h", level, text))

    def para(self, text: str):
        self.blocks.append(("p", text))

    def table(self, header: list[str], rows: list[list[str]], bold_row: int | None = None):
        self.blocks.append(("table", header, rows, bold_row))

    def figure(self, stem: str, caption: str):
        self.blocks.append(("fig", stem, caption))

    def code(self, text: str):
        self.blocks.append(("code", text))


def render_markdown(doc: Doc, figure_dir: str) -> str:
    lines: list[str] = []
    for block in doc.blocks:
        kind = block[0]
        if kind == "h":
            lines += ["#" * block[1] + " " + md_escape(block[2]), ""]
        elif kind == "p":
            lines += [md_escape(block[1]), ""]
        elif kind == "code":
            lines += ["```", block[1].replace("```", "'''"), "```", ""]
        elif kind == "table":
            _, header, rows, bold = block
            lines.append("| " + " | ".join(md_escape(h) for h in header) + " |")
            lines.append("|" + "---|" * len(header))
            for index, row in enumerate(rows):
                cells = [md_escape(c) for c in row]
                if index == bold:
                    cells = [f"**{c}**" if c else c for c in cells]
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
        elif kind == "fig":
            _, stem, caption = block
            lines += [f"![{md_escape(caption)}]({figure_dir}/{stem}.png)", ""]
    return "\n".join(lines)


def render_html(doc: Doc, figures: Path, title: str, embed: bool = True) -> str:
    """One HTML page; figures embedded as data: URIs (a self-contained file),
    or linked relatively (``embed=False``: smaller, beside its figures)."""
    esc = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>",
             "<style>body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;"
             "color:#222}table{border-collapse:collapse;margin:1em 0;font-size:13px}"
             "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}td:first-child,th:first-child"
             "{text-align:left}tr.best td{font-weight:bold;background:#eef7ee}img{max-width:100%}"
             "pre{background:#f4f4f4;padding:8px;overflow-x:auto}div.wide{overflow-x:auto}</style></head><body>"]
    for block in doc.blocks:
        kind = block[0]
        if kind == "h":
            parts.append(f"<h{block[1]} id='{slug(block[2])}'>{esc(block[2])}</h{block[1]}>")
        elif kind == "p":
            parts.append(f"<p>{esc(block[1])}</p>")
        elif kind == "code":
            parts.append(f"<pre>{esc(block[1])}</pre>")
        elif kind == "table":
            _, header, rows, bold = block
            # A wide table scrolls in its own box instead of pushing the page sideways.
            parts.append("<div class='wide'><table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>")
            for index, row in enumerate(rows):
                css = " class='best'" if index == bold else ""
                parts.append(f"<tr{css}>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>")
            parts.append("</table></div>")
        elif kind == "fig":
            _, stem, caption = block
            if embed:
                source = "data:image/png;base64," + base64.b64encode((figures / f"{stem}.png").read_bytes()).decode()
            else:
                source = f"{figures.name}/{stem}.png"
            parts.append(f"<figure><img alt='{esc(caption)}' src='{esc(source)}'>"
                         f"<figcaption>{esc(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts)


# ------------------------------------------------------------------ figures
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


def spread(row) -> tuple[float, float]:
    """(low, high) of a row's time: median ± IQR/2 (its middle half when the
    samples are symmetric); the median alone when the IQR is unknown."""
    median, iqr = row["median_s"], row["iqr_s"]
    half = iqr / 2 if isinstance(iqr, float) and math.isfinite(iqr) else 0.0
    return max(median - half, median * 1e-3), median + half


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
              if _finite(row["xcheck_s"]) and row["xcheck_s"] > 0]
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
                  + (f"; unstable: IQR > {100 * stats.UNSTABLE_REL_IQR:.0f} % of the median"
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


# ------------------------------------------------------------------ sections
UNSTABLE_MARK = "⚠"
UNSTABLE_NOTE = (f"{UNSTABLE_MARK} unstable: the IQR exceeds {100 * stats.UNSTABLE_REL_IQR:.0f} % of the median (the "
                 f"threshold at which torch.utils.benchmark warns): the machine was busy or the case is noisy, so "
                 f"compare it with care.")


def slow_start_sentence(timed: pd.DataFrame) -> str:
    """Which cases started slow and had their first samples dropped (runs
    older than the column have none recorded)."""
    if "slow_start" not in timed:
        return ""
    dropped = timed[timed["slow_start"].fillna(0) > 0]
    if dropped.empty:
        return ""
    named = ", ".join(f"{r['op']}/{r['strategy']} {params_label(r['params'])} ({int(r['slow_start'])})"
                      for _, r in dropped.head(8).iterrows())
    more = f" and {len(dropped) - 8} more" if len(dropped) > 8 else ""
    return (f"{len(dropped)} of {len(timed)} timed cases started slow: their first samples, each over "
            f"{stats.SLOW_START_FACTOR:g}× the median, were dropped like warm-up and counted in the `slow_start` "
            f"column: {md_escape(named)}{more}.")


def unstable(row) -> bool:
    return stats.is_unstable(row["iqr_s"], row["median_s"])


def iqr_cell(row) -> str:
    """The IQR, as a time and as % of the median, marked when unstable."""
    rel = stats.rel_iqr(row["iqr_s"], row["median_s"])
    if not math.isfinite(rel):
        return fmt_time(row["iqr_s"])
    return f"{fmt_time(row['iqr_s'])} ({100 * rel:.2g} %)" + (f" {UNSTABLE_MARK}" if unstable(row) else "")


XCHECK_TOLERANCE = 0.05  # our CUDA-event median against triton.testing.do_bench's
XCHECK_NOTE = (f"{UNSTABLE_MARK} in ours / do_bench: the suite's CUDA-event median and triton.testing.do_bench's "
               f"median (an independent timer) differ by more than {100 * XCHECK_TOLERANCE:.0f} %, so this case's "
               f"time is uncertain beyond its IQR.")
HOST_NOTE = ("host/call: the host's median cost of one call without waiting for the device (Python, dispatch, "
             "launch). Where it exceeds the device time, back-to-back calls are bound by the host, not the device.")


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def xcheck_ratio(row) -> float:
    """Our median over the independent timer's (CUDA rows; NaN elsewhere)."""
    ours, theirs = row.get("median_s", math.nan), row.get("xcheck_s", math.nan)
    return ours / theirs if _finite(ours) and _finite(theirs) and theirs > 0 else math.nan


def timers_disagree(row) -> bool:
    ratio = xcheck_ratio(row)
    return math.isfinite(ratio) and abs(ratio - 1) > XCHECK_TOLERANCE


def case_table(group: pd.DataFrame) -> tuple[list[str], list[list[str]], int | None, list[str]]:
    """The case's rows, fastest first: header, cells, the best correct row's
    index, and the notes that explain the marks used. host/call where the
    run measured it; on CUDA the independent timer's median and the ratio."""
    ordered = group.assign(_k=group["median_s"].fillna(math.inf)).sort_values("_k")
    with_host = bool(ordered["host_s"].map(_finite).any())
    with_xcheck = bool((ordered["device"] == "cuda").any() and ordered["xcheck_s"].map(_finite).any())
    header = ["strategy", "backend", "status", "median", "IQR", "n"] + (["host/call"] if with_host else []) \
        + (["do_bench", "ours / do_bench"] if with_xcheck else []) \
        + ["GB/s", "% of ceiling", "× seed", "rel err", "max abs err", "source", "message"]
    from impls.registry import speedup_note

    no_speedup = speedup_note(group["op"].iloc[0], dict(zip(group["strategy"], group["status"])))
    rows, best = [], None
    for index, (_, r) in enumerate(ordered.iterrows()):
        if best is None and r["status"] == OK and not partial_output(r["op"], r["strategy"]):
            best = index
        # n: the samples the median and IQR rest on (a slow case gets few in its budget).
        samples = r.get("n_samples")
        n_text = str(int(samples)) if isinstance(samples, (int, float)) and math.isfinite(samples) and samples > 0 \
            else "–"
        cells = [r["strategy"], r["backend"], r["status"], fmt_time(r["median_s"]), iqr_cell(r), n_text]
        if with_host:
            cells.append(fmt_time(r["host_s"]))
        if with_xcheck:
            ratio = xcheck_ratio(r)
            cells += [fmt_time(r["xcheck_s"]),
                      fmt_num(ratio, 3) + (f" {UNSTABLE_MARK}" if timers_disagree(r) else "")]
        rows.append(cells + [fmt_num(r["gbps"]), fmt_num(r["pct_of_ceiling"], 3, " %"),
                             "" if no_speedup else fmt_ratio(r["speedup"]),
                             fmt_num(r["rel_err"], 2), fmt_num(r["max_abs_err"], 2), r["source"],
                             str(r["message"])[:120]])
    notes = [UNSTABLE_NOTE] if any(unstable(r) for _, r in ordered.iterrows()) else []
    if no_speedup:
        notes.append(f"× seed is blank: {no_speedup}.")
    if with_xcheck and any(timers_disagree(r) for _, r in ordered.iterrows()):
        notes.append(XCHECK_NOTE)
    return header, rows, best, notes


def _is_builtin(op: str, name: str) -> bool:
    from impls.registry import OPERATORS

    strat = OPERATORS[op].strategies.get(name) if op in OPERATORS else None
    return bool(strat and strat.builtin)


_MARKUP = ((re.compile(r":[a-z]+:`([^`]*)`"), r"\1"),  # :func:`name`
           (re.compile(r"``(.+?)``"), r"\1"),  # ``code``
           (re.compile(r"`([^`]+)`_?"), r"\1"),  # `code`, `link`_
           (re.compile(r"\*\*(\S(?:.*?\S)?)\*\*"), r"\1"),  # **strong**
           (re.compile(r"(?<![\w*])\*(\S(?:[^*]*?\S)?)\*(?![\w*])"), r"\1"))  # *emphasis*, not 2*N*C


def plain_doc(text: str) -> str:
    """A docstring as one plain sentence: reStructuredText and Markdown
    markup (``code``, *emphasis*, **strong**, :role:`x`) removed."""
    text = " ".join(str(text).split())
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return text


def _median_iqr(row) -> str:
    return f"median {fmt_time(row['median_s'])}, IQR {fmt_time(row['iqr_s'])}"


def clearly_faster(fast, slow) -> bool:
    """The data supports "fast is faster than slow": fast's upper spread
    (median + IQR/2) lies below slow's lower one (median − IQR/2)."""
    return spread(fast)[1] < spread(slow)[0]


def _strategy(op: str, name: str):
    from impls.registry import OPERATORS

    return OPERATORS[op].strategies.get(name) if op in OPERATORS else None


def _whole_output(op: str) -> str | None:
    from impls.registry import OPERATORS

    return OPERATORS[op].whole_output if op in OPERATORS else None


def verdict(op: str, case: pd.DataFrame, where: str) -> str:
    """The sentence on one case: use the fastest correct strategy, and by how
    much, only where its lead exceeds the spread; else why it is inconclusive.
    Only strategies returning the operator's whole output are ranked: one
    that skips part of it (maxpool2d without indices) does less work."""
    ok = case[(case["status"] == OK) & case["median_s"].notna()].sort_values("median_s", kind="stable")
    partial = ok[ok["strategy"].map(lambda name: partial_output(op, name))]
    ok = ok.drop(partial.index)
    whole = _whole_output(op)
    if ok.empty:
        return f"{where}: no strategy returning {whole or 'the whole output'} passed the check."
    best = ok.iloc[0]
    text = f"{where}: use {best['strategy']} ({best['backend']}), {_median_iqr(best)}"
    if len(ok) == 1:
        text += (f", the only strategy returning {whole} that passed the check" if len(partial)
                 else ", the only strategy that passed the check")
    else:
        runner = ok.iloc[1]
        if not clearly_faster(best, runner):
            return (f"{where}: inconclusive between {best['strategy']} ({_median_iqr(best)}) and "
                    f"{runner['strategy']} ({_median_iqr(runner)}): a lead of "
                    f"{fmt_ratio(runner['median_s'] / best['median_s'])} is within their spread (median ± IQR/2 "
                    f"overlap), so the data does not say which is faster; rerun on a quieter machine or with a "
                    f"larger timing budget.")
        text += (f", {fmt_num(best['pct_of_ceiling'], 3)} % of the copy ceiling, "
                 f"{fmt_ratio(runner['median_s'] / best['median_s'])} faster than the runner-up "
                 f"{runner['strategy']} ({_median_iqr(runner)})")
        baseline = ok[ok["strategy"].map(lambda name: bool(getattr(_strategy(op, name), "baseline", False)))]
        if len(baseline) and baseline.index[0] not in (best.name, runner.name) \
                and clearly_faster(best, baseline.iloc[0]):
            text += f", {fmt_ratio(baseline.iloc[0]['median_s'] / best['median_s'])} the seed's original"
        builtins = ok[ok["strategy"].map(lambda name: _is_builtin(op, name))]
        if len(builtins) and builtins.index[0] not in (best.name, runner.name) \
                and clearly_faster(best, builtins.iloc[0]):
            text += (f", {fmt_ratio(builtins.iloc[0]['median_s'] / best['median_s'])} faster than the fastest "
                     f"library built-in, {builtins.iloc[0]['strategy']}")
    if _finite(best.get("host_s")) and best["device"] != "cpu" and best["host_s"] > best["median_s"]:
        text += (f"; its host cost per call ({fmt_time(best['host_s'])}) exceeds its device time, so calls in a "
                 f"loop are bound by the host")
    if stats.is_unstable(best["iqr_s"], best["median_s"]):
        text += f" (its timing is unstable: IQR {100 * stats.rel_iqr(best['iqr_s'], best['median_s']):.0f} % of the median)"
    if len(partial):
        from impls.registry import unranked_reason

        text += "; not ranked: " + "; ".join(f"{r['strategy']} ({fmt_time(r['median_s'])}), as "
                                             f"{unranked_reason(op, r['strategy'])}" for _, r in partial.iterrows())
    strat = _strategy(op, best["strategy"])
    if strat and strat.doc:
        text += ". Why: " + plain_doc(strat.doc)
    return text + ("" if text.endswith(".") else ".")


def conclusion(op: str, rows: pd.DataFrame) -> list[str]:
    """Sentences derived from the numbers: per machine and dtype, the verdict
    at the largest size, then every strategy that failed or was inexact."""
    sentences = []
    for (machine, dtype), on_machine in rows.groupby(["machine", "dtype"], sort=False):
        sized = on_machine[on_machine["bytes"].notna()]
        largest = on_machine.loc[sized["bytes"].idxmax(), "params"] if len(sized) else on_machine["params"].iloc[0]
        sentences.append(verdict(op, on_machine[on_machine["params"] == largest],
                                 f"{machine}, {params_label(largest)} {dtype}"))
        failing = on_machine[on_machine["status"].isin(FAILED + (INEXACT, UPSTREAM_DEFECT))]
        for _, row in failing.drop_duplicates("strategy").iterrows():
            where = " (a known library defect: see Defects found in libraries)" \
                if row["status"] == UPSTREAM_DEFECT else ""
            sentences.append(f"{machine}: {row['strategy']} is {row['status']}{where} at "
                             f"{params_label(row['params'])} {row['dtype']}: {row['message']}")
    return sentences


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _loads(value) -> list[float] | None:
    """A meta load average: [1-min, 5-min, 15-min], or None where absent or malformed."""
    if not isinstance(value, list) or not value:
        return None
    numbers = [_number(item) for item in value]
    return None if any(number is None for number in numbers) else numbers


def cores(meta: dict) -> int | None:
    hardware = meta.get("hardware") if isinstance(meta.get("hardware"), dict) else {}
    count = _number(hardware.get("cpu_count")) or _number(meta.get("cpu_count"))
    return int(count) if count else None


def load_cell(meta: dict) -> str:
    """The machine's load averages (1/5/15 min) at the start and the end of
    the run, and the highest 1-minute load a case finished under."""
    start, end = _loads(meta.get("load_avg_start")), _loads(meta.get("load_avg_end"))
    parts = []
    if start or end:
        show = (lambda loads: "/".join(f"{v:.2g}" for v in loads) if loads else "?")
        parts.append(f"{show(start)} → {show(end)}")
    peak = _number(meta.get("case_load_max"))
    if peak is not None:
        parts.append(f"cases ≤ {peak:.2g}")
    return ", ".join(parts) or "–"


def ceiling_cell(meta: dict) -> str:
    """Each device's ceiling against the median of earlier runs on the machine."""
    history = meta.get("ceiling_history") if isinstance(meta.get("ceiling_history"), dict) else {}
    cells = []
    for device, entry in history.items():
        if not isinstance(entry, dict):
            continue
        median, runs, deviation = (_number(entry.get(key)) for key in ("history_median_gbps", "runs", "deviation_pct"))
        if median is not None and deviation is not None:
            cells.append(f"{device} {deviation:+.0f} % vs {median:.1f} GB/s ({int(runs or 0)} runs)")
    return ", ".join(cells) or "–"


CEILING_DROP_PCT = 20.0  # a ceiling this far below its history: the machine was busy or throttled


def run_warnings(meta: dict) -> list[str]:
    """Why a run's numbers may be pessimistic: a busy machine, a low ceiling;
    and what the report lacks for a run whose plugins are not here."""
    run, warnings = meta.get("run_id", "?"), [f"Warning: {line}." for line in meta.get("plugins_missing", [])]
    count = cores(meta)
    loads = [("at the start", (_loads(meta.get("load_avg_start")) or [None])[0]),
             ("at the end", (_loads(meta.get("load_avg_end")) or [None])[0]),
             ("when a case finished", _number(meta.get("case_load_max")))]
    busy = [(when, value) for when, value in loads if value is not None and count and value >= count]
    if busy:
        when, value = max(busy, key=lambda item: item[1])
        warnings.append(f"Warning: run {run} shared its machine: the 1-minute load average reached {value:.2g} "
                        f"{when}, at or above its {count} cores, so other work competed with the timed calls; "
                        f"its medians may be slow and its spreads wide.")
    history = meta.get("ceiling_history") if isinstance(meta.get("ceiling_history"), dict) else {}
    for device, entry in history.items():
        deviation = _number(entry.get("deviation_pct")) if isinstance(entry, dict) else None
        if deviation is not None and deviation < -CEILING_DROP_PCT:
            median = _number(entry.get("history_median_gbps"))
            now = _number((meta.get("ceilings_gbps") or {}).get(device))
            warnings.append(f"Warning: run {run} measured its {device} copy ceiling"
                            + (f" at {now:.1f} GB/s" if now is not None else "")
                            + f", {-deviation:.0f} % below the median of earlier runs on this machine"
                            + (f" ({median:.1f} GB/s)" if median is not None else "")
                            + ": the machine was busy or throttled, and its % of ceiling read high.")
    return warnings


def environment_table(metas: list[dict]) -> tuple[list[str], list[list[str]]]:
    header = ["run", "machine", "start", "commit", "python", "numpy", "torch", "triton", "numba",
              "threads", "ceilings (GB/s)", "ceiling vs history", "load 1/5/15 min (start → end)",
              "fresh output (GB/s)"]
    rows = []
    for meta in metas:
        versions = meta.get("versions") if isinstance(meta.get("versions"), dict) else {}
        ceilings = meta.get("ceilings_gbps") if isinstance(meta.get("ceilings_gbps"), dict) else {}
        fresh = meta.get("fresh_write_gbps") if isinstance(meta.get("fresh_write_gbps"), dict) else {}
        rows.append([meta.get("run_id", "?"), meta.get("machine", "?"), meta.get("start_time", "?"),
                     str(meta.get("git_commit") or "?")[:12], meta.get("python", "?"),
                     versions.get("numpy") or "–", versions.get("torch") or "–", versions.get("triton") or "–",
                     versions.get("numba") or "–", threads_text(meta.get("threads")),
                     ", ".join(f"{d} {fmt_ratio(_number(g), '')}" for d, g in ceilings.items()),
                     ceiling_cell(meta), load_cell(meta),
                     ", ".join(f"{a} {fmt_ratio(_number(g), '')}" for a, g in fresh.items()) or "–"])
    return header, rows


def _bytes(value) -> str:
    value = _number(value)
    return f"{value / 2**30:.1f} GiB" if value else "–"


def threads_text(threads) -> str:
    """``torch 2, blas default, numba default``: what each pool was set to
    (None: left at the library's default), not the raw JSON."""
    if not isinstance(threads, dict) or not threads:
        return "–"
    pools = sorted(threads, key=lambda pool: (("torch", "blas", "numba") + (pool,)).index(pool))
    return ", ".join(f"{pool} {threads[pool] if threads[pool] is not None else 'default'}" for pool in pools)


def hardware_table(metas: list[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per distinct machine: what the numbers depend on. Runs
    without ``hardware`` in their metadata show their CPU model and count."""
    header = ["machine", "runs", "CPU", "cores", "caches", "memory", "GPU", "GPU memory", "SMs", "capability",
              "driver", "max SM / memory clock (MHz)"]
    machines: dict[tuple, list[str]] = {}
    for meta in metas:
        hardware = meta.get("hardware") if isinstance(meta.get("hardware"), dict) else {}
        gpu = hardware.get("gpu") if isinstance(hardware.get("gpu"), dict) else {}
        caches = hardware.get("caches") if isinstance(hardware.get("caches"), dict) else {}
        clocks = (gpu.get("max_sm_clock_mhz"), gpu.get("max_mem_clock_mhz"))
        key = (env.machine_label(meta),
               str(hardware.get("cpu_model") or meta.get("cpu_model") or "?"), str(cores(meta) or "?"),
               " ".join(f"{level} {size}" for level, size in caches.items()) or "–",
               _bytes(hardware.get("memory_bytes")), str(gpu.get("name") or meta.get("gpu_name") or "–"),
               _bytes(gpu.get("memory_bytes")), str(gpu.get("sm_count") or "–"), str(gpu.get("capability") or "–"),
               str(gpu.get("driver") or "–"), " / ".join(str(c) for c in clocks) if any(clocks) else "–")
        machines.setdefault(key, []).append(str(meta.get("run_id", "?")))
    return header, [[key[0], ", ".join(runs), *key[1:]] for key, runs in machines.items()]


DEVICE_ORDER = ("cpu", "cuda")
DTYPE_ORDER = ("float32", "float16", "bfloat16", "float64")


def sections(op_rows: pd.DataFrame) -> list[tuple[tuple[str, str], pd.DataFrame]]:
    """The operator's rows per (machine, dtype): CPU before GPU, float32 first."""
    def order(item):
        (machine, dtype), section = item
        device = section["device"].iloc[0]
        return (DEVICE_ORDER.index(device) if device in DEVICE_ORDER else len(DEVICE_ORDER), machine,
                DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER), dtype)

    return sorted(op_rows.groupby(["machine", "dtype"], sort=False), key=order)


def section_intro(section: pd.DataFrame, metas: list[dict]) -> str:
    """Where the section's numbers come from: the device, its measured ceiling per run."""
    device, machine, dtype = section["device"].iloc[0], section["machine"].iloc[0], section["dtype"].iloc[0]
    run_ids = {m["directory"]: str(m.get("run_id", "?")) for m in metas}
    ceilings = []
    for run_dir, in_run in section.groupby("run_dir", sort=False):
        ceiling = in_run["ceiling_gbps"].dropna()
        if len(ceiling):
            ceilings.append(f"{fmt_ratio(ceiling.iloc[0], ' GB/s')} (run {run_ids.get(run_dir, '?')})")
    text = f"{machine}, {dtype}: copy ceiling " + (", ".join(ceilings) if ceilings else "not measured") + "."
    if section["host_s"].map(_finite).any():
        text += " " + HOST_NOTE
    if device == "cuda" and section["xcheck_s"].map(_finite).any():
        text += (f" do_bench: triton.testing.do_bench's median for the same call, an independent timer; "
                 f"ours / do_bench beyond 1 ± {XCHECK_TOLERANCE:g} is flagged.")
    return text


def known_defects() -> list:
    """The registry of known library defects (impls/defects.py)."""
    from impls import defects

    return list(defects.DEFECTS)


def defects_section(doc: Doc, rows: pd.DataFrame, metas: list[dict]) -> None:
    """Every known library defect with its condition, the affected and the
    installed versions, a description and a minimal reproduction; then the
    rows these runs recorded as upstream-defect, with their messages."""
    from impls.defects import for_operators

    registry = for_operators(set(rows["op"]), known_defects() or [])
    observed = rows[rows["status"] == UPSTREAM_DEFECT]
    if not registry and observed.empty:
        return
    doc.heading(2, "Defects found in libraries")
    doc.para("Wrong answers the check traced to a listed defect of a library itself, not to the suite's call of "
             "it: such a case is reported as upstream-defect instead of mismatch, and excused only under the "
             "defect's condition and versions.")
    for defect in registry:
        strategy = str(getattr(defect, "strategy", "?"))
        library = str(getattr(defect, "library", "?"))
        versions = str(getattr(defect, "versions", "") or "every version")
        doc.heading(3, f"{strategy}: {library} {versions}")
        doc.para(str(getattr(defect, "description", "")))
        doc.para(f"Condition: {getattr(defect, 'condition', '?')}.")
        installed = sorted({str((m.get("versions") or {}).get(library)) for m in metas
                            if isinstance(m.get("versions"), dict) and (m.get("versions") or {}).get(library)})
        doc.para(f"Affected versions: {library} {versions}; in these runs: "
                 + (", ".join(f"{library} {v}" for v in installed) if installed else f"{library} not recorded")
                 + ".")
        reference = getattr(defect, "reference", "")
        if reference:
            doc.para(f"Reference: {reference}.")
        seen = observed[(observed["op"] + "/" + observed["strategy"]) == strategy]
        doc.para(f"Observed in {len(seen)} case(s) of these runs." if len(seen) else "Not observed in these runs.")
        doc.para("Minimal reproduction:")
        doc.code(str(getattr(defect, "reproduction", "")).rstrip())
    if len(observed):
        doc.heading(3, "Cases recorded as upstream-defect")
        doc.table(["op", "strategy", "params", "machine", "dtype", "message"],
                  [[r["op"], r["strategy"], params_label(r["params"]), r["machine"], r["dtype"],
                    str(r["message"])[:300]] for _, r in observed.iterrows()])


def build(dirs, out, name: str = "report", light: bool = False) -> Path:
    """Writes ``OUT/<name>.md`` and ``.html``. ``light`` (the dashboard's
    per-run reports): no per-case figures, PNG only, the HTML links its
    figures instead of embedding them."""
    out = store.writable_dir(Path(out), "the report")  # before any work: one line if it cannot be written
    figures = FigureDir(out / "figures", svg=not light)
    rows, metas = load(dirs)
    doc = Doc()
    doc.heading(1, "scatterbench report")
    doc.para("Every number below was measured by scatterbench on the machine named beside it: the median "
             "of per-call timings (SPEC 3), % of ceiling = bytes the operator must move / that device's "
             "measured copy bandwidth / median time. Strategies that failed the float64-oracle check are "
             "listed with their status, never dropped; inexact ones are hatched in the figures. % of ceiling "
             "above 100 means the case's working set stayed in cache (the ceiling is a DRAM copy). A case "
             "measured by several runs on one machine shows the latest run's measurement. The timed call "
             "allocates its outputs afresh, as a user's call does: on the CPU the OS zeroes a fresh output's "
             "pages on first touch, which the copy ceiling (measured into a buffer already touched) does not "
             "pay, so strategies with outputs of tens of MB stay well below 100 % even when their loop runs at "
             "the copy bandwidth. The runs table gives that cost as each run measured it: 'fresh output' is "
             "the write bandwidth into a newly allocated 256 MiB buffer, from numpy's allocator (which asks "
             "for huge pages) and from torch's.")
    if light:
        doc.para("This is the light version the dashboard keeps per run: tables, conclusions and scaling plots, "
                 "without the per-case figures; python report.py RESULT_DIR writes the full report.")
    doc.heading(2, "Runs")
    header, table_rows = environment_table(metas)
    doc.table(header, table_rows)
    doc.para("Ceiling vs history: each device's copy ceiling against the median of the earlier runs on the same "
             "machine. Load: the machine's 1, 5 and 15-minute load averages when the run started and ended, and "
             "the highest 1-minute load any case finished under; at or above the core count, other work competed "
             "with the timed calls.")
    for meta in metas:
        for warning in run_warnings(meta):
            doc.para(warning)
    doc.heading(2, "Hardware")
    header, table_rows = hardware_table(metas)
    doc.table(header, table_rows)
    timed = rows[rows["median_s"].notna()]
    noisy = int(sum(unstable(row) for _, row in timed.iterrows()))
    if noisy:
        doc.para(f"{noisy} of {len(timed)} timed cases are marked {UNSTABLE_MARK} unstable in the tables below: "
                 f"their IQR exceeds {100 * stats.UNSTABLE_REL_IQR:.0f} % of their median.")
    slow_started = slow_start_sentence(timed)
    if slow_started:
        doc.para(slow_started)
    doc.para("Reproduce each run with:")
    doc.code("\n".join(f"make venv && {(plugins.env_setting(m) + ' ') if plugins.env_setting(m) else ''}"
                       f".venv/bin/python -m harness run {m.get('config_file', '?')}" for m in metas))
    from impls.registry import OPERATORS

    for op, op_rows in rows.groupby("op", sort=False):
        doc.heading(2, op)
        baseline = OPERATORS[op].baseline if op in OPERATORS else "seed"
        for (machine, dtype), section in sections(op_rows):
            doc.heading(3, f"{op} · {machine} · {dtype}")
            doc.para(section_intro(section, metas))
            verdict_text, *failures = conclusion(op, section)
            doc.para("Conclusion: " + verdict_text)
            for sentence in failures:
                doc.para(sentence)
            for params, group in section.groupby("params", sort=False):
                title = case_title(group.iloc[0])
                doc.heading(4, title)
                header, table_rows, best, notes = case_table(group)
                doc.table(header, table_rows, best)
                for note in notes:
                    doc.para(note)
                stem = slug(f"{op}-{params_label(params)}-{machine}-{dtype}")
                if light:
                    continue
                doc.figure(figure_times(group, figures, stem + "-time"), f"median time, {title}")
                doc.figure(figure_gbps(group, figures, stem + "-gbps"), f"achieved GB/s against the ceiling, {title}")
                speed = figure_speedup(group, figures, stem + "-speedup", baseline)
                if speed:
                    doc.figure(speed, f"speedup over {baseline}, {title}")
            # One scaling figure per value of the categorical parameters (maxunpool's form):
            # a line through a 1-D and a 2-D case joins two different problems.
            for kind, family in categorical_families(section):
                if family["params"].nunique() < 2:
                    continue
                title = f"{op}{' ' + kind if kind else ''} scaling · {machine} · {dtype}"
                stem = figure_scaling(family, figures, slug(f"{op}-scaling-{kind + '-' if kind else ''}{machine}-{dtype}"),
                                      title)
                if stem:
                    doc.heading(4, title)
                    doc.figure(stem, title)
                for key, family in one_parameter_families(section):
                    fixed = {k: v for k, v in json.loads(family["params"].iloc[0]).items() if k != key}
                    fixed_text = " ".join(f"{k}={v}" for k, v in fixed.items())
                    title = f"{op} against {key} ({fixed_text}) · {machine} · {dtype}"
                    stem = figure_scaling(family, figures, slug(f"{op}-sweep-{key}-{fixed_text}-{machine}-{dtype}"),
                                          title)
                    if stem:
                        doc.heading(4, title)
                        doc.figure(stem, title)
    defects_section(doc, rows, metas)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(render_markdown(doc, "figures"))
    (out / f"{name}.html").write_text(render_html(doc, figures.path, "scatterbench report", embed=not light))
    return out / f"{name}.md"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="report.py", description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="result directories")
    parser.add_argument("-o", "--output", default="report", help="output directory (default ./report)")
    parser.add_argument("--name", default="report", help="file stem of the .md and .html (default report)")
    parser.add_argument("--light", action="store_true",
                        help="tables, conclusions and scaling plots only, figures linked (the dashboard's kind)")
    args = parser.parse_args(argv)
    try:
        written = build([Path(d) for d in args.dirs], Path(args.output), args.name, light=args.light)
    except ResultError as error:
        print(f"report.py: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk filled up while writing, say
        where = error.filename or args.output
        print(f"report.py: error: {where}: {store.describe_os_error(error, where)}", file=sys.stderr)
        return 2
    print(f"wrote {written} and {written.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
