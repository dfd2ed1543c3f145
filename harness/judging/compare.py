"""``scatterbench compare BASE NEW``: did anything get slower, or break?

The verdict per case is the one regression rule (harness/judging/regression.py).
``--relative-to`` divides each strategy's samples by a reference strategy's
median measured in the same run and case, so runs on different or noisy
machines can still be compared; ``--normalise`` does that with each
operator's declared reference. Both runs of a case are divided by the same
reference, chosen among the strategies correct and timed in both; the
reference itself, or every strategy of a case that lacks one, is divided by
the geometric mean of the other strategies both runs timed (reference "*"),
so a slowdown of the reference is still seen and a strategy added to one run
changes no other verdict. Each ``--relative-to`` name must be a strategy of
one of the runs: a typo exits 2 instead of switching the gate off.

Wall times are judged only between runs the one fitness rule admits
(``analysis.run_unfit_reasons``): where either run is unfit, ``compare``
says which and why in one line (``Comparison.unfit``) and gives no time
verdict (``UNFIT``): no case is "regressed", "improved" or "same". A status
change (broken, fixed) is still judged: the check's verdict does not depend
on the machine's load. The CI gate (harness/judging/wall_gate.py) re-measures
its suspects instead, and asks for no fitness here.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from harness.base import plugins
from harness.base.cases import CASE_GROUP, CASE_KEY, mode_and_layout, with_case_columns
from harness.base.errors import UsageError
from harness.base.format import (
    fmt_num,
    fmt_p,
    fmt_ratio,
    fmt_time,
    md_escape,
    params_label,
)
from harness.judging import analysis, regression
from harness.results import metrics, runmeta, stats, store


def references_for(op: str, relative_to: list[str] | None, normalise: bool) -> list[str]:
    if relative_to:
        return list(relative_to)
    if normalise:
        from impls.registry import OPERATORS

        if op in OPERATORS:
            return [OPERATORS[op].reference]
    return []


OTHERS = "*"  # normalised by the geometric mean of the other strategies of the case
UNFIT = "not judged: unfit"  # a time verdict withheld: a run of the pair fails the fitness rule
TIME_VERDICTS = (regression.REGRESSED, regression.IMPROVED, regression.SAME)  # what load can fake


def typical_by_group(rows: pd.DataFrame, samples: dict, statistic: str) -> dict:
    """{group key: {strategy: (case_id, typical seconds)}} over the rows that
    are correct and timed."""
    rows = with_case_columns(rows)
    timed = rows[analysis.timed(rows)]
    groups: dict = {}
    for row in timed.itertuples(index=False):
        key = tuple(getattr(row, column) for column in CASE_GROUP)
        case_id = row.case_id
        typical = stats.typical_s(samples[case_id], statistic) if case_id in samples else float(row.median_s)
        groups.setdefault(key, {})[row.strategy] = (case_id, typical)
    return groups


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def normalised_pair(base_rows: pd.DataFrame, base_samples: dict, new_rows: pd.DataFrame, new_samples: dict,
                    relative_to: list[str] | None, normalise: bool = False,
                    statistic: str = "median") -> tuple[dict, dict, dict]:
    """Both runs' samples divided by one reference per case, and which
    reference each case used.

    Only strategies correct and timed in *both* runs take part, so the two
    sides are always divided by the same thing: the first of the references
    timed in both; where none is, or for the reference's own case, the
    geometric mean of the other common strategies (``OTHERS``), so a slowdown
    of the reference shows while a uniformly slower machine still cancels,
    and a strategy added to one run moves nothing. A strategy alone in its
    case is compared on absolute time ("")."""
    base_groups = typical_by_group(base_rows, base_samples, statistic)
    new_groups = typical_by_group(new_rows, new_samples, statistic)
    base_scaled, new_scaled, used = {}, {}, {}
    for key, base_typical in base_groups.items():
        new_typical = new_groups.get(key, {})
        common = [name for name in base_typical if name in new_typical]
        references = [name for name in references_for(key[0], relative_to, normalise) if name in common]
        for name in common:
            if references and name != references[0]:
                reference = references[0]
                base_scale, new_scale = base_typical[reference][1], new_typical[reference][1]
            elif len(common) > 1:
                others = [other for other in common if other != name]
                reference = OTHERS
                base_scale = geomean([base_typical[other][1] for other in others])
                new_scale = geomean([new_typical[other][1] for other in others])
            else:
                reference, base_scale, new_scale = "", 1.0, 1.0
            base_id, new_id = base_typical[name][0], new_typical[name][0]
            used[new_id] = reference
            if base_id in base_samples:
                base_scaled[base_id] = [s / base_scale for s in base_samples[base_id]]
            if new_id in new_samples:
                new_scaled[new_id] = [s / new_scale for s in new_samples[new_id]]
    return base_scaled, new_scaled, used


@dataclass
class Comparison:
    table: pd.DataFrame
    normalised: bool
    warnings: list[str] = field(default_factory=list)
    unfit: str = ""  # the one line naming the unfit run(s) and why, where the pair is unfit


def unfit_line(base_dir, base_meta: dict, base_rows: pd.DataFrame, new_dir, new_meta: dict,
               new_rows: pd.DataFrame) -> str:
    """One line naming each run of the pair the fitness rule refuses and why, and what makes the
    pair unlike (another thread setting or timing protocol), or "" when both are fit and alike."""
    refused = [f"{label} run {where} is unfit ({'; '.join(reasons)})"
               for label, where, meta, rows in (("the base", base_dir, base_meta, base_rows),
                                                ("the new", new_dir, new_meta, new_rows))
               if (reasons := analysis.run_unfit_reasons(meta, rows))]
    unlike = runmeta.unlike_settings(base_meta, new_meta)  # another setting measures another thing
    if unlike:
        refused.append(f"the runs are not alike ({'; '.join(unlike)})")
    if not refused:
        return ""
    return (f"not judged: {' and '.join(refused)}; times are shown, not judged: only runs the fitness rule "
            f"admits are compared on wall time")


def withhold_times(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every time verdict (``TIME_VERDICTS``) replaced by ``UNFIT``."""
    if not len(table):
        return table
    return table.assign(verdict=table["verdict"].where(~table["verdict"].isin(TIME_VERDICTS), UNFIT))


