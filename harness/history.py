"""Every run under a results root, read from their summaries, and the verdict
on each change between consecutive runs of a case: the dashboard's data.

A case's change is judged between the latest earlier run that measured it
(``base``) and the run (``new``), by the same rule as the CI gate (`gate_rule`:
`compare.compare_frames` normalised to each operator's reference, on 10th
percentiles, past the gate's factor, with its Mann–Whitney test) and, where
both runs counted instructions, by the count rule
(`regression.COUNT_FACTOR`). It is *red* only when that rule fails it and
`regression.unfit_reasons` finds nothing against the pair of runs; a change
the rule fails between runs that were not fit (load, unstable share,
another CPU) is *not judged*, with the reasons; a change of the strategy's
``source`` is marked as such, never called a regression.

The rule needs raw samples; the summaries hold their 10th percentiles. So
every pair is first screened from the summaries with a bound the gate's
normalised ratio can never exceed (a case's ratio over the smallest ratio of
the other strategies of its group: the gate divides by the reference's ratio
or by the geometric mean of the others', never less than that smallest
one), and only the groups the bound cannot clear are judged by the rule
itself, on the raw samples of their two runs (cached by the runs'
fingerprints). A build thus reads raw samples only where a change is large.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import compare, env, regression, store, summary
from harness.gate import DEFAULT_GATE_FACTOR
from impls.status import CORRECT

GROUP = ["op", "device", "dtype", "params"]  # a chart: the strategies of one case of the report
RED, NOT_JUDGED, SOURCE_CHANGED = "red", "not judged", "source changed"
TIME = "time"


def gate_rule(factor: float = DEFAULT_GATE_FACTOR, alpha: float = regression.DEFAULT_ALPHA) -> regression.Rule:
    """The CI gate's rule (`gate.run_gate` without re-measurement, which a
    history cannot do: its screen then keeps the full factor): 10th
    percentiles, past ``factor``, Mann–Whitney p < ``alpha``."""
    return regression.Rule(factor, alpha, "p10")


def gate_table(base_rows, base_samples, new_rows, new_samples, rule: regression.Rule) -> pd.DataFrame:
    """The gate's per-case verdicts on two runs, normalised as the gate normalises."""
    return compare.compare_frames(base_rows, base_samples, new_rows, new_samples, rule, normalise=True)


