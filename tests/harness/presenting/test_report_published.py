"""The published report (issue 41, issue 40 item 4), built here from the
committed runs as `make publish` builds it: the answer in words on its first
screen, a short main page, detail on the operators' pages, a built-in for
every operator, figures within their budget, every committed run placed, and
docs/ holding exactly what the build writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.base.checkout import ROOT
from harness.judging import analysis
from harness.presenting.report.build import UNFIT_REASON, build, left_out_runs, read_left_out
from harness.presenting.report import summary
from harness.presenting.report.load import case_title, load

DOCS = ROOT / "docs"
# The main page: seven machines and settings with an answer table each, and the network shapes' table a row
# per shape and machine (models.yaml's max-pool on two VMs: 413 lines; on three machine settings, the Xeon VM at one
# and two threads and the Zen 4 at one: 451); the case tables are on the operators' pages.
MAX_MAIN_LINES = 475
MAX_FIGURES_BYTES = 8 * 2**20
MAX_HTML_BYTES = 3 * 2**20
# Building the report from the committed runs takes minutes; reading a dozen runs, seconds: `make test` runs them.
SLOW = pytest.mark.slow


def published_runs() -> list[Path]:
    return [ROOT / line for line in (DOCS / "RUNS").read_text().split()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The report `make publish` writes, built into a fresh directory, with its fit rows."""
    out = tmp_path_factory.mktemp("published")
    left_out = left_out_runs(read_left_out(DOCS / "RUNS_LEFT_OUT"))
    main = build(published_runs(), out, "REPORT", left_out=left_out, pages=True)  # PNG only, as make publish
    rows, _metas = load(published_runs())
    return main, rows[rows["fit"]]


def tables(markdown: str) -> list[list[list[str]]]:
    """The Markdown tables of a page, each a list of rows of cells (header first, the rule left out)."""
    found, current = [], []
    for line in markdown.splitlines() + [""]:
        if line.startswith("|"):
            if not line.startswith("|---"):
                current.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])])
        elif current:
            found.append(current)
            current = []
    return found


@SLOW
def test_the_first_40_lines_name_the_strategy_to_use_on_every_fit_machine_and_mode(built):
    main, fit = built
    first = main.read_text().splitlines()[:40]
    for machine in fit["machine"].unique():
        on_machine = fit[fit["machine"] == machine]
        kinds = [summary.INFERENCE] + ([summary.TRAINING] if (on_machine["mode"] != "forward").any() else [])
        for kind in kinds:
            line = next((text for text in first if text.startswith(f"- {machine}, {kind} (")), None)
            assert line is not None, (machine, kind)
            named = re.search(r": use (\S+), the fastest in (\d+) of (\d+) cases", line)
            assert named, line
            # The strategy named wins (clearly or tied) at least as many cases as any other.
            counts: dict[str, int] = {}
            for _, case in on_machine.groupby(["op", "params", "dtype"]):
                answer_rows = summary.mode_rows(case, kind)
                for name in analysis.winners(analysis.answer(answer_rows) if answer_rows is not None else None):
                    counts[name] = counts.get(name, 0) + 1
            assert counts[named.group(1)] == max(counts.values()) == int(named.group(2)), (line, counts)


@SLOW
def test_the_main_page_is_short_and_no_answer_row_is_a_wall_of_not_run(built):
    main, _fit = built
    text = main.read_text()
    assert len(text.splitlines()) <= MAX_MAIN_LINES
    assert "#### " not in text  # no case table on the main page: they are on the operators' pages
    for table in tables(text):
        for row in table[1:]:
            assert sum(cell == "not run" for cell in row) < len(row) - 1, row


@SLOW
def test_the_operator_pages_hold_every_case_table_and_link_back(built):
    main, fit = built
    folder = main.parent / "report"
    for op, op_rows in fit.groupby("op"):
        page = (folder / f"{op}.md").read_text()
        assert "[Report](../REPORT.md)" in page.splitlines()[0]
        for _, case in op_rows.groupby(["params", "dtype", "mode", "machine"]):
            assert f"#### {case_title(case.iloc[0])}" in page.replace("\\", ""), case_title(case.iloc[0])
        assert any(table[0][:3] == ["strategy", "backend", "status"] for table in tables(page))
        html_page = folder / f"{op}.html"
        assert html_page.stat().st_size <= MAX_HTML_BYTES and "href='../REPORT.html'" in html_page.read_text()
    assert (main.parent / "REPORT.html").stat().st_size <= MAX_HTML_BYTES


@SLOW
def test_dispersion_and_pinv_have_a_built_in_on_every_cpu_row(built):
    main, _fit = built
    checked = 0
    for table in tables(main.read_text()):
        header = table[0]
        if "× best built-in" not in header:
            continue
        column = header.index("× best built-in")
        for row in table[1:]:
            if row[0] in ("dispersion", "dispersion_pinv"):
                # a tie by the race ("equivalent within", "undecided after") or an older rule ("tie:")
                claimed = not row[3].startswith(("tie:", "equivalent within", "undecided after")) \
                    and "no clear win" not in row[3]
                # a tie or an unclear win claims no speed-up (docs/SPEC.md §3, "Rounds"); a win has its built-in
                assert (row[column] not in ("–", "")) is claimed or row[column] == "is one", row
                checked += claimed
    assert checked


