"""The adversarial check's verdicts kept between runs of unchanged code, so a
second ``make bench`` costs little more than its timing.

A verdict (passed, or the first failure with its status and message) is kept
per strategy, device, dtype, training mode (docs/SPEC.md §1.5) and seed, in a file named by the digest of
everything else it depends on (``fingerprint``): the source of every file
under impls/, of the judging code (harness/measuring/check.py), of each
loaded plugin (``plugins.recorded``) and of every other module loaded from
outside the standard library, the installed packages and the harness
(``loaded_modules``: a helper module a plugin imports, living beside it), the
libraries' versions, Python, the CPU, and the thread counts in force. Any
change there names another file, so the strategies are checked again;
nothing is ever invalidated by hand.

Only verdicts of code that fingerprint covers are kept: a strategy defined
elsewhere (a notebook's cell, a test's planted strategy) is checked every
run. Nor are ``error`` and ``timeout`` kept: they may be the machine's (out
of memory, a loaded machine), not the code's. A file that cannot be read is
ignored with one warning (harness/base/caches.py). The files live under
``caches.cache_root()/verdicts``; the newest ``KEEP_FILES`` are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import sys
import sysconfig
from pathlib import Path
from typing import Callable

from harness.base import caches, plugins
from harness.base.checkout import ROOT
from harness.measuring import check, facts
from impls.common import Verdict
from impls.status import ERROR, STATUSES, TIMEOUT

FOLDER = "verdicts"
KEEP_FILES = 16  # fingerprints kept (branches, plugin sets); the oldest go first
UNKEPT = (ERROR, TIMEOUT)  # may be the machine's doing: checked again every run


def tree_digest(folder: Path) -> str:
    """sha256 over the relative path and bytes of every .py file under ``folder``."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _installed_roots() -> list[Path]:
    """Where the standard library and the installed packages live (the
    fingerprint's ``python`` and ``versions`` stand for their code), and the
    virtual environment's own folder."""
    paths = sysconfig.get_paths()
    roots = [paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if paths.get(key)]
    roots += list(getattr(site, "getsitepackages", list)()) + [site.getusersitepackages()]
    if sys.prefix != sys.base_prefix:  # a virtual environment: everything under it was installed
        roots.append(sys.prefix)
    return [Path(root).resolve() for root in roots]


def loaded_modules() -> list[tuple[str, Path]]:
    """(name, file) of every module in sys.modules loaded from a file outside
    the standard library, the installed packages, the virtual environment and
    the harness, by name: the plugins, what they import beside them, a
    script's own code. impls/ is left to ``tree_digest`` (all of it, loaded or
    not) and the harness to ``check``'s own hash (its other code judges nothing)."""
    skipped = _installed_roots() + [(ROOT / "impls").resolve(), (ROOT / "harness").resolve()]
    found = {}
    for name, module in list(sys.modules.items()):  # a copy: an import elsewhere may add to it meanwhile
        file = getattr(module, "__file__", None)
        if not isinstance(file, str):
            continue  # built in, frozen, a namespace package, a notebook's cells
        path = Path(file).resolve()
        if path.is_file() and not any(path.is_relative_to(root) for root in skipped):
            found[name] = path
    return sorted(found.items())


def fingerprint(threads: dict | None = None) -> dict:
    """What every kept verdict depends on besides its own key (see the module's docstring)."""
    from impls import backends

    return {"impls": tree_digest(ROOT / "impls"),
            "check": plugins.sha256(check.__file__),
            "plugins": sorted((record["module"], record["sha256"]) for record in plugins.recorded()),
            "modules": [(name, plugins.sha256(path)) for name, path in loaded_modules()],
            "versions": backends.versions(),
            "python": sys.version.split()[0],
            "cpu": [facts.cpu_model(), facts.cpu_family_model()],
            "threads": {str(name): count for name, count in (threads or {}).items()}}


def covered_files() -> set[Path]:
    """The strategy files ``fingerprint`` hashes: impls/ and the plugins' files."""
    files = {path.resolve() for path in (ROOT / "impls").rglob("*.py")}
    files |= {Path(record["file"]).resolve() for record in plugins.recorded() if record.get("file")}
    return files


def entry_key(strat, device: str, dtype: str, seed: int, mode: str = check.FORWARD) -> str:
    """A verdict's key: a strategy's forward and its backward modes are
    checked (and may fail) apart."""
    return "|".join((strat.op, strat.name, device, dtype, mode, str(seed)))