# ----------------------------------------------------------------- loading
def load_history(root, cache_dir=None, known: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cases, runs): one row per case of every run under ``root`` from the
    runs' summaries (``run`` is the run's position, oldest first), and one
    row per run with its metadata (``meta``), machine and directory.
    ``cache_dir`` and ``known``: as for `summary.load_summary`."""
    directories = store.find_runs(root)
    frames, runs = [], []
    for order, directory in enumerate(directories):
        found = summary.load_summary(directory, cache_dir, known)
        meta = found["meta"]
        runs.append({"run": order, "run_id": str(meta.get("run_id")), "directory": str(directory),
                     "start_time": str(meta.get("start_time") or ""), "commit": str(meta.get("git_commit") or ""),
                     "machine": env.machine_label(meta), "meta": meta, "fingerprint": found["fingerprint"]})
        cases = summary.cases_frame(found)
        if len(cases):
            frames.append(cases.assign(run=order))
    if not frames:
        raise store.ResultError(f"{root}: no result rows found under it")
    cases = pd.concat(frames, ignore_index=True)
    runs = pd.DataFrame(runs)
    cases["machine"] = cases["run"].map(runs["machine"])
    return cases, runs


# ----------------------------------------------------------------- judging
@dataclass
class Judgement:
    changes: pd.DataFrame  # one row per case and consecutive pair: base and new values, ratio, mark, reasons
    pairs: pd.DataFrame  # one row per pair of runs (base, run): reasons it is not fit, per metric
    verdict_cache: dict  # the raw-sample verdicts this judgement used, to keep for the next


def _typical(frame: pd.DataFrame, prefix: str = "") -> pd.Series:
    """The gate's statistic from a summary: the 10th percentile of the
    samples, or the median where the case has no samples (as compare does)."""
    p10, median = frame[f"{prefix}p10_s"], frame[f"{prefix}median_s"]
    return p10.where(p10.notna(), median)


def consecutive(cases: pd.DataFrame) -> pd.DataFrame:
    """Each case's rows with the same case of its latest earlier run
    (``base_*`` columns); the first run of a case has none and is left out."""
    ordered = cases.sort_values(["case_id", "run"], kind="stable")
    base = ordered.groupby("case_id", sort=False).shift(1)
    changes = ordered.join(base.add_prefix("base_"))
    changes = changes[changes["base_run"].notna()].copy()
    changes["base_run"] = changes["base_run"].astype(int)
    return changes


def _pair_reasons(cases: pd.DataFrame, runs: pd.DataFrame, pairs: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    by_run = {run: rows for run, rows in cases.groupby("run", sort=False)}
    metas = runs["meta"]
    for metric in metrics:
        pairs[f"reasons_{metric}"] = [
            regression.unfit_reasons(metas[base], by_run[base], metas[new], by_run[new], metric)
            for base, new in zip(pairs["base_run"], pairs["run"])]
    return pairs


def screen(cases: pd.DataFrame, changes: pd.DataFrame, factor: float) -> pd.DataFrame:
    """The (base_run, run, group) triples the gate's rule might fail: a case
    correct in the base and not now, or one whose ratio over the smallest
    ratio of the other strategies of its group timed in both runs exceeds
    ``factor``. Every case the rule fails is inside them (module docstring)."""
    pairs = changes[["base_run", "run"]].drop_duplicates()
    key = ["case_id"] + GROUP + ["strategy"]
    timed = cases[cases["status"].isin(CORRECT) & (cases["median_s"] > 0)]
    timed = timed.assign(typical=_typical(timed))[["run", "typical"] + key]
    both = (pairs.merge(timed, on="run")
            .merge(timed.rename(columns={"run": "base_run", "typical": "base_typical"}), on=["base_run"] + key))
    both["ratio"] = both["typical"] / both["base_typical"]
    keys = ["base_run", "run"] + GROUP
    both = both.sort_values(keys + ["ratio"], kind="stable")
    rank = both.groupby(keys, sort=False).cumcount()
    lowest = both.groupby(keys, sort=False)["ratio"].transform("first")
    second = both["ratio"].where(rank == 1).groupby([both[k] for k in keys], sort=False).transform("max")
    others = lowest.where(rank > 0, second)  # the smallest ratio among the *other* strategies
    both["bound"] = both["ratio"] / others.fillna(1.0)
    # A hair under the factor: the bound and the rule round differently in the last bit.
    suspects = both[both["bound"] > factor * (1 - 1e-9)][keys]
    broken = changes[changes["base_status"].isin(CORRECT) & ~changes["status"].isin(CORRECT)][keys]
    return pd.concat([suspects, broken]).drop_duplicates()


def _rows(cases: pd.DataFrame, run: int, groups: pd.DataFrame) -> pd.DataFrame:
    mine = cases[cases["run"] == run]
    return mine.merge(groups, on=GROUP)


def exact_verdicts(cases, runs, suspects, rule, known: dict) -> tuple[dict, dict]:
    """{(base_run, run, case_id): (verdict, ratio, p)} by the gate's rule on
    the raw samples, for the cases of the suspect groups, and the cache
    entries that hold them: ``known`` (entries of an earlier build, keyed by
    the two runs' fingerprints and the rule) spares re-reading samples."""
    found, cache = {}, {}
    for (base, new), groups in suspects.groupby(["base_run", "run"], sort=False):
        groups = groups[GROUP].drop_duplicates()
        key = json.dumps([runs.at[base, "fingerprint"], runs.at[new, "fingerprint"],
                          sorted(map(list, groups.itertuples(index=False))), repr(rule)], sort_keys=True)
        if key in known:
            cache[key] = known[key]
        else:
            base_rows, new_rows = _rows(cases, base, groups), _rows(cases, new, groups)
            table = gate_table(base_rows, store.read_samples(Path(runs.at[base, "directory"])),
                               new_rows, store.read_samples(Path(runs.at[new, "directory"])), rule)
            cache[key] = [[row.case_id, row.verdict, _finite(row.ratio), _finite(row.p_value)]
                          for row in table.itertuples(index=False)]
        for case_id, verdict, ratio, p_value in cache[key]:
            found[(base, new, case_id)] = (verdict, ratio, p_value)
    return found, cache


def _finite(value):
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def count_verdicts(changes: pd.DataFrame, metric: str) -> pd.Series:
    """The count rule on each change: past COUNT_FACTOR, no test (counts are
    deterministic), by `regression.timing_change` on the single values."""
    rule = regression.Rule(regression.COUNT_FACTOR)
    verdicts = pd.Series("", index=changes.index)
    both = changes[changes[metric].notna() & changes[f"base_{metric}"].notna()]
    for index, base, new in zip(both.index, both[f"base_{metric}"], both[metric]):
        verdicts[index] = regression.timing_change([base], [new], rule).verdict
    return verdicts


def judge(cases: pd.DataFrame, runs: pd.DataFrame, rule: regression.Rule, cache: dict | None = None) -> Judgement:
    """Every change of every case between consecutive runs, judged (module
    docstring); ``cache``: an earlier judgement's ``verdict_cache``."""
    changes = consecutive(cases)
    metrics = [TIME] + [name for name in regression.COUNT_METRICS if name in cases and cases[name].notna().any()]
    pairs = _pair_reasons(cases, runs, changes[["base_run", "run"]].drop_duplicates().reset_index(drop=True),
                          metrics)
    verdicts, used = exact_verdicts(cases, runs, screen(cases, changes, rule.factor), rule, cache or {})
    exact = [verdicts.get((base, run, case_id), (regression.SAME, None, None))
             for base, run, case_id in zip(changes["base_run"], changes["run"], changes["case_id"])]
    changes["verdict"] = [verdict for verdict, _, _ in exact]
    changes["gate_ratio"] = [ratio for _, ratio, _ in exact]
    changes["p_value"] = [p_value for _, _, p_value in exact]
    changes["ratio"] = changes["median_s"] / changes["base_median_s"]
    changes = changes.merge(pairs, on=["base_run", "run"], how="left").set_index(changes.index)
    changes["source_changed"] = (changes["source"] != changes["base_source"]) & (changes["base_source"] != "") \
        & (changes["source"] != "")
    changes["machine_changed"] = changes[f"reasons_{TIME}"].map(
        lambda reasons: any(reason.startswith("different CPU") for reason in reasons))
    failing = {TIME: changes["verdict"].isin(regression.FAILING)}
    for metric in metrics[1:]:
        changes[f"verdict_{metric}"] = count_verdicts(changes, metric)
        failing[metric] = changes[f"verdict_{metric}"].isin(regression.FAILING)
    _mark(changes, failing)
    return Judgement(changes, pairs, used)


def _mark(changes: pd.DataFrame, failing: dict) -> None:
    """``mark``: red, not judged or source changed, for the changes some rule
    fails; ``metric`` the rule that failed it; ``why`` the reasons."""
    marks, whys, metrics = {}, {}, {}
    any_failing = pd.concat(failing.values(), axis=1).any(axis=1)
    for index in changes.index[any_failing]:
        for metric, fails in failing.items():
            if not fails[index]:
                continue
            reasons = changes.at[index, f"reasons_{metric}"]
            if changes.at[index, "source_changed"]:
                mark, why = SOURCE_CHANGED, f"source: {changes.at[index, 'base_source']} → {changes.at[index, 'source']}"
            elif reasons:
                mark, why = NOT_JUDGED, ", ".join(reasons)
            else:
                mark, why = RED, ""
            if index not in marks or mark == RED:
                marks[index], whys[index], metrics[index] = mark, why, metric
    for column, values in (("mark", marks), ("why", whys), ("metric", metrics)):
        changes[column] = pd.Series(values, index=list(values), dtype=object).reindex(changes.index).fillna("")


def reason_counts(pairs: pd.DataFrame) -> dict[str, int]:
    """How many pairs of runs were not fit to judge on wall time, per kind of reason."""
    counts: dict[str, int] = {}
    for reasons in pairs[f"reasons_{TIME}"]:
        for kind in dict.fromkeys(_reason_kind(reason) for reason in reasons):
            counts[kind] = counts.get(kind, 0) + 1
    return counts


def _reason_kind(reason: str) -> str:
    if reason.startswith("different CPU"):
        return "different CPU"
    if reason.startswith("load not recorded"):
        return "load not recorded"
    if reason.startswith("load"):
        return "load at or above the core count"
    return f"more than {100 * regression.MAX_UNSTABLE_SHARE:.0f} % of the cases unstable"


def unstable_share(cases: pd.DataFrame) -> pd.Series:
    """Per run, the share of its timed cases flagged unstable."""
    timed = cases[cases["status"].isin(CORRECT) & (cases["median_s"] > 0)]
    flagged = timed["flags"].str.contains(summary.UNSTABLE, regex=False)
    return flagged.groupby(timed["run"]).mean()

