"""A run's small per-case summary, ``DIR/summary.json``: what the dashboard
needs of a run, in kilobytes instead of the megabytes of raw samples.

Per case (column by column: ``cases`` maps a column to its values): its
key columns, status and source, median, IQR, 10th percentile
(the CI gate's statistic, which needs the samples), minimum, sample count,
the load it finished under, the instruction counts where the run has them,
and flags (unstable, slow start, no usable samples). Per run: the metadata
that says where and how it was measured.

The store writes it when a run's writer closes (`write_summary`); for older
runs, or after a result file changed, `load_summary` rebuilds it. A summary
carries the fingerprint of the files it was made from (the SHA-256 of
``meta.json``, ``rows.csv`` and ``samples.jsonl``), so a stale one is never
used; where the result directory cannot be written, the rebuilt summary is
kept in a cache directory instead.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pandas as pd

from harness import regression, stats, store
from impls.status import CORRECT

SUMMARY = "summary.json"
VERSION = 2  # of the summary's layout: a summary of another version is rebuilt

# Copied from each row as they are.
ROW_COLUMNS = ("case_id", "op", "strategy", "backend", "device", "dtype", "params", "status", "source",
               "median_s", "iqr_s", "min_s", "n_samples", "load_avg", "slow_start")
# What the dashboard and the fitness rule read of a run's metadata.
META_KEYS = ("run_id", "start_time", "end_time", "status", "git_commit", "machine", "host", "cpu_model",
             "cpu_count", "gpu_name", "hardware", "versions", "threads", "load_avg_start", "load_avg_end",
             "config_file")
UNSTABLE, SLOW_START, NO_SAMPLES = "unstable", "slow-start", "no-samples"


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


def fingerprint(directory: Path, known: dict | None = None) -> dict:
    """What a summary is valid for: the content of the run's three files.
    ``known`` ({path: [size, mtime_ns, sha256]}, kept by the caller between
    builds, updated here) spares hashing a file whose size and mtime did not
    change: a build then reads kilobytes per run. Content, not mtimes, is
    what the summary records: a fresh clone of committed results changes
    every mtime and no content."""
    directory = Path(directory)
    return {"version": VERSION, **{name: _file_hash(directory / name, known)
                                   for name in (store.META, store.ROWS, store.SAMPLES)}}


def _number(value):
    """JSON has no NaN: an absent number is null."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    return value


def _flags(row: dict, has_samples: bool) -> str:
    flags = []
    if stats.is_unstable(row["iqr_s"], row["median_s"]):
        flags.append(UNSTABLE)
    if isinstance(row.get("slow_start"), float) and row["slow_start"] > 0:
        flags.append(SLOW_START)
    if row["status"] in CORRECT and not has_samples:
        flags.append(NO_SAMPLES)
    return " ".join(flags)


def summarize(directory, known: dict | None = None) -> dict:
    """The summary of the result directory ``directory``, read from its files."""
    directory = Path(directory)
    key = fingerprint(directory, known)
    meta, rows, samples = store.read_run(directory)
    for name in regression.COUNT_METRICS:  # numbers once the store knows the column, text before
        if name in rows:
            rows[name] = pd.to_numeric(rows[name], errors="coerce")
    counts = [name for name in regression.COUNT_METRICS if name in rows and rows[name].notna().any()]
    cases = {name: [_number(value) for value in rows[name].tolist()] for name in list(ROW_COLUMNS) + counts}
    timed = [samples.get(case_id) for case_id in cases["case_id"]]
    cases["p10_s"] = [regression.typical_s(values, "p10") if values else None for values in timed]
    records = rows[["status", "median_s", "iqr_s", "slow_start"]].to_dict("records")
    cases["flags"] = [_flags(record, bool(values)) for record, values in zip(records, timed)]
    return {"fingerprint": key, "meta": {name: meta[name] for name in META_KEYS if name in meta},
            "cases": cases}


def _write(path: Path, summary: dict) -> None:
    """Replaced whole, not fsynced: a summary lost or cut short by a crash
    no longer parses or matches its fingerprint, and is rebuilt."""
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "w") as handle:
            json.dump(summary, handle, separators=(",", ":"), allow_nan=False)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_summary(directory) -> dict:
    """Writes ``DIR/summary.json`` from the run's files, and returns it."""
    summary = summarize(directory)
    _write(Path(directory) / SUMMARY, summary)
    return summary


def _read(path: Path) -> dict | None:
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def cache_path(directory: Path, cache_dir: Path) -> Path:
    name = hashlib.sha256(str(Path(directory).resolve()).encode()).hexdigest()[:24]
    return Path(cache_dir) / f"{name}.json"


def load_summary(directory, cache_dir=None, known: dict | None = None) -> dict:
    """The run's current summary: ``DIR/summary.json`` when its fingerprint
    still matches the run's files, else rebuilt (from the raw results: the
    only time they are read) and written back beside them, or into
    ``cache_dir`` where the result directory is read-only. ``known``: as
    for `fingerprint`."""
    directory = Path(directory)
    key = fingerprint(directory, known)
    summary = _read(directory / SUMMARY)
    if summary is not None and summary.get("fingerprint") == key:
        return summary
    places = [directory / SUMMARY] + ([cache_path(directory, cache_dir)] if cache_dir else [])
    summary = _read(places[-1]) if cache_dir else None
    if summary is not None and summary.get("fingerprint") == key:
        return summary
    summary = summarize(directory, known)
    for place in places:
        try:
            place.parent.mkdir(parents=True, exist_ok=True)
            _write(place, summary)
            break
        except OSError:
            continue  # read-only results: the next place, or rebuilt next time
    return summary


def frame_of(columns: dict) -> pd.DataFrame:
    """Summary columns (name -> values, of one run or of several put
    together) as a DataFrame, absent numbers as NaN."""
    frame = pd.DataFrame(columns)
    numeric = [name for name in columns if name in store.NUMERIC or name == "p10_s" or name in regression.COUNT_METRICS]
    # The text columns repeat a few values thousands of times: categories keep a long history small and fast to group.
    return frame.astype({name: float for name in numeric} | {name: "category" for name in ROW_COLUMNS + ("flags",)
                                                             if name in columns and name not in numeric})


def cases_frame(summary: dict) -> pd.DataFrame:
    """The summary's cases as a DataFrame."""
    return frame_of(summary["cases"])
