import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.slow  # subprocesses, sweeps or compiles: `make test` runs them, `make test-fast` does not

ROOT = Path(__file__).parents[1]


def test_pytest_benchmark_view_collects_and_runs_a_case():
    collected = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/", "--collect-only", "-q"],
                               cwd=ROOT, capture_output=True, text=True)
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "test_case[maxpool2d-torch_max_pool2d_indices" in collected.stdout
    # quick.yaml's backward cases are their own benchmarks, judged and timed in that mode
    assert "-k2-backward]" in collected.stdout
    ran = subprocess.run([sys.executable, "-m", "pytest", "benchmarks/", "-q", "--benchmark-disable",
                          "-k", "torch_max_pool2d_indices or torch_unfold_view"],
                         cwd=ROOT, capture_output=True, text=True)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert "3 passed" in ran.stdout  # max-pool forward and backward, the pinv forward


def test_the_a_a_view_reads_two_runs_and_exits_1_on_a_contradiction(tmp_path, capsys):
    """benchmarks/aa_runs.py on a committed run against itself (no
    contradiction), and against a copy whose clear winners were made the
    slowest (every one contradicts)."""
    import importlib.util
    import shutil

    from harness.results import store

    spec = importlib.util.spec_from_file_location("aa_runs", ROOT / "benchmarks" / "aa_runs.py")
    aa_runs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(aa_runs)
    run = ROOT / "results" / "20261127T041840-vm-default-324a"
    assert aa_runs.main([str(run), str(run)]) == 0
    out = capsys.readouterr().out
    assert "contradictions: 0" in out and "in both: 7 (100 %)" in out
    slowed = tmp_path / run.name
    shutil.copytree(run, slowed)
    meta, rows, _ = store.read_run(slowed)
    rows_file = slowed / "rows.csv"
    table = pd.read_csv(rows_file, keep_default_na=False)
    clear_keys = set()
    for _, case in aa_runs.with_case_columns(rows).groupby(aa_runs.CASE_GROUP, sort=False):
        found = aa_runs.analysis.answer(case)
        if found is not None and found.clear:
            clear_keys.add(found.best["case_id"])
    for column in ("median_s", "q1_s", "q3_s", "min_s", "max_s", "p10_s"):
        if column in table:
            values = pd.to_numeric(table[column], errors="coerce")
            table[column] = values.where(~table["case_id"].isin(clear_keys), values * 1000)
    table.to_csv(rows_file, index=False)
    assert clear_keys
    assert aa_runs.main([str(run), str(slowed)]) == 1
    out = capsys.readouterr().out
    # each winner the first run claimed is now the slowest in the copy: one contradiction at least per case
    claimed = [line for line in out.splitlines() if line.startswith("contradiction:") and "the first run's" in line]
    assert len(claimed) == len(clear_keys), out


def test_the_fresh_floor_view_gives_each_answer_per_layout_and_the_curves_agreement(capsys):
    """benchmarks/fresh_floor.py on the Xeon's committed A/A pair (3122, 3a78): a row per run, case
    and layout through the report's table writer, the fresh floor of a case in a cache marked
    beside its number, and the curves' agreement under it (the closing notes' table)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fresh_floor", ROOT / "benchmarks" / "fresh_floor.py")
    fresh_floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh_floor)
    runs = [ROOT / "results" / name for name in ("20261205T213411-vm-default-3122", "20261205T213718-vm-default-3a78")]
    assert fresh_floor.main([str(run) for run in runs]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| " + " | ".join(fresh_floor.HEADER) + " |"
    rows = [line for line in lines if line.startswith("| 20261205T")]
    assert len(rows) == 22  # 11 answers (max-pool in both layouts) in each run
    first = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert first[:6] == ["20261205T213411-vm-default-3122", "jax 1, numba 1, numpy 1, torch 1", "maxpool2d",
                         "N=64 C=16 H=28 W=28 k=2", "forward", "numba_fused"]
    # each output priced at its own size (values, indices): 43.9 %, at their total it read 46.7 %
    assert first[8] == "⚠ 173 %" and first[9] == "43.9 %"
    assert any("| forward channels_last |" in row for row in rows)
    assert any(line.startswith("| vm / Intel(R) Xeon(R) Processor x2") and "| 4 | 3122, 3a78 |" in line
               and line.endswith("| no |") for line in lines)
