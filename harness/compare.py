"""``scatterbench compare BASE NEW``: did anything get slower, or break?

A case regresses when its median grew by more than ``--factor`` *and* a
Mann–Whitney U test on the raw samples says the shift is real (p < ``--alpha``):
the ratio guards against flagging tiny real changes, the test against flagging
noise. A case that was correct and now fails its check is a regression too.
``--relative-to`` divides each strategy's samples by a reference strategy's
median measured in the same run and case, so runs on different or noisy
machines can still be compared.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pandas as pd

from harness import stats, store
from harness.tables import CORRECT, fmt_num, fmt_time, params_label

CASE_KEY = ["op", "strategy", "device", "dtype", "params"]
GROUP_KEY = ["op", "device", "dtype", "params"]
VERDICT_STYLE = {"regressed": "bold red", "broken": "bold red", "improved": "green", "fixed": "green",
                 "same": "", "only in base": "dim", "only in new": "dim", "no reference": "yellow",
                 "not timed": "dim"}


def normalised_samples(rows: pd.DataFrame, samples: dict, references: list[str]) -> tuple[dict, dict]:
    """Per case: samples divided by the reference strategy's median in the same
    group, and which reference was used (None where the group has none)."""
    scaled, used = {}, {}
    for _, group in rows.groupby(GROUP_KEY, sort=False):
        timed = group[group["status"].isin(CORRECT) & group["median_s"].notna()]
        reference = next((name for name in references if name in set(timed["strategy"])), None)
        ref_median = float(timed.loc[timed["strategy"] == reference, "median_s"].iloc[0]) if reference else math.nan
        for _, row in group.iterrows():
            used[row["case_id"]] = reference
            if reference and row["case_id"] in samples:
                scaled[row["case_id"]] = [s / ref_median for s in samples[row["case_id"]]]
    return scaled, used


def compare_runs(base_dir, new_dir, factor: float = 1.10, alpha: float = 0.002,
                 relative_to: list[str] | None = None) -> pd.DataFrame:
    _, base_rows, base_samples = store.read_run(base_dir)
    _, new_rows, new_samples = store.read_run(new_dir)
    return compare_frames(base_rows, base_samples, new_rows, new_samples, factor, alpha, relative_to)


def compare_frames(base_rows, base_samples, new_rows, new_samples, factor=1.10, alpha=0.002,
                   relative_to=None) -> pd.DataFrame:
    if factor <= 1:
        raise ValueError(f"--factor {factor}: must be > 1")
    if not 0 < alpha < 1:
        raise ValueError(f"--alpha {alpha}: must be in (0, 1)")
    base_used = new_used = {}
    if relative_to:
        base_samples, base_used = normalised_samples(base_rows, base_samples, relative_to)
        new_samples, new_used = normalised_samples(new_rows, new_samples, relative_to)
    base = base_rows.set_index("case_id")
    new = new_rows.set_index("case_id")
    records = []
    for case_id in list(base.index) + [c for c in new.index if c not in base.index]:
        in_base, in_new = case_id in base.index, case_id in new.index
        row = (base if in_base else new).loc[case_id]
        record = {key: row[key] for key in CASE_KEY}
        record.update(case_id=case_id, base_status=base.loc[case_id, "status"] if in_base else "",
                      new_status=new.loc[case_id, "status"] if in_new else "",
                      base_s=math.nan, new_s=math.nan, ratio=math.nan, p_value=math.nan)
        if not (in_base and in_new):
            record["verdict"] = "only in base" if in_base else "only in new"
            records.append(record)
            continue
        base_ok = record["base_status"] in CORRECT
        new_ok = record["new_status"] in CORRECT
        if base_ok and not new_ok:
            record["verdict"] = "broken"
        elif new_ok and not base_ok:
            record["verdict"] = "fixed"
        elif not (base_ok and new_ok):
            record["verdict"] = "not timed"
        elif relative_to and (base_used.get(case_id) is None or new_used.get(case_id) is None):
            record["verdict"] = "no reference"
        elif case_id not in base_samples or case_id not in new_samples:
            record["verdict"] = "not timed"
        else:
            base_s = stats.summarize(base_samples[case_id]).median_s
            new_s = stats.summarize(new_samples[case_id]).median_s
            ratio = new_s / base_s if base_s > 0 else math.inf
            p_value = stats.mann_whitney_p(base_samples[case_id], new_samples[case_id])
            verdict = "same"
            if ratio > factor and p_value < alpha:
                verdict = "regressed"
            elif ratio < 1 / factor and p_value < alpha:
                verdict = "improved"
            record.update(base_s=base_s, new_s=new_s, ratio=ratio, p_value=p_value, verdict=verdict)
        records.append(record)
    return pd.DataFrame.from_records(records)


def regressed(table: pd.DataFrame) -> pd.DataFrame:
    return table[table["verdict"].isin(["regressed", "broken"])]


# ------------------------------------------------------------------ rendering
def _value(seconds: float, relative: bool) -> str:
    return fmt_num(seconds, 3, "×ref") if relative else fmt_time(seconds)


def as_markdown(table: pd.DataFrame, relative: bool = False) -> str:
    from report import md_escape

    lines = ["| op | strategy | device | dtype | params | base | new | ratio | p | verdict |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in table.iterrows():
        verdict = f"**{r['verdict']}**" if r["verdict"] in ("regressed", "broken") else r["verdict"]
        cells = [md_escape(r["op"]), md_escape(r["strategy"]), r["device"], r["dtype"],
                 md_escape(params_label(r["params"])), _value(r["base_s"], relative), _value(r["new_s"], relative),
                 fmt_num(r["ratio"], 3, "×"), fmt_num(r["p_value"], 2), verdict]
        lines.append("| " + " | ".join(cells) + " |")
    counts = table["verdict"].value_counts().to_dict()
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items())]
    return "\n".join(lines)


def as_rich(table: pd.DataFrame, relative: bool = False):
    from rich.markup import escape
    from rich.table import Table

    out = Table(title="compare" + (" (normalised to a reference strategy)" if relative else ""), title_justify="left")
    for column in ("op", "strategy", "device", "dtype", "params", "base", "new", "ratio", "p", "verdict"):
        out.add_column(column, justify="right" if column in ("base", "new", "ratio", "p") else "left")
    for _, r in table.iterrows():
        style = VERDICT_STYLE.get(r["verdict"], "")
        out.add_row(escape(r["op"]), escape(r["strategy"]), r["device"], r["dtype"],
                    escape(params_label(r["params"])), _value(r["base_s"], relative), _value(r["new_s"], relative),
                    fmt_num(r["ratio"], 3, "×"), fmt_num(r["p_value"], 2),
                    f"[{style}]{escape(r['verdict'])}[/]" if style else escape(r["verdict"]))
    return out


def as_json(table: pd.DataFrame) -> str:
    records = json.loads(table.to_json(orient="records"))
    return json.dumps({"cases": records, "regressed": int(len(regressed(table)))}, indent=2)


def cmd_compare(args) -> int:
    from harness.cli import EXIT_FAIL, EXIT_OK, UsageError
    from harness.tables import console

    try:
        table = compare_runs(Path(args.base), Path(args.new), args.factor, args.alpha, args.relative_to)
    except ValueError as error:
        raise UsageError(str(error)) from None
    relative = bool(args.relative_to)
    if args.format == "md":
        text = as_markdown(table, relative)
    elif args.format == "json":
        text = as_json(table)
    else:
        text = None
    if args.output:
        Path(args.output).write_text(text if text is not None else as_markdown(table, relative))
    if text is not None:
        print(text)
    else:
        console().print(as_rich(table, relative))
        counts = table["verdict"].value_counts().to_dict()
        print(", ".join(f"{n} {v}" for v, n in counts.items()))
    bad = regressed(table)
    if len(bad):
        print(f"{len(bad)} regressed (factor {args.factor}, alpha {args.alpha})", file=sys.stderr)
        return EXIT_FAIL
    return EXIT_OK


def add_parser(sub) -> None:
    p = sub.add_parser("compare", help="compare two result directories; exit 1 on a regression")
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("--factor", type=float, default=1.10, help="median ratio beyond which a change counts (1.10)")
    p.add_argument("--alpha", type=float, default=0.002, help="Mann–Whitney U p-value threshold (0.002)")
    p.add_argument("--relative-to", action="append", metavar="STRATEGY",
                   help="normalise by this strategy's median in the same run and case (repeatable: "
                        "the first one present in a case is used)")
    p.add_argument("--format", choices=("table", "md", "json"), default="table")
    p.add_argument("-o", "--output", help="also write the Markdown (or JSON) to this file")
    p.set_defaults(func=cmd_compare)
