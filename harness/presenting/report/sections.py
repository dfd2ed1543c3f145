"""The report's text: case tables, conclusions, run and hardware tables,
warnings and the defects section. Judgements come from harness.judging.analysis;
this module only words them."""

from __future__ import annotations

import math
import re

import pandas as pd

from harness.base.format import (fmt_bytes, fmt_num, fmt_pct, fmt_ratio, fmt_ratio_interval, fmt_time, md_escape,
                                 params_label, shorten)
from harness.base.cases import grid_cells, with_case_columns
from harness.judging import analysis
from harness.judging.analysis import (
    TIMERS_DISAGREE,
    UNSTABLE,
    finite,
    timers_disagree,
    unstable,
    xcheck_ratio,
)
from harness.presenting.report.document import Doc
from harness.presenting.report.load import unrecorded_family_of
from harness.results import floors, metrics, runmeta, stats
from harness.results.runmeta import Gpu
from impls.backends import BACKENDS, DTYPE_RECORDS, devices, threads_text
from impls.defects import for_operators
from impls.registry import all_strategies, speedup_note, unranked_reason
from impls.status import CORRECT, FAILED, INEXACT, MISMATCH, UPSTREAM_DEFECT
from impls.training import BACKWARD, FORWARD, FORWARD_BACKWARD, MODES

UNSTABLE_MARK = UNSTABLE.mark
UNSTABLE_NOTE = f"{UNSTABLE.mark} unstable: {UNSTABLE.meaning}."


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


def median_cell(row) -> str:
    """A row's median time, marked when unstable: every table that prints a time marks it so."""
    return fmt_time(row["median_s"]) + (f" {UNSTABLE_MARK}" if unstable(row) else "")


def iqr_cell(row) -> str:
    """The IQR, as a time and as % of the median, marked when unstable."""
    rel = stats.rel_iqr(row["iqr_s"], row["median_s"])
    if not math.isfinite(rel):
        return fmt_time(row["iqr_s"])
    return f"{fmt_time(row['iqr_s'])} ({fmt_pct(100 * rel, 2)})" + (f" {UNSTABLE_MARK}" if unstable(row) else "")


XCHECK_NOTE = (f"do_bench: triton.testing.do_bench's median for the same call, an independent timer; "
               f"{TIMERS_DISAGREE.mark} in ours / do_bench: {TIMERS_DISAGREE.meaning}.")
HOST_NOTE = ("host/call: the host's median cost of one call without waiting for the device (Python, dispatch, "
             "launch). Where it exceeds the device time, back-to-back calls are bound by the host, not the device.")


def case_table(group: pd.DataFrame, judged: bool = True) -> tuple[list[str], list[list[str]], int | None, list[str]]:
    """The case's rows, fastest first: header, cells, the best correct row's
    index, and the notes that explain the marks used. host/call where the
    run measured it; on CUDA the independent timer's median and the ratio.
    ``judged=False`` (an unfit run's rows): no best row, and the columns that
    judge (% of ceiling, × seed) are left out."""
    counted = counted_metrics(group)
    # A counting run has no times: its rows go in order of its headline count (metrics.COUNTS.primary).
    key = group["median_s"] if group["median_s"].map(finite).any() or not counted else group[counted[0]]
    ordered = group.assign(_k=key.fillna(math.inf)).sort_values("_k")
    with_host = bool(ordered["host_s"].map(finite).any())
    with_fresh = "pct_of_fresh_floor" in ordered and bool(ordered["pct_of_fresh_floor"].map(finite).any())
    with_floor = "pct_of_floor" in ordered and bool(ordered["pct_of_floor"].map(finite).any())
    with_xcheck = bool((ordered["device"] == "cuda").any() and ordered["xcheck_s"].map(finite).any())
    header = ["strategy", "backend", "status", "median", "IQR", "n"] + [f"{name}/call" for name in counted] \
        + (["host/call"] if with_host else []) \
        + (["do_bench", "ours / do_bench"] if with_xcheck else []) \
        + ["GB/s"] + (["% of ceiling"] + (["% of fresh floor"] if with_fresh else [])
                      + (["% of floor"] if with_floor else []) + ["× seed"] if judged else []) \
        + ["rel err", "max abs err", "source", "message"]
    no_speedup = speedup_note(group["op"].iloc[0], dict(zip(group["strategy"], group["status"])))
    rows, best = [], None
    found = analysis.answer(group) if judged else None
    fastest = found.best["strategy"] if found is not None and found.clear else None  # a tie bolds no row
    for index, (_, r) in enumerate(ordered.iterrows()):
        if best is None and r["strategy"] == fastest:
            best = index
        # n: the samples the median and IQR rest on (a slow case gets few in its budget).
        samples = r.get("n_samples")
        n_text = str(int(samples)) if isinstance(samples, (int, float)) and math.isfinite(samples) and samples > 0 \
            else "–"
        cells = [r["strategy"], r["backend"], r["status"], fmt_time(r["median_s"]), iqr_cell(r), n_text]
        cells += [metrics.COUNTS[name].format(r[name]) for name in counted]
        if with_host:
            cells.append(fmt_time(r["host_s"]))
        if with_xcheck:
            ratio = xcheck_ratio(r)
            cells += [fmt_time(r["xcheck_s"]),
                      fmt_num(ratio, 3) + (f" {TIMERS_DISAGREE.mark}" if timers_disagree(r) else "")]
        judging = [floors.ceiling_cell(r["pct_of_ceiling"]),
                   *([floors.ceiling_cell(r["pct_of_fresh_floor"])] if with_fresh else []),
                   *([floors.floor_cell(r["pct_of_floor"])] if with_floor else []),
                   "" if no_speedup else fmt_ratio(r["speedup"])] if judged else []
        rows.append(cells + [fmt_num(r["gbps"]), *judging,
                             fmt_num(r["rel_err"], 2), fmt_num(r["max_abs_err"], 2), r["source"],
                             str(r["message"])])
    # The notes every table shares (marks, columns) are the legend's (`legend_notes`), said once.
    notes = [f"No row is marked fastest: {analysis.winner_text(found)}."] if found is not None and not found.clear else []
    return header, rows, best, notes


