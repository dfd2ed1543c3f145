"""The CI regression gate (``scatterbench regress BASELINE CONFIG``, run by
``make regress``): quiet under load, still sharp.

1. Run CONFIG, compare it with BASELINE normalised to each operator's
   declared reference strategy (a faster or slower machine cancels out), by
   the one regression rule at a gate factor of 2.0.
2. Noise makes suspects, not verdicts: a case flagged ``regressed`` is
   measured again, with its group's reference strategies beside it, up to
   ``retries`` times, each in a fresh run. It fails the gate only if every
   re-measurement regresses too. A real slowdown reproduces; a burst of load
   from another process rarely hits the same case three times. A case that
   breaks (correct before, failing its check now) fails at once: that is
   deterministic.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import compare, regression, sweep
from harness.config import expand, load_config

DEFAULT_GATE_FACTOR = 2.0


@dataclass
class GateResult:
    table: pd.DataFrame
    failed: bool
    summary: str
    runs: list


def _rerun(config_path: str, config, case_ids: set[str], out_dir: Path) -> Path:
    cases = [case for case in expand(config) if case.case_id in case_ids]
    plan = sweep.RunPlan(str(config_path), config, cases, out_dir, sweep.new_run_id("regress-retry"), False)
    sweep.execute_run(plan, ["scatterbench", "regress", "(retry)"])
    return out_dir


def _with_references(table: pd.DataFrame, suspects: pd.DataFrame) -> set[str]:
    """The suspects and the reference strategies of their case groups."""
    wanted = set(suspects["case_id"])
    for _, suspect in suspects.iterrows():
        references = compare.references_for(suspect["op"], None, True)
        same_group = table[(table["op"] == suspect["op"]) & (table["device"] == suspect["device"])
                           & (table["dtype"] == suspect["dtype"]) & (table["params"] == suspect["params"])]
        wanted |= set(same_group[same_group["strategy"].isin(references)]["case_id"])
    return wanted


def run_gate(baseline, config_path, rule: regression.Rule, output=None, retries: int = 2,
             log=lambda text: None) -> GateResult:
    out_root = Path(output) if output else Path(tempfile.mkdtemp(prefix="scatterbench-regress-"))
    config = load_config(config_path)
    first = out_root / "run"
    plan = sweep.plan_run(str(config_path), output=str(first))
    outcome = sweep.execute_run(plan, ["scatterbench", "regress", str(config_path)])
    if outcome.interrupted:
        raise KeyboardInterrupt
    runs = [first]
    table = compare.compare_dirs(baseline, first, rule, normalise=True).table
    suspects = table[table["verdict"] == regression.REGRESSED]
    for attempt in range(1, retries + 1):
        if suspects.empty:
            break
        log(f"regress: {len(suspects)} suspect(s), re-measuring (attempt {attempt} of {retries}): "
            + ", ".join(f"{s['op']}/{s['strategy']}" for _, s in suspects.iterrows()))
        again = _rerun(str(config_path), config, _with_references(table, suspects),
                       out_root / f"retry-{attempt}")
        runs.append(again)
        retried = compare.compare_dirs(baseline, again, rule, normalise=True).table.set_index("case_id")
        still = [case_id for case_id in suspects["case_id"]
                 if case_id in retried.index and retried.loc[case_id, "verdict"] == regression.REGRESSED]
        cleared = set(suspects["case_id"]) - set(still)
        if cleared:
            table.loc[table["case_id"].isin(cleared), "verdict"] = regression.SAME
        suspects = suspects[suspects["case_id"].isin(still)]
    failing = compare.regressed(table)
    summary = compare.counts_line(table) + f"  (factor {rule.factor:g}, alpha {rule.alpha:g}, retries {retries})"
    if len(failing):
        summary += "\n" + "\n".join(f"FAIL {r['op']}/{r['strategy']} {r['device']} {r['dtype']} "
                                    f"{r['params']}: {r['verdict']}"
                                    + (f" {r['ratio']:.3g}× its reference-normalised median" if r["ratio"] == r["ratio"]
                                       else "")
                                    for _, r in failing.iterrows())
    return GateResult(table, bool(len(failing)), summary, runs)
