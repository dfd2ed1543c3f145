"""Nothing derived that the stored data cannot give (issue 40, item 3): a
committed run's derived columns recompute from its own files, and a value
its files cannot back is left empty; a new row's floor by size recomputes
from the rates it stored; an older run reads with the new columns empty."""

import json
import math
from pathlib import Path

import numpy as np
import pytest

from harness.results import floors, stats, store
from impls import training
from impls.backends import itemsize
from impls.registry import get_operator

ROOT = Path(__file__).resolve().parents[3]
# Resumed: its dispersion rows were measured by the first attempt (ceiling 33.96 GB/s, a
# fresh-write rate of 8.39 GB/s that no file records), its meta.json holds the second's.
RESUMED = ROOT / "results" / "20261126T055540-vm-models-8464"


def written_bytes(row) -> int:
    op = get_operator(row["op"])
    return training.bytes_written(op, json.loads(row["params"]), itemsize(row["dtype"]), row["mode"],
                                  op.strategies[row["strategy"]].returns)


def test_the_resumed_runs_stored_fresh_floors_rest_on_a_rate_its_files_do_not_hold():
    """What the audit found, from the raw file: the dispersion rows' stored
    fresh floors back-solve to 8.39 GB/s, while meta.json says 18.2."""
    meta = store.read_meta(RESUMED)
    stored = store.read_rows(RESUMED)
    row = stored[stored["op"] == "dispersion"].iloc[0]
    written = written_bytes(row)
    read_s = (row["bytes"] - written) / (row["ceiling_gbps"] * 1e9)
    assert written / (row["fresh_floor_s"] - read_s) / 1e9 == pytest.approx(8.39, abs=0.01)
    assert max(meta["fresh_write_gbps"].values()) == pytest.approx(18.23, abs=0.01)
    assert row["ceiling_gbps"] != meta["ceilings_gbps"]["cpu"]


def test_a_committed_runs_derived_columns_recompute_from_its_files_or_are_left_empty():
    meta, rows, _ = store.read_run(RESUMED)
    fresh = max(meta["fresh_write_gbps"].values())
    assert len(rows) == 126
    left_empty = recomputed = 0
    for _, row in rows.iterrows():
        ceiling = row["ceiling_gbps"]
        assert row["floor_s"] == pytest.approx(row["bytes"] / (ceiling * 1e9), rel=1e-12)
        assert row["pct_of_ceiling"] == pytest.approx(100 * row["floor_s"] / row["median_s"], rel=1e-12)
        if ceiling != meta["ceilings_gbps"]["cpu"]:  # measured under rates its meta no longer holds
            assert math.isnan(row["fresh_floor_s"]) and math.isnan(row["pct_of_fresh_floor"])
            left_empty += 1
            continue
        written = written_bytes(row)
        expected = stats.fresh_floor_s(row["bytes"], written, ceiling, fresh)
        assert row["fresh_floor_s"] == pytest.approx(expected, rel=1e-12)
        assert row["pct_of_fresh_floor"] == pytest.approx(100 * expected / row["median_s"], rel=1e-12)
        recomputed += 1
    assert (left_empty, recomputed) == (66, 60)
    # a run from before the floor by size has none: no curves were measured
    assert meta["schema_version"] == store.SCHEMA_VERSION and meta["schema_written"] == 6
    assert rows[["floor_by_size_s", "pct_of_floor", "read_gbps_used", "write_gbps_used"]].isna().all().all()
    assert (rows["floor_write_curve"] == "").all()


@pytest.mark.parametrize("run", ["20261122T185854-vm-seeds-392e", "20261123T171129-vm-default-ad4d",
                                 "20261125T111017-vm-default-ea9f", "20261126T093639-vm-models-450c"])
def test_older_runs_of_every_schema_read_with_the_new_columns_empty(run):
    meta, rows, _ = store.read_run(ROOT / "results" / run)
    assert meta["schema_version"] == store.SCHEMA_VERSION and set(store.COLUMNS) <= set(rows.columns)
    assert rows["pct_of_floor"].isna().all() and rows["bytes_written"].isna().all()
    assert rows["within_round_iqr_s"].isna().all()  # schema 9: no rounds, the samples' IQR judges them