def legend_notes(rows: pd.DataFrame) -> list[str]:
    """What the case tables' marks and optional columns mean, each said once
    for all the tables built from ``rows``: the unstable mark, × seed left
    blank (and why), the timers' disagreement, the counts, the fresh floor,
    host/call."""
    notes = []
    timed = rows[rows["median_s"].map(finite)] if len(rows) else rows
    if any(unstable(r) for _, r in timed.iterrows()):
        notes.append(UNSTABLE_NOTE)
    blank = {}
    for (op, _params, _dtype, _mode, _machine), group in with_case_columns(rows).groupby(
            ["op", "params", "dtype", "mode", "machine"], sort=False):
        note = speedup_note(op, dict(zip(group["strategy"], group["status"])))
        if note:
            blank.setdefault(note, None)
    notes += [f"× seed is blank: {note}." for note in blank]
    if (rows["device"] == "cuda").any() and rows["xcheck_s"].map(finite).any():
        notes.append(XCHECK_NOTE)
    counted = counted_metrics(rows)
    if counted:
        notes.append(counts_note(counted))
    if "pct_of_fresh_floor" in rows and rows["pct_of_fresh_floor"].map(finite).any():
        notes.append(FRESH_FLOOR_NOTE)
    if "pct_of_floor" in rows and rows["pct_of_floor"].map(finite).any():
        notes.append(floors.floor_note() + ".")
    if rows["pct_of_ceiling"].map(floors.over_floor).any() or (
            "pct_of_fresh_floor" in rows and rows["pct_of_fresh_floor"].map(floors.over_floor).any()):
        notes.append(floors.ceiling_note() + ".")
    if rows["host_s"].map(finite).any():
        notes.append(HOST_NOTE)
    return notes


FRESH_FLOOR_NOTE = ("% of fresh floor: the floor counting what the call's fresh outputs cost on this CPU: bytes read "
                   "at the copy ceiling plus bytes written at the run's fresh-output write bandwidth (first-touch page "
                   "faults included), the best of its allocators. It prices every size at one large buffer's rates, "
                   f"so a case that fits in a cache can pass it: past {floors.OVER_FLOOR_PCT:.0f} % it is marked "
                   f"{floors.OVER_FLOOR_MARK} beside its number, as the % of ceiling is; % of floor (by size) is the "
                   "one that judges.")


def counts_note(counted: list[str]) -> str:
    """What the ``counted`` columns (of ``metrics.COUNTS``) are, and how far they can be trusted."""
    found = [metrics.COUNTS[name] for name in counted]
    return (f"{' and '.join(f'{metric.name}/call' for metric in found)}: counted under Callgrind (run --instrument "
            f"callgrind), per call, every library at one thread; "
            + "; ".join(f"{metric.name}: {metric.description}" for metric in found)
            + ". Two runs of the same code and library versions agree within 0.1 %, whatever the load (est_cycles "
              "of Python-loop seeds at small sizes within 0.25 %); they do not see memory bandwidth, page faults "
              "or other threads (docs/COUNTING.md).")


def count_verdict_sentence(case: pd.DataFrame, where: str) -> str:
    """A counting run's verdict on one case: counted, not timed; the correct
    strategies by the headline count per call (instructions), fewest first."""
    headline = metrics.COUNTS.primary
    name, unit = headline.name, headline.unit
    correct = analysis.by_count(case)
    if correct.empty:
        return f"{where}: counted, not timed; no strategy that passed the check was counted."
    first = correct.iloc[0]
    others = "; ".join(f"{row['strategy']} {row[name] / first[name]:.2f}× as many"
                       for _, row in correct.iloc[1:].iterrows())
    return (f"{where}: counted, not timed ({unit} are not time: docs/COUNTING.md): {first['strategy']} "
            f"executes the fewest {unit} per call ({headline.format(first[name])})"
            + (f"; {others}." if others else "."))


def counted_metrics(rows: pd.DataFrame) -> list[str]:
    """The count columns (`metrics.COUNTS`) that hold a count in ``rows``."""
    return [name for name in metrics.COUNTS.names if name in rows and rows[name].map(finite).any()]


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


