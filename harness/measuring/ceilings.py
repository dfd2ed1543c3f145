"""The machine a sweep measures against: each device's copy ceiling and the
CPU's fresh-output write bandwidth, measured so that load cannot pass for a
slow machine, and reused by ``bench()`` for an hour.

``measure`` runs ``measure_here`` in a child process (its 256 MiB buffers
would raise glibc's mmap threshold in the measuring one, docs/TIMING.md):
``TRIES`` tries per device, ``TRY_GAP_S`` apart, each recorded with the
1-minute load it started under; the best is the ceiling. A device whose
every try started with the machine at capacity (``facts.at_capacity``: other
work competing for every core) is *busy*: its best may be other work's
share of the memory bus, not the machine's, so it is flagged and no row's
``floor_s`` or ``pct_of_ceiling`` uses it (one quiet try is enough: the best
is then at least what a quiet machine gave).

``measure_or_reuse`` (``bench()``) takes a quiet ceiling this machine measured
with the same thread settings less than ``REUSE_MAX_AGE_S`` ago from the
cache file (harness/base/caches.py) instead, and says so; a busy one is never
stored, so never reused.

What a run's meta.json holds of it (``Measured.meta``; harness/results/runmeta.py):
``ceilings_gbps`` (device -> the ceiling used, quiet devices only),
``ceiling_tries`` (device -> [{"gbps", "load"}, ...] in the order tried),
``ceiling_busy`` (device -> "load 3.4 on 2 cores": measured busy, not used)
``ceiling_reused_from`` (when the ceilings were measured, for ceilings
reused from an earlier measurement; None when measured by this run) and
``fresh_write_gbps`` (allocator -> the CPU's fresh-output write bandwidth,
measured, stored and reused with the CPU's ceiling; {} where not measured).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from harness.base import caches
from harness.measuring import facts, pinning, timing
from impls.backends import fresh_allocators

TRIES = 3  # tries per device; the best is kept
TRY_GAP_S = 0.5  # between tries, so that one burst of other work does not meet them all
TRY_REPEATS = 4  # copies per try, after its warm-up (the best of them is the try's)
REUSE_MAX_AGE_S = 3600.0  # how long bench() reuses a quiet ceiling of this machine
CACHE_FILE = "ceilings.json"


@dataclass
class Measured:
    """The machine as measured (or reused): per device its best copy
    bandwidth, its tries and, when busy, why."""
    best_gbps: dict[str, float]  # device -> best of its tries (busy devices included)
    tries: dict[str, list[dict]]  # device -> [{"gbps": float, "load": float | None}, ...]
    busy: dict[str, str] = field(default_factory=dict)  # device -> "load 3.4 on 2 cores"
    fresh_writes: dict[str, float] = field(default_factory=dict)  # allocator -> GB/s
    measured_at: str = ""  # ISO time of the measurement
    measured_epoch: float = math.nan
    reused_from: str | None = None  # measured_at of the measurement reused, or None

    @property
    def ceilings(self) -> dict[str, float]:
        """The ceilings to judge with: quiet devices only. A busy device is
        absent, so its rows' ``floor_s`` and ``pct_of_ceiling`` stay NaN."""
        return {device: gbps for device, gbps in self.best_gbps.items() if device not in self.busy}

    def meta(self) -> dict:
        """The fields meta.json records (see the module's docstring)."""
        return {"ceilings_gbps": self.ceilings, "ceiling_tries": self.tries, "ceiling_busy": self.busy,
                "ceiling_reused_from": self.reused_from, "fresh_write_gbps": self.fresh_writes}

    def lines(self) -> list[str]:
        """What a reader must be told: a busy ceiling, and a reused one."""
        said = []
        for device, reason in self.busy.items():
            said.append(f"{device} copy ceiling measured busy ({reason}; best of {len(self.tries.get(device, []))} "
                        f"tries {self.best_gbps.get(device, math.nan):.1f} GB/s): not used, so no floor and no "
                        f"% of ceiling for {device}")
        if self.reused_from:
            for device, gbps in self.ceilings.items():
                said.append(f"{device} copy ceiling reused from {self.reused_from}, measured at load "
                            f"{_load_text(best_try(self.tries.get(device, [])))}: {gbps:.1f} GB/s "
                            f"(reused for up to {REUSE_MAX_AGE_S / 3600:g} h on this machine)")
        return said


def meta_after(meta: dict, measured: Measured) -> dict:
    """meta.json's ceiling fields once ``measured`` is in: the devices it
    measured take its values (a resumed run's earlier ones go, a busy device
    leaves ``ceilings_gbps``), the others keep theirs; its fresh-write
    bandwidths, when it measured any."""
    def earlier(name: str) -> dict:
        found = meta.get(name)
        return {device: value for device, value in (found.items() if isinstance(found, dict) else ())
                if device not in measured.tries}

    return {"ceilings_gbps": {**earlier("ceilings_gbps"), **measured.ceilings},
            "ceiling_tries": {**earlier("ceiling_tries"), **measured.tries},
            "ceiling_busy": {**earlier("ceiling_busy"), **measured.busy},
            "ceiling_reused_from": measured.reused_from,
            "fresh_write_gbps": measured.fresh_writes or meta.get("fresh_write_gbps") or {}}


