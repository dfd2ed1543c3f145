"""The layers the README promises: impls at the ground, harness above it,
report.py, the dashboard and the CLI on top; no import runs back up."""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]
TOP_OF_HARNESS = {"cli.py", "dashboard.py", "__main__.py"}


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_impls_imports_neither_the_harness_nor_the_report():
    for path in (ROOT / "impls").glob("*.py"):
        assert not imported_modules(path) & {"harness", "report", "scatterbench"}, path.name


def test_only_the_top_of_the_harness_imports_the_report():
    for path in (ROOT / "harness").glob("*.py"):
        if path.name not in TOP_OF_HARNESS:
            assert "report" not in imported_modules(path), path.name
