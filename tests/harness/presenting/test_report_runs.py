"""The report's runs and hardware tables: machine load, the ceiling against
its history with warnings, and the hardware a run recorded (older runs, which
lack those fields, still render)."""

import math

import report
from harness.presenting.report import load as report_load
from harness.presenting.report import sections as report_sections

from .test_report import fixture_run

GIB = 2**30
HARDWARE = {"cpu_model": "Fixture EPYC 9654", "cpu_count": 2, "caches": {"L1d": "32K", "L2": "1024K", "L3": "32768K"},
            "memory_bytes": 16 * GIB,
            "gpu": {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 80 * GIB, "sm_count": 132, "capability": "9.0",
                    "driver": "550.54.15", "max_sm_clock_mhz": "1980", "max_mem_clock_mhz": "2619"}}
BUSY = {"load_avg_start": [3.5, 2.0, 1.25], "load_avg_end": [1.0, 1.0, 1.0], "hardware": HARDWARE,
        "machine": "box / Fixture EPYC 9654 x2",
        "ceiling_history": {"cpu": {"history_median_gbps": 30.0, "runs": 4, "deviation_pct": -33.3}}}
QUIET = {"load_avg_start": [0.5, 0.5, 0.5], "load_avg_end": [0.75, 0.5, 0.5], "machine": "box / Fixture EPYC 9654 x2",
         "hardware": HARDWARE, "ceiling_history": {"cpu": {"history_median_gbps": 21.0, "runs": 4, "deviation_pct": -4.8}}}


def _table(md: str, first_header: str) -> list[str]:
    lines = md.splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"| {first_header} |")))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def test_runs_table_shows_load_and_ceiling_history_and_warns(tmp_path):
    busy = fixture_run(tmp_path / "busy", meta=BUSY)
    quiet = fixture_run(tmp_path / "quiet", meta=QUIET, start_time="2026-11-23T00:00:00+00:00")
    md = report.build([busy, quiet], tmp_path / "out").read_text()
    runs = "\n".join(_table(md, "run"))
    assert "load 1/5/15 min (start → end)" in runs and "ceiling vs history" in runs
    assert "3.5/2/1.2 → 1/1/1" in runs and "cpu -33 % vs 30.0 GB/s (4 runs)" in runs
    assert "0.5/0.5/0.5 → 0.75/0.5/0.5" in runs and "cpu -5 % vs 21.0 GB/s (4 runs)" in runs
    warnings = [line for line in md.splitlines() if line.startswith("Warning:")]
    assert len(warnings) == 2 and all("run busy" in line for line in warnings)
    assert "load average reached 3.5 at the start, at or above its 2 cores" in warnings[0]
    assert "33 % below the median of earlier runs on this machine (30.0 GB/s)" in warnings[1]


def test_older_runs_without_load_history_or_hardware_still_render(tmp_path):
    old = fixture_run(tmp_path / "old", meta={"load_avg_start": None, "load_avg_end": None})
    md = report.build([old], tmp_path / "out").read_text()
    runs = _table(md, "run")
    header = [cell.strip() for cell in runs[0].strip("|").split("|")]
    cells = dict(zip(header, (cell.strip() for cell in runs[2].strip("|").split("|"))))
    assert cells["ceiling vs history"] == "–" and cells["load 1/5/15 min (start → end)"] == "–"
    # Not known to be quiet: rendered, and judged nowhere (the dashboard's rule).
    assert cells["fit to judge"] == "no: load not recorded"
    assert "## Appendix: runs not fit to be judged" in md
    assert "Warning:" not in md
    hardware = _table(md, "machine | runs")
    assert "Fixture CPU" in hardware[2] and "| 2 |" in hardware[2]  # meta cpu_model and cpu_count


def test_hardware_table_lists_cpu_caches_memory_and_gpu_once_per_machine(tmp_path):
    runs = [fixture_run(tmp_path / "a", meta=QUIET), fixture_run(tmp_path / "b", meta=QUIET)]
    md = report.build(runs, tmp_path / "out").read_text()
    hardware = _table(md, "machine | runs")
    assert len(hardware) == 3  # header, rule, one machine for both runs
    row = hardware[2]
    for text in ("a, b", "Fixture EPYC 9654", "L1d 32K L2 1024K L3 32768K", "16.0 GiB", "NVIDIA H100 80GB HBM3",
                 "80.0 GiB", "| 132 |", "| 9.0 |", "550.54.15", "1980 / 2619"):
        assert text in row, text


