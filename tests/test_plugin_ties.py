"""The tie rule docs/PLUGINS.md documents for a plugin operator returning
argmax indices (tests/plugins/rowargmax_plugin.py): ``ties=`` is every
operator's keyword, and the operator's compare applies it. The same last-
maximum strategy passes `check` declared ``ties="any"`` and fails it
undeclared, held to the first maximum."""

import pytest

from tests.helpers import plugin_env, scatterbench

pytestmark = pytest.mark.slow  # a subprocess check


def test_a_plugin_operators_compare_applies_the_declared_tie_rule(tmp_path):
    config = tmp_path / "rowargmax.yaml"
    config.write_text("devices: [cpu]\ndtypes: [float64]\nbenchmarks:\n  - op: rowargmax\n"
                      "    params: {R: 8, L: 5}\n")
    listed = scatterbench("list", "--op", "rowargmax", env=plugin_env("rowargmax_plugin"))
    assert listed.returncode == 0, listed.stderr
    assert "any" in listed.stdout and "first" in listed.stdout
    checked = scatterbench("check", config, "--no-progress", env=plugin_env("rowargmax_plugin"))
    assert checked.returncode == 1, checked.stdout + checked.stderr
    failures = [line for line in checked.stdout.splitlines() if line.startswith("FAIL")]
    assert failures and all("rowargmax/last_maximum_undeclared" in line for line in failures), failures
    assert "indices (first ties)" in failures[0]
    declared = [line for line in checked.stdout.splitlines() if "last_maximum_declared" in line]
    assert declared and all(" ok " in line for line in declared), declared
