"""Building the whole report: ``build(dirs, out)`` and the command line of
``python report.py RESULT_DIR [RESULT_DIR ...] [-o OUT]``."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from pathlib import Path

from harness.base import plugins
from harness.base.checkout import ROOT
from harness.base.errors import ResultError
from harness.base.format import params_label, slug
from harness.judging import analysis
from harness.presenting.report.document import Doc, render_html, render_markdown
from harness.presenting.report.figures import (
    FigureDir,
    figure_gbps,
    figure_speedup,
    figure_times,
    scaling_figures,
)
from harness.presenting.report.load import case_title, load
from harness.presenting.report.sections import (
    ANSWER_NOTE,
    UNSTABLE_MARK,
    answer_table,
    case_table,
    commits_sentence,
    conclusion,
    defects_section,
    environment_table,
    hardware_table,
    machines_sentence,
    machines_table,
    mode_suffix,
    run_warnings,
    section_intro,
    sections,
    slow_start_sentence,
    training_sentence,
    what_ran_where,
)
from harness.results import store

DOC = """The comparison report: ``python report.py RESULT_DIR [RESULT_DIR ...] [-o OUT]``."""


INTRO = ("Every number below was measured by scatterbench on the machine named beside it: the median "
         "of per-call timings (SPEC 3), % of ceiling = bytes the operator must move / that device's "
         "measured copy bandwidth / median time. Strategies that failed the float64-oracle check are "
         "listed with their status, never dropped; inexact ones are hatched in the figures. % of ceiling "
         "above 100 means the case's working set stayed in cache (the ceiling is a DRAM copy), or, on a "
         "GPU, that a kernel which mostly reads outran a copy, whose rate counts equal reads and writes. A case "
         "measured by several runs on one machine shows the latest run's measurement. The timed call "
         "allocates its outputs afresh, as a user's call does: on the CPU the OS zeroes a fresh output's "
         "pages on first touch, which the copy ceiling (measured into a buffer already touched) does not "
         "pay, so strategies with outputs of tens of MB stay well below 100 % even when their loop runs at "
         "the copy bandwidth. The runs table gives that cost as each run measured it: 'fresh output' is "
         "the write bandwidth into a newly allocated 256 MiB buffer, from numpy's allocator (which asks "
         "for huge pages) and from torch's.")
TRAINING_NOTE = ("Training step: the fastest correct strategy for one training step of the operator "
                 "(forward+backward, SPEC 1.5; backward alone where only it ran), its median, and how many times "
                 "faster than the seed's own strategy with its plain-loop backward in the seed's style (or the "
                 "seed's torch code differentiated by autograd, where the seed is torch code).")
LIGHT_NOTE = ("This is the light version the dashboard keeps per run: tables, conclusions and scaling plots, "
              "without the per-case figures; python report.py RESULT_DIR writes the full report.")
RUNS_NOTE = ("Ceiling vs history: each device's copy ceiling against the median of the earlier runs on the same "
             "machine. Load: the machine's 1, 5 and 15-minute load averages when the run started and ended, and "
             "the highest 1-minute load any case finished under; at or above the core count, other work competed "
             "with the timed calls.")


def runs_section(doc: Doc, rows, metas: list[dict]) -> None:
    """Where the numbers come from: runs, their warnings, the hardware, how noisy they were, how to rerun them."""
    doc.heading(2, "Runs")
    doc.table(*environment_table(metas, rows))
    doc.para(RUNS_NOTE)
    for meta in metas:
        done = int((rows["run_id"] == meta.get("run_id")).sum()) if "run_id" in rows else None
        for warning in run_warnings(meta, done):
            doc.para(warning)
    doc.heading(2, "Hardware")
    doc.table(*hardware_table(metas))
    timed = rows[rows["median_s"].notna()]
    noisy = int(sum(analysis.unstable(row) for _, row in timed.iterrows()))
    if noisy:
        doc.para(f"{noisy} of {len(timed)} timed cases are marked {UNSTABLE_MARK} unstable in the tables below: "
                 f"their IQR exceeds {100 * analysis.UNSTABLE_REL_IQR:.0f} % of their median.")
    slow_started = slow_start_sentence(timed)
    if slow_started:
        doc.para(slow_started)
    doc.para("Reproduce each run from the project root with:")
    doc.code("\n".join(reproduce_line(m) for m in metas))
    lost = [m for m in metas if not config_found(m)]
    if lost:
        doc.para("The config of " + ", ".join(f"run {m.get('run_id', '?')}" for m in lost) + " is not at the path "
                 "recorded (another machine's file, or a path relative to where its author stood); the whole config "
                 "is stored in the run's meta.json under \"config\": save it as YAML under that name to rerun.")


def config_found(meta: dict) -> bool:
    """Whether the run's recorded config path names a file from the project root."""
    path = meta.get("config_file")
    return bool(path) and (ROOT / str(path)).is_file()


