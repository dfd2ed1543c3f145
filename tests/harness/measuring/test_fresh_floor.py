"""Every CPU row of a fresh run carries its fresh-output-aware floor (issue 31):
bytes read at the copy ceiling plus the outputs' bytes at the run's best
fresh-write bandwidth, and the median's % of it, beside % of the copy ceiling."""

import json
import math

import pytest

from harness.results import stats, store
from impls.backends import itemsize
from impls.registry import get_operator
from tests.helpers import scatterbench

pytestmark = pytest.mark.slow  # a sweep in a subprocess, the machine measured


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
    result = scatterbench("run", config, "-o", tmp_path / "out", "--no-progress")
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
