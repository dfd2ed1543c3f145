"""A strategy that moves fewer bytes than its formula says (a plugin whose
formula claims ten times its traffic) is flagged over its floor by size, in
the row and in run's tables, and never shown as a plain percentage."""

import math

import pytest

from harness.results import floors, store
from tests.helpers import plugin_env, scatterbench

pytestmark = pytest.mark.slow  # a sweep in a subprocess, the curves measured


@pytest.mark.quiet  # the bandwidth curves measured for real: a test beside them drags them down
def test_a_formula_claiming_ten_times_the_traffic_is_flagged_over_the_floor(tiny_config, tmp_path):
    config = tiny_config("""
timing: {min_samples: 5, budget_s: 0.05, warmup_s: 0.01}
threads: {torch: 1, numpy: 1, numba: 1}
benchmarks:
  - op: claimed_rowmax
    strategies: [numpy_max]
    params: {R: 1024, L: 4096}
""")
    # A quiet machine taken as given: a busy one's curves are refused, and no floor is given at all.
    result = scatterbench("run", config, "-o", tmp_path / "out", "--no-progress",
                          env=plugin_env("overclaimed_bytes_plugin", "quiet_machine_plugin", accurate_ceilings=True))
    assert result.returncode == 0, result.stderr
    meta, rows, _ = store.read_run(tmp_path / "out")
    assert meta[floors.CURVES]["cpu"]["busy"] is None and "cpu bandwidth curves" in result.stderr
    row = rows.iloc[0]
    assert row["status"] == "ok" and row["floor_write_curve"] == "fresh numpy"
    assert row["pct_of_floor"] > floors.OVER_FLOOR_PCT, row.to_dict()
    assert floors.recomputed(row)[1] == pytest.approx(row["pct_of_floor"], rel=1e-12)
    said = result.stdout
    assert f"{floors.OVER_FLOOR_MARK} {floors.OVER_FLOOR_TEXT}" in said
    assert f"{row['pct_of_floor']:.3g} %" not in said and math.isfinite(row["pct_of_ceiling"])
