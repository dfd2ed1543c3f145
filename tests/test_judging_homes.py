"""Two decisions of harness/judging/analysis.py made there once and read
everywhere else (issue 48): which rows are timed (`analysis.timed`) and a
counting run's answer (`analysis.fewest_counted`, over `analysis.by_count`).
Each test changes the home and checks that every user follows: a user that
kept its own copy of the rule would not."""

import json
import math

import pandas as pd
import pytest
from rich.console import Console

from harness.base.format import fmt_time
from harness.judging import analysis, compare, history
from harness.presenting import tables
from harness.presenting.report import figures, sections
from impls.status import INEXACT, MISMATCH, OK
from impls.training import FORWARD, FORWARD_BACKWARD

PARAMS = {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}
# The strategies the planted rule leaves out: the fastest, a built-in, the seed, a partial one, an inexact one.
HIDDEN = ("numba_fused", "torch_max_pool2d_indices", "seed_loops", "torch_max_pool2d", "torch_reshape_argmax")
QUIET = {"load_avg_start": [0.5, 0.5, 0.5], "load_avg_end": [0.5, 0.5, 0.5], "cpu_count": 2,
         "hardware": {"cpu_model": "Fixture CPU", "cpu_count": 2}}


def row(strategy: str, median: float, status: str = OK, params=None, **extra) -> dict:
    """A maxpool2d row of one run, its Q1–Q3 ±2 % of its median."""
    return {"case_id": f"maxpool2d|{strategy}|{json.dumps(params or PARAMS)}", "run": 0, "machine": "m",
            "op": "maxpool2d", "strategy": strategy, "backend": "numpy", "device": "cpu", "dtype": "float32",
            "params": json.dumps(params or PARAMS, sort_keys=True), "mode": FORWARD, "status": status,
            "median_s": median, "p10_s": median, "q1_s": 0.98 * median, "q3_s": 1.02 * median,
            "iqr_s": 0.04 * median, "min_s": 0.97 * median, "max_s": 1.03 * median, "xcheck_s": math.nan,
            "round_medians_s": "", "source": "added", "message": "", "bytes": 1e6, "floor_s": 5e-5,
            "pct_of_ceiling": 50.0, "slow_start": 0, "load_avg": 0.5, **extra}


CASE = pd.DataFrame([row("numba_fused", 1e-3), row("torch_max_pool2d_indices", 2e-3), row("seed_loops", 8e-3),
                     row("numpy_sliding_window", 4e-3), row("torch_max_pool2d", 0.8e-3), row("torch_reshape_argmax", 0.5e-3, INEXACT),
                     row("seed_reshape_argmax", math.nan, MISMATCH)])


def timed_readings(tmp_path) -> dict:
    """What each reader of the rule makes of the same rows."""
    where = figures.FigureDir(tmp_path, svg=False)
    found = analysis.answer(CASE)
    builtin = analysis.fastest_builtin(CASE)
    unstable = CASE.assign(unstable=CASE["strategy"] == "numba_fused")
    noisy = CASE.assign(iqr_s=CASE["iqr_s"].where(~CASE["strategy"].isin(HIDDEN[:2]), 1.0))
    base = pd.DataFrame([row("numba_fused", 1e-3), row("numpy_sliding_window", 4e-3), row("seed_loops", 8e-3)])
    new = base.assign(run=1, median_s=[3e-3, 4e-3, 8e-3], p10_s=[3e-3, 4e-3, 8e-3])
    slower = pd.concat([base, new], ignore_index=True)
    step = pd.DataFrame([row("numba_fused", 2e-3), row("numba_fused", 1e-3, mode=FORWARD_BACKWARD)])
    large = {**PARAMS, "H": 64, "W": 64}
    sizes = pd.DataFrame([row("numpy_sliding_window", 4e-3), row("numba_fused", 1e-3), row("numba_fused", 4e-3, params=large, bytes=1.6e7)])
    console = Console(width=200, record=True, color_system=None)
    for table in tables.grid_tables(CASE):
        console.print(table)
    return {
        "answer": (str(found.best["strategy"]), math.isfinite(found.over_seed)),
        "fastest built-in": None if builtin is None else str(builtin["strategy"]),
        "partial": list(analysis.partial_rows(CASE)["strategy"]),
        "answer cell": sections._answer_cells(CASE)[0],
        "unstable share": history.unstable_share(unstable).tolist(),
        "unfit": analysis.run_unfit_reasons(QUIET, noisy),
        "screen": len(history.screen(slower, history.consecutive(slower), 2.0)),
        "faster than its part": len(analysis.training_faster_than_parts(step)),
        "normalised": sorted(name for group in compare.typical_by_group(CASE, {}, "median").values()
                             for name in group),
        "grid": fmt_time(1e-3) in console.export_text(),
        "scaling figure": figures.figure_scaling(sizes, where, "scaling", "scaling") is not None,
        "speed-up figure": figures.figure_speedup(analysis.with_speedups(base), where, "speedup", "seed_loops")
        is not None,
    }


