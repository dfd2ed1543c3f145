import csv
import io
import json
import math

import pytest

from harness.results import store
from harness.results.store import (
    COLUMNS,
    ResultError,
    RunWriter,
    read_meta,
    read_rows,
    read_run,
    read_samples,
)


def row(case_id="a", status="ok", **extra):
    base = {column: "" for column in COLUMNS}
    base.update(run_id="r", case_id=case_id, op="maxpool2d", strategy="s", backend="numpy", device="cpu",
                dtype="float32", params='{"k": 2}', status=status, median_s=0.5, n_samples=5, bytes=10)
    base.update(extra)
    return base


def test_round_trip_with_samples_and_awkward_text(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a", message='comma, "quote"\nnewline <b>'), [0.1, 0.2])
    writer.append(row("b", status="error", median_s=math.nan), [])
    writer.close()
    meta, rows, samples = read_run(tmp_path)
    assert meta["schema_version"] == store.SCHEMA_VERSION
    assert list(rows["case_id"]) == ["a", "b"]
    assert rows.loc[0, "message"] == 'comma, "quote"\nnewline <b>'
    assert math.isnan(rows.loc[1, "median_s"])
    assert samples == {"a": [0.1, 0.2]}


def test_a_line_cut_off_mid_write_is_ignored_and_resumable(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a"), [0.1])
    writer.close()
    with open(tmp_path / "rows.csv", "a") as handle:
        handle.write("r,b,maxpool2d,s,num")  # killed mid-write
    with open(tmp_path / "samples.jsonl", "a") as handle:
        handle.write('{"case_id": "b", "samp')
    with pytest.warns(UserWarning, match="unfinished last line"):
        assert list(read_rows(tmp_path)["case_id"]) == ["a"]
    assert read_samples(tmp_path) == {"a": [0.1]}
    writer = RunWriter(tmp_path, {"run_id": "r", "start_time": "later"})  # resuming drops the stub
    writer.append(row("b"), [0.3])
    writer.close()
    assert list(read_rows(tmp_path)["case_id"]) == ["a", "b"]
    assert read_meta(tmp_path)["resumed"] == ["later"]


def test_a_corrupted_line_names_file_and_line(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a"))
    writer.append(row("b"))
    writer.close()
    lines = (tmp_path / "rows.csv").read_text().splitlines(keepends=True)
    lines[2] = "garbage,with,too,few,fields\r\n"
    (tmp_path / "rows.csv").write_text("".join(lines))
    with pytest.raises(ResultError, match=r"rows.csv: line 3: expected \d+ fields, found 5"):
        read_rows(tmp_path)


def test_hand_edited_number_and_status_are_reported(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a", median_s="fast"))
    writer.close()
    with pytest.raises(ResultError, match="line 2: median_s is not a number: 'fast'"):
        read_rows(tmp_path)
    (tmp_path / "rows.csv").unlink()
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a", status="great"))
    writer.close()
    with pytest.raises(ResultError, match="line 2: unknown status 'great'"):
        read_rows(tmp_path)


def test_missing_or_malformed_directories(tmp_path):
    with pytest.raises(ResultError, match="no such directory"):
        read_meta(tmp_path / "absent")
    with pytest.raises(ResultError, match="meta.json: missing"):
        read_meta(tmp_path)
    (tmp_path / "meta.json").write_text("{not json")
    with pytest.raises(ResultError, match="meta.json: line 1: malformed JSON"):
        read_meta(tmp_path)
    (tmp_path / "meta.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(ResultError, match="schema_version 99"):
        read_meta(tmp_path)


def test_unknown_columns_are_refused(tmp_path):
    writer = RunWriter(tmp_path, {"run_id": "r"})
    with pytest.raises(ValueError, match="unknown result columns"):
        writer.append(dict(row(), speed="fast"))
    writer.close()


def test_every_column_belongs_to_a_schema_version_with_its_migration_step():
    """A column added without a new schema version (and its update_to_N step)
    would make old runs read as if they had measured it."""
    from harness.results.metrics import COUNTS, TIMING

    added = [column for version in sorted(store.COLUMNS_ADDED) for column in store.COLUMNS_ADDED[version]]
    assert len(added) == len(set(added)) and set(added) <= set(COLUMNS)
    assert max(store.COLUMNS_ADDED) == store.SCHEMA_VERSION
    assert sorted(store.MIGRATIONS) == list(range(2, store.SCHEMA_VERSION + 1))
    assert set(TIMING.names) | set(COUNTS.names) <= set(COLUMNS)
    # What each version added, as committed runs were written: a column added since
    # belongs to a newer version (a metric's `schema`), never to one runs already carry.
    assert store.SCHEMA_VERSION == 11
    assert store.COLUMNS_ADDED == {2: ("host_s", "xcheck_s", "load_avg", "extra", "slow_start"),
                                   3: ("q1_s", "q3_s", "p10_s", "max_s"), 4: ("instructions", "est_cycles"),
                                   5: ("fresh_floor_s", "pct_of_fresh_floor"), 6: ("mode",),
                                   7: ("round_medians_s",),
                                   8: ("bytes_written", "read_gbps_used", "write_gbps_used", "floor_write_curve",
                                       "floor_by_size_s", "pct_of_floor"),
                                   9: ("within_round_iqr_s",),
                                   10: ("decision", "decision_round", "decided_against", "round_noise", "equivalence"),
                                   11: ("layout",)}
    schema_1 = ("run_id", "case_id", "op", "strategy", "backend", "device", "dtype", "params", "status", "message",
                "median_s", "iqr_s", "min_s", "mean_s", "n_samples", "bytes", "gbps", "ceiling_gbps", "floor_s",
                "pct_of_ceiling", "max_abs_err", "rel_err", "peak_mem_bytes", "setup_s", "source")
    assert set(COLUMNS) == set(schema_1) | set(added)


def test_each_version_is_migrated_in_turn(tmp_path):
    """A schema 2 run: its threads keyed torch/blas/numba read as backend
    names, its rows gain schema 3's columns empty, and the typed record reads
    what a damaged field holds as empty."""
    writer = RunWriter(tmp_path, {"run_id": "r"})
    writer.append(row("a"), [0.1, 0.2])
    writer.close()
    meta = json.loads((tmp_path / "meta.json").read_text())
    meta.update(schema_version=2, threads={"torch": 1, "blas": None, "numba": 1}, hardware="damaged",
                versions={"torch": "2.3.0", "numpy": "1.26.0"})
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    meta, rows, _ = read_run(tmp_path)
    assert meta["schema_version"] == store.SCHEMA_VERSION
    # update_to_6 and update_to_11: its cases timed the forward, on contiguous inputs
    assert list(rows["mode"]) == ["forward"] and list(rows["layout"]) == ["contiguous"]
    assert store.MIGRATIONS[11].__name__ == "update_to_11"
    assert meta["threads"] == {"torch": 1, "numpy": None, "numba": 1}
    assert meta["backend_versions"] == {"torch": "2.3.0", "numpy": "1.26.0"}
    typed = store.read_run_meta(tmp_path)
    assert typed.threads == {"torch": 1, "numpy": None, "numba": 1}
    assert typed.hardware.cpu_model is None and typed.hardware.caches == {}


def test_a_resumed_run_forgets_the_stop_it_resumes_from(tmp_path):
    """A GPU run stopped by SIGTERM, resumed, then killed outside the writer's
    reach read "running, interrupted by SIGTERM": the first stop's reason
    outlived it."""
    writer = RunWriter(tmp_path, {"run_id": "r", "start_time": "first"})
    writer.update_meta(status="interrupted", interrupted_by="SIGTERM")
    writer.close()
    resumed = RunWriter(tmp_path, {"run_id": "r", "start_time": "later", "status": "running"})
    meta = read_meta(tmp_path)
    assert meta["status"] == "running" and "interrupted_by" not in meta and meta["resumed"] == ["later"]
    resumed.close()


def test_an_older_run_reads_with_what_it_measured_but_did_not_store(tmp_path):
    """A schema 2 run (the Zen 5 runs of docs/REPORT.md) stored its samples
    but no quartiles, and its run's fresh-write bandwidth but no fresh floor:
    its figures drew median ± IQR/2 under a "first to third quartile" caption,
    and its tables had no % of fresh floor. Read now, its quartiles come from
    its samples (never from samples that are not the row's) and each CPU row's
    floor from its bytes, ceiling and the run's fresh-write bandwidth."""
    from harness.results import stats
    from impls.registry import get_operator

    params = {"N": 2, "C": 3, "H": 8, "W": 8, "k": 2}
    real = dict(strategy="numba_fused", params=json.dumps(params), bytes=2000.0, ceiling_gbps=10.0, median_s=3e-6)
    writer = RunWriter(tmp_path, {"run_id": "r", "fresh_write_gbps": {"numpy": 5.0, "torch": 2.0},
                                  "ceilings_gbps": {"cpu": 10.0}})
    writer.append(row("a", **real), [1e-6, 2e-6, 3e-6, 4e-6, 5e-6])
    writer.append(row("b", **dict(real, median_s=0.5)), [1e-6, 2e-6, 3e-6])  # samples that are not its own
    writer.append(row("c", **dict(real, device="cuda")), [1e-6, 2e-6, 3e-6, 4e-6, 5e-6])
    writer.close()
    meta = json.loads((tmp_path / "meta.json").read_text())
    (tmp_path / "meta.json").write_text(json.dumps(dict(meta, schema_version=2)))
    # Its rows as a schema 2 run wrote them: without the columns of schemas 3 to 6.
    newer = {name for version in range(3, store.SCHEMA_VERSION + 1) for name in store.COLUMNS_ADDED[version]}
    records = list(csv.DictReader(io.StringIO((tmp_path / "rows.csv").read_text())))
    with open(tmp_path / "rows.csv", "w", newline="") as handle:
        old = csv.DictWriter(handle, [name for name in COLUMNS if name not in newer], extrasaction="ignore")
        old.writeheader()
        old.writerows(records)
    _, rows, _ = read_run(tmp_path)
    by_case = rows.set_index("case_id")
    assert by_case.loc["a", "q1_s"] == pytest.approx(2e-6) and by_case.loc["a", "q3_s"] == pytest.approx(4e-6)
    assert by_case.loc["a", "p10_s"] == pytest.approx(1.4e-6) and by_case.loc["a", "max_s"] == 5e-6
    assert math.isnan(by_case.loc["b", "q1_s"]) and math.isnan(by_case.loc["b", "max_s"])
    op = get_operator("maxpool2d")
    floor = stats.fresh_floor_s(2000.0, op.bytes_written(params, 4, op.whole_output), 10.0, 5.0)
    assert by_case.loc["a", "fresh_floor_s"] == pytest.approx(floor)
    assert by_case.loc["a", "pct_of_fresh_floor"] == pytest.approx(100 * floor / 3e-6)
    assert math.isnan(by_case.loc["c", "fresh_floor_s"])  # a GPU's floor is the copy's


def test_a_run_written_with_the_columns_reads_as_it_stored_them(tmp_path):
    """Its empty quartiles and floor are what it measured (no samples kept,
    an operator that does not split its bytes): nothing is derived for it."""
    params = json.dumps({"N": 2, "C": 3, "H": 8, "W": 8, "k": 2})
    writer = RunWriter(tmp_path, {"run_id": "r", "fresh_write_gbps": {"numpy": 5.0}})
    writer.append(row("a", strategy="numba_fused", params=params, ceiling_gbps=10.0), [1e-6, 2e-6, 3e-6])
    writer.close()
    _, rows, _ = read_run(tmp_path)
    assert math.isnan(rows.loc[0, "q1_s"]) and math.isnan(rows.loc[0, "fresh_floor_s"])


def test_round_medians_are_stored_and_a_run_before_them_reads_as_none(tmp_path):
    """Schema 7 (SPEC 3 "Rounds"): each row keeps its rounds' medians and its
    samples line how many samples each round took; a schema 6 run, written
    without the column, reads with none, and the one rule falls back to the
    quartiles for it, saying so."""
    from harness.judging import analysis
    from harness.results import stats

    rounds = [[1e-3, 1.2e-3], [2e-3, 2e-3, 2.2e-3], [1.1e-3]]
    fast = dict(strategy="numba_fused", median_s=1e-3, q1_s=0.9e-3, q3_s=1.1e-3,
                round_medians_s=stats.round_medians_json(rounds))
    writer = RunWriter(tmp_path / "new", {"run_id": "r"})
    writer.append(row("a", **fast), [s for r in rounds for s in r], round_sizes=[len(r) for r in rounds])
    writer.close()
    _, rows, samples = read_run(tmp_path / "new")
    assert analysis.round_medians(rows.iloc[0]) == pytest.approx([1.1e-3, 2e-3, 1.1e-3])
    assert samples["a"] == [s for r in rounds for s in r]
    line = json.loads((tmp_path / "new" / "samples.jsonl").read_text())
    assert line["round_sizes"] == [2, 3, 1]

    old = tmp_path / "old"
    writer = RunWriter(old, {"run_id": "o"})
    writer.append(row("a", strategy="numba_fused", median_s=1e-3, q1_s=0.9e-3, q3_s=1.1e-3), [1e-3])
    writer.append(row("b", strategy="seed_reshape_max", median_s=2e-3, q1_s=1.9e-3, q3_s=2.1e-3), [2e-3])
    writer.close()
    records = list(csv.DictReader(io.StringIO((old / "rows.csv").read_text())))
    with open(old / "rows.csv", "w", newline="") as handle:
        written = csv.DictWriter(handle, [name for name in COLUMNS if name != "round_medians_s"],
                                 extrasaction="ignore")
        written.writeheader()
        written.writerows(records)
    meta = json.loads((old / "meta.json").read_text())
    (old / "meta.json").write_text(json.dumps(dict(meta, schema_version=6)))
    meta, rows, _ = read_run(old)
    assert meta["schema_version"] == store.SCHEMA_VERSION and list(rows["round_medians_s"]) == ["", ""]
    first, second = rows.iloc[0], rows.iloc[1]
    assert analysis.round_medians(first) == [] and analysis.rule_basis(first, second) == analysis.QUARTILE_RULE
    assert analysis.clearly_faster(first, second)  # the quartiles, apart
