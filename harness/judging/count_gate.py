"""The gate on counts (``scatterbench regress ... --counts BASELINE``, run by
``make regress`` beside the wall-time gate): the config counted under
Callgrind (harness/measuring/callgrind.py) and compared with a counts baseline, a case
failing when any of its counts per call (``metrics.COUNTS``: instructions,
estimated cycles) grew by more than 3 % (harness/results/counts.py). Counts are deterministic, so there is nothing
to re-measure and no statistical test: the factor alone decides.

Counts depend on the code and on the tool-and-library versions (valgrind,
python, numpy, torch, numba, glibc), not on the machine (callgrind.py pins
the simulated CPU and caches). So the committed baselines are kept one per
version set (``results/baseline-counts/<versions>``; the dashboard reads
their count columns like any other run's), and the gate takes the
one counted with exactly this machine's versions. Without one, it counts a
baseline here and now from the code of the commit the newest stored baseline
was counted at (``wall_gate.measure_baseline_at``, as the wall-time gate does for
an unknown CPU); where that cannot be done it says why and gates against the
newest stored baseline, naming the versions that differ.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pandas as pd

from harness.base.errors import ResultError
from harness.judging import compare, regression, wall_gate
from harness.measuring import callgrind, sweep
from harness.results import metrics, runmeta, store


def versions_slug(versions: dict) -> str:
    """A version set as a directory name: ``valgrind-3.19.0-python-3.11.7-...``."""
    text = "-".join(f"{name}-{versions.get(name)}" for name in sorted(versions))
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def choose_counts_baseline(path, versions: dict) -> wall_gate.BaselineChoice:
    """The stored counts baseline counted with ``versions``, or else the
    newest, with the commit to count one from (``BaselineChoice.commit``)."""
    path = Path(path)
    if (path / store.META).exists():
        return wall_gate.BaselineChoice(path, None, f"regress: counts baseline {path}")
    runs = [run for run in store.find_runs(path) if run.parent == path]
    if not runs:
        raise ResultError(f"{path}: no counts baseline (meta.json) in it or directly under it: `make baseline`")
    metas = {run: store.read_meta(run) for run in runs}
    for run in reversed(runs):
        if metas[run].get("count_versions") == versions:
            return wall_gate.BaselineChoice(run, None, f"regress: counts baseline {run}, counted with these versions")
    newest = runs[-1]
    differing = ", ".join(runmeta.version_changes(metas[newest].get("count_versions"), versions))
    commit = str(metas[newest].get("git_commit") or "").removesuffix("-dirty")
    if not commit:
        raise ResultError(f"{path}: no counts baseline was counted with these versions ({newest.name} "
                          f"differs, stored → here: {differing}), and {newest / store.META} records no git "
                          f"commit to count one from: `make baseline`")
    return wall_gate.BaselineChoice(newest, commit, (
        f"regress: no counts baseline under {path} was counted with these versions ({newest.name} differs, "
        f"stored → here: {differing}): counting one here from commit {commit[:12]}, which it was counted at. "
        f"`make baseline` "
        f"stores one for these versions"))


def run_count_gate(baseline, config_path, factor: float = regression.DEFAULT_COUNT_FACTOR, output=None,
                   log=lambda text: None) -> wall_gate.GateResult:
    """Counts ``config_path`` and compares it with the counts baseline, on
    every metric of ``metrics.COUNTS``, each with its own table. Where valgrind cannot run, the gate
    is skipped with one line saying why (``GateResult.failed`` False, an
    empty table)."""
    reason = callgrind.unavailable()
    if reason:
        line = f"regress: count gate skipped: {reason}"
        log(line)
        return wall_gate.GateResult(pd.DataFrame(), False, line, [])
    versions = callgrind.count_versions()
    choice = choose_counts_baseline(baseline, versions)
    log(choice.line)
    out_root = Path(output) if output else Path(tempfile.mkdtemp(prefix="scatterbench-counts-"))
    baseline = choice.run
    if choice.commit:
        try:
            baseline = wall_gate.measure_baseline_at(choice.commit, config_path, out_root / "counts-baseline",
                                                extra_args=["--instrument", callgrind.INSTRUMENT])
        except ResultError as error:
            log(f"regress: {error}; gating against {choice.run} instead, counted with other versions: counts "
                f"shift with them")
    plan = sweep.plan_run(str(config_path), output=str(out_root / "counts-run"))
    outcome = callgrind.execute_counting_run(plan, ["scatterbench", "regress", str(config_path), "--counts",
                                                   str(baseline)])
    if outcome.interrupted:
        raise KeyboardInterrupt(outcome.interrupted)
    tables = {name: compare.compare_counts(baseline, plan.out_dir, name, factor) for name in metrics.COUNTS.names}
    headline = tables[metrics.COUNTS.primary.name]
    for warning in headline.warnings:  # about the two runs, the same for every metric
        log(f"regress: {warning}")
    table = pd.concat([found.table for found in tables.values()], ignore_index=True)
    failing = compare.regressed(table)
    by_metric = "; ".join(f"{compare.counts_line(found.table)} by {name}" for name, found in tables.items())
    summary = (f"counts: {by_metric}  (factor {factor:g}, {len(headline.table)} cases)")
    for _, r in failing.iterrows():
        summary += f"\nFAIL {compare.count_verdict_line(r)}"
    return wall_gate.GateResult(table, bool(len(failing)), summary, [plan.out_dir])

