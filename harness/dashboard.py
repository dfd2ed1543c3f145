"""``scatterbench dashboard RESULTS_ROOT -o SITE``: a static regression dashboard.

Result directories are the history: every run under RESULTS_ROOT, ordered by
start time, grouped by machine and device. The site is plain HTML and PNG
with relative links, so it works opened from disk; every text that comes from
a result file is escaped.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness import analysis, env, regression, report, stats, store  # noqa: E402
from harness.format import fmt_ratio, fmt_time, ordered_params, params_label, slug  # noqa: E402

STYLE = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 8px}"
         "td.num{text-align:right}.regressed{color:#b00;font-weight:bold}.improved{color:#070}"
         "img{max-width:100%}nav a{margin-right:1em}td.unstable{color:#a60;font-weight:bold}")
UNSTABLE_MARK = analysis.UNSTABLE.mark


def load_history(root) -> tuple[pd.DataFrame, dict, list[dict]]:
    """Rows of every run under ``root`` with their run's order, commit and machine."""
    frames, samples, metas = [], {}, []
    for order, directory in enumerate(store.find_runs(root)):
        meta, rows, run_samples = store.read_run(directory)
        meta = dict(meta, directory=str(directory), order=order)
        metas.append(meta)
        if rows.empty:
            continue
        rows = rows.copy()
        rows["run_order"] = order
        rows["run_dir"] = str(directory)
        rows["commit"] = (meta.get("git_commit") or "unknown")[:10]
        rows["start_time"] = meta.get("start_time", "")
        rows["machine"] = env.machine_label(meta)
        frames.append(rows)
        for case_id, values in run_samples.items():
            samples[(str(directory), case_id)] = values
    if not frames:
        raise store.ResultError(f"{root}: no result rows found under it")
    return pd.concat(frames, ignore_index=True), samples, metas


def mark_regressions(history: pd.DataFrame, samples: dict, rule: regression.Rule) -> pd.DataFrame:
    """Verdict of each row against the same case's previous run on the same
    machine, by the one regression rule (harness/regression.py)."""
    history = history.sort_values("run_order", kind="stable").copy()
    verdicts = {index: "" for index in history.index}
    changes = {index: math.nan for index in history.index}
    columns = history[["machine", "case_id", "status", "run_dir"]]
    previous: dict[tuple, tuple] = {}  # (machine, case) -> (status, run_dir) of its latest earlier run
    for index, machine, case_id, status, run_dir in columns.itertuples():
        before = previous.get((machine, case_id))
        previous[(machine, case_id)] = (status, run_dir)
        if before is None:
            continue
        change = regression.judge_change(before[0], status, samples.get((before[1], case_id)),
                                         samples.get((run_dir, case_id)), rule)
        changes[index] = change.ratio
        if change.verdict in (regression.REGRESSED, regression.BROKEN):
            verdicts[index] = "regressed"
        elif change.verdict == regression.IMPROVED:
            verdicts[index] = "improved"
    history["verdict"] = pd.Series(verdicts)
    history["change"] = pd.Series(changes, dtype=float)
    return history


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
    centre = float(np.median(finite))
    span = max([SPARK_MIN_SPAN] + [abs(math.log(m / centre)) for m in finite])
    out = []
    for m in medians:
        if not (isinstance(m, (int, float)) and math.isfinite(m) and m > 0):
            out.append("·")
            continue
        level = round(3.5 + 3.5 * math.log(m / centre) / span)
        out.append(SPARK_LEVELS[min(7, max(0, level))])
    return "".join(out)


def _unstable(row) -> bool:
    return analysis.unstable(row)