def verdict(op: str, case: pd.DataFrame, where: str) -> str:
    """The sentence on one case, from the case's answer (`analysis.answer`,
    the one rule the answer table uses too): use the fastest correct
    strategy, and by how much, only where it is a clear win; a tie names
    every strategy the fastest does not clearly beat, and a case that cannot
    have a clear win (timers disagree, incomplete) says why; neither prints a
    speed-up. Only strategies returning the operator's whole output are
    ranked: one that skips part of it (maxpool2d without indices) does less work."""
    ok = analysis.ranked(case)
    partial = analysis.partial_rows(case)
    whole = analysis.whole_output(op)
    found = analysis.answer(case)
    if found is None:
        return f"{where}: no strategy returning {whole or 'the whole output'} passed the check."
    best = found.best
    if found.tie:
        tied = ok[ok["strategy"].isin(found.tied)]
        named = [f"{row['strategy']} ({_median_iqr(row)})" for _, row in tied.iterrows()]
        listed = named[0] if len(named) == 1 else ", ".join(named[:-1]) + f" or {named[-1]}"
        runner = found.runner_up
        reason = analysis.tie_reason(best, runner)
        if found.outcome == analysis.EQUIVALENT:
            text = (f"{where}: either: {best['strategy']} ({_median_iqr(best)}) and {listed} are "
                    f"{analysis.tie_label(found)}, so any of them will do")
        else:
            text = (f"{where}: inconclusive: {best['strategy']} ({_median_iqr(best)}) is the fastest measured, but "
                    f"it does not clearly beat {listed}"
                    + (f" ({reason})" if len(named) == 1 else f"; against {runner['strategy']}, {reason}")
                    + ", so the data does not say which is fastest; rerun on a quieter machine or with a larger "
                    "timing budget")
        if found.unclear:
            text += f"; and no win could be claimed anyway: {found.unclear}"
        return text + "."
    if found.unclear:
        return (f"{where}: {best['strategy']} ({_median_iqr(best)}) is the fastest measured, but no clear win: "
                f"{found.unclear}.")
    text = f"{where}: use {best['strategy']} ({best['backend']}), {_median_iqr(best)}"
    if len(ok) == 1:
        text += (f", the only strategy returning {whole} that passed the check" if len(partial)
                 else ", the only strategy that passed the check")
    else:
        runner = found.runner_up
        text += (f", {floors.ceiling_cell(best['pct_of_ceiling'])} of the copy ceiling, "
                 f"{fmt_ratio_interval(analysis.ratio(best, runner), analysis.ratio_interval(best, runner))} "
                 f"faster than the runner-up "
                 f"{runner['strategy']} ({_median_iqr(runner)})")
        if finite(found.over_seed) and analysis.baseline_name(op) not in (best["strategy"], runner["strategy"]):
            text += f", {fmt_ratio_interval(found.over_seed, found.seed_interval)} the seed's original"
        if found.builtin is not None and found.builtin not in (best["strategy"], runner["strategy"]):
            text += (f", {fmt_ratio_interval(found.over_builtin, found.builtin_interval)} faster than the fastest "
                     f"library built-in, {found.builtin}")
    if finite(best.get("host_s")) and best["device"] != "cpu" and best["host_s"] > best["median_s"]:
        text += (f"; its host cost per call ({fmt_time(best['host_s'])}) exceeds its device time, so calls in a "
                 f"loop are bound by the host")
    if unstable(best):
        text += (f"; {best['strategy']}'s own timing is unstable (IQR "
                 f"{100 * stats.rel_iqr(best['iqr_s'], best['median_s']):.0f} % of its median)")
    if len(partial):
        text += "; not ranked: " + "; ".join(f"{r['strategy']} ({fmt_time(r['median_s'])}), as "
                                             f"{unranked_reason(op, r['strategy'])}" for _, r in partial.iterrows())
    strat = analysis.strategy(op, best["strategy"])
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
        at_largest, where = on_machine[on_machine["params"] == largest], f"{machine}, {params_label(largest)} {dtype}"
        sentences.append(verdict(op, at_largest, where) if at_largest["median_s"].map(finite).any()
                         or not counted_metrics(at_largest) else count_verdict_sentence(at_largest, where))
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
    """A recorded load average: [1-min, 5-min, 15-min], or None where absent or not finite."""
    numbers = [_number(item) for item in value or []]
    return None if not numbers or any(number is None for number in numbers) else numbers


def load_cell(meta: dict) -> str:
    """The machine's load averages (1/5/15 min) at the start and the end of
    the run, and the highest 1-minute load a case finished under."""
    record = runmeta.record(meta)
    start, end = _loads(record.load_avg_start), _loads(record.load_avg_end)
    parts = []
    if start or end:
        show = (lambda loads: "/".join(f"{v:.2g}" for v in loads) if loads else "?")
        parts.append(f"{show(start)} → {show(end)}")
    peak = _number(record.case_load_max)
    if peak is not None:
        parts.append(f"cases ≤ {peak:.2g}")
    return ", ".join(parts) or "–"


def ceiling_cell(meta: dict) -> str:
    """Each device's ceiling against the median of earlier runs on the machine."""
    cells = []
    for device, entry in runmeta.record(meta).ceiling_history.items():
        median, runs, deviation = (_number(entry.get(key)) for key in ("history_median_gbps", "runs", "deviation_pct"))
        if median is not None and deviation is not None:
            runs = int(runs or 0)
            # A deviation that rounds to nothing reads "±0 %", never "-0 %".
            shown = f"{deviation:+.0f}" if round(deviation) else "±0"
            cells.append(f"{device} {shown} % vs {median:.1f} GB/s ({runs} run{'' if runs == 1 else 's'})")
    return ", ".join(cells) or "–"


def run_warnings(meta: dict, cases_done: int | None = None) -> list[str]:
    """Why a run's numbers may be pessimistic: a busy machine, a low ceiling;
    what the report lacks for a run whose plugins are not here, and for one
    that was stopped before its last case (``cases_done`` of its rows here)."""
    record = runmeta.record(meta)
    run, warnings = record.run_id, [f"Warning: {line}." for line in meta.get("plugins_missing", [])]
    planned = meta.get("n_cases")
    if meta.get("status") != "complete" and cases_done is not None and planned and cases_done < planned:
        stopped = f" by {meta['interrupted_by']}" if meta.get("interrupted_by") else ""
        warnings.append(f"Warning: run {run} was stopped{stopped} after {cases_done} of its {planned} cases: "
                        f"the cases it did not reach are missing here, not failed "
                        f"(scatterbench run --resume finishes it).")
    count = analysis.cores(meta)
    loads = [("at the start", (_loads(record.load_avg_start) or [None])[0]),
             ("at the end", (_loads(record.load_avg_end) or [None])[0]),
             ("when a case finished", _number(record.case_load_max))]
    busy = [(when, value) for when, value in loads if analysis.busy(value, meta)]
    if busy:
        when, value = max(busy, key=lambda item: item[1])
        warnings.append(f"Warning: run {run} shared its machine: the 1-minute load average reached {value:.2g} "
                        f"{when}, at or above its {count} cores, so other work competed with the timed calls; "
                        f"its medians may be slow and its spreads wide.")
    for device, entry in record.ceiling_history.items():
        dropped, rose = analysis.ceiling_dropped(entry), analysis.ceiling_rose(entry)
        if not (dropped or rose):
            continue
        deviation = _number(entry.get("deviation_pct"))
        median = _number(entry.get("history_median_gbps"))
        now = _number(record.ceilings_gbps.get(device))
        warnings.append(f"Warning: run {run} measured its {device} copy ceiling"
                        + (f" at {now:.1f} GB/s" if now is not None else "")
                        + f", {abs(deviation):.0f} % {'below' if dropped else 'above'} the median of earlier runs "
                          f"on this machine"
                        + (f" ({median:.1f} GB/s)" if median is not None else "")
                        + (": the machine was busy or throttled, and its % of ceiling read high." if dropped
                           else ": its % of ceiling read low."))
    return warnings


