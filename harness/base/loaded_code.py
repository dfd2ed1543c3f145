"""What code a process has run, as digests that change when the code does:
what a kept verdict depends on (harness/measuring/verdict_cache.py).

A verdict holds only for the code that reached it, and a strategy runs more
than its own file: whatever it imports, at the top, inside ``prepare`` or
its call, through ``importlib``, transitively. So the dependencies are read
from ``sys.modules`` *after* the check ran, in the process that ran it (a
worker, an isolated child, the run itself), never from a list made before:

- a module installed by a distribution (found by ``importlib.metadata``, the
  module's file lying where the distribution was installed) stands for it
  as ``dist:<name>=<its RECORD file>``, whose digest is that of its
  ``RECORD``: the hash of every file the installer wrote, so a reinstall of
  edited code at the same version changes it, and a shared library of a
  gigabyte is not read. The RECORD is named by its path, so another process
  reads it whatever its import path: a distribution vendored in another's
  folder (setuptools' ``backports.tarfile``) is found by name only while
  that folder is on ``sys.path``, and its verdicts then went stale in every
  run that had not imported it yet;
- any other module's file (a plugin's helper, a script, an editable
  install's source) is ``file:<path>``, digested by its bytes;
- the standard library (Python's version stands for it), impls/ (the
  verdict's digest hashes all of it), the harness (only its judge,
  check.py, decides a verdict; it is hashed apart) and the code the
  libraries generate into their compile caches (``_generated_roots``) are
  left out.

Digests are kept per process by the file's size and modification time, so
asking after every strategy key costs a few stat calls.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import sys
import time
from functools import lru_cache
from pathlib import Path

from harness.base.checkout import ROOT

DIST, FILE = "dist:", "file:"
RACY_NS = 2_000_000_000


def tree_digest(folder: Path) -> str:
    """sha256 over the relative path and bytes of every .py file under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@lru_cache(maxsize=1)
def _left_out() -> tuple[Path, ...]:
    """The standard library's folder (where ``os`` lives: a virtual environment's base Python's),
    impls/ and the harness."""
    return (Path(os.__file__).resolve().parent, (ROOT / "impls").resolve(), (ROOT / "harness").resolve())


def _generated_roots() -> list[Path]:
    """Where the libraries write the code they generate and import (Inductor's modules and shared
    objects, Triton's kernels): the suite's caches and the libraries' own defaults. Such code is
    made from code already covered (impls/, the distributions), so it is never a dependency of its
    own; a run may rewrite it at any moment."""
    import getpass
    import tempfile

    from harness.base import caches

    roots = [caches.cache_root(), caches.compile_cache_root(), Path.home() / ".triton",
             Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"]
    roots += [Path(os.environ[name]) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
                                                  "JAX_COMPILATION_CACHE_DIR", "NUMBA_CACHE_DIR")
              if os.environ.get(name)]
    return [root.expanduser().resolve() for root in roots]


def _left_out_file(path: Path) -> bool:
    if any(path.is_relative_to(root) for root in _generated_roots()):
        return True
    for root in _left_out():
        if path.is_relative_to(root):
            # a Python installed without a virtual environment keeps its packages inside its stdlib folder
            return not {"site-packages", "dist-packages"} & set(path.relative_to(root).parts)
    return False


@lru_cache(maxsize=1)
def _distributions_of() -> dict[str, list[str]]:
    """Top-level import name -> the distributions that provide it."""
    return importlib.metadata.packages_distributions()


@lru_cache(maxsize=None)
def _installed(name: str) -> tuple[Path, Path] | None:
    """(where distribution ``name`` was installed, its RECORD file); None without a RECORD."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return None
    root = Path(str(dist.locate_file(""))).resolve()
    info = getattr(dist, "_path", None)  # the .dist-info folder (PathDistribution)
    if info is None or not (Path(info) / "RECORD").is_file():
        return None
    return root, (Path(info) / "RECORD").resolve()


_NAMED: dict[tuple[str, str], tuple[str, Path] | None] = {}  # (module, file) -> (dependency, the file it reads)


def _dependency(name: str, file: str) -> tuple[str, Path] | None:
    if (name, file) in _NAMED:
        return _NAMED[(name, file)]
    found = None
    path = Path(file).resolve()
    if path.is_file() and not _left_out_file(path):
        found = (f"{FILE}{path}", path)
        for dist_name in _distributions_of().get(name.split(".")[0], ()):
            installed = _installed(dist_name)
            if installed is not None and path.is_relative_to(installed[0]):
                found = (f"{DIST}{dist_name}={installed[1]}", installed[1])
                break
    _NAMED[(name, file)] = found
    return found


_DIGESTS: dict[tuple, str] = {}  # (file, size, mtime) -> sha256 of its bytes


def _file_digest(path: Path) -> str | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None  # gone: whatever depended on it holds no more
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key in _DIGESTS:
        return _DIGESTS[key]
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
    # A file written in the last seconds may be written again within its clock's tick at the same
    # size: its digest is kept only once it is older than that (git's "racy" rule).
    if time.time_ns() - stat.st_mtime_ns > RACY_NS:
        _DIGESTS[key] = digest
    return digest


def loaded_code() -> dict[str, str]:
    """{dependency: digest} of every module this process has loaded (see the module's docstring)."""
    found = {}
    for name, module in list(sys.modules.items()):  # a copy: an import elsewhere may add to it meanwhile
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue  # built in, frozen, a namespace package, a notebook's cells
        dependency = _dependency(name, file)
        if dependency is not None and dependency[0] not in found:
            digest = _file_digest(dependency[1])
            if digest is not None:
                found[dependency[0]] = digest
    return found


def current_digest(dependency: str) -> str | None:
    """``dependency``'s digest now (None: it is gone), as ``loaded_code`` would give it."""
    if dependency.startswith(FILE):
        return _file_digest(Path(dependency[len(FILE):]))
    if not dependency.startswith(DIST):
        return None
    _name, is_at, record = dependency[len(DIST):].partition("=")
    return _file_digest(Path(record)) if is_at else None  # a name alone (a cache before 2026-12-05): stale


class StillHolds:
    """Whether recorded dependencies ({dependency: digest}) are unchanged, each dependency's current
    digest asked once however many verdicts name it (a file read, or its digest kept)."""

    def __init__(self):
        self._now: dict[str, str | None] = {}

    def __call__(self, depends: dict[str, str]) -> bool:
        for dependency, digest in depends.items():
            if dependency not in self._now:
                self._now[dependency] = current_digest(dependency)
            if self._now[dependency] != digest:
                return False
        return True