def best_try(tries: list[dict]) -> dict:
    """The try a ceiling is (the fastest); {} when none ran."""
    finite = [one for one in tries if isinstance(one.get("gbps"), (int, float)) and math.isfinite(one["gbps"])]
    return max(finite, key=lambda one: one["gbps"], default={})


def _load_text(one: dict) -> str:
    load = one.get("load")
    return "unknown" if load is None or not math.isfinite(load) else f"{load:.2f}"


def busy_reason(tries: list[dict], cores: int | None) -> str | None:
    """"load X on N cores" when every try started with the machine at
    capacity (X: the lowest load any try saw), else None."""
    loads = [one.get("load") for one in tries]
    if not tries or not all(facts.at_capacity(load, cores) for load in loads):
        return None
    return f"load {min(loads):.2g} on {cores} cores"


def judged(answer: dict) -> Measured:
    """The child's answer (``measure_here``) with each device's best and busy flag."""
    tries, cores = answer["tries"], answer.get("cores")
    best = {device: best_try(found).get("gbps", math.nan) for device, found in tries.items()}
    busy = {device: reason for device, found in tries.items() if (reason := busy_reason(found, cores))}
    return Measured(best, tries, busy, answer.get("fresh_writes", {}), answer.get("measured_at", ""),
                    answer.get("measured_epoch", math.nan))


def _load_now() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def measure_here(request: dict) -> dict:
    """In the measuring child: ``TRIES`` rounds over the devices, each try's
    load read just before it (its own copies then weigh least in it), then
    the fresh-write bandwidth per allocator when the CPU is used and asked."""
    pinning.apply_threads(request["threads"])
    devices = request["devices"]
    started = time.time()
    tries: dict[str, list[dict]] = {device: [] for device in devices}
    for round_index in range(TRIES):
        if round_index:
            time.sleep(TRY_GAP_S)
        for device in devices:
            load = _load_now()
            tries[device].append({"gbps": timing.copy_ceiling_gbps(device, repeats=TRY_REPEATS), "load": load})
    fresh = ({allocator: timing.fresh_write_gbps(allocator) for allocator in fresh_allocators()}
             if request.get("fresh", True) and "cpu" in devices else {})
    return {"tries": tries, "fresh_writes": fresh, "cores": os.cpu_count(), "measured_epoch": started,
            "measured_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds")}


_CHILD = ("import json, sys\n"
          "from harness.base.plugins import load_plugins\n"
          "load_plugins()  # a plugin's backend copies for the ceiling too\n"
          "from harness.measuring import ceilings\n"
          "request = json.loads(sys.stdin.read())\n"
          "print(json.dumps(ceilings.measure_here(request)))\n")


def measure(devices, threads=None, fresh: bool = True) -> Measured:
    """Each device's copy ceiling and, with ``fresh`` and the CPU among the
    devices, the fresh-output write bandwidth per allocator, measured in a
    child process (see the module's docstring)."""
    devices = sorted(set(devices))
    if not devices:
        return Measured({}, {}, measured_at=facts.now_iso(), measured_epoch=time.time())
    request = {"devices": devices, "threads": dict(threads or {}), "fresh": fresh}
    child = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(request), capture_output=True,
                           text=True, timeout=600)
    if child.returncode != 0:
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"measuring the copy ceiling failed: {tail}")
    return judged(json.loads(child.stdout.strip().splitlines()[-1]))


# ------------------------------------------------------------------ reuse
def machine_key(threads=None) -> str:
    """What a reused ceiling must have been measured under: this host and
    hardware (CPU model, family-model, cores, caches, memory, GPU) and the
    same thread settings."""
    identity = {"machine": facts.machine_name(), "hardware": facts.hardware(), "threads": dict(threads or {})}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _cache_path():
    return caches.cache_root() / CACHE_FILE


def _well_formed(entry) -> bool:
    try:
        gbps, epoch = float(entry["gbps"]), float(entry["measured_epoch"])
    except (KeyError, TypeError, ValueError):
        return False
    return (math.isfinite(gbps) and gbps > 0 and math.isfinite(epoch) and isinstance(entry.get("tries"), list)
            and isinstance(entry.get("measured_at"), str))


def _usable_entry(entry, now: float, max_age_s: float) -> bool:
    return _well_formed(entry) and 0 <= now - float(entry["measured_epoch"]) <= max_age_s


