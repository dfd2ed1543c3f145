"""Reading result directories for the report: rows labelled by machine, with their runs' metadata."""

from __future__ import annotations

import sys

import pandas as pd

from harness.base import plugins
from harness.base.errors import ResultError
from harness.base.format import params_label
from harness.judging.analysis import with_speedups
from harness.results import store
from harness.results.runmeta import record


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
    run = record(meta)
    if device == "cuda":
        return f"cuda: {run.gpu_name or 'GPU'}"
    # Two CPUs may share a model name (every AMD EPYC VM reports "AMD EPYC"):
    # the family-model tells them apart, or their rows would be taken for one machine's.
    family_model = f" ({run.hardware.cpu_family_model})" if run.hardware.cpu_family_model else ""
    return f"cpu: {run.cpu_model or '?'}{family_model} ×{run.cpu_count or '?'}"


def case_title(row) -> str:
    return f"{row['op']} {params_label(row['params'])} · {row['machine']} · {row['dtype']}"

