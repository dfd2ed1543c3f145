"""The CLI's tables say why a column is blank, as the report and bench() do."""


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