def compare_dirs(base_dir, new_dir, rule: regression.Rule = regression.Rule(),
                 relative_to: list[str] | None = None, normalise: bool = False, fitness: bool = False) -> Comparison:
    """The two runs' cases compared (module docstring). ``fitness``: apply
    the fitness rule (``compare``'s; the gate re-measures instead)."""
    base_meta, base_rows, base_samples = store.read_run(Path(base_dir))
    new_meta, new_rows, new_samples = store.read_run(Path(new_dir))
    # The runs' plugins before the registry is asked for references (--normalise).
    missing = [f"warning: {line}" for meta, where in ((base_meta, base_dir), (new_meta, new_dir))
               for line in plugins.load_recorded(meta, str(where), plugins.COMPARE_LACKS)]
    common = set(base_rows["case_id"]) & set(new_rows["case_id"])
    if not common:
        raise UsageError(f"{base_dir} and {new_dir} have no case in common: nothing to compare")
    if relative_to:
        known = set(base_rows["strategy"]) | set(new_rows["strategy"])
        unknown = [name for name in relative_to if name not in known]
        if unknown:
            raise UsageError(f"--relative-to {', '.join(unknown)}: neither run has this strategy")
    table = compare_frames(base_rows, base_samples, new_rows, new_samples, rule, relative_to, normalise)
    normalised = bool(relative_to or normalise)
    warnings = missing
    if not normalised and not runmeta.same_machine(base_meta, new_meta):
        warnings.append(f"warning: {base_dir} ({runmeta.machine_label(base_meta)}) and {new_dir} "
                        f"({runmeta.machine_label(new_meta)}) were measured on different hardware: their absolute "
                        f"times differ by machine as much as by code; compare with --normalise")
    unfit = unfit_line(base_dir, base_meta, base_rows, new_dir, new_meta, new_rows) if fitness else ""
    return Comparison(withhold_times(table) if unfit else table, normalised, warnings, unfit)