# The options of `run` that change what a run measured, kept in its Reproduce
# line; the others (where it wrote, --resume, progress, tables) do not.
_SELECTING = {"--op": True, "--strategy": True, "--shard": True, "--instrument": True, "--isolate": False}


def selecting_options(command: str | None) -> list[str]:
    """The options of a run's recorded command that chose what it measured
    (``--op maxpool2d``, each ``--strategy``, ...), in their order: a models
    run of one operator reproduces as that run, not the whole config."""
    try:
        words = shlex.split(command or "")
    except ValueError:  # a hand-edited meta.json; the config alone is still a run of it
        return []
    kept, index = [], 0
    while index < len(words):
        flag, _, value = words[index].partition("=")
        takes_value = _SELECTING.get(flag)
        if takes_value is None:
            index += 1
            continue
        if takes_value and not value:
            value = words[index + 1] if index + 1 < len(words) else ""
            index += 1
        kept += [flag, value] if takes_value else [flag]
        index += 1
    return kept


def reproduce_line(meta: dict) -> str:
    setting = plugins.env_setting(meta)
    options = "".join(f" {shlex.quote(word)}" for word in selecting_options(meta.get("command")))
    return (f"make venv && {setting + ' ' if setting else ''}.venv/bin/python -m harness run "
            f"{shlex.quote(str(meta.get('config_file') or '?'))}{options}")


def case_section(doc: Doc, group, figures: FigureDir | None) -> None:
    """One case: its table, the notes its marks need, and (full report) its three figures."""
    first = group.iloc[0]
    title = case_title(first)
    doc.heading(4, title)
    header, table_rows, best, notes = case_table(group)
    doc.table(header, table_rows, best)
    for note in notes:
        doc.para(note)
    if figures is None:
        return
    mode = first.get("mode", "forward")
    stem = slug(f"{first['op']}-{params_label(first['params'])}-{first['machine']}-{first['dtype']}"
                + ("" if mode == "forward" else f"-{mode}"))  # forward keeps its published figure names
    baseline = analysis.baseline_name(first["op"]) or "seed"
    doc.figure(figure_times(group, figures, stem + "-time"), f"median time, {title}")
    doc.figure(figure_gbps(group, figures, stem + "-gbps"), f"achieved GB/s against the ceiling, {title}")
    speed = figure_speedup(group, figures, stem + "-speedup", baseline)
    if speed:
        doc.figure(speed, f"speedup over {baseline}, {title}")


def answer_section(doc: Doc, rows, metas: list[dict]) -> None:
    """The answer first: per operator and size, per machine side by side, the
    fastest correct strategy, from fit runs only."""
    doc.heading(2, "The answer")
    if rows.empty:
        doc.para("No run here is fit to be judged, so there is no answer: every run's tables are in the appendix, "
                 "headed with the reasons.")
        return
    doc.table(*answer_table(rows))
    doc.para(ANSWER_NOTE)
    training = training_sentence(rows)
    if training:
        doc.para(TRAINING_NOTE + " " + training)
    commits = commits_sentence(rows, metas)
    if commits:
        doc.para(commits)


MODELS_CONFIG = "models"  # configs/models.yaml's name: the shapes of published networks (issue 32)


def network_shapes_section(doc: Doc, rows, metas: list[dict]) -> None:
    """The models sweep's own answer (SPEC 1.5): at the shapes real networks
    give these layers, the fastest strategy for inference and for a training
    step side by side, from fit runs of configs/models.yaml only."""
    shapes = rows[rows["run_dir"].isin(models_directories(metas))]
    if shapes.empty:
        return
    doc.heading(2, "Network shapes: inference and training")
    ops = ", ".join(dict.fromkeys(shapes["op"]))
    doc.para(f"configs/models.yaml puts each operator at the shapes its layers have in published networks (each "
             f"entry names the network, the layer and where the shape was verified). Measured here: {ops}. Each "
             f"of its cases has its table in its operator's section below, without the per-case figures (three "
             f"figures for each of its {shapes.groupby(['op', 'params', 'mode']).ngroups} cases would add tens of "
             f"MB to every published report).")
    doc.table(*answer_table(shapes))
    training = training_sentence(shapes)
    if training:
        doc.para(training)


