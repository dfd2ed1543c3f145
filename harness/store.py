"""Result directories (SPEC 4): ``meta.json``, ``rows.csv``, ``samples.jsonl``.

Written so that a run killed at any moment leaves every finished case
readable: the metadata is written first (atomically, by rename), and each case
appends its samples line and then its row, each as one write, flushed and
fsynced. A row is the mark that a case finished; a last line without its
newline is a case cut off mid-write and is ignored (``--resume`` redoes it).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import warnings
from pathlib import Path

import pandas as pd

SCHEMA_VERSION = 1
META, ROWS, SAMPLES = "meta.json", "rows.csv", "samples.jsonl"
STATUSES = ("ok", "inexact", "mismatch", "error", "timeout", "skipped")

COLUMNS = (
    "run_id", "case_id", "op", "strategy", "backend", "device", "dtype", "params", "status",
    "message", "median_s", "iqr_s", "min_s", "mean_s", "n_samples", "bytes", "gbps",
    "ceiling_gbps", "floor_s", "pct_of_ceiling", "max_abs_err", "rel_err", "peak_mem_bytes",
    "setup_s", "source",
)
NUMERIC = ("median_s", "iqr_s", "min_s", "mean_s", "n_samples", "bytes", "gbps", "ceiling_gbps",
           "floor_s", "pct_of_ceiling", "max_abs_err", "rel_err", "peak_mem_bytes", "setup_s")


class ResultError(Exception):
    """A result directory that cannot be read: names the file and line."""


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=2, sort_keys=True, default=str)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _format(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


class RunWriter:
    """Appends finished cases to a result directory."""

    def __init__(self, directory: Path, meta: dict):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.meta = dict(meta, schema_version=SCHEMA_VERSION)
        meta_path = self.directory / META
        if meta_path.exists():  # resuming: keep the first start, note the resumption
            previous = json.loads(meta_path.read_text())
            self.meta = dict(previous, resumed=previous.get("resumed", []) + [meta.get("start_time")])
        write_json_atomic(meta_path, self.meta)
        rows_path = self.directory / ROWS
        _drop_partial_line(rows_path)
        _drop_partial_line(self.directory / SAMPLES)
        new = not rows_path.exists() or rows_path.stat().st_size == 0
        self._rows = open(rows_path, "a", newline="")
        self._samples = open(self.directory / SAMPLES, "a")
        if new:
            self._write(self._rows, ",".join(COLUMNS) + "\r\n")

    @staticmethod
    def _write(handle, text: str) -> None:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())

    def append(self, row: dict, samples_s=None) -> None:
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown result columns: {sorted(unknown)}")
        if samples_s is not None and len(samples_s):
            self._write(self._samples, json.dumps(
                {"case_id": row["case_id"], "samples_s": [float(s) for s in samples_s]}) + "\n")
        buffer = io.StringIO()
        csv.writer(buffer).writerow([_format(row.get(column)) for column in COLUMNS])
        self._write(self._rows, buffer.getvalue())

    def update_meta(self, **fields) -> None:
        self.meta.update(fields)
        write_json_atomic(self.directory / META, self.meta)

    def close(self) -> None:
        self._rows.close()
        self._samples.close()


def _drop_partial_line(path: Path) -> None:
    """Cuts a trailing line that lacks its newline (a write killed half-way)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    with open(path, "r+b") as handle:
        handle.truncate(data.rfind(b"\n") + 1)


def read_meta(directory: Path) -> dict:
    path = Path(directory) / META
    if not Path(directory).is_dir():
        raise ResultError(f"{directory}: not a result directory (no such directory)")
    if not path.exists():
        raise ResultError(f"{path}: missing; not a result directory")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ResultError(f"{path}: line {error.lineno}: malformed JSON ({error.msg})") from None
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultError(f"{path}: schema_version {version!r}, this suite reads {SCHEMA_VERSION}")
    return meta


def read_rows(directory: Path) -> pd.DataFrame:
    """Rows as a DataFrame; a malformed line is an error naming file and line."""
    path = Path(directory) / ROWS
    if not path.exists():
        raise ResultError(f"{path}: missing")
    with open(path, newline="") as handle:
        text = handle.read()
    complete = text if text.endswith("\n") or not text else text[: text.rfind("\n") + 1]
    if complete != text:
        warnings.warn(f"{path}: ignoring an unfinished last line (a case cut off mid-write)")
    records = []
    reader = csv.reader(io.StringIO(complete, newline=""))
    header = next(reader, None)
    if header is None:
        return pd.DataFrame(columns=COLUMNS)
    missing = [column for column in COLUMNS if column not in header]
    if missing:
        raise ResultError(f"{path}: line 1: header lacks {', '.join(missing)}")
    for fields in reader:
        line = reader.line_num
        if len(fields) != len(header):
            raise ResultError(f"{path}: line {line}: expected {len(header)} fields, found {len(fields)}")
        record = dict(zip(header, fields))
        if record["status"] not in STATUSES:
            raise ResultError(f"{path}: line {line}: unknown status {record['status']!r}")
        for column in NUMERIC:
            try:
                record[column] = float(record[column]) if record[column] != "" else math.nan
            except ValueError:
                raise ResultError(f"{path}: line {line}: {column} is not a number: {record[column]!r}") from None
        try:
            json.loads(record["params"])
        except json.JSONDecodeError:
            raise ResultError(f"{path}: line {line}: params is not JSON: {record['params']!r}") from None
        records.append(record)
    frame = pd.DataFrame.from_records(records, columns=list(header))
    return frame


def read_samples(directory: Path) -> dict[str, list[float]]:
    path = Path(directory) / SAMPLES
    samples: dict[str, list[float]] = {}
    if not path.exists():
        return samples
    with open(path) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.endswith("\n"):
                break  # cut off mid-write
            try:
                record = json.loads(line)
                samples[record["case_id"]] = record["samples_s"]
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ResultError(f"{path}: line {number}: malformed samples record") from None
    return samples


def read_run(directory) -> tuple[dict, pd.DataFrame, dict]:
    directory = Path(directory)
    return read_meta(directory), read_rows(directory), read_samples(directory)


def find_runs(root) -> list[Path]:
    """Every result directory under ``root`` (itself included), oldest first."""
    root = Path(root)
    if not root.exists():
        raise ResultError(f"{root}: no such directory")
    found = [path.parent for path in root.rglob(META)]
    return sorted(found, key=lambda path: (read_meta(path).get("start_time", ""), str(path)))