def environment_table(metas: list[dict], rows: pd.DataFrame | None = None) -> tuple[list[str], list[list[str]]]:
    """One row per run: where and when, the version of each backend that
    produced rows (one column per backend: a new backend shows with no edit
    here; a library installed but never run gets no column), threads,
    ceilings, load, fresh-output bandwidth and whether the run is fit to be
    judged (`analysis.run_unfit_reasons`, computed by the loader)."""
    records = [runmeta.record(meta) for meta in metas]
    ran = set(rows["backend"]) if rows is not None and "backend" in rows else None
    known = [name for name in BACKENDS if any(r.backend_versions.get(name) for r in records)]
    recorded = [name for r in records for name in r.backend_versions if name not in known]
    backends = [name for name in known + list(dict.fromkeys(recorded)) if ran is None or name in ran]
    header = ["run", "machine", "start", "commit", "python", *backends,
              "threads", "ceilings (GB/s)", "ceiling vs history", "load 1/5/15 min (start → end)",
              "fresh output (GB/s)", "bandwidth curves", "fit to judge"]
    rows = []
    for meta, record in zip(metas, records):
        ceilings, fresh = record.ceilings_gbps, record.fresh_write_gbps
        rows.append([record.run_id, record.machine or "?", record.start_time or "?",
                     str(record.git_commit or "?")[:12], record.python or "?",
                     *(str(record.backend_versions.get(name) or "–") for name in backends),
                     threads_text(meta.get("threads")),
                     ", ".join(f"{d} {fmt_ratio(_number(g), '')}" for d, g in ceilings.items()),
                     ceiling_cell(meta), load_cell(meta),
                     ", ".join(f"{a} {fmt_ratio(_number(g), '')}" for a, g in fresh.items()) or "–",
                     floors.curves_cell(meta),
                     "no: " + "; ".join(meta["unfit_reasons"]) if meta.get("unfit_reasons") else "yes"])
    return header, rows


def _bytes(value) -> str:
    value = _number(value)
    return f"{value / 2**30:.1f} GiB" if value else "–"


def hardware_table(metas: list[dict]) -> tuple[list[str], list[list[str]]]:
    """One row per distinct machine: what the numbers depend on. Runs
    without ``hardware`` in their metadata show their CPU model and count."""
    header = ["machine", "runs", "CPU", "cores", "caches", "memory", "GPU", "GPU memory", "SMs", "capability",
              "driver", "max SM / memory clock (MHz)"]
    machines: dict[tuple, list[str]] = {}
    for meta in metas:
        record = runmeta.record(meta)
        hardware = record.hardware
        gpu = hardware.gpu or Gpu()
        clocks = (gpu.max_sm_clock_mhz, gpu.max_mem_clock_mhz)
        key = (runmeta.machine_label(record),
               str(hardware.cpu_model or record.cpu_model or "?"), str(analysis.cores(meta) or "?"),
               " ".join(f"{level} {size}" for level, size in hardware.caches.items()) or "–",
               _bytes(hardware.memory_bytes), str(gpu.name or record.gpu_name or "–"),
               _bytes(gpu.memory_bytes), str(gpu.sm_count or "–"), str(gpu.capability or "–"),
               str(gpu.driver or "–"), " / ".join(str(c) for c in clocks) if any(clocks) else "–")
        machines.setdefault(key, []).append(record.run_id)
    return header, [[key[0], ", ".join(runs), *key[1:]] for key, runs in machines.items()]


def curves_agreement_table(metas: list[dict]) -> tuple[list[str], list[list[str]]]:
    """Per machine, thread setting, device and curve method: the runs that measured their own
    bandwidth curves (``floors.own_curve``: not reused, quiet), how far their read and write
    curves stray from their median at worst, and whether every point is within
    ``CURVES_AGREE_PCT``. Curves of two methods are never compared (``floors.CURVE_METHOD``)."""
    groups: dict[tuple[str, str, str, int], list[tuple[str, dict]]] = {}
    for meta in metas:
        record = runmeta.record(meta)
        for device in sorted(meta.get(floors.CURVES) or {}):
            curve = floors.own_curve(meta, device)
            if curve is not None:
                key = (runmeta.machine_label(record), threads_text(meta.get("threads")), device, int(curve["method"]))
                groups.setdefault(key, []).append((str(record.run_id or "?")[-4:], curve))
    header = ["machine", "threads", "device", "curve method", "runs that measured their curves",
              "read: largest deviation", "write: largest deviation",
              f"every point within ±{floors.CURVES_AGREE_PCT:.0f} %"]
    table = []
    for (machine, threads, device, method), measured in sorted(groups.items()):
        runs = ", ".join(run for run, _ in measured)
        if len(measured) < 2:
            table.append([machine, threads, device, str(method), runs, "–", "–",
                          "one measurement: nothing to compare yet"])
            continue
        found = floors.curves_deviation([curve for _, curve in measured])
        cells = [f"±{pct:.1f} % at {fmt_bytes(size)}" for pct, size in (found["read"], found["write"])]
        agree = all(pct <= floors.CURVES_AGREE_PCT for pct, _ in found.values())
        table.append([machine, threads, device, str(method), runs, *cells, "yes" if agree else "no"])
    return header, table


DTYPE_ORDER = tuple(record.name for record in sorted(DTYPE_RECORDS, key=lambda record: record.shown))


def _device_rank(device: str) -> int:
    """Devices in the registered backends' order (the CPU first); unknown ones last."""
    order = devices()
    return order.index(device) if device in order else len(order)


def part_faster_sentences(rows: pd.DataFrame) -> list[str]:
    """One sentence per forward+backward row that is clearly faster than its
    own forward or backward alone (`analysis.training_faster_than_parts`,
    flagged ``PART_FASTER``): for the training section of ``rows`` (one
    machine and dtype, every mode)."""
    return [f"{analysis.PART_FASTER.mark} {found['strategy']} at {params_label(found['params'])}: forward+backward "
            f"{fmt_time(found['step_s'])} is clearly faster than its {found['part']} alone "
            f"({fmt_time(found['part_s'])}): {analysis.PART_FASTER.meaning}."
            for found in analysis.training_faster_than_parts(rows)]


