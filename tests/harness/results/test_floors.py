"""A row's floor by size (harness/results/floors.py): rates interpolated on
the curves in log-size, the in-cache rate for a case that fits in a cache,
the write curve of the allocator its strategy uses, the rates stored so the
floor recomputes from the row, and one threshold and wording for a row over
its floor."""

import math

import pytest

from harness.results import floors
from impls.backends import itemsize
from impls.registry import get_operator

KIB, MIB = 1 << 10, 1 << 20
# A machine whose reads run at 100 GB/s while they fit in its 1 MiB of cache
# and at 10 GB/s from memory; reused writes at half that; numpy's fresh pages
# at 4 GB/s once they come from the OS, torch's at 2 GB/s.
SIZES = [4 * KIB, 64 * KIB, 1 * MIB, 16 * MIB, 256 * MIB]
CURVE = {"sizes_bytes": SIZES, "read_gbps": [100.0, 100.0, 100.0, 10.0, 10.0],
         "write_gbps": [50.0, 50.0, 50.0, 5.0, 5.0],
         "fresh_write_gbps": {"numpy": [20.0, 20.0, 20.0, 4.0, 4.0], "torch": [10.0, 10.0, 10.0, 2.0, 2.0]},
         "tries": [{"load": 0.2}] * 5, "busy": None}
CURVES = {"cpu": CURVE, "cuda": {**CURVE, "fresh_write_gbps": {}}}


def test_rates_are_interpolated_in_log_size_and_held_at_the_ends():
    sizes, rates = [1e3, 1e5], [100.0, 10.0]
    assert floors.rate_at(sizes, rates, 1e4) == pytest.approx(55.0)  # half way in log-size, not at 50,500 bytes
    assert floors.rate_at(sizes, rates, 10) == 100.0 and floors.rate_at(sizes, rates, 1e9) == 10.0
    assert floors.rate_at(list(reversed(sizes)), list(reversed(rates)), 1e4) == pytest.approx(55.0)
    assert math.isnan(floors.rate_at(sizes, rates, 0)) and math.isnan(floors.rate_at([], [], 1e4))
    assert floors.rate_at([1e3, 1e4, 1e5], [100.0, math.nan, 10.0], 1e4) == pytest.approx(55.0)  # a gap is skipped


def maxpool_floor(strategy, N, device="cpu", median_s=1e-3, mode="forward"):
    params = {"N": N, "C": 4, "H": 64, "W": 64, "k": 2}
    op = get_operator("maxpool2d")
    moved = op.bytes_moved(params, itemsize("float32"), op.strategies[strategy].returns)
    return moved, floors.case_floor("maxpool2d", strategy, params, "float32", device, mode,
                                    {"bytes": moved, "median_s": median_s}, CURVES)


def test_a_cache_resident_cases_floor_uses_the_in_cache_bandwidth():
    small_bytes, small = maxpool_floor("numba_fused", 1)  # 80 KiB: inside the 1 MiB cache
    large_bytes, large = maxpool_floor("numba_fused", 1024)  # 80 MiB: from memory
    assert small_bytes < MIB < 16 * MIB < large_bytes
    assert small["read_gbps_used"] == 100.0 and large["read_gbps_used"] == 10.0
    # numba's outputs are numpy arrays: numpy's fresh pages, each output (values, indices) at its own size
    assert small["floor_write_curve"] == large["floor_write_curve"] == f"fresh numpy, {floors.PER_OUTPUT}"
    assert small["write_gbps_used"] == pytest.approx(20.0) and large["write_gbps_used"] == pytest.approx(4.0)
    # outputs between two sizes: each at its rate half way in log-size
    middle = maxpool_floor("numba_fused", 128)[1]
    values, indices = middle["bytes_written"] / 3, 2 * middle["bytes_written"] / 3  # float32 and int64
    assert MIB < values < indices < 16 * MIB

    def rate(size):
        return 20.0 + math.log(size / MIB) / math.log(16) * (4.0 - 20.0)

    seconds = values / rate(values) + indices / rate(indices)
    assert middle["write_gbps_used"] == pytest.approx(middle["bytes_written"] / seconds)
    for moved, found in ((small_bytes, small), (large_bytes, large)):
        written = found["bytes_written"]
        expected = (moved - written) / (found["read_gbps_used"] * 1e9) + written / (found["write_gbps_used"] * 1e9)
        assert found["floor_by_size_s"] == pytest.approx(expected, rel=1e-12)
        assert found["pct_of_floor"] == pytest.approx(100 * expected / 1e-3)
    # a copy-ceiling floor at memory's rate would have put the small case at a tenth of this
    assert small["floor_by_size_s"] < small_bytes / 10e9


