"""The status vocabulary has one home, impls/status.py (docs/SPEC.md §4):
every module that writes, compares, colours or counts a status names it by
its constant there (``status.OK``, ``CORRECT``, ...), never by its spelling.
The scan reads the syntax tree, so a status word in prose (a docstring, a
message, a comment) or in another role (a log level, a flag's name that is
not a status, a count column) is not a copy; a status word in a position
that holds a status is."""

import ast
from pathlib import Path

import pytest

from harness.base.checkout import ROOT
from impls import status

HOME = ROOT / "impls" / "status.py"
# The Python of the project; the dashboard's JavaScript (harness/presenting/dashboard_assets) reads no
# status (the page's statuses are text dashboard.py wrote).
SCANNED = ("harness", "impls", "benchmarks")
TOP_LEVEL = ("report.py", "scatterbench.py")
WORDS = set(status.STATUSES)


def scanned_files() -> list[Path]:
    files = [path for folder in SCANNED for path in sorted((ROOT / folder).rglob("*.py"))]
    return [path for path in files + [ROOT / name for name in TOP_LEVEL] if path != HOME]


def _names_a_status(node: ast.AST) -> bool:
    """An expression that holds a status: ``x.status``, ``row["status"]``,
    ``base_status``, ``statuses``, ``row.get("status")``, and a column of
    them (``rows["status"].isin``'s receiver)."""
    if isinstance(node, ast.Name):
        return "status" in node.id
    if isinstance(node, ast.Attribute):
        return "status" in node.attr or _names_a_status(node.value) and node.attr in ("str", "values")
    if isinstance(node, ast.Subscript):
        key = node.slice
        return isinstance(key, ast.Constant) and isinstance(key.value, str) and "status" in key.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and "status" in str(node.args[0].value)
    return False


