"""One call from a notebook: ``scatterbench.bench("dispersion", C=[4, 8, 16])``.

Builds the config the CLI would read and runs it as ``scatterbench run`` does:
each strategy first passes its operator's adversarial check (per device and
dtype), and only then is each case checked on its own inputs and timed with
the same timer; a strategy that fails is a row with its status and message,
never timed. Thread settings are the config's, applied for the call and
undone afterwards. Returns the rows as a DataFrame plus a figure (time against
the swept parameter, or a bar per strategy). Nothing is written to disk unless
``out`` names a result directory.
"""

from __future__ import annotations

import html
import json
import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.base import caches, plugins
from harness.base.cases import CASE_GROUP, mode_and_layout, with_case_columns
from harness.base.config import expand, parse_config
from harness.base.errors import ResultError, UnpinnedThreadsWarning, UsageError
from harness.base.format import fmt_time
from harness.measuring import ceilings, check, pinning, sweep
from harness.measuring.session import RunSession, signal_again
from harness.results import store
from impls import training


@dataclass
class BenchResult:
    rows: pd.DataFrame  # one row per case, the result schema's columns plus ``speedup``
    figure: Any  # a matplotlib Figure, or None with plot=False
    checks: pd.DataFrame  # the adversarial check: one row per (strategy, check case, mode, layout, dtype)
    threads: dict = field(default_factory=dict)  # the thread counts in force while it measured
    phase_s: dict = field(default_factory=dict)  # seconds per phase (ceilings, adversarial, check, time, ...)
    # What a reader must know: a copy ceiling reused from an earlier call (when,
    # at what load) or measured busy and left unused; why a column is blank.
    notes: list = field(default_factory=list)
    # Why the fitness rule (analysis.run_unfit_reasons: the report's, the dashboard's,
    # `run`'s) does not stand behind these times; empty when it does.
    unfit_reasons: list = field(default_factory=list)

    def _repr_html_(self):  # a notebook shows the table, and why a column is blank
        table = self.rows[["strategy", "params", "status", "median_s", "iqr_s", "pct_of_ceiling",
                           "speedup"]]._repr_html_()
        return table + "".join(f"<p>{html.escape(note)}</p>" for note in self.notes)


