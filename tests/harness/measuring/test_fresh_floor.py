"""Every CPU row of a fresh run carries its fresh-output-aware floor (issue 31):
bytes read at the copy ceiling plus the outputs' bytes at the run's best
fresh-write bandwidth, and the median's % of it, beside % of the copy ceiling."""

import json
import math

import pytest

from harness.results import stats, store
from impls.backends import itemsize
from impls.registry import get_operator
from tests.helpers import plugin_env, scatterbench

pytestmark = pytest.mark.slow  # a sweep in a subprocess, the machine measured


@pytest.mark.quiet  # the fresh-write rates and curves measured for real
def test_every_cpu_row_of_a_fresh_run_has_its_fresh_output_floor(tiny_config, tmp_path):
    config = tiny_config("""
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0}
threads: {torch: 1, blas: 1, numba: 1}
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d_indices, torch_max_pool2d]
    params: {N: 1, C: 2, H: 64, W: 64, k: 2}
  - op: dispersion_pinv
    strategies: [torch_unfold_view]
    params: {B: 1, C: 4, H: 16, W: 16, S: 2}
""")
    # A quiet machine taken as given: on a busy one the ceiling is flagged, and no floor is given at all.
    result = scatterbench("run", config, "-o", tmp_path / "out", "--no-progress",
                          env=plugin_env("quiet_machine_plugin", accurate_ceilings=True))
    assert result.returncode == 0, result.stderr
    meta, rows, _ = store.read_run(tmp_path / "out")
    fresh = max(meta["fresh_write_gbps"].values())
    assert len(rows) == 3 and (rows["device"] == "cpu").all()
    for _, row in rows.iterrows():
        op = get_operator(row["op"])
        written = op.bytes_written(json.loads(row["params"]), itemsize(row["dtype"]),
                                   op.strategies[row["strategy"]].returns)
        expected = (row["bytes"] - written) / (row["ceiling_gbps"] * 1e9) + written / (fresh * 1e9)
        assert row["fresh_floor_s"] == pytest.approx(expected, rel=1e-9)
        assert row["pct_of_fresh_floor"] == pytest.approx(stats.pct_of_floor(expected, row["median_s"]))
        assert math.isfinite(row["pct_of_ceiling"])  # beside it, not instead of it
    # values only writes no indices: a smaller fresh output, a smaller floor
    by_name = rows.set_index("strategy")
    assert by_name.loc["torch_max_pool2d", "fresh_floor_s"] < by_name.loc["torch_max_pool2d_indices", "fresh_floor_s"]


@pytest.mark.parametrize("missing", [None, math.nan])
def test_an_isolated_rows_empty_numbers_leave_the_floor_empty_not_a_crash(missing):
    """An isolated case's row comes back through JSON, its NaNs as None (a busy
    ceiling, an untimed case): the floor is empty, the run goes on."""
    from harness.base.config import Case
    from harness.measuring import sweep

    case = Case("maxpool2d", "torch_max_pool2d_indices", "cpu", "float32",
                (("C", 1), ("H", 8), ("N", 1), ("W", 8), ("k", 2)))
    floors = sweep.fresh_floor(case, {"bytes": 1000, "ceiling_gbps": missing, "median_s": missing}, {"numpy": 5.0})
    assert math.isnan(floors["fresh_floor_s"]) and math.isnan(floors["pct_of_fresh_floor"])
    timed = sweep.fresh_floor(case, {"bytes": 1000, "ceiling_gbps": 10.0, "median_s": missing}, {"numpy": 5.0})
    assert timed["fresh_floor_s"] > 0 and math.isnan(timed["pct_of_fresh_floor"])
