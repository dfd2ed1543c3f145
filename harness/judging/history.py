"""Every run under a results root, read from their summaries, and the verdict
on each change between consecutive runs of a case: the dashboard's data.

A case's change is judged between the latest earlier run on the same
machine that measured it (``base``) and the run (``new``): each machine of a
fleet is its own history (`runmeta.machine_groups`), so runs of different
hardware are never paired, however they interleave. It is judged by the CI
gate's own steps (`gate_table`: its screen, normalised to each operator's
reference on 10th percentiles with the Mann–Whitney test, then its
confirmation against the other strategies of the case,
`wall_gate.partner_change`, on the stored new run instead of a re-measurement)
and, where both runs counted instructions, by the count gate's rule
(`regression.count_verdict`). It is *red* only when that fails it and
`analysis.unfit_reasons` finds nothing against the pair of runs; a change
failed between runs that were not fit (load, a busy ceiling or curve, library
versions for counts) is *not judged*, with the reasons; a change across a
new ``source`` of the strategy is marked as such, never called a
regression.

The gate needs raw samples; the summaries hold their 10th percentiles. So
every pair is first screened from the summaries with a bound the gate's
confirmed change can never exceed (`screen`), and only the groups the bound
cannot clear are judged by the gate's steps themselves, on the raw samples
of their two runs (cached by the runs' fingerprints). A build thus reads
raw samples only where a change is large.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from harness.base.cases import CASE_GROUP, in_group, with_case_columns
from harness.judging import analysis, regression, wall_gate
from harness.judging.wall_gate import DEFAULT_GATE_FACTOR
from harness.results import runmeta, store, summary
from harness.results.metrics import COUNTS
from impls.status import CORRECT

RED, NOT_JUDGED, SOURCE_CHANGED = "red", "not judged", "source changed"
TIME = "time"


def gate_rule(factor: float = DEFAULT_GATE_FACTOR, alpha: float = regression.DEFAULT_ALPHA) -> regression.Rule:
    """The CI gate's rule: 10th percentiles, ``factor`` (its screen takes the
    square root), Mann–Whitney p < ``alpha``."""
    return regression.Rule(factor, alpha, "p10")


def gate_table(base_rows, base_samples, new_rows, new_samples, rule: regression.Rule) -> pd.DataFrame:
    """The CI gate's verdicts on two stored runs, reached as `wall_gate.run_gate`
    reaches them: its screen (`wall_gate.screen`: compare normalised to each
    operator's reference, 10th percentiles, past the square root of the
    factor, with the Mann–Whitney test) picks suspects, and a suspect fails
    only if its time against the other strategies of its case, relative to
    the base run's (`wall_gate.partner_change`, the lower median over them),
    exceeds the factor. The new run's rounds stand in for the gate's
    re-measurement, which a history cannot do (`stored_changes`): red only
    what holds in every round. A case that broke fails at once."""
    table = wall_gate.screen(base_rows, base_samples, new_rows, new_samples, rule)
    for index, suspect in wall_gate.suspects(table).iterrows():
        names = [suspect["strategy"]] + wall_gate.partners(table, suspect)
        wall_gate.settle(table, index, stored_changes(base_rows, base_samples, new_rows, new_samples, suspect, names),
                         rule.factor)
    return table


def stored_changes(base_rows, base_samples, new_rows, new_samples, suspect, names: list[str]) -> list[float]:
    """The suspect's changes against its partners (`wall_gate.partner_change`)
    from two stored runs, one per round of the new run (SPEC 3 "Rounds"),
    each against the base run's median round where both runs stored rounds
    for every strategy named (the rounds all of them ran, at least
    ``analysis.MIN_ROUNDS``), so that a change must hold in every round to
    fail (`wall_gate.settle`); a slow state or a slow minute that fell on one
    round clears it. Without rounds: one change, from the 10th percentiles
    of the runs' samples."""
    base_rounds, new_rounds = _rounds_of(base_rows, suspect, names), _rounds_of(new_rows, suspect, names)
    if base_rounds is not None and new_rounds is not None:
        base = {name: float(np.median(values)) for name, values in base_rounds.items()}
        count = len(new_rounds[names[0]])
        return [wall_gate.partner_change(base, [[new_rounds[name][index] for name in names]], names)
                for index in range(count)]
    now = wall_gate.typical_times(new_rows, new_samples, suspect, names)
    return [wall_gate.partner_change(wall_gate.typical_times(base_rows, base_samples, suspect, names),
                                     [[now[name] for name in names]], names)]


