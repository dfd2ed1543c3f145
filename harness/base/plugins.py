"""Plugins: the modules and files named in ``SCATTERBENCH_PLUGINS`` that
register backends, operators and strategies (docs/PLUGINS.md).

``load_plugins`` imports them (a module name on the import path, or a path to
a ``.py`` file; an isolated case's child process inherits the variable);
``recorded`` is what a run writes into meta.json (module, file and sha256 of
every module outside the project that registered something); and
``load_recorded`` loads a finished run's plugins again for its report,
``compare`` and the dashboard, or says in one line which cannot be loaded and
what the output will lack. A recorded file is loaded only while its sha256 is
the recorded one: a result directory never makes this machine run code other
than the code that produced it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
import traceback
from pathlib import Path

from harness.base.checkout import ROOT
from harness.base.errors import UsageError

ENV = "SCATTERBENCH_PLUGINS"
PROJECT_PACKAGES = ("impls", "harness")
# What a report, compare or the dashboard cannot give for a plugin's operators
# and strategies without its code.
REPORT_LACKS = ("its operators' speedups over the seed's original (the × seed column and the speedup figures), "
                "the comparison with the seed's original and the fastest library built-in, the strategies' 'Why', "
                "and which strategies return partial outputs")
DASHBOARD_LACKS = ("its operators' reference strategies (a change is then judged against the geometric mean of the "
                   "case's strategies) and, in the runs' reports, " + REPORT_LACKS)
COMPARE_LACKS = ("its operators' reference strategies: --normalise then divides each case by the geometric mean "
                 "of its strategies instead")


def entries(text: str | None = None) -> list[str]:
    """The plugins a ``SCATTERBENCH_PLUGINS`` value names, in order."""
    text = os.environ.get(ENV, "") if text is None else text
    return [part.strip() for part in text.split(",") if part.strip()]


def is_path(entry: str) -> bool:
    return entry.endswith(".py") or os.sep in entry or (os.altsep is not None and os.altsep in entry)


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _failure(entry: str, error: BaseException, file: str | None) -> UsageError:
    """One line naming the plugin, the error and the plugin's own line."""
    line = None
    if isinstance(error, SyntaxError) and error.filename == file:
        line = error.lineno
    frames = [frame for frame in traceback.extract_tb(error.__traceback__) if file and frame.filename == file]
    if frames:
        line = frames[-1].lineno
    where = f" (at {file}:{line})" if file and line else ""
    text = " ".join(str(error).split())
    return UsageError(f"{ENV}: plugin {entry!r} failed to import: {type(error).__name__}: {text}{where}")


def _import_file(path: Path, module_name: str | None = None):
    """The module in ``path``, imported under its file's stem (or
    ``module_name``) and kept in sys.modules, so an isolated child, a report
    and the plugin's own imports all find the one copy."""
    name = module_name or path.stem
    loaded = sys.modules.get(name)
    if loaded is not None:
        if getattr(loaded, "__file__", None) and Path(loaded.__file__).resolve() == path:
            return loaded
        raise UsageError(f"{ENV}: {path}: its module name {name!r} is taken by {getattr(loaded, '__file__', None) or 'a built-in module'}; rename the file")
    # Its own folder on the import path, as `python path/to/plugin.py` would have it, so a helper
    # beside it imports by name, at its top or later (inside ``prepare``). Last, so that it shadows
    # no installed module; kept, since a helper may be imported long after the plugin loaded.
    if str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def import_plugin(entry: str):
    """Imports one plugin named by module or by file path; every failure is
    a UsageError of one line naming the plugin (and, for an error in its
    code, the plugin's line)."""
    if is_path(entry):
        path = Path(entry).expanduser().resolve()
        if not path.is_file():
            raise UsageError(f"{ENV}: cannot import {entry!r}: no such file (a plugin is a module name on the "
                             f"import path, or the path of a .py file)")
        if not path.stem.isidentifier():
            raise UsageError(f"{ENV}: {entry!r}: {path.stem!r} is not a Python module name; rename the file")
        try:
            return _import_file(path)
        except UsageError:
            raise
        except (Exception, SystemExit) as error:  # anything a plugin's code raises, sys.exit included
            raise _failure(entry, error, str(path)) from None
    try:
        spec = importlib.util.find_spec(entry)
    except (ImportError, ValueError):  # a parent package missing, an empty name part
        spec = None
    if spec is None:
        raise UsageError(f"{ENV}: cannot import {entry!r}: no module named {entry!r} on the import path "
                         f"(add its folder to PYTHONPATH, or name the file: path/to/{entry.rsplit('.', 1)[-1]}.py)")
    try:
        return importlib.import_module(entry)
    except (Exception, SystemExit) as error:
        raise _failure(entry, error, spec.origin) from None


