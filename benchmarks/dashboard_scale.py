"""How the dashboard scales with the history: ``python benchmarks/dashboard_scale.py [N ...]``.

Synthesises a nightly history from one real run (by default
results/20261125T024630-vm-default-0507, the default config: 83 cases): N
copies, one a day, each case's samples scaled by its own factor drawn
uniformly from ±5 %, each run's ``summary.json`` written as the store writes
it when a run ends. Then measures ``scatterbench dashboard`` in a child
process, without reports and with those of the newest 10 runs: a cold build
(a new site), and a warm one after one more run was added; peak RSS of the
cold build (``wait4``), the site's size and the history's size on disk.
Prints a Markdown table (docs/DASHBOARD.md's).

Not a timed test: numbers depend on the machine and on what else runs on it
(the load average is printed with them). ``synthesise`` is also what the
dashboard's browser test builds its history with.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

from harness.results import store  # noqa: E402

SOURCE = ROOT / "results" / "20261125T024630-vm-default-0507"
FIRST_DAY = dt.datetime(2027, 1, 1, 2, 0, tzinfo=dt.timezone.utc)
SCALED = ("median_s", "iqr_s", "min_s", "mean_s", "host_s")


def read_source(source: Path = SOURCE, keep=None, max_samples: int | None = None):
    """The run to copy: (meta, rows as records, samples); ``keep`` filters
    the rows, ``max_samples`` keeps the first samples of each case."""
    meta, rows, samples = store.read_run(source)
    records = [row for row in rows.to_dict("records") if keep is None or keep(row)]
    if max_samples:
        samples = {case: values[:max_samples] for case, values in samples.items()}
    return meta, records, samples


def write_run(directory: Path, meta: dict, records: list[dict], samples: dict, columns) -> None:
    """A result directory as the store writes one, without its per-case fsyncs."""
    directory.mkdir(parents=True)
    (directory / store.META).write_text(json.dumps(meta, default=str))
    with open(directory / store.ROWS, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        for record in records:
            writer.writerow([store._format(record.get(column)) for column in columns])
    with open(directory / store.SAMPLES, "w") as handle:
        for record in records:
            values = samples.get(record["case_id"])
            if values:
                handle.write(json.dumps({"case_id": record["case_id"], "samples_s": values}) + "\n")
    store.write_summary(directory)  # what the store's writer does when a run ends


def synthesise(root: Path, count: int, first: int = 0, source=None, jitter: float = 0.05, seed: int = 0,
               plants: dict | None = None, collect: list | None = None) -> list[Path]:
    """Runs ``first`` .. ``first + count - 1`` of a nightly history under
    ``root``: copies of ``source`` ((meta, records, samples), by default
    `read_source()`), one a day, each case's times scaled by a factor drawn
    from 1 ± ``jitter``. ``plants`` maps a run's number to a function
    ``(meta, records, samples) -> None`` that alters that run's copy;
    ``collect``, a list, receives each run's (meta, records, samples)."""
    meta, records, samples = source or read_source()
    columns = list(store.COLUMNS) + sorted({key for record in records for key in record} - set(store.COLUMNS))
    made = []
    for number in range(first, first + count):
        rng = np.random.default_rng([seed, number])
        run_id = f"synthetic-{number:05d}"
        start = FIRST_DAY + dt.timedelta(days=number)
        run_meta = dict(meta, run_id=run_id, start_time=start.isoformat(timespec="seconds"),
                        end_time=(start + dt.timedelta(minutes=2)).isoformat(timespec="seconds"),
                        git_commit=hashlib.sha1(run_id.encode()).hexdigest(), status="complete")
        run_records, run_samples = [], {}
        for record in records:
            factor = float(rng.uniform(1 - jitter, 1 + jitter))
            copy = dict(record, run_id=run_id)
            for column in SCALED:
                if isinstance(copy.get(column), float):
                    copy[column] *= factor
            run_records.append(copy)
            if record["case_id"] in samples:
                run_samples[record["case_id"]] = [value * factor for value in samples[record["case_id"]]]
        if plants and number in plants:
            plants[number](run_meta, run_records, run_samples)
        directory = root / f"{start:%Y%m%dT%H%M%S}-{run_id}"
        write_run(directory, run_meta, run_records, run_samples, columns)
        made.append(directory)
        if collect is not None:
            collect.append((run_meta, run_records, run_samples))
    return made


def measure(command: list[str]) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system: what the wall time would be
    on an idle core) and peak RSS (GB) of a child process."""
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)}: exit {os.waitstatus_to_exitcode(status)}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024 ** 2


def size_gb(path: Path, cache: bool = False) -> float:
    """The size of a tree: without the site's cache (kept for the next build, not published), or of it alone."""
    return sum(item.stat().st_size for item in path.rglob("*")
               if item.is_file() and (".cache" in item.relative_to(path).parts) == cache) / 1e9


def scale_row(count: int, work: Path, reports: int) -> dict:
    """Cold and warm builds of an N-run history, with the newest runs'
    reports (``reports``) and without any."""
    root = work / f"history-{count}"
    synthesise(root, count)
    sites = {"reports": work / f"site-{count}", "bare": work / f"site-{count}-bare"}
    commands = {kind: [sys.executable, "-m", "harness", "dashboard", str(root), "-o", str(site), "--reports",
                       str(reports if kind == "reports" else 0)] for kind, site in sites.items()}
    row = {"runs": count}
    for kind, command in commands.items():
        row[f"cold_{kind}"], row[f"cold_cpu_{kind}"], row[f"rss_{kind}"] = measure(command)
    synthesise(root, 1, first=count)  # the next night's run
    for kind, command in commands.items():
        row[f"warm_{kind}"], row[f"warm_cpu_{kind}"], _ = measure(command)
    row.update(site_mb=size_gb(sites["reports"]) * 1e3, bare_mb=size_gb(sites["bare"]) * 1e3,
               cache_mb=size_gb(sites["bare"], cache=True) * 1e3, history_gb=size_gb(root), load=os.getloadavg()[0])
    shutil.rmtree(root)
    for site in sites.values():
        shutil.rmtree(site)
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("counts", nargs="*", type=int, default=[100, 1000, 3000])
    parser.add_argument("--reports", type=int, default=10, help="the dashboard's --reports (default 10)")
    parser.add_argument("--work", default=None, help="where to build (default: a temporary directory)")
    args = parser.parse_args(argv)
    work = Path(args.work or tempfile.mkdtemp(prefix="dashboard-scale-"))
    print("| runs | cold build: wall (CPU) | warm, one more run: wall (CPU) | peak RSS (cold) | site (its cache) "
          "| history on disk | load (1 min) |")
    print("|---|---|---|---|---|---|---|")
    for count in args.counts:
        r = scale_row(count, work, args.reports)
        for kind, label in (("bare", "no reports"), ("reports", f"reports of the newest {args.reports}")):
            print(f"| {r['runs']:,}, {label} | {r[f'cold_{kind}']:.1f} s ({r[f'cold_cpu_{kind}']:.1f} s) "
                  f"| {r[f'warm_{kind}']:.1f} s ({r[f'warm_cpu_{kind}']:.1f} s) | {r[f'rss_{kind}']:.2f} GB "
                  f"| {r['bare_mb' if kind == 'bare' else 'site_mb']:.1f} MB ({r['cache_mb']:.1f} MB) "
                  f"| {r['history_gb']:.2f} GB "
                  f"| {r['load']:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
