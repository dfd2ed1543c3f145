"""``scatterbench dashboard RESULTS_ROOT -o SITE``: a static regression dashboard.

Result directories are the history: every run under RESULTS_ROOT, oldest
first, read from its small summary (harness/results/summary.py), never from its raw
samples unless a change is large enough to judge (harness/judging/history.py). The
red list holds only the changes the CI gate's rule fails between two runs fit
to judge; the others are shown in grey with the reason, and a change of
machine or of a strategy's source is marked as such.

The site is static: HTML pages with relative links, each case's history in a
small data script (``data/cases/<case>.js``) that the vendored uPlot draws in
the browser; plain scripts, not fetched JSON, so it works opened from disk
(file://) as from any static host. Every text that comes from a result file
is escaped. Each of the newest runs links its light report.
"""

from __future__ import annotations

import hashlib
import html
import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base import plugins
from harness.base.cases import CASE_GROUP, mode_and_layout
from harness.base.format import (
    fmt_p,
    fmt_ratio,
    fmt_time,
    ordered_params,
    params_label,
    slug,
)
from harness.judging import analysis, history, regression
from harness.results import metrics, runmeta, store
from impls import training

ASSETS = Path(__file__).with_name("dashboard_assets")
SITE_ASSETS = ("uPlot.iife.min.js", "uPlot.min.css", "uPlot-LICENSE", "dashboard.js")
DEFAULT_REPORTS = 10  # the newest runs whose light report the site keeps
CACHE = ".cache"  # in the site: files hashed, the history, pairs judged, colours, summaries of read-only runs
VERDICTS, FILES, COLOURS = "verdicts.json", "files.json", "colours.json"
KEY_FILE = ".key"  # in each run's report directory: what it was built from
TREND_RUNS = 30  # the overview's sparkline: the latest runs of the case
UNSTABLE_MARK = analysis.UNSTABLE.mark
STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px}"
         "td.num{text-align:right}.regressed,li.red{color:#b00;font-weight:bold}.improved{color:#070}"
         ".not-judged,li.grey{color:#777}li.source{color:#1f5fbf}nav a{margin-right:1em}"
         "td.unstable{color:#a60;font-weight:bold}div.chart{margin:0 0 2em}.runinfo{font-size:12px;color:#555}"
         ".legend{font-size:12px;margin:4px 0}.legend div{margin:2px 0}.legend b{display:inline-block;width:6em}"
         ".legend button{font:inherit;border:1px solid #ccc;border-radius:3px;background:#fff;margin:1px 3px;"
         "padding:1px 6px;cursor:pointer}.legend button.off{opacity:.4;text-decoration:line-through}"
         ".legend svg{vertical-align:middle;margin-right:4px}")


# ----------------------------------------------------------- the report seam
def _report():
    """The report package (harness/presenting/report/): the dashboard's one import of
    it, made only when a report is built or a new strategy needs its colour
    (it imports matplotlib)."""
    from harness.presenting import report

    return report


def _report_source() -> bytes:
    """The report package's source, read without importing it: a change to
    it rebuilds the reports and the colours."""
    spec = importlib.util.find_spec("harness.presenting.report")
    folder = Path(spec.origin).parent if spec and spec.origin else None
    return b"".join(path.read_bytes() for path in sorted(folder.glob("*.py"))) if folder else b""


def build_run_report(directory: Path, target: Path) -> None:
    """Writes the run's light report (tables, conclusions, scaling plots) under ``target``."""
    _report().build([directory], target, light=True)


def strategy_colour(name: str) -> str:
    """The strategy's colour in the report's figures, so a strategy looks the same everywhere."""
    from harness.presenting.report import figures

    return figures.strategy_colour(name)


def strategy_colours(names: list[str], cache_path: Path) -> dict[str, str]:
    """{strategy: colour} for ``names``, kept in the site's cache with the
    report's source and the registry's strategy names it depends on: a build
    that meets no new strategy does not import the report (and matplotlib)."""
    from impls.registry import OPERATORS

    registry = {op: sorted(operator.strategies) for op, operator in OPERATORS.items()}
    key = hashlib.sha256(_report_source() + json.dumps(registry, sort_keys=True).encode()).hexdigest()
    cache = _load_cache(cache_path)
    colours = cache.get("colours", {}) if cache.get("key") == key else {}
    missing = [name for name in names if name not in colours]
    for name in missing:
        colours[name] = strategy_colour(name)
    if missing or cache.get("key") != key:
        store.write_json_atomic(cache_path, {"key": key, "colours": colours})
    return colours


