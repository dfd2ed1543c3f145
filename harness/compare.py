"""``scatterbench compare BASE NEW``: did anything get slower, or break?

The verdict per case is the one regression rule (harness/regression.py).
``--relative-to`` divides each strategy's samples by a reference strategy's
median measured in the same run and case, so runs on different or noisy
machines can still be compared; ``--normalise`` does that with each
operator's declared reference. The reference itself cannot be judged against
itself: it is normalised by the other strategies of its case (the
geometric mean of their medians), or
compared on absolute time where it is alone, so a slowdown of the reference
is still seen.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import regression, store
from harness.errors import UsageError
from harness.format import fmt_num, fmt_ratio, fmt_time, md_escape, params_label
from impls.status import CORRECT

CASE_KEY = ["op", "strategy", "device", "dtype", "params"]
GROUP_KEY = ["op", "device", "dtype", "params"]


def references_for(op: str, relative_to: list[str] | None, normalise: bool) -> list[str]:
    if relative_to:
        return list(relative_to)
    if normalise:
        from impls.registry import OPERATORS

        if op in OPERATORS:
            return [OPERATORS[op].reference]
    return []


OTHERS = "*"  # a reference's own case is normalised by the other strategies of its case


def normalised_samples(rows: pd.DataFrame, samples: dict, relative_to: list[str] | None,
                       normalise: bool = False, statistic: str = "median") -> tuple[dict, dict]:
    """Per case: samples divided by the reference strategy's median in the
    same group, and which reference was used (None where the group has none).

    The reference's own case is divided by the geometric mean of the other
    correct strategies' medians of its case (``OTHERS``), so a slowdown of the
    reference shows while a uniformly slower machine still cancels; alone in
    its case, it is compared on absolute time ("")."""
    scaled, used = {}, {}
    for _, group in rows.groupby(GROUP_KEY, sort=False):
        references = references_for(group["op"].iloc[0], relative_to, normalise)
        timed = group[group["status"].isin(CORRECT) & group["median_s"].notna() & (group["median_s"] > 0)]
        medians = {name: (regression.typical_s(samples[case_id], statistic) if case_id in samples else median)
                   for name, case_id, median in zip(timed["strategy"], timed["case_id"], timed["median_s"].astype(float))}
        present = [name for name in references if name in medians]
        for _, row in group.iterrows():
            name = row["strategy"]
            if not present:
                used[row["case_id"]] = None
                continue
            if name != present[0]:
                reference, scale = present[0], medians[present[0]]
            else:
                others = [value for other, value in medians.items() if other != name]
                if others:
                    reference, scale = OTHERS, math.exp(sum(math.log(v) for v in others) / len(others))
                else:
                    reference, scale = "", 1.0
            used[row["case_id"]] = reference
            if row["case_id"] in samples:
                scaled[row["case_id"]] = [s / scale for s in samples[row["case_id"]]]
    return scaled, used


@dataclass
class Comparison:
    table: pd.DataFrame
    normalised: bool


def compare_dirs(base_dir, new_dir, rule: regression.Rule = regression.Rule(),
                 relative_to: list[str] | None = None, normalise: bool = False) -> Comparison:
    _, base_rows, base_samples = store.read_run(Path(base_dir))
    _, new_rows, new_samples = store.read_run(Path(new_dir))
    common = set(base_rows["case_id"]) & set(new_rows["case_id"])
    if not common:
        raise UsageError(f"{base_dir} and {new_dir} have no case in common: nothing to compare")
    if relative_to:
        known = set(base_rows["strategy"]) | set(new_rows["strategy"])
        missing = [name for name in relative_to if name not in known]
        if len(missing) == len(relative_to):
            raise UsageError(f"--relative-to {', '.join(missing)}: neither run has this strategy")
    table = compare_frames(base_rows, base_samples, new_rows, new_samples, rule, relative_to, normalise)
    return Comparison(table, bool(relative_to or normalise))


def compare_runs(base_dir, new_dir, factor: float = regression.DEFAULT_FACTOR,
                 alpha: float = regression.DEFAULT_ALPHA, relative_to: list[str] | None = None,
                 statistic: str = "median") -> pd.DataFrame:
    return compare_dirs(base_dir, new_dir, regression.Rule(factor, alpha, statistic), relative_to).table


def compare_frames(base_rows, base_samples, new_rows, new_samples, rule=None, relative_to=None,
                   normalise: bool = False, alpha=None) -> pd.DataFrame:
    if not isinstance(rule, regression.Rule):  # (factor, alpha) positionally, as older callers pass them
        rule = regression.Rule(rule if rule is not None else regression.DEFAULT_FACTOR,
                               alpha if alpha is not None else regression.DEFAULT_ALPHA)
    base_used = new_used = {}
    relative = bool(relative_to or normalise)
    if relative:
        base_samples, base_used = normalised_samples(base_rows, base_samples, relative_to, normalise, rule.statistic)
        new_samples, new_used = normalised_samples(new_rows, new_samples, relative_to, normalise, rule.statistic)
    base = base_rows.set_index("case_id")
    new = new_rows.set_index("case_id")
    records = []
    for case_id in list(base.index) + [c for c in new.index if c not in base.index]:
        in_base, in_new = case_id in base.index, case_id in new.index
        row = (base if in_base else new).loc[case_id]
        record = {key: row[key] for key in CASE_KEY}
        record.update(case_id=case_id, base_status=base.loc[case_id, "status"] if in_base else "",
                      new_status=new.loc[case_id, "status"] if in_new else "",
                      base_s=math.nan, new_s=math.nan, ratio=math.nan, p_value=math.nan, reference="")
        if not (in_base and in_new):
            record["verdict"] = regression.ONLY_IN_BASE if in_base else regression.ONLY_IN_NEW
            records.append(record)
            continue
        by_status = regression.status_change(record["base_status"], record["new_status"])
        if by_status:
            record["verdict"] = by_status
        elif relative and (base_used.get(case_id) is None or new_used.get(case_id) is None):
            record["verdict"] = regression.NO_REFERENCE
        elif case_id not in base_samples or case_id not in new_samples:
            record["verdict"] = regression.NOT_TIMED
        else:
            change = regression.timing_change(base_samples[case_id], new_samples[case_id], rule)
            record.update(base_s=change.base_s, new_s=change.new_s, ratio=change.ratio, p_value=change.p_value,
                          verdict=change.verdict, reference=new_used.get(case_id) or "")
        records.append(record)
    return pd.DataFrame.from_records(records)


def regressed(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["verdict"].isin(regression.FAILING)]


def counts_line(table: pd.DataFrame) -> str:
    counts = table["verdict"].value_counts().to_dict()
    return ", ".join(f"{n} {v}" for v, n in counts.items())


# ------------------------------------------------------------------ rendering
def value_text(seconds: float, relative: bool) -> str:
    return fmt_num(seconds, 3, "×ref") if relative else fmt_time(seconds)


def as_markdown(table: pd.DataFrame, relative: bool = False) -> str:
    lines = ["| op | strategy | device | dtype | params | base | new | ratio | p | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        verdict = f"**{r['verdict']}**" if r["verdict"] in regression.FAILING else r["verdict"]
        cells = [md_escape(r["op"]), md_escape(r["strategy"]), r["device"], r["dtype"],
                 md_escape(params_label(r["params"])), value_text(r["base_s"], relative),
                 value_text(r["new_s"], relative), fmt_ratio(r["ratio"]), fmt_num(r["p_value"], 2), verdict]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", counts_line(table)]
    return "\n".join(lines)


def as_json(table: pd.DataFrame) -> str:
    records = json.loads(table.to_json(orient="records"))
    return json.dumps({"cases": records, "regressed": int(len(regressed(table)))}, indent=2)
