"""What many test files share: where the checkout and the test plugins are,
the CLI run as a user runs it (``python -m harness`` in a subprocess), the
configs tests run (built here, written by the ``tiny_config`` fixture), the
timing of the gate tests' baselines, and waiting for a process's progress.

Tests import it as ``tests.helpers``: tests/ is a package, so pytest puts the
checkout's root on sys.path (rootdir-relative imports, no test file's own
directory)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = ROOT / "tests" / "plugins"

# The gate compares with the baseline's 10th percentiles, so a baseline taken
# during a burst of load hides a regression of that size: on CI, a baseline
# whose numpy_put_along_axis was measured 1.6x slow made a planted 3x look like
# 1.9x. A baseline is measured once and kept, so it gets the longer budget a
# committed baseline should have (its p10 then spans quiet moments); the gate's
# own run keeps the quick one. (Both gate tests, by wall time and by count.)
BASELINE_TIMING = {"min_samples": 100, "budget_s": 1.0, "warmup_s": 0.05}
GATE_TIMING = {"min_samples": 20, "budget_s": 0.1, "warmup_s": 0.01}

# A test config's defaults: the fewest samples docs/SPEC.md §3 allows in a hundredth of
# a second, no warm-up; and one thread for each library (unpinned threads on
# a loaded machine warn, and make timings depend on the machine's load).
FAST_TIMING = {"min_samples": 5, "budget_s": 0.01, "warmup_s": 0}
ONE_THREAD = {"torch": 1, "numpy": 1, "numba": 1}


def benchmark(op: str, strategies: list[str] | None = None, **params) -> dict:
    """One entry of a config's ``benchmarks``: ``op``'s ``strategies`` (all
    of its strategies where None) over ``params`` (a list is a sweep)."""
    entry = {"op": op}
    if strategies is not None:
        entry["strategies"] = list(strategies)
    entry["params"] = params
    return entry


def config_yaml(*benchmarks: dict, name: str | None = "tiny", timing: dict | None = FAST_TIMING,
                threads: dict | None = ONE_THREAD, **top) -> str:
    """A config's YAML text: ``name``, ``timing``, ``threads``, then any
    other top-level keys (``devices``, ``seed``, ``check``, ...) and the
    ``benchmarks`` (see ``benchmark``). None leaves a key out: the config's
    own default (threads: each library's own)."""
    config = {"name": name, "timing": timing, "threads": threads, **top, "benchmarks": list(benchmarks)}
    return yaml.dump({key: value for key, value in config.items() if value is not None}, Dumper=_PlainDumper,
                     sort_keys=False, default_flow_style=None)


class _PlainDumper(yaml.SafeDumper):
    """safe_dump's, writing a value used twice (one list of sizes for two
    benchmarks) out again rather than as an anchor and an alias."""

    def ignore_aliases(self, data):
        return True


QUICK_CEILINGS = "quick_ceilings_plugin"  # loaded by every test sweep unless it asks for accurate ceilings


def plugin_env(*plugins: str, accurate_ceilings: bool = False, **variables: str) -> dict:
    """This process's environment with the given plugins loaded
    (SCATTERBENCH_PLUGINS: module names from tests/plugins, or file paths),
    tests/plugins and this checkout first on PYTHONPATH (so a child imports
    this checkout's harness, whatever an installed copy says), plus
    ``variables``.

    Unless ``accurate_ceilings``, ``quick_ceilings_plugin`` comes first: a
    sweep in a test needs its machine's ceilings and curves, not accurate
    ones (each test has its own cache, so every sweep measures them), and the
    full measurement costs 7-12 s a sweep on a 2-core machine, about 4 with
    the plugin. The tests of the ceilings and floors themselves ask for the
    accurate ones."""
    path = os.pathsep.join(filter(None, [str(PLUGINS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    names = list(map(str, plugins))
    if not accurate_ceilings and QUICK_CEILINGS not in names:
        names.insert(0, QUICK_CEILINGS)
    return dict(os.environ, PYTHONPATH=path, SCATTERBENCH_PLUGINS=",".join(names), **variables)


def scatterbench(*args, env: dict | None = None, timeout: float = 600, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python -m harness *args`` to its end, output captured as text; the
    environment is ``plugin_env()`` (no plugins) unless given."""
    return subprocess.run([sys.executable, "-m", "harness", *map(str, args)], capture_output=True, text=True,
                          env=plugin_env() if env is None else env, timeout=timeout, cwd=cwd)


def report_py(*args, env: dict | None = None, timeout: float = 600, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python report.py *args`` (the standalone report) to its end, as ``scatterbench``."""
    return subprocess.run([sys.executable, str(ROOT / "report.py"), *map(str, args)], capture_output=True, text=True,
                          env=plugin_env() if env is None else env, timeout=timeout, cwd=cwd)


def wait_for(predicate, what: str, timeout: float = 120, process: subprocess.Popen | None = None):
    """Polls ``predicate`` until it holds; fails the test naming ``what``
    when ``timeout`` seconds pass (killing ``process``) or when ``process``
    ends first (with its stderr's tail where that is a pipe)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if process is not None and process.poll() is not None:
            said = process.stderr.read()[-2000:] if process.stderr else ""
            pytest.fail(f"{what}: the process ended first ({process.returncode}): {said}")
        time.sleep(0.02)
    if process is not None:
        process.kill()
    pytest.fail(f"timed out waiting for {what}")


def as_quiet(run: Path) -> Path:
    """A run made by a test, rewritten as one measured on a quiet machine
    (load 0.1, IQR 1 % of each median) so that the fitness rule admits it,
    for tests that read what the report draws or says only of fit runs: on
    a busy CI machine a real run fails the rule (load at the core count, or
    a ceiling or curve measured busy) and the report shows its tables in
    the unfit appendix, with no figure, speed-up or note to read."""
    import csv
    import json

    from harness.judging import analysis
    from harness.results import store

    meta = json.loads((run / store.META).read_text())
    meta["load_avg_start"] = meta["load_avg_end"] = [0.1, 0.1, 0.1]
    meta["ceiling_busy"] = {}
    for curve in (meta.get("bandwidth_curves") or {}).values():
        if isinstance(curve, dict):
            curve.pop("busy", None)
    (run / store.META).write_text(json.dumps(meta))
    with open(run / store.ROWS, newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows:
        row["load_avg"] = "0.1"
        if row["median_s"]:
            row["iqr_s"] = repr(float(row["median_s"]) / 100)
            if "within_round_iqr_s" in row:  # what the unstable mark reads where the run took rounds
                row["within_round_iqr_s"] = row["iqr_s"]
    with open(run / store.ROWS, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    meta, frame, _ = store.read_run(run)
    assert not analysis.run_unfit_reasons(meta, frame)
    return run


def strategy_dtype_params(strategies):
    """pytest params (strategy, dtype), one per dtype each strategy runs in;
    a compiled one (``quick_check``: each dtype a compile) in the dtypes users
    time it in, float32 and float64."""
    import pytest

    return [pytest.param(strat, dtype, id=f"{strat.key}-{dtype}") for strat in strategies
            for dtype in ([d for d in strat.dtypes if d in ("float32", "float64")] if strat.quick_check
                          else strat.dtypes)]


def compiled_family(strat) -> str:
    """How a compiling strategy's checks compile: by its backend (numba,
    pytensor, jax, Triton's interpreter), or, for one that compiles an eager
    backend's code per shape (``quick_check``: torch.compile), ``<backend>.compile``."""
    from impls.backends import get_backend

    return strat.backend if get_backend(strat.backend).compiles else f"{strat.backend}.compile"


def sample_of_the_product(cases) -> set:
    """The sample ``make test`` runs of a product of compiling strategies'
    checks; ``make test-all`` runs all of it.

    ``cases``: (group, strategy, dtype) triples, where a group is one test
    function's checks of one compile family on one operator (and any other
    parameter the test has, kept whole). In each group the sample holds every
    dtype of the group at least once and every strategy at least once, so
    every family x operator x dtype x test function is checked, and every
    strategy by every test function: a group of n strategies in m dtypes
    keeps about max(n, m) of its n x m. Chosen by name, never at random: the
    same cases give the same sample in every run."""
    kept = set()
    for group, pairs in sorted(_pairs_by_group(cases).items(), key=lambda entry: repr(entry[0])):
        chosen: list = []
        strategy_uses: dict = {}
        dtype_uses: dict = {}

        def take(candidates, uses_of):
            strategy, dtype = min(sorted(candidates), key=uses_of)
            chosen.append((strategy, dtype))
            strategy_uses[strategy] = strategy_uses.get(strategy, 0) + 1
            dtype_uses[dtype] = dtype_uses.get(dtype, 0) + 1

        # each dtype once, by the strategy least chosen so far; then each strategy still out, in its least-chosen dtype
        for dtype in sorted({dtype for _, dtype in pairs}):
            take([pair for pair in pairs if pair[1] == dtype], lambda pair: strategy_uses.get(pair[0], 0))
        for strategy in sorted({strategy for strategy, _ in pairs} - set(strategy_uses)):
            take([pair for pair in pairs if pair[0] == strategy], lambda pair: dtype_uses.get(pair[1], 0))
        kept.update((group, strategy, dtype) for strategy, dtype in chosen)
    return kept


def missing_from_sample(cases, kept) -> list[str]:
    """What ``kept`` leaves uncovered of ``cases`` against the promise of
    ``sample_of_the_product``: each group's dtype, and each group's strategy,
    with no case kept, named."""
    kept_by_group = _pairs_by_group(kept)
    missing = []
    for group, pairs in sorted(_pairs_by_group(cases).items(), key=lambda entry: repr(entry[0])):
        chosen = kept_by_group.get(group, set())
        for index, what in ((1, "dtype"), (0, "strategy")):
            missing += [f"{group}: no {what} {name}" for name in
                        sorted({pair[index] for pair in pairs} - {pair[index] for pair in chosen})]
    return missing


def _pairs_by_group(cases) -> dict:
    by_group: dict = {}
    for group, strategy, dtype in cases:
        by_group.setdefault(group, set()).add((strategy, dtype))
    return by_group


def maxpool_windows(x, params):
    """(N, C, h, w, k*k): every max-pool window of the case's geometry (its stride and padding)
    as a row, row-major, the padding -inf."""
    import numpy as np

    from impls import maxpool2d

    k, s, p = maxpool2d.window(params)
    h, w = maxpool2d.pooled_size(params)
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)), constant_values=-np.inf)
    views = np.lib.stride_tricks.sliding_window_view(padded, (k, k), axis=(2, 3))
    return views[:, :, :(h - 1) * s + 1:s, :(w - 1) * s + 1:s].reshape(*x.shape[:2], h, w, k * k)
