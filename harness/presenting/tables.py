"""Terminal output: the strategy list, check results, a run's summary (one
table per case, or a compact strategies × sizes grid), comparisons, and the
progress bar. Everything is rich renderables; nothing here computes a result.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from harness.base.cases import CASE_GROUP, case_value, grid_cells, mode_and_layout, with_case_columns
from harness.base.format import (  # noqa: F401
    fmt_num,
    fmt_p,
    fmt_pct,
    fmt_ratio,
    fmt_time,
    md_escape,
    ordered_params,
    params_label,
    shorten,
)
from harness.judging import analysis, regression
from harness.judging.analysis import (
    BEST_MARK,
    PARTIAL_MARK,
    UNSTABLE,
    partial_output,
    with_speedups,
)
from harness.results import floors, stats
from impls import training
from impls.backends import CASE_LAYOUTS
from impls.registry import OPERATORS, speedup_note
from impls.status import (
    CORRECT,
    ERROR,
    INEXACT,
    INPUT_MODIFIED,
    MISMATCH,
    OK,
    SKIPPED,
    TIMEOUT,
    UNREPEATABLE,
    UPSTREAM_DEFECT,
    worst,
)

STATUS_STYLE = {OK: "green", INEXACT: "yellow", MISMATCH: "bold red", UNREPEATABLE: "bold red",
                INPUT_MODIFIED: "bold red", UPSTREAM_DEFECT: "magenta", ERROR: "red", TIMEOUT: "magenta", SKIPPED: "dim"}
VERDICT_STYLE = {regression.REGRESSED: "bold red", regression.BROKEN: "bold red", regression.IMPROVED: "green",
                 regression.FIXED: "green", regression.SAME: "", regression.ONLY_IN_BASE: "dim",
                 regression.ONLY_IN_NEW: "dim", regression.NOT_TIMED: "dim"}
UNSTABLE_MARK = UNSTABLE.ascii  # one cell wide in any terminal


@dataclass(frozen=True)
class Column:
    name: str
    priority: int  # the lowest stays longest when the table does not fit
    justify: str = "left"
    flexible: bool = False  # long free text (params, messages): cut with "…" before anything is dropped


FLEXIBLE_MIN = 16  # what a flexible column is cut down to before columns are dropped
FLEXIBLE_CAP = 48  # a dropped column comes back only if flexible ones keep this much


def fitted_table(title: str, columns: list[Column], rows: list[list[str]], width: int | None,
                 caption: str = "") -> Table:
    """A table that fits ``width`` columns: no cell wraps. Columns of lowest
    priority are left out (the caption names them) until the rest fit with
    flexible ones (params, messages) up to FLEXIBLE_CAP wide; flexible text
    beyond what is left is cut with "…". The strategy, status and verdict
    (priority 0) always stay."""
    def cell_width(text: str) -> int:
        return Text.from_markup(text).cell_len

    natural = [max([len(column.name)] + [cell_width(row[index]) for row in rows])
               for index, column in enumerate(columns)]
    kept = list(range(len(columns)))

    def needed(indices, flexible_width: int = FLEXIBLE_MIN) -> int:  # box-drawn: "│ a │ b │"
        return sum(min(natural[i], flexible_width) if columns[i].flexible else natural[i] for i in indices) \
            + 3 * len(indices) + 1

    if width:
        while needed(kept, FLEXIBLE_CAP) > width:
            droppable = [i for i in kept if columns[i].priority > 0]
            if not droppable:
                break
            kept.remove(max(droppable, key=lambda i: (columns[i].priority, i)))
        # Dropping one wide column may leave room for a narrower one dropped before it, if
        # the flexible columns kept keep their text too (up to FLEXIBLE_CAP); a flexible
        # column comes back wherever FLEXIBLE_MIN of it fits.
        for i in sorted(set(range(len(columns))) - set(kept), key=lambda i: (columns[i].priority, i)):
            if needed(sorted(kept + [i]), FLEXIBLE_MIN if columns[i].flexible else FLEXIBLE_CAP) <= width:
                kept = sorted(kept + [i])
    left_out = [columns[i].name for i in range(len(columns)) if i not in kept]
    if left_out:
        caption = (caption + "; " if caption else "") + \
            f"left out at {width} columns: {', '.join(left_out)} (widen the terminal or set COLUMNS)"
    flexible = [i for i in kept if columns[i].flexible]
    budget = None
    if width and flexible:  # what the fixed columns leave, shared by the flexible ones
        fixed = sum(natural[i] + 3 for i in kept if not columns[i].flexible) + 1
        budget = max(FLEXIBLE_MIN, (width - fixed) // len(flexible) - 3)
    table = Table(title=title, title_justify="left", caption=caption or None, caption_justify="left")
    for i in kept:
        flex = columns[i].flexible
        table.add_column(columns[i].name, justify=columns[i].justify, no_wrap=True, overflow="ellipsis",
                         min_width=None if flex else natural[i],
                         max_width=min(natural[i], budget) if flex and budget else None)
    for row in rows:
        table.add_row(*(row[i] for i in kept))
    return table


def _width(width: int | None) -> int | None:
    return width if width is not None else console().width


def console(stderr: bool = False, **kwargs) -> Console:
    """A console as wide as $COLUMNS says, else the terminal, else 180
    columns when writing to a file or a CI log."""
    import os

    stream = sys.stderr if stderr else sys.stdout
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else (None if stream.isatty() else 180)
    return Console(stderr=stderr, width=width, **kwargs)


def progress_bar(disable: bool = False, console: Console | None = None) -> Progress:
    """Phase and case on the left, count, elapsed time and an ETA on the right."""
    from rich.table import Column as TableColumn

    from harness.presenting.tables import console as make_console

    out = console or make_console(stderr=True)
    # The count, times and ETA take about 30 columns and the bar at least 10: the
    # description (phase and case) gets the rest, cut with "…", so that at 80
    # columns a long strategy name cannot squeeze them out.
    bar_width = max(10, min(40, out.width - 80 + 10))
    description = TableColumn(no_wrap=True, overflow="ellipsis", max_width=max(20, out.width - bar_width - 32))
    return Progress(TextColumn("{task.description}", markup=False, table_column=description),
                    BarColumn(bar_width=bar_width), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
                    TimeRemainingColumn(), console=out, disable=disable, transient=False)


def strategies_table(strategies, width: int | None = None) -> Table:
    columns = [Column("op", 1), Column("strategy", 0), Column("backend", 3), Column("devices", 2),
               Column("dtypes", 5), Column("returns", 4), Column("ties", 7), Column("requires", 8),
               Column("layouts", 8), Column("role", 6), Column("backward", 10, flexible=True), Column("source", 9, flexible=True)]
    rows = []
    for s in strategies:
        role = ", ".join(name for name, flag in (("baseline", s.baseline), ("built-in", s.builtin),
                                                 ("reference", OPERATORS[s.op].reference == s.name)) if flag)
        rows.append([s.op, escape(s.name), s.backend, ",".join(s.devices), ",".join(s.dtypes),
                     s.returns, s.ties, ",".join(s.requires) or "–", _native_layouts(s), role, escape(training.describe(s)),
                     escape(s.source)])
    return fitted_table("strategies", columns, rows, _width(width))


def _native_layouts(strat) -> str:
    """The case layouts a strategy takes as they are (``Strategy.native_layouts``): "any", or the
    ones it declares (any other is converted inside its timed call)."""
    return "any" if set(CASE_LAYOUTS) <= set(strat.native_layouts) else ",".join(strat.native_layouts)


def _iqr_text(row) -> str:
    rel = stats.rel_iqr(row["iqr_s"], row["median_s"])
    if not math.isfinite(rel):
        return "–"
    text = fmt_pct(100 * rel, 2)
    return f"[yellow]{text}{UNSTABLE_MARK}[/]" if analysis.unstable(row) else text


def _ceiling_text(row) -> str:
    """A row's % of the copy ceiling: past ``floors.OVER_FLOOR_PCT`` marked in
    yellow (``floors.ceiling_note`` under the table says why), never a plain
    number a reader takes for a speed past memory's."""
    pct = row.get("pct_of_ceiling")
    if floors.over_floor(pct):
        return f"[yellow]{floors.OVER_FLOOR_MARK} {fmt_num(pct, 3)}[/]"
    return fmt_num(pct, 3)


