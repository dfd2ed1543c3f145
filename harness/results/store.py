"""Result directories (docs/SPEC.md §4): ``meta.json``, ``rows.csv``, ``samples.jsonl``.

Written so that a run killed at any moment leaves every finished case
readable: the metadata is written first (atomically, by rename), and each case
appends its samples line and then its row, each as one write, flushed and
fsynced. A row is the mark that a case finished; a last line without its
newline is a case cut off mid-write and is ignored (``--resume`` redoes it).
One process writes a directory at a time: the writer holds an exclusive lock
on ``DIR/.lock`` while it is open, and a second writer is refused naming the
holder's pid. ``--resume`` first reads the run back (a damaged file is an
error naming it), and drops samples of a case whose row never came.

The schema survives change, as asv's does: ``meta.json`` carries
``schema_version``, and each version has its migration step
(``update_to_N``, in ``MIGRATIONS``) that brings a run of the version before
up to it when it is read, so old committed runs read as new ones. Reading
needs only the key columns, fills a missing optional column with its empty
value and keeps columns it does not know; and an operator can store
measurements of its own in the free-form JSON column ``extra``. Adding a
column is one entry in ``COLUMN_SPECS`` (a metric: one ``Metric`` in its
family, harness/results/metrics.py) naming a new schema version, which
``SCHEMA_VERSION`` becomes: a step that only adds columns is derived
(``_add_columns``); one that changes more is written out (``update_to_3``).
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import warnings
from pathlib import Path

import pandas as pd

from harness.base.errors import ResultError, ResultWarning
from harness.results import floors
from harness.results.metrics import COUNTS, TIMING
from impls.backends import LEGACY_THREAD_KEYS
from impls.status import STATUSES

META, ROWS, SAMPLES, LOCK = "meta.json", "rows.csv", "samples.jsonl", ".lock"
# The case being measured, written before it starts and removed once its row is
# written: what a run that died without a word (a segfault without --isolate,
# kill -9) was doing, for --resume to treat with care.
IN_FLIGHT = "in-flight.json"
PROBE = ".write-probe-"
# What `make gpu` records of its steps (the check, the CUDA tests, the sweep, the report), beside
# the run it makes: a folder a new run may find in its directory (harness/measuring/gpu_steps.py
# writes and reads it; plan.py estimates from it).
STEPS = "steps"
# Room kept while a run writes (sixteen times a typical meta.json), given back when the disk
# fills, so that meta.json can still say the run stopped, and why (RunWriter.free_reserve).
RESERVE, RESERVE_BYTES = ".reserve", 64 << 10

# A row cannot be read without these.
KEY_COLUMNS = ("run_id", "case_id", "op", "strategy", "device", "dtype", "params", "status")
# (name, kind, schema version that added it) of every column this version
# writes, in file order; kind is "text" or "number" and says what an absent
# value reads as ("" or NaN).
COLUMN_SPECS = (
    ("run_id", "text", 1), ("case_id", "text", 1), ("op", "text", 1), ("strategy", "text", 1),
    ("backend", "text", 1), ("device", "text", 1), ("dtype", "text", 1), ("params", "text", 1),
    ("mode", "text", 6),  # docs/SPEC.md §1.5: forward, backward or forward+backward
    ("layout", "text", 11),  # docs/SPEC.md §2: the 4-D inputs' memory order, contiguous or channels_last
    ("status", "text", 1), ("message", "text", 1),
    *TIMING.columns(),  # the timing statistics (metrics.TIMING)
    ("bytes", "number", 1), ("gbps", "number", 1), ("ceiling_gbps", "number", 1), ("floor_s", "number", 1),
    ("pct_of_ceiling", "number", 1),
    # CPU: the floor with fresh outputs' first-touch cost (stats.fresh_floor_s) and the median's % of it
    ("fresh_floor_s", "number", 5), ("pct_of_fresh_floor", "number", 5),
    # The floor by size (harness/results/floors.py): the bytes written, the read and write rates
    # it used (interpolated on the machine's curves), the write curve they came from, the floor
    # and the median's % of it. The rates are the row's own: its floor recomputes from the row.
    ("bytes_written", "number", 8), ("read_gbps_used", "number", 8), ("write_gbps_used", "number", 8),
    ("floor_write_curve", "text", 8), ("floor_by_size_s", "number", 8), ("pct_of_floor", "number", 8),
    ("max_abs_err", "number", 1), ("rel_err", "number", 1),
    ("peak_mem_bytes", "number", 1), ("setup_s", "number", 1), ("source", "text", 1),
    ("host_s", "number", 2),  # median host cost of one call, without synchronising
    ("xcheck_s", "number", 2),  # an independent timer's median (CUDA: triton.testing.do_bench)
    ("load_avg", "number", 2),  # the machine's 1-minute load average when the case finished
    ("extra", "text", 2),  # free-form JSON object: an operator's or backend's own measurements
    ("slow_start", "number", 2),  # leading samples dropped as a slow start (harness/measuring/timing.py)
    # SPEC 3 "Rounds": the median of each round's samples, in round order, as a JSON list
    # (stats.round_medians_json); an older run's is empty (stats.round_medians reads it as none)
    ("round_medians_s", "text", 7),
    # the median round's IQR, scaled to the median: the steadiness the unstable mark reads (stats.within_round_iqr_s)
    ("within_round_iqr_s", "number", 9),
    # SPEC 3 "Racing" (harness/results/racing.py): the row's decision in its point's race (faster,
    # equivalent, undecided or slower), the round it left in (or the last it ran), the strategy it
    # was judged against, and the point's round-to-round noise the rule judged by. An older run's
    # are empty: it keeps the rule it was judged by (harness/judging/analysis.py, rule_basis).
    ("decision", "text", 10), ("decision_round", "number", 10), ("decided_against", "text", 10),
    ("round_noise", "number", 10), ("equivalence", "number", 10),
    # Last, so that a metric added to COUNTS is appended (test_metrics: older columns keep their place).
    *COUNTS.columns(),  # per call, from `run --instrument callgrind` (metrics.COUNTS); a timed run leaves them empty
)
COLUMN_KINDS = tuple((name, kind) for name, kind, _ in COLUMN_SPECS)
COLUMNS = tuple(name for name, _ in COLUMN_KINDS)
NUMERIC = tuple(name for name, kind in COLUMN_KINDS if kind == "number")
# The columns each schema version after the first added (none, for a version whose
# step changed something else: its step is written out in MIGRATIONS).
COLUMNS_ADDED = {version: tuple(name for name, _, added in COLUMN_SPECS if added == version)
                 for version in range(2, max(added for _, _, added in COLUMN_SPECS) + 1)}
# This schema: the newest version a column names (so far every version added
# columns; one that changed only the metadata would have to raise it by hand).
SCHEMA_VERSION = max(COLUMNS_ADDED)


# ------------------------------------------------------------------ migrations
def _add_columns(version: int):
    """The migration step to a schema ``version`` that only added columns:
    a run before them did not measure them (empty)."""

    added = COLUMNS_ADDED[version]

    def update(meta: dict, rows: pd.DataFrame | None):
        return meta, _with_columns(rows, added)

    update.__name__ = update.__qualname__ = f"update_to_{version}"
    update.__doc__ = f"Schema {version} added {', '.join(added) or 'no column'}: a run before them did not " \
                     f"measure them (empty)."
    return update


def update_to_3(meta: dict, rows: pd.DataFrame | None):
    """Schema 3 keys ``threads`` by backend (the older ``blas`` is numpy's),
    records each backend's version text (``backend_versions``: an older run's
    package versions, for the backends then known), and adds the q1_s, q3_s,
    p10_s and max_s columns (empty: the run did not store them)."""
    threads = meta.get("threads")
    if isinstance(threads, dict):
        meta["threads"] = {LEGACY_THREAD_KEYS.get(key, key): value for key, value in threads.items()}
    versions = meta.get("versions")
    if "backend_versions" not in meta and isinstance(versions, dict):
        # Frozen: the backends a schema-3 run could have recorded, not today's registry.
        meta["backend_versions"] = {name: versions[name] for name in ("numpy", "torch", "triton", "numba",
                                                                      "pytensor") if versions.get(name)}
    return meta, _with_columns(rows, COLUMNS_ADDED[3])


def update_to_6(meta: dict, rows: pd.DataFrame | None):
    """Schema 6 adds ``mode`` (docs/SPEC.md §1.5): every case of an older run timed the forward."""
    if rows is not None:
        rows["mode"] = "forward"
    return meta, rows


def update_to_11(meta: dict, rows: pd.DataFrame | None):
    """Schema 11 adds ``layout`` (docs/SPEC.md §2): every case of an older run was timed on contiguous
    inputs (its check also fed channels-last ones; its timing never did)."""
    if rows is not None:
        rows["layout"] = "contiguous"
    return meta, rows


# Each version's step from the one before: written out where it does more than add columns.
MIGRATIONS = {version: {3: update_to_3, 6: update_to_6, 11: update_to_11}.get(version) or _add_columns(version)
              for version in range(2, SCHEMA_VERSION + 1)}


def _with_columns(rows: pd.DataFrame | None, columns) -> pd.DataFrame | None:
    if rows is not None:
        for column in columns:
            if column not in rows.columns:
                rows[column] = math.nan if column in NUMERIC else ""
    return rows


def migrate(meta: dict, rows: pd.DataFrame | None = None):
    """A run as this schema has it: each step from its version up, in turn."""
    version = meta.get("schema_version", 1)
    # What the run was written as, for what depends on it beyond columns (the
    # check's rules a run was held to: harness/measuring/check.py).
    meta.setdefault("schema_written", version)
    for step in range(version + 1, SCHEMA_VERSION + 1):
        meta, rows = MIGRATIONS[step](meta, rows)
        meta["schema_version"] = step
    return meta, rows


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
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str) if value else ""
    return str(value)


def describe_os_error(error: OSError, path) -> str:
    reason = {errno.ENOSPC: "no space left on the device", errno.EROFS: "read-only file system",
              errno.EACCES: "permission denied", errno.ENOTDIR: "a path component is a file, not a directory",
              errno.EEXIST: "exists and is not a directory", errno.EDQUOT: "disk quota exceeded"}
    return reason.get(error.errno, error.strerror or str(error))


def make_dir(directory) -> Path:
    """``directory``, created if missing; one line naming it when it cannot be."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise ResultError(f"{directory}: exists and is not a directory")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ResultError(f"{directory}: cannot create the output directory ({describe_os_error(error, directory)})") \
            from None
    return directory


