"""The adversarial check's verdicts kept between runs of unchanged code, so a
second ``make bench`` costs little more than its timing.

A verdict (passed, or the first failure with its status and message) is kept
per strategy, device, dtype, training mode (docs/SPEC.md §1.5) and seed, in a file named by the digest of
what every verdict depends on (``fingerprint``): the source of every file
under impls/, of the judging code (harness/measuring/check.py), of each
loaded plugin (``plugins.recorded``), the libraries' versions, Python, the
CPU, and the thread counts in force. Each verdict also carries the code its
check ran (``harness.base.loaded_code``): every module loaded in the process
that checked it, read after the check, however and whenever it was imported
(a helper a plugin imports inside ``prepare``, a package installed by pip),
each by its digest. A verdict is used only while every one of them is
unchanged: a helper edited checks again, and so does its fix. Nothing is ever
invalidated by hand.

Only verdicts of code that fingerprint covers are kept: a strategy defined
elsewhere (a notebook's cell, a test's planted strategy) is checked every
run. Nor are ``error`` and ``timeout`` kept: they may be the machine's (out
of memory, a loaded machine), not the code's. A file that cannot be read is
ignored with one warning (harness/base/caches.py). The files live under
``caches.cache_root()/verdicts``; the newest ``KEEP_FILES`` are kept. Beside
each, the check's journal (``ItemJournal``) keeps every item's verdict, with
the same dependencies, so a cut check resumes.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable

from harness.base import caches, plugins
from harness.base.checkout import ROOT
from harness.base.loaded_code import StillHolds, loaded_code, tree_digest
from harness.measuring import check, facts
from impls.common import Verdict
from impls.status import ERROR, TIMEOUT

FOLDER = "verdicts"
KEEP_FILES = 16  # fingerprints kept (branches, plugin sets); the oldest go first
UNKEPT = (ERROR, TIMEOUT)  # may be the machine's doing: checked again every run
# 2: each verdict carries the code its check loaded (1 hashed the modules loaded when the run began)
FORMAT = 2


def merged(maps) -> dict[str, str] | None:
    """The dependencies of several checks together ({dependency: digest}); None where two
    recorded one dependency at different digests (the code changed between them: nothing holds)."""
    found: dict[str, str] = {}
    for depends in maps:
        for dependency, digest in depends.items():
            if found.setdefault(dependency, digest) != digest:
                return None
    return found


def fingerprint(threads: dict | None = None) -> dict:
    """What every kept verdict depends on besides its own key (see the module's docstring)."""
    from impls import backends

    return {"format": FORMAT,
            "impls": tree_digest(ROOT / "impls"),
            "check": plugins.sha256(check.__file__),
            "plugins": sorted((record["module"], record["sha256"]) for record in plugins.recorded()),
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
    ``AdversarialCheck`` the verdicts kept for the strategies of some cases
    whose code is unchanged; ``save`` keeps those it found itself, each with
    the code its check loaded."""

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

    def _read(self) -> dict[str, tuple[Verdict | None, dict[str, str]]]:
        """{key: (verdict, its dependencies)} of the verdicts kept whose code is unchanged."""
        data = caches.read_json(self.path, self.on_warning)
        if data is None:
            return {}
        if data.get("fingerprint") != json.loads(json.dumps(self.fingerprint)):
            self.on_warning(f"cache file {self.path} was written for other code or versions than its name says; "
                            f"ignored")
            return {}
        stored, table = data.get("verdicts"), data.get("depends")
        table = table if isinstance(table, dict) else {}
        unchanged, found, unread = StillHolds(), {}, 0
        for key, entry in (stored.items() if isinstance(stored, dict) else ()):
            try:
                depends = {dependency: table[dependency] for dependency in entry["depends"]}
                verdict = check.verdict_of_json(entry["verdict"])
            except (KeyError, TypeError, ValueError):
                unread += 1
                continue
            if unchanged(depends):  # else the code its check ran changed: checked again
                found[key] = (verdict, depends)
        if not isinstance(stored, dict) or unread:
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
                adversarial.remember(strat, device, dtype, kept[key][0], mode=mode, depends=kept[key][1])
                self.preloaded.add(key)
        return len(self.preloaded), len(keys)

    def save(self, adversarial: check.AdversarialCheck, cases) -> int:
        """Keeps every verdict ``adversarial`` reached itself for the cases'
        strategies (besides those preloaded and those ``UNKEPT``), each with
        the code its check loaded (a key checked in this process: what this
        process has loaded); returns how many. A key whose code changed since
        its check (the digest recorded then is not the file's now) is not kept."""
        new, here, unchanged = {}, None, StillHolds()
        for strat, device, dtype, mode in self.keys(cases):
            key = entry_key(strat, device, dtype, self.seed, mode)
            asked, failure = adversarial.known(strat, device, dtype, mode)
            if not asked or key in self.preloaded or not self.keeps(strat):
                continue
            if failure is not None and failure.status in UNKEPT:
                continue
            depends = adversarial.depends.get(adversarial.key(strat, device, dtype, mode))
            if depends is None:
                here = loaded_code() if here is None else here
                depends = here
            if unchanged(depends):
                new[key] = (failure, depends)
        if not new:
            return 0
        kept = {**self._read(), **new}
        table = {dependency: digest for _, depends in kept.values() for dependency, digest in depends.items()}
        verdicts = {key: {"verdict": check.verdict_json(verdict), "depends": sorted(depends)}
                    for key, (verdict, depends) in kept.items()}
        if caches.write_json(self.path, {"fingerprint": self.fingerprint, "depends": table, "verdicts": verdicts},
                             self.on_warning):
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


def _depends_id(depends: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(depends, sort_keys=True).encode()).hexdigest()[:16]


class ItemJournal:
    """Each check item's verdict, appended as each strategy key's items come
    back from the workers (and each item the check runs itself), beside the ``VerdictCache`` of the same
    fingerprint (the same code, libraries, machine and threads): a check cut
    midway (a lease's end, Ctrl-C, a KILL) resumes where it stopped, the same
    command again running only the keys not written whole. Kept like the
    verdicts: only strategies the fingerprint covers, never ``UNKEPT``
    verdicts (checked again), each with the code its check loaded (a line
    of its own, named by its digest, before the items that ran it), read back
    only while that code is unchanged. A line that does not read (a write cut
    by a KILL) is ignored."""

    def __init__(self, cache: VerdictCache):
        self.cache = cache
        self.path = cache.path.with_suffix(JOURNAL_SUFFIX)
        self._written: set[str] = set()  # dependency lines this journal has written

    def read(self, items) -> dict:
        """{item: CheckResult} of ``items`` the journal holds, whose code is unchanged."""
        wanted = {item_id(item, self.cache.seed): item for item in items if self.cache.keeps(item.strategy)}
        found = {}
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return found
        except (OSError, UnicodeDecodeError) as error:
            self.cache.on_warning(f"cache file {self.path} cannot be read ({error}); every item is checked again")
            return found
        entries, tables, unchanged = [], {}, StillHolds()
        for text in lines:
            try:
                entry = json.loads(text)
                if "depends_id" in entry:
                    tables[entry["depends_id"]] = dict(entry["depends"])
                else:
                    entries.append(entry)
            except (ValueError, KeyError, TypeError):
                continue
        holds = {depends_id: unchanged(depends) for depends_id, depends in tables.items()}
        for entry in entries:
            try:
                item = wanted.get(entry["item"])
                if item is None or not holds.get(entry["depends"], False):
                    continue
                verdict = check.verdict_of_json(entry["verdict"])
                if verdict is None or verdict.status in UNKEPT:
                    continue
                found[item] = check.CheckResult(item, verdict, float(entry["seconds"]),
                                                depends=tables[entry["depends"]])
            except (ValueError, KeyError, TypeError):
                continue
        return found

    def write(self, results) -> int:
        """Appends ``results`` (CheckResults: a key's, as they came back, or one item's), each with the
        code its check loaded (one run here: what this process has loaded), and flushes them to disk;
        returns how many lines. Those that may be the machine's doing (``UNKEPT``) are left out:
        checked again."""
        results = [r for r in results if self.cache.keeps(r.item.strategy) and r.verdict.status not in UNKEPT]
        if not results:
            return 0
        here, lines = None, []
        for r in results:
            if r.depends is None and here is None:
                here = loaded_code()
            depends = here if r.depends is None else r.depends
            depends_id = _depends_id(depends)
            if depends_id not in self._written:
                lines.append(json.dumps({"depends_id": depends_id, "depends": depends}, sort_keys=True))
                self._written.add(depends_id)
            lines.append(json.dumps({"item": item_id(r.item, self.cache.seed), "verdict": check.verdict_json(r.verdict),
                                     "seconds": round(r.seconds, 6), "depends": depends_id}))
        text = "".join(line + "\n" for line in lines)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a+b") as out:
                if out.seek(0, os.SEEK_END) and (out.seek(-1, os.SEEK_END), out.read(1))[1] != b"\n":
                    text = "\n" + text  # after a line a KILL tore: that one is left unread, not this
                out.write(text.encode())
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
    ran every one of its adversarial items, with the code all of them loaded.
    Returns how many."""
    adversarial = check.AdversarialCheck(cache.seed, timeout_s)
    adversarial.absorb(results)
    here, by_item = None, {r.item: r for r in results}
    for strat, device, dtype, mode in cache.keys(cases):
        if adversarial.covers(strat, device, dtype, mode):
            adversarial.failure(strat, device, dtype, mode)  # answered from the absorbed verdicts, nothing run
            maps = []
            for item in check.adversarial_items(strat, device, dtype, mode):
                if by_item[item].depends is None and here is None:
                    here = loaded_code()
                maps.append(here if by_item[item].depends is None else by_item[item].depends)
            depends = merged(maps)
            if depends is None:  # the code changed while the key was checked: not kept
                adversarial.forget(strat, device, dtype, mode)
            else:
                adversarial.depends[adversarial.key(strat, device, dtype, mode)] = depends
    return cache.save(adversarial, cases)