def _floor_text(row) -> str:
    """A row's % of floor by size: the percentage, or the flag in yellow (``floors.floor_cell``)."""
    pct = row.get("pct_of_floor")
    text = floors.floor_cell(pct, short=True)
    return f"[yellow]{escape(text)}[/]" if floors.over_floor(pct) else text


def _mode_title(mode: str, layout: str = "contiguous") -> str:
    """What a table's title adds for its mode and layout: nothing for forward
    and contiguous (titles read as before modes and layouts existed), each
    otherwise."""
    label = mode_and_layout({"mode": mode, "layout": layout}, sep="  ", say_forward=False)
    return f"  {label}" if label else ""


def _row_title(r) -> str:
    return _mode_title(case_value(r, "mode"), case_value(r, "layout"))


def case_tables(rows: pd.DataFrame, judged: bool = True) -> list:
    """One table per case group (`CASE_GROUP`): strategies sorted by median.
    Narrow enough for 80 columns: messages go under the table, not in it.
    ``judged=False`` (a run the fitness rule calls unfit): no strategy marked
    fastest, no speed-ups."""
    rows = with_speedups(rows)
    if not judged:
        rows = rows.assign(speedup=math.nan)
    out = []
    for (op, device, dtype, params, mode, layout), group in with_case_columns(rows).groupby(CASE_GROUP, sort=False):
        baseline = OPERATORS[op].baseline if op in OPERATORS else "?"
        no_speedup = speedup_note(op, dict(zip(group["strategy"], group["status"])))
        table = Table(title=f"{op}  {params_label(params)}  {device} {dtype}" + _mode_title(mode, layout),
                      title_justify="left",
                      caption=("no fastest marked, × blank: the run is unfit" if not judged else
                               f"× blank: {no_speedup}" if no_speedup else f"×: speedup over {baseline}")
                              + f"; IQR as % of the median, {UNSTABLE_MARK}: unstable "
                              f"(> {100 * analysis.UNSTABLE_REL_IQR:.0f} %)", caption_justify="left")
        with_floor = "pct_of_floor" in group and bool(group["pct_of_floor"].map(math.isfinite).any())
        if with_floor:
            table.caption += f"; % floor: of the floor by size, past {floors.OVER_FLOOR_PCT:.0f} % flagged"
        width = max(len(str(name)) for name in group["strategy"])
        table.add_column("strategy", no_wrap=True, min_width=min(width, 40))
        for column in ("status", "median", "IQR", "GB/s", "% ceil", *(["% floor"] if with_floor else []), "×"):
            table.add_column(column, justify="left" if column == "status" else "right", no_wrap=True)
        ordered = group.assign(_key=group["median_s"].fillna(math.inf)).sort_values("_key", kind="stable")
        # The answer's winner, or every strategy of a tie (the report's rule); none in an unfit run.
        found = analysis.answer(group) if judged else None
        best = set(analysis.winners(found))
        notes = [f"starred: {analysis.winner_text(found)}"] if len(best) > 1 or (found and found.unclear) else []
        if ordered["pct_of_ceiling"].map(floors.over_floor).any():
            notes.append(floors.ceiling_note())
        for _, r in ordered.iterrows():
            name = escape(r["strategy"])
            floor = [_floor_text(r)] if with_floor else []
            table.add_row(f"[bold]{name} {BEST_MARK}[/]" if r["strategy"] in best else name,
                          f"[{STATUS_STYLE.get(r['status'], '')}]{escape(r['status'])}[/]",
                          fmt_time(r["median_s"]), _iqr_text(r), fmt_num(r["gbps"]),
                          _ceiling_text(r), *floor, fmt_ratio(r["speedup"]))
            over = floors.over_floor_line(r["strategy"], r.get("pct_of_floor"))
            if over:
                notes.append(over)
            if r["message"] and r["status"] != OK:
                notes.append(f"{r['strategy']}: {shorten(r['message'], 200)}")
            disagreement = analysis.timer_disagreement(r)
            if disagreement:
                notes.append(f"{r['strategy']}: {disagreement}")
        out.append(table)
        if notes:
            out.append(Text("\n".join(notes), style="dim"))
    return out