def writable_dir(directory: Path, what: str = "results") -> Path:
    """``directory``, created if missing, once a probe file could be written
    and fsynced there (and removed): an output that cannot be written is one
    line naming it and why, before any work. For every command's ``-o``."""
    directory = make_dir(directory)
    probe = directory / f"{PROBE}{os.getpid()}"  # one per process: two runs started together see neither
    try:
        with open(probe, "w") as handle:
            handle.write("x" * 4096)
            handle.flush()
            os.fsync(handle.fileno())
    except OSError as error:
        raise ResultError(f"{directory}: cannot write {what} there ({describe_os_error(error, directory)})") \
            from None
    finally:
        try:
            probe.unlink()
        except OSError:
            pass
    return directory


def prepare_output_dir(directory: Path, resuming: bool = False) -> Path:
    """Makes sure a run can write ``directory`` before anything is measured
    (``writable_dir``). A new run only writes into an empty directory;
    ``resuming`` one must hold a run that reads back, and nobody may be
    writing it (the holder's pid is named)."""
    directory = make_dir(directory)
    if resuming:
        holder = lock_holder(directory)
        if holder is not None:
            raise ResultError(_busy(directory, holder))
        # Appending to a run that cannot be read back would bury the damage under new rows.
        if not nothing_written(directory):
            read_rows(directory)
            read_samples(directory)
    else:
        # The lock, write probes, and a first metadata write cut short are no run.
        present = [entry.name for entry in directory.iterdir()
                   if entry.name not in (LOCK, META + ".tmp", STEPS) and not entry.name.startswith(PROBE)]
        # A writer takes the lock before it writes anything: whoever is writing is named.
        holder = lock_holder(directory) if present else None
        if holder is not None:
            raise ResultError(_busy(directory, holder))
        if (directory / META).exists():
            raise ResultError(f"{directory}: already holds a run; use --resume {directory} or another -o")
        if present:
            raise ResultError(f"{directory}: not empty ({', '.join(sorted(present)[:3])}"
                              f"{', ...' if len(present) > 3 else ''}) and holds no run to resume; "
                              f"a run writes only into an empty directory")
    return writable_dir(directory)