def test_a_new_rows_floor_by_size_recomputes_from_its_stored_columns(tmp_path):
    curve = {"sizes_bytes": [4096, 1 << 30], "read_gbps": [80.0, 8.0], "write_gbps": [40.0, 4.0],
             "fresh_write_gbps": {"numpy": [10.0, 2.0]}}
    params = {"N": 2, "C": 3, "H": 8, "W": 8, "k": 2}
    op = get_operator("maxpool2d")
    row = {"run_id": "r", "case_id": "a", "op": "maxpool2d", "strategy": "numba_fused", "backend": "numba",
           "device": "cpu", "dtype": "float32", "params": json.dumps(params), "mode": "forward", "status": "ok",
           "message": "", "median_s": 2e-6, "bytes": float(op.bytes_moved(params, 4, op.whole_output))}
    row.update(floors.case_floor("maxpool2d", "numba_fused", params, "float32", "cpu", "forward", row,
                                 {"cpu": curve}))
    writer = store.RunWriter(tmp_path, {"run_id": "r", floors.CURVES: {"cpu": curve}})
    writer.append(row, [2e-6] * 3)
    writer.close()
    _, rows, _ = store.read_run(tmp_path)
    read_back = rows.iloc[0]
    assert read_back["floor_write_curve"] == f"fresh numpy, {floors.PER_OUTPUT}"
    floor, pct = floors.recomputed(read_back)
    assert floor == pytest.approx(read_back["floor_by_size_s"], rel=1e-12) and floor > 0
    assert pct == pytest.approx(read_back["pct_of_floor"], rel=1e-12)


# The published default run with rounds and floors by size (docs/RUNS).
ROUNDS_RUN = ROOT / "results" / "20261129T002858-vm-default-5b79"


def test_a_published_run_with_rounds_recomputes_its_rounds_and_floors_from_its_files():
    """Item 3 for the columns rounds and floors by size added: each timed
    row's median, round medians and within-round IQR from its raw samples
    (samples.jsonl, with each round's sample count), and its floor by size
    from the rates it stored, those rates read off the run's own curves."""
    meta, rows, _ = store.read_run(ROUNDS_RUN)
    assert str(ROUNDS_RUN.relative_to(ROOT)) in (ROOT / "docs" / "RUNS").read_text().split()
    records = {record["case_id"]: record for record in map(json.loads, (ROUNDS_RUN / "samples.jsonl").read_text().splitlines())}
    curve = meta[floors.CURVES]["cpu"]
    timed = rows[rows["median_s"].notna()]
    assert len(timed) == 93
    for _, row in timed.iterrows():
        record = records[row["case_id"]]
        samples, sizes = record["samples_s"], record["round_sizes"]
        assert len(sizes) == 3 and sum(sizes) == len(samples) == row["n_samples"]
        rounds = [samples[sum(sizes[:i]):sum(sizes[:i + 1])] for i in range(len(sizes))]
        assert row["median_s"] == pytest.approx(float(np.median(samples)), rel=1e-12)
        assert json.loads(row["round_medians_s"]) == pytest.approx([float(np.median(r)) for r in rounds], rel=1e-12)
        assert row["within_round_iqr_s"] == pytest.approx(stats.within_round_iqr_s(rounds, row["median_s"]), rel=1e-9)
        assert row["read_gbps_used"] == pytest.approx(
            floors.rate_at(curve["sizes_bytes"], curve["read_gbps"], row["bytes"]), rel=1e-12)
        floor, pct = floors.recomputed(row)
        assert floor == pytest.approx(row["floor_by_size_s"], rel=1e-12)
        assert pct == pytest.approx(row["pct_of_floor"], rel=1e-12)


# models.yaml's max-pool at two threads on the Xeon 6-167 VM, written before each output was priced
# at its own size: its stem's channels-last forward at batch 64 (51 MB of values, 103 MB of indices)
# stored 118.9 % of a floor that priced both at their 154 MB total's fresh-write rate.
TOTAL_PRICED_RUN = ROOT / "results" / "20261206T090027-vm-models-da49"


def test_a_run_that_priced_its_outputs_at_their_total_is_priced_per_output_from_its_own_curves():
    stored = store.read_rows(TOTAL_PRICED_RUN)
    meta, rows, _ = store.read_run(TOTAL_PRICED_RUN)
    stem = ((rows["strategy"] == "numba_fused") & (rows["mode"] == "forward") & (rows["layout"] == "channels_last")
            & rows["params"].str.contains('"N": 64') & rows["params"].str.contains('"s": 2'))
    assert stem.sum() == 1
    assert stored.loc[stem, "pct_of_floor"].item() == pytest.approx(118.95, abs=0.01)
    read_back = rows[stem].iloc[0]
    assert read_back["pct_of_floor"] < floors.OVER_FLOOR_PCT
    assert read_back["floor_write_curve"] == f"fresh numpy, {floors.PER_OUTPUT}"
    # the rates come from the run's own curves, the values and indices each at its own size
    curve = meta[floors.CURVES]["cpu"]
    pooled = 64 * 64 * 56 * 56
    values, indices = pooled * 4, pooled * 8
    rates = curve["fresh_write_gbps"]["numpy"]
    seconds = sum(size / floors.rate_at(curve["sizes_bytes"], rates, size) for size in (values, indices))
    assert read_back["write_gbps_used"] == pytest.approx((values + indices) / seconds, rel=1e-12)
    assert read_back["read_gbps_used"] == stored.loc[stem, "read_gbps_used"].item()
    # nothing over the floor is left in the run
    assert not (rows["pct_of_floor"] > floors.OVER_FLOOR_PCT).any()
