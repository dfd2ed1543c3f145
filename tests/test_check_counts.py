"""benchmarks/check_counts.py: what a check costs, counted per operator on the
CPU, in this checkout or an older one (issue 58's counts before and after,
docs/GPU.md). Run as its own process: it wraps the operators' oracles and
Triton's autotuner for the whole process."""

import json
import subprocess
import sys

from tests.helpers import ROOT, benchmark, config_yaml


def test_the_counts_of_a_check_per_operator(tmp_path):
    config = tmp_path / "tiny.yaml"
    entry = benchmark("maxpool2d", ["triton_fused", "jax_reshape_argmax", "numba_fused"], N=2, C=3, H=8, W=8, k=2)
    config.write_text(config_yaml(dict(entry, modes=["forward", "backward"])))
    out = tmp_path / "counts.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "check_counts.py"), "--config", str(config),
                           "--dtypes", "float32", "-o", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = json.loads(out.read_text())["maxpool2d"]
    # numba is no GPU library: its items are not the check a GPU runs
    assert counts["triton_items"] and counts["items"] > counts["triton_items"]
    # jax on the CPU flushes subnormals: a listed defect (impls/defects.py), not a failure
    assert set(counts["statuses"]) <= {"ok", "skipped", "upstream-defect"}, counts["statuses"]
    # the check enters no autotuner (on Triton 3.6 each entry of an item was a benchmark: 596 for
    # maxpool2d's check of gpu.yaml at a7e0d31), and computes each case's oracles once for all
    # its strategies and modes, not once per item
    assert counts["autotuned_kernels_entered"] == 0 and counts["triton_autotuner_runs"] == 0
    assert 0 < counts["oracle_runs"] < counts["items"] / 4
    assert 0 < counts["gradient_oracle_runs"] <= counts["oracle_runs"]
    assert counts["jax_traces"] > 0 and counts["jax_compiles"] > 0