def models_directories(metas: list[dict]) -> set[str]:
    """The runs of configs/models.yaml among ``metas``."""
    return {m["directory"] for m in metas if (m.get("config") or {}).get("name") == MODELS_CONFIG}


def machines_section(doc: Doc, op: str, op_rows, metas: list[dict]) -> None:
    """Where an operator ran on several machines (or devices): each size's strategies side by side."""
    for (params, dtype, mode), case in op_rows.groupby(["params", "dtype", "mode"], sort=False):
        if case["machine"].nunique() < 2:
            continue
        doc.heading(4, f"{op} {params_label(params)} {dtype}{mode_suffix(mode)} · machines side by side")
        doc.table(*machines_table(case))
        commits = commits_sentence(case, metas)
        doc.para(machines_sentence(case) + " Each cell: median · % of that machine's copy ceiling · rank on "
                 "that machine among the exact strategies returning the whole output." + (f" {commits}" if commits
                                                                                            else ""))


def operator_section(doc: Doc, op: str, op_rows, metas: list[dict], figures: FigureDir, light: bool) -> None:
    """Machines side by side, then per machine and dtype: where the numbers
    come from, the conclusion, each case, the scaling figures."""
    doc.heading(2, op)
    if op_rows["machine"].nunique() > 1:
        doc.heading(3, f"{op} across machines")
        machines_section(doc, op, op_rows, metas)
    for (machine, dtype, mode), section in sections(op_rows):
        doc.heading(3, f"{op} · {machine} · {dtype}{mode_suffix(mode)}")
        doc.para(section_intro(section, metas))
        verdict_text, *failures = conclusion(op, section)
        doc.para("Conclusion: " + verdict_text)
        for sentence in failures:
            doc.para(sentence)
        models = models_directories(metas)
        for _, group in section.groupby("params", sort=False):
            # a models run's case is tabled, not drawn (see network_shapes_section)
            drawn = not light and not group["run_dir"].isin(models).all()
            case_section(doc, group, figures if drawn else None)
        for title, stem in scaling_figures(section, figures):
            doc.heading(4, title)
            doc.figure(stem, title)


def unfit_appendix(doc: Doc, rows, metas: list[dict]) -> None:
    """The runs the fitness rule (`analysis.run_unfit_reasons`) refuses: their
    tables, shown for the record and judged nowhere (no answer, winner,
    speed-up, flip or % of ceiling comes from them)."""
    unfit = [meta for meta in metas if meta.get("unfit_reasons")]
    if not unfit:
        return
    doc.heading(2, "Appendix: runs not fit to be judged")
    doc.para(f"These runs fail the suite's one fitness rule (the dashboard's, `run`'s summary's and `make publish`'s): a 1-minute load at or "
             f"above the core count at the start, at the end or when a case finished, or more than "
             f"{100 * analysis.MAX_UNSTABLE_SHARE:.0f} % of the timed cases unstable. Their times are listed as "
             f"measured; nothing in the report above is drawn from them, and where a fit run measured the same "
             f"case on the same machine its measurement is the one shown above.")
    for meta in unfit:
        run_rows = rows[rows["run_dir"] == meta["directory"]]
        doc.heading(3, f"Run {meta.get('run_id', '?')}: {'; '.join(meta['unfit_reasons'])}")
        if run_rows.empty:
            doc.para("Every case of this run was measured again by a fit run: see above.")
            continue
        for _, group in run_rows.groupby(["op", "params", "dtype", "mode"], sort=False):
            first = group.iloc[0]
            doc.heading(4, case_title(first))
            header, table_rows, _best, notes = case_table(group, judged=False)
            doc.table(header, table_rows)
            for note in notes:
                doc.para(note)


