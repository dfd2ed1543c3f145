"""The maintenance subcommands the Makefile calls: `scatterbench baseline`
(`make baseline`), `scatterbench cache clear` (`make clean-cache`) and
`scatterbench gpu` (`make gpu`, its steps in tests/harness/measuring/
test_gpu_steps.py). The Makefile's three targets are one-line calls of them;
the regress gates' factors and the GPU steps' names live in the code alone,
each checked by a search that is shown to find a planted second copy."""

import ast
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from harness import cli
from harness.base import caches, checkout
from harness.judging import baselines, count_gate, regression, wall_gate
from harness.measuring import callgrind, facts, gpu_steps
from harness.results import metrics, store
from tests.helpers import ROOT, benchmark, config_yaml, scatterbench

MAKEFILE = ROOT / "Makefile"


# ------------------------------------------------------------------ the Makefile
def recipes(text: str) -> dict[str, list[str]]:
    """Each target's recipe lines, continuations joined, as make reads them."""
    found: dict[str, list[str]] = {}
    current = None
    for line in text.replace("\\\n", " ").splitlines():
        if line.startswith("\t"):
            if current:
                found.setdefault(current, []).append(" ".join(line.split()))
            continue
        rule = re.match(r"^([A-Za-z0-9_.%-]+)\s*:(?!=)", line)
        current = rule.group(1) if rule else None
    return found


def one_line_call(text: str, target: str, subcommand: str) -> bool:
    """``target``'s recipe is one call of ``scatterbench subcommand`` (a setup line installing what it
    needs aside: ``$(VALGRIND_SETUP)``)."""
    lines = [line for line in recipes(text).get(target, []) if line.lstrip("@") != "$(VALGRIND_SETUP)"]
    return len(lines) == 1 and re.fullmatch(rf"@?\$\(PY\) -m harness {subcommand}( .*)?", lines[0]) is not None


TARGETS = (("gpu", "gpu"), ("baseline", "baseline"), ("clean-cache", "cache clear"))


@pytest.mark.parametrize("target, subcommand", TARGETS)
def test_the_makefiles_target_is_a_one_line_call_of_its_subcommand(target, subcommand):
    text = MAKEFILE.read_text()
    assert one_line_call(text, target, subcommand), recipes(text).get(target)
    assert subcommand.split()[0] in {declared.name for declared in cli.COMMANDS}
    # a second line of shell beside the call is found
    call = next(line for line in text.splitlines() if line.startswith(f"\t$(PY) -m harness {subcommand}"))
    assert not one_line_call(text.replace(call, call + "\n\t@echo step pytest"), target, subcommand)


def make_dry_run(target: str, **variables: str) -> list[str]:
    """The ``scatterbench`` arguments ``make -n target`` would call, with ``variables`` set."""
    done = subprocess.run(["make", "-n", "-s", target, "STAMP=", "PY=python3",
                           *(f"{name}={value}" for name, value in variables.items())],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.replace("\\\n", " ").splitlines() if "-m harness" in line)
    return shlex.split(line.split("-m harness", 1)[1])


def test_make_passes_each_variable_set_and_leaves_the_defaults_to_the_command():
    parse = cli.build_parser().parse_args
    assert make_dry_run("gpu") == ["gpu"]
    given = parse(make_dry_run("gpu", GPU_CONFIG="c.yaml", GPU_RESULTS="d", GPU_BUDGET="300",
                               GPU_TESTS="-m cuda tests/x.py"))
    assert (given.config, given.output, given.budget, given.tests) == ("c.yaml", "d", 300.0, "-m cuda tests/x.py")
    assert parse(make_dry_run("baseline")).counts == "results/baseline-counts"  # make's COUNTS_BASELINE
    assert parse(make_dry_run("clean-cache")).action == "clear"
    regress = parse(make_dry_run("regress"))
    assert regress.factor is None and regress.counts_factor is None  # the code's defaults
    regress = parse(make_dry_run("regress", REGRESS_FACTOR="3", COUNTS_FACTOR="1.5"))
    assert (regress.factor, regress.counts_factor) == (3.0, 1.5)