def sections(op_rows: pd.DataFrame) -> list[tuple[tuple[str, str, str], pd.DataFrame]]:
    """The operator's rows per (machine, dtype, mode): CPU before GPU, float32
    first, forward before the training modes (docs/SPEC.md §1.5)."""
    def order(item):
        (machine, dtype, mode), section = item
        device = section["device"].iloc[0]
        return (_device_rank(device), machine,
                DTYPE_ORDER.index(dtype) if dtype in DTYPE_ORDER else len(DTYPE_ORDER), dtype,
                MODES.index(mode) if mode in MODES else len(MODES))

    return sorted(with_case_columns(op_rows).groupby(["machine", "dtype", "mode"], sort=False), key=order)


def mode_suffix(mode: str) -> str:
    """What a heading adds for a training mode (forward, the default, adds nothing)."""
    return "" if mode == FORWARD else f" · {mode}"


def section_intro(section: pd.DataFrame, metas: list[dict]) -> str:
    """Where the section's numbers come from: the device, its measured ceiling per run."""
    machine, dtype = section["machine"].iloc[0], section["dtype"].iloc[0]
    run_ids = {m["directory"]: str(m.get("run_id", "?")) for m in metas}
    ceilings = []
    for run_dir, in_run in section.groupby("run_dir", sort=False):
        ceiling = in_run["ceiling_gbps"].dropna()
        if len(ceiling):
            # A resumed run measured its ceiling again when it went on: each part's rows carry their own.
            low, high = float(ceiling.min()), float(ceiling.max())
            measured = fmt_ratio(low, " GB/s") if low == high else \
                f"{fmt_ratio(low, '')} to {fmt_ratio(high, ' GB/s')} (measured again when resumed)"
            ceilings.append(f"{measured} (run {run_ids.get(run_dir, '?')})")
    # host/call and do_bench are explained once, in the legend (`legend_notes`).
    return f"{machine}, {dtype}: copy ceiling " + (", ".join(ceilings) if ceilings else "not measured") + "."


def known_defects() -> list:
    """The registry of known library defects (impls/defects.py)."""
    from impls import defects

    return list(defects.DEFECTS)


def observability(defect, rows: pd.DataFrame, metas: list[dict] = ()) -> str:
    """What these runs can say of a defect none of their rows records as
    upstream-defect: that they could not have seen it (its condition's
    device, dtype or training mode never ran the strategy here, or the
    strategy never ran); that they recorded mismatches its condition now
    covers (a run checked before the listing covered them); or that they
    would not show it: a run records a strategy's adversarial verdict only
    when it fails, so a defect its check excused leaves no row."""
    condition = getattr(defect, "condition", None)
    op, _, name = str(getattr(defect, "strategy", "")).partition("/")
    ran = rows[(rows["op"] == op) & (rows["strategy"] == name)]
    needs = tuple(getattr(condition, "devices", ()) or ())
    ran_on = set(rows["device"])
    if needs and not ran_on & set(needs):
        return (f"Not observable here: its condition needs {' or '.join(needs)}, and these runs ran on "
                f"{', '.join(sorted(ran_on))} only.")
    if ran.empty:
        return "Not observable here: these runs did not run the strategy."
    # The condition's device, dtype and training mode, where it names them (its other
    # modes are the input generator's: an adversarial item's, not a row's).
    for column, allowed in (("device", needs), ("dtype", tuple(getattr(condition, "dtypes", ()) or ())),
                            ("mode", tuple(m for m in getattr(condition, "modes", ()) or () if m in MODES))):
        if allowed and not ran[column].isin(allowed).any():
            return (f"Not observable here: its condition needs {column} {' or '.join(allowed)}, and these runs ran "
                    f"{name} in {', '.join(sorted(set(ran[column])))} only.")
    covered = ran[ran["status"] == MISMATCH]
    for column, allowed in (("device", needs), ("dtype", tuple(getattr(condition, "dtypes", ()) or ()))):
        if allowed:
            covered = covered[covered[column].isin(allowed)]
    if len(covered):
        run_ids = {m.get("directory"): f"{m.get('run_id', '?')} at {str(m.get('git_commit') or '?')[:7]}"
                   for m in metas}
        runs = sorted({run_ids.get(run_dir, "?") for run_dir in covered["run_dir"]}) if "run_dir" in covered \
            else ["?"]
        return (f"Recorded as mismatch, not as this defect, in {len(covered)} case(s) where its device and dtype "
                f"hold (run {', '.join(runs)}): the check that recorded them did not excuse them under this listing "
                f"(the listing or its condition is newer than that run, or their differences are not all of its "
                f"kinds); their messages are in the case tables.")
    return ("Not recorded in these runs' rows, which cannot show it: a run records a strategy's adversarial verdict "
            "only when it fails, and a defect its check excused leaves no row (scatterbench check lists each "
            "case it excuses); the timed inputs are random.")


def measured_versions(library: str, strategies: list[str], rows: pd.DataFrame, metas: list[dict]) -> str:
    """The versions of ``library`` the runs that ran any of ``strategies`` recorded (their meta), with the runs."""
    ran = set(rows.loc[(rows["op"] + "/" + rows["strategy"]).isin(strategies), "run_dir"]) if len(rows) else set()
    found: dict[str, list[str]] = {}
    for meta in metas:
        if meta.get("directory") not in ran:
            continue
        version = runmeta.record(meta).versions.get(library)
        if version:
            found.setdefault(str(version), []).append(str(meta.get("run_id", "?"))[-4:])
    return "; ".join(f"{library} {version} (run{'s' if len(ids) > 1 else ''} {', '.join(ids)})"
                     for version, ids in found.items()) or "none of these runs ran it"


