"""docs/EXTENDING.md names every module of harness/ and impls/ by its path, so
a reader finds each in the folder it lives in: a module left out, or a path
that names a module that is not there (a renamed or moved file), fails."""

import re
from pathlib import Path

from harness.base.checkout import ROOT

EXTENDING = ROOT / "docs" / "EXTENDING.md"
PATH = re.compile(r"`((?:harness|impls)/[\w/]+\.py)`")


def modules() -> set[str]:
    """Every module file under harness/ and impls/ (a package's ``__init__`` and
    ``__main__`` are its folder, named by the folder's row)."""
    return {path.relative_to(ROOT).as_posix() for folder in ("harness", "impls")
            for path in (ROOT / folder).rglob("*.py") if path.name not in ("__init__.py", "__main__.py")}


def named(text: str) -> set[str]:
    return set(PATH.findall(text))


def test_every_module_is_named_by_its_path_and_every_named_path_exists():
    text = EXTENDING.read_text()
    left_out = sorted(modules() - named(text))
    assert not left_out, f"docs/EXTENDING.md names no row for {left_out}"
    missing = sorted(path for path in named(text) if not (ROOT / path).is_file())
    assert not missing, f"docs/EXTENDING.md names modules that do not exist: {missing}"


def test_the_check_finds_a_module_left_out_and_one_in_the_wrong_folder():
    text = EXTENDING.read_text()
    assert "harness/measuring/plan.py" in named(text)
    without = text.replace("`harness/measuring/plan.py`", "`plan.py`")
    assert "harness/measuring/plan.py" in modules() - named(without)
    moved = text.replace("`harness/results/stats.py`", "`harness/measuring/stats.py`")
    assert not (ROOT / "harness/measuring/stats.py").exists()
    assert "harness/measuring/stats.py" in named(moved)


def test_a_bare_file_name_is_not_a_path():
    assert named("`stats.py`, `harness/judging/gate.py`") == {"harness/judging/gate.py"}
    assert not Path(ROOT / "harness/judging/gate.py").exists()