def bench(op: str, strategies: list[str] | None = None, *, device: str = "cpu", dtype: str = "float32",
          timing: dict | None = None, threads: dict | None = None, plot: bool = True,
          out: str | Path | None = None, seed: int = 0, mode: str | list[str] = "forward",
          layout: str | list[str] = "contiguous", **params) -> BenchResult:
    """Checks and times ``op`` over the grid ``params`` (a list is swept).

    ``strategies``: names, or None for every strategy that runs on ``device``.
    ``mode``: ``forward`` (the default), ``backward`` or ``forward+backward``
    (docs/SPEC.md §1.5), or a list of them, as a config's ``modes``; each row says its
    ``mode``, and a strategy with no backward is ``skipped`` in the training
    modes with the reason.
    ``layout``: ``contiguous`` (the default) or ``channels_last`` (docs/SPEC.md §2), or a
    list of them, as a config's ``layouts``; each row says its ``layout``.
    ``timing``: the config's timing keys (default: 5 samples, 0.2 s budget).
    ``threads``: the config's thread settings, e.g. ``{"torch": 1, "blas": 1,
    "numba": 1}``, or ``"auto"``, the default: every core but one for every
    pool, so that a neighbour on one core cannot stall a parallel kernel:
    applied while measuring, recorded in ``result.threads``
    (and ``meta.json``), the caller's own settings restored afterwards. A pool
    left unpinned (``{"torch": None}``) on a machine loaded to its core count
    gets an ``UnpinnedThreadsWarning`` in one line.
    Each strategy passes its operator's adversarial check first (the rows of
    ``result.checks``); one that fails is recorded with its status and
    message and never timed.
    The copy ceiling (``pct_of_ceiling``, ``floor_s``) is one this machine
    measured quiet, under the same threads, within the last hour when there
    is one (``result.notes`` says from when, and at what load), else
    measured now; one measured busy is not used (harness/measuring/ceilings.py).
    The CPU's fresh-output write bandwidth is measured (or reused) with it,
    so each CPU row carries its fresh-output-aware floor
    (``fresh_floor_s``, ``pct_of_fresh_floor``), as a run's rows do.
    A measurement the fitness rule does not stand behind (load at the core
    count, a ceiling measured busy: ``result.unfit_reasons``) gives its times
    but no ``speedup``, and ``result.notes`` says why. The strategies of each
    point race in rounds (SPEC 3 "Racing"): each leaves when the rounds show
    it slower than the fastest or equivalent to it; ``timing={"max_rounds":
    32, "budget_s": 1.0}`` gives an undecided point more. A ``speedup`` the
    rule does not separate from the seed's is blank; ``result.notes`` names
    each point's winner, or its equivalent or undecided strategies.
    """
    plugins.load_plugins()  # the built-in strategies, and those SCATTERBENCH_PLUGINS names
    config = parse_config({
        "name": f"bench-{op}", "seed": seed, "devices": [device], "dtypes": [dtype],
        "timing": {"min_samples": 5, "budget_s": 0.2, "warmup_s": 0.02, **(timing or {})},
        **({"threads": threads} if threads is not None else {}),
        "benchmarks": [{"op": op, "strategies": strategies or "all", "params": params,
                        "modes": [mode] if isinstance(mode, str) else list(mode),
                        "layouts": [layout] if isinstance(layout, str) else list(layout)}]}, "bench()")
    cases = expand(config)
    if not cases:
        raise UsageError(f"bench({op!r}): no strategy runs on {device} in {dtype}")
    warning = pinning.oversubscription_warning(config.threads, backends=sweep.backends_of(cases))
    if warning:
        warnings.warn(warning, UnpinnedThreadsWarning, stacklevel=2)
    adversarial = check.AdversarialCheck(seed, config.timing.timeout_s)
    out = Path(out) if out is not None else None
    run_id = sweep.new_run_id(config.name)
    caches.enable_compile_caches()
    with RunSession(out, run_id) as session:
        applied = session.pin_threads(config.threads)
        session.clock("ceilings")
        measured = ceilings.measure_or_reuse((case.device for case in cases), config.threads, fresh=True)
        if out is not None:
            store.prepare_output_dir(out)
        writer = session.open(config, None, ["scatterbench.bench", op], **measured.meta(), status="running")
        sweep.run_sweep(cases, config, writer, run_id, measured.ceilings, on_phase=session.clock,
                        adversarial=adversarial)
        # A result directory written by bench() reads like one `run` wrote: finished, with its end.
        session.complete()
    outcome = session.outcome
    if outcome.interrupted:
        signal_again(outcome.interrupted)
    if outcome.disk_full:
        raise ResultError(f"{out}: {outcome.disk_full}; stopped with {outcome.cases_on_disk} cases safely on disk")
    rows = pd.DataFrame.from_records(writer.rows) if out is None else store.read_rows(out)
    from harness.judging.analysis import run_unfit_reasons, with_speedups

    unfit = run_unfit_reasons(writer.meta if out is None else store.read_meta(out), rows)
    rows = clear_speedups(with_speedups(rows))
    notes = speedup_notes(rows) + ([] if unfit else answer_notes(rows))
    if unfit:  # no speed-up (nor winner) from an unfit measurement, as `run`'s tables and the report give none
        rows = rows.assign(speedup=math.nan)
        notes = [f"this measurement fails the fitness rule ({'; '.join(unfit)}): its times are shown, but no "
                 f"speed-up is given", *notes]
    figure = _figure(rows, op) if plot else None
    checks = pd.DataFrame.from_records(
        [{"strategy": r.item.strategy.name, "case": r.item.label, "dtype": r.item.dtype, "status": r.verdict.status,
          "message": r.verdict.message} for r in adversarial.results],
        columns=["strategy", "case", "dtype", "status", "message"])
    return BenchResult(rows, figure, checks, applied, session.clock.totals(), measured.lines() + notes, unfit)


