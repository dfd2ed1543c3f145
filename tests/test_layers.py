"""The layers docs/EXTENDING.md promises, checked on every import statement (those
inside functions too), and shown by harness/'s folders: impls at the ground;
harness/base (errors, formatting, config, plugins); harness/results (what a
run leaves on disk); harness/measuring (running strategies); harness/judging
(reading results across runs); harness/presenting (tables, report,
dashboard); the Python API, the command line and the top-level entry points
on top. No import runs back up, and no two modules import each other round a
circle. Every harness module lives in a layer's folder or is one of the top."""

import ast
from pathlib import Path

ROOT = Path(__file__).parents[1]

LAYERS = {  # module (or package prefix) -> layer, bottom to top
    "impls": 0,
    "harness.base": 1,
    "harness.results": 2,
    "harness.measuring": 3,
    "harness.judging": 4,
    "harness.presenting": 5,
    "harness.api": 6, "harness.cli": 6, "harness.__main__": 6, "harness": 6, "report": 6, "scatterbench": 6,
}
TOP = {"harness", "harness.api", "harness.cli", "harness.__main__"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer(module: str) -> int:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS[prefix]
    raise AssertionError(f"{module} is in no layer")


def project_modules() -> dict[str, Path]:
    paths = [*(ROOT / "impls").glob("*.py"), *(ROOT / "harness").rglob("*.py"),
             ROOT / "report.py", ROOT / "scatterbench.py"]
    return {module_name(path): path for path in paths}


def imports(path: Path, known: set[str]) -> set[str]:
    """The project modules ``path`` imports (``from harness.results import store`` counts as harness.results.store)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def graph() -> dict[str, set[str]]:
    modules = project_modules()
    known = set(modules)
    return {name: imports(path, known) - {name} for name, path in modules.items()}


def test_no_import_runs_up_a_layer():
    upward = [f"{importer} (layer {layer(importer)}) imports {imported} (layer {layer(imported)})"
              for importer, targets in graph().items() for imported in targets
              # a package's __init__ may name its own modules
              if layer(imported) > layer(importer) and not imported.startswith(importer + ".")]
    assert not upward, "\n".join(upward)


def test_every_harness_module_is_in_a_layer_folder():
    """A new module dropped at harness/'s top would belong to no layer."""
    loose = [name for name in project_modules() if name.startswith("harness") and name not in TOP
             and not any(name.startswith(folder + ".") or name == folder
                         for folder in LAYERS if folder.count(".") == 1 and folder not in TOP)]
    assert not loose, f"modules outside the layer folders: {loose}"


def test_no_import_circle():
    edges = graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str):
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if target.startswith(node + "."):
                continue  # a package importing its own modules is not a circle
            if state.get(target) == 1:
                raise AssertionError("import circle: " + " -> ".join(path[path.index(target):] + [target]))
            if target not in state:
                visit(target)
        path.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)


def test_the_layer_check_can_fail(tmp_path):
    """A harness core module importing the report would be caught."""
    fake = tmp_path / "sneaky.py"
    fake.write_text("from harness.presenting.report import figures\n")
    found = imports(fake, set(project_modules()))
    assert "harness.presenting.report.figures" in found
    assert max(layer(name) for name in found) > layer("harness.measuring.sweep")