def test_malformed_meta_fields_do_not_break_the_tables():
    meta = {"run_id": "x", "load_avg_start": "high", "load_avg_end": [None], "ceiling_history": {"cpu": "low"},
            "hardware": {"gpu": "yes", "caches": ["L1"], "cpu_count": "two"}, "cpu_count": 2}
    assert report_sections.load_cell(meta) == "–" and report_sections.ceiling_cell(meta) == "–"
    assert report_sections.run_warnings(meta) == []
    header, rows = report_sections.hardware_table([meta])
    assert len(rows) == 1 and len(rows[0]) == len(header)


def test_the_ceiling_cell_reads_as_numbers_a_person_writes():
    """The published Runs table read "cpu -0 % vs 34.1 GB/s (1 runs)"."""
    def cell(deviation, runs):
        return report_sections.ceiling_cell({"ceiling_history": {"cpu": {
            "history_median_gbps": 34.1, "runs": runs, "deviation_pct": deviation}}})
    assert cell(-0.3, 1) == "cpu ±0 % vs 34.1 GB/s (1 run)"
    assert cell(-12.4, 3) == "cpu -12 % vs 34.1 GB/s (3 runs)" and cell(56.0, 2) == "cpu +56 % vs 34.1 GB/s (2 runs)"


def test_two_cpus_sharing_a_model_name_stay_two_machines(tmp_path):
    """Every AMD EPYC VM reports "AMD EPYC": a Zen 3 and a Zen 4 run of the
    same cases must not collapse into one machine, and each machine's
    speedups are over its own seed."""
    zen3 = dict(QUIET, hardware=dict(HARDWARE, cpu_family_model="25-1"))
    zen4 = dict(QUIET, hardware=dict(HARDWARE, cpu_family_model="25-17"))
    first = fixture_run(tmp_path / "zen3", meta=zen3)
    second = fixture_run(tmp_path / "zen4", meta=zen4, start_time="2026-11-23T00:00:00+00:00",
                         row_fields={"seed_loops": {"median_s": 8e-3, "iqr_s": 4e-4}})  # stable: a fit run
    rows, _metas = report_load.load([first, second])
    assert rows["machine"].nunique() == 2
    assert len(rows) == 2 * len(report_load.load([first])[0])
    fastest = rows[rows["strategy"] == "torch_max_pool2d_indices"].groupby("machine")["speedup"].max()
    assert fastest.nunique() == 2  # the same numba time over two different seed times


def test_dashboard_keeps_two_cpus_sharing_a_name_apart(tmp_path):
    from harness.presenting import dashboard

    zen3 = dict(QUIET, hardware=dict(HARDWARE, cpu_family_model="25-1"))
    zen4 = dict(QUIET, hardware=dict(HARDWARE, cpu_family_model="25-17"))
    fixture_run(tmp_path / "runs" / "zen3", meta=zen3)
    fixture_run(tmp_path / "runs" / "zen4", meta=zen4, start_time="2026-11-23T00:00:00+00:00",
                row_fields={"seed_loops": {"median_s": 8e-3}})
    history = dashboard.load_history(tmp_path / "runs")[0]
    assert history["machine"].nunique() == 2


def test_runs_table_says_threads_in_words_and_wide_tables_scroll(tmp_path):
    run = fixture_run(tmp_path / "run", meta=dict(QUIET, threads={"torch": 2, "blas": None, "numba": None}))
    md = report.build([run], tmp_path / "out").read_text()
    assert "numba default, numpy default, torch 2" in md and '"blas": null' not in md
    assert "<div class='wide'><table>" in (tmp_path / "out" / "report.html").read_text()


def test_a_run_stopped_before_its_last_case_is_named_with_what_it_reached(tmp_path):
    """A GPU lease ran out mid-sweep: the report must say the missing cases
    were never reached, not leave the reader to think the sweep was smaller."""
    stopped = fixture_run(tmp_path / "stopped", meta=dict(QUIET, n_cases=99, status="interrupted",
                                                          interrupted_by="SIGTERM"))
    md = report.build([stopped], tmp_path / "out").read_text()
    assert "Warning: run stopped was stopped by SIGTERM after " in md and " of its 99 cases" in md
    finished = fixture_run(tmp_path / "finished", meta=dict(QUIET, n_cases=99, status="complete"))
    assert "was stopped" not in report.build([finished], tmp_path / "out2").read_text()