def _rounds_of(rows: pd.DataFrame, suspect, names: list[str]) -> dict | None:
    """Each named strategy's round medians in the suspect's case, over the
    rounds all of them ran (at least MIN_ROUNDS), or None."""
    if "round_medians_s" not in rows:
        return None
    case = in_group(rows, suspect).drop_duplicates("strategy").set_index("strategy")
    found = {name: analysis.round_medians(case.loc[name]) if name in case.index else [] for name in names}
    # A race (SPEC 3 "Racing") runs its strategies for different numbers of rounds: the rounds
    # they all ran are the first ones.
    count = min(len(values) for values in found.values()) if found else 0
    return {name: values[:count] for name, values in found.items()} if count >= analysis.MIN_ROUNDS else None


# ----------------------------------------------------------------- loading
FILES = (store.META, store.ROWS, store.SAMPLES)  # what a run's summary is made from


def load_summary(directory, cache_dir=None, known: dict | None = None) -> dict:
    """The run's current summary: ``DIR/summary.json`` when its fingerprint
    still matches the run's files, else rebuilt from the raw results (the
    only time they are read; their warnings are given) and written back
    beside them, or into ``cache_dir`` where the result directory is
    read-only. ``known``: as for `summary.fingerprint`."""
    directory = Path(directory)
    key = summary.fingerprint(directory, FILES, known)
    name = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:24]
    places = [directory / summary.SUMMARY] + ([Path(cache_dir) / f"{name}.json"] if cache_dir else [])
    for place in places:
        found = summary.read(place, key)
        if found is not None:
            return found
    found = summary.summarize(*store.read_run(directory), key)
    for place in places:
        try:
            place.parent.mkdir(parents=True, exist_ok=True)
            summary.write(place, found)
            break
        except OSError:
            continue  # read-only results: the next place, or rebuilt next time
    return found