def factor_copies(text: str) -> list[str]:
    """Lines of a Makefile giving a gate's factor a value of its own: a ``*_FACTOR`` variable
    assigned, or a number after ``--factor`` or ``--counts-factor``."""
    return [line for line in text.splitlines() if not line.lstrip().startswith("#") and (
        re.match(r"\s*\w*FACTOR\w*\s*[:?+!]?=\s*\S", line) or re.search(r"--(counts-)?factor[ =]+[0-9.]", line))]


def test_the_makefile_holds_no_copy_of_the_gates_factors():
    text = MAKEFILE.read_text()
    assert not factor_copies(text)
    for planted in ("REGRESS_FACTOR ?= 2.0\n", "COUNTS_FACTOR := 1.03\n", "\t$(PY) -m harness regress --factor 2.0\n",
                    "\t  --counts-factor 1.03 --no-progress\n"):
        assert factor_copies(text + planted) == [planted.rstrip("\n")], planted


def test_regress_without_factors_judges_by_the_codes(monkeypatch, tmp_path, capsys):
    """The defaults are read where the gates keep them: the wall gate's, and the counts' (metrics)."""
    assert regression.DEFAULT_COUNT_FACTOR == metrics.COUNTS.factor
    monkeypatch.setattr(wall_gate, "DEFAULT_GATE_FACTOR", 3.5)
    monkeypatch.setattr(regression, "DEFAULT_COUNT_FACTOR", 1.07)
    judged = {}

    def wall(baseline, config, rule, **options):
        judged["wall"] = rule.factor
        return SimpleNamespace(table=pd.DataFrame(), summary="wall: fine", failed=False)

    def counts(baseline, config, factor, **options):
        judged["counts"] = factor
        return SimpleNamespace(table=pd.DataFrame(), summary="counts: fine", failed=False)

    monkeypatch.setattr(wall_gate, "run_gate", wall)
    monkeypatch.setattr(count_gate, "run_count_gate", counts)
    monkeypatch.setattr("harness.presenting.tables.compare_table", lambda table, relative: "")
    assert cli.main(["regress", str(tmp_path), "quick.yaml", "--counts", str(tmp_path)]) == 0
    assert judged == {"wall": 3.5, "counts": 1.07}
    assert cli.main(["regress", str(tmp_path), "quick.yaml", "--counts", str(tmp_path), "--factor", "2.5",
                     "--counts-factor", "1.2"]) == 0
    assert judged == {"wall": 2.5, "counts": 1.2}
    capsys.readouterr()


# ------------------------------------------------------------ the steps' names
STEP_NAMES = {gpu_steps.STEP_CHECK, gpu_steps.STEP_PYTEST, gpu_steps.STEP_SWEEP, gpu_steps.STEP_REPORT}
HOME = ROOT / "harness" / "measuring" / "gpu_steps.py"


def _strings(node) -> list:
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]


def step_name_copies(text: str) -> list[int]:
    """Lines of Python spelling the GPU steps' names: a string starting as a check step's name does
    (``"check-"``, ``f"check-{op}"``), a step constant given its name (``STEP_SWEEP = "sweep"``), or
    a collection of two or more of the names."""
    lines = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value.startswith(f"{gpu_steps.STEP_CHECK}-"):
            lines.append(node.lineno)
        elif isinstance(node, ast.Assign):
            targets = [name.id for target in node.targets for name in ast.walk(target) if isinstance(name, ast.Name)]
            if any("STEP" in name for name in targets) and set(_strings(node.value)) & STEP_NAMES:
                lines.append(node.lineno)
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(set(_strings(node)) & STEP_NAMES) >= 2:
            lines.append(node.lineno)
    return sorted(set(lines))