def compare_runs(base_dir, new_dir, factor: float = regression.DEFAULT_FACTOR,
                 alpha: float = regression.DEFAULT_ALPHA, relative_to: list[str] | None = None,
                 statistic: str = "median") -> pd.DataFrame:
    """``scatterbench compare``'s table, the fitness rule applied."""
    return compare_dirs(base_dir, new_dir, regression.Rule(factor, alpha, statistic), relative_to,
                        fitness=True).table


def compare_frames(base_rows, base_samples, new_rows, new_samples, rule=None, relative_to=None,
                   normalise: bool = False, alpha=None) -> pd.DataFrame:
    if not isinstance(rule, regression.Rule):  # (factor, alpha) positionally, as older callers pass them
        rule = regression.Rule(rule if rule is not None else regression.DEFAULT_FACTOR,
                               alpha if alpha is not None else regression.DEFAULT_ALPHA)
    base_rows, new_rows = with_case_columns(base_rows), with_case_columns(new_rows)
    used = {}
    relative = bool(relative_to or normalise)
    if relative:
        base_samples, new_samples, used = normalised_pair(base_rows, base_samples, new_rows, new_samples,
                                                          relative_to, normalise, rule.statistic)
    records = []
    for record, in_both in _paired_cases(base_rows, new_rows):
        case_id = record["case_id"]
        record.update(base_s=math.nan, new_s=math.nan, ratio=math.nan, p_value=math.nan, reference="")
        if not in_both:
            records.append(record)
            continue
        by_status = regression.status_change(record["base_status"], record["new_status"])
        if by_status:
            record["verdict"] = by_status
        elif case_id not in base_samples or case_id not in new_samples:
            record["verdict"] = regression.NOT_TIMED
        else:
            change = regression.timing_change(base_samples[case_id], new_samples[case_id], rule)
            record.update(base_s=change.base_s, new_s=change.new_s, ratio=change.ratio, p_value=change.p_value,
                          verdict=change.verdict, reference=used.get(case_id, ""))
        records.append(record)
    return pd.DataFrame.from_records(records)


def _paired_cases(base_rows: pd.DataFrame, new_rows: pd.DataFrame):
    """Every case of either run, the base's order first: (its record — the case's
    key, both statuses, and the verdict where it is in one run only —, whether
    it is in both). What the time and the count comparisons share."""
    base, new = base_rows.set_index("case_id"), new_rows.set_index("case_id")
    for case_id in list(base.index) + [c for c in new.index if c not in base.index]:
        in_base, in_new = case_id in base.index, case_id in new.index
        row = (base if in_base else new).loc[case_id]
        record = {key: row[key] for key in CASE_KEY}
        record.update(case_id=case_id, base_status=base.loc[case_id, "status"] if in_base else "",
                      new_status=new.loc[case_id, "status"] if in_new else "")
        if not (in_base and in_new):
            record["verdict"] = regression.ONLY_IN_BASE if in_base else regression.ONLY_IN_NEW
        yield record, in_base and in_new


# ---------------------------------------------------------------- counts
def compare_counts(base_dir, new_dir, metric: str, factor: float = regression.DEFAULT_COUNT_FACTOR) -> Comparison:
    """Per case, the two runs' ``metric`` (a count per call of
    ``metrics.COUNTS``, from ``run --instrument callgrind``), their ratio and
    the count rule's verdict (harness/results/counts.py). A run without that
    count is an error, not a gate that passes: a timed run compared by count
    would judge nothing."""
    if metric not in metrics.COUNTS.names:
        raise UsageError(f"--metric {metric}: expected one of {', '.join(metrics.COUNTS.names)}")
    base_meta, base_rows, _ = store.read_run(Path(base_dir))
    new_meta, new_rows, _ = store.read_run(Path(new_dir))
    if not set(base_rows["case_id"]) & set(new_rows["case_id"]):
        raise UsageError(f"{base_dir} and {new_dir} have no case in common: nothing to compare")
    for directory, rows in ((base_dir, base_rows), (new_dir, new_rows)):
        if not rows[metric].notna().any():
            raise UsageError(f"{directory}: no {metric} counts (a timed run?); count with "
                             f"`scatterbench run CONFIG --instrument callgrind`")
    warnings = []
    differing = runmeta.version_changes(base_meta.get("count_versions"), new_meta.get("count_versions"))
    if differing:
        warnings.append(f"warning: {base_dir} and {new_dir} were counted with different versions "
                        f"({', '.join(differing)}): counts change with them as much as with the code")
    return Comparison(compare_count_frames(base_rows, new_rows, metric, factor), False, warnings)