def _busy(directory, holder: str) -> str:
    return (f"{directory}: another scatterbench process (pid {holder}) is writing this directory; "
            f"wait for it or use another -o")


def lock_holder(directory: Path) -> str | None:
    """The pid of the process holding ``DIR/.lock``, or None when nobody holds
    it. Looks the lock up in /proc/locks instead of trying to take it (a probe
    that took the lock, even briefly, could make the real writer fail)."""
    path = Path(directory) / LOCK
    try:
        info = path.stat()
        with open("/proc/locks") as handle:
            table = handle.read()
    except OSError:  # no lock file, or not Linux: the writer's own lock attempt decides
        return None
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line has "->" after the number
        if len(fields) < 6 or fields[1] != "FLOCK":
            continue
        try:
            major, minor, inode = fields[5].split(":")
            device = os.makedev(int(major, 16), int(minor, 16))
        except ValueError:
            continue
        if int(inode) == info.st_ino and device == info.st_dev:
            try:
                written = path.read_text().strip()
            except OSError:
                written = ""
            return written if written.isdigit() else fields[4]
    return None


class DirectoryLock:
    """An exclusive ``flock`` on ``DIR/.lock`` holding the writer's pid; the
    kernel drops it when the process dies, however it dies."""

    def __init__(self, directory: Path):
        import fcntl

        self.path = Path(directory) / LOCK
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            # The holder writes its pid just after it takes the lock; /proc/locks knows it before.
            holder = self.handle.read().strip() or lock_holder(directory) or "unknown"
            self.handle.close()
            raise ResultError(_busy(directory, holder)) from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(str(os.getpid()))
        self.handle.flush()

    def release(self) -> None:
        if not self.handle.closed:
            self.handle.close()