def defects_section(doc: Doc, rows: pd.DataFrame, metas: list[dict], level: int = 2) -> None:
    """The known library defects, then the documented behaviours the check
    excuses (impls/defects.py ``kind``), one entry per listing (its
    strategies together): the condition, the versions it was seen with and
    the versions these runs measured (never a range nobody measured), a
    description and a minimal reproduction; then the rows these runs
    recorded as upstream-defect, with their messages."""
    from impls.defects import DOCUMENTED

    registry = for_operators(set(rows["op"]), known_defects() or [])
    observed = rows[rows["status"] == UPSTREAM_DEFECT]
    if not registry and observed.empty:
        return
    doc.heading(level, "Defects and documented behaviour of libraries")
    doc.para("Wrong answers the check traced to a library itself, not to the suite's call of it: such a case is "
             "reported as upstream-defect instead of mismatch, and excused only under the listing's condition. A "
             "defect is a bug; documented behaviour is what the library's documentation allows or its maintainers "
             "closed as intended, listed apart with that source.")
    merged: dict[str, list] = {}
    for defect in registry:
        merged.setdefault(str(getattr(defect, "id", "?")), []).append(defect)
    for kind_title, documented in (("Defects", False), ("Documented behaviour", True)):
        entries = [group for group in merged.values()
                   if (getattr(group[0], "kind", "") == DOCUMENTED) == documented]
        if not entries:
            continue
        doc.heading(level + 1, kind_title)
        for group in entries:
            defect = group[0]
            strategies = [str(getattr(item, "strategy", "?")) for item in group]
            library = str(getattr(defect, "library", "?"))
            doc.heading(level + 2, f"{getattr(defect, 'id', '?')}: {library}, {', '.join(strategies)}")
            doc.para(str(getattr(defect, "description", "")))
            doc.para(f"Condition: {getattr(defect, 'condition', '?')}.")
            seen = getattr(defect, "seen", "")
            doc.para((f"Seen with {seen} when listed; " if seen else "")
                     + f"measured in these runs: {measured_versions(library, strategies, rows, metas)}.")
            reference = getattr(defect, "reference", "")
            if reference:
                doc.para(f"{'Source' if documented else 'Reference'}: {reference}.")
            seen_rows = observed[(observed["op"] + "/" + observed["strategy"]).isin(strategies)]
            # Each listed strategy's observability; said once where they agree.
            doc.para(f"Observed in {len(seen_rows)} case(s) of these runs." if len(seen_rows)
                     else " ".join(dict.fromkeys(observability(item, rows, metas) for item in group)))
            doc.para("Minimal reproduction:")
            doc.code(str(getattr(defect, "reproduction", "")).rstrip())
    if len(observed):
        doc.heading(level + 1, "Cases recorded as upstream-defect")
        doc.table(["op", "strategy", "params", "machine", "dtype", "message"],
                  [[r["op"], r["strategy"], params_label(r["params"]), r["machine"], r["dtype"],
                    shorten(r["message"], 300)] for _, r in observed.iterrows()])


# ------------------------------------------------------------------ where the numbers come from
def _run_commits(rows: pd.DataFrame, metas: list[dict]) -> dict[str, str]:
    """Each machine of ``rows`` -> the commits its runs measured at (short hashes)."""
    commit_of = {m["directory"]: str(runmeta.record(m).git_commit or "?")[:12] for m in metas}
    return {machine: ", ".join(sorted({commit_of.get(d, "?") for d in group["run_dir"]}))
            for machine, group in rows.groupby("machine", sort=False)}


def commits_sentence(rows: pd.DataFrame, metas: list[dict]) -> str:
    """Where machines side by side were measured at different commits: said
    beside the comparison (a difference may be the code's, not the machine's)."""
    commits = _run_commits(rows, metas)
    if len(commits) < 2 or len(set(commits.values())) < 2:
        return ""
    return ("The machines side by side ran different commits (" + "; ".join(
        f"{machine}: {commit}" for machine, commit in commits.items()) + "): where the code changed in between, a "
            "difference may be the code's, not the machine's.")


def what_ran_where(rows: pd.DataFrame, metas: list[dict], left_out: list[dict] = ()) -> str:
    """The report's first paragraph: which devices and machines the numbers
    come from, which runs are fit to be judged, and what was not measured."""
    machines = []
    operators = list(dict.fromkeys(rows["op"]))
    for machine, group in rows.groupby("machine", sort=False):
        run_dirs = set(group["run_dir"])
        runs = [m for m in metas if m["directory"] in run_dirs]
        fit = [m for m in runs if not m.get("unfit_reasons")]
        absent = [op for op in operators if op not in set(group["op"])]
        machines.append(f"{machine} ({len(runs)} run{'s' if len(runs) != 1 else ''}, {len(fit)} fit to judge"
                        + (f"; {', '.join(absent)} not measured there" if absent else "") + ")")
    measured = set(rows["device"])
    missing = [device for device in devices() if device not in measured]
    text = "What ran where: " + "; ".join(machines) + "."
    text += predated_sentence(metas, set(rows["run_dir"]))
    unfit = [m for m in metas if m.get("unfit_reasons")]
    if unfit:
        text += (f" {len(unfit)} run(s) failed the fitness rule ("
                 + "; ".join(f"{m.get('run_id', '?')}: {', '.join(m['unfit_reasons'])}" for m in unfit)
                 + "): their tables are in the appendix and nothing above it is drawn from them.")
    text += left_out_sentence(left_out, set(rows["machine"]))
    if missing:
        never = sorted({s.name for s in _strategies_only_on(missing)})
        text += (f" Not measured: {', '.join(missing)} (no run here had one), so nothing here says "
                 f"how fast any strategy is there" + (f", and {', '.join(never)} (which run only there) were not "
                                                      f"timed at all" if never else "") + ".")
    return text


def left_out_sentence(left_out: list[dict], shown: set) -> str:
    """The runs a publisher left out (report.py --left-out or
    --left-out-list; each a dict of run_id, machines, unfit_reasons and
    reason): named, with their reasons, where they leave a machine missing
    from the report; the others counted (their reasons are in the runs
    section)."""
    missing: dict[tuple[str, ...], list[str]] = {}  # the machines left missing -> their runs, with reasons
    counted = {"unfit": 0, "other": 0}
    for run in left_out:
        machines = list(run.get("machines") or ["?"])
        absent = tuple(machine for machine in machines if machine not in shown)
        if not absent:
            counted["unfit" if run.get("unfit_reasons") else "other"] += 1
            continue
        missing.setdefault(absent, []).append(
            f"{run.get('run_id', '?')} ({', '.join(run.get('unfit_reasons') or [run.get('reason') or 'fit'])})")
    def named(machine: str) -> str:
        model = unrecorded_family_of(machine, shown)
        return machine + (f" (it recorded no CPU family and model, so it cannot be matched with the {model} machines "
                          f"above)" if model else "")

    parts = [f"run{'s' if len(runs) > 1 else ''} {'; '.join(runs)} on {', '.join(map(named, absent))}, which no "
             f"published run measured, so {'that machine is' if len(absent) == 1 else 'those machines are'} "
             f"missing from this report" for absent, runs in missing.items()]
    text = f" Left out for failing the fitness rule, tables and all: {'; '.join(parts)}." if parts else ""
    if counted["unfit"] or counted["other"]:
        text += (f" {counted['unfit'] + counted['other']} more committed runs are left out ({counted['unfit']} unfit, "
                 f"{counted['other']} fit: repeats compared with the published runs), each with its reason in "
                 f"docs/RUNS_LEFT_OUT and in \"Runs and their agreement\".")
    return text