def load_plugins(text: str | None = None) -> list:
    """The built-in strategies, then every plugin ``SCATTERBENCH_PLUGINS``
    (or ``text``) names; the registry is validated once all are in.
    Loading again is a no-op for what is loaded. Returns the modules."""
    import impls  # noqa: F401  (the built-in strategies first)
    from impls.registry import check_registry

    modules = [import_plugin(entry) for entry in entries(text)]
    try:
        check_registry()
    except ValueError as error:
        raise UsageError(f"{ENV}: {error}") from None
    return modules


# ----------------------------------------------------------------- recording
def _outside_project(module_name: str) -> bool:
    return module_name.split(".")[0] not in PROJECT_PACKAGES


def registering_modules() -> list[str]:
    """Every module outside the project that registered a backend, an
    operator or a strategy, plus every plugin ``SCATTERBENCH_PLUGINS`` names
    (one may only patch others), in a stable order."""
    from impls.backends import BACKEND_MODULES
    from impls.registry import OPERATORS

    names = list(BACKEND_MODULES.values())
    for op in OPERATORS.values():
        names.append(op.module)
        names += [strat.prepare.__module__ for strat in op.strategies.values()]
    for entry in entries():
        names.append(Path(entry).stem if is_path(entry) else entry)
    return [name for name in dict.fromkeys(names) if name and _outside_project(name)]


def _record(module_name: str) -> dict:
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    record = {"module": module_name, "file": None, "sha256": None}
    if file and Path(file).is_file():
        record.update(file=str(Path(file).resolve()), sha256=sha256(file))
    return record


def recorded() -> list[dict]:
    """What meta.json keeps as ``plugins``: module, file and sha256 of each
    module outside the project that the run's registry holds something of
    (file and hash are None for code with no file, a notebook's cells)."""
    return [_record(name) for name in registering_modules()]


def project_path(filename) -> str:
    """A file as messages name it: relative to the project when inside it
    (``impls/maxpool2d.py``), else in full (a plugin's own file)."""
    try:
        return str(Path(filename).resolve().relative_to(ROOT))
    except (ValueError, OSError):
        return str(filename)


def env_setting(meta: dict) -> str:
    """``SCATTERBENCH_PLUGINS=...`` for a run's "Reproduce" line (its plugins'
    files, relative to the project when inside it), or "" without plugins."""
    files = []
    for record in meta.get("plugins") or []:
        if not isinstance(record, dict):
            continue
        file = record.get("file")
        files.append(project_path(file) if file else record.get("module", "?"))
    return f"{ENV}={','.join(files)}" if files else ""


# ------------------------------------------------------------------- loading
def _load_one(record: dict) -> str | None:
    """Loads one recorded plugin if it is not loaded yet; None when it is
    loaded, else why it cannot be."""
    name, file, digest = record.get("module"), record.get("file"), record.get("sha256")
    if not isinstance(name, str) or not name:
        return "no module name recorded"
    if name in sys.modules:
        return None
    candidates = [Path(file)] if isinstance(file, str) else []
    # Where the import path would find it now (a top-level name only: looking up
    # "a.b" would run package a's code before any hash is compared).
    spec = importlib.util.find_spec(name) if "." not in name else None
    if spec is not None and spec.origin and Path(spec.origin).is_file():
        candidates.append(Path(spec.origin))
    present = [path for path in candidates if path.is_file()]
    if not present:
        return f"{file or name} is not here"
    matching = [path for path in present if digest and sha256(path) == digest]
    if not matching:
        return (f"{present[0]} changed since the run (its sha256 differs), so it is not loaded; name it in "
                f"{ENV} to load it as it is now")
    try:
        _import_file(matching[0].resolve(), name)
    except UsageError as error:
        return str(error).removeprefix(f"{ENV}: ")
    except Exception as error:  # noqa: BLE001 - any plugin failure is a line, not a crash
        return str(_failure(name, error, str(matching[0].resolve()))).removeprefix(f"{ENV}: ")
    return None


def load_recorded(meta: dict, where: str = "", lacks: str = REPORT_LACKS) -> list[str]:
    """Loads the plugins a run's meta.json records that are not loaded yet.
    Returns one line naming those that cannot be loaded and what the output
    will lack without them, or [] when all are loaded. The report, compare
    and the dashboard call this before they use the registry."""
    import impls  # noqa: F401  (the built-in strategies first)

    records = [record for record in meta.get("plugins") or [] if isinstance(record, dict)]
    problems = [(record.get("module", "?"), _load_one(record)) for record in records]
    missing = [f"{name} ({problem})" for name, problem in problems if problem]
    if not missing:
        return []
    run = where or meta.get("directory") or meta.get("run_id") or "a run"
    return [f"{run}: made with plugin{'s' if len(missing) > 1 else ''} {'; '.join(missing)}: without "
            f"{'them' if len(missing) > 1 else 'it'} this lacks {lacks}"]
