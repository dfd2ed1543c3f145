"""Noise honesty: a case whose IQR exceeds 10 % of its median is marked
unstable, with a sentence saying what the mark means, in the report's case
tables and in the dashboard."""

import re

import report
from harness.presenting.dashboard import build_dashboard
from harness.presenting.report import sections as report_sections

from .test_report import fixture_run

NOISY = {"torch_max_pool2d_indices": {"iqr_s": 5e-5}}  # 25-50 % of its 0.1-0.2 ms median; the others 5-10 %


def _row(md: str, strategy: str) -> list[str]:
    return [line for line in md.splitlines() if line.replace("**", "").startswith(f"| {strategy} |")]


def test_report_marks_unstable_cases_and_says_why(tmp_path):
    md = report.build([fixture_run(tmp_path / "run", row_fields=NOISY)], tmp_path / "out").read_text()
    noisy, quiet = _row(md, "torch_max_pool2d_indices"), _row(md, "seed_loops")
    assert noisy and all(report_sections.UNSTABLE_MARK in line for line in noisy)
    assert "50 µs (50 %) ⚠" in noisy[0] and "50 µs (25 %) ⚠" in noisy[1]
    assert quiet and not any(report_sections.UNSTABLE_MARK in line for line in quiet)
    assert md.count(report_sections.UNSTABLE_NOTE) == 1  # said once, in the legend (issue 41)
    assert "torch.utils.benchmark" in report_sections.UNSTABLE_NOTE and "10 %" in report_sections.UNSTABLE_NOTE
    assert "2 of 6 timed cases are marked" in md


def test_dashboard_marks_unstable_cases_and_says_why(tmp_path):
    root = tmp_path / "results"
    fixture_run(root / "a")
    fixture_run(root / "b", row_fields=NOISY, start_time="2026-11-23T00:00:00+00:00")
    text = build_dashboard(root, tmp_path / "site", with_reports=False).read_text()
    assert "class='unstable-legend'" in text and "10 % of its median" in text and "2 of 10 cases" in text
    rows = re.findall(r"<tr.*?</tr>", text)
    noisy = [row for row in rows if "torch_max_pool2d_indices" in row]
    quiet = [row for row in rows if "<td>seed_loops</td>" in row]
    assert len(noisy) == 2 and all("class='num unstable'" in row and "⚠" in row for row in noisy)
    assert quiet and not any("unstable" in row for row in quiet)


def test_report_names_cases_whose_slow_start_was_dropped(tmp_path):
    started_slow = {"torch_max_pool2d_indices": {"slow_start": 4}}
    md = report.build([fixture_run(tmp_path / "run", row_fields=started_slow)], tmp_path / "out").read_text()
    assert "2 of 6 timed cases started slow" in md
    assert "maxpool2d/torch_max_pool2d_indices N=" in md and "(4)" in md
    quiet = report.build([fixture_run(tmp_path / "quiet")], tmp_path / "out2").read_text()
    assert "started slow" not in quiet


def test_a_spread_wider_than_its_median_prints_as_a_plain_percentage():
    """An IQR of 1.6× the median read "1.6e+02 %" in the published report's
    case tables and in the terminal's; it is "160 %" in both."""
    from harness.presenting import tables

    row = {"iqr_s": 1.6e-3, "median_s": 1e-3}
    assert report_sections.iqr_cell(row) == f"1.6 ms (160 %) {report_sections.UNSTABLE_MARK}"
    assert "160 %" in tables._iqr_text(row) and "e+" not in tables._iqr_text(row)