def _varying_label(params_json: str, varying: list[str]) -> str:
    params = json.loads(params_json)
    keys = [key for key in ordered_params(params) if key in varying] or ordered_params(params)
    return " ".join(f"{key}={params[key]}" for key in keys)


def grid_tables(rows: pd.DataFrame, judged: bool = True) -> list:
    """Strategies × sizes per (op, device, dtype, mode, layout), as torch.utils.benchmark's
    Compare prints them: the median per cell (three significant figures),
    the speedup over the baseline beside it, the column's best in bold green
    (both, where the two fastest tie), unstable cells marked. A training
    mode's table names its mode. ``judged=False`` (an unfit run): no best,
    no speed-ups."""
    rows = with_speedups(rows)
    if not judged:
        rows = rows.assign(speedup=math.nan)
    rows = with_case_columns(rows)
    out = []
    for (op, device, dtype, mode, layout), group in rows.groupby(["op", "device", "dtype", "mode", "layout"],
                                                                 sort=False):
        params = group["params"].map(json.loads)
        keys = sorted({key for p in params for key in p})
        varying = [key for key in keys if params.map(lambda p: p.get(key)).nunique() > 1]
        columns = list(dict.fromkeys(group["params"]))
        labels = {p: _varying_label(p, varying) for p in columns}
        baseline = OPERATORS[op].baseline if op in OPERATORS else "?"
        has_baseline = baseline in set(group["strategy"])
        partial = [name for name in dict.fromkeys(group["strategy"]) if partial_output(op, name)]
        no_speedup = None if has_baseline else speedup_note(op, dict(zip(group["strategy"], group["status"])))
        table = Table(title=f"{op}  {device} {dtype}" + _mode_title(mode, layout), title_justify="left",
                      caption=f"median per call{f' (× {baseline})' if has_baseline and judged else ''}; "
                              + (f"no speedups: {no_speedup}; " if no_speedup and judged else "")
                              + (f"{BEST_MARK} bold: fastest correct (two where they tie); " if judged else
                                 "no fastest marked: the run is unfit; ")
                              + f"{UNSTABLE_MARK}: IQR > {100 * analysis.UNSTABLE_REL_IQR:.0f} % of the median"
                              + (f"; {floors.OVER_FLOOR_MARK}: {floors.OVER_FLOOR_TEXT} (listed below)"
                                 if group.get("pct_of_floor", pd.Series(dtype=float)).map(floors.over_floor).any()
                                 else "")
                              + (f"; {PARTIAL_MARK}: returns less than {OPERATORS[op].whole_output}, not ranked"
                                 if partial else ""),
                      caption_justify="left")
        table.add_column("strategy", no_wrap=True)
        for p in columns:
            table.add_column(labels[p], justify="right")
        best = {p: set(analysis.winners(analysis.answer(cell_group) if judged else None))
                for p, cell_group in group.groupby("params")}

        def cell(p, found):
            r = found.iloc[0]
            if not analysis.timed(found).iloc[0]:
                return f"[{STATUS_STYLE.get(r['status'], '')}]{escape(r['status'])}[/]"
            mark = (UNSTABLE_MARK if analysis.unstable(r) else "") \
                + (f" {floors.OVER_FLOOR_MARK}" if floors.over_floor(r.get("pct_of_floor")) else "")
            text = f"{fmt_time(r['median_s'])}{mark}"
            if math.isfinite(r["speedup"]):
                text += f" ({fmt_ratio(r['speedup'])})"
            return f"[bold green]{text} {BEST_MARK}[/]" if r["strategy"] in best.get(p, ()) else text

        for name, by_strategy in group.groupby("strategy", sort=False):
            table.add_row(escape(name) + (f" {PARTIAL_MARK}" if name in partial else ""),
                          *grid_cells(by_strategy, "params", columns, "", cell))
        out.append(table)
    return out