def makefile_step_spellings(text: str) -> list[str]:
    """Makefile lines (comments aside) spelling the steps or their records: ``check-$$op``,
    a steps folder, a step function."""
    return [line for line in text.splitlines() if not line.lstrip().startswith("#")
            and re.search(r"check-\$|/steps\b|\bstep\(\)", line)]


def test_the_gpu_steps_names_are_spelled_only_in_their_home():
    assert step_name_copies(HOME.read_text())  # the search finds the home itself
    spelled = {f"{path.relative_to(ROOT)}:{line}": None for path in (ROOT / "harness").rglob("*.py")
               if path != HOME for line in step_name_copies(path.read_text())}
    assert not spelled, f"read the names from harness/measuring/gpu_steps.py: {list(spelled)}"
    assert not makefile_step_spellings(MAKEFILE.read_text())
    # planted copies are found
    plan = (ROOT / "harness" / "measuring" / "plan.py").read_text()
    for planted in ('STEP_SWEEP = "sweep"\n', 'STEP_CHECK, STEP_PYTEST = "check", "pytest"\n',
                    'names = [f"check-{op}" for op in ops]\n', 'ORDER = ("pytest", "sweep", "report")\n'):
        assert step_name_copies(plan + planted) == [len(plan.splitlines()) + 1], planted
    old_recipe = '\tfor op in $$ops; do step check-$$op "0 1" "..." || exit $$?; done\n'
    assert makefile_step_spellings(MAKEFILE.read_text() + old_recipe)


# -------------------------------------------------------------------- baseline
@pytest.fixture
def this_machine(monkeypatch):
    """A CPU and a version set of its own, valgrind present."""
    monkeypatch.setattr(facts, "cpu_slug", lambda: "test-cpu-x2")
    monkeypatch.setattr(callgrind, "count_versions", lambda valgrind=None: {"valgrind": "3.0", "python": "3.11"})
    monkeypatch.setattr(callgrind, "unavailable", lambda: None)
    return SimpleNamespace(wall="test-cpu-x2", counts="python-3.11-valgrind-3.0")


def test_baseline_replaces_this_cpus_and_this_version_sets_baselines(this_machine, monkeypatch, tmp_path, capsys):
    wall, counts = tmp_path / "baseline-quick", tmp_path / "baseline-counts"
    for stale in (wall / this_machine.wall / "stale", counts / this_machine.counts / "stale",
                  wall / "other-cpu" / store.META):
        stale.parent.mkdir(parents=True, exist_ok=True)
        stale.write_text("old")
    ran = []

    def run(command):
        ran.append(command)
        out = Path(command[command.index("-o") + 1])
        assert not out.exists()  # removed before it is measured again
        (out / callgrind.DUMP_DIR).mkdir(parents=True)
        (out / store.META).write_text("{}")
        return 0

    monkeypatch.setattr(baselines, "run_command", run)
    assert cli.main(["baseline", "--config", "tiny.yaml", "--wall", str(wall), "--counts", str(counts)]) == 0
    harness = [sys.executable, "-m", "harness", "run", "tiny.yaml"]
    assert ran == [[*harness, "-o", str(wall / this_machine.wall), "--no-progress"],
                   [*harness, "--instrument", "callgrind", "-o", str(counts / this_machine.counts), "--no-progress"]]
    assert (counts / this_machine.counts / store.META).exists()
    assert not (counts / this_machine.counts / callgrind.DUMP_DIR).exists()  # the dumps stay out of git
    assert (wall / this_machine.wall / callgrind.DUMP_DIR).exists()  # a timed run's folder is its own
    assert (wall / "other-cpu" / store.META).exists()  # another CPU's baseline is kept
    said = capsys.readouterr().out
    assert f"baseline: timing tiny.yaml into {wall / this_machine.wall}" in said