def clear_speedups(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with ``speedup`` kept only where the one rule
    (``analysis.clearly_faster``, on the rounds) separates the row from the
    seed's original either way: a speed-up within the rounds' spread is a
    tie, and a tie prints none (the seed's own row keeps its 1.0)."""
    from harness.judging.analysis import baseline_name, clearly_faster

    rows = rows.copy()
    for _group, group in rows.groupby(CASE_GROUP, sort=False):
        seed = group[group["strategy"] == baseline_name(group["op"].iloc[0])]
        if seed.empty:
            continue
        base = seed.iloc[0]
        for index, row in group.iterrows():
            if index != seed.index[0] and not (clearly_faster(row, base) or clearly_faster(base, row)):
                rows.at[index, "speedup"] = math.nan
    return rows


def answer_notes(rows: pd.DataFrame) -> list[str]:
    """Per case with at least two rankable strategies, its answer by the one
    rule (``analysis.answer``): the clear winner, or every strategy of a tie,
    and why no win can be claimed. Not asked of an unfit measurement."""
    from harness.judging.analysis import answer, ranked, winner_text

    notes = []
    for _group, group in with_case_columns(rows).groupby(CASE_GROUP, sort=False):
        if len(ranked(group)) < 2:  # nothing to compare the one strategy with
            continue
        text = winner_text(answer(group))
        if text:
            first = group.iloc[0]
            notes.append(f"fastest for {first['op']} {first['params']} ({mode_and_layout(first)}): {text}")
    return notes


def speedup_notes(rows: pd.DataFrame) -> list[str]:
    """Why ``speedup`` is blank (NaN) where it is: one line per reason."""
    from impls.registry import OPERATORS

    notes = []
    for _group, group in rows.groupby(CASE_GROUP, sort=False):
        op = group["op"].iloc[0]
        reason = OPERATORS[op].missing_baseline(dict(zip(group["strategy"], group["status"])))
        note = f"speedup is blank for {op}: {reason}" if reason else None
        if note and note not in notes:
            notes.append(note)
    return notes


MODE_LINE_STYLE = dict(zip(training.MODES, ("-", "--", ":")))  # forward, backward, forward+backward


def _figure(rows: pd.DataFrame, op: str):
    """Median time per call, with the report's colours (one per strategy) and
    error bars (Q1 to Q3 of the samples, `figures.quartiles`), on an axis that
    holds the medians: a bar past it is drawn to the edge and marked there.
    A strategy's modes share its colour and differ by line style."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    from harness.presenting.report.figures import CLIP_MARK, axis_limits, clip_spreads, quartiles, strategy_colour

    timed = rows[rows["median_s"].notna()].copy()
    # Several modes or layouts: a strategy's line or bar per mode and layout, named by them.
    timed = with_case_columns(timed)
    kinds = [timed[column] for column in ("mode", "layout") if timed[column].nunique() > 1]
    timed["label"] = timed["strategy"] + ((" (" + (kinds[0] if len(kinds) == 1 else kinds[0] + " " + kinds[1])
                                           + ")") if kinds else "")
    params = timed["params"].map(json.loads)
    keys = sorted({key for p in params for key in p})
    varying = [key for key in keys if params.map(lambda p: p.get(key)).nunique() > 1]
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    low, high = axis_limits(timed["median_s"])
    along_y = len(varying) == 1 and len(timed)

    def bars(frame):
        """Each row's error bar below and above its median, cut at the axis, and the sides cut (low, high)."""
        shown_low, shown_high, cut = clip_spreads([quartiles(row) for _, row in frame.iterrows()], (low, high))
        medians = list(frame["median_s"])
        return [[m - lo for m, lo in zip(medians, shown_low)], [hi - m for m, hi in zip(medians, shown_high)]], cut

    if along_y:
        key = varying[0]
        timed["x"] = params.map(lambda p: p[key])
        for name, line in timed.groupby("label"):
            line = line.sort_values("x")
            colour = strategy_colour(line["strategy"].iloc[0])
            error, cut = bars(line)
            # One colour per strategy, as in the report; its modes apart by line style.
            style = MODE_LINE_STYLE.get(line["mode"].iloc[0] if "mode" in line else "forward", "-")
            ax.errorbar(line["x"], line["median_s"], yerr=error, marker="o", markersize=3, capsize=2, label=name,
                        color=colour, linestyle=style)
            for x, sides in zip(line["x"], cut):
                for beyond, edge, marker in zip(sides, (low, high), ("v", "^")):
                    if beyond:
                        ax.plot([x], [edge], marker=marker, color=colour, linestyle="none", clip_on=False,
                                gid=CLIP_MARK)
        ax.set_xscale("log")
        ax.set_xlabel(key)
        ax.set_yscale("log")
        ax.set_ylim(low, high)
    else:
        ordered = timed.sort_values("median_s")
        error, cut = bars(ordered)
        ax.barh(range(len(ordered)), ordered["median_s"], xerr=error,
                color=[strategy_colour(name) for name in ordered["strategy"]])
        for position, sides in enumerate(cut):
            for beyond, edge, marker in zip(sides, (low, high), ("<", ">")):
                if beyond:
                    ax.plot([edge], [position], marker=marker, color="black", linestyle="none", clip_on=False,
                            gid=CLIP_MARK)
        ax.set_yticks(range(len(ordered)), [str(n).replace("$", r"\$") for n in ordered["label"]], fontsize=8)
        ax.set_xscale("log")
        ax.set_xlim(low, high)
    # Times in µs/ms, as the report prints them, not "4×10⁻⁵" seconds.
    (ax.yaxis if along_y else ax.xaxis).set_major_formatter(FuncFormatter(lambda s, _: fmt_time(s)))
    ax.set_title(f"{op}: median time per call (bars: Q1 to Q3 of the samples; a mark at an edge: cut there)",
                 fontsize=10)
    if along_y:
        ax.set_ylabel("median time per call")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, alpha=0.3, which="both")
    return fig
