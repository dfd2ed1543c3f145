"""The report reads the count columns like any other (issue 26): a counting
run's report says "counted, not timed" and ranks by instructions, never "none
passed"; a run with both shows both."""

import re

import pandas as pd

from harness.presenting.report.build import build
from harness.results import store
from tests.helpers import ROOT

from .test_report import ENTRIES, fixture_run

COUNTS_BASELINES = sorted(path for path in (ROOT / "results" / "baseline-counts").iterdir() if path.is_dir())


def test_a_counting_runs_report_ranks_by_instructions_and_never_says_none_passed(tmp_path):
    run = COUNTS_BASELINES[0]
    rows = store.read_rows(run)
    text = build([run], tmp_path / "out", light=True).read_text()
    assert "none passed" not in text and "passed the check." not in text
    forward = rows[rows["mode"] == "forward"]
    for op, case in forward.groupby("op"):
        fewest = case.loc[case["instructions"].idxmin()]
        count = f"{fewest['instructions']:,.0f}"
        assert f"not timed; fewest instructions: {fewest['strategy']} ({count}/call)" in text, op
        assert f"{fewest['strategy']} executes the fewest instructions per call ({count})" in text, op
        # each case's table: instructions and est_cycles per call, fewest instructions first
        table = text.split(f"## {op}\n")[1].split("\n## ")[0].split(" · backward\n")[0]  # the forward's
        header, *lines = [line for line in table.splitlines() if line.startswith("| ")]
        assert "instructions/call" in header and "est_cycles/call" in header
        counts = [int(re.split(r"\s*\|\s*", line)[7].replace(",", "")) for line in lines]
        assert counts == sorted(counts) and counts[0] == int(count.replace(",", ""))  # as printed: rounded
    assert "do not see memory bandwidth, page faults or other threads" in text
    # the backward cases counted too: their fewest instructions in the answer table's training column
    for op in set(rows.loc[rows["mode"] == "backward", "op"]):
        assert re.search(rf"\| {op} \|.*\| not timed; fewest instructions: \S+ \([\d,]+/call\) \(backward\) \|", text), op


def test_a_timed_run_with_counts_shows_both(tmp_path):
    fields = {name: {"instructions": 1_000_000.0 * (number + 1), "est_cycles": 2_000_000.0 * (number + 1)}
              for number, (name, *_) in enumerate(ENTRIES)}
    run = fixture_run(tmp_path / "both", row_fields=fields)
    text = build([run], tmp_path / "out", light=True).read_text()
    assert "instructions/call" in text and "1,000,000" in text and "counted, not timed" not in text
    assert "not timed; fewest instructions" not in text
    timed = store.read_rows(run)
    assert pd.notna(timed["median_s"]).any() and "Conclusion:" in text