def build(dirs, out, name: str = "report", light: bool = False, svg: bool | None = None,
          left_out: list[dict] = ()) -> Path:
    """Writes ``OUT/<name>.md`` and ``.html``. ``light`` (the dashboard's
    per-run reports): no per-case figures, PNG only, the HTML links its
    figures instead of embedding them. ``svg``: an SVG beside each PNG
    (default: unless ``light``). ``left_out``: runs the publisher left out
    for failing the fitness rule (`left_out_runs`), named with their
    machines and not shown."""
    out = store.writable_dir(Path(out), "the report")  # before any work: one line if it cannot be written
    figures = FigureDir(out / "figures", svg=not light if svg is None else svg)
    rows, metas = load(dirs)
    fit = rows[rows["fit"]]
    doc = Doc()
    doc.heading(1, "scatterbench report")
    doc.para(what_ran_where(rows, metas, list(left_out)))
    answer_section(doc, fit, metas)
    network_shapes_section(doc, fit, metas)
    doc.heading(2, "How to read it")
    doc.para(INTRO)
    if light:
        doc.para(LIGHT_NOTE)
    runs_section(doc, rows, metas)
    for op, op_rows in fit.groupby("op", sort=False):
        operator_section(doc, op, op_rows, metas, figures, light)
    defects_section(doc, rows, metas)
    unfit_appendix(doc, rows[~rows["fit"]], metas)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.md").write_text(render_markdown(doc, "figures"))
    (out / f"{name}.html").write_text(render_html(doc, figures.path, "scatterbench report", embed=not light))
    return out / f"{name}.md"


def left_out_runs(dirs) -> list[dict]:
    """Each left-out run's id, machines and reasons (`load`'s fitness rule).
    A run the rule finds fit is refused: leaving it out would hide a
    measurement the report could stand behind."""
    found = []
    for directory in dirs:
        rows, (meta,) = load([directory])
        if not meta["unfit_reasons"]:
            raise ResultError(f"{directory}: --left-out names a run the fitness rule finds fit; publish it instead")
        found.append({"run_id": meta.get("run_id", "?"), "machines": list(dict.fromkeys(rows["machine"])),
                      "unfit_reasons": meta["unfit_reasons"]})
    return found


def refuse_unfit(dirs) -> None:
    """Raises ResultError naming every run the fitness rule refuses, and why, in one line."""
    _rows, metas = load(dirs)
    unfit = [f"{m['directory']} ({', '.join(m['unfit_reasons'])})" for m in metas if m.get("unfit_reasons")]
    if unfit:
        raise ResultError(f"not fit to publish: {'; '.join(unfit)}; measure again on a quiet machine, drop the run "
                          f"from the list, or publish it in the appendix with ALLOW_UNFIT=1")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="report.py", description=DOC.splitlines()[0])
    parser.add_argument("dirs", nargs="+", help="result directories")
    parser.add_argument("-o", "--output", default="report", help="output directory (default ./report)")
    parser.add_argument("--name", default="report", help="file stem of the .md and .html (default report)")
    parser.add_argument("--light", action="store_true",
                        help="tables, conclusions and scaling plots only, figures linked (the dashboard's kind)")
    parser.add_argument("--fit-only", action="store_true",
                        help="refuse (exit 2) when any run fails the fitness rule, instead of putting it in the "
                             "appendix (make publish; ALLOW_UNFIT=1 lifts it)")
    parser.add_argument("--fresh-figures", action="store_true",
                        help="empty OUT/figures first, once the runs are read (and found fit with --fit-only), so "
                             "no figure of an older report lingers there")
    parser.add_argument("--left-out", action="append", default=[], metavar="DIR",
                        help="a run left out for failing the fitness rule: named, with the machine it leaves "
                             "missing, in the report's first paragraph (repeatable; make publish: docs/RUNS_LEFT_OUT)")
    args = parser.parse_args(argv)
    try:
        if args.fit_only:
            refuse_unfit([Path(d) for d in args.dirs])
        left_out = left_out_runs([Path(d) for d in args.left_out])  # before any figure is removed
        if args.fresh_figures:
            shutil.rmtree(Path(args.output) / "figures", ignore_errors=True)
        written = build([Path(d) for d in args.dirs], Path(args.output), args.name, light=args.light,
                        left_out=left_out)
    except ResultError as error:
        print(f"report.py: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk filled up while writing, say
        where = error.filename or args.output
        print(f"report.py: error: {where}: {store.describe_os_error(error, where)}", file=sys.stderr)
        return 2
    print(f"wrote {written} and {written.with_suffix('.html')}")
    return 0