# ------------------------------------------------------------------ helpers
SPARK_LEVELS = "▁▂▃▄▅▆▇█"
SPARK_MIN_SPAN = math.log(1.5)  # the least change that spans the full height: ±50 %


def sparkline(medians) -> str:
    """One character per run, its height the median's log-ratio to the
    series' own median, scaled to the largest such ratio but never to less
    than ±50 %: a 0.1 % change stays flat (min-max scaling drew it as a full
    drop, like a real 1.7× move); '·' where a run has no time."""
    finite = [m for m in medians if isinstance(m, (int, float)) and math.isfinite(m) and m > 0]
    if not finite:
        return "·" * len(medians)
    centre = float(pd.Series(finite).median())
    span = max([SPARK_MIN_SPAN] + [abs(math.log(m / centre)) for m in finite])
    out = []
    for m in medians:
        if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
            out.append("·")
            continue
        level = round(3.5 + 3.5 * math.log(m / centre) / span)
        out.append(SPARK_LEVELS[min(7, max(0, level))])
    return "".join(out)


def case_title(op: str, params: str, device: str, dtype: str) -> str:
    return f"{op} {params_label(params)} · {device} {dtype}"


def _page(title: str, body: list[str], head: str = "") -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>{head}</head><body>"
            + "\n".join(body) + "</body></html>")


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _short(values) -> list:
    """Four significant digits, None (JSON null) for no value: the data files stay small."""
    values = np.asarray(values, dtype=float)
    finite = np.isfinite(values) & (values != 0)
    scale = np.ones_like(values)
    scale[finite] = 10.0 ** (3 - np.floor(np.log10(np.abs(values[finite]))))
    rounded = np.round(values * scale) / scale
    return [float(value) if ok else None for value, ok in zip(rounded.tolist(), np.isfinite(values).tolist())]


def _run_date(start_time: str) -> str:
    return start_time[:16].replace("T", " ")


# ------------------------------------------------------------------ reports
def _report_key(run) -> str:
    digest = hashlib.sha256(_report_source())
    digest.update(json.dumps(run["fingerprint"], sort_keys=True).encode())
    return digest.hexdigest()


def write_reports(runs: pd.DataFrame, site: Path, count: int) -> dict[int, str]:
    """The light reports of the newest ``count`` runs, each rebuilt only
    when its run or the report code changed; older ones leave the site.
    {run: link}."""
    links, kept = {}, set()
    for _, run in runs.tail(count).iterrows() if count > 0 else ():
        target = site / "runs" / slug(run["run_id"])
        kept.add(target.name)
        key = _report_key(run)
        current = (target / KEY_FILE).exists() and (target / KEY_FILE).read_text() == key
        if not (current and (target / "report.html").exists()):
            shutil.rmtree(target, ignore_errors=True)
            try:
                build_run_report(Path(run["directory"]), target)
            except store.ResultError:
                continue  # nothing to report (no rows)
            (target / KEY_FILE).write_text(key)
        links[run["run"]] = f"runs/{target.name}/report.html"
    if (site / "runs").is_dir():
        for stale in (site / "runs").iterdir():  # only what the dashboard made (it leaves its key)
            if stale.name not in kept and (stale / KEY_FILE).exists():
                shutil.rmtree(stale)
    return links


# ------------------------------------------------------------------ data files
def _data_script(name: str, value) -> str:
    return (f"(window.SB=window.SB||{{cases:{{}}}}){name}="
            + json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False) + ";\n")


def run_times(start_times) -> list[float]:
    """Each run's start in seconds since the epoch (UTC), for the charts'
    time axis; strictly increasing in the runs' order, as the axis needs: a
    run with no readable start, or one not after the run before it (two runs
    in one second, clocks with different offsets), is placed a second after
    that run (the first runs, before any readable start, a second apart
    before it)."""
    parsed = pd.to_datetime(pd.Series(list(start_times), dtype=object), utc=True, errors="coerce", format="ISO8601")
    seconds = [value.timestamp() if not pd.isna(value) else None for value in parsed]
    known = next((index for index, value in enumerate(seconds) if value is not None), None)
    if known is None:
        return [float(index) for index in range(len(seconds))]
    times: list[float] = []
    for index, value in enumerate(seconds):
        if index < known:
            value = seconds[known] - (known - index)
        elif times and (value is None or value <= times[-1]):
            value = times[-1] + 1.0
        times.append(float(value))
    return times


