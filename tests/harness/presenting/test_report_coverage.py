"""The report says only what its runs cover, and why a column is blank
(issue 24): no defects of operators it did not run, and a blank × seed
with its reason where the seed's original is not among the strategies."""

import json

import report
from harness.results.store import COLUMNS, RunWriter


def run_of(directory, op, params, entries, meta=None):
    """A result directory of one case of ``op``: (strategy, backend, median) entries, all ok."""
    writer = RunWriter(directory, {"run_id": directory.name, "cpu_model": "Fixture CPU", "cpu_count": 2,
                                   "config_file": "configs/x.yaml", "start_time": "2026-11-22T00:00:00+00:00",
                                   "load_avg_start": [0.2, 0.2, 0.2], "load_avg_end": [0.3, 0.2, 0.2],  # quiet: fit
                                   **(meta or {})})
    for name, backend, median in entries:
        row = {column: "" for column in COLUMNS}
        row.update(run_id=directory.name, case_id=f"{op}|{name}", op=op, strategy=name, backend=backend,
                   device="cpu", dtype="float32", params=json.dumps(params), status="ok", median_s=median,
                   iqr_s=median / 100, n_samples=5, bytes=1000, source="added")
        writer.append(row, [median] * 5)
    writer.close()
    return directory


DISPERSION = dict(B=1, C=4, H=8, W=8, S=1)
MAXPOOL = dict(N=1, C=1, H=8, W=8, k=2)


def test_the_defects_section_lists_only_the_operators_the_report_covers(tmp_path):
    dispersion = run_of(tmp_path / "dispersion", "dispersion", DISPERSION,
                        [("seed_loop", "torch", 1e-3), ("torch_index_add", "torch", 1e-4)])
    text = report.build([dispersion], tmp_path / "out", light=True).read_text()
    assert "Defects and documented behaviour" not in text and "maxpool2d/seed_loops" not in text
    maxpool = run_of(tmp_path / "maxpool", "maxpool2d", MAXPOOL,
                     [("seed_loops", "numpy", 1e-3), ("torch_max_pool2d_indices", "torch", 1e-5)])
    text = report.build([maxpool, dispersion], tmp_path / "both", light=True).read_text()
    assert "Defects and documented behaviour" in text
    # numpy's ±0 rule is documented behaviour, listed once for its three strategies (issue 41 item 4).
    documented = text.split("### Documented behaviour", 1)[1]
    assert documented.count("numpy-max-zero-sign: numpy, maxpool2d/seed_loops, maxpool2d/seed_loop_max") == 1


def test_speedup_is_blank_with_its_reason_when_the_seeds_original_was_not_run(tmp_path):
    run = run_of(tmp_path / "run", "maxpool2d", MAXPOOL,
                 [("torch_max_pool2d_indices", "torch", 1e-5), ("numpy_sliding_window", "numpy", 1e-4)])
    text = report.build([run], tmp_path / "out", light=True).read_text()
    header = next(line for line in text.splitlines() if line.startswith("| strategy |")).split(" | ")
    row = next(line for line in text.splitlines() if line.startswith("| numpy_sliding_window |")).split(" | ")
    assert row[header.index("× seed")] == "", row  # blank, not "–" as for a strategy that failed
    assert "× seed is blank: the seed's original, seed_loops, was not among the strategies run." in text
    with_seed = run_of(tmp_path / "seeded", "maxpool2d", MAXPOOL,
                       [("seed_loops", "numpy", 1e-3), ("torch_max_pool2d_indices", "torch", 1e-5)])
    text = report.build([with_seed], tmp_path / "seeded-out", light=True).read_text()
    assert "× seed is blank" not in text and "**100×**" in text