def line(from_cache: int, asked: int, path: Path) -> str:
    """What a run says of the cache before it starts."""
    if not asked:
        return "adversarial check: nothing to check"
    return (f"adversarial check: {from_cache} of {asked} verdicts from the cache (same code, plugins, versions "
            f"and seed: {path}), {asked - from_cache} to check")


class VerdictCache:
    """The kept verdicts of one fingerprint. ``preload`` gives an
    ``AdversarialCheck`` the verdicts kept for the strategies of some cases;
    ``save`` keeps those it found itself."""

    def __init__(self, seed: int, threads: dict | None = None, folder: Path | None = None,
                 on_warning: Callable[[str], None] = caches.warn):
        self.seed, self.on_warning = seed, on_warning
        self.fingerprint = fingerprint(threads)
        digest = hashlib.sha256(json.dumps(self.fingerprint, sort_keys=True).encode()).hexdigest()[:32]
        self.path = Path(folder if folder is not None else caches.cache_root() / FOLDER) / f"{digest}.json"
        self._covered = covered_files()
        self.preloaded: set[str] = set()

    def keeps(self, strat) -> bool:
        """Whether ``strat``'s code is covered by the fingerprint."""
        file = check.strategy_file(strat)
        return file is not None and Path(file).resolve() in self._covered

    def _read(self) -> dict[str, Verdict | None]:
        data = caches.read_json(self.path, self.on_warning)
        if data is None:
            return {}
        if data.get("fingerprint") != json.loads(json.dumps(self.fingerprint)):
            self.on_warning(f"cache file {self.path} was written for other code or versions than its name says; "
                            f"ignored")
            return {}
        found, stored = {}, data.get("verdicts")
        for key, value in (stored.items() if isinstance(stored, dict) else ()):
            if value is None:
                found[key] = None
            elif isinstance(value, dict) and value.get("status") in STATUSES and isinstance(value.get("message"), str):
                found[key] = Verdict(value["status"], value["message"])
        if not isinstance(stored, dict) or len(found) < len(stored):
            self.on_warning(f"cache file {self.path}: {'its verdicts are' if not isinstance(stored, dict) else 'some verdicts are'} "
                            f"not verdicts; those are checked again")
        return found

    @staticmethod
    def keys(cases) -> list[tuple]:
        """Each (strategy, device, dtype, training mode) the cases' adversarial check asks about, once."""
        from impls.registry import get_operator

        keys = {}
        for case in cases:
            strat = get_operator(case.op).strategies[case.strategy]
            if not strat.interpreted_on(case.device):  # the sweep never asks these (sweep.execute_case)
                mode = getattr(case, "mode", check.FORWARD)
                keys[(case.op, case.strategy, case.device, case.dtype, mode)] = (strat, case.device, case.dtype, mode)
        return list(keys.values())

    def preload(self, adversarial: check.AdversarialCheck, cases) -> tuple[int, int]:
        """Tells ``adversarial`` each kept verdict of the cases' strategies.
        Returns (verdicts from the cache, strategy keys the cases ask about)."""
        kept = self._read()
        keys = self.keys(cases)
        for strat, device, dtype, mode in keys:
            key = entry_key(strat, device, dtype, self.seed, mode)
            if key in kept and self.keeps(strat):
                adversarial.remember(strat, device, dtype, kept[key], mode=mode)
                self.preloaded.add(key)
        return len(self.preloaded), len(keys)

    def save(self, adversarial: check.AdversarialCheck, cases) -> int:
        """Keeps every verdict ``adversarial`` reached itself for the cases'
        strategies (besides those preloaded and those ``UNKEPT``); returns how many."""
        new = {}
        for strat, device, dtype, mode in self.keys(cases):
            key = entry_key(strat, device, dtype, self.seed, mode)
            asked, failure = adversarial.known(strat, device, dtype, mode)
            if not asked or key in self.preloaded or not self.keeps(strat):
                continue
            if failure is not None and failure.status in UNKEPT:
                continue
            new[key] = None if failure is None else {"status": failure.status, "message": failure.message}
        if not new:
            return 0
        kept = {key: None if verdict is None else {"status": verdict.status, "message": verdict.message}
                for key, verdict in self._read().items()}
        kept.update(new)
        if caches.write_json(self.path, {"fingerprint": self.fingerprint, "verdicts": kept}, self.on_warning):
            self._prune()
        return len(new)

    def _prune(self) -> None:
        """The newest ``KEEP_FILES`` fingerprints' files stay; the others go (their item journals too)."""
        for pattern in ("*.json", "*" + JOURNAL_SUFFIX):
            try:
                files = sorted(self.path.parent.glob(pattern), key=lambda path: path.stat().st_mtime, reverse=True)
                for old in files[KEEP_FILES:]:
                    old.unlink(missing_ok=True)
            except OSError:
                pass  # another run pruned at the same moment; the next save prunes again