def write_runs_data(runs: pd.DataFrame, links: dict, site: Path) -> None:
    (site / "data").mkdir(exist_ok=True)
    machines = list(dict.fromkeys(runs["machine"]))
    data = {"id": list(runs["run_id"]), "date": [_run_date(s) for s in runs["start_time"]],
            "t": run_times(runs["start_time"]),
            "commit": [c[:10] for c in runs["commit"]], "machine": [machines.index(m) for m in runs["machine"]],
            "report": [links.get(run, "") for run in runs["run"]]}
    _write_if_changed(site / "data" / "runs.js", _data_script(".runs", data) + _data_script(".machines", machines))


KIND = {history.RED: "red", history.NOT_JUDGED: "grey", history.SOURCE_CHANGED: "source"}


def case_data(group: pd.DataFrame, changes: pd.DataFrame, title: str, colours: dict) -> dict:
    """A case's chart: x the runs that measured it (the script places them
    at their start times, ``runs.js``'s ``t``), a series per strategy and
    machine (its strategy's name and colour, the index of its machine in
    ``machines``, which gives its dash pattern and its group in the legend;
    median, IQR as % of it, counts), and marks where a rule failed a change.
    ``decimals``: each count's, for the script to print it as ``Metric.format`` does."""
    counted = [name for name in metrics.COUNTS.names if name in group and group[name].notna().any()]
    group = group.assign(iqr_pct=100 * group["iqr_s"] / group["median_s"].where(group["median_s"] > 0))
    table = group.pivot(index="run", columns="strategy", values=["median_s", "iqr_pct"] + counted)
    x = [int(run) for run in table.index]
    machine_of_run = group.groupby("run")["machine"].first().astype(str).reindex(table.index)
    machines = list(dict.fromkeys(machine_of_run))  # in order of their first run of this case
    names = sorted(group["strategy"].unique())
    series, index_of = [], {}
    for name in names:
        for number, machine in enumerate(machines):
            on_machine = (machine_of_run == machine).to_numpy()
            if not ((group["strategy"] == name) & (group["machine"].astype(str) == machine)).any():
                continue
            entry = {"name": name, "colour": colours[name], "machine": number}
            for key, column in [("y", "median_s"), ("iqr", "iqr_pct")] + [(metric, metric) for metric in counted]:
                entry[key] = _short(table[(column, name)].where(on_machine))
            index_of[(name, machine)] = len(series)
            series.append(entry)
    position = {run: index for index, run in enumerate(x)}
    marks, count_marks = [], {metric: [] for metric in counted}
    marked = changes[changes["mark"] != ""]
    for strategy, machine, run, kind, metric, why in zip(marked["strategy"], marked["machine"].astype(str),
                                                         marked["run"], marked["mark"], marked["metric"], marked["why"]):
        mark = [index_of[(strategy, machine)], position[run], KIND[kind], why]
        (marks if metric == history.TIME else count_marks[metric]).append(mark)
    # Where another machine's history of this case begins: a dashed line, not a change.
    first_runs = machine_of_run.reset_index().drop_duplicates("machine")["run"].iloc[1:]
    return {"title": title, "x": x, "series": series, "marks": marks, "count_marks": count_marks,
            "machine": [position[run] for run in first_runs], "machines": machines, "counts": counted,
            "decimals": {name: metrics.COUNTS[name].decimals for name in counted}}


# ------------------------------------------------------------------ pages
def _nav(ops) -> str:
    return "<nav><a href='index.html'>overview</a><a href='runs.html'>runs</a>" + "".join(
        f"<a href='{html.escape(slug(op))}.html'>{html.escape(op)}</a>" for op in ops) + "</nav>"