def load_history(root, cache_dir=None, known: dict | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cases, runs): one row per case of every run under ``root`` from the
    runs' summaries (``run`` is the run's position, oldest first), and one
    row per run with its metadata (``meta``), machine and directory.
    ``cache_dir``: where the history read last time is kept (a run whose
    files did not change is taken from it, not from its summary), and the
    summaries of read-only runs (``summaries/``); ``known``: as for
    `summary.fingerprint`."""
    previous_cases, previous_runs = _read_frame(cache_dir) if cache_dir else (None, None)
    reusable = _unchanged_runs(previous_runs, known)
    directories = store.find_runs(root, start_time=lambda path: reusable.get(str(path), {}).get("start_time"))
    runs, renumber, columns, total = _read_runs(directories, reusable, cache_dir, known)
    kept = None
    if renumber:
        kept = previous_cases[previous_cases["run"].isin(renumber)].copy()
        kept["run"] = kept["run"].map(renumber)
    cases = _concat([kept, _judged_cases(columns) if total else None])
    if cases is None or not len(cases):
        raise store.ResultError(f"{root}: no result rows found under it")
    cases = with_case_columns(cases.sort_values("run", kind="stable").reset_index(drop=True))
    runs = pd.DataFrame(runs)
    _group_by_machine(cases, runs)
    if cache_dir and (len(reusable) != len(previous_runs or []) or total):
        _write_frame(cases.drop(columns="machine"), runs, cache_dir)
    return cases, runs


def _unchanged_runs(previous_runs: list | None, known: dict | None) -> dict:
    """{directory: its row of the previous history} for the runs whose files did not change."""
    reusable = {}
    for run in previous_runs or []:
        directory = Path(run["directory"])
        if directory.is_dir() and summary.fingerprint(directory, FILES, known) == run["fingerprint"]:
            reusable[run["directory"]] = run
    return reusable


def _read_runs(directories: list, reusable: dict, cache_dir, known: dict | None) -> tuple[list, dict, dict, int]:
    """(runs, renumber, columns, total): a row per run (reused, or from its
    summary), the reused runs' old positions -> new, and the cases of the
    runs read from summaries column-wise (``total`` rows)."""
    columns: dict[str, list] = {}
    runs, renumber, total = [], {}, 0
    for order, directory in enumerate(directories):
        if str(directory) in reusable:
            runs.append(dict(reusable[str(directory)], run=order))
            renumber[reusable[str(directory)]["run"]] = order
            continue
        found = load_summary(directory, Path(cache_dir) / "summaries" if cache_dir else None, known)
        meta = found["meta"]
        runs.append({"run": order, "run_id": str(meta.get("run_id")), "directory": str(directory),
                     "start_time": str(meta.get("start_time") or ""), "commit": str(meta.get("git_commit") or ""),
                     "meta": meta, "fingerprint": found["fingerprint"]})
        # Column-wise across all runs: one DataFrame at the end, not one per run.
        count = len(found["cases"]["case_id"])
        for name, values in found["cases"].items():
            if name not in columns:
                columns[name] = [None] * total  # a column earlier runs lacked (counts)
            columns[name].extend(values)
        columns.setdefault("run", []).extend([order] * count)
        total += count
        for values in columns.values():
            values.extend([None] * (total - len(values)))  # a column this run lacks (counts)
    return runs, renumber, columns, total


def _judged_cases(columns: dict) -> pd.DataFrame:
    """The cases read from summaries, each judged stable or not here, where
    the threshold lives, once per run read."""
    new = summary.frame_of(columns)
    new["unstable"] = [analysis.unstable(row) for _, row in new.iterrows()]
    return new


def _group_by_machine(cases: pd.DataFrame, runs: pd.DataFrame) -> None:
    """``machine`` of each run and each case, in place.

    Grouped by hardware (`runmeta.same_machine`, the gate's own test), not by the recorded
    label: a runner's host name may change from run to run, its hardware does not."""
    runs["machine"] = runmeta.machine_groups(list(runs["meta"]))
    machines = list(dict.fromkeys(runs["machine"]))
    codes = np.array([machines.index(machine) for machine in runs["machine"]])
    cases["machine"] = pd.Categorical.from_codes(codes[cases["run"].to_numpy()], machines)


FRAME = "history"  # in the cache directory: history.npz (the columns) and history.json (runs, categories)


def _write_frame(cases: pd.DataFrame, runs: pd.DataFrame, cache_dir: Path) -> None:
    """The history as plain arrays and JSON (no pickle: a site's cache may come from elsewhere)."""
    arrays, categories = {}, {}
    for name in cases.columns:
        column = cases[name]
        if isinstance(column.dtype, pd.CategoricalDtype):
            arrays[name] = column.cat.codes.to_numpy()
            categories[name] = [str(value) for value in column.cat.categories]
        else:
            arrays[name] = column.to_numpy()
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f"{FRAME}.npz.tmp", "wb") as handle:
        np.savez(handle, **arrays)
    (cache_dir / f"{FRAME}.json.tmp").write_text(json.dumps(
        {"columns": list(cases.columns), "categories": categories, "runs": runs.to_dict("records")}))
    os.replace(cache_dir / f"{FRAME}.npz.tmp", cache_dir / f"{FRAME}.npz")
    os.replace(cache_dir / f"{FRAME}.json.tmp", cache_dir / f"{FRAME}.json")