def test_every_reader_of_a_timed_row_follows_the_one_rule(tmp_path, monkeypatch):
    real = timed_readings(tmp_path / "real")
    assert real == {
        "answer": ("numba_fused", True), "fastest built-in": "torch_max_pool2d_indices",
        "partial": ["torch_max_pool2d"], "answer cell": "numba_fused (faster but inexact: torch_reshape_argmax)",
        "unstable share": [pytest.approx(1 / 6)], "unfit": [], "screen": 1,
        "faster than its part": 1, "normalised": sorted([*HIDDEN, "numpy_sliding_window"]),
        "grid": True, "scaling figure": True, "speed-up figure": True}
    # A planted rule in the home's place: the HIDDEN strategies' rows are not timed.
    home = analysis.timed
    monkeypatch.setattr(analysis, "timed", lambda rows: home(rows) & ~rows["strategy"].isin(HIDDEN))
    assert timed_readings(tmp_path / "planted") == {
        "answer": ("numpy_sliding_window", False), "fastest built-in": None, "partial": [],
        "answer cell": "numpy_sliding_window", "unstable share": [0.0], "unfit": [], "screen": 0,
        "faster than its part": 0, "normalised": ["numpy_sliding_window"],
        "grid": False, "scaling figure": False, "speed-up figure": False}


def test_a_timed_row_is_correct_with_a_finite_positive_median():
    rows = pd.DataFrame([row("a", 1e-3), row("b", 1e-3, INEXACT), row("c", 1e-3, MISMATCH), row("d", 0.0),
                         row("e", math.inf), row("f", math.nan)])
    assert list(analysis.timed(rows)) == [True, True, False, False, False, False]
    assert analysis.timed(rows.iloc[:0]).empty


def counted(strategy: str, instructions: float, status: str = OK) -> dict:
    return row(strategy, math.nan, status, instructions=instructions)


COUNTED = pd.DataFrame([counted("seed_loops", 9e6), counted("numba_fused", 2e6), counted("numpy_sliding_window", 3e6),
                        counted("torch_reshape_argmax", 1e6, MISMATCH)])


def test_a_counting_run_answers_with_the_correct_strategy_of_fewest_instructions():
    assert analysis.answer(COUNTED) is None
    assert analysis.fewest_counted(COUNTED)["strategy"] == "numba_fused"
    assert list(analysis.by_count(COUNTED)["strategy"]) == ["numba_fused", "numpy_sliding_window", "seed_loops"]
    assert analysis.fewest_counted(COUNTED.assign(status=MISMATCH)) is None
    assert analysis.fewest_counted(COUNTED.drop(columns="instructions")) is None
    timed = COUNTED.assign(median_s=[1e-3, 2e-3, 3e-3, math.nan])
    assert analysis.fewest_counted(timed) is None  # a timed case is answered by its times


def test_every_reader_of_the_counting_answer_follows_its_home(monkeypatch):
    def readings():
        return sections._answer_cells(COUNTED)[0], sections.count_verdict_sentence(COUNTED, "here")

    cell, sentence = readings()
    assert cell.startswith("not timed; fewest instructions: numba_fused ")
    assert "numba_fused executes the fewest" in sentence
    # A planted order (most first): the cell and the verdict both name its first.
    order = analysis.by_count
    monkeypatch.setattr(analysis, "by_count", lambda case: order(case).iloc[::-1])
    cell, sentence = readings()
    assert cell.startswith("not timed; fewest instructions: seed_loops ")
    assert "seed_loops executes the fewest" in sentence
    monkeypatch.setattr(analysis, "fewest_counted", lambda case: None)
    assert readings()[0] == "none passed"