def _change_text(row, runs: pd.DataFrame) -> str:
    """One line on a change a rule failed: what, how much, which runs."""
    esc = html.escape
    base, new = runs.loc[row["base_run"]], runs.loc[row["run"]]
    if row["metric"] != history.TIME:
        what = f"{row['metric']} {fmt_ratio(row[row['metric']] / row['base_' + row['metric']])}"
    elif row["verdict"] == regression.BROKEN:
        what = f"broke: {row['base_status']} → {row['status']}"
    else:
        p_value = fmt_p(row["p_value"])
        what = (f"{fmt_ratio(row['gate_ratio'])} its base run's ratio to the other strategies of its case "
                f"(10th percentiles, p {p_value if p_value.startswith('<') else '= ' + p_value}); median "
                f"{fmt_time(row['base_median_s'])} → {fmt_time(row['median_s'])}")
    text = (f"{esc(row['op'])}/{esc(row['strategy'])} {esc(params_label(row['params']))} {esc(row['device'])} "
            f"{esc(row['dtype'])}: {esc(what)}; run {esc(base['run_id'])} → {esc(new['run_id'])} (commit "
            f"{esc(base['commit'][:10])} → {esc(new['commit'][:10])}) on {esc(new['machine'])}")
    return text + (f" — {esc(row['why'])}" if row["why"] else "")


def change_list(changes: pd.DataFrame, runs: pd.DataFrame, mark: str, element_id: str) -> str:
    """The changes with ``mark``, newest first, as a list whose items name
    the case and both runs (data attributes, for tests and scripts)."""
    chosen = changes[changes["mark"] == mark].sort_values(["run", "case_id"], ascending=[False, True])
    items = [f"<li class='{KIND[mark]}' data-case='{html.escape(row['case_id'])}' "
             f"data-base='{html.escape(runs.loc[row['base_run'], 'run_id'])}' "
             f"data-new='{html.escape(runs.loc[row['run'], 'run_id'])}' data-metric='{html.escape(row['metric'])}'>"
             f"{_change_text(row, runs)}</li>" for _, row in chosen.iterrows()]
    return f"<ul id='{element_id}'>" + "".join(items) + "</ul>" + ("" if items else "<p>None.</p>")


def rule_text(rule: regression.Rule) -> str:
    from harness.judging.wall_gate import screening_factor

    return (f"A change is <b class='regressed'>red</b> only when the CI gate (<code>make regress</code>) would fail "
            f"it: its screen (each strategy's 10th-percentile time divided by its operator's reference strategy's "
            f"in the same run grew by more than {screening_factor(rule.factor):.3g}× and a Mann–Whitney U test on "
            f"the raw samples gives p &lt; {rule.alpha:g}, or every sample moved where too few exist for the test) "
            f"and its confirmation (against the other strategies of its case, the median over them, more than "
            f"{rule.factor:g}× its base run's ratio), on the stored run where the gate re-measures: in every one "
            f"of the run's rounds where both runs stored rounds, so a slow state or a slow minute that fell on one "
            f"round is not red; or a correct "
            f"case started failing its check; or an instruction count, where runs have them, grew past "
            f"{100 * (regression.DEFAULT_COUNT_FACTOR - 1):.0f} % (the count gate's factor). And only between two runs "
            f"fit to judge: the same CPU, and neither run unfit by the fitness rule ("
            f"{analysis.FITNESS_RULE}; counts: the same CPU and "
            f"tool-and-library versions). A change failed between runs not fit to judge is listed in grey, not "
            f"judged, with the reason; one across a change of the strategy's source is marked as such.")


def pairs_text(pairs: pd.DataFrame) -> str:
    unfit = pairs[pairs[f"reasons_{history.TIME}"].map(bool)]
    by_kind = history.reason_counts(pairs)
    reasons = ", ".join(f"{count} {html.escape(kind)}" for kind, count in by_kind.items())
    return (f"<p id='pairs'>{len(pairs)} pairs of consecutive runs on one machine (each machine's runs are "
            f"its own history: runs on different hardware are never compared); {len(pairs) - len(unfit)} judged, "
            f"<span class='not-judged'>{len(unfit)} not judged</span>"
            + (f" ({reasons}; a pair can have several reasons)" if len(unfit) else "") + ".</p>")


