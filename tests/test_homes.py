"""One home per decision (issue 30): each decision below is made in one
module and only read elsewhere. Where a second copy would be a literal, the
test searches the code for it; where it would be a second computation, it
changes the home and checks that every user follows."""

import ast
import re
from pathlib import Path

from harness.base.cases import CASE_GROUP, CASE_KEY
from harness.base.checkout import ROOT
from harness.base.config import Case

HARNESS = ROOT / "harness"


def python_files(*folders: str) -> list[Path]:
    return [path for folder in folders for path in (ROOT / folder).rglob("*.py")]


def string_lists(path: Path):
    """(line, set of strings) for each list or tuple literal made only of strings."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts and all(
                isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts):
            yield node.lineno, {item.value for item in node.elts}


def test_the_checkout_root_is_the_directory_holding_harness_and_impls():
    assert (ROOT / "harness" / "cli.py").exists() and (ROOT / "impls" / "registry.py").exists()
    counted = [f"{path.relative_to(ROOT)}:{number}" for path in python_files("harness", "impls")
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if re.search(r"__file__\)\.resolve\(\)\.parents\[", line) and path.name != "checkout.py"]
    assert not counted, f"count folders up to the checkout only in harness/base/checkout.py: {counted}"


def test_the_case_group_is_spelled_only_in_its_home():
    """A list of the group's columns, with at most the strategy, the
    machine or the case id beside them (a row's whole column list is
    another decision: what a row holds)."""
    group = set(CASE_GROUP)
    spelled = [f"{path.relative_to(ROOT)}:{line}" for path in python_files("harness")
               if path != HARNESS / "base" / "cases.py"
               for line, strings in string_lists(path)
               if group <= strings and strings <= group | {"strategy", "machine", "case_id"}]
    assert not spelled, f"import CASE_GROUP / CASE_KEY from harness/base/cases.py instead: {spelled}"
    assert set(CASE_KEY) == group | {"strategy"}


def test_a_config_case_groups_as_result_rows_do():
    case = Case("maxpool2d", "torch_max_pool2d_indices", "cpu", "float32", (("N", 1),))
    row = {"op": case.op, "strategy": case.strategy, "device": case.device, "dtype": case.dtype,
           "params": case.params, "mode": case.mode, "layout": case.layout}
    assert case.group == tuple(row[column] for column in CASE_GROUP)


def dtype_spellings(source: str, dtypes) -> list[tuple[int, str]]:
    """(line, what) for each second home of dtype facts in ``source``: a
    literal holding every dtype's name (the list itself), a table keyed by
    two or more of them, or a branch on a two-byte type's name (``==``,
    ``in``, against "bfloat16" or torch.float16 alike)."""
    names, half = set(dtypes), {"float16", "bfloat16"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)) and node.elts and all(
                isinstance(item, ast.Constant) and isinstance(item.value, str) for item in node.elts) \
                and names <= {item.value for item in node.elts}:
            found.append((node.lineno, "the list of dtypes"))
        elif isinstance(node, ast.Dict) and sum(isinstance(key, ast.Constant) and key.value in names
                                                for key in node.keys) >= 2:
            found.append((node.lineno, "a table keyed by dtype names"))
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            operands += [item for operand in operands if isinstance(operand, (ast.Tuple, ast.List, ast.Set))
                         for item in operand.elts]
            if any((isinstance(operand, ast.Constant) and operand.value in half)
                   or (isinstance(operand, ast.Attribute) and operand.attr in half) for operand in operands):
                found.append((node.lineno, "a branch on a dtype's name"))
    return found


def test_the_dtypes_have_one_home_the_dtype_records():
    """impls/backends.py's ``Dtype`` records hold every per-dtype fact; the
    dtype list, common's bounds and subnormal ranges, the report's order and
    the itemsizes are read from them, and no other module lists the names,
    keys a table by them or branches on a half type's name."""
    import torch

    from impls import backends, common, registry

    assert registry.DTYPES is backends.DTYPES == tuple(backends.DTYPE)
    for record in backends.DTYPE_RECORDS:
        info = torch.finfo(getattr(torch, record.name))
        assert (record.itemsize, record.largest, record.eps) == (info.bits // 8, info.max, info.eps), record.name
        assert record.subnormal_unit * record.subnormal_steps == info.tiny, record.name
        assert record.subnormal_unit == info.tiny * info.eps, record.name
        assert backends.itemsize(record.name) == record.itemsize
        assert (common.REL_TOL[record.name], common.WRONG_REL_ERR[record.name]) == (record.rel_tol,
                                                                                  record.wrong_rel_err)
    assert set(common.SUBNORMAL_UNIT) == set(common.SUBNORMAL_STEPS) == set(backends.DTYPES)
    spelled = [f"{path.relative_to(ROOT)}:{line} ({what})" for path in python_files("harness", "impls")
               if path != ROOT / "impls" / "backends.py"
               for line, what in dtype_spellings(path.read_text(), backends.DTYPES)]
    assert not spelled, f"read impls.backends' Dtype records instead: {spelled}"


def test_a_planted_second_home_of_dtype_facts_is_found():
    from impls.backends import DTYPES

    planted = {
        'ORDER = ("float32", "float16", "bfloat16", "float64")': "the list of dtypes",
        'EPS = {"float32": 1e-7, "float64": 1e-16}': "a table keyed by dtype names",
        'wide = np.float32 if dtype == "bfloat16" else dtype': "a branch on a dtype's name",
        'acc = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype': "a branch on a dtype's name",
    }
    for source, what in planted.items():
        assert [kind for _, kind in dtype_spellings(source, DTYPES)] == [what], source
    assert dtype_spellings('single = dtype == "float32"\nsome = ("float16",)', DTYPES) == []


def test_the_dashboard_judges_with_the_gates_public_screen():
    private = [f"{path.relative_to(ROOT)}:{number}" for path in python_files("harness")
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if re.search(r"wall_gate\._[a-z]", line)]
    assert not private, private


def test_both_memory_guards_take_the_one_estimate_and_headroom(monkeypatch):
    from harness.measuring import check, memory, sweep
    from impls.registry import get_operator

    case = Case("maxpool2d", "numpy_sliding_window", "cpu", "float32",
                tuple(sorted({"N": 1, "C": 1, "H": 8, "W": 8, "k": 2}.items())))
    item = check.CheckItem(get_operator(case.op).strategies[case.strategy], case.params, case.dtype, case.device,
                           "random", "contiguous")
    assert sweep.memory_guard(case) is None and check.check_memory_guard(item) is None
    monkeypatch.setattr(memory, "HEADROOM", 1e-12)
    assert "skipped before allocating" in sweep.memory_guard(case)
    assert "skipped before allocating" in check.check_memory_guard(item)
    monkeypatch.setattr(memory, "HEADROOM", 0.8)
    monkeypatch.setattr(memory, "needed_bytes", lambda *args: 1 << 62)
    assert sweep.memory_guard(case) is not None and check.check_memory_guard(item) is not None
    headroom = [f"{path.relative_to(ROOT)}:{number}" for path in python_files("harness")
                if path != HARNESS / "measuring" / "memory.py"
                for number, line in enumerate(path.read_text().splitlines(), 1) if re.search(r"\b0\.8 \*", line)]
    assert not headroom, headroom


def test_every_verdict_and_status_has_a_style_keyed_by_its_constant():
    from harness.judging import regression
    from harness.presenting.tables import STATUS_STYLE, VERDICT_STYLE
    from impls.status import STATUSES

    verdicts = {regression.REGRESSED, regression.IMPROVED, regression.SAME, regression.BROKEN, regression.FIXED,
                regression.NOT_TIMED, regression.ONLY_IN_BASE, regression.ONLY_IN_NEW}
    assert set(VERDICT_STYLE) == verdicts
    assert set(STATUS_STYLE) == set(STATUSES)


def test_differing_versions_are_said_one_way(monkeypatch):
    from harness.judging import analysis
    from harness.results import runmeta

    assert runmeta.version_changes({"numpy": "1.0", "torch": "2.0"}, {"numpy": "2.0", "torch": "2.0", "x": "1"}) \
        == ["numpy 1.0 → 2.0", "x None → 1"]
    assert runmeta.version_changes(None, {}) == []
    monkeypatch.setattr(runmeta, "version_changes", lambda before, after: ["planted 1 → 2"])
    meta = {"hardware": {"cpu_model": "A"}, "count_versions": {}}
    assert "different library versions (planted 1 → 2)" in analysis.unfit_reasons(meta, None, meta, None,
                                                                                     "instructions")
    rebuilt = [f"{path.relative_to(ROOT)}:{number}" for path in python_files("harness")
               for number, line in enumerate(path.read_text().splitlines(), 1)
               if re.search(r"versions\.get\(name\) !=", line)]
    assert not rebuilt, rebuilt


def test_only_the_backend_records_name_a_backend_where_counting_and_run_facts_ask():
    for path in (HARNESS / "measuring" / "facts.py", HARNESS / "measuring" / "callgrind.py"):
        named = [number for number, line in enumerate(path.read_text().splitlines(), 1)
                 if re.search(r"[\"'](torch|numpy|numba|triton|jax|pytensor)[\"']", line)]
        assert not named, f"{path.relative_to(ROOT)} lines {named}: ask impls.backends' records"


def test_counting_pins_the_llvm_target_of_the_backends_that_ask(monkeypatch):
    import subprocess

    from harness.measuring import callgrind

    asked = []

    def fake_valgrind(command, **kwargs):
        asked.append(command)
        return subprocess.CompletedProcess(command, 0, stdout="cpu-x\n+feature\n", stderr="")

    monkeypatch.setattr(callgrind.subprocess, "run", fake_valgrind)
    assert callgrind.llvm_target_env({"numpy", "torch"}) == {} and not asked  # no LLVM cache: valgrind not run
    assert callgrind.llvm_target_env({"numpy", "numba"}) == {"NUMBA_CPU_NAME": "cpu-x",
                                                             "NUMBA_CPU_FEATURES": "+feature"}
    assert set(callgrind.count_versions("3.0")) >= {"valgrind", "python", "glibc", "numpy", "torch", "numba"}


def test_cli_help_quotes_each_default_from_its_home(monkeypatch):
    from harness import cli
    from harness.judging import regression, wall_gate
    from harness.measuring import launch

    monkeypatch.setattr(regression, "DEFAULT_FACTOR", 1.37)
    monkeypatch.setattr(regression, "DEFAULT_COUNT_FACTOR", 1.07)
    monkeypatch.setattr(wall_gate, "DEFAULT_GATE_FACTOR", 3.5)
    monkeypatch.setattr(wall_gate, "DEFAULT_RETRIES", 4)
    monkeypatch.setattr(launch, "DEFAULT_TIME_MIN", 45)
    commands = cli.build_parser()._subparsers._group_actions[0].choices

    def help_of(command: str) -> str:
        return " ".join(commands[command].format_help().split())

    assert "change counts (1.37)" in help_of("compare")
    regress = help_of("regress")
    assert "change counts (3.5)" in regress and "many times (4)" in regress and "regresses (1.07)" in regress
    assert "in minutes (45)" in help_of("launch")
    assert "percentiles (3.5)" in help_of("dashboard")


def test_the_adversarial_check_and_the_dtype_difference_are_named_for_what_they_are():
    from harness.measuring import check
    from impls import common

    assert hasattr(check, "AdversarialCheck") and not hasattr(check, "StrategyGate")
    assert common.DTYPE_DIFFERENCE == "dtype" and not hasattr(common, "DTYPE")