def _fresh_writes(entry) -> dict[str, float]:
    """A stored CPU entry's fresh-write bandwidths per allocator ({} where it has none)."""
    found = entry.get("fresh_writes") if isinstance(entry, dict) else None
    return {str(name): float(gbps) for name, gbps in (found.items() if isinstance(found, dict) else ())
            if isinstance(gbps, (int, float)) and math.isfinite(gbps) and gbps > 0}


def reuse(devices, threads=None, *, fresh: bool = False, max_age_s: float = REUSE_MAX_AGE_S,
          now: Callable[[], float] = time.time, on_warning: Callable[[str], None] = caches.warn) -> Measured | None:
    """The quiet ceilings of ``devices`` this machine measured under the same
    threads within ``max_age_s``, or None when any device has none; with
    ``fresh``, the CPU's fresh-write bandwidths measured with its ceiling
    too (None when they were not)."""
    devices = sorted(set(devices))
    data = caches.read_json(_cache_path(), on_warning)
    if data is None or not devices:
        return None
    stored = data.get("machines")
    if not isinstance(stored, dict):
        on_warning(f"cache file {_cache_path()} holds no machines' ceilings; ignored, and replaced when written again")
        return None
    entries = stored.get(machine_key(threads))
    if entries is None:
        return None
    malformed = [device for device, entry in (entries.items() if isinstance(entries, dict) else [("all", None)])
                 if not _well_formed(entry)]
    if malformed:
        on_warning(f"cache file {_cache_path()}: this machine's ceiling of {', '.join(malformed)} is not a "
                   f"ceiling; measured again")
        return None
    moment = now()
    if not all(_usable_entry(entries.get(device), moment, max_age_s) for device in devices):
        return None
    fresh_writes = _fresh_writes(entries.get("cpu")) if fresh and "cpu" in devices else {}
    if fresh and "cpu" in devices and not fresh_writes:
        return None
    chosen = {device: entries[device] for device in devices}
    oldest = min(chosen.values(), key=lambda entry: float(entry["measured_epoch"]))
    return Measured({device: float(entry["gbps"]) for device, entry in chosen.items()},
                    {device: entry["tries"] for device, entry in chosen.items()}, fresh_writes=fresh_writes,
                    measured_at=oldest["measured_at"], measured_epoch=float(oldest["measured_epoch"]),
                    reused_from=oldest["measured_at"])


def remember(measured: Measured, threads=None, *, max_age_s: float = REUSE_MAX_AGE_S,
             on_warning: Callable[[str], None] = caches.warn) -> None:
    """Stores ``measured``'s quiet ceilings for ``reuse`` (busy ones never;
    a reused measurement is not stored again, so its age stays its own);
    entries past ``max_age_s`` are dropped."""
    if measured.reused_from or not measured.ceilings or not math.isfinite(measured.measured_epoch):
        return
    path = _cache_path()
    data = caches.read_json(path, on_warning) or {}
    machines = data.get("machines") if isinstance(data.get("machines"), dict) else {}
    key = machine_key(threads)
    entries = machines.get(key) if isinstance(machines.get(key), dict) else {}
    for device, gbps in measured.ceilings.items():
        if math.isfinite(gbps) and gbps > 0:
            entries[device] = {"gbps": gbps, "tries": measured.tries.get(device, []),
                               "measured_at": measured.measured_at, "measured_epoch": measured.measured_epoch}
            if device == "cpu" and measured.fresh_writes:  # measured with it: as quiet, as old
                entries[device]["fresh_writes"] = dict(measured.fresh_writes)
    machines[key] = entries
    moment = time.time()
    machines = {name: {device: entry for device, entry in found.items()
                       if _usable_entry(entry, moment, max_age_s)}
                for name, found in machines.items() if isinstance(found, dict)}
    caches.write_json(path, {"machines": {name: found for name, found in machines.items() if found}}, on_warning)


def measure_or_reuse(devices, threads=None, *, fresh: bool = False, max_age_s: float = REUSE_MAX_AGE_S,
                     on_warning: Callable[[str], None] = caches.warn) -> Measured:
    """``reuse``'s ceilings when every device has a recent quiet one (and,
    with ``fresh``, the CPU's fresh-write bandwidths measured with it: what
    ``bench()``'s CPU rows' fresh-output floor needs), else ``measure`` them
    now and ``remember`` them."""
    devices = sorted(set(devices))  # read twice below: a generator would be empty the second time
    said: set[str] = set()

    def once(text: str) -> None:  # a file read twice (reuse, then remember) is warned of once
        if text not in said:
            said.add(text)
            on_warning(text)

    found = reuse(devices, threads, fresh=fresh, max_age_s=max_age_s, on_warning=once)
    if found is not None:
        return found
    measured = measure(devices, threads, fresh=fresh)
    remember(measured, threads, max_age_s=max_age_s, on_warning=once)
    return measured