def overview(cases: pd.DataFrame, changes: pd.DataFrame) -> list[str]:
    """The latest measurement of every case, red ones first, with its change
    against the run before and its trend."""
    esc = html.escape
    ordered = cases.sort_values("run", kind="stable")
    series = ["case_id", "machine"]  # a fleet: each machine's latest, against its own run before
    latest = ordered.groupby(series, sort=False, observed=True).tail(1)
    latest = latest.merge(changes[["run", "case_id", "mark", "ratio"]], on=["run", "case_id"], how="left")
    unstable = int(latest["unstable"].sum())
    recent = ordered.groupby(series, sort=False, observed=True).tail(TREND_RUNS)
    trends = recent.groupby(series, sort=False, observed=True)["median_s"].agg(list)
    measured = cases.groupby(series, observed=True).size()
    body = [f"<p class='unstable-legend'>{UNSTABLE_MARK} unstable: the latest run's IQR exceeds "
            f"{100 * analysis.UNSTABLE_REL_IQR:.0f} % of its median (the threshold at which torch.utils.benchmark "
            f"warns): the machine was busy or the case is noisy, so its value and trend are uncertain. "
            f"{unstable} of {len(latest)} cases are unstable.</p>",
            "<table id='overview'><tr><th>op</th><th>strategy</th><th>params</th><th>device</th><th>dtype</th>"
            "<th>mode</th><th>machine</th><th>latest</th><th>status</th><th>vs previous (median)</th>"
            f"<th>trend (last {TREND_RUNS} runs)</th><th>runs</th></tr>"]
    rows = []
    for row in latest.itertuples(index=False):
        mark = row.mark if isinstance(row.mark, str) else ""
        params = json.loads(row.params)
        order = (mark != history.RED, row.op, tuple(params[k] for k in ordered_params(params)
                                                    if isinstance(params[k], int)), row.strategy,
                 training.MODES.index(row.mode) if row.mode in training.MODES else len(training.MODES), row.mode,
                 str(row.machine))
        noisy = bool(row.unstable)
        cell = (f"<td class='num unstable' title='unstable: IQR within a round above {100 * analysis.UNSTABLE_REL_IQR:.0f} % of the "
                f"median'>{esc(fmt_time(row.median_s))} {UNSTABLE_MARK}</td>" if noisy else
                f"<td class='num'>{esc(fmt_time(row.median_s))}</td>")
        versus = f"{fmt_ratio(row.ratio)} {mark}".strip() if isinstance(row.mark, str) else "–"
        css = {history.RED: " class='regressed'", history.NOT_JUDGED: " class='not-judged'"}.get(mark, "")
        rows.append((order, f"<tr{css}><td><a href='{esc(slug(row.op))}.html'>{esc(row.op)}</a></td>"
                            f"<td>{esc(row.strategy)}</td><td>{esc(params_label(row.params))}</td>"
                            f"<td>{esc(row.device)}</td><td>{esc(row.dtype)}</td><td>{esc(mode_and_layout(row._asdict()))}</td>"
                            f"<td>{esc(row.machine)}</td>{cell}"
                            f"<td>{esc(row.status)}</td><td class='num'>{esc(versus)}</td>"
                            f"<td>{esc(sparkline(trends[(row.case_id, row.machine)]))}</td>"
                            f"<td class='num'>{measured[(row.case_id, row.machine)]}</td></tr>"))
    body += [text for _, text in sorted(rows, key=lambda item: item[0])] + ["</table>"]
    return body


def runs_table(runs: pd.DataFrame, share: pd.Series, links: dict, newest: int | None = None) -> list[str]:
    """The runs, newest first (``newest`` of them): where, when, what load, how
    many cases unstable (``share``, per run), and each one's report."""
    esc = html.escape
    shown = runs if newest is None else runs.tail(newest)
    body = ["<table id='runs'><tr><th>#</th><th>run</th><th>start</th><th>commit</th><th>machine</th>"
            "<th>load 1 min (start → end)</th><th>unstable</th><th>report</th></tr>"]
    for order, run_id, start, commit, machine, meta in zip(*(shown[column].iloc[::-1] for column in (
            "run", "run_id", "start_time", "commit", "machine", "meta"))):
        run = runmeta.record(meta)
        loads = [analysis.first_load(value) or "?" for value in (run.load_avg_start, run.load_avg_end)]
        link = links.get(order)
        unstable = f"{100 * share[order]:.0f} %" if order in share.index else "–"
        body.append(f"<tr><td>{order}</td><td>{esc(run_id)}</td><td>{esc(start)}</td><td>{esc(commit[:12])}</td>"
                    f"<td>{esc(machine)}</td><td>{esc(' → '.join(str(v) for v in loads))}</td>"
                    f"<td class='num'>{esc(unstable)}</td>"
                    + (f"<td><a href='{esc(link)}'>report</a></td>" if link else "<td>–</td>") + "</tr>")
    return body + ["</table>"]


