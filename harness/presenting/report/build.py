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
from harness.presenting.report import summary
from harness.presenting.report.figures import FigureDir, figure_times, scaling_figures
from harness.presenting.report.load import case_title, load
from harness.presenting.report.sections import (
    TIE_LEGEND,
    legend_notes,
    machine_order,
    UNSTABLE_MARK,
    UNSTABLE_NOTE,
    answer_table,
    case_table,
    commits_sentence,
    conclusion,
    defects_section,
    curves_agreement_table,
    environment_table,
    hardware_table,
    machines_sentence,
    machines_table,
    mode_suffix,
    part_faster_sentences,
    run_warnings,
    section_intro,
    sections,
    slow_start_sentence,
    training_sentence,
    what_ran_where,
)
from harness.results import floors, store
from impls.training import FORWARD_BACKWARD

DOC = """The comparison report: ``python report.py RESULT_DIR [RESULT_DIR ...] [-o OUT]``."""


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
        doc.para(f"{noisy} of {len(timed)} timed cases are marked {UNSTABLE_MARK} unstable in the case tables: "
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
_SELECTING = {"--op": True, "--strategy": True, "--shard": True, "--instrument": True, "--isolate": False,
              "--threads": True}


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
    """One case: its table, its own note (a tie), and (full report) its time
    figure: the GB/s and speed-up figures said again what its table's
    columns say, so they are no longer drawn."""
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
    doc.figure(figure_times(group, figures, stem + "-time"), f"median time, {title}")


def answer_cell_text(found: list[str], step: str | None) -> str:
    """sections._answer_cells' five quantities in words, for one machine's column."""
    name, median, pct, seed, builtin = found
    return name if median == "–" else (
        f"{name}: {median}, {pct} of ceiling, " + ("seed not timed" if seed == "–" else f"{seed} the seed") + ", "
        + ("the fastest built-in" if builtin == "is one" else "no built-in timed" if builtin == "–"
           else f"{builtin} the best built-in")) + (f"; training step: {step}" if step else "")


def answer_section(doc: Doc, rows, metas: list[dict], shapes_dirs: set[str], where: str = "") -> None:
    """The answer first: the operator × device table, a list item per machine and mode naming the
    strategy to use, what the GPU did not measure and why, ``where`` (which runs, which machines:
    the report's provenance, after the answers), each machine's answer table (the network shapes'
    cases have their own table), then the coverage table."""
    doc.heading(2, "The answer")
    if rows.empty:
        doc.para("No run here is fit to be judged, so there is no answer: every run's tables are in the appendix, "
                 "headed with the reasons.")
        if where:
            doc.para(where)
        return
    doc.para("Per operator and device, for inference, over every fit run below: the strategy to use (the fastest "
             "in most cases), and how much faster it is where it is the fastest, the range over those cases. "
             "At one size, on one machine and thread setting: that machine's answer table, below.")
    doc.table(*summary.first_screen_table(rows))
    # A list, a line per machine and mode: with seven machines and settings, paragraphs pushed the
    # last answers past the first screen (40 lines).
    doc.bullets(summary.answer_paragraphs(rows))
    gpu = gpu_status(rows, metas)
    if gpu:
        doc.para(gpu)
    if where:
        doc.para(where)
    tables = rows[~rows["run_dir"].isin(shapes_dirs)]
    for machine in machine_order(tables):
        doc.heading(3, f"Answer table · {machine}")
        doc.table(*answer_table(tables[tables["machine"] == machine]))
    # after the answers: which machine measured what is the reader's second question, not the first
    doc.heading(3, "What was measured where")
    doc.table(*summary.coverage_table(rows, list(dict.fromkeys(rows["op"]))))
    training = training_sentence(tables)
    if training:
        doc.para(training)
    commits = commits_sentence(tables, metas)
    if commits:
        doc.para(commits)


def gpu_status(rows, metas: list[dict]) -> str:
    """Where an operator has no GPU answer, why, said beside the answers: the GPU runs here, how far
    each got (cases written of those it planned, and what stopped it), and the operators they never
    reached; "" where every operator has a GPU answer, or no GPU ran at all (the first paragraph's
    "not measured" says so)."""
    gpu_runs = [meta for meta in metas if "cuda" in (meta.get("devices") or [])
                or meta.get("gpu_name")]
    measured = set(rows.loc[rows["device"] == "cuda", "op"]) if "device" in rows else set()
    operators = list(dict.fromkeys(rows["op"]))
    absent = [op for op in operators if op not in measured]
    if not gpu_runs or not absent:
        return ""
    said = []
    for meta in gpu_runs:
        done = int(rows.loc[rows["run_dir"] == meta.get("directory"), "case_id"].nunique())
        planned = meta.get("n_cases")
        how_far = (f"measured {done} of its {planned} cases" if done and isinstance(planned, int)
                   else f"ended {meta.get('status') or 'unfinished'}")
        stopped = f", stopped by {meta['interrupted_by']}" if meta.get("interrupted_by") else ""
        said.append(f"run {meta.get('run_id', '?')} ({meta.get('gpu_name') or 'a GPU'}) {how_far}{stopped}")
    runs = "; ".join(said)
    return (f"No GPU answer for {', '.join(absent)}: not measured on a GPU. {runs[:1].upper()}{runs[1:]}, before "
            f"reaching {'it' if len(absent) == 1 else 'them'}. The next lease's make gpu on configs/gpu.yaml "
            f"measures every operator (docs/GPU.md).")


MODELS_CONFIG = "models"  # configs/models.yaml's name: the shapes of published networks


def network_shapes_section(doc: Doc, rows, metas: list[dict]) -> None:
    """The models sweep's own answer (docs/SPEC.md §1.5): at the shapes real networks
    give these layers, named with their network, layer, source and any
    change from the paper, the fastest strategy for inference and for a
    training step side by side, from fit runs of configs/models.yaml only."""
    shapes = rows[rows["run_dir"].isin(models_directories(metas))]
    if shapes.empty:
        return
    doc.heading(2, "Network shapes: inference and training")
    doc.para("configs/models.yaml puts each operator at the shapes its layers have in published networks; each "
             "entry's network, layer, source and change from the paper are its \"# shape:\" line there. Each cell: "
             "the fastest correct strategy (two where they tie), its median and its lead over the seed; a training "
             "step is forward+backward. Their case tables are on the operators' pages, without figures.")
    header, table = summary.network_table(shapes, summary.shape_cell)
    doc.table(header, table)
    if any(UNSTABLE_MARK in cell for row in table for cell in row):
        doc.para(UNSTABLE_NOTE)
    sources = summary.network_sources(shapes)
    if sources:
        doc.para("Sources: " + "; ".join(sources) + ".")
    training = training_sentence(shapes)
    if training:
        doc.para(training)


def models_directories(metas: list[dict]) -> set[str]:
    """The runs of configs/models.yaml among ``metas``."""
    return {m["directory"] for m in metas if (m.get("config") or {}).get("name") == MODELS_CONFIG}


def machines_section(doc: Doc, op: str, op_rows, metas: list[dict]) -> None:
    """Where an operator ran on several machines (or devices): each size's strategies side by side."""
    # What a cell holds and which commits the machines ran: said once for the operator, not under every case.
    commits = commits_sentence(op_rows, metas)
    doc.para("Each cell: median · % of that machine's copy ceiling · rank on that machine among the exact "
             "strategies returning the whole output." + (f" {commits}" if commits else ""))
    for (params, dtype, mode), case in op_rows.groupby(["params", "dtype", "mode"], sort=False):
        if case["machine"].nunique() < 2:
            continue
        doc.heading(4, f"{op} {params_label(params)} {dtype}{mode_suffix(mode)} · machines side by side")
        doc.table(*machines_table(case))
        doc.para(machines_sentence(case))


def operator_section(doc: Doc, op: str, op_rows, metas: list[dict], figures: FigureDir, light: bool,
                     level: int = 2) -> None:
    """Machines side by side, then per machine and dtype: where the numbers
    come from, the conclusion, each case, the scaling figures. ``level``:
    the operator's heading (1 on a page of its own)."""
    doc.heading(level, op)
    if op_rows["machine"].nunique() > 1:
        doc.heading(level + 1, f"{op} across machines")
        machines_section(doc, op, op_rows, metas)
    for (machine, dtype, mode), section in sections(op_rows):
        doc.heading(level + 1, f"{op} · {machine} · {dtype}{mode_suffix(mode)}")
        doc.para(section_intro(section, metas))
        verdict_text, *failures = conclusion(op, section)
        doc.para("Conclusion: " + verdict_text)
        for sentence in failures:
            doc.para(sentence)
        if mode == FORWARD_BACKWARD:
            both = op_rows[(op_rows["machine"] == machine) & (op_rows["dtype"] == dtype)]
            for sentence in part_faster_sentences(both):
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
    doc.para(f"These runs fail the suite's one fitness rule (the dashboard's, `run`'s summary's and `make publish`'s): "
             f"{analysis.FITNESS_RULE}. Their times are listed as "
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


BUILTIN_RULE = ("× best built-in: how many times faster the fastest strategy is than the fastest built-in of its "
                "case. A built-in is a strategy whose operation (the scatter, gather, fold, convolution, unpool or "
                "pool) is one call of its library's API, declared builtin=True on the strategy (impls/*.py): "
                "numpy's and torch's indexed assignment (index_put_), scatter_, scatter_add_, index_add_, F.fold, "
                "conv2d, conv_transpose2d, max_pool2d, max_unpool, put_along_axis, a zero-copy unfold or "
                "sliding_window_view, JAX's .at[] and lax convolutions; an elementwise multiply or division by the "
                "mask or coverage, a zero-filled output and layout views around the call are allowed. Loops, chains "
                "of slice operations, torch.compile or PyTensor graphs and hand-written kernels (numba, Triton) are "
                "not built-ins. 'is one' where the fastest is itself that built-in; – where none was timed.")
ANSWER_LEGEND = ("Answer tables: per operator, size and dtype, the fastest strategy that passed the float64-oracle "
                 "check exactly and returns the operator's whole output; its median time per call and its % of that "
                 "machine's copy ceiling. × seed: how many times faster than the seed's original strategy. "
                 + TIE_LEGEND + " "
                 "A faster strategy that is only inexact is named beside it. Training step: the "
                 "fastest for one training step (forward+backward, docs/SPEC.md §1.5; backward alone where only it ran) and "
                 "its lead over the seed's strategy with its plain-loop backward (or the seed's torch code "
                 "differentiated by autograd).")
CASE_LEGEND = ("Case tables (on the operators' pages): every strategy of the case fastest first, the fastest in bold "
               "(none in a tie). median and IQR of the per-call times, n the samples they rest on; GB/s = the bytes "
               "the operator must move / median; % of ceiling = that over the device's measured copy bandwidth "
               "(above 100 where the working set stayed in cache, or on a GPU where a kernel that mostly reads "
               "outran a copy); × seed as above; rel err and max abs err against the float64 oracle. Strategies "
               "that failed the check keep their row with their status; inexact ones are hatched in the figures. "
               "A case measured by several published runs on one machine shows the latest run's measurement. The "
               "timed call allocates its outputs afresh, as a user's call does: on the CPU the OS zeroes a fresh "
               "output's pages on first touch, which the copy ceiling (a buffer already touched) does not pay; the "
               "runs table's 'fresh output' is that write bandwidth into a new 256 MiB buffer, per allocator.")


def legend_section(doc: Doc, rows) -> None:
    """Each column and mark of every table explained once."""
    doc.heading(2, "How to read the tables")
    for text in (ANSWER_LEGEND, BUILTIN_RULE, CASE_LEGEND, *legend_notes(rows)):
        doc.para(text)


def runs_list_section(doc: Doc, rows, metas: list[dict], left_out: list[dict]) -> None:
    """How many fit runs of each config and machine are committed, which are
    published, and where the others contradict them (the A/A rule)."""
    doc.heading(2, "Runs and their agreement")
    fit_extra = [(run["meta"], run["rows"]) for run in left_out if not run["unfit_reasons"]]
    doc.para(f"Every run committed under results/ is listed in docs/RUNS (published here) or docs/RUNS_LEFT_OUT "
             f"(with its reason): {len(metas)} published, {len(left_out)} left out. Per config and machine, the fit "
             f"runs committed, and for each fit run left out the cases measured by both where the two contradict "
             f"each other by the A/A rule (`analysis.contradictions`): one run's clear winner clearly slower than "
             f"another strategy in the other run. A tie in either run is no claim, so it contradicts nothing.")
    doc.table(*summary.agreement_table(rows[rows["fit"]], metas, fit_extra))
    doc.table(["left out", "reason"], [[run["run_id"], run["reason"]] for run in left_out])
    header, agreement = curves_agreement_table([*metas, *(meta for meta, _ in fit_extra)])
    if agreement:
        doc.para(f"The bandwidth curves the floors by size rest on, where runs measured them apart on one machine, "
                 f"thread setting and curve method (a run that reused the cached curve is not a second "
                 f"measurement; from method 4 each point is the fastest of its tries, before it their median; "
                 f"from method 5 each try is the fastest of several places in its buffer): how far "
                 f"each run's read and write rates stray from their median at any size. Past "
                 f"±{floors.CURVES_AGREE_PCT:.0f} %, a floor moves between runs by that much, and every % of "
                 f"floor with it.")
        doc.table(header, agreement)


def page_links(ops: list[str], main: str, sub_page: bool) -> list[tuple[str, str]]:
    """The navigation line: the main page (and, from a sub-page, its legend),
    every operator's page and the defects page, relative to the main page or
    to a sub-page (in the folder ``main.lower()``, `build`'s)."""
    up, into = ("../", "") if sub_page else ("", f"{main.lower()}/")
    return [("Report", f"{up}{main}.md")] + ([("legend", f"{up}{main}.md#how-to-read-the-tables")] if sub_page
                                            else []) + [
        (page, f"{into}{page}.md") for page in [*ops, "defects"]]


def build(dirs, out, name: str = "report", light: bool = False, svg: bool | None = None,
          left_out: list[dict] = (), pages: bool = False) -> Path:
    """Writes ``OUT/<name>.md`` and ``.html``. ``light`` (the dashboard's
    per-run reports): no per-case figures, PNG only, the HTML links its
    figures instead of embedding them. ``svg``: an SVG beside each PNG
    (default: no, docs/figures holds one format; report.py asks for them
    unless ``--png-only`` or ``--light``, as `make report` documents). ``left_out``: committed runs the publisher left out
    (`left_out_runs`), counted and compared, not shown. ``pages`` (make
    publish): the operators' sections and the defects on pages of their own,
    ``OUT/report/<op>.md`` and ``.html``, linked both ways, their HTML
    linking the figures; else one page holds everything."""
    out = store.writable_dir(Path(out), "the report")  # before any work: one line if it cannot be written
    figures = FigureDir(out / "figures", svg=bool(svg) and not light)
    rows, metas = load(dirs)
    left_out = list(left_out)
    fit = rows[rows["fit"]]
    ops = list(dict.fromkeys(fit["op"]))
    doc = Doc()
    doc.heading(1, "scatterbench report")
    if pages:
        doc.links(page_links(ops, name, sub_page=False), "Per operator (case tables, figures, conclusions):")
    answer_section(doc, fit, metas, models_directories(metas), what_ran_where(rows, metas, left_out))
    network_shapes_section(doc, fit, metas)
    legend_section(doc, rows)
    if light:
        doc.para(LIGHT_NOTE)
    if left_out:
        runs_list_section(doc, rows, metas, left_out)
    runs_section(doc, rows, metas)
    out.mkdir(parents=True, exist_ok=True)
    details = []
    for op, op_rows in fit.groupby("op", sort=False):
        if pages:
            page = Doc()
            page.links(page_links(ops, name, sub_page=True), "Pages:")
            operator_section(page, op, op_rows, metas, figures, light, level=1)
            details.append((op, page))
        else:
            operator_section(doc, op, op_rows, metas, figures, light)
    defects = Doc()
    if pages:
        defects.links(page_links(ops, name, sub_page=True), "Pages:")
    defects_section(defects, rows, metas, level=1 if pages else 2)
    if pages:
        details.append(("defects", defects))
    else:
        doc.blocks += defects.blocks
    unfit_appendix(doc, rows[~rows["fit"]], metas)
    (out / f"{name}.md").write_text(render_markdown(doc, "figures"))
    (out / f"{name}.html").write_text(render_html(doc, figures.path, "scatterbench report", embed=not light and not pages))
    if pages:
        folder = out / name.lower()
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        for page_name, page in details:
            (folder / f"{page_name}.md").write_text(render_markdown(page, "../figures"))
            (folder / f"{page_name}.html").write_text(render_html(page, figures.path, f"scatterbench report: {page_name}",
                                                                  embed=False, figure_prefix="../figures"))
    return out / f"{name}.md"


UNFIT_REASON = "unfit"  # the word a docs/RUNS_LEFT_OUT reason starts with when the fitness rule refuses the run


def read_left_out(path) -> list[tuple[Path, str]]:
    """docs/RUNS_LEFT_OUT: one committed run a line, its directory then why it
    is left out ("unfit: ..." where the fitness rule refuses it; any other
    reason for a fit run). Blank lines and # comments are skipped."""
    entries = []
    for number, line in enumerate(Path(path).read_text().splitlines(), start=1):
        text = line.split("#", 1)[0].strip() if line.lstrip().startswith("#") else line.strip()
        if not text:
            continue
        directory, _, reason = text.partition(" ")
        if not reason.strip():
            raise ResultError(f"{path}:{number}: {directory} is left out without a reason")
        entries.append((Path(directory), reason.strip()))
    return entries


def left_out_runs(entries) -> list[dict]:
    """Each left-out run's id, machines, fitness (`load`'s rule), reason,
    meta and rows. ``entries``: directories, or (directory, reason) pairs. A
    run left out as unfit must fail the rule, and a run the rule finds fit
    needs a reason of another kind: leaving a measurement out unsaid would
    hide what the report could stand behind."""
    found = []
    for entry in entries:
        directory, reason = (entry, "") if isinstance(entry, (str, Path)) else entry
        rows, (meta,) = load([directory])
        unfit = meta["unfit_reasons"]
        if not unfit and (not reason or reason.startswith(UNFIT_REASON)):
            raise ResultError(f"{directory}: --left-out names a run the fitness rule finds fit; publish it instead, "
                              f"or give the reason it is left out")
        if unfit and not reason:
            reason = f"{UNFIT_REASON}: {', '.join(unfit)}"
        found.append({"run_id": meta.get("run_id", "?"), "machines": list(dict.fromkeys(rows["machine"])),
                      "unfit_reasons": unfit, "reason": reason, "meta": meta, "rows": rows})
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

    def switch(flag: str, help_text: str) -> None:
        """An on/off option, off unless given."""
        parser.add_argument(flag, action="store_true", help=help_text)

    parser.add_argument("dirs", nargs="+", help="result directories")
    parser.add_argument("-o", "--output", default="report", help="output directory (default ./report)")
    parser.add_argument("--name", default="report", help="file stem of the .md and .html (default report)")
    switch("--light", "tables, conclusions and scaling plots only, figures linked (the dashboard's kind)")
    switch("--fit-only", "refuse (exit 2) when any run fails the fitness rule, instead of putting it in the appendix "
                         "(make publish; ALLOW_UNFIT=1 lifts it)")
    switch("--fresh-figures", "empty OUT/figures first, once the runs are read (and found fit with --fit-only), so "
                              "no figure of an older report lingers there")
    parser.add_argument("--left-out", action="append", default=[], metavar="DIR",
                        help="a run left out for failing the fitness rule: named, with the machine it leaves "
                             "missing, in the report's first paragraph (repeatable)")
    parser.add_argument("--left-out-list", metavar="FILE",
                        help="a file of committed runs left out, each line a directory and its reason (make "
                             "publish: docs/RUNS_LEFT_OUT); a fit run may be left out with a reason, and the report "
                             "compares its winners with the published ones")
    switch("--png-only", "figures as PNG only, no SVG beside them (make publish: docs/figures in one format)")
    switch("--pages", "the operators' sections and the defects on pages of their own, OUT/<name>/<op>.md "
                      "(make publish)")
    args = parser.parse_args(argv)
    try:
        if args.fit_only:
            refuse_unfit([Path(d) for d in args.dirs])
        listed = read_left_out(args.left_out_list) if args.left_out_list else []
        left_out = left_out_runs([Path(d) for d in args.left_out] + listed)  # before any figure is removed
        if args.fresh_figures:
            shutil.rmtree(Path(args.output) / "figures", ignore_errors=True)
        written = build([Path(d) for d in args.dirs], Path(args.output), args.name, light=args.light,
                        left_out=left_out, pages=args.pages, svg=not args.png_only)
    except ResultError as error:
        print(f"report.py: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the disk filled up while writing, say
        where = error.filename or args.output
        print(f"report.py: error: {where}: {store.describe_os_error(error, where)}", file=sys.stderr)
        return 2
    print(f"wrote {written} and {written.with_suffix('.html')}")
    return 0
