"""The report's first page in words: one paragraph per machine and mode
naming the strategy to use, the coverage table, the network shapes with
their names, and how the committed runs of one config agree. Every verdict
comes from ``harness.judging.analysis`` (`answer`, `winners`, `winner_text`,
`clearly_faster` through them); this module counts and words them."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pandas as pd

from harness.base.cases import POINT_LAYOUT_KEY, with_case_columns
from harness.base.checkout import ROOT
from harness.base.format import fmt_ratio_interval, fmt_ratio, params_label
from harness.judging import analysis
from harness.presenting.report.sections import machine_order, median_cell, training_step
from impls.training import BACKWARD, FORWARD, FORWARD_BACKWARD, MODES

INFERENCE, TRAINING = "inference", "training step"
# How many cases a paragraph names where the answer differs; the rest are in the answer table.
NAMED_EXCEPTIONS = 5


def _case_groups(rows: pd.DataFrame):
    """(op, params, dtype) -> that case's rows, in the rows' order."""
    return rows.groupby(["op", "params", "dtype"], sort=False)


def mode_rows(case: pd.DataFrame, kind: str) -> pd.DataFrame | None:
    """The rows that answer ``kind`` (INFERENCE: the forward; TRAINING: a
    training step, `sections.training_step`) in one case on one machine."""
    case = with_case_columns(case)
    if kind == INFERENCE:
        found = case[case["mode"] == FORWARD]
        return found if len(found) else None
    step = training_step(case)
    return step[1] if step else None


def _ratio_range(values: list[float]) -> str:
    values = sorted(v for v in values if analysis.finite(v))
    if not values:
        return ""
    if fmt_ratio(values[0]) == fmt_ratio(values[-1]):
        return fmt_ratio(values[0])
    return f"{fmt_ratio(values[0], '')}–{fmt_ratio(values[-1])} (median {fmt_ratio(statistics.median(values))})"


def first_screen_table(rows: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The report's first table, operator × device, for inference on every fit run: the strategy
    that is the answer in the most cases, and by how much it is faster, where it is the answer, than
    the library's own call (`analysis.library_call`: F.max_pool2d(return_indices=True),
    F.max_unpool1d/2d, for the shift operators the fastest single library call), the seed's naive
    version (its baseline) and the seed's fastest version (`analysis.seed_versions`). A device an
    operator was not measured on says so (the paragraphs below say why)."""
    rows = with_case_columns(rows)
    header = ["operator", "device", "use", "× the library's call", "× the seed's naive", "× the seed's fastest",
              "cases"]
    table = []
    devices = [device for device in ("cpu", "cuda") if device in set(rows["device"])]
    for op in dict.fromkeys(rows["op"]):
        seeds = analysis.seed_versions(op)
        for device in devices:
            found = rows[(rows["op"] == op) & (rows["device"] == device) & (rows["mode"] == FORWARD)]
            answers = []
            for _, case in found.groupby(["machine", "params", "dtype"], sort=False):
                answer = analysis.answer(case)
                if answer is not None:
                    answers.append((answer, case))
            if not answers:
                table.append([op, device, "not measured", "", "", "", ""])
                continue
            counts = pd.Series([answer.best["strategy"] for answer, _ in answers]).value_counts()
            use = counts.index[0]
            factors: dict[str, list[float]] = {"call": [], "naive": [], "fastest": []}
            for answer, case in answers:
                if answer.best["strategy"] != use:
                    continue
                for key, other in (("call", analysis.library_call(case)),
                                   ("naive", analysis.fastest_of(case, [analysis.baseline_name(op)])),
                                   ("fastest", analysis.fastest_of(case, seeds))):
                    if other is not None:
                        factors[key].append(analysis.ratio(answer.best, other))
            machines = found["machine"].nunique()
            table.append([op, device, f"{use} ({counts.iloc[0]} of {len(answers)})",
                          _ratio_range(factors["call"]) or "–", _ratio_range(factors["naive"]) or "–",
                          _ratio_range(factors["fastest"]) or "–",
                          f"{len(answers)} on {machines} machine{'s' if machines != 1 else ''}"])
    return header, table