JOURNAL_SUFFIX = ".items.jsonl"


def item_id(item: check.CheckItem, seed: int) -> str:
    """A check item's identity in the journal: everything that decides its verdict."""
    return json.dumps([item.strategy.key, [list(pair) for pair in item.params], item.dtype, item.device, item.mode,
                       item.layout, item.training, bool(item.gradcheck), item.skip or "", seed])


class ItemJournal:
    """Each check item's verdict, appended as each strategy key's items come
    back from the workers (and each item the check runs itself), beside the ``VerdictCache`` of the same
    fingerprint (the same code, libraries, machine and threads): a check cut
    midway (a lease's end, Ctrl-C, a KILL) resumes where it stopped, the same
    command again running only the keys not written whole. Kept like the
    verdicts: only strategies the fingerprint covers, never ``UNKEPT``
    verdicts (checked again). A line that does not read (a write cut by a
    KILL) is ignored."""

    def __init__(self, cache: VerdictCache):
        self.cache = cache
        self.path = cache.path.with_suffix(JOURNAL_SUFFIX)

    def read(self, items) -> dict:
        """{item: CheckResult} of ``items`` the journal holds."""
        wanted = {item_id(item, self.cache.seed): item for item in items if self.cache.keeps(item.strategy)}
        found = {}
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return found
        except (OSError, UnicodeDecodeError) as error:
            self.cache.on_warning(f"cache file {self.path} cannot be read ({error}); every item is checked again")
            return found
        for text in lines:
            try:
                entry = json.loads(text)
                item = wanted.get(entry["item"])
                if item is None or entry["status"] not in STATUSES or entry["status"] in UNKEPT:
                    continue
                verdict = Verdict(entry["status"], entry["message"], max_abs_err=float(entry["max_abs_err"]),
                                  rel_err=float(entry["rel_err"]), differences=frozenset(entry["differences"]))
                found[item] = check.CheckResult(item, verdict, float(entry["seconds"]))
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def write(self, results) -> int:
        """Appends ``results`` (CheckResults: a key's, as they came back, or one item's) and flushes them
        to disk; returns how many lines. Those that may be the machine's doing (``UNKEPT``) are left
        out: checked again."""
        results = [r for r in results if self.cache.keeps(r.item.strategy) and r.verdict.status not in UNKEPT]
        if not results:
            return 0
        lines = "".join(json.dumps({"item": item_id(r.item, self.cache.seed), "status": r.verdict.status,
                                    "message": r.verdict.message, "max_abs_err": r.verdict.max_abs_err,
                                    "rel_err": r.verdict.rel_err, "differences": sorted(r.verdict.differences),
                                    "seconds": round(r.seconds, 6)}) + "\n" for r in results)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as out:
                if out.seek(0, os.SEEK_END) and (out.seek(-1, os.SEEK_END), out.read(1))[1] != b"\n":
                    lines = "\n" + lines  # after a line a KILL tore: that one is left unread, not this
                out.write(lines.encode())
                out.flush()
                os.fsync(out.fileno())
        except OSError as error:
            self.cache.on_warning(f"cache file {self.path} cannot be written ({error.strerror or error}); a cut "
                                  f"check starts those keys again")
            return 0
        return len(results)


def keep_from_check(cache: VerdictCache, results, cases, timeout_s: float | None = None) -> int:
    """Keeps in ``cache`` (made when the check started: its fingerprint is of
    the code the check ran, not of a checkout changed meanwhile) the
    adversarial verdicts a ``check`` of ``cases`` reached (``results``), for
    a run of the same code, seed and threads: ``make gpu`` checks, then runs,
    and the run's adversarial phase (compiling every strategy at every
    adversarial shape) then costs nothing. A key is kept only when the check
    ran every one of its adversarial items. Returns how many."""
    adversarial = check.AdversarialCheck(cache.seed, timeout_s)
    adversarial.absorb(results)
    for strat, device, dtype, mode in cache.keys(cases):
        if adversarial.covers(strat, device, dtype, mode):
            adversarial.failure(strat, device, dtype, mode)  # answered from the absorbed verdicts, nothing run
    return cache.save(adversarial, cases)
