"""docs/PLUGINS.md's worked example, run as its reader would: the plugin
(docs/examples/plugin_avgpool2d.py, named by its file path) passes `check` and
`run` in the three modes (forward, backward, forward+backward: its operator's
backward, its strategies' explicit backwards and autograd's); its run records the plugin, and `python report.py DIR` builds the same
report as `run --report`, or says what it lacks without the plugin; and every
Python block of the guide is an excerpt of the plugin, so it cannot go stale."""

import json
import re
import shutil

import pytest

from harness.base.plugins import sha256
from harness.results.store import read_meta, read_rows
from tests.helpers import ROOT, as_quiet, plugin_env, report_py, scatterbench

pytestmark = pytest.mark.slow  # subprocesses and a sweep: `make test` runs them, `make test-fast` does not

PLUGIN = ROOT / "docs" / "examples" / "plugin_avgpool2d.py"
CONFIG = "docs/examples/avgpool2d.yaml"  # as the guide types it (commands run in the project root)
EXAMPLE_PLUGIN = "docs/examples/plugin_avgpool2d.py"  # as the guide types it
GUIDE = ROOT / "docs" / "PLUGINS.md"


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """The guide's commands, once: check, run --report, and report.py on the run."""
    root = tmp_path_factory.mktemp("example")
    env = plugin_env(EXAMPLE_PLUGIN, accurate_ceilings=True)  # the guide's plugin alone, as its reader runs it
    checked = scatterbench("check", CONFIG, "--no-progress", env=env, timeout=900)
    ran = scatterbench("run", CONFIG, "-o", root / "run", "--report", "--no-progress", env=env, timeout=900)
    standalone = report_py(root / "run", "-o", root / "standalone")
    return root, checked, ran, standalone


def test_the_guides_example_passes_check(example):
    _, checked, _, _ = example
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert " 0 failed" in checked.stdout
    for name in ("python_loops", "numpy_reshape_mean", "torch_avg_pool2d", "torch_unfold_max"):
        assert name in checked.stdout
    # the training modes were checked too: autograd's strategies get their gradcheck line
    assert "GRADCHECK avgpool2d/torch_avg_pool2d" in checked.stdout


def test_the_guides_example_runs_in_the_three_modes(example):
    root, _, ran, _ = example
    assert ran.returncode == 0, ran.stderr
    rows = read_rows(root / "run")
    example_op = rows[rows["op"] == "avgpool2d"]
    expected = {(name, mode) for name in ("python_loops", "numpy_reshape_mean", "torch_avg_pool2d")
                for mode in ("forward", "backward", "forward+backward")}
    assert set(zip(example_op["strategy"], example_op["mode"])) == expected
    # each mode timed and checked: the explicit backwards and autograd's alike
    assert set(example_op["status"]) == {"ok"} and example_op["median_s"].gt(0).all()
    # the backward's bytes are the operator's Gradient formula: grad_output read, grad_x written
    backward = example_op[(example_op["mode"] == "backward") & example_op["params"].map(lambda text: json.loads(text)["H"] == 16)]
    assert set(backward["bytes"]) == {(2 * 8 * 8 * 32 + 2 * 8 * 16 * 64) * 4}


def test_the_guides_example_runs_and_is_ranked(example, tmp_path):
    root, _, ran, _ = example
    assert ran.returncode == 0, ran.stderr
    rows = read_rows(root / "run")
    assert set(rows["status"]) == {"ok"} and rows["median_s"].gt(0).all()
    assert set(rows[rows["op"] == "avgpool2d"]["strategy"]) == {"python_loops", "numpy_reshape_mean",
                                                                "torch_avg_pool2d"}
    assert set(rows["mode"]) == {"forward", "backward", "forward+backward"}
    # The extra maxpool2d strategy declares no returns=: it is ranked with the others, not "(part)".
    # Only a fit run is ranked at all (its conclusions and machines table say "not ranked" of a
    # part): read the report of a copy the fitness rule admits, whatever this machine's load.
    quiet = as_quiet(shutil.copytree(root / "run", tmp_path / "run"))
    built = report_py(quiet, "-o", tmp_path / "report", env=plugin_env(EXAMPLE_PLUGIN))
    assert built.returncode == 0, built.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    conclusions = [line for line in report.splitlines() if line.startswith("Conclusion:")]
    assert "not ranked" not in report and any("torch_unfold_max" in line for line in conclusions), conclusions


def test_the_run_records_its_plugin_and_how_to_reproduce_it(example):
    root, _, _, _ = example
    assert read_meta(root / "run")["plugins"] == [
        {"module": "plugin_avgpool2d", "file": str(PLUGIN.resolve()), "sha256": sha256(PLUGIN)}]
    report = (root / "run" / "report" / "report.md").read_text()
    assert "make venv && SCATTERBENCH_PLUGINS=docs/examples/plugin_avgpool2d.py .venv/bin/python -m harness run " \
           "docs/examples/avgpool2d.yaml" in report


def test_report_py_alone_builds_the_same_report_as_run_report(example):
    root, _, _, standalone = example
    assert standalone.returncode == 0, standalone.stderr
    assert standalone.stderr == ""
    assert (root / "standalone" / "report.md").read_text() == (root / "run" / "report" / "report.md").read_text()


def test_report_py_says_which_plugin_it_could_not_load_and_what_it_lacks(example, tmp_path):
    root, _, _, _ = example
    moved = tmp_path / "run"
    shutil.copytree(root / "run", moved)
    as_quiet(moved)  # the "× seed" column and its note are the fit runs' tables'
    meta = json.loads((moved / "meta.json").read_text())
    meta["plugins"][0]["file"] = str(tmp_path / "elsewhere" / "plugin_avgpool2d.py")
    (moved / "meta.json").write_text(json.dumps(meta))
    built = report_py(moved, "-o", tmp_path / "report")
    assert built.returncode == 0, built.stderr
    lines = built.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"report: {moved}: made with plugin plugin_avgpool2d (")
    assert "× seed column" in lines[0], lines[0]
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"Warning: {moved}: made with plugin plugin_avgpool2d" in text
    assert "× seed is blank: avgpool2d is not registered here (its plugin is not loaded)" in text


def test_every_python_block_of_the_guide_is_an_excerpt_of_the_example():
    guide = GUIDE.read_text()
    source = PLUGIN.read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.DOTALL)
    assert len(blocks) >= 10
    for block in blocks:
        assert block in source, block[:200]
    for name in ("python_loops", "numpy_reshape_mean", "torch_avg_pool2d", "torch_unfold_max", "oracle",
                 "generate", "bytes_moved", "bytes_written", "compare", "check_cases", "validate", "grad_oracle",
                 "generate_grad", "grad_bytes", "grad_compare", "loop_backward", "broadcast_backward"):
        assert f"def {name}(" in "".join(blocks), name