def answer_paragraph(machine: str, kind: str, rows: pd.DataFrame) -> str | None:
    """One machine and mode in words: the strategy that wins the most cases
    (clearly or in a tie, `analysis.winners`), by how much it beats the
    fastest built-in and the seed where it wins clearly (the range over
    those cases), and the cases where the answer is another strategy."""
    answers = []
    for (op, params, dtype), case in _case_groups(rows):
        found_rows = mode_rows(case, kind)
        if found_rows is None:
            continue
        answers.append((op, params, dtype, analysis.answer(found_rows)))
    if not answers:
        return None
    counts: dict[str, int] = {}
    for *_, found in answers:
        for name in analysis.winners(found):
            counts[name] = counts.get(name, 0) + 1
    ops = list(dict.fromkeys(op for op, *_ in answers))
    where = f"{machine}, {kind} ({len(answers)} case{'s' if len(answers) != 1 else ''}: {', '.join(ops)})"
    if not counts:
        return f"{where}: no strategy passed the check in any case, so there is no answer."
    best = max(sorted(counts), key=counts.get)
    clear = [found for *_, found in answers if found is not None and found.clear and
             str(found.best["strategy"]) == best]
    # Not clear: a tie, or a win the data cannot claim (timers disagree, strategies not timed).
    tied = sum(1 for *_, found in answers if found is not None and found.tie and best in analysis.winners(found))
    unclear = counts[best] - len(clear) - tied
    text = (f"{where}: use {best}, the fastest in {counts[best]} of {len(answers)} cases ({len(clear)} clearly"
            + (f", {tied} tied with another" if tied else "")
            + (f", {unclear} where no clear win can be claimed" if unclear else "") + ").")
    builtin = [found.over_builtin for found in clear if found.builtin != best]
    seed = [found.over_seed for found in clear]
    beats = []
    if _ratio_range(builtin):
        beats.append(f"{_ratio_range(builtin)} faster than the fastest built-in")
    if any(found.builtin == best for found in clear):
        beats.append(f"itself the fastest built-in in {sum(found.builtin == best for found in clear)}")
    if _ratio_range(seed):
        beats.append(f"{_ratio_range(seed)} faster than the seed")
    if beats:
        text += " Where it wins clearly it is " + "; ".join(beats) + " (the range over those cases)."
    others = [(op, params, dtype, found) for op, params, dtype, found in answers
              if best not in analysis.winners(found)]
    if not others:
        return text + " It is the answer at every size measured."
    named = "; ".join(f"{op} {params_label(params)}{'' if dtype == 'float32' else ' ' + dtype}: "
                      + (analysis.winner_text(found) or "none passed")
                      for op, params, dtype, found in others[:NAMED_EXCEPTIONS])
    more = f"; and {len(others) - NAMED_EXCEPTIONS} more (the answer table)" if len(others) > NAMED_EXCEPTIONS else ""
    return text + f" The answer is another strategy in {len(others)} case{'s' if len(others) != 1 else ''}: {named}{more}."


def answer_paragraphs(rows: pd.DataFrame) -> list[str]:
    """A paragraph per machine and mode (inference, then a training step where one ran)."""
    rows = with_case_columns(rows)
    paragraphs = []
    for machine in machine_order(rows):
        on_machine = rows[rows["machine"] == machine]
        kinds = [INFERENCE] + ([TRAINING] if (on_machine["mode"] != FORWARD).any() else [])
        for kind in kinds:
            paragraph = answer_paragraph(machine, kind, on_machine)
            if paragraph:
                paragraphs.append(paragraph)
    return paragraphs


def coverage_table(rows: pd.DataFrame, operators: list[str]) -> tuple[list[str], list[list[str]]]:
    """Machine × operator × mode: how many cases and runs measured each, or "not run"."""
    rows = with_case_columns(rows)
    header = ["machine", "operator", *MODES]
    table = []
    for machine in machine_order(rows):
        on_machine = rows[rows["machine"] == machine]
        for op in operators:
            cells = [machine, op]
            for mode in MODES:
                found = on_machine[(on_machine["op"] == op) & (on_machine["mode"] == mode)]
                cases = found.groupby(["params", "dtype"]).ngroups
                runs = found["run_dir"].nunique()
                cells.append(f"{cases} case{'s' if cases != 1 else ''}, {runs} run{'s' if runs != 1 else ''}"
                             if cases else "not run")
            table.append(cells)
    return header, table


# ------------------------------------------------------------------ network shapes
MODELS_YAML = ROOT / "configs" / "models.yaml"
_SHAPE = re.compile(r"^\s*#\s*shape:\s*(.*)$")


def network_names(path: Path = MODELS_YAML) -> dict[tuple[str, str], tuple[str, str, str, str]]:
    """(op, params as canonical JSON) -> (network, layer, source, change from
    the paper), from the ``# shape: network | layer | source | change`` line
    above each entry of configs/models.yaml (its one home)."""
    import yaml

    if not path.is_file():
        return {}
    names, pending = {}, None
    lines = path.read_text().splitlines()
    for index, line in enumerate(lines):
        found = _SHAPE.match(line)
        if found:
            parts = [part.strip() for part in found.group(1).split("|")]
            pending = tuple((parts + ["", "", "", ""])[:4])
            continue
        if line.startswith("  - op:") and pending:
            # The entry: this line and its indented continuation, read as YAML.
            block = [line[2:]]
            for rest in lines[index + 1:]:
                if not rest.startswith("    "):
                    break
                block.append(rest[2:])
            entry = (yaml.safe_load("\n".join(block)) or [{}])[0]
            params = json.dumps(entry.get("params") or {}, sort_keys=True)
            names[(str(entry.get("op")), params)] = tuple("" if part == "-" else part for part in pending)
            pending = None
    return names


def canonical(params: str) -> str:
    """A point's params as configs/models.yaml names it: its layout, a report point's own key
    (``load.layout_in_params``), is not the network's."""
    return json.dumps({key: value for key, value in json.loads(params).items() if key != POINT_LAYOUT_KEY}, sort_keys=True)


