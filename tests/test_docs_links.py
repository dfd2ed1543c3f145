"""The docs stand on their own: every relative link in README.md and docs/
(docs/report/ too) reaches a file of the repository, and its #anchor a
heading of that file; every repository path they cite exists. The checker is
tried on planted bad links first, so it can fail. And the comparison bounds
docs/PLUGINS.md states are the ones impls/common.py applies, measured through
compare_relative."""

import re
from pathlib import Path

import numpy as np
import pytest

from impls.common import compare_relative
from tests.helpers import ROOT

# Inline links and images, [text](target) / ![alt](target); a target never holds a space or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
# A repository path: under one of its top folders (or a top-level file), ending in an extension or a '/'.
TOP = r"(?:impls|harness|tests|docs|configs|benchmarks|results|\.ci)"
PATH = re.compile(rf"(?<![\w./<-])({TOP}/[\w./-]*[\w-](?:\.\w+|/)|(?:report|scatterbench)\.py|Makefile|pyproject\.toml)"
                  r"(?![\w<*])")
# A repository path in backticks, with or without an extension (`.ci/run`, `docs/RUNS`); a placeholder
# (`results/<run-id>/`), a glob or a folder only a run makes (`__pycache__`) is not a citation.
QUOTED_PATH = re.compile(rf"`({TOP}/[^`\s<>*]*)`")
RUNTIME = ("__pycache__",)
FENCE = re.compile(r"^(```|~~~)")


def documents() -> list[Path]:
    docs = ROOT / "docs"
    return [ROOT / "README.md", *sorted(docs.glob("*.md")), *sorted((docs / "report").glob("*.md"))]


def prose(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks (a
    ``# comment`` there is no heading)."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append((number, line))
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's anchors for a Markdown file's headings: lower case, punctuation
    dropped (letters, digits, '-', '_' and spaces kept), spaces as '-', a
    repeated anchor numbered -1, -2, ..."""
    found: dict[str, int] = {}
    result = set()
    for _, line in prose(path.read_text()):
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = found.get(slug, 0)
        found[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def broken_links(path: Path, root: Path) -> list[str]:
    """What in ``path`` points at nothing: a relative link to a missing file,
    an #anchor no heading of its file has, a cited repository path (relative
    to ``root``) that does not exist. One line per problem."""
    problems = []
    for number, line in prose(path.read_text()):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists():
                problems.append(f"{path.name}:{number}: link to {target}: no such file")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
                problems.append(f"{path.name}:{number}: link to {target}: no heading #{anchor} in {linked.name}")
        # Paths inside link targets were judged above, relative to the page.
        text = LINK.sub("", line)
        for cited in dict.fromkeys(PATH.findall(text) + QUOTED_PATH.findall(text)):
            if not any(part in cited for part in RUNTIME) and not (root / cited).exists():
                problems.append(f"{path.name}:{number}: cites {cited}: not in the repository")
    return problems


def test_the_checker_finds_planted_bad_links(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "impls").mkdir()
    (tmp_path / "impls" / "there.py").write_text("")
    (tmp_path / "docs" / "OTHER.md").write_text("# Other page\n\n## A section\n")
    page = tmp_path / "docs" / "PAGE.md"
    page.write_text("# Page\n\n"
                    "[fine](OTHER.md#a-section) [fine too](#page) [web](https://example.org/x)\n"
                    "`impls/there.py` is cited, and so is results/<run-id>/ (a placeholder)\n"
                    "[gone](MISSING.md) [wrong anchor](OTHER.md#no-such-section) [here](#nowhere)\n"
                    "`impls/gone.py` and SPEC in tests/shared/SPEC.md, `.ci/gone` and `impls/__pycache__`\n"
                    "```sh\n# a shell comment, no heading\n```\n")
    problems = broken_links(page, tmp_path)
    assert problems == [
        "PAGE.md:5: link to MISSING.md: no such file",
        "PAGE.md:5: link to OTHER.md#no-such-section: no heading #no-such-section in OTHER.md",
        "PAGE.md:5: link to #nowhere: no heading #nowhere in PAGE.md",
        "PAGE.md:6: cites impls/gone.py: not in the repository",
        "PAGE.md:6: cites tests/shared/SPEC.md: not in the repository",
        "PAGE.md:6: cites .ci/gone: not in the repository",
    ], problems


def test_anchors_are_githubs():
    page = ROOT / "docs" / "SPEC.md"
    found = anchors(page)
    assert {"13-dispersion--shift-and-sum", "15-gradients-training-mode", "4-result-rows"} <= found, found


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(ROOT)))
def test_every_link_and_cited_path_exists(path):
    assert broken_links(path, ROOT) == []


def test_the_readme_is_short_and_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    linked = {Path(target.partition("#")[0]).name for target in LINK.findall(readme)}
    pages = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert pages <= linked, pages - linked
    assert "make test" in readme and "make bench" in readme


def test_every_written_page_links_the_contract():
    """The report is generated (its owner is the report builder); every page
    written by hand sends its reader to docs/SPEC.md."""
    written = [path for path in documents() if path.parent.name != "report" and path.name not in ("REPORT.md",
                                                                                                  "SPEC.md")]
    missing = [path.name for path in written
               if not any(Path(target.partition("#")[0]).name == "SPEC.md"
                          for _, line in prose(path.read_text()) for target in LINK.findall(line))]
    assert missing == []


def stated_bounds() -> dict[str, tuple[float, float]]:
    """docs/PLUGINS.md's table: dtype -> (ok up to, inexact up to)."""
    guide = (ROOT / "docs" / "PLUGINS.md").read_text()
    rows = re.findall(r"^\s*\| `(\w+)` \| ([\d.e-]+) \| ([\d.e-]+) \|$", guide, re.MULTILINE)
    return {dtype: (float(ok), float(inexact)) for dtype, ok, inexact in rows}


def status_at(dtype: str, relative_error: float) -> str:
    """compare_relative's status for an output off by ``relative_error``
    everywhere (a float32 array stands for bfloat16, as the harness widens it)."""
    storage = np.float32 if dtype == "bfloat16" else dtype
    reference = np.full(4096, 1.0)
    return compare_relative("out", (reference * (1 + relative_error)).astype(storage), reference, dtype).status


def test_the_guides_comparison_bounds_are_the_codes():
    bounds = stated_bounds()
    assert set(bounds) == {"float64", "float32", "float16", "bfloat16"}, bounds
    for dtype, (ok, inexact) in bounds.items():
        assert status_at(dtype, ok / 2) == "ok", dtype
        assert status_at(dtype, ok * 2) == "inexact", dtype
        assert status_at(dtype, inexact / 2) == "inexact", dtype
        assert status_at(dtype, inexact * 2) == "mismatch", dtype
