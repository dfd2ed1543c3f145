"""Terminal tables: the strategy list, check results, and a run's summary."""

from __future__ import annotations

import json
import math
import sys

import pandas as pd
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from impls.registry import OPERATORS

STATUS_STYLE = {"ok": "green", "inexact": "yellow", "mismatch": "bold red", "error": "red",
                "timeout": "magenta", "skipped": "dim", "upstream-defect": "cyan"}
CORRECT = ("ok", "inexact")


def fmt_time(seconds: float) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "–"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_num(value: float, digits: int = 3, suffix: str = "") -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{value:.{digits}g}{suffix}"


# Parameters in the order the operators declare them (case ids store them sorted).
PARAM_ORDER = ("form", "N", "B", "C", "F", "H", "W", "L", "k", "f", "S")


def params_label(params_json: str) -> str:
    params = json.loads(params_json)
    ordered = sorted(params, key=lambda key: (PARAM_ORDER.index(key) if key in PARAM_ORDER else 99, key))
    return " ".join(f"{key}={params[key]}" for key in ordered)


def strategies_table(strategies) -> Table:
    table = Table(title="strategies", show_lines=False)
    for column in ("op", "strategy", "backend", "devices", "dtypes", "returns", "ties", "requires", "source"):
        table.add_column(column)
    for s in strategies:
        table.add_row(s.op, s.name, s.backend, ",".join(s.devices), ",".join(s.dtypes),
                      s.returns, s.ties, ",".join(getattr(s, "requires", ())) or "–", escape(s.source))
    return table


def with_speedups(rows: pd.DataFrame) -> pd.DataFrame:
    """Adds ``speedup`` over the operator's baseline (the seed's original
    strategy) measured in the same case group; NaN where it was not measured."""
    rows = rows.copy()
    rows["speedup"] = math.nan
    keys = ["op", "params", "device", "dtype"]
    for _, group in rows.groupby(keys, sort=False):
        op = group["op"].iloc[0]
        baseline = OPERATORS[op].baseline if op in OPERATORS else None
        base = group[(group["strategy"] == baseline) & group["status"].isin(CORRECT)]
        if len(base):
            rows.loc[group.index, "speedup"] = float(base["median_s"].iloc[0]) / group["median_s"]
    return rows


def summary_tables(rows: pd.DataFrame) -> list[Table]:
    """One table per (op, params, device, dtype): strategies sorted by median."""
    rows = with_speedups(rows)
    tables = []
    for (op, params, device, dtype), group in rows.groupby(["op", "params", "device", "dtype"], sort=False):
        baseline = OPERATORS[op].baseline if op in OPERATORS else "?"
        table = Table(title=f"{op}  {params_label(params)}  {device} {dtype}", title_justify="left")
        for column, justify in (("strategy", "left"), ("status", "left"), ("median", "right"),
                                ("IQR", "right"), ("GB/s", "right"), ("% ceiling", "right"),
                                (f"× {baseline}", "right"), ("message", "left")):
            table.add_column(column, justify=justify)
        ordered = group.assign(_key=group["median_s"].fillna(math.inf)).sort_values("_key")
        best = ordered[ordered["status"] == "ok"]["strategy"].head(1).tolist()
        for _, r in ordered.iterrows():
            name = escape(r["strategy"])
            table.add_row(f"[bold]{name}[/]" if name in best else name,
                          f"[{STATUS_STYLE.get(r['status'], '')}]{escape(r['status'])}[/]",
                          fmt_time(r["median_s"]), fmt_time(r["iqr_s"]), fmt_num(r["gbps"]),
                          fmt_num(r["pct_of_ceiling"], 3, " %"), fmt_num(r["speedup"], 3, "×"),
                          escape(str(r["message"])[:80]))
        tables.append(table)
    return tables


def check_table(results) -> Table:
    """``results``: (CheckItem, Verdict, seconds) triples, one row per strategy
    and device/dtype with counts, failures spelled out."""
    table = Table(title="check against the float64 oracle", title_justify="left")
    for column in ("op", "strategy", "device", "dtype", "cases", "status", "first problem"):
        table.add_column(column)
    grouped: dict = {}
    for item, verdict, _seconds in results:
        key = (item.strategy.op, item.strategy.name, item.device, item.dtype)
        grouped.setdefault(key, []).append((item, verdict))
    for (op, name, device, dtype), entries in grouped.items():
        order = ("mismatch", "error", "timeout", "upstream-defect", "inexact", "skipped", "ok")
        worst = min((v.status for _, v in entries), key=order.index)
        problem = next((f"{i.label}: {v.message}" for i, v in entries if v.status == worst and v.message), "")
        table.add_row(op, escape(name), device, dtype, str(len(entries)),
                      f"[{STATUS_STYLE.get(worst, '')}]{worst}[/]", escape(problem[:160]))
    return table


def console(stderr: bool = False, **kwargs) -> Console:
    """A console that stays wide when writing to a file or a CI log."""
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else 180
    return Console(stderr=stderr, width=width, **kwargs)