def compare_count_frames(base_rows: pd.DataFrame, new_rows: pd.DataFrame, metric: str,
                         factor: float = regression.DEFAULT_COUNT_FACTOR) -> pd.DataFrame:
    base_rows, new_rows = with_case_columns(base_rows), with_case_columns(new_rows)
    base, new = base_rows.set_index("case_id"), new_rows.set_index("case_id")
    records = []
    for record, in_both in _paired_cases(base_rows, new_rows):
        case_id = record["case_id"]
        record.update(metric=metric, base_count=math.nan, new_count=math.nan, ratio=math.nan, factor=factor)
        if in_both:
            record.update(base_count=float(base.loc[case_id, metric]), new_count=float(new.loc[case_id, metric]))
            by_status = regression.status_change(record["base_status"], record["new_status"])
            if by_status and by_status != regression.NOT_TIMED:
                record["verdict"] = by_status
            else:
                record["ratio"], record["verdict"] = regression.count_verdict(record["base_count"], record["new_count"],
                                                                          factor)
        records.append(record)
    return pd.DataFrame.from_records(records)


def count_verdict_line(r) -> str:
    """One line per judged case: the case, the metric, both counts, the ratio."""
    where = f"{r['op']}/{r['strategy']} {r['device']} {r['dtype']} {params_label(r['params'])}"
    if r["verdict"] in (regression.BROKEN, regression.FIXED):
        return f"{r['verdict']}: {where}: status {r['base_status']} -> {r['new_status']}"
    shown = metrics.COUNTS[r["metric"]].format
    return (f"{r['verdict']}: {where}: {r['metric']} {shown(r['base_count'])} -> {shown(r['new_count'])} per call "
            f"({r['ratio']:.3f}x, factor {r['factor']:g})")


def counts_markdown(table: pd.DataFrame) -> str:
    metric = table["metric"].iloc[0] if len(table) else "count"
    lines = [f"| op | strategy | device | dtype | mode | params | base {metric} | new {metric} | ratio | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        verdict = f"**{r['verdict']}**" if r["verdict"] in regression.FAILING else r["verdict"]
        shown = metrics.COUNTS[r["metric"]].format
        cells = [md_escape(r["op"]), md_escape(r["strategy"]), r["device"], r["dtype"], mode_and_layout(r),
                 md_escape(params_label(r["params"])), shown(r["base_count"]), shown(r["new_count"]),
                 fmt_num(r["ratio"], 4, "×"), verdict]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", counts_line(table)]
    return "\n".join(lines)


def regressed(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["verdict"].isin(regression.FAILING)]


def counts_line(table: pd.DataFrame) -> str:
    counts = table["verdict"].value_counts().to_dict()
    return ", ".join(f"{n} {v}" for v, n in counts.items())


# ------------------------------------------------------------------ rendering
def value_text(seconds: float, relative: bool) -> str:
    return fmt_num(seconds, 3, "×ref") if relative else fmt_time(seconds)


def as_markdown(table: pd.DataFrame, relative: bool = False, unfit: str = "") -> str:
    lines = ["| op | strategy | device | dtype | mode | params | base | new | ratio | p | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        verdict = f"**{r['verdict']}**" if r["verdict"] in regression.FAILING else r["verdict"]
        cells = [md_escape(r["op"]), md_escape(r["strategy"]), r["device"], r["dtype"], mode_and_layout(r),
                 md_escape(params_label(r["params"])), value_text(r["base_s"], relative),
                 value_text(r["new_s"], relative), fmt_ratio(r["ratio"]), fmt_p(r["p_value"]), verdict]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", counts_line(table)] + (["", md_escape(unfit)] if unfit else [])
    return "\n".join(lines)


def as_json(table: pd.DataFrame, unfit: str = "") -> str:
    """The cases, how many regressed or broke, and the unfit line ("" for a fit pair)."""
    records = json.loads(table.to_json(orient="records"))
    return json.dumps({"cases": records, "regressed": int(len(regressed(table))), "unfit": unfit}, indent=2)