class RunWriter:
    """Appends finished cases to a result directory, holding its lock."""

    def __init__(self, directory: Path, meta: dict):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.lock = DirectoryLock(self.directory)
        try:
            self._open(meta)
        except BaseException as error:
            if not isinstance(error, Exception) and hasattr(self, "meta"):
                # Ctrl-C or SIGTERM after the metadata was written, before the caller holds
                # this writer to mark it: say so here, or the run would read as still starting.
                self._mark_interrupted(getattr(error, "signal_name", None) or "SIGINT")
            self.free_reserve()
            self.lock.release()
            raise

    def _mark_interrupted(self, by: str) -> None:
        try:
            if (self.directory / META).exists() and read_meta(self.directory).get("run_id") == self.meta.get("run_id"):
                self.update_meta(status="interrupted", interrupted_by=by)
        except (OSError, ResultError):
            pass

    def _open(self, meta: dict) -> None:
        self.meta = dict(meta, schema_version=SCHEMA_VERSION)
        meta_path = self.directory / META
        if meta_path.exists():  # resuming: keep the first start, note the resumption
            previous = read_meta(self.directory)
            if meta.get("run_id") and meta["run_id"] != previous["run_id"]:
                # Another run got here first (it started after this one checked the directory).
                raise ResultError(f"{self.directory}: already holds run {previous['run_id']}; "
                                  f"use --resume {self.directory} or another -o")
            self.meta = dict(previous, resumed=previous.get("resumed", []) + [meta.get("start_time")])
            # The stop that made this resumption needed is over: this session's own ending is recorded.
            self.meta.pop("interrupted_by", None)
            for key in ("status", "interrupted_by"):
                if key in meta:
                    self.meta[key] = meta[key]
        write_json_atomic(meta_path, self.meta)
        rows_path = self.directory / ROWS
        _drop_partial_line(rows_path)
        _drop_partial_line(self.directory / SAMPLES)
        _drop_orphan_samples(rows_path, self.directory / SAMPLES)
        new = not rows_path.exists() or rows_path.stat().st_size == 0
        # A run resumed from an older schema keeps its file's columns.
        self.columns = COLUMNS if new else _header(rows_path)
        self._rows = open(rows_path, "a", newline="")
        self._samples = open(self.directory / SAMPLES, "a")
        self.written = 0 if new else max(len(_data_lines(rows_path)), 0)
        if new:
            self._write(self._rows, ",".join(COLUMNS) + "\r\n")
        with open(self.directory / RESERVE, "wb") as reserve:
            self._write(reserve, bytes(RESERVE_BYTES))

    @staticmethod
    def _write(handle, text: str) -> None:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())

    def append(self, row: dict, samples_s=None, round_sizes=None) -> None:
        """One finished case: its samples line, then its row. ``round_sizes``:
        how many of ``samples_s``, in order, each round took (SPEC 3 "Rounds"),
        stored beside them; readers of the samples alone ignore it."""
        unknown = set(row) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown result columns: {sorted(unknown)}")
        if samples_s is not None and len(samples_s):
            record = {"case_id": row["case_id"], "samples_s": [float(s) for s in samples_s]}
            if round_sizes:
                record["round_sizes"] = [int(n) for n in round_sizes]
            self._write(self._samples, json.dumps(record) + "\n")
        buffer = io.StringIO()
        csv.writer(buffer).writerow([_format(row.get(column)) for column in self.columns])
        self._write(self._rows, buffer.getvalue())
        self.written += 1
        self.end_case()

    def begin_case(self, case: dict) -> None:
        """Records ``case`` (its case_id and what identifies its strategy) as
        in flight, before anything of it runs; its row clears it."""
        write_json_atomic(self.directory / IN_FLIGHT, dict(case, pid=os.getpid()))

    def end_case(self) -> None:
        """No case in flight: its row is written, or the run stopped in an
        orderly way (Ctrl-C, SIGTERM, a full disk) rather than crashing."""
        try:
            (self.directory / IN_FLIGHT).unlink()
        except FileNotFoundError:
            pass

    def update_meta(self, **fields) -> None:
        self.meta.update(fields)
        write_json_atomic(self.directory / META, self.meta)

    def free_reserve(self) -> None:
        """Gives back the room kept at open (``RESERVE``): the disk is full,
        and what is left to write is the metadata saying so."""
        try:
            (self.directory / RESERVE).unlink()
        except OSError:
            pass

    def close(self) -> None:
        for handle in (getattr(self, "_rows", None), getattr(self, "_samples", None)):
            if handle is not None and not handle.closed:
                try:
                    handle.close()
                except OSError:  # a full disk can fail the final flush; every row was fsynced already
                    pass
        if hasattr(self, "meta"):
            try:  # the run's small summary for the dashboard (harness/results/summary.py), while the lock is held
                write_summary(self.directory)
            except (OSError, ResultError, ValueError):
                pass  # a full disk, say: the dashboard rebuilds it from the raw results
        self.free_reserve()
        self.lock.release()