def test_each_strategy_pays_the_write_curve_of_the_allocator_it_uses():
    assert maxpool_floor("torch_max_pool2d_indices", 1)[1]["floor_write_curve"] == f"fresh torch, {floors.PER_OUTPUT}"
    assert maxpool_floor("numpy_sliding_window", 1)[1]["floor_write_curve"] == f"fresh numpy, {floors.PER_OUTPUT}"
    assert floors.allocator_of("numba") == floors.allocator_of("pytensor") == "numpy"
    assert floors.allocator_of("jax") == "" and floors.allocator_of("no-such-backend") == ""
    # a pool of its own (JAX's) writes at the reused rate, the fastest: a floor stays a floor
    assert floors.write_curve(CURVE, "")[0] == floors.REUSED
    # CUDA's caching allocator hands back touched memory: the reused curve
    found = maxpool_floor("torch_max_pool2d_indices", 1, device="cuda")[1]
    assert found["floor_write_curve"] == floors.REUSED and found["write_gbps_used"] == 50.0


def test_each_fresh_output_is_priced_at_its_own_size_and_a_reused_write_at_the_total():
    # Max-pool's values and indices are two allocations: the values may come from memory the heap
    # holds while the indices need new pages, so each pays its own size's first-touch rate, never
    # the total's (a 154 MB pair priced as one read 119 % of its floor on the Xeon 6-167 VM).
    heap_edge = {**CURVE, "fresh_write_gbps": {"numpy": [20.0, 20.0, 20.0, 20.0, 4.0]}}
    values, indices = 20 * MIB, 40 * MIB
    found = floors.row_floor(200 * MIB, values + indices, 1e-3, heap_edge, "numpy", (values, indices))
    sizes, rates = SIZES, heap_edge["fresh_write_gbps"]["numpy"]
    seconds = values / floors.rate_at(sizes, rates, values) + indices / floors.rate_at(sizes, rates, indices)
    assert found["write_gbps_used"] == pytest.approx((values + indices) / seconds)
    assert found["write_gbps_used"] > floors.rate_at(sizes, rates, values + indices)  # the total's: slower
    assert found["floor_write_curve"] == f"fresh numpy, {floors.PER_OUTPUT}"
    # one output: its size's rate, as before; a pool's reused memory: cache residency is the total's
    alone = floors.row_floor(200 * MIB, values + indices, 1e-3, heap_edge, "numpy", (values + indices,))
    assert alone["write_gbps_used"] == floors.rate_at(sizes, rates, values + indices)
    assert alone["floor_write_curve"] == "fresh numpy"
    reused = floors.row_floor(200 * MIB, values + indices, 1e-3, heap_edge, "", (values, indices))
    assert reused["floor_write_curve"] == floors.REUSED
    assert reused["write_gbps_used"] == floors.rate_at(sizes, CURVE["write_gbps"], values + indices)
    # the rows' rates still give their floor back
    assert floors.recomputed({"bytes": 200 * MIB, "median_s": 1e-3, **found}) == (
        found["floor_by_size_s"], found["pct_of_floor"])


