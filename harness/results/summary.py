"""A run's small per-case summary, ``DIR/summary.json``: what the dashboard
needs of a run, in kilobytes instead of the megabytes of raw samples.

Per case (column by column: ``cases`` maps a column to its values): its
key columns, status and source, median, IQR, 10th percentile (the CI gate's
statistic, which needs the samples), minimum, sample count, the load it
finished under, the instruction counts where the run has them, and the flags
only the raw results can tell (slow start, no usable samples; whether a
case is unstable follows from its median and IQR, and is judged where it is
read, by harness.judging.analysis). Per run: the metadata that says where and how
it was measured.

The store writes it when a run's writer closes; the dashboard's history
(harness/judging/history.py) rebuilds it for older runs, or after a result file
changed. A summary carries the fingerprint of the files it was made from
(their SHA-256), so a stale one is never used. This module reads no result
directory itself: the store sits below it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pandas as pd

from harness.results import metrics, stats
from impls.status import CORRECT

SUMMARY = "summary.json"
VERSION = 9  # of the summary's layout: a summary of another version is rebuilt (4: plugins; 5: mode; 6: rounds' IQR; 7: busy ceilings; 8: layout; 9: schema_written)

# Copied from each row as they are.
ROW_COLUMNS = ("case_id", "op", "strategy", "backend", "device", "dtype", "params", "mode", "layout", "status", "source",
               "median_s", "iqr_s", "within_round_iqr_s", "min_s", "n_samples", "load_avg", "slow_start")
NUMBERS = ("median_s", "iqr_s", "within_round_iqr_s", "min_s", "n_samples", "load_avg", "slow_start",
           "p10_s") + metrics.COUNTS.names
# What the dashboard and the fitness rule read of a run's metadata.
META_KEYS = ("run_id", "start_time", "end_time", "status", "git_commit", "machine", "host", "cpu_model",
             "cpu_count", "gpu_name", "hardware", "versions", "count_versions", "threads", "load_avg_start",
             "load_avg_end", "config_file", "plugins",
             # the schema the run was written as: its timing protocol (runmeta.timing_protocol)
             "schema_written")
SLOW_START, NO_SAMPLES = "slow-start", "no-samples"


def _file_hash(path: Path, known: dict | None) -> str | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    seen = (known or {}).get(str(path))
    if seen and seen[:2] == [info.st_size, info.st_mtime_ns]:
        return seen[2]
    with open(path, "rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()
    if known is not None:
        known[str(path)] = [info.st_size, info.st_mtime_ns, digest]
    return digest


def fingerprint(directory, files, known: dict | None = None) -> dict:
    """What a summary is valid for: the content of the run's ``files``
    (names in ``directory``: the store's three). ``known`` ({path: [size,
    mtime_ns, sha256]}, kept by the caller between builds, updated here)
    spares hashing a file whose size and mtime did not change: a build then
    reads kilobytes per run. Content, not mtimes, is what the summary
    records: a fresh clone of committed results changes every mtime and no
    content."""
    return {"version": VERSION, **{name: _file_hash(Path(directory) / name, known) for name in files}}


def _number(value):
    """JSON has no NaN: an absent number is null."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    return value


def _flags(status: str, slow_start, has_samples: bool) -> str:
    flags = []
    if isinstance(slow_start, float) and slow_start > 0:
        flags.append(SLOW_START)
    if status in CORRECT and not has_samples:
        flags.append(NO_SAMPLES)
    return " ".join(flags)


def summarize(meta: dict, rows: pd.DataFrame, samples: dict, key: dict) -> dict:
    """The summary of one run read back (its metadata, rows and samples, as
    the store reads them), valid for the files whose fingerprint is ``key``."""
    rows = rows.copy()
    for name in metrics.COUNTS.names:  # numbers (text in a row written before the store knew the column)
        if name in rows:
            rows[name] = pd.to_numeric(rows[name], errors="coerce")
    counted = [name for name in metrics.COUNTS.names if name in rows and rows[name].notna().any()]
    cases = {name: [_number(value) for value in rows[name].tolist()] for name in list(ROW_COLUMNS) + counted}
    timed = [samples.get(case_id) for case_id in cases["case_id"]]
    cases["p10_s"] = [stats.typical_s(values, "p10") if values else None for values in timed]
    cases["flags"] = [_flags(status, slow, bool(values))
                      for status, slow, values in zip(rows["status"], rows["slow_start"].tolist(), timed)]
    kept = {name: meta[name] for name in META_KEYS if name in meta}
    # What the fitness rule reads of the machine beyond its load (analysis.run_unfit_reasons):
    # a ceiling or curve measured busy, without the curves themselves.
    kept["ceiling_busy"] = dict(meta.get("ceiling_busy") or {})
    curves = meta.get("bandwidth_curves") if isinstance(meta.get("bandwidth_curves"), dict) else {}
    kept["bandwidth_curves"] = {device: {"busy": curve["busy"]} for device, curve in curves.items()
                                if isinstance(curve, dict) and curve.get("busy")}
    return {"fingerprint": key, "meta": kept, "cases": cases}


def write(path: Path, summary: dict) -> None:
    """Replaced whole, not fsynced: a summary lost or cut short by a crash
    no longer parses or matches its fingerprint, and is rebuilt."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w") as handle:
            json.dump(summary, handle, separators=(",", ":"), allow_nan=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read(path: Path, key: dict) -> dict | None:
    """The summary at ``path`` if it is one for the files ``key`` fingerprints, else None."""
    try:
        summary = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) and summary.get("fingerprint") == key else None


def frame_of(columns: dict) -> pd.DataFrame:
    """Summary columns (name -> values, of one run or of several put
    together) as a DataFrame, absent numbers as NaN."""
    frame = pd.DataFrame(columns)
    # The text columns repeat a few values thousands of times: categories keep a long history small and fast.
    return frame.astype({name: float for name in columns if name in NUMBERS}
                        | {name: "category" for name in ROW_COLUMNS + ("flags",)
                           if name in columns and name not in NUMBERS})


def cases_frame(summary: dict) -> pd.DataFrame:
    """The summary's cases as a DataFrame."""
    return frame_of(summary["cases"])
