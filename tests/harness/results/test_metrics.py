"""Metrics as fields (harness/results/metrics.py): one declaration per metric
drives computing, storing, comparing and showing it. A toy count declared
there and nowhere else reaches the counting run's rows.csv, `compare
--metric`, the report's table and the schema's migrations; and the
dashboard's script prints a count as Python does."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.results import metrics, stats, store

ROOT = Path(__file__).parents[3]
COUNTS_BASELINE = min(path for path in (ROOT / "results" / "baseline-counts").iterdir() if path.is_dir())

# Runs in a fresh process, so that the declaration is grown before any module
# derives its columns, choices or tables from it: the one edit a new metric needs.
TOY_WORLD = r'''
import argparse, dataclasses, json, os, sys
from pathlib import Path

from harness.results import metrics

# The toy: Callgrind's data reads (Dr) per call, one decimal, a column of the
# next schema (the store is imported only after the declaration, as a plugin would be).
NEXT = int(sys.argv[3])
TOY = metrics.Metric("data_reads", "reads", "Callgrind's Dr, the data reads", NEXT, lambda events: events["Dr"],
                     decimals=1)
metrics.COUNTS = dataclasses.replace(metrics.COUNTS, fields=metrics.COUNTS.fields + (TOY,))

from harness import cli
from harness.base.config import expand, parse_config
from harness.measuring import callgrind, sweep
from harness.presenting.report.build import build
from harness.results import store


class FakeCallgrind:
    """Callgrind's client requests as the counter calls them; the dump, of
    known events, is written where Callgrind writes it (this directory)."""

    def start_instrumentation(self): pass
    def stop_instrumentation(self): pass
    def toggle_collect(self): pass

    def dump_stats_at(self, name):
        Path(f"{callgrind.DUMP_PREFIX}{os.getpid()}.1").write_text(
            "events: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw\ntotals: 3000 900 600 30 20 10 3 2 1\n")


run, old = Path(sys.argv[1]), Path(sys.argv[2])
config = parse_config({"name": "toy", "threads": 1, "benchmarks": [
    {"op": "dispersion", "strategies": ["numpy_loop"], "devices": ["cpu"], "dtypes": ["float32"],
     "params": {"B": 1, "C": 4, "H": 8, "W": 8, "S": 2}}]})
writer = store.RunWriter(run, {"run_id": "toy", "instrument": "callgrind"})
counter = callgrind.CallgrindCounter(FakeCallgrind(), "000-toy")  # the counting run's row, as it writes it
try:
    sweep.run_sweep(expand(config)[:1], config, writer, "toy", {}, measure=counter)
finally:
    counter.close()
    writer.close()

parser = cli.build_parser()
commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
metric = next(action for action in commands.choices["compare"]._actions if action.dest == "metric")
compared = run.parent / "compared.json"
status = cli.main(["compare", str(run), str(run), "--metric", "data_reads", "--format", "json", "-o", str(compared)])
report = build([run], run.parent / "report", light=True).read_text()
old_meta, old_rows, _ = store.read_run(old)
print(json.dumps({"choices": list(metric.choices), "help": metric.help, "compare_status": status,
                  "compared": json.loads(compared.read_text())["cases"],
                  "table_header": next(line for line in report.splitlines() if line.startswith("| strategy |")),
                  "report": report, "old_schema": old_meta["schema_version"],
                  "old_toy_empty": bool(old_rows["data_reads"].isna().all()),
                  "old_instructions": bool(old_rows["instructions"].notna().all()),
                  "migration": store.MIGRATIONS[NEXT].__doc__, "next": NEXT}))
'''


@pytest.fixture(scope="module")
def toy_world(tmp_path_factory):
    """The toy's run (counted through the counting run's own code, Callgrind
    replaced by a known dump), and what the harness made of it."""
    where = tmp_path_factory.mktemp("toy")
    old = where / "old"
    shutil.copytree(COUNTS_BASELINE, old)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
               COLUMNS="200")
    done = subprocess.run([sys.executable, "-c", TOY_WORLD, str(where / "run"), str(old),
                           str(store.SCHEMA_VERSION + 1)], capture_output=True,
                          text=True, env=env, cwd=where, timeout=600)
    assert done.returncode == 0, done.stderr
    return where / "run", json.loads(done.stdout.splitlines()[-1])


def test_a_metric_declared_once_is_in_the_counting_runs_rows(toy_world):
    run, _ = toy_world
    header, row = (run / "rows.csv").read_text().splitlines()[:2]
    columns = header.split(",")
    assert columns[-3:] == ["instructions", "est_cycles", "data_reads"]  # appended: older columns keep their place
    values = dict(zip(columns, next(csv.reader([row]))))
    assert float(values["data_reads"]) == 900 / 3 and float(values["instructions"]) == 3000 / 3
    assert json.loads((run / "meta.json").read_text())["schema_version"] == store.SCHEMA_VERSION + 1


def test_compare_offers_and_compares_a_declared_metric(toy_world):
    _, found = toy_world
    assert found["choices"] == ["time", "instructions", "est_cycles", "data_reads"]
    assert "data_reads: Callgrind's Dr, the data reads" in found["help"]
    assert found["compare_status"] == 0
    assert [(case["metric"], case["base_count"], case["verdict"]) for case in found["compared"]] == [
        ("data_reads", 300.0, "same")]


def test_the_report_shows_a_declared_metric_as_declared(toy_world):
    _, found = toy_world
    header = [cell.strip() for cell in found["table_header"].split("|")]
    assert {"instructions/call", "est_cycles/call", "data_reads/call"} <= set(header)
    assert "| 300.0 |" in found["report"]  # its one decimal
    assert "data_reads: Callgrind's Dr, the data reads" in found["report"]  # the table's note


def test_a_new_metrics_schema_step_is_derived_and_old_runs_read_without_it(toy_world):
    _, found = toy_world
    assert found["old_schema"] == found["next"] == store.SCHEMA_VERSION + 1
    assert found["old_toy_empty"] and found["old_instructions"]
    assert found["migration"].startswith(f"Schema {found['next']} added data_reads")


def test_timing_statistics_are_computed_from_the_declaration():
    summary = stats.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert tuple(summary.as_row()) == metrics.TIMING.names
    assert summary.n_samples == 5 and isinstance(summary.n_samples, int)
    assert (summary.median_s, summary.q1_s, summary.max_s) == (3.0, 2.0, 100.0)


def test_a_metric_shows_a_time_as_a_time_and_a_count_with_its_decimals():
    assert metrics.TIMING["median_s"].format(0.0012) == "1.2 ms"
    assert metrics.COUNTS["instructions"].format(1234567.5) == "1,234,568"
    assert metrics.fmt_count(2.5) == "2" and metrics.fmt_count(float("nan")) == "–" and metrics.fmt_count("x") == "–"
    with pytest.raises(KeyError, match="data_reads: not a counts metric"):
        metrics.COUNTS["data_reads"]


NODE = shutil.which("node")
# Ties (2.5, 0.125) are rounded to even, as Python does; 1.005 is below its tie in binary.
VALUES = [[2.5, 0], [3.5, 0], [1234567.5, 0], [999.5, 0], [0.125, 2], [0.375, 2], [1.005, 2], [-2.5, 0],
          [-0.4, 0], [123456789.123, 1], [1e22, 0], [7, 3], [None, 0], [float("inf"), 0]]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
def test_the_dashboards_script_prints_a_count_as_python_does(tmp_path):
    script = tmp_path / "count_text.js"
    script.write_text("global.window = {}; global.document = {addEventListener: function () {}};\n"
                      f"require({json.dumps(str(ROOT / 'harness/presenting/dashboard_assets/dashboard.js'))});\n"
                      "var values = JSON.parse(process.argv[2]);\n"
                      "console.log(JSON.stringify(values.map(function (v) { return window.SB.countText(v[0], v[1]); })));\n")
    given = json.dumps([[None if value in (None, float("inf")) else value, decimals] for value, decimals in VALUES])
    done = subprocess.run([NODE, str(script), given], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [metrics.fmt_count(value, decimals) for value, decimals in VALUES]