def predated_sentence(metas: list[dict], run_dirs: set) -> str:
    """The runs shown that predate rules of the check (``check.rules_predated``,
    by the schema each was written as), with their commits: their strategies
    are ranked as that older check passed them."""
    from harness.measuring import check

    groups: dict[tuple, list[str]] = {}
    for meta in metas:
        if meta.get("directory") not in run_dirs:
            continue
        rules, certain = check.rules_predated(meta.get("schema_written"))
        if rules:
            key = (str(meta.get("git_commit") or "?")[:7], meta.get("schema_written"), rules, certain)
            groups.setdefault(key, []).append(str(meta.get("run_id", "?")))
    return "".join(
        f" Run{'s' if len(ids) > 1 else ''} {', '.join(ids)} (commit {commit}, stored as result schema {schema}) "
        f"{'predate' if certain else 'may predate'} rules the check has now: {'their' if len(ids) > 1 else 'its'} "
        f"strategies were {rules}; {'their' if len(ids) > 1 else 'its'} rankings stand as that check passed them."
        for (commit, schema, rules, certain), ids in groups.items())


def _strategies_only_on(missing: list[str]):
    return [s for s in all_strategies() if s.devices and set(s.devices) <= set(missing)]


# ------------------------------------------------------------------ the answer, across machines
def machine_order(rows: pd.DataFrame) -> list[str]:
    """The machines of the rows, CPU before GPU, then by name."""
    first = rows.drop_duplicates("machine")
    key = {m: (_device_rank(d), m)
           for m, d in zip(first["machine"], first["device"])}
    return sorted(key, key=key.get)