def test_baseline_stops_at_a_failed_run_and_refuses_without_callgrind_before_removing_anything(
        this_machine, monkeypatch, tmp_path, capsys):
    wall, counts = tmp_path / "baseline-quick", tmp_path / "baseline-counts"
    ran = []
    monkeypatch.setattr(baselines, "run_command", lambda command: ran.append(command) or 2)
    assert cli.main(["baseline", "--wall", str(wall), "--counts", str(counts)]) == 2
    assert len(ran) == 1 and ran[0][4] == baselines.CONFIG  # the counts are not taken after a failed run

    kept = wall / this_machine.wall / store.META
    kept.parent.mkdir(parents=True)
    kept.write_text("{}")
    monkeypatch.setattr(callgrind, "unavailable", lambda: "valgrind is not installed")
    assert cli.main(["baseline", "--wall", str(wall), "--counts", str(counts)]) == 2
    err = capsys.readouterr().err
    assert "the counts baseline cannot be counted here: valgrind is not installed; --no-counts" in err
    assert kept.exists() and len(ran) == 1
    monkeypatch.setattr(baselines, "run_command", lambda command: ran.append(command) or 0)
    assert cli.main(["baseline", "--wall", str(wall), "--no-counts"]) == 0
    assert len(ran) == 2 and "--instrument" not in ran[1] and not kept.exists()
    assert cli.main(["baseline", "--no-counts", "--counts", str(counts)]) == 2


@pytest.mark.slow
def test_baseline_times_a_tiny_config_into_the_root_given(tiny_config, tmp_path):
    """The real timing run (the counting run's command is the one tests/harness/measuring/test_callgrind.py
    runs; counting even one case under Callgrind takes a minute and a half on a 2-core machine)."""
    config = tiny_config(config_yaml(benchmark("maxpool2d", ["torch_max_pool2d_indices"], N=1, C=1, H=4, W=4, k=2)))
    wall = tmp_path / "quick"
    done = scatterbench("baseline", "--config", config, "--wall", wall, "--no-counts")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert [path.name for path in wall.iterdir()] == [facts.cpu_slug()]
    assert set(store.read_rows(wall / facts.cpu_slug())["status"]) == {"ok"}


# ----------------------------------------------------------------------- cache
def test_cache_clear_removes_the_cache_folder_and_the_compile_caches(tmp_path, monkeypatch, capsys):
    cache, compiled = tmp_path / "cache", tmp_path / "compiled"
    for kept in (cache / "verdicts" / "a.json", cache / "ceilings.json", compiled / "jax" / "entry"):
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text("{}")
    monkeypatch.setenv(caches.ENV, str(cache))
    monkeypatch.setenv(caches.COMPILE_ENV, str(compiled))
    assert cli.main(["cache", "clear"]) == 0
    assert not cache.exists() and not compiled.exists()
    assert capsys.readouterr().out.split("\n")[:2] == [f"removed {cache}", f"removed {compiled}"]
    assert cli.main(["cache", "clear"]) == 0
    assert f"{cache}: not there, nothing to remove" in capsys.readouterr().out

    monkeypatch.delenv(caches.COMPILE_ENV)  # the compile caches inside the cache folder: removed with it
    (cache / "compile" / "torch").mkdir(parents=True)
    assert cli.main(["cache", "clear"]) == 0
    assert not cache.exists() and capsys.readouterr().out == f"removed {cache}\nremoved {cache / 'compile'}\n"


def test_cache_clear_refuses_a_folder_holding_the_home_directory_or_the_checkout(tmp_path, monkeypatch, capsys):
    home, checkout_copy = tmp_path / "home", tmp_path / "work" / "checkout"
    for folder in (home, checkout_copy):
        folder.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(checkout, "ROOT", checkout_copy)
    monkeypatch.setenv(caches.COMPILE_ENV, str(tmp_path / "compiled"))
    for chosen, holds in ((tmp_path, home), (tmp_path / "work", checkout_copy)):
        monkeypatch.setenv(caches.ENV, str(chosen))
        assert cli.main(["cache", "clear"]) == 2
        assert f"{chosen.resolve()}: holds {holds}, not a cache folder to remove" in capsys.readouterr().err
        assert home.is_dir() and checkout_copy.is_dir()