def test_a_run_priced_at_the_outputs_total_is_priced_again_from_its_own_curves_when_read():
    import json

    import pandas as pd

    params = {"N": 64, "C": 4, "H": 64, "W": 64, "k": 2}
    moved, now = maxpool_floor("numba_fused", 64, median_s=2e-3)
    # the row as an earlier checkout stored it: all its outputs at their total's rate
    total_rate = floors.rate_at(SIZES, CURVE["fresh_write_gbps"]["numpy"], now["bytes_written"])
    old = {**now, "floor_write_curve": "fresh numpy", "write_gbps_used": total_rate}
    old["floor_by_size_s"] = floors.floor_from_rates(moved, now["bytes_written"], now["read_gbps_used"], total_rate)
    old["pct_of_floor"] = floors.pct_of_floor(old["floor_by_size_s"], 2e-3)
    base = {"op": "maxpool2d", "strategy": "numba_fused", "params": json.dumps(params), "dtype": "float32",
            "device": "cpu", "mode": "forward", "bytes": moved, "median_s": 2e-3}
    other_attempt = {**base, **old, "read_gbps_used": now["read_gbps_used"] * 2}  # priced by other curves
    unpool = {**base, **old, "op": "maxunpool"}  # one output: nothing to price again
    rows = pd.DataFrame([{**base, **old}, other_attempt, unpool])
    again = floors.repriced(rows, CURVES)
    assert again.loc[0, "write_gbps_used"] == pytest.approx(now["write_gbps_used"])
    assert again.loc[0, "pct_of_floor"] == pytest.approx(now["pct_of_floor"])
    assert again.loc[0, "floor_write_curve"] == now["floor_write_curve"]
    assert again.loc[0, "pct_of_floor"] < old["pct_of_floor"]  # a lower floor: a bound that holds
    for index in (1, 2):
        assert again.loc[index].to_dict() == rows.loc[index].to_dict()
    assert rows.loc[0, "write_gbps_used"] == total_rate  # a copy: the rows read are left as they were
    assert floors.repriced(rows, None).equals(rows)


def test_a_training_modes_floor_counts_the_gradient_written():
    forward = maxpool_floor("torch_max_pool2d_indices", 1, mode="forward")[1]
    backward = maxpool_floor("torch_max_pool2d_indices", 1, mode="backward")[1]
    assert backward["bytes_written"] > forward["bytes_written"]  # the input's gradient, not the pooled output


def test_the_floor_recomputes_from_the_rows_own_columns():
    moved, found = maxpool_floor("numba_fused", 1024, median_s=0.02)
    floor, pct = floors.recomputed({"bytes": moved, "median_s": 0.02, **found})
    assert floor == found["floor_by_size_s"] and pct == found["pct_of_floor"]


def test_an_operator_that_does_not_split_its_bytes_is_charged_at_the_read_rate():
    found = floors.row_floor(10 * MIB, None, 1e-3, CURVE, "numpy")
    assert found["floor_write_curve"].startswith("unsplit") and math.isnan(found["bytes_written"])
    assert found["floor_by_size_s"] == pytest.approx(10 * MIB / (floors.rate_at(SIZES, CURVE["read_gbps"],
                                                                                10 * MIB) * 1e9))


def test_no_curve_no_floor():
    for curves in (None, {}, {"cpu": {**CURVE, "busy": "load 3 on 2 cores"}}, {"cpu": {"sizes_bytes": []}}):
        assert floors.usable_curve(curves, "cpu") is None
    params = {"N": 1, "C": 4, "H": 64, "W": 64, "k": 2}
    assert floors.case_floor("maxpool2d", "gone", params, "float32", "cpu", "forward", {"bytes": 1.0},
                             CURVES) == floors.EMPTY
    assert floors.case_floor("no-such-op", "x", {}, "float32", "cpu", "forward", {}, CURVES) == floors.EMPTY