def _read_frame(cache_dir) -> tuple[pd.DataFrame | None, list | None]:
    try:
        described = json.loads((Path(cache_dir) / f"{FRAME}.json").read_text())
        with np.load(Path(cache_dir) / f"{FRAME}.npz", allow_pickle=False) as arrays:
            columns = {name: pd.Categorical.from_codes(arrays[name], described["categories"][name])
                       if name in described["categories"] else arrays[name] for name in described["columns"]}
        return pd.DataFrame(columns), described["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, None  # none yet, or not ours: read the summaries


def _concat(parts: list) -> pd.DataFrame | None:
    """Frames of cases one after the other; categories merged, not re-counted."""
    parts = [part for part in parts if part is not None and len(part)]
    if len(parts) <= 1:
        return parts[0] if parts else None
    names = list(dict.fromkeys(name for part in parts for name in part.columns))
    merged = {}
    for name in names:
        pieces = [part[name].reset_index(drop=True) if name in part else pd.Series(np.nan, index=range(len(part)))
                  for part in parts]
        if all(isinstance(piece.dtype, pd.CategoricalDtype) for piece in pieces):
            merged[name] = union_categoricals([piece.array for piece in pieces], ignore_order=True)
        else:
            merged[name] = pd.concat([piece.astype(object) if isinstance(piece.dtype, pd.CategoricalDtype) else piece
                                      for piece in pieces], ignore_index=True)
    return pd.DataFrame(merged)


# ----------------------------------------------------------------- judging
@dataclass
class Judgement:
    changes: pd.DataFrame  # one row per case and consecutive pair: base and new values, ratio, mark, reasons
    pairs: pd.DataFrame  # one row per pair of runs (base, run): reasons it is not fit, per metric
    verdict_cache: dict  # each pair's reasons and raw-sample verdicts, by its key: for the next judgement


def _typical(frame: pd.DataFrame, prefix: str = "") -> pd.Series:
    """The gate's statistic from a summary: the 10th percentile of the
    samples, or the median where the case has no samples (as compare does)."""
    p10, median = frame[f"{prefix}p10_s"], frame[f"{prefix}median_s"]
    return p10.where(p10.notna(), median)


def consecutive(cases: pd.DataFrame) -> pd.DataFrame:
    """Each case's rows with the same case of the latest earlier run on the
    same machine (``base_*`` columns): a fleet's machines each form their own
    history. A case's first run on a machine has none and is left out."""
    ordered = cases.sort_values(["case_id", "run"], kind="stable")
    compared = ["run", "status", "source", "median_s", "p10_s"] + [
        name for name in COUNTS.names if name in cases]
    base = ordered[["case_id", "machine"] + compared].groupby(["case_id", "machine"], sort=False,
                                                              observed=True).shift(1)
    changes = ordered.join(base.add_prefix("base_"))
    changes = changes[changes["base_run"].notna()].copy()
    changes["base_run"] = changes["base_run"].astype(int)
    return changes


def screen(cases: pd.DataFrame, changes: pd.DataFrame, factor: float) -> pd.DataFrame:
    """The (base_run, run, group) triples where the gate could fail a case:
    one correct in the base and not now, or one whose ratio (new over base
    time) over min(1, the smallest such ratio among the other strategies of
    its group timed in both runs) exceeds ``factor``. The gate's confirmed
    change (`wall_gate.partner_change`: the lower median, over partners, of the case's
    ratio over theirs, or its own ratio without partners) never exceeds that
    bound, so every case the gate fails is inside them."""
    cases, changes = with_case_columns(cases), with_case_columns(changes)
    pairs = changes[["base_run", "run"]].drop_duplicates()
    key = ["case_id"] + CASE_GROUP + ["strategy"]
    timed = cases[analysis.timed(cases)]
    timed = timed.assign(typical=_typical(timed))[["run", "typical"] + key]
    both = (pairs.merge(timed, on="run")
            .merge(timed.rename(columns={"run": "base_run", "typical": "base_typical"}), on=["base_run"] + key))
    both["ratio"] = both["typical"] / both["base_typical"]
    keys = ["base_run", "run"] + CASE_GROUP
    both = both.sort_values(keys + ["ratio"], kind="stable")
    rank = both.groupby(keys, sort=False).cumcount()
    lowest = both.groupby(keys, sort=False)["ratio"].transform("first")
    second = both["ratio"].where(rank == 1).groupby([both[k] for k in keys], sort=False).transform("max")
    others = lowest.where(rank > 0, second)  # the smallest ratio among the *other* strategies
    both["bound"] = both["ratio"] / others.clip(upper=1.0).fillna(1.0)
    # A hair under the factor: the bound and the rule round differently in the last bit.
    suspects = both[both["bound"] > factor * (1 - 1e-9)][keys]
    broken = changes[changes["base_status"].isin(CORRECT) & ~changes["status"].isin(CORRECT)][keys]
    return pd.concat([suspects, broken]).drop_duplicates()


def _rows(cases: pd.DataFrame, run: int, groups: pd.DataFrame) -> pd.DataFrame:
    mine = cases[cases["run"] == run]
    return mine.merge(groups, on=CASE_GROUP)


# The judgement's own version: what a pair's reasons ask besides the runs' files (2: the thread
# setting and the timing protocol, runmeta.unlike_settings). A site's cached pairs of another are judged again.
PAIR_JUDGEMENT = 2


def _pair_key(fingerprints: list[str], base: int, new: int, rule: regression.Rule, metrics: list[str]) -> str:
    """What a pair's judgement depends on: both runs' files, the rule, the metrics, ``PAIR_JUDGEMENT``."""
    text = "\0".join([fingerprints[base], fingerprints[new], repr(rule), ",".join(metrics), str(PAIR_JUDGEMENT)])
    return hashlib.sha256(text.encode()).hexdigest()


def judge_pairs(cases, runs, changes, pairs, rule, metrics) -> dict:
    """{pair key: {"reasons": {metric: [...]}, "verdicts": [[case, verdict,
    confirmed ratio, p], ...]}} for ``pairs`` (base_run, run, key): why
    each pair is not fit, and the gate's verdicts (`gate_table`, on the raw
    samples) on the cases of the groups `screen` cannot clear."""
    involved = set(pairs["base_run"]) | set(pairs["run"])
    by_run = {run: rows for run, rows in cases[cases["run"].isin(involved)].groupby("run", sort=False)}
    metas = runs["meta"]
    judged = {}
    for base, new, key in zip(pairs["base_run"], pairs["run"], pairs["key"]):
        judged[key] = {"reasons": {metric: analysis.unfit_reasons(metas[base], by_run[base], metas[new],
                                                                    by_run[new], metric) for metric in metrics},
                       "verdicts": []}
    mine = changes.merge(pairs[["base_run", "run"]], on=["base_run", "run"])
    suspects = screen(cases[cases["run"].isin(involved)], mine, rule.factor)
    keys = dict(zip(zip(pairs["base_run"], pairs["run"]), pairs["key"]))
    for (base, new), groups in suspects.groupby(["base_run", "run"], sort=False):
        groups = groups[CASE_GROUP].drop_duplicates()
        table = gate_table(_with_rounds(_rows(cases, base, groups), runs.at[base, "directory"]),
                           store.read_samples(Path(runs.at[base, "directory"])),
                           _with_rounds(_rows(cases, new, groups), runs.at[new, "directory"]),
                           store.read_samples(Path(runs.at[new, "directory"])), rule)
        judged[keys[(base, new)]]["verdicts"] = [
            [row.case_id, row.verdict, _finite(row.confirmed_ratio), _finite(row.p_value)]
            for row in table.itertuples(index=False)]
    return judged


def _with_rounds(rows: pd.DataFrame, directory) -> pd.DataFrame:
    """Summary rows with their ``round_medians_s`` from the run's rows.csv
    (the summaries do not carry them): read only for the few pairs the
    screen cannot clear; an older run's are empty."""
    stored = store.read_rows(Path(directory))[["case_id", "round_medians_s"]]
    return rows.assign(case_id=rows["case_id"].astype(str)).merge(stored, on="case_id", how="left")


def _finite(value):
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def count_verdicts(changes: pd.DataFrame, metric: str) -> pd.Series:
    """The count gate's verdict on each change (`regression.count_verdict`: past
    its factor, no test, counts being deterministic), asked of the changes
    whose ratio is past the factor (no other can regress)."""
    verdicts = pd.Series("", index=changes.index, dtype=object)
    both = changes[changes[metric].notna() & changes[f"base_{metric}"].notna()]
    verdicts[both.index] = regression.SAME
    grown = both[both[metric] > both[f"base_{metric}"] * regression.DEFAULT_COUNT_FACTOR * (1 - 1e-9)]
    for index, base, new in zip(grown.index, grown[f"base_{metric}"], grown[metric]):
        verdicts[index] = regression.count_verdict(base, new)[1]
    return verdicts


def judge(cases: pd.DataFrame, runs: pd.DataFrame, rule: regression.Rule, cache: dict | None = None) -> Judgement:
    """Every change of every case between consecutive runs, judged (module
    docstring). ``cache``: an earlier judgement's ``verdict_cache``; a pair
    of runs whose files did not change is not judged again, so a build with
    one new run judges one new pair."""
    cache = cache or {}
    changes = consecutive(cases)
    metrics = [TIME] + [name for name in COUNTS.names if name in cases and cases[name].notna().any()]
    pairs = changes[["base_run", "run"]].drop_duplicates().reset_index(drop=True)
    fingerprints = [json.dumps(fingerprint, sort_keys=True) for fingerprint in runs["fingerprint"]]
    pairs["key"] = [_pair_key(fingerprints, base, new, rule, metrics)
                    for base, new in zip(pairs["base_run"], pairs["run"])]
    fresh = pairs[~pairs["key"].isin(cache)]
    judged = {key: cache[key] for key in pairs["key"] if key in cache}
    judged.update(judge_pairs(cases, runs, changes, fresh, rule, metrics) if len(fresh) else {})
    for metric in metrics:
        pairs[f"reasons_{metric}"] = [judged[key]["reasons"][metric] for key in pairs["key"]]
    pairs["rule"] = [pair_rule(runs["meta"][base], runs["meta"][new])
                     for base, new in zip(pairs["base_run"], pairs["run"])]
    exact = pd.DataFrame([[base, new] + verdict for base, new, key in zip(pairs["base_run"], pairs["run"], pairs["key"])
                          for verdict in judged[key]["verdicts"]],
                         columns=["base_run", "run", "case_id", "verdict", "gate_ratio", "p_value"]
                         ).astype({"base_run": int, "run": int, "gate_ratio": float, "p_value": float})
    index = changes.index
    changes = (changes.merge(exact, on=["base_run", "run", "case_id"], how="left")
               .merge(pairs.drop(columns="key"), on=["base_run", "run"], how="left").set_index(index))
    changes["verdict"] = changes["verdict"].fillna(regression.SAME)  # cleared by the screen
    changes["ratio"] = changes["median_s"] / changes["base_median_s"]
    changes["source_changed"] = (changes["source"] != changes["base_source"]) & (changes["base_source"] != "") \
        & (changes["source"] != "")
    failing = {TIME: changes["verdict"].isin(regression.FAILING)}
    for metric in metrics[1:]:
        changes[f"verdict_{metric}"] = count_verdicts(changes, metric)
        failing[metric] = changes[f"verdict_{metric}"].isin(regression.FAILING)
    _mark(changes, failing)
    return Judgement(changes, pairs, judged)


def pair_rule(base_meta: dict, new_meta: dict) -> str:
    """What a red between two runs of one protocol rests on, said beside it where it is less than
    rounds (""): two runs before rounds have one stretch of samples each, so a slow state either
    run was in (set when the case was prepared) reads as a regression; the rounds of later runs
    see through it."""
    if runmeta.timing_protocol(base_meta) == runmeta.timing_protocol(new_meta) == runmeta.BEFORE_ROUNDS:
        return ("judged on one stretch of samples a run (both before rounds): a slow state of either run "
                "reads as a regression")
    return ""


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
                mark = SOURCE_CHANGED
                why = f"source: {changes.at[index, 'base_source']} → {changes.at[index, 'source']}"
            elif reasons:
                mark, why = NOT_JUDGED, ", ".join(reasons)
            else:
                mark, why = RED, changes.at[index, "rule"] if metric == TIME else ""
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
    if reason.startswith("different thread settings"):
        return "different thread settings"
    if reason.startswith("different timing protocol"):
        return "different timing protocol"
    if reason.startswith("load not recorded"):
        return "load not recorded"
    if reason.startswith("load"):
        return "load at or above the core count"
    return "ceiling or curves measured busy"


def unstable_share(cases: pd.DataFrame) -> pd.Series:
    """Per run, the share of its timed cases flagged unstable."""
    timed = cases[analysis.timed(cases)]
    return timed["unstable"].astype(float).groupby(timed["run"]).mean()