def run_summary(rows: pd.DataFrame, grid: bool = True, unfit_reasons: list[str] = ()) -> list:
    """The run's tables and warnings. A run that fails the fitness rule
    (``analysis.run_unfit_reasons``: the report's and the dashboard's) marks
    no strategy fastest and shows no speed-up, and says why first."""
    judged = not unfit_reasons
    renderables = [] if judged else [Text(
        f"warning: this run fails the fitness rule ({'; '.join(unfit_reasons)}): its times are shown, but no "
        f"strategy is marked fastest and no speed-up is given", style="yellow")]
    renderables += grid_tables(rows, judged) if grid else case_tables(rows, judged)
    disagreeing = [r for _, r in rows.iterrows() if analysis.timers_disagree(r)]
    if grid and disagreeing:
        renderables.append(Text("\n".join(f"{r['op']}/{r['strategy']} {params_label(r['params'])}: "
                                          f"{analysis.timer_disagreement(r)}" for r in disagreeing), style="yellow"))
    over = [line for _, r in rows.iterrows()
            if (line := floors.over_floor_line(f"{r['op']}/{r['strategy']} {params_label(r['params'])}"
                                               f"{_row_title(r)}", r.get("pct_of_floor")))]
    if grid and over:
        renderables.append(Text("\n".join(over), style="yellow"))
    failed = rows[~rows["status"].isin(CORRECT)] if len(rows) else rows
    if grid and len(failed):
        renderables.append(Text("\n".join(f"{r['op']}/{r['strategy']} {r['device']} {r['dtype']} "
                                          f"{params_label(r['params'])}{_row_title(r)}: "
                                          f"{r['status']}: {shorten(r['message'], 160)}"
                                          for _, r in failed.iterrows()), style="dim"))
    undecided = analysis.undecided_points(rows) if judged and grid else []
    if undecided:
        renderables.append(Text("\n".join(
            f"{point}: undecided after {rounds} rounds: {', '.join(names)} (more rounds or budget may tell: "
            f"timing.max_rounds, timing.budget_s)" for point, names, rounds in undecided), style="yellow"))
    unstable = rows[rows.apply(analysis.unstable, axis=1)] \
        if len(rows) else rows
    if len(unstable):
        renderables.append(Text(f"warning: {len(unstable)} of {len(rows)} cases are unstable (IQR within a round above "
                                f"{100 * analysis.UNSTABLE_REL_IQR:.0f} % of the median): the machine was busy or "
                                f"the case is noisy; compare them with care", style="yellow"))
    return renderables