def op_page(op: str, groups: list[tuple[str, str]], changes: pd.DataFrame, runs: pd.DataFrame, nav: str) -> str:
    """The operator's page: its red and grey changes, and a chart per case
    drawn in the browser from the case's data file."""
    esc = html.escape
    mine = changes[changes["op"] == op]
    body = [nav, f"<h1>{esc(op)}</h1>", "<h2 class='regressed'>Regressions (the gate's rule, fit to judge)</h2>",
            change_list(mine, runs, history.RED, "red"),
            "<h2 class='not-judged'>Failed by the rule, not judged</h2>",
            change_list(mine, runs, history.NOT_JUDGED, "not-judged"),
            "<p>Charts: median time per run against the run's start (log scale), a line per strategy and machine "
            "(each machine is its own history, judged against its own runs: the first machine solid, the others "
            "dashed or dotted); red rings: regressions; grey rings: not judged; blue squares: the strategy's source "
            "changed; dashed vertical lines: where another machine's history of the case begins. Below each chart, "
            "the legend: a machine or a strategy clicked hides its lines, clicked again shows them. Hover for the "
            "run and its values.</p>"]
    scripts = ["assets/uPlot.iife.min.js", "assets/dashboard.js", "data/runs.js"]
    for stem, title, counted in groups:
        body.append(f"<h2 id='{esc(stem)}'>{esc(title)}</h2><div class='chart' data-case='{esc(stem)}'></div>")
        body += [f"<h3>{esc(metric)} per call (Callgrind)</h3>"
                 f"<div class='chart' data-case='{esc(stem)}' data-metric='{esc(metric)}'></div>" for metric in counted]
        scripts.append(f"data/cases/{stem}.js")
    head = "<link rel='stylesheet' href='assets/uPlot.min.css'>" + "".join(
        f"<script src='{esc(src)}'></script>" for src in scripts)
    return _page(f"scatterbench · {op}", body, head)


# ------------------------------------------------------------------ build
def _save_cache(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":")))
    tmp.replace(path)


def _load_cache(path: Path) -> dict:
    try:
        cache = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def judged_history(root, cache_dir: Path, rule: regression.Rule):
    """(cases, runs, judgement) of every run under ``root``, with what the
    site's cache remembers (files hashed, the history, pairs judged) read
    first and brought up to date after."""
    cache_dir.mkdir(exist_ok=True)
    known = _load_cache(cache_dir / FILES)  # the result files hashed before, by size and mtime
    cases, runs = history.load_history(root, cache_dir, known)
    directories = set(runs["directory"])
    _save_cache(cache_dir / FILES, {path: entry for path, entry in known.items()
                                    if str(Path(path).parent) in directories})
    load_plugins_of(runs)  # before the judgement asks the registry for each operator's reference
    judgement = history.judge(cases, runs, rule, _load_cache(cache_dir / VERDICTS))
    _save_cache(cache_dir / VERDICTS, judgement.verdict_cache)
    return cases, runs, judgement


def load_plugins_of(runs: pd.DataFrame) -> list[str]:
    """Loads the plugins the runs recorded (`plugins.load_recorded`), once per
    distinct set; says on stderr, one line per set, which cannot be loaded
    and what the site lacks without them. Returns those lines."""
    by_set: dict[str, list] = {}
    for meta, directory in zip(runs["meta"], runs["directory"]):
        if meta.get("plugins"):
            by_set.setdefault(json.dumps(meta["plugins"], sort_keys=True, default=str), []).append((meta, directory))
    lines = []
    for found in by_set.values():
        meta, directory = found[-1]
        where = directory if len(found) == 1 else f"{len(found)} runs (the newest {directory})"
        lines += plugins.load_recorded(meta, where, plugins.DASHBOARD_LACKS)
    for line in lines:
        print(f"warning: {line}", file=sys.stderr)
    return lines