def read_in_flight(directory) -> dict | None:
    """The case a run was measuring when it died, or None (none recorded, or
    the record is unreadable: a crash while writing it)."""
    try:
        record = json.loads((Path(directory) / IN_FLIGHT).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("case_id"), str) else None


def _header(path: Path) -> tuple[str, ...]:
    with open(path, newline="", encoding="utf-8", errors="replace") as handle:
        return tuple(next(csv.reader(handle), COLUMNS))


def _data_lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", errors="replace").splitlines()[1:]


def _drop_partial_line(path: Path) -> None:
    """Cuts a trailing line that lacks its newline (a write killed half-way)."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    with open(path, "r+b") as handle:
        handle.truncate(data.rfind(b"\n") + 1)


def _drop_orphan_samples(rows_path: Path, samples_path: Path) -> None:
    """Drops samples records of cases that have no row: a run stopped between
    a case's two writes (killed, or the disk filled up). ``--resume`` runs
    that case again, and its new record must be the only one."""
    if not rows_path.exists() or not samples_path.exists() or samples_path.stat().st_size == 0:
        return
    try:
        text = rows_path.read_bytes().decode("utf-8")
        reader = csv.reader(io.StringIO(text, newline=""))
        header = next(reader, [])
        index = header.index("case_id")
        done = {fields[index] for fields in reader if len(fields) == len(header)}
    except (UnicodeDecodeError, ValueError, csv.Error):
        return  # a damaged file is reported by whoever reads it, not mended here
    lines = samples_path.read_bytes().splitlines(keepends=True)
    kept = []
    for line in lines:
        try:
            case_id = json.loads(line)["case_id"]
        except (ValueError, KeyError, TypeError):
            kept.append(line)
            continue
        if case_id in done:
            kept.append(line)
    if len(kept) == len(lines):
        return
    tmp = samples_path.with_name(samples_path.name + ".tmp")
    try:
        with open(tmp, "wb") as handle:
            handle.write(b"".join(kept))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, samples_path)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


def _read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise ResultError(f"{path}: line {line}: not UTF-8 text (byte 0x{path.read_bytes()[error.start]:02x}); "
                          f"the file is corrupted") from None
    except OSError as error:
        raise ResultError(f"{path}: cannot read ({describe_os_error(error, path)})") from None


def read_meta(directory: Path) -> dict:
    """``meta.json`` migrated to this schema (``migrate``); a damaged file is
    one line naming it."""
    return migrate(_read_meta_as_written(directory))[0]


def _read_meta_as_written(directory: Path) -> dict:
    path = Path(directory) / META
    if not Path(directory).is_dir():
        raise ResultError(f"{directory}: not a result directory (no such directory)")
    if not path.exists():
        raise ResultError(f"{path}: missing; not a result directory")
    try:
        meta = json.loads(_read_text(path))
    except json.JSONDecodeError as error:
        raise ResultError(f"{path}: line {error.lineno}: malformed JSON ({error.msg})") from None
    if not isinstance(meta, dict):
        raise ResultError(f"{path}: expected a JSON object, found a {type(meta).__name__}")
    version = meta.get("schema_version")
    if not isinstance(version, int) or not 1 <= version <= SCHEMA_VERSION:
        raise ResultError(f"{path}: schema_version {version!r}, this suite reads 1 to {SCHEMA_VERSION}")
    if not isinstance(meta.get("run_id"), str) or not meta["run_id"]:
        raise ResultError(f"{path}: run_id is missing")
    return meta


def read_run_meta(directory: Path):
    """``meta.json`` as the typed record (harness/results/runmeta.py)."""
    from harness.results.runmeta import RunMeta

    return RunMeta.of(read_meta(directory))


def nothing_written(directory: Path) -> bool:
    """Whether a run stopped between its ``meta.json`` and its first write
    (a signal as the writer opened): neither rows nor samples exist yet, so
    none of its cases is done. A run missing one of the two is damaged, not this."""
    return not (Path(directory) / ROWS).exists() and not (Path(directory) / SAMPLES).exists()


def resumed_rows(directory: Path) -> pd.DataFrame:
    """The rows a resumed run has done: ``read_rows``, or none where nothing was written yet."""
    return pd.DataFrame(columns=COLUMNS) if nothing_written(directory) else read_rows(directory)


def read_rows(directory: Path) -> pd.DataFrame:
    """Rows as a DataFrame with every column of this schema (missing optional
    ones filled); a malformed line is an error naming file and line."""
    path = Path(directory) / ROWS
    if not path.exists():
        raise ResultError(f"{path}: missing")
    text = _read_text(path)
    complete = text if text.endswith("\n") or not text else text[: text.rfind("\n") + 1]
    if complete != text:
        warnings.warn(f"{path}: ignoring an unfinished last line (a case cut off mid-write)", ResultWarning)
    records = []
    reader = csv.reader(io.StringIO(complete, newline=""))
    header = next(reader, None)
    if header is None:
        return pd.DataFrame(columns=COLUMNS)
    missing = [column for column in KEY_COLUMNS if column not in header]
    if missing:
        raise ResultError(f"{path}: line 1: header lacks {', '.join(missing)}")
    seen: dict[str, int] = {}
    for fields in reader:
        line = reader.line_num
        if len(fields) != len(header):
            raise ResultError(f"{path}: line {line}: expected {len(header)} fields, found {len(fields)}")
        record = dict(zip(header, fields))
        if record["status"] not in STATUSES:
            raise ResultError(f"{path}: line {line}: unknown status {record['status']!r}")
        for column in NUMERIC:
            value = record.get(column, "")
            try:
                record[column] = float(value) if value != "" else math.nan
            except ValueError:
                raise ResultError(f"{path}: line {line}: {column} is not a number: {value!r}") from None
        for column in ("params", "extra"):
            value = record.get(column, "")
            try:
                parsed = json.loads(value) if value or column == "params" else {}
            except json.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                raise ResultError(f"{path}: line {line}: {column} is not a JSON object: {value!r}")
        case_id = record["case_id"]
        if case_id in seen:
            raise ResultError(f"{path}: line {line}: duplicate case {case_id} (first at line {seen[case_id]})")
        seen[case_id] = line
        records.append(record)
    ordered = list(COLUMNS) + [column for column in header if column not in COLUMNS]
    frame = pd.DataFrame.from_records(records, columns=ordered)
    for column in COLUMNS:
        if column not in header:
            frame[column] = math.nan if column in NUMERIC else ""
    return frame


def read_samples(directory: Path) -> dict[str, list[float]]:
    """Raw samples per case. A record that cannot be used (not a list of
    numbers, empty, or not one finite number) is skipped with a warning that
    names file and line: that case then has no samples and is never compared
    as if it had."""
    path = Path(directory) / SAMPLES
    samples: dict[str, list[float]] = {}
    if not path.exists():
        return samples
    text = _read_text(path)
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if not line.endswith("\n"):
            break  # cut off mid-write
        try:
            record = json.loads(line)
            case_id, values = record["case_id"], record["samples_s"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ResultError(f"{path}: line {number}: malformed samples record") from None
        if not isinstance(case_id, str):
            raise ResultError(f"{path}: line {number}: case_id is {type(case_id).__name__}, not a string")
        problem = None
        if not isinstance(values, list) or not values:
            problem = "samples_s is not a non-empty list"
        elif not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            problem = "samples_s holds something other than numbers"
        elif not all(math.isfinite(v) and v >= 0 for v in values):
            problem = "samples_s holds NaN, infinite or negative times"
        if problem:
            warnings.warn(f"{path}: line {number}: {problem}; case {case_id} has no usable samples", ResultWarning)
            samples.pop(case_id, None)
            continue
        samples[case_id] = [float(v) for v in values]
    return samples


def read_run(directory) -> tuple[dict, pd.DataFrame, dict]:
    """Metadata, rows and samples, migrated together to this schema; what a
    run from before a column can be given from what it measured is derived
    (``derive_older``)."""
    directory = Path(directory)
    meta, rows = migrate(_read_meta_as_written(directory), read_rows(directory))
    samples = read_samples(directory)
    return meta, derive_older(meta, rows, samples), samples


# The timing statistics schema 3 added (metrics.TIMING): an older run stored its samples, not these.
_FROM_SAMPLES = tuple(name for name, _, added in TIMING.columns() if added == 3)


def derive_older(meta: dict, rows: pd.DataFrame, samples: dict) -> pd.DataFrame:
    """A run's rows with what derives from its stored figures, and nothing
    they cannot give:

    - an older run's quartiles, 10th percentile and slowest sample (schema
      3) from its samples, by the same ``metrics.TIMING`` (only where the
      samples give the row's own median: samples that are not the row's are
      never mixed in);
    - every CPU row's fresh-output floor (schema 5) from its bytes, ceiling
      and median and the run's ``fresh_write_gbps`` (``stats.fresh_floor``),
      where the row's ceiling is the one meta.json holds for its device (the
      rates were measured together). A row measured under other rates (an
      earlier attempt of a resumed run, another shard) left no record of
      them: its fresh floor is left empty, never computed from rates it was
      not measured with.

    - the floor by size (schema 8) of a row written before each output was
      priced at its own size, priced again from the run's curves
      (``floors.repriced``: the operators that allocate several outputs,
      only rows those curves priced). Otherwise the floor by size needs
      nothing from meta: each row stores the rates it used
      (``floors.recomputed``); a run before schema 8 has none."""
    written = meta.get("schema_written", SCHEMA_VERSION)
    if rows.empty or not isinstance(written, int):
        return rows
    import numpy

    from harness.results import stats

    rows = rows.copy()
    quartiles_missing = rows[list(_FROM_SAMPLES)].isna().all(axis=1) & rows["median_s"].notna() & (written < 3)
    for index in rows.index[quartiles_missing]:
        found = samples.get(rows.at[index, "case_id"])
        if not found:
            continue
        computed = TIMING.compute(numpy.asarray(found, dtype=float))
        if math.isclose(computed["median_s"], rows.at[index, "median_s"], rel_tol=1e-9):
            for name in _FROM_SAMPLES:
                rows.at[index, name] = float(computed[name])
    ceilings = meta.get("ceilings_gbps") if isinstance(meta.get("ceilings_gbps"), dict) else {}
    fresh = stats.best_fresh_write_gbps(meta.get("fresh_write_gbps"))
    cpu = rows.index[rows["device"] == "cpu"]
    fresh_floors, pcts = [], []
    for row in rows.loc[cpu, ["op", "strategy", "params", "dtype", "mode", "bytes", "ceiling_gbps",
                              "median_s"]].itertuples(index=False):
        written = stats.case_bytes_written(row.op, row.strategy, row.params, row.dtype, row.mode or "forward") \
            if row.ceiling_gbps == ceilings.get("cpu") and math.isfinite(fresh) else None
        floor = math.nan if written is None else stats.fresh_floor_s(row.bytes, written, row.ceiling_gbps, fresh)
        fresh_floors.append(floor)
        pcts.append(stats.pct_of_floor(floor, row.median_s))
    rows.loc[cpu, "fresh_floor_s"] = fresh_floors
    rows.loc[cpu, "pct_of_fresh_floor"] = pcts
    return floors.repriced(rows, meta.get(floors.CURVES))


def find_runs(root, start_time=None) -> list[Path]:
    """Every result directory under ``root`` (itself included), oldest first.
    One inside another is part of it, not a run of its own: the shards that
    `launch` merged into their launch's directory would count every case twice.
    ``start_time(path)``, where given, may tell a run's start time (a caller
    that knows it unchanged) and spare reading its metadata; None reads it."""
    root = Path(root)
    if not root.exists():
        raise ResultError(f"{root}: no such directory")
    every = {path.parent for path in root.rglob(META)}
    found = [path for path in every if not every.intersection(path.parents)]

    def started(path):
        known = start_time(path) if start_time else None
        return known if known is not None else read_meta(path).get("start_time", "")

    return sorted(found, key=lambda path: (started(path), str(path)))


def write_summary(directory, known: dict | None = None) -> dict:
    """Writes the run's ``summary.json`` (harness/results/summary.py) from its files,
    and returns it. Warnings about samples are the readers' to give."""
    from harness.results import summary

    directory = Path(directory)
    key = summary.fingerprint(directory, (META, ROWS, SAMPLES), known)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResultWarning)
        found = summary.summarize(*read_run(directory), key)
    summary.write(directory / summary.SUMMARY, found)
    return found


def extra_of(row) -> dict:
    """The ``extra`` column of a row read back, as a dict."""
    value = row.get("extra", "") if hasattr(row, "get") else ""
    if not isinstance(value, str) or not value:
        return {}
    return json.loads(value)