def check_table(results, width: int | None = None) -> Table:
    """One row per strategy, device, dtype and training mode with its count of checks (each mode's
    own), failures spelled out."""
    columns = [Column("op", 2), Column("strategy", 0), Column("device", 5), Column("dtype", 4), Column("mode", 3),
               Column("checks", 6, "right"), Column("status", 0), Column("first problem", 1, flexible=True)]
    grouped: dict = {}
    for result in results:
        item, verdict = result.item, result.verdict
        key = (item.strategy.op, item.strategy.name, item.device, item.dtype, item.training)
        grouped.setdefault(key, []).append((item, verdict))
    rows = []
    for (op, name, device, dtype, mode), entries in grouped.items():
        status = worst(v.status for _, v in entries)
        problem = next((f"{i.label}: {v.message}" for i, v in entries if v.status == status and v.message), "")
        problem = shorten(problem, 160)
        rows.append([op, escape(name), device, dtype, mode, str(len(entries)),
                     f"[{STATUS_STYLE.get(status, '')}]{status}[/]", escape(problem)])
    return fitted_table("check against the float64 oracle", columns, rows, _width(width))


def compare_table(table: pd.DataFrame, relative: bool = False, width: int | None = None) -> Table:
    from harness.judging.compare import value_text

    columns = [Column("op", 2), Column("strategy", 0), Column("device", 6), Column("dtype", 5), Column("mode", 1),
               Column("params", 3, flexible=True), Column("base", 5, "right"), Column("new", 4, "right"),
               Column("ratio", 0, "right"), Column("p", 7, "right"), Column("verdict", 0)]
    rows = []
    for _, r in table.iterrows():
        style = VERDICT_STYLE.get(r["verdict"], "")
        rows.append([escape(r["op"]), escape(r["strategy"]), r["device"], r["dtype"], escape(mode_and_layout(r)),
                     escape(params_label(r["params"])), value_text(r["base_s"], relative),
                     value_text(r["new_s"], relative), fmt_ratio(r["ratio"]), fmt_p(r["p_value"]),
                     f"[{style}]{escape(r['verdict'])}[/]" if style else escape(r["verdict"])])
    return fitted_table("compare" + (" (normalised to a reference strategy)" if relative else ""), columns, rows,
                        _width(width))


__all__ = ["CORRECT", "STATUS_STYLE", "check_table", "compare_table", "console", "fmt_num", "fmt_time",
           "grid_tables", "params_label", "partial_output", "progress_bar", "run_summary", "strategies_table",
           "with_speedups"]