def _page(title: str, body: list[str]) -> str:
    return ("<!doctype html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            + "\n".join(body) + "</body></html>")


# ------------------------------------------------------------------ caching
# The site keeps what it built with the key of its inputs: a run's report is
# rebuilt only when its rows, metadata or the code that draws it changed, a
# history plot only when its data did.
KEY_FILE = ".key"  # in each run's report directory
PLOT_KEYS = ".keys.json"  # in plots/: {file name: key}
PLOT_DPI = 80  # 800 × 320 px history plots


@functools.lru_cache(maxsize=1)
def code_key() -> str:
    """The drawing code's own hash: a change to it redraws everything."""
    from harness import format as format_module

    digest = hashlib.sha256()
    sources = sorted(Path(report.__file__).parent.glob("*.py")) + \
        [Path(module.__file__) for module in (format_module, stats, analysis, sys.modules[__name__])]
    for source in sources:
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _key(*parts) -> str:
    digest = hashlib.sha256(code_key().encode())
    for part in parts:
        digest.update(part if isinstance(part, bytes) else str(part).encode())
        digest.update(b"\0")
    return digest.hexdigest()


def run_report(directory: Path, target: Path) -> bool:
    """The run's light report under ``target``, rebuilt only when its key
    changed; False when the run has nothing to report."""
    import shutil

    key = _key("report", (directory / store.META).read_bytes(), (directory / store.ROWS).read_bytes())
    if (target / "report.html").exists() and (target / KEY_FILE).exists() \
            and (target / KEY_FILE).read_text() == key:
        return True
    if target.exists():
        shutil.rmtree(target)
    try:
        report.build([directory], target, light=True)
    except store.ResultError:
        return False
    (target / KEY_FILE).write_text(key)
    return True


PLOT_COLUMNS = ["run_order", "commit", "op", "strategy", "status", "median_s", "iqr_s", "verdict"]


def _history_plot(series: pd.DataFrame, path: Path, title: str) -> None:
    _draw_history(series, path, title)


def _draw_history(series: pd.DataFrame, path: Path, title: str) -> None:
    from harness.report import figures  # the figures' shared vocabulary (labels drawn as written)

    label = figures.label
    fig, ax = plt.subplots(figsize=(10, 4), layout="constrained")
    orders = sorted(series["run_order"].unique())
    position = {order: i for i, order in enumerate(orders)}
    for name, line in series.groupby("strategy"):
        line = line.sort_values("run_order")
        xs = [position[o] for o in line["run_order"]]
        colour = figures.strategy_colour(line["op"].iloc[0], name)
        ax.plot(xs, line["median_s"], marker="o", markersize=3, label=label(name), color=colour)
        bounds = [analysis.spread(row) for _, row in line.iterrows()]
        ax.fill_between(xs, [lo for lo, _ in bounds], [hi for _, hi in bounds], color=colour, alpha=0.15,
                        linewidth=0)
        noisy = line[[analysis.is_unstable(iqr, median) for iqr, median in zip(line["iqr_s"], line["median_s"])]]
        ax.scatter([position[o] for o in noisy["run_order"]], noisy["median_s"], marker="x", s=60, color=colour,
                   linewidths=2, zorder=6)
        bad = line[line["verdict"] == "regressed"]
        ax.scatter([position[o] for o in bad["run_order"]], bad["median_s"].fillna(line["median_s"].max()),
                   s=80, facecolors="none", edgecolors="red", linewidths=2, zorder=5)
    runs = series.drop_duplicates("run_order").sort_values("run_order")
    labels = [label(f"#{order} {commit}") for order, commit in zip(runs["run_order"], runs["commit"])]
    ax.set_xticks(range(len(orders)), labels, rotation=45, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("median time per call\nband: median ± IQR/2", fontsize=9)
    ax.set_xlabel(f"run (commit), oldest first; red rings: regressions; ×: unstable "
                  f"(IQR > {100 * analysis.UNSTABLE_REL_IQR:.0f} % of the median)")
    figures.set_title(ax, title, width_in=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the plot, never over a line
    figures.log_axis(ax.yaxis, "time")
    ax.grid(True, alpha=0.3)
    fig.savefig(path, dpi=PLOT_DPI)
    plt.close(fig)


def build_dashboard(root, site, rule: regression.Rule = regression.Rule(), with_reports: bool = True) -> Path:
    site = store.writable_dir(Path(site), "the dashboard")  # before reading the history
    factor, alpha = rule.factor, rule.alpha
    history, samples, metas = load_history(root)
    history = mark_regressions(history, samples, rule)
    site.mkdir(parents=True, exist_ok=True)
    (site / "plots").mkdir(exist_ok=True)
    esc = html.escape
    ops = list(dict.fromkeys(history["op"]))

    # one light report per run, linked from every page, rebuilt only when the run changed
    run_links, kept = {}, set()
    for meta in metas:
        run_id = str(meta.get("run_id", Path(meta["directory"]).name))
        target = site / "runs" / slug(run_id)
        kept.add(target.name)
        if with_reports and not run_report(Path(meta["directory"]), target):
            continue
        if (target / "report.html").exists():
            run_links[meta["directory"]] = f"runs/{slug(run_id)}/report.html"
    if (site / "runs").is_dir():  # reports of runs no longer under the root
        import shutil

        for stale in (site / "runs").iterdir():
            if stale.name not in kept and (stale / KEY_FILE).exists():
                shutil.rmtree(stale)

    nav = "<nav><a href='index.html'>overview</a>" + "".join(
        f"<a href='{esc(slug(op))}.html'>{esc(op)}</a>" for op in ops) + "</nav>"
    latest = history.sort_values("run_order").groupby(["machine", "case_id"], sort=False).tail(1)
    body = [nav, "<h1>scatterbench dashboard</h1>",
            f"<p>{len(metas)} runs, {history['machine'].nunique()} machine(s). A change is flagged when the median "
            f"moved by more than {factor:g}× and a Mann–Whitney U test on the raw samples gives p &lt; {alpha:g}, "
            f"or when a correct case started failing its check.</p>",
            f"<p class='unstable-legend'>{UNSTABLE_MARK} unstable: the latest run's IQR exceeds "
            f"{100 * analysis.UNSTABLE_REL_IQR:.0f} % of its median (the threshold at which torch.utils.benchmark "
            f"warns): the machine was busy or the case is noisy, so its value and trend are uncertain. "
            f"{int(latest.apply(_unstable, axis=1).sum()) if len(latest) else 0} of {len(latest)} cases are "
            f"unstable; in the plots they are crossed (×).</p>",
            "<table id='overview'><tr><th>op</th><th>strategy</th><th>params</th><th>device</th><th>dtype</th>"
            "<th>machine</th><th>latest</th><th>status</th><th>vs previous</th><th>trend</th><th>runs</th></tr>"]
    def overview_order(row):
        # regressions first, then each operator's cases by parameter value (C=16 before C=128)
        params = json.loads(row["params"])
        values = tuple(params[key] for key in ordered_params(params) if isinstance(params[key], int))
        return (row["verdict"] != "regressed", row["op"], values, row["strategy"])

    latest = latest.loc[sorted(latest.index, key=lambda index: overview_order(latest.loc[index]))]
    for _, row in latest.iterrows():
        series = history[(history["machine"] == row["machine"]) & (history["case_id"] == row["case_id"])]
        medians = series.sort_values("run_order")["median_s"].tolist()
        trend = sparkline(medians)
        change = fmt_ratio(row["change"])
        css = f" class='{row['verdict']}'" if row["verdict"] else ""
        body.append(f"<tr{css}><td><a href='{esc(slug(row['op']))}.html'>{esc(row['op'])}</a></td>"
                    f"<td>{esc(row['strategy'])}</td><td>{esc(params_label(row['params']))}</td>"
                    f"<td>{esc(row['device'])}</td><td>{esc(row['dtype'])}</td><td>{esc(row['machine'])}</td>"
                    + (f"<td class='num unstable' title='unstable: IQR above "
                       f"{100 * analysis.UNSTABLE_REL_IQR:.0f} % of the median'>"
                       f"{esc(fmt_time(row['median_s']))} {UNSTABLE_MARK}</td>" if _unstable(row) else
                       f"<td class='num'>{esc(fmt_time(row['median_s']))}</td>")
                    + f"<td>{esc(row['status'])}</td>"
                    f"<td class='num'>{esc(change)} {esc(row['verdict'])}</td><td>{esc(trend)}</td>"
                    f"<td class='num'>{len(series)}</td></tr>")
    body.append("</table><h2>Runs</h2><table><tr><th>#</th><th>run</th><th>start</th><th>commit</th>"
                "<th>machine</th><th>report</th></tr>")
    for meta in metas:
        link = run_links.get(meta["directory"])
        body.append(f"<tr><td>{meta['order']}</td><td>{esc(str(meta.get('run_id')))}</td>"
                    f"<td>{esc(str(meta.get('start_time')))}</td><td>{esc(str(meta.get('git_commit'))[:12])}</td>"
                    f"<td>{esc(env.machine_label(meta))}</td>"
                    + (f"<td><a href='{esc(link)}'>report</a></td></tr>" if link else "<td>–</td></tr>"))
    body.append("</table>")
    (site / "index.html").write_text(_page("scatterbench dashboard", body))

    keys_path = site / "plots" / PLOT_KEYS
    try:
        plot_keys = json.loads(keys_path.read_text()) if keys_path.exists() else {}
    except (OSError, ValueError):
        plot_keys = {}
    drawn: dict[str, str] = {}
    for op in ops:
        on_op = history[history["op"] == op]
        page = [nav, f"<h1>{esc(op)}</h1>"]
        regressions = on_op[on_op["verdict"] == "regressed"]
        if len(regressions):
            page.append("<h2 class='regressed'>Regressions between consecutive runs</h2><ul>")
            for _, row in regressions.iterrows():
                what = fmt_ratio(row["change"]) if math.isfinite(row["change"]) else "broke"
                page.append(f"<li class='regressed'>{esc(row['strategy'])} {esc(params_label(row['params']))} "
                            f"{esc(row['device'])} {esc(row['dtype'])} on {esc(row['machine'])} at commit "
                            f"{esc(row['commit'])}: {esc(row['status'])}, "
                            f"{esc(what)}</li>")
            page.append("</ul>")
        for (params, device, dtype, machine), series in on_op.groupby(["params", "device", "dtype", "machine"]):
            title = f"{op} {params_label(params)} · {device} {dtype} · {machine}"
            stem = slug(title) + ".png"
            key = _key("plot", title, series[PLOT_COLUMNS].sort_values(["run_order", "strategy"]).to_csv())
            if plot_keys.get(stem) != key or not (site / "plots" / stem).exists():
                _history_plot(series, site / "plots" / stem, title)
            drawn[stem] = key
            page.append(f"<h2>{esc(title)}</h2><img src='plots/{esc(stem)}' alt='{esc(title)}'>")
        (site / f"{slug(op)}.html").write_text(_page(f"scatterbench · {op}", page))
    for stale in (site / "plots").glob("*.png"):  # plots of cases no longer in the history
        if stale.name not in drawn:
            stale.unlink()
    store.write_json_atomic(keys_path, drawn)
    return site / "index.html"