@SLOW
def test_the_published_docs_are_what_the_build_writes(built):
    """make publish reproduces docs/ byte for byte: a code change that moves
    the report, or a run list edited without publishing, fails here."""
    main, _fit = built
    assert main.read_text() == (DOCS / "REPORT.md").read_text()
    for page in sorted((main.parent / "report").glob("*.md")):
        assert page.read_text() == (DOCS / "report" / page.name).read_text(), page.name
    written = sorted(path.name for path in (main.parent / "figures").iterdir())
    assert written == sorted(path.name for path in (DOCS / "figures").iterdir())


def test_docs_figures_stay_within_their_budget_in_one_format():
    files = list((DOCS / "figures").iterdir())
    assert sum(path.stat().st_size for path in files) <= MAX_FIGURES_BYTES
    assert {path.suffix for path in files} == {".png"}


@SLOW
def test_every_committed_run_is_published_or_left_out_with_its_reason():
    """Issue 40 item 4. results/baseline-* are the regression gate's
    baselines (make regress, make counts), not runs of a config: never
    reported, so never listed."""
    committed = {path.name for path in (ROOT / "results").iterdir()
                 if path.is_dir() and not path.name.startswith("baseline-")}
    published = {path.name for path in published_runs()}
    left_out = read_left_out(DOCS / "RUNS_LEFT_OUT")
    left_names = [path.name for path, _reason in left_out]
    assert len(left_names) == len(set(left_names)) and not published & set(left_names)
    assert published | set(left_names) == committed
    # Each reason holds: "unfit" only where the fitness rule refuses the run, another reason for a fit one.
    for run in left_out_runs(left_out):
        assert run["reason"].startswith(UNFIT_REASON) == bool(run["unfit_reasons"]), run["reason"]


def test_a_left_out_line_without_a_reason_is_refused_in_one_line(tmp_path):
    listing = tmp_path / "RUNS_LEFT_OUT"
    listing.write_text("# a comment\n\nresults/20261126T051852-vm-default-b021\n")
    with pytest.raises(Exception, match="RUNS_LEFT_OUT:3: results/20261126T051852-vm-default-b021 is left out "
                                        "without a reason"):
        read_left_out(listing)
    # A fit run left out as "unfit" is refused: its reason would be false.
    with pytest.raises(Exception, match="finds fit"):
        left_out_runs([(ROOT / "results" / "20261126T051852-vm-default-b021", "unfit: busy")])


@SLOW
def test_a_fit_repeat_that_names_another_winner_is_reported_as_a_disagreement():
    """An earlier default run and a repeat on the same VM: the report names
    the case where they contradict each other by the A/A rule (issue 40 item
    1's dispersion_pinv B=4: torch_unfold_view a clear win in 5246, and
    numba_fused clearly faster than it in 4184)."""
    published, _ = load([ROOT / "results" / "20261126T041354-vm-default-5246"])
    repeat, _ = load([ROOT / "results" / "20261126T052209-vm-default-4184"])
    found = summary.disagreements(published, repeat)
    assert ("dispersion_pinv B=4 C=28 H=128 W=128 S=2 float32", "published", "torch_unfold_view",
            "numba_fused") in found
    assert summary.disagreements(published, published) == []


def test_pages_move_the_case_tables_off_the_main_page_and_link_both_ways(tmp_path):
    """build(pages=True), make publish's: the operator's page holds its case
    tables and figures, the main page only the answer and the legend, each
    page's links resolve (Markdown to .md, HTML to .html); one page holds it
    all otherwise (run --report, the dashboard)."""
    from tests.harness.presenting.test_report import fixture_run

    run = fixture_run(tmp_path / "run")
    main = build([run], tmp_path / "paged", "REPORT", pages=True)
    page = tmp_path / "paged" / "report" / "maxpool2d.md"
    assert "#### " not in main.read_text() and "#### maxpool2d" in page.read_text()
    assert "![median time" in page.read_text() and "](../figures/" in page.read_text()
    for markdown in [main, page, tmp_path / "paged" / "report" / "defects.md"]:
        for target in re.findall(r"\]\(([^)#]+\.md)(?:#[^)]*)?\)", markdown.read_text()):
            assert (markdown.parent / target).is_file(), (markdown.name, target)
            assert (markdown.parent / target).with_suffix(".html").is_file(), (markdown.name, target)
    assert "src='../figures/" in page.with_suffix(".html").read_text()
    single = build([run], tmp_path / "single").read_text()
    assert "#### maxpool2d" in single and not (tmp_path / "single" / "report").exists()