def test_over_the_floor_is_flagged_never_a_plain_percentage():
    assert floors.floor_cell(109.0) == "109 %" and not floors.over_floor(110.0)
    flagged = floors.floor_cell(560.0)
    assert floors.OVER_FLOOR_TEXT in flagged and "560" not in flagged and "%" not in flagged
    assert floors.floor_cell(560.0, short=True) == "⚠ over the floor"
    assert floors.over_floor_line("maxunpool/numba_fused", 182.0).startswith(
        "maxunpool/numba_fused: ⚠ over the floor: bytes formula or curve wrong")
    assert floors.over_floor_line("x", 90.0) is None and floors.floor_cell(math.nan) == "–"
    assert f"{floors.OVER_FLOOR_PCT:.0f} %" in floors.floor_note()


def test_a_fresh_floor_passed_in_a_cache_is_marked_beside_its_number_not_called_wrong():
    """The fresh floor prices every size at one large buffer's rates, as the
    copy ceiling does. On the Intel Xeon 6-167 VM (run cdd5) a 64x16x28x28
    max-pool, its 5.6 MB in the caches, read 189 % of it: the floor by size
    said 79 %. The case table said "bytes formula or curve wrong" of it."""
    assert floors.ceiling_cell(189.0) == "⚠ 189 %" and floors.ceiling_cell(79.0) == "79 %"
    assert floors.OVER_FLOOR_TEXT not in floors.ceiling_cell(189.0)
    assert "fresh floor" in floors.ceiling_note() and "cache" in floors.ceiling_note()


def test_the_reports_run_table_says_which_curves_a_run_used():
    meta = {floors.CURVES: {"cpu": {**CURVE, "measured_at": "2030-01-02T03:04:05+00:00"},
                            "cuda": {**CURVE, "busy": "load 3 on 2 cores"}},
            f"{floors.CURVES}_reused": {"cpu": "2030-01-02T03:04:05+00:00"}}
    assert floors.curves_cell(meta) == ("cpu reused from 2030-01-02T03:04:05+00:00, "
                                        "cuda measured busy (load 3 on 2 cores), not used")
    del meta[f"{floors.CURVES}_reused"]
    assert floors.curves_cell(meta).startswith("cpu measured 2030-01-02T03:04:05+00:00")
    assert floors.curves_cell({}) == "–"


def measured_meta(run_id, read, write, *, reused=False, method=floors.CURVE_METHOD, busy=None, threads=None):
    curve = {**CURVE, "read_gbps": read, "write_gbps": write, "method": method, "busy": busy}
    return {"run_id": run_id, "threads": threads or {"numba": 1, "numpy": 1, "torch": 1},
            floors.CURVES: {"cpu": curve},
            f"{floors.CURVES}_reused": {"cpu": "2026-12-05T00:00:00+00:00"} if reused else {}}


def test_only_a_curve_a_run_measured_itself_quietly_counts_as_a_measurement():
    read, write = CURVE["read_gbps"], CURVE["write_gbps"]
    assert floors.own_curve(measured_meta("a", read, write)) is not None
    assert floors.own_curve(measured_meta("a", read, write, reused=True)) is None  # a second look at one measurement
    assert floors.own_curve(measured_meta("a", read, write, method=1)) is None  # torch's rates alone: not comparable
    assert floors.own_curve(measured_meta("a", read, write, method=3))["method"] == 3  # compared with method 3's
    assert floors.own_curve(measured_meta("a", read, write, busy="load 3 on 2 cores")) is None
    assert floors.own_curve(measured_meta("a", read, write), "cuda") is None


def test_curves_measured_apart_are_compared_point_by_point_with_their_median():
    read, write = CURVE["read_gbps"], CURVE["write_gbps"]
    # a third run whose in-cache reads ran 30 % faster at 64 KiB, its writes 5 % slower everywhere
    faster = [100.0, 130.0, 100.0, 10.0, 10.0]
    curves = [floors.own_curve(measured_meta(run, *rates)) for run, rates in
              (("a", (read, write)), ("b", (read, write)), ("c", (faster, [0.95 * rate for rate in write])))]
    found = floors.curves_deviation(curves)
    assert found["read"] == (pytest.approx(30.0), 64 * KIB)
    assert found["write"][0] == pytest.approx(5.0)
