"""Reading result directories for the report: rows labelled by machine, with their runs' metadata."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd

from harness.base import plugins
from harness.base.cases import CASE_DEFAULTS, POINT_LAYOUT_KEY, with_case_columns
from harness.base.errors import ResultError
from harness.base.format import params_label
from harness.judging.analysis import PLANNED, finite, planned_strategies, run_unfit_reasons, with_speedups
from harness.results import store
from harness.results.runmeta import record


def load(dirs) -> tuple[pd.DataFrame, list[dict]]:
    """All rows of the given runs, each labelled with its machine and with
    whether its run is fit to be judged (``fit``), plus their metadata, each
    with ``unfit_reasons`` (`analysis.run_unfit_reasons`; a counting run,
    which has no times, is judged by its counts and always fit here)."""
    frames, metas = [], []
    for directory in dirs:
        # The run's plugins before its rows are read: what its rows derive (a fresh floor, from the
        # operator's bytes written: store.derive_older) asks the registry.
        missing = plugins.load_recorded(dict(store.read_meta(Path(directory)), directory=str(directory)))
        meta, rows, _samples = store.read_run(directory)
        meta = dict(meta, directory=str(directory))
        meta["plugins_missing"] = missing
        for line in meta["plugins_missing"]:
            print(f"report: {line}", file=sys.stderr)
        metas.append(meta)
        timed = not rows.empty and bool(rows["median_s"].map(finite).any())
        meta["unfit_reasons"] = run_unfit_reasons(meta, rows) if timed else []
        if rows.empty:
            continue
        if rows["load_avg"].notna().any():
            meta["case_load_max"] = float(rows["load_avg"].max())
        rows = rows.copy()
        rows["fit"] = not meta["unfit_reasons"]
        rows["machine"] = rows["device"].map(lambda d: device_label(meta, d))
        rows["run_dir"] = str(directory)
        # A run that ended before its config did (a GPU window closed): what each point meant to
        # time, so that `analysis.answer` never names a winner among the strategies it reached.
        planned = planned_strategies(meta)
        if planned is not None:
            rows[PLANNED] = [" ".join(planned.get((r.op, r.device, r.dtype, r.params, r.mode, r.layout), ()))
                             for r in with_case_columns(rows).itertuples()]
        frames.append(rows)
    if not frames:
        raise ResultError(f"{', '.join(map(str, dirs))}: no result rows to report")
    rows = with_case_columns(pd.concat(frames, ignore_index=True))
    # A case measured by several runs on one machine: the latest fit run's
    # measurement, the latest unfit one's only where no fit run measured it.
    rows["_start"] = rows["run_dir"].map({m["directory"]: m.get("start_time", "") for m in metas})
    rows = rows.sort_values(["fit", "_start"], kind="stable").drop_duplicates(["case_id", "machine"], keep="last")
    rows = rows.drop(columns="_start")
    # An unfit run's times are shown, never judged: no speed-up (over the
    # seed's time in a fit run or its own), no % of ceiling.
    unfit = rows[~rows["fit"]].assign(speedup=float("nan"), pct_of_ceiling=float("nan"),
                                      pct_of_fresh_floor=float("nan"), pct_of_floor=float("nan"))
    rows = pd.concat([with_speedups(rows[rows["fit"]]), unfit]).sort_index()
    return layout_in_params(rows), metas


def layout_in_params(rows: pd.DataFrame) -> pd.DataFrame:
    """The report's points: a case timed in another layout than contiguous (docs/SPEC.md §2) is
    its own point, its params JSON ending in ``"layout"`` (``... k=2 layout=channels_last`` where
    the report names the size), so that every answer, table and figure of the report, which go by
    operator, params and dtype, is given per layout; contiguous cases read as they always did. The
    speed-ups were taken within each layout before (``with_speedups`` goes by the case's group)."""
    other = rows["layout"] != CASE_DEFAULTS["layout"]
    if not other.any():
        return rows
    rows = rows.copy()
    rows.loc[other, "params"] = [json.dumps({**json.loads(params), POINT_LAYOUT_KEY: layout})
                                 for params, layout in zip(rows.loc[other, "params"], rows.loc[other, "layout"])]
    return rows


# x86 family-model -> the core's generation, where a VM reports a bare model name ("AMD EPYC").
CORE_NAMES = {"23-1": "Zen", "23-49": "Zen 2", "25-1": "Zen 3", "25-17": "Zen 4", "26-2": "Zen 5",
              "6-143": "Sapphire Rapids", "6-167": "Rocket Lake", "6-106": "Ice Lake"}


def threads_said(threads: dict) -> str:
    """A run's thread setting in words: ``1 thread per library``, or each library's where they differ."""
    from impls.backends import LEGACY_THREAD_KEYS, threads_text

    counts = {LEGACY_THREAD_KEYS.get(pool, pool): count for pool, count in (threads or {}).items()}
    if not counts:
        return "threads not recorded"
    if len(set(counts.values())) == 1 and None not in counts.values():
        count = next(iter(counts.values()))
        return f"{count} thread{'s' if count != 1 else ''} per library"
    return f"threads {threads_text(counts)}"


def device_label(meta: dict, device: str) -> str:
    """A run's device as the report names it, one machine at one thread setting: ``cpu: AMD EPYC
    Zen 4 (25-17), 2 cores, 1 thread per library``. Two CPUs may share a model name (every AMD EPYC
    VM reports "AMD EPYC"): the family-model (and the core it stands for) tells them apart; and the
    thread setting is part of what was measured, so runs at another setting are another column,
    never pooled into one answer."""
    run = record(meta)
    if device == "cuda":
        return f"cuda: {run.gpu_name or 'GPU'}"
    family_model = run.hardware.cpu_family_model
    core = CORE_NAMES.get(family_model or "")
    named = f" {core} ({family_model})" if core else (f" ({family_model})" if family_model else "")
    cores = run.cpu_count or "?"
    return (f"cpu: {run.cpu_model or '?'}{named}, {cores} core{'s' if cores != 1 else ''}, "
            f"{threads_said(run.threads)}")


_FAMILY_MODEL = re.compile(r" \(\d+-\d+\)$")  # device_label's " (25-17)" after a CPU's model name


def unrecorded_family_of(label: str, others) -> str | None:
    """The CPU model name that ``label`` (a ``device_label`` without a family-model) shares with
    some of ``others`` that have one: "AMD EPYC" for "cpu: AMD EPYC, 2 cores, ..." beside "cpu: AMD
    EPYC Zen 4 (25-17), 2 cores, ...". Such a label cannot be matched with any of those machines,
    though it reads like all of them; None where nothing shares its name or it has its own."""
    named = label.split(",", 1)[0]
    if not named.startswith("cpu: ") or _FAMILY_MODEL.search(named):
        return None
    sharing = [other for other in others
               if other.startswith(named + " ") and _FAMILY_MODEL.search(other.split(",", 1)[0])]
    return named[len("cpu: "):] if sharing else None


def case_title(row) -> str:
    mode = row.get("mode", "forward") if hasattr(row, "get") else "forward"
    return (f"{row['op']} {params_label(row['params'])} · {row['machine']} · {row['dtype']}"
            + ("" if mode == "forward" or not isinstance(mode, str) else f" · {mode}"))