def _size_order(rows: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(op, params, dtype) in the rows' order, float32 first within an operator and size."""
    keys = list(dict.fromkeys(zip(rows["op"], rows["params"], rows["dtype"])))
    ops = list(dict.fromkeys(rows["op"]))
    return sorted(keys, key=lambda k: (ops.index(k[0]), DTYPE_ORDER.index(k[2]) if k[2] in DTYPE_ORDER
                                       else len(DTYPE_ORDER), keys.index(k)))


def _answer_cells(case: pd.DataFrame) -> list[str]:
    found = analysis.answer(case)
    if found is None:
        fewest = analysis.fewest_counted(case)
        if fewest is not None:  # a counting run: counts, no times
            headline = metrics.COUNTS.primary
            return [f"not timed; fewest {headline.unit}: {fewest['strategy']} "
                    f"({headline.format(fewest[headline.name])}/call)", "–", "–", "–", "–"]
        return ["none passed", "–", "–", "–", "–"]
    best = found.best
    median = median_cell(best)
    faster_inexact = case[analysis.timed(case) & (case["status"] == INEXACT) & (case["median_s"] < best["median_s"])]
    # A tie names every strategy the winner does not clearly beat (analysis.answer) and prints no speed-up.
    name = (f"{analysis.tie_label(found)}: {' / '.join(analysis.winners(found))}" if found.tie else best["strategy"])
    name += f" (no clear win: {found.unclear})" if found.unclear else ""
    name += f" (faster but inexact: {', '.join(faster_inexact['strategy'])})" if len(faster_inexact) else ""
    builtin = ("is one" if found.builtin == best["strategy"]
               else fmt_ratio_interval(found.over_builtin, found.builtin_interval) if found.clear else "–")
    return [name, median, floors.ceiling_cell(best["pct_of_ceiling"]),
            fmt_ratio_interval(found.over_seed, found.seed_interval) if found.clear else "–", builtin]


# What a tie and an unclear win are, said once for the answer tables (here and the legend's).
TIE_LEGEND = ("Each point is a race (SPEC 3 \"Racing\"): after each round from the second, every strategy "
              "still running is judged against the fastest and leaves when the rounds decide it. A winner is named "
              "only where every rival left slower ('faster'); 'equivalent within ±5 %' names strategies the rounds "
              "put within the margin of the fastest, an answer: either will do; 'undecided after N rounds' names "
              "those the budget ran out on, no answer yet (a larger budget, or a quieter machine, may tell). Older "
              "runs keep the rule they were judged by, and say 'tie' (their rounds did not agree beyond their "
              "spread, or, before rounds, their Q1–Q3 ranges overlapped). A tie prints no speed-up; its time is "
              "the first's. Each factor carries the range of its per-round ratios in parentheses. A win the data "
              "cannot claim (the winner's timers disagree, or a rival's so that by one of them it is as fast, or "
              "the run ended before some of the case's strategies) says so: 'no clear win'.")


ANSWER_NOTE = ("Per operator, size and dtype, the fastest strategy that passed the float64-oracle check exactly "
               "and returns the operator's whole output, on each machine: its median time, its % of that "
               "machine's copy ceiling, and how many times faster it is than the seed's original and than the "
               "fastest library built-in (a library's own call for the operator, numpy's included; 'is one' "
               "where it is that built-in; – where it was not measured). " + TIE_LEGEND + " "
               f"{UNSTABLE.mark}: unstable ({UNSTABLE.meaning}). A faster strategy that is only inexact is named "
               f"beside it. Details, spreads and every other strategy follow below.")


def training_step(case: pd.DataFrame) -> tuple[str, pd.DataFrame] | None:
    """The rows that answer "fastest for a training step" in one case on one
    machine: forward+backward where it ran, else backward; None without either."""
    for mode in (FORWARD_BACKWARD, BACKWARD):
        found = case[case["mode"] == mode]
        if len(found):
            return mode, found
    return None


def _training_cell(case: pd.DataFrame) -> str:
    step = training_step(case)
    if step is None:
        return "not run"
    mode, rows = step
    found = analysis.answer(rows)
    if found is None:  # nothing timed and correct: a counting run's fewest instructions, or none passed
        return f"{_answer_cells(rows)[0]} ({mode})"
    best = found.best
    name = (f"{analysis.tie_label(found)}: {' / '.join(analysis.winners(found))}" if found.tie else best["strategy"])
    name += f" (no clear win: {found.unclear})" if found.unclear else ""
    return f"{name} ({mode}: {fmt_time(best['median_s'])}" + (
        f", {fmt_ratio_interval(found.over_seed, found.seed_interval)} the seed's"
        if finite(found.over_seed) and found.clear else "") + ")"


def answer_table(rows: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The suite's question answered in one table: per operator and size, and
    per machine side by side, the fastest correct strategy for inference (the
    forward) and by how much, and, where the rows hold a training mode, the
    fastest for a training step beside it (docs/SPEC.md §1.5)."""
    rows = with_case_columns(rows)
    machines = machine_order(rows)
    training = bool((rows["mode"] != FORWARD).any())
    # One machine: a column per quantity. Several: a column per machine, side
    # by side, each cell the same five quantities in a line.
    header = ["operator", "size", "dtype"] + (
        ["fastest", "median", "% of ceiling", "× seed", "× best built-in"] + (["training step"] if training else [])
        if len(machines) == 1 else machines)
    table = []
    for op, params, dtype in _size_order(rows):
        case = rows[(rows["op"] == op) & (rows["params"] == params) & (rows["dtype"] == dtype)]
        forward = case[case["mode"] == FORWARD]
        cells = [op, params_label(params), dtype]
        for machine in machines:
            on_machine = forward[forward["machine"] == machine]
            found = _answer_cells(on_machine) if len(on_machine) else ["not run", "–", "–", "–", "–"]
            # A training step is named only for a case some run trained: not "not run" in every cell
            case_trained = training and bool((case["mode"] != FORWARD).any())
            step = _training_cell(case[case["machine"] == machine]) if case_trained else "–"
            if len(machines) == 1:
                cells += found + ([step] if training else [])
                continue
            name, median, pct, seed, builtin = found
            cells.append((name if median == "–" else
                          f"{name}: {median}, {pct} of ceiling, "
                          + ("seed not timed" if seed == "–" else f"{seed} the seed") + ", "
                          + ("the fastest built-in" if builtin == "is one" else
                             "no built-in timed" if builtin == "–" else f"{builtin} the best built-in"))
                         + (f"; training step: {step}" if case_trained and step != "not run" else ""))
        table.append(cells)
    return header, table


def training_sentence(rows: pd.DataFrame) -> str:
    """Where the fastest strategy for inference is not the fastest for a
    training step (each beyond its runner-up's spread: ties name no winner)."""
    rows = with_case_columns(rows)
    if not (rows["mode"] != FORWARD).any():
        return ""
    differ, same = [], 0
    for (op, params, dtype, machine), case in rows.groupby(["op", "params", "dtype", "machine"], sort=False):
        inference = analysis.answer(case[case["mode"] == FORWARD])
        step = training_step(case)
        trained = analysis.answer(step[1]) if step else None
        if inference is None or trained is None or not inference.clear or not trained.clear:
            continue
        if inference.best["strategy"] == trained.best["strategy"]:
            same += 1
        else:
            differ.append(f"{op} {params_label(params)} {dtype} on {machine}: {inference.best['strategy']} for "
                          f"inference, {trained.best['strategy']} for a training step ({step[0]})")
    if not differ:
        return (f"Inference and training step agree on the fastest strategy in all {same} cases where both have a "
                f"clear winner." if same else "")
    agree = {0: "no other case has a clear winner in both", 1: "1 other case agrees"}.get(same, f"{same} other cases agree")
    return ("The fastest strategy for inference is not the fastest for a training step in " + "; ".join(differ)
            + f" ({agree}).")


def machines_table(case: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """One case on several machines: strategy × machine, each cell the
    median, the % of that machine's ceiling and the rank there."""
    machines = machine_order(case)
    ranks = {machine: analysis.ranks(case[case["machine"] == machine]) for machine in machines}
    header = ["strategy"] + [f"{machine}" for machine in machines]
    # In the first machine's order, then the strategies it did not rank in the next one's.
    order = sorted(dict.fromkeys(case["strategy"]),
                   key=lambda name: tuple(ranks[m].get(name, 10**6) for m in machines))

    def cell(machine, found):
        row = found.iloc[0]
        if not finite(row["median_s"]):
            return str(row["status"])
        place = ranks[machine].get(row["strategy"])
        rank_text = f"rank {place}" if place else ("not ranked" if row["status"] in CORRECT else row["status"])
        return (f"{median_cell(row)} · "
                f"{floors.ceiling_cell(row['pct_of_ceiling'])} · {rank_text}")

    return header, [[name] + grid_cells(case[case["strategy"] == name], "machine", machines, "–", cell)
                    for name in order]


def machines_sentence(case: pd.DataFrame) -> str:
    """Which strategy wins where, and where the ranking flips."""
    machines = machine_order(case)
    by_machine = {machine: case[case["machine"] == machine] for machine in machines}
    # The answer table's winner, or its tie (`analysis.clearly_faster`, the one rule of "inconclusive").
    winners = [(machine, analysis.winner_text(analysis.answer(rows))) for machine, rows in by_machine.items()]
    text = "Fastest: " + "; ".join(f"{name} on {machine}" if name else f"none passed on {machine}"
                                   for machine, name in winners) + "."
    if len({name for _, name in winners}) == 1 and all(name for _, name in winners):
        text = f"Fastest on every machine: {winners[0][1]}."
    flips = analysis.rank_flips(by_machine)
    if flips:
        text += " The ranking flips: " + "; ".join(
            f"{x} beats {y} on {first} but {y} beats {x} on {second}" for x, y, first, second in flips[:3]) \
            + (f" (and {len(flips) - 3} more pairs)" if len(flips) > 3 else "") + "."
    elif len(machines) > 1:
        text += " No pair of leading strategies changes order with the machine beyond their spread."
    return text
