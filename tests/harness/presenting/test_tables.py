"""The CLI's tables say why a column is blank, as the report and bench() do."""

import json

import pandas as pd
from rich.console import Console

from harness.presenting import tables
from harness.results import store
from tests.helpers import ROOT


def rendered(renderables) -> str:
    console = Console(width=400, record=True, color_system=None)
    for item in renderables:
        console.print(item)
    return " ".join(console.export_text().split())  # captions wrap at the table's width


def test_both_tables_say_why_there_are_no_speedups_without_the_seeds_original():
    rows = store.read_rows(ROOT / "results" / "baseline-quick" / "amd-epyc-25-17-x2")
    rows = rows[rows["mode"] == "forward"]
    maxpool = rows[rows["op"] == "maxpool2d"]  # quick.yaml leaves out seed_loops, maxpool2d's seed original
    why = "the seed's original, seed_loops, was not among the strategies run"
    assert f"no speedups: {why}" in rendered(tables.grid_tables(maxpool))
    assert f"× blank: {why}" in rendered(tables.case_tables(maxpool))
    dispersion = rows[rows["op"] == "dispersion"]  # its seed's original, seed_loop, is in quick.yaml
    assert "no speedups" not in rendered(tables.grid_tables(dispersion))
    assert "× blank" not in rendered(tables.case_tables(dispersion))


def _maxpool_case(medians: dict, spread: float) -> pd.DataFrame:
    params = json.dumps({"N": 1, "C": 1, "H": 8, "W": 8, "k": 2})
    return pd.DataFrame([dict(op="maxpool2d", strategy=name, device="cpu", dtype="float32", params=params,
                              status="ok", median_s=median, iqr_s=2 * spread * median, q1_s=median * (1 - spread),
                              q3_s=median * (1 + spread), gbps=1.0, pct_of_ceiling=1.0, message="", case_id=name)
                         for name, median in medians.items()])


def _starred(text: str) -> set:
    return {line.split()[1] for line in text.splitlines() if line.startswith("│") and tables.BEST_MARK in line}


def test_the_terminal_tables_mark_a_tie_as_both_and_say_so():
    """Two strategies whose Q1–Q3 ranges overlap: neither is the fastest
    alone. Both tables star both and the case table names the tie, by the
    report's rule (analysis.answer)."""
    rows = _maxpool_case({"seed_loops": 1e-2, "numba_fused": 1.00e-4, "torch_max_pool2d_indices": 1.05e-4}, 0.1)
    for render in (tables.grid_tables, tables.case_tables):
        console = Console(width=200, record=True, color_system=None)
        for item in render(rows):
            console.print(item)
        text = console.export_text()
        assert _starred(text) == {"numba_fused", "torch_max_pool2d_indices"}, text
    assert "starred: numba_fused and torch_max_pool2d_indices (a tie: their Q1–Q3 ranges overlap)" \
        in rendered(tables.case_tables(rows))
    clear = _maxpool_case({"seed_loops": 1e-2, "numba_fused": 1e-4, "torch_max_pool2d_indices": 3e-4}, 0.1)
    console = Console(width=200, record=True, color_system=None)
    for item in tables.grid_tables(clear):
        console.print(item)
    assert _starred(console.export_text()) == {"numba_fused"}


def test_an_unfit_run_is_shown_without_a_winner_or_speedups():
    """`run`'s summary of a run the fitness rule calls unfit (the rule the
    report and the dashboard apply): a warning with the reasons first, no
    strategy starred, no speed-up beside any time."""
    rows = _maxpool_case({"seed_loops": 1e-2, "numba_fused": 1e-4, "torch_max_pool2d_indices": 3e-4}, 0.1)
    console = Console(width=200, record=True, color_system=None)
    for item in tables.run_summary(rows, unfit_reasons=["load 8.1 on 2 cores"]):
        console.print(item)
    text = console.export_text()
    assert text.lstrip().startswith("warning: this run fails the fitness rule (load 8.1 on 2 cores)"), text
    assert not _starred(text) and "100×" not in text and "(1×)" not in text, text
    fit = rendered(tables.run_summary(rows))
    assert "fitness rule" not in fit and "100×" in fit and tables.BEST_MARK in fit


def test_a_row_over_its_floor_is_flagged_in_both_tables_never_shown_as_a_percentage():
    """One threshold and one wording (harness/results/floors.py): past 110 %
    of its floor by size a row's formula or curve is wrong, and neither table
    prints its percentage; a row under it shows its % of floor."""
    from harness.results import floors

    rows = _maxpool_case({"seed_loops": 1e-2, "numba_fused": 1e-4, "torch_max_pool2d_indices": 3e-4}, 0.01)
    rows["pct_of_floor"] = [0.3, 560.0, 87.5]
    rows["mode"] = "forward"
    case = rendered(tables.case_tables(rows))
    assert "% floor" in case and "87.5 %" in case and "560" not in case
    assert f"{floors.OVER_FLOOR_MARK} over the floor" in case
    assert f"numba_fused: {floors.OVER_FLOOR_MARK} {floors.OVER_FLOOR_TEXT} (its bytes take 5.6× its median" in case
    summary = rendered(tables.run_summary(rows, grid=True))
    assert f"{floors.OVER_FLOOR_MARK}: {floors.OVER_FLOOR_TEXT} (listed below)" in summary
    assert f"maxpool2d/numba_fused N=1 C=1 H=8 W=8 k=2: {floors.OVER_FLOOR_MARK} {floors.OVER_FLOOR_TEXT}" in summary
    assert "560" not in summary
    # at the threshold, not past it: a percentage, and no flag
    rows["pct_of_floor"] = [0.3, floors.OVER_FLOOR_PCT, 87.5]
    assert floors.OVER_FLOOR_TEXT not in rendered(tables.run_summary(rows, grid=True))
    assert "110 %" in rendered(tables.case_tables(rows))


def test_a_percent_of_ceiling_past_110_is_marked_in_the_terminal_table_and_the_report():
    """The audit found "169 % of the copy ceiling" printed plain in a conclusion
    and "168 %" in the machines table: past 110 % a copy ceiling is no bound
    for the row (a cache-resident case), and every place that prints it marks it."""
    from harness.presenting.report import sections
    from harness.results import floors

    rows = _maxpool_case({"seed_loops": 1e-2, "numba_fused": 1e-4, "torch_max_pool2d_indices": 3e-4}, 0.01)
    rows["pct_of_ceiling"] = [0.3, 169.0, 87.5]
    rows["mode"] = "forward"
    case = rendered(tables.case_tables(rows))
    assert f"{floors.OVER_FLOOR_MARK} 169" in case and floors.ceiling_note() in " ".join(case.split())
    assert "87.5" in case and f"{floors.OVER_FLOOR_MARK} 87.5" not in case
    rows["machine"], rows["backend"], rows["pct_of_floor"] = "cpu", "numpy", float("nan")
    verdict = sections.verdict("maxpool2d", rows.assign(q1_s=rows["median_s"], q3_s=rows["median_s"]), "here")
    assert f"use numba_fused (numpy), median 100 µs, IQR 2 µs, {floors.OVER_FLOOR_MARK} 169 % of the copy ceiling" \
        in verdict, verdict
    _, table = sections.machines_table(rows.assign(machine=["a", "a", "a"]))
    assert any(f"{floors.OVER_FLOOR_MARK} 169 %" in cell for cells in table for cell in cells), table