def copy_assets(site: Path) -> None:
    (site / "assets").mkdir(exist_ok=True)
    for name in SITE_ASSETS:
        target = site / "assets" / name
        if not target.exists() or target.read_bytes() != (ASSETS / name).read_bytes():
            shutil.copyfile(ASSETS / name, target)


def write_case_data(cases: pd.DataFrame, changes: pd.DataFrame, site: Path) -> dict[str, list]:
    """``data/cases/<case>.js`` for every case (cases no longer in the
    history leave); {op: [(slug, title, count metrics), ...]}."""
    (site / "data" / "cases").mkdir(parents=True, exist_ok=True)
    colours = strategy_colours(sorted(cases["strategy"].unique()), site / CACHE / COLOURS)
    changes_by_group = dict(list(changes.groupby(CASE_GROUP, sort=False)))
    groups: dict[str, list] = {}
    written = set()
    for key, group in cases.groupby(CASE_GROUP, sort=False):
        op, device, dtype, params, mode, layout = key
        suffix = mode_and_layout({"mode": mode, "layout": layout}, sep=" · ", say_forward=False)
        title = case_title(op, params, device, dtype) + (f" · {suffix}" if suffix else "")
        stem = slug(title)
        data = case_data(group, changes_by_group.get(key, changes.iloc[:0]), title, colours)
        _write_if_changed(site / "data" / "cases" / f"{stem}.js", _data_script(f".cases[{json.dumps(stem)}]", data))
        written.add(f"{stem}.js")
        groups.setdefault(op, []).append((stem, title, data["counts"]))
    for stale in (site / "data" / "cases").glob("*.js"):
        if stale.name not in written:
            stale.unlink()
    return groups


def index_page(cases, runs, judgement, changes, links, rule, nav) -> str:
    share = history.unstable_share(cases)
    body = [nav, "<h1>scatterbench dashboard</h1>",
            f"<p>{len(runs)} runs, {runs['machine'].nunique()} machine(s), {cases['case_id'].nunique()} cases.</p>",
            f"<p>{rule_text(rule)}</p>", pairs_text(judgement.pairs),
            "<h2 class='regressed'>Regressions</h2>", change_list(changes, runs, history.RED, "red"),
            "<h2 class='not-judged'>Failed by the rule between runs not fit to judge: not judged</h2>",
            change_list(changes, runs, history.NOT_JUDGED, "not-judged"),
            "<h2>Source changed</h2>", change_list(changes, runs, history.SOURCE_CHANGED, "source-changed"),
            "<h2>Latest</h2>", *overview(cases, judgement.changes),
            "<h2>Newest runs</h2>", *runs_table(runs, share, links, newest=20),
            f"<p><a href='runs.html'>all {len(runs)} runs</a></p>"]
    return _page("scatterbench dashboard", body)


def build_dashboard(root, site, rule: regression.Rule | None = None, with_reports: bool = True,
                    reports: int = DEFAULT_REPORTS) -> Path:
    """Writes the site under ``site`` and returns its index page. ``rule``:
    the gate's (`history.gate_rule`) unless given; ``reports``: how many of
    the newest runs get their light report (none without ``with_reports``)."""
    site = store.writable_dir(Path(site), "the dashboard")  # before reading the history
    rule = rule or history.gate_rule()
    cases, runs, judgement = judged_history(root, site / CACHE, rule)
    changes = judgement.changes[judgement.changes["mark"] != ""]  # what the pages show: those a rule failed
    copy_assets(site)
    links = write_reports(runs, site, reports if with_reports else 0)
    write_runs_data(runs, links, site)
    groups = write_case_data(cases, changes, site)
    nav = _nav(groups)
    for op, cases_of_op in groups.items():
        _write_if_changed(site / f"{slug(op)}.html", op_page(op, cases_of_op, changes, runs, nav))
    (site / "index.html").write_text(index_page(cases, runs, judgement, changes, links, rule, nav))
    _write_if_changed(site / "runs.html", _page("scatterbench runs", [nav, "<h1>Runs</h1>", *runs_table(
        runs, history.unstable_share(cases), links)]))
    return site / "index.html"


load_history = history.load_history  # the history's cases and runs, for callers of the dashboard
