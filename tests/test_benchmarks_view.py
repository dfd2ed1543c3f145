import subprocess
import sys
from pathlib import Path

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