def test_the_reproduce_line_keeps_the_options_that_chose_what_was_measured(tmp_path):
    """A models run of one operator (``--op maxpool2d``) read as the whole
    config: its Reproduce line now gives that run, and leaves out where it
    wrote and how it showed progress."""
    command = ("/work/main/harness/__main__.py run configs/x.yaml --op maxpool2d --strategy=seed_loops "
               "--strategy numba_fused -o results/x --no-progress --resume results/x")
    md = report.build([fixture_run(tmp_path / "run", meta={"command": command})], tmp_path / "out",
                      light=True).read_text()
    assert ("make venv && .venv/bin/python -m harness run configs/x.yaml --op maxpool2d --strategy seed_loops "
            "--strategy numba_fused\n") in md


def test_a_resumed_runs_two_ceilings_are_both_named_in_its_sections_intro():
    """The H200 run, stopped and resumed, measured its ceiling twice (4,137
    and 4,174 GB/s); its section named only the first row's."""
    import pandas as pd

    section = pd.DataFrame({"device": "cuda", "machine": "cuda: H200", "dtype": "float32", "run_dir": "g",
                            "ceiling_gbps": [4136.9, 4174.5, 4136.9], "host_s": math.nan, "xcheck_s": math.nan})
    intro = report_sections.section_intro(section, [{"directory": "g", "run_id": "gpu"}])
    assert intro.startswith("cuda: H200, float32: copy ceiling 4,137 to 4,174 GB/s (measured again when resumed) "
                            "(run gpu).")
    one = report_sections.section_intro(section.assign(ceiling_gbps=4136.9), [{"directory": "g", "run_id": "gpu"}])
    assert one.startswith("cuda: H200, float32: copy ceiling 4,137 GB/s (run gpu).")


def test_the_report_says_whether_curves_measured_apart_agree_within_ten_percent():
    """Issue 50: a machine's curves are stable, and the report says so: per machine and thread
    setting, the runs that measured their own curves and how far they stray from their median."""
    from harness.presenting.report.sections import curves_agreement_table
    from tests.harness.results.test_floors import CURVE, measured_meta

    read, write = CURVE["read_gbps"], CURVE["write_gbps"]
    apart = [measured_meta("run-aaaa", read, write), measured_meta("run-bbbb", [1.05 * r for r in read], write),
             measured_meta("run-cccc", read, write, reused=True)]  # reused: not a measurement
    header, table = curves_agreement_table(apart)
    row = dict(zip(header, table[0]))
    assert len(table) == 1 and row["runs that measured their curves"] == "aaaa, bbbb" and table[0][-1] == "yes"
    assert row["read: largest deviation"].startswith("±2.") and header[-1] == "every point within ±10 %"
    strayed = [measured_meta("run-aaaa", read, write), measured_meta("run-bbbb", [1.3 * r for r in read], write)]
    assert curves_agreement_table(strayed)[1][0][-1] == "no"
    alone = curves_agreement_table(apart[:1])[1]
    assert alone[0][-1] == "one measurement: nothing to compare yet"


def test_curves_of_two_methods_are_compared_each_with_its_own():
    """A method-3 curve (the median of tries) and a method-4 one (the fastest) of one machine are
    two measurements of two things: each method gets its own row, never one comparison."""
    from harness.presenting.report.sections import curves_agreement_table
    from tests.harness.results.test_floors import CURVE, measured_meta

    read, write = CURVE["read_gbps"], CURVE["write_gbps"]
    runs = [measured_meta("run-aaaa", read, write, method=3), measured_meta("run-bbbb", read, write, method=3),
            measured_meta("run-cccc", [1.3 * r for r in read], write, method=4)]
    header, table = curves_agreement_table(runs)
    rows = {row[3]: dict(zip(header, row)) for row in table}
    assert set(rows) == {"3", "4"}
    assert rows["3"]["runs that measured their curves"] == "aaaa, bbbb" and rows["3"][header[-1]] == "yes"
    assert rows["4"][header[-1]] == "one measurement: nothing to compare yet"
