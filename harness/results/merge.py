"""``scatterbench merge DIR ... -o OUT``: several runs (the shards of one sweep,
or runs on several machines) combined into one result directory.

Rows keep their own run id; the merged metadata lists every source run. A
case present in more than one input is kept once, from the latest run. Rows
carry no machine or settings of their own, so runs on different hardware or
under different seed, threads or timing settings are refused (their cases
would collapse into one and take the first run's metadata);
report.py and the dashboard take several directories and keep each
machine's rows apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.base.config import measurement_differences
from harness.results import runmeta, store


def merge_runs(dirs, out) -> Path:
    out = Path(out)
    if (out / store.META).exists():
        raise store.ResultError(f"{out}: already holds a run; merge into a new directory")
    runs = sorted((store.read_run(Path(d)) + (Path(d),) for d in dirs), key=lambda run: run[0].get("start_time", ""))
    if not runs:
        raise store.ResultError("merge: no result directories given")
    first_meta, *_, first_dir = runs[0]
    for meta, _rows, _samples, directory in runs[1:]:
        differences = measurement_differences(first_meta.get("config"), meta.get("config"))
        if differences:
            raise store.ResultError(f"merge: {first_dir} and {directory} were measured under different settings "
                                    f"({'; '.join(differences)}); pass both directories to report.py instead")
        if not runmeta.same_machine(first_meta, meta):
            raise store.ResultError(
                f"merge: {first_dir} ({runmeta.machine_label(first_meta)}) and {directory} ({runmeta.machine_label(meta)}) were "
                f"measured on different hardware; pass both directories to report.py or the dashboard instead")
    # Every key of the first run's metadata, whatever the schema has grown to hold.
    meta = dict(runs[0][0])
    meta.pop("resumed", None)
    meta.update(run_id="merged-" + "+".join(m.get("run_id", "?") for m, *_ in runs)[:120],
                merged_from=[{"run_id": m.get("run_id"), "directory": str(d), "machine": m.get("machine"),
                              "git_commit": m.get("git_commit"), "shard": m.get("shard")} for m, _, _, d in runs],
                ceilings_gbps={k: v for m, *_ in runs for k, v in m.get("ceilings_gbps", {}).items()},
                fresh_write_gbps={k: v for m, *_ in runs for k, v in (m.get("fresh_write_gbps") or {}).items()},
                # a device any run measured busy stays flagged: that run's rows have no % of ceiling
                ceiling_busy={k: v for m, *_ in runs for k, v in runmeta.record(m).ceiling_busy.items()},
                ceiling_tries={k: [one.model_dump() for one in v] for m, *_ in runs
                               for k, v in runmeta.record(m).ceiling_tries.items()},
                # every run's plugins, once each: the merged report needs them all
                plugins=list({json.dumps(p, sort_keys=True): p for m, *_ in runs for p in m.get("plugins") or []
                              if isinstance(p, dict)}.values()),
                status="complete")
    kept: dict[str, tuple] = {}
    for _meta, rows, samples, _directory in runs:
        for record in rows.to_dict("records"):
            if record["case_id"] in kept:
                print(f"merge: {record['case_id']} appears twice; keeping the later run's", file=sys.stderr)
            kept[record["case_id"]] = (record, samples.get(record["case_id"]))
    writer = store.RunWriter(out, meta)
    for record, samples in kept.values():
        writer.append({k: v for k, v in record.items() if k in store.COLUMNS}, samples)
    writer.close()
    return out
