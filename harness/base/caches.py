"""Where the suite keeps what a later run may reuse, and how it reads and
writes it: the copy ceiling ``bench()`` reuses for an hour and the
bandwidth curves ``run`` and ``bench()`` reuse for a day (``ceilings.json``
and ``bandwidth_curves.json``, per machine and thread setting:
harness/measuring/ceilings.py), the adversarial verdicts of unchanged code
(harness/measuring/verdict_cache.py) and the libraries' own compile caches
(``Backend.compile_cache``, impls/backends.py).

The folder is ``$SCATTERBENCH_CACHE_DIR``, else ``$XDG_CACHE_HOME/scatterbench``,
else ``~/.cache/scatterbench`` (the compile caches in its ``compile`` folder
unless ``$SCATTERBENCH_COMPILE_CACHE_DIR`` names another); ``scatterbench
cache clear`` (``make clean-cache``) removes both (``clear``). Everything in
it is keyed by what it depends on (code, library versions, machine), so a
stale entry is never used, only left for the cleaner. A file that cannot be
read (cut off, hand-edited, from another version) is ignored with a
``CacheWarning`` and measured or checked again: a cache never stops a run.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable

from harness.base.errors import CacheWarning, UsageError

ENV = "SCATTERBENCH_CACHE_DIR"
COMPILE_ENV = "SCATTERBENCH_COMPILE_CACHE_DIR"  # the compile caches elsewhere (the test suite shares one)


def cache_root() -> Path:
    """The folder every cache of the suite lives under (not created here)."""
    chosen = os.environ.get(ENV)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "scatterbench"


def compile_cache_root() -> Path:
    """The folder of the libraries' compile caches: ``$SCATTERBENCH_COMPILE_CACHE_DIR``,
    else ``cache_root()/compile``."""
    chosen = os.environ.get(COMPILE_ENV)
    return Path(chosen).expanduser() if chosen else cache_root() / "compile"


def clear() -> dict[Path, bool]:
    """Removes ``cache_root()`` and ``compile_cache_root()`` whole; returns each folder and whether
    it was there. A folder that holds the home directory or this checkout is refused, never
    removed: a cache variable set to one by mistake."""
    from harness.base.checkout import ROOT

    folders = list(dict.fromkeys(path.resolve() for path in (cache_root(), compile_cache_root())))
    for folder in folders:
        for kept in (Path.home(), ROOT):
            if kept.resolve().is_relative_to(folder):
                raise UsageError(f"{folder}: holds {kept}, not a cache folder to remove (check ${ENV} and "
                                 f"${COMPILE_ENV})")
    found = {folder: folder.exists() for folder in folders}
    for folder in folders:
        if folder.exists():  # the compile folder may have gone with the cache folder holding it
            shutil.rmtree(folder)
    return found


def warn(text: str) -> None:
    """The default way a cache says it ignored something: a ``CacheWarning``."""
    warnings.warn(text, CacheWarning, stacklevel=3)


def read_json(path: Path, on_warning: Callable[[str], None] = warn) -> dict | None:
    """The JSON object in ``path``; None when there is none, or (with one
    line to ``on_warning``) when it cannot be read as one."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as error:
        on_warning(f"cache file {path} cannot be read ({type(error).__name__}: {error}); ignored")
        return None
    try:
        data = json.loads(text)
    except ValueError as error:
        on_warning(f"cache file {path} is not valid JSON ({error}); ignored, and replaced when written again")
        return None
    if not isinstance(data, dict):
        on_warning(f"cache file {path} holds a {type(data).__name__}, not an object; ignored, and replaced "
                   f"when written again")
        return None
    return data


def write_json(path: Path, data: dict, on_warning: Callable[[str], None] = warn) -> bool:
    """Writes ``data`` to ``path`` whole or not at all (a temporary file
    renamed over it: two runs writing at once leave one of the two
    complete); a folder that cannot be written is one line to
    ``on_warning``, not an error. Returns whether it was written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(handle, "w") as out:
                json.dump(data, out, indent=1, sort_keys=True)
            os.replace(temporary, path)
        finally:
            Path(temporary).unlink(missing_ok=True)
    except OSError as error:
        on_warning(f"cache file {path} cannot be written ({error.strerror or error}); the next run "
                   f"measures or checks again")
        return False
    return True


def enable_compile_caches() -> dict[str, str]:
    """Every installed backend's own compile cache (``Backend.compile_cache``)
    under ``compile_cache_root()/<backend>``, for this process and the ones
    it starts; returns backend -> folder. The libraries key their entries
    by their versions and the code compiled, so nothing stale is loaded."""
    from impls.backends import BACKENDS

    folders = {}
    for backend in BACKENDS.values():
        if backend.compile_cache is not None and not backend.unavailable():
            folders[backend.name] = str(compile_cache_root() / backend.name)
            backend.compile_cache(folders[backend.name])
    return folders
