"""The redesign's promises, tested: a new backend is one record plus its
strategies and is timed by its own synchronise; a new operator works end to
end from one plugin module with no edit to the project; result directories
written before the schema grew are still read."""

import json
import math
import shutil
import sys

import numpy as np
import pytest

from harness.base.config import Case, parse_config
from harness.measuring import timing
from harness.results import store
from tests.helpers import FAST_TIMING, PLUGINS, ROOT, as_quiet, benchmark, config_yaml, plugin_env, report_py, scatterbench

pytestmark = pytest.mark.slow  # subprocesses, sweeps or compiles: `make test` runs them, `make test-fast` does not



@pytest.fixture
def lazy_backend():
    sys.path.insert(0, str(PLUGINS))
    import lazy_backend_plugin  # noqa: F401

    import impls  # noqa: F401
    from impls.backends import BACKENDS
    from impls.registry import get_operator

    yield lazy_backend_plugin
    get_operator("maxpool2d").strategies.pop("lazy_max_pool", None)
    BACKENDS.pop("lazy", None)
    sys.modules.pop("lazy_backend_plugin", None)
    sys.path.remove(str(PLUGINS))


def test_an_asynchronous_backend_is_timed_by_its_own_synchronise(lazy_backend):
    from harness.measuring.sweep import execute_case

    config = parse_config({"timing": FAST_TIMING,
                           "benchmarks": [benchmark("maxpool2d", ["lazy_max_pool"], N=1, C=2, H=8, W=8, k=2)]})
    case = Case("maxpool2d", "lazy_max_pool", "cpu", "float32", (("C", 2), ("H", 8), ("N", 1), ("W", 8), ("k", 2)))
    result = execute_case(case, config, "r", 30.0)
    assert result.row["status"] == "ok", result.row["message"]
    # Timed to completion: every sample holds the backend's 30 ms of work.
    assert min(result.samples_s) >= lazy_backend.WORK_S
    # The control: the same call timed without the backend's synchronise is dispatch only.
    dispatch = timing.time_host(lambda: lazy_backend.Pending(lambda: 0),
                                config.timing).samples_s
    lazy_backend._queue.clear()
    assert np.median(dispatch) < lazy_backend.WORK_S / 10


TINY_ROWMAX = config_yaml(benchmark("rowmax", R=[4, 64], L=256), name="rowmax-tiny", threads=None)


def test_a_new_operator_works_end_to_end_from_one_plugin(tmp_path, tiny_config):
    env = plugin_env("rowmax_plugin")
    config = tiny_config(TINY_ROWMAX, "rowmax.yaml")
    # wide enough for the role column ("baseline"), which 80 columns leave out
    listed = scatterbench("list", "--op", "rowmax", env={**env, "COLUMNS": "200"})
    assert listed.returncode == 0 and "python_loop" in listed.stdout and "baseline" in listed.stdout
    checked = scatterbench("check", config, "--no-progress", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 failed" in checked.stdout
    runs = tmp_path / "results"
    for name in ("a", "b"):
        ran = scatterbench("run", config, "-o", runs / name, "--no-progress", "--grid", env=env)
        assert ran.returncode == 0, ran.stderr
        assert "R=64" in ran.stdout and "numpy_max" in ran.stdout
        as_quiet(runs / name)  # compare judges only runs the fitness rule admits, whatever this machine's load
    compared = scatterbench("compare", runs / "a", runs / "b", "--normalise", "--factor", "5", env=env)
    assert compared.returncode == 0, compared.stdout + compared.stderr
    assert "no reference" not in compared.stdout
    gate = scatterbench("regress", runs / "a", config, "-o", tmp_path / "gate", "--factor", "5", "--no-progress",
                        env=env)
    assert gate.returncode == 0, gate.stdout + gate.stderr
    reported = report_py(runs / "a", "-o", tmp_path / "report", env=env)
    assert reported.returncode == 0, reported.stderr
    text = (tmp_path / "report" / "report.md").read_text()
    assert "rowmax" in text and "numpy_max" in text
    dashboard = scatterbench("dashboard", runs, "-o", tmp_path / "site", "--no-reports", env=env)
    assert dashboard.returncode == 0, dashboard.stderr
    assert (tmp_path / "site" / "rowmax.html").exists()


def test_a_result_directory_from_before_the_schema_grew_is_still_read(tmp_path, monkeypatch):
    """A committed run written by schema 1 (no host_s, xcheck_s, load_avg,
    extra; threads keyed torch/blas/numba) reads as this schema, each
    version's migration step in turn: the new columns empty (the quartiles
    derived from its samples), threads keyed by backend, each backend's
    version text; and it still reads once the schema gains yet another column."""
    old = tmp_path / "old"
    shutil.copytree(ROOT / "results" / "20261122T201450-vm-default-d598", old)
    assert json.loads((old / "meta.json").read_text())["schema_version"] == 1
    meta, rows, samples = store.read_run(old)
    assert meta["schema_version"] == store.SCHEMA_VERSION
    assert meta["threads"] == {"numpy": 2, "numba": 2, "torch": 2}
    assert meta["backend_versions"]["torch"] == "2.13.0+cpu" and meta["backend_versions"]["numba"] == "0.68.1"
    assert len(rows) > 0 and rows["host_s"].isna().all() and (rows["extra"] == "").all()
    assert set(samples) <= set(rows["case_id"])
    # Schema 3's quartiles are derived from the samples the run kept, only
    # where those samples give the row's own median; elsewhere they stay empty.
    derived = rows["q3_s"].notna()
    assert derived.any() and set(rows.loc[derived, "case_id"]) <= set(samples)
    assert rows.loc[~rows["case_id"].isin(samples), "q3_s"].isna().all()
    kept = rows[derived]
    assert (kept["p10_s"] <= kept["q1_s"]).all() and (kept["q1_s"] <= kept["median_s"]).all()
    assert (kept["median_s"] <= kept["q3_s"]).all() and (kept["q3_s"] <= kept["max_s"]).all()
    grown = store.COLUMN_KINDS + (("energy_j", "number"),)
    monkeypatch.setattr(store, "COLUMN_KINDS", grown)
    monkeypatch.setattr(store, "COLUMNS", tuple(name for name, _ in grown))
    monkeypatch.setattr(store, "NUMERIC", tuple(name for name, kind in grown if kind == "number"))
    rows = store.read_rows(old)
    assert "energy_j" in rows.columns and rows["energy_j"].isna().all()
    assert math.isfinite(rows["median_s"].dropna().iloc[0])


def test_extra_holds_an_operators_own_measurements(tmp_path):
    writer = store.RunWriter(tmp_path, {"run_id": "r"})
    row = {column: "" for column in store.COLUMNS}
    row.update(run_id="r", case_id="a", op="maxpool2d", strategy="s", device="cpu", dtype="float32",
               params="{}", status="ok", extra={"tiles": 12, "kernel": "k2"})
    writer.append(row)
    writer.close()
    rows = store.read_rows(tmp_path)
    assert store.extra_of(rows.iloc[0]) == {"tiles": 12, "kernel": "k2"}