def network_table(rows: pd.DataFrame, cell) -> tuple[list[str], list[list[str]]]:
    """The models sweep's cases named: network, layer, operator, shape, the
    change from the paper, the machine, then ``cell(case rows, kind)`` for
    inference and for a training step."""
    names = network_names()
    rows = with_case_columns(rows)
    header = ["network", "layer", "operator", "shape", "change from the paper", "machine", INFERENCE, TRAINING]
    table = []
    for (op, params, dtype), case in _case_groups(rows):
        network, layer, _source, change = names.get((op, canonical(params)), ("?", "?", "?", ""))
        for machine in machine_order(case):
            on_machine = case[case["machine"] == machine]
            table.append([network, layer, op, params_label(params) + ("" if dtype == "float32" else f" {dtype}"),
                          change or "–", machine, cell(on_machine, INFERENCE), cell(on_machine, TRAINING)])
    return header, table


def network_sources(rows: pd.DataFrame) -> list[str]:
    """Each network's sources, once: "LeNet: BVLC/caffe ..."."""
    names = network_names()
    sources: dict[str, list[str]] = {}
    for (op, params, _dtype), _case in _case_groups(rows):
        network, _layer, source, _change = names.get((op, canonical(params)), ("?", "?", "", ""))
        if source and source not in sources.setdefault(network, []):
            sources[network].append(source)
    return [f"{network}: {'; '.join(found)}" for network, found in sources.items() if found]


def shape_cell(case: pd.DataFrame, kind: str) -> str:
    """A network-shape cell: the winner (or tie) with its median and its lead over the seed."""
    found_rows = mode_rows(case, kind)
    if found_rows is None:
        return "not run"
    found = analysis.answer(found_rows)
    if found is None:
        return "none passed"
    mode = str(found_rows["mode"].iloc[0])
    text = (f"{' / '.join(analysis.winners(found))}{f' ({analysis.tie_label(found)})' if found.tie else ''}: "
            f"{median_cell(found.best)}")
    if kind == TRAINING and mode == BACKWARD:
        text += " (backward)"
    if analysis.finite(found.over_seed) and found.clear:
        text += f", {fmt_ratio_interval(found.over_seed, found.seed_interval)} the seed"
    return text


# ------------------------------------------------------------------ runs and their agreement
def disagreements(published: pd.DataFrame, other: pd.DataFrame) -> list[tuple[str, str, str, str]]:
    """Where another fit run contradicts the published one, by the A/A rule
    (`analysis.contradictions`: one run's clear winner clearly slower than
    another strategy in the other run; a tie is no claim): (case label,
    which run named the winner, "published" or "other", the winner, the
    strategy clearly faster than it in the other run)."""
    found = []
    for key, named, winner, rival in analysis.contradictions(published, other):
        op, _device, dtype, params, mode = key[:5]
        label = f"{op} {params_label(params)} {dtype}" + ("" if mode == FORWARD else f" {mode}")
        found.append((label, "published" if named == "first" else "other", winner, rival))
    return found


def agreement_table(shown: pd.DataFrame, metas: list[dict], extra: list[tuple[dict, pd.DataFrame]]):
    """Per config and machine: the fit runs committed, the ones published,
    and for each other fit run the cases where it contradicts the published
    one (`disagreements`: the A/A rule). ``extra``: the fit runs left out, (meta, rows)."""
    def config(meta):
        return str((meta.get("config") or {}).get("name") or "?")

    published: dict[tuple[str, str], list[dict]] = {}
    for meta in metas:
        if meta.get("unfit_reasons"):
            continue
        for machine in dict.fromkeys(shown.loc[shown["run_dir"] == meta["directory"], "machine"]):
            published.setdefault((config(meta), machine), []).append(meta)
    others: dict[tuple[str, str], list[tuple[dict, pd.DataFrame]]] = {}
    for meta, rows in extra:
        for machine in dict.fromkeys(rows["machine"]):
            others.setdefault((config(meta), machine), []).append((meta, rows[rows["machine"] == machine]))
    header = ["config", "machine", "fit runs", "published",
              "other fit runs: contradictions (a clear winner clearly slower than another strategy in the other run)"]
    table = []
    for key in sorted(set(published) | set(others)):
        shown_runs = published.get(key, [])
        mine = shown[shown["run_dir"].isin([m["directory"] for m in shown_runs]) & (shown["machine"] == key[1])]
        notes = []
        for meta, rows in others.get(key, []):
            differ = disagreements(mine, rows)
            notes.append(f"{meta.get('run_id', '?')[-4:]}: " + ("; ".join(
                f"{case}: {winner}, clear in the {named} run, clearly slower than {rival} in the "
                f"{'other' if named == 'published' else 'published'}" for case, named, winner, rival in differ)
                if differ else "none"))
        table.append([key[0], key[1], str(len(shown_runs) + len(others.get(key, []))),
                      ", ".join(str(m.get("run_id", "?"))[-4:] for m in shown_runs) or "none",
                      " · ".join(notes) or "–"])
    return header, table


__all__ = ["answer_paragraphs", "coverage_table", "network_table", "agreement_table", "disagreements",
           "INFERENCE", "TRAINING", "FORWARD_BACKWARD"]
