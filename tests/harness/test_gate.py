"""The CI gate (`scatterbench regress`): quiet on an unchanged checkout,
failing on a planted 3x slowdown, of an ordinary strategy and of the
reference strategy everything is normalised by."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocesses, sweeps or compiles: `make test` runs them, `make test-fast` does not

PLUGINS = Path(__file__).parents[1] / "plugins"
ROOT = Path(__file__).parents[2]

GATE_CONFIG = """
name: gate
timing: {min_samples: 20, budget_s: 0.1, warmup_s: 0.01}
threads: {torch: 1, blas: 1, numba: 1}
benchmarks:
  - op: maxunpool
    strategies: [torch_scatter, torch_max_unpool1d, numpy_put_along_axis, numpy_seed_flat_set]
    params: {form: 1d, B: 16, F: 16, L: 256, f: 5}
"""


def scatterbench(*args, plant=""):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PLUGINS), str(ROOT)]),
               SCATTERBENCH_PLUGINS="plant_slowdown", SCATTERBENCH_PLANT=plant)
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=600)


@pytest.mark.slow
def test_gate_passes_unchanged_and_fails_on_planted_slowdowns(tmp_path):
    config = tmp_path / "gate.yaml"
    config.write_text(GATE_CONFIG)
    baseline = tmp_path / "baseline"
    made = scatterbench("run", config, "-o", baseline, "--no-progress")
    assert made.returncode == 0, made.stderr
    same = scatterbench("regress", baseline, config, "-o", tmp_path / "same", "--no-progress")
    assert same.returncode == 0, same.stdout[-3000:] + same.stderr[-2000:]
    for planted in ("maxunpool/numpy_put_along_axis:3", "maxunpool/torch_scatter:3"):
        slow = scatterbench("regress", baseline, config, "-o", tmp_path / planted.replace("/", "-"),
                            "--no-progress", plant=planted)
        assert slow.returncode == 1, planted + "\n" + slow.stdout[-3000:] + slow.stderr[-2000:]
        strategy = planted.split("/")[1].split(":")[0]
        assert f"FAIL maxunpool/{strategy}" in slow.stdout
