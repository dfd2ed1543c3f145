"""What many test files share: where the checkout and the test plugins are,
the CLI run as a user runs it (``python -m harness`` in a subprocess), and the
timing of the gate tests' baselines.

Tests import it as ``tests.helpers``: tests/ is a package, so pytest puts the
checkout's root on sys.path (rootdir-relative imports, no test file's own
directory)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "plugins"

# The gate compares with the baseline's 10th percentiles, so a baseline taken
# during a burst of load hides a regression of that size: on CI, a baseline
# whose numpy_put_along_axis was measured 1.6x slow made a planted 3x look like
# 1.9x. A baseline is measured once and kept, so it gets the longer budget a
# committed baseline should have (its p10 then spans quiet moments); the gate's
# own run keeps the quick one. (Both gate tests, by wall time and by count.)
BASELINE_TIMING = "{min_samples: 100, budget_s: 1.0, warmup_s: 0.05}"
GATE_TIMING = "{min_samples: 20, budget_s: 0.1, warmup_s: 0.01}"


def plugin_env(*plugins: str, **variables: str) -> dict:
    """This process's environment with the given plugins loaded
    (SCATTERBENCH_PLUGINS: module names from tests/plugins, or file paths),
    tests/plugins and this checkout first on PYTHONPATH (so a child imports
    this checkout's harness, whatever an installed copy says), plus
    ``variables``."""
    path = os.pathsep.join(filter(None, [str(PLUGINS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return dict(os.environ, PYTHONPATH=path, SCATTERBENCH_PLUGINS=",".join(map(str, plugins)), **variables)


def scatterbench(*args, env: dict | None = None, timeout: float = 600, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python -m harness *args`` to its end, output captured as text; the
    environment is ``plugin_env()`` (no plugins) unless given."""
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          env=plugin_env() if env is None else env, timeout=timeout, cwd=cwd)


def report_py(*args, env: dict | None = None, timeout: float = 600, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python report.py *args`` (the standalone report) to its end, as ``scatterbench``."""
    return subprocess.run([sys.executable, str(ROOT / "report.py"), *map(str, args)], capture_output=True, text=True,
                          env=plugin_env() if env is None else env, timeout=timeout, cwd=cwd)