def _status_words(node: ast.AST | None) -> list[ast.Constant]:
    """The status words an expression spells where its value is a status or
    a collection of statuses: a constant, either branch of ``a if c else
    b``, either side of ``or``, the items of a tuple, list or set."""
    if node is None:
        return []
    if isinstance(node, ast.Constant):
        return [node] if isinstance(node.value, str) and node.value in WORDS else []
    if isinstance(node, ast.IfExp):
        return _status_words(node.body) + _status_words(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [word for value in node.values for word in _status_words(value)]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [word for item in node.elts for word in _status_words(item)]
    if isinstance(node, ast.Starred):
        return _status_words(node.value)
    return []


def _function_of(node: ast.AST, parents: dict) -> ast.AST | None:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return node
    return None


def status_literals(source: str) -> list[tuple[int, str, str]]:
    """(line, word, position) for each status word spelled where a status
    goes: compared with a status (``==``, ``!=``, ``in``), handed to
    ``.isin``, ``Verdict``'s first argument, ``status=``, assigned to or
    defaulting a name or field that holds a status, returned by a function
    whose name says it gives a status, a key of a map of several statuses, a
    tuple, list or set of several statuses, and ``.get("status", word)``'s
    default."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []

    def note(words, position):
        found.extend((word.lineno, word.value, position) for word in words)

    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_names_a_status(side) for side in sides):
                note([word for side in sides for word in _status_words(side)], "compared with a status")
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name == "Verdict" and node.args:
                note(_status_words(node.args[0]), "a Verdict's status")
            if name == "isin" and isinstance(func, ast.Attribute) and _names_a_status(func.value):
                note([word for arg in node.args for word in _status_words(arg)], "isin of a status column")
            if name in ("get", "setdefault", "pop") and len(node.args) == 2 \
                    and isinstance(node.args[0], ast.Constant) and "status" in str(node.args[0].value):
                note(_status_words(node.args[1]), "the default of a status")
            for keyword in node.keywords:
                if keyword.arg and "status" in keyword.arg:
                    note(_status_words(keyword.value), f"keyword {keyword.arg}=")
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_names_a_status(target) for target in targets):
                note(_status_words(node.value), "assigned to a status")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            positional = arguments.posonlyargs + arguments.args
            pairs = list(zip(positional[len(positional) - len(arguments.defaults):], arguments.defaults))
            pairs += [(arg, default) for arg, default in zip(arguments.kwonlyargs, arguments.kw_defaults)]
            for arg, default in pairs:
                if "status" in arg.arg:
                    note(_status_words(default), f"the default of {arg.arg}")
        elif isinstance(node, ast.Return):
            function = _function_of(node, parents)
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)) and "status" in function.name:
                note(_status_words(node.value), f"returned by {function.name}")
        elif isinstance(node, ast.Dict):
            keys = [key for key in node.keys if key is not None]
            words = [word for key in keys for word in _status_words(key)]
            if len(words) >= 2:
                note(words, "a key of a map of statuses")
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            words = [word for item in node.elts for word in _status_words(item)]
            if len({word.value for word in words}) >= 2:
                note(words, "one of several statuses")
    return sorted(set(found))


def spelled_outside_home(paths) -> list[str]:
    """Each status word a file spells where a status goes, as "path:line: word (position)"."""
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}: {word!r} ({position})"
            for path in paths for line, word, position in status_literals(path.read_text())]


def test_no_module_spells_a_status_but_its_home():
    spelled = spelled_outside_home(scanned_files())
    assert not spelled, "name the status by its constant in impls/status.py:\n" + "\n".join(spelled)


def test_the_scan_reads_every_layer_and_the_entry_points():
    scanned = set(scanned_files())
    for path in ("impls/common.py", "impls/defects.py", "harness/measuring/check.py", "harness/cli.py",
                 "harness/presenting/report/sections.py", "benchmarks/aa_runs.py", "report.py", "scatterbench.py"):
        assert ROOT / path in scanned, path
    assert HOME not in scanned


def test_the_scan_finds_a_planted_copy_in_a_module(tmp_path):
    """A copy of a real module with one status compared by its spelling is reported at that line."""
    module = ROOT / "harness" / "judging" / "analysis.py"
    assert not spelled_outside_home([module])
    copy = tmp_path / "analysis.py"
    source = module.read_text()
    copy.write_text(source + '\n\ndef exact(row):\n    return row["status"] == "ok"\n')
    assert spelled_outside_home([copy]) == [f"{copy}:{source.count(chr(10)) + 4}: 'ok' (compared with a status)"]


@pytest.mark.parametrize("planted", [
    'if row["status"] == "ok":\n    pass\n',
    'if verdict.status != "mismatch":\n    pass\n',
    'if base_status in ("ok", "inexact"):\n    pass\n',
    'timed = rows[rows["status"].isin(["ok", "inexact"])]\n',
    'verdict = Verdict("mismatch", "values differ")\n',
    'verdict = common.Verdict("inexact" if small else "mismatch", "")\n',
    'rows = rows.assign(status="error")\n',
    'status = "timeout"\n',
    'row["status"] = "skipped"\n',
    'def judged(status="ok"):\n    pass\n',
    'def case_status(row):\n    return "upstream-defect"\n',
    'STYLE = {"ok": "green", "mismatch": "red"}\n',
    'FAILED = ("mismatch", "error")\n',
    'first = row.get("status", "unrepeatable")\n',
])
def test_the_scan_finds_a_planted_status_word(planted):
    assert status_literals(planted), planted


@pytest.mark.parametrize("prose", [
    '"""A mismatch is a wrong answer; ok means it matches."""\n',
    'log("error", "the run failed")\n',
    'loads[-1]["skipped"] = True\n',
    'raise ValueError(f"{name}: timeout must be positive")\n',
    'if row["status"] == status.OK:\n    pass\n',
    'kind = "inexact"\n',
])
def test_the_scan_passes_a_status_word_in_another_role(prose):
    assert not status_literals(prose), prose


