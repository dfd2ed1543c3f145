"""The machine a sweep measures against: each device's copy ceiling, the
CPU's fresh-output write bandwidth and each device's bandwidth curves by
size (the cache-aware roofline, harness/results/floors.py), measured so that
load cannot pass for a slow machine; ``bench()`` reuses the ceilings for an
hour, and ``run`` and ``bench()`` reuse the curves for a day.

``measure`` runs ``measure_here`` in a child process (its 256 MiB buffers
would raise glibc's mmap threshold in the measuring one, docs/TIMING.md):
``TRIES`` tries per device, ``TRY_GAP_S`` apart, each recorded with the
1-minute load it started under; the median is the ceiling (the luckiest try
would price a whole run's rows by one lucky moment).
A device whose tries started, half or more of them, with the machine at
capacity (``facts.at_capacity``: other work competing for every core) is
*busy*: its median may be other work's share of the memory bus, not the
machine's, so it is flagged and no row's ``floor_s`` or ``pct_of_ceiling``
uses it. The same rule refuses a curve measured busy.

The curves (``measure_curves_here``): per device, ``CURVE_POINTS`` sizes
from ``CURVE_MIN_BYTES`` to ``CURVE_LLC_MULTIPLE`` times the last-level cache
(the GPU's L2), at each the fastest of ``CURVE_TRIES`` tries (each the
fastest of ``CURVE_PLACEMENTS`` places in the try's buffer) of reading a
buffer, writing into it again (on the CPU, each the fastest of torch's,
numpy's and a numba loop's: an upper bound), and (CPU) allocating one afresh
from each allocator and writing it. A small size is read or written many times in one
timed sample, so that a call's fixed cost does not pass for bandwidth. They
are kept per machine and thread setting in the cache (``CURVES_FILE``) for
``CURVES_REUSE_MAX_AGE_S``, and a run says whether it measured or reused
them (``Measured.lines``); deleting the file (or ``make clean-cache``)
measures them again.

``measure_or_reuse`` (``bench()``) takes a quiet ceiling this machine measured
with the same thread settings less than ``REUSE_MAX_AGE_S`` ago from the
cache file (harness/base/caches.py) instead, and says so; a busy one is never
stored, so never reused.

What a run's meta.json holds of it (``Measured.meta``; harness/results/runmeta.py):
``ceilings_gbps`` (device -> the ceiling used, quiet devices only),
``ceiling_tries`` (device -> [{"gbps", "load"}, ...] in the order tried),
``ceiling_busy`` (device -> "load 3.4 on 2 cores": measured busy, not used)
``ceiling_reused_from`` (when the ceilings were measured, for ceilings
reused from an earlier measurement; None when measured by this run),
``fresh_write_gbps`` (allocator -> the CPU's fresh-output write bandwidth,
measured, stored and reused with the CPU's ceiling; {} where not measured),
``bandwidth_curves`` (device -> its curves, each with the loads its tries
saw, when it was measured and ``busy`` where refused) and
``bandwidth_curves_reused`` (device -> when the curves reused from the cache
were measured; absent for curves this run measured).
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
from harness.base.format import fmt_bytes
from harness.measuring import facts, pinning, timing
from harness.results.floors import CURVE_METHOD, CURVES
from impls.backends import fresh_allocators, torch_device

TRIES = 3  # tries per device; the median is kept
TRY_GAP_S = 0.5  # between tries, so that one burst of other work does not meet them all
TRY_REPEATS = 4  # copies per try, after its warm-up (the best of them is the try's)
REUSE_MAX_AGE_S = 3600.0  # how long bench() reuses a quiet ceiling of this machine
CACHE_FILE = "ceilings.json"

# The bandwidth curves (the module's docstring).
CURVE_POINTS = 12
CURVE_MIN_BYTES = 4 << 10
CURVE_LLC_MULTIPLE = 4  # the largest size: this many times the last-level cache, within the two bounds below
CURVE_TOP_MIN_BYTES = 64 << 20
CURVE_TOP_MAX_BYTES = 256 << 20
# Per size and curve; the fastest is kept. A curve bounds what the machine can do, and the median of
# tries is pulled down by neighbours sharing the caches, most at a cache's edge, where the rate is
# bimodal: 20 tries at 1.66 MiB read 63-127 GB/s (the Xeon 6-167 VM, 1 thread, an L2 of 2 MiB). In four
# groups of 5 tries the fastest agreed within ±5.6 % (read) and ±7.9 % (write) at every size; the
# median strayed ±12.7 % and ±22 %.
CURVE_TRIES = 5
HUGE_PAGE_BYTES = 2 << 20  # a transparent huge page on x86-64 and on arm64 with 4 KiB base pages
# Per try and size, the size is measured at this many places in the try's buffer, each starting on
# a huge page of its own; the fastest place is the try's. In a VM a guest's huge page need not be
# contiguous in the host's memory, so where a buffer sits in a cache (which of its sets it fills)
# depends on which pages it is: on the Xeon 6-167 VM (1 thread, an L2 of 2 MiB) the numba loop read a
# 1.66 MiB buffer at 46-152 GB/s at 32 places of one buffer, and the fastest of the 32 was 151, 151
# and 152 GB/s in three processes (write 59, 59, 59); the buffer's first place alone, what method 4
# measured, gave 81-112 GB/s in four runs.
CURVE_PLACEMENTS = 8
# Untimed calls of a place's first kernel before its timed ones (each moves at least CURVE_PASS_BYTES):
# a point is the rate of a working set as a case's samples in a timing loop find it, and a region
# new to the core is slow for its first passes, not its first only: on the Xeon 6-167 VM the numba
# loop read 4.5 MiB at 13.9, 20.2 and 28.4 GB/s in its first three passes, then 28 (at 12.4 MiB a
# write into a place warmed by one pass gave 21 GB/s, after three 29).
CURVE_WARM_CALLS = 3
# Timed samples per kernel and place, the fastest kept: a kernel's first call after another kernel's
# is slower (at 1.66 MiB on the Xeon 6-167 VM, right after numpy's sum, the numba loop read 62-94
# GB/s in its first call at eight places, 92-129 in its second).
CURVE_PLACE_SAMPLES = 2
# Each timed sample moves at least this many bytes: a 4 KiB buffer is read 2048 times in
# one torch.sum, written 2048 times in a loop, so the call's fixed cost is spread thin.
CURVE_PASS_BYTES = 8 << 20
# Up to this size numpy's fill (the cheapest call there is) writes beside torch's fill_
# (which uses torch's threads): the faster of the two is the write rate.
CURVE_SMALL_WRITE_BYTES = 1 << 20
# The largest fresh output a long-running process's C heap may carve from pages it already holds:
# glibc raises its mmap threshold to the size of a mapped block freed, up to 32 MiB on 64-bit
# (mallopt(3), DEFAULT_MMAP_THRESHOLD_MAX), and then keeps up to twice that free at the heap's top.
# Measured on the 25-17 VM: after blocks of 16 MiB were touched and freed, a 48 or 60 MiB np.empty
# lay in [heap] and was written at 31 GB/s, a new mapping's at 9.4; at 100 and 128 MiB it was a new
# mapping either way. A sweep's 51 MB unpool outputs ran at 2.2x a new mapping's floor. Up to this
# size the fresh-write bound is the faster of the two: a fresh write timed as the heap is found,
# and a write into a buffer already touched.
HEAP_HOLDS_BYTES = 2 * (32 << 20)
CURVES_REUSE_MAX_AGE_S = 86400.0  # a machine's caches and memory do not change within a day
CURVES_FILE = "bandwidth_curves.json"


@dataclass
class Measured:
    """The machine as measured (or reused): per device its median copy
    bandwidth, its tries and, when busy, why; its bandwidth curves."""
    median_gbps: dict[str, float]  # device -> median of its tries (busy devices included)
    tries: dict[str, list[dict]]  # device -> [{"gbps": float, "load": float | None}, ...]
    busy: dict[str, str] = field(default_factory=dict)  # device -> "load 3.4 on 2 cores"
    fresh_writes: dict[str, float] = field(default_factory=dict)  # allocator -> GB/s
    measured_at: str = ""  # ISO time of the measurement
    measured_epoch: float = math.nan
    reused_from: str | None = None  # measured_at of the measurement reused, or None
    curves: dict[str, dict] = field(default_factory=dict)  # device -> its bandwidth curves (busy ones included)
    curves_reused: dict[str, str] = field(default_factory=dict)  # device -> measured_at, for curves from the cache

    @property
    def ceilings(self) -> dict[str, float]:
        """The ceilings to judge with: quiet devices only. A busy device is
        absent, so its rows' ``floor_s`` and ``pct_of_ceiling`` stay NaN."""
        return {device: gbps for device, gbps in self.median_gbps.items() if device not in self.busy}

    def meta(self) -> dict:
        """The fields meta.json records (see the module's docstring)."""
        return {"ceilings_gbps": self.ceilings, "ceiling_tries": self.tries, "ceiling_busy": self.busy,
                "ceiling_reused_from": self.reused_from, "fresh_write_gbps": self.fresh_writes,
                CURVES: self.curves, f"{CURVES}_reused": self.curves_reused}

    def lines(self) -> list[str]:
        """What a reader must be told: a busy ceiling, and a reused one; the
        curves the floors by size use, measured now or reused (from when)."""
        said = []
        for device, reason in self.busy.items():
            said.append(f"{device} copy ceiling measured busy ({reason}; median of {len(self.tries.get(device, []))} "
                        f"tries {self.median_gbps.get(device, math.nan):.1f} GB/s): not used, so no floor and no "
                        f"% of ceiling for {device}")
        if self.reused_from:
            for device, gbps in self.ceilings.items():
                said.append(f"{device} copy ceiling reused from {self.reused_from}, measured at load "
                            f"{_load_text(median_try(self.tries.get(device, [])))}: {gbps:.1f} GB/s "
                            f"(reused for up to {REUSE_MAX_AGE_S / 3600:g} h on this machine)")
        return said + curve_lines(self.curves, self.curves_reused)


def curve_lines(curves: dict, reused: dict) -> list[str]:
    """One line per device's bandwidth curves: refused (busy), reused from
    the cache (from when), or measured now."""
    said = []
    for device, curve in sorted(curves.items()):
        sizes = curve.get("sizes_bytes") or [0]
        span = f"{len(sizes)} sizes, {fmt_bytes(min(sizes))} to {fmt_bytes(max(sizes))}"
        if curve.get("busy"):
            said.append(f"{device} bandwidth curves measured busy ({curve['busy']}): not used, so no floor by size "
                        f"for {device}")
        elif device in reused:
            said.append(f"{device} bandwidth curves ({span}) reused from {reused[device]} (kept for up to "
                        f"{CURVES_REUSE_MAX_AGE_S / 3600:g} h on this machine; delete {_curves_path()} to measure "
                        f"them again)")
        else:
            said.append(f"{device} bandwidth curves ({span}) measured now, at load {_loads_text(curve)}")
    return said


def _loads_text(curve: dict) -> str:
    loads = [one.get("load") for one in curve.get("tries", []) if isinstance(one.get("load"), (int, float))]
    return f"{min(loads):.2f}-{max(loads):.2f}" if loads else "unknown"


def meta_after(meta: dict, measured: Measured) -> dict:
    """meta.json's ceiling fields once ``measured`` is in: the devices it
    measured take its values (a resumed run's earlier ones go, a busy device
    leaves ``ceilings_gbps``), the others keep theirs; its fresh-write
    bandwidths, when it measured any; its curves, the others' kept (each
    row stores the rates its floor used, so a resumed run's earlier rows
    keep theirs)."""
    def earlier(name: str) -> dict:
        found = meta.get(name)
        return {device: value for device, value in (found.items() if isinstance(found, dict) else ())
                if device not in measured.tries}

    return {"ceilings_gbps": {**earlier("ceilings_gbps"), **measured.ceilings},
            "ceiling_tries": {**earlier("ceiling_tries"), **measured.tries},
            "ceiling_busy": {**earlier("ceiling_busy"), **measured.busy},
            "ceiling_reused_from": measured.reused_from,
            "fresh_write_gbps": measured.fresh_writes or meta.get("fresh_write_gbps") or {},
            CURVES: {**(meta.get(CURVES) if isinstance(meta.get(CURVES), dict) else {}), **measured.curves},
            f"{CURVES}_reused": measured.curves_reused}


def median_try(tries: list[dict]) -> dict:
    """The try a ceiling is (the median; of an even count, the lower middle
    one: a ceiling a try reached); {} when none ran."""
    finite = sorted((one for one in tries if isinstance(one.get("gbps"), (int, float)) and math.isfinite(one["gbps"])),
                    key=lambda one: one["gbps"])
    return finite[(len(finite) - 1) // 2] if finite else {}


def _load_text(one: dict) -> str:
    load = one.get("load")
    return "unknown" if load is None or not math.isfinite(load) else f"{load:.2f}"


def busy_reason(tries: list[dict], cores: int | None) -> str | None:
    """"load X on N cores" when half or more of the tries started with the
    machine at capacity, so that the median may be a busy one (X: the lowest
    load a busy try saw), else None. One rule for ceilings and curves."""
    loads = [one.get("load") for one in tries]
    busy = [load for load in loads if facts.at_capacity(load, cores)]
    if not tries or 2 * len(busy) < len(tries):
        return None
    return f"load {min(busy):.2g} on {cores} cores"


def judged(answer: dict) -> Measured:
    """The child's answer (``measure_here``) with each device's median, busy
    flag and curves (each curve refused by ``busy_reason`` too)."""
    tries, cores = answer["tries"], answer.get("cores")
    median = {device: median_try(found).get("gbps", math.nan) for device, found in tries.items()}
    busy = {device: reason for device, found in tries.items() if (reason := busy_reason(found, cores))}
    curves = {device: dict(curve, busy=busy_reason(curve.get("tries", []), cores))
              for device, curve in answer.get("curves", {}).items()}
    return Measured(median, tries, busy, answer.get("fresh_writes", {}), answer.get("measured_at", ""),
                    answer.get("measured_epoch", math.nan), curves=curves)


def _load_now() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def measure_here(request: dict) -> dict:
    """In the measuring child: ``TRIES`` rounds over the devices, each try's
    load read just before it (its own copies then weigh least in it), then
    the fresh-write bandwidth per allocator when the CPU is used and asked,
    then the bandwidth curves of the devices in ``request["curves"]``."""
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
    settings = request.get("curve_settings") or {}
    curves = {device: measure_curves_here(device, **settings) for device in request.get("curves", [])}
    return {"tries": tries, "fresh_writes": fresh, "curves": curves, "cores": os.cpu_count(),
            "measured_epoch": started,
            "measured_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds")}


# ------------------------------------------------------------------ curves
def last_level_cache_bytes(device: str) -> int:
    """The device's last-level cache: the CPU's largest (sysfs, ``facts.hardware``),
    the GPU's L2 (torch); 0 where it cannot be told."""
    if device != "cpu":
        import torch

        return int(getattr(torch.cuda.get_device_properties(torch.device(device)), "L2_cache_size", 0) or 0)
    sizes = [_cache_size_bytes(text) for name, text in facts.hardware().get("caches", {}).items()
             if not name.endswith("i")]
    return max(sizes, default=0)


def _cache_size_bytes(text: str) -> int:
    """sysfs's cache size ("32768K", "2M") in bytes; 0 where unreadable."""
    text = str(text).strip().upper().rstrip("B").rstrip("I")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    try:
        return int(float(text.rstrip("KMG")) * scale)
    except ValueError:
        return 0


def curve_settings() -> dict:
    """What the measuring child's curves are measured with: this process's
    settings (a test that shrinks them shrinks the child's too)."""
    return {"points": CURVE_POINTS, "smallest": CURVE_MIN_BYTES, "top_bounds": [CURVE_TOP_MIN_BYTES,
                                                                                CURVE_TOP_MAX_BYTES],
            "tries": CURVE_TRIES, "pass_bytes": CURVE_PASS_BYTES, "placements": CURVE_PLACEMENTS}


def curve_placements(size: int, buffer_bytes: int, count: int) -> list[int]:
    """Where in a buffer of ``buffer_bytes`` a curve measures ``size`` bytes: up to ``count``
    offsets, each a whole number of huge pages (``HUGE_PAGE_BYTES``), spread evenly over the buffer,
    each leaving room for the size; 0 alone where only one fits."""
    room = max(0, buffer_bytes - size) // HUGE_PAGE_BYTES  # huge pages the start may move by
    steps = min(max(1, count), room + 1)
    return sorted({round(k * room / max(1, steps - 1)) * HUGE_PAGE_BYTES for k in range(steps)})


def curve_sizes(last_level_cache: int, points: int | None = None, smallest: int | None = None,
                top_bounds=None) -> list[int]:
    """``CURVE_POINTS`` sizes, evenly spaced in log-size, from
    ``CURVE_MIN_BYTES`` to ``CURVE_LLC_MULTIPLE`` times the last-level cache
    (within ``CURVE_TOP_MIN_BYTES`` and ``CURVE_TOP_MAX_BYTES``), each a
    whole number of 4 KiB pages."""
    import numpy as np

    low, high = top_bounds or (CURVE_TOP_MIN_BYTES, CURVE_TOP_MAX_BYTES)
    smallest = smallest or CURVE_MIN_BYTES
    top = max(min(max(CURVE_LLC_MULTIPLE * last_level_cache, low), high), smallest)
    page = 4 << 10
    return sorted({max(page, int(round(size / page)) * page)
                   for size in np.geomspace(smallest, top, points or CURVE_POINTS)})


def _rate(clock, call, moved: int) -> float:
    seconds = clock.sample_s(call)
    return moved / seconds / 1e9 if seconds > 0 else math.nan


def measure_curves_here(device: str, sizes: list[int] | None = None, tries: int | None = None,
                        pass_bytes: int | None = None, points: int | None = None, smallest: int | None = None,
                        top_bounds=None, placements: int | None = None) -> dict:
    """The device's bandwidth curves (the module's docstring), through torch
    tensors on ``device``: at each size the fastest of ``tries`` tries, each
    the fastest of ``placements`` places in the try's buffer (``curve_placements``;
    ``CURVE_PLACEMENTS`` says why), each place gone over ``CURVE_WARM_CALLS`` times
    untimed first (a point is the rate of a working set as a case's samples in a
    timing loop find it), each kernel the faster of ``CURVE_PLACE_SAMPLES``
    samples there, of

    - read: ``torch.sum`` of the buffer seen ``passes`` times (a stride-0
      outer dimension: one call reads it again and again); on the CPU also
      numpy's sum of the same view and a vectorised numba loop
      (``bandwidth_kernels.read_passes``, at the run's numba threads): the fastest;
    - write: the buffer, already touched, filled ``passes`` times (torch's
      ``fill_``; on the CPU also numba's loop, and numpy's ``fill`` up to
      ``CURVE_SMALL_WRITE_BYTES``: the fastest);
    - fresh write (CPU), per allocator (``Backend.fresh_buffer``): a buffer
      allocated and filled, ``passes`` times, freed each time as a strategy's
      output is (torch's ``fill_``, the numba loop, numpy's ``fill`` up to
      ``CURVE_SMALL_WRITE_BYTES``: the fastest), kept as found
      (``fresh_write_as_found_gbps``); up to ``HEAP_HOLDS_BYTES`` the rate is
      the faster of that and the write into a buffer already touched, the
      pages a long-running process's heap may hand out again.

    On the CPU the buffer is numpy's (``_curve_buffer``: transparent huge pages).

    Each try records the 1-minute load it started under; one that started
    with the machine at capacity is recorded and skipped (the curve is then
    refused where half or more were: ``busy_reason``). Each try allocates a
    buffer (``_curve_buffer``), and every size is measured at places in it. Each kernel's own fastest tries are kept
    beside (``read_by_kernel_gbps``, ``write_by_kernel_gbps``), to say which
    one set the rate."""
    import numpy as np
    import torch

    from impls.backends import get_backend

    sizes = sizes or curve_sizes(last_level_cache_bytes(device), points, smallest, top_bounds)
    tries = tries or CURVE_TRIES
    placements = placements or CURVE_PLACEMENTS
    pass_bytes = pass_bytes or CURVE_PASS_BYTES
    started = time.time()
    clock = timing.Clock(get_backend("torch"), device)
    allocators = {name: get_backend(name).fresh_buffer for name in fresh_allocators()} if device == "cpu" else {}
    numba_loops = _numba_loops() if device == "cpu" else None
    read: dict[int, list[float]] = {size: [] for size in sizes}
    write: dict[int, list[float]] = {size: [] for size in sizes}
    read_by: dict[str, dict[int, list[float]]] = {}
    write_by: dict[str, dict[int, list[float]]] = {}

    def fastest(by: dict, size: int, kernels_by_place: list[dict], moved: int) -> float:
        # Each kernel's rate is the fastest of its places; the try's, the fastest kernel's. Each place
        # is first gone over untimed (CURVE_WARM_CALLS says why).
        rates: dict[str, float] = {}
        for kernels in kernels_by_place:
            first = next(iter(kernels.values()))
            for _ in range(CURVE_WARM_CALLS):
                first()
            for name, call in kernels.items():
                rates[name] = float(np.nanmax([rates.get(name, math.nan),
                                               *(_rate(clock, call, moved) for _ in range(CURVE_PLACE_SAMPLES))]))
        for name, rate in rates.items():
            by.setdefault(name, {one: [] for one in sizes})[size].append(rate)
        return max(rates.values())

    def kernels_at(buffer, size: int, passes: int) -> tuple[dict, dict]:
        seen_again = buffer.view(1, -1).expand(passes, -1)
        readers = {"torch": lambda: torch.sum(seen_again, dim=1)}
        writers = {"torch": lambda: [buffer.fill_(1.0) for _ in range(passes)]}
        if device == "cpu":
            array = buffer.numpy()
            readers["numpy"] = lambda: np.broadcast_to(array, (passes, array.size)).sum(axis=1)
            if size <= CURVE_SMALL_WRITE_BYTES:
                writers["numpy"] = lambda: [array.fill(1.0) for _ in range(passes)]
            if numba_loops is not None:
                read_loop, write_loop = numba_loops
                readers["numba"] = lambda: read_loop(array, passes)
                writers["numba"] = lambda: write_loop(array, passes)
        return readers, writers
    fresh: dict[str, dict[int, list[float]]] = {name: {size: [] for size in sizes} for name in allocators}
    fresh_as_found: dict[str, dict[int, list[float]]] = {name: {size: [] for size in sizes} for name in allocators}
    loads = []
    for _ in range(tries):
        load = _load_now()
        loads.append({"load": load})
        if facts.at_capacity(load, os.cpu_count()):
            # Recorded, not measured: a busy try is not a rate, and under load every thread
            # of a parallel call waits for the slowest (a 2-thread curve took 16 s at load 9).
            loads[-1]["skipped"] = True
            continue
        # A buffer of its own per try, and several places in each (CURVE_PLACEMENTS): where a size
        # sits in the caches depends on its physical pages.
        whole_bytes = max(max(sizes), placements * HUGE_PAGE_BYTES)
        whole = _curve_buffer(whole_bytes, device)
        for size in sizes:
            passes = max(1, -(-pass_bytes // size))
            places = [kernels_at(whole[start // 4: (start + size) // 4], size, passes)
                      for start in curve_placements(size, whole_bytes, placements)]
            read[size].append(fastest(read_by, size, [readers for readers, _ in places], passes * size))
            write[size].append(fastest(write_by, size, [writers for _, writers in places], passes * size))
            for name, allocate in allocators.items():
                writers = _fresh_writers(allocate, size, passes, numba_loops and numba_loops[1])
                as_found = max(_rate(clock, writer, passes * size) for writer in writers)
                fresh_as_found[name][size].append(as_found)
                # Up to HEAP_HOLDS_BYTES a long-running process's heap may hand out pages already
                # faulted in: the bound there is the write into a buffer already touched.
                fresh[name][size].append(max(as_found, write[size][-1]) if size <= HEAP_HOLDS_BYTES else as_found)
        del whole

    def fastest_tries(found: dict[int, list[float]]) -> list[float | None]:
        # None, not NaN, where every try was busy: meta.json stays JSON a browser reads.
        return [float(np.nanmax(found[size])) if found[size] else None for size in sizes]

    return {"sizes_bytes": list(sizes), "read_gbps": fastest_tries(read), "write_gbps": fastest_tries(write),
            "fresh_write_gbps": {name: fastest_tries(found) for name, found in fresh.items()}, "tries": loads,
            "fresh_write_as_found_gbps": {name: fastest_tries(found) for name, found in fresh_as_found.items()},
            "read_by_kernel_gbps": {name: fastest_tries(found) for name, found in read_by.items()},
            "write_by_kernel_gbps": {name: fastest_tries(found) for name, found in write_by.items()},
            "method": CURVE_METHOD,
            "measured_epoch": started,
            "measured_at": dt.datetime.fromtimestamp(started, dt.timezone.utc).isoformat(timespec="seconds")}


def _curve_buffer(nbytes: int, device: str):
    """The curves' buffer: float32 ones, ``nbytes`` of them. On the CPU numpy's, which asks for
    transparent huge pages (madvise) as it does for every array of 4 MiB or more a strategy is
    handed: on the 25-17 VM a torch.ones buffer (4 KiB pages) read 19 GB/s at 128 MiB and 23 at
    20 MiB, numpy's 27 and 51, so a curve of it bounded nothing. It starts on a huge page
    (``HUGE_PAGE_BYTES``), so that every size's prefix is in huge pages from its first byte: started
    on a 4 KiB page, the 1.66 MiB prefix of eight such buffers read 70-125 GB/s on the Xeon 6-167 VM
    (1 thread, a 2 MiB L2), started on a huge page 101-125 (numpy's own start is 16-byte aligned,
    and at 4 KiB the numba loop then wrote 85 GB/s, not 106)."""
    import numpy as np
    import torch

    if device != "cpu":
        return torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    page = HUGE_PAGE_BYTES
    raw = np.ones((nbytes + page) // 4, dtype=np.float32)
    start = (-raw.ctypes.data % page) // 4
    return torch.from_numpy(raw[start:start + nbytes // 4])


def _numba_loops():
    """numba's read and write loops (``bandwidth_kernels``), compiled now, outside the timed calls;
    None where numba is not installed (the curves are then torch's and numpy's)."""
    import numpy as np

    try:
        from harness.measuring import bandwidth_kernels
    except ImportError:
        return None
    import numba

    chunks = numba.get_num_threads()
    small = np.ones(1024, dtype=np.float32)
    bandwidth_kernels.read_passes(small, 1, chunks)
    bandwidth_kernels.write_passes(small, 1, chunks)
    return (lambda array, passes: bandwidth_kernels.read_passes(array, passes, chunks),
            lambda array, passes: bandwidth_kernels.write_passes(array, passes, chunks))


def _fresh_writers(allocate, size: int, passes: int, write_loop=None) -> list:
    """Calls that allocate ``size`` bytes from ``allocate`` and fill them,
    ``passes`` times: torch's ``fill_`` (its threads), the numba write loop
    where given, and numpy's ``fill`` for a small buffer (the cheaper call)."""
    import numpy as np
    import torch

    def writer(wrap, fill):
        def write():
            for _ in range(passes):
                buffer = wrap(allocate(size))
                fill(buffer, 1.0)
                del buffer
        return write

    writers = [writer(torch.as_tensor, torch.Tensor.fill_)]
    if write_loop is not None:
        writers.append(writer(np.asarray, lambda array, _: write_loop(array, 1)))
    if size <= CURVE_SMALL_WRITE_BYTES:
        writers.append(writer(np.asarray, np.ndarray.fill))
    return writers


_CHILD = ("import json, sys\n"
          "from harness.base.plugins import load_plugins\n"
          "load_plugins()  # a plugin's backend copies for the ceiling too\n"
          "from harness.measuring import ceilings\n"
          "request = json.loads(sys.stdin.read())\n"
          "print(json.dumps(ceilings.measure_here(request)))\n")


def _run_child(request: dict) -> dict:
    child = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(request), capture_output=True,
                           text=True, timeout=600)
    if child.returncode != 0:
        tail = (child.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"measuring the copy ceiling failed: {tail}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def measure(devices, threads=None, fresh: bool = True) -> Measured:
    """Each device's copy ceiling and, with ``fresh`` and the CPU among the
    devices, the fresh-output write bandwidth per allocator, measured in a
    child process (see the module's docstring); each device's bandwidth
    curves reused from the cache (``reuse_curves``), or measured in the same
    child and kept there (``remember_curves``)."""
    devices = sorted(set(devices))
    if not devices:
        return Measured({}, {}, measured_at=facts.now_iso(), measured_epoch=time.time())
    kept, reused = reuse_curves(devices, threads)
    request = {"devices": devices, "threads": dict(threads or {}), "fresh": fresh,
               "curves": [device for device in devices if device not in kept and torch_device(device)],
               "curve_settings": curve_settings()}
    measured = judged(_run_child(request))
    remember_curves(measured.curves, threads)
    measured.curves, measured.curves_reused = {**kept, **measured.curves}, reused
    return measured


def measure_curves(devices, threads=None) -> tuple[dict, dict]:
    """Each device's bandwidth curves, reused from the cache or measured now
    (in the child, alone) and kept; returns (curves, device -> when the
    reused ones were measured)."""
    devices = sorted(device for device in set(devices) if torch_device(device))  # curves are measured through torch
    kept, reused = reuse_curves(devices, threads)
    missing = [device for device in devices if device not in kept]
    if not missing:
        return kept, reused
    measured = judged(_run_child({"devices": [], "threads": dict(threads or {}), "fresh": False,
                                  "curves": missing, "curve_settings": curve_settings()}))
    remember_curves(measured.curves, threads)
    return {**kept, **measured.curves}, reused


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
    entries = {}
    for device, gbps in measured.ceilings.items():
        if math.isfinite(gbps) and gbps > 0:
            entries[device] = {"gbps": gbps, "tries": measured.tries.get(device, []),
                               "measured_at": measured.measured_at, "measured_epoch": measured.measured_epoch}
            if device == "cpu" and measured.fresh_writes:  # measured with it: as quiet, as old
                entries[device]["fresh_writes"] = dict(measured.fresh_writes)
    moment = time.time()
    _store(_cache_path(), threads, entries, lambda entry: _usable_entry(entry, moment, max_age_s), on_warning)


def _stored_machines(path, on_warning: Callable[[str], None]) -> dict:
    """A cache file's entries (ceilings or curves) per machine key: {} where it holds none."""
    data = caches.read_json(path, on_warning) or {}
    return data.get("machines") if isinstance(data.get("machines"), dict) else {}


def _this_machine(machines: dict, key: str) -> dict:
    """The entries per device ``machines`` holds under ``key``: {} where it holds none."""
    return machines.get(key) if isinstance(machines.get(key), dict) else {}


def _store(path, threads, entries: dict, usable: Callable[[object], bool], on_warning: Callable[[str], None]) -> None:
    """Adds ``entries`` (device -> entry, replacing those stored) to this
    machine's under ``threads`` in the cache file ``path``, and writes it
    back with each machine's entries that ``usable`` keeps, and only the
    machines left with any."""
    machines = _stored_machines(path, on_warning)
    key = machine_key(threads)
    machines[key] = {**_this_machine(machines, key), **entries}
    kept = {name: {device: entry for device, entry in found.items() if usable(entry)}
            for name, found in machines.items() if isinstance(found, dict)}
    caches.write_json(path, {"machines": {name: found for name, found in kept.items() if found}}, on_warning)


def _curves_path():
    return caches.cache_root() / CURVES_FILE


def _usable_curve(curve, now: float, max_age_s: float) -> bool:
    """A stored curve that can be reused: quiet, complete, young enough, measured the way curves are
    now (``CURVE_METHOD``)."""
    if not isinstance(curve, dict) or curve.get("busy"):
        return False
    try:
        sizes, epoch = curve["sizes_bytes"], float(curve["measured_epoch"])
        lengths = {len(curve["read_gbps"]), len(curve["write_gbps"]),
                   *(len(found) for found in curve.get("fresh_write_gbps", {}).values())}
    except (KeyError, TypeError, ValueError):
        return False
    return (isinstance(sizes, list) and bool(sizes) and lengths == {len(sizes)} and curve.get("method") == CURVE_METHOD
            and isinstance(curve.get("measured_at"), str) and 0 <= now - epoch <= max_age_s)


def reuse_curves(devices, threads=None, *, max_age_s: float = CURVES_REUSE_MAX_AGE_S,
                 now: Callable[[], float] = time.time,
                 on_warning: Callable[[str], None] = caches.warn) -> tuple[dict, dict]:
    """The quiet curves of ``devices`` this machine measured under the same
    threads within ``max_age_s`` (those it has): (device -> curve, device ->
    when it was measured)."""
    stored = _this_machine(_stored_machines(_curves_path(), on_warning), machine_key(threads))
    moment = now()
    kept = {device: stored[device] for device in sorted(set(devices))
            if _usable_curve(stored.get(device), moment, max_age_s)}
    return kept, {device: curve["measured_at"] for device, curve in kept.items()}


def remember_curves(curves: dict, threads=None, *, max_age_s: float = CURVES_REUSE_MAX_AGE_S,
                    on_warning: Callable[[str], None] = caches.warn) -> None:
    """Keeps the quiet ``curves`` for ``reuse_curves`` (busy ones never);
    entries past ``max_age_s`` are dropped."""
    moment = time.time()
    quiet = {device: curve for device, curve in curves.items() if _usable_curve(curve, moment, max_age_s)}
    if not quiet:
        return
    _store(_curves_path(), threads, quiet, lambda curve: _usable_curve(curve, moment, max_age_s), on_warning)


def measure_or_reuse(devices, threads=None, *, fresh: bool = False, max_age_s: float = REUSE_MAX_AGE_S,
                     on_warning: Callable[[str], None] = caches.warn) -> Measured:
    """``reuse``'s ceilings when every device has a recent quiet one (and,
    with ``fresh``, the CPU's fresh-write bandwidths measured with it: what
    ``bench()``'s CPU rows' fresh-output floor needs), with the curves
    ``measure_curves`` gives, else ``measure`` them now and ``remember`` them."""
    devices = sorted(set(devices))  # read twice below: a generator would be empty the second time
    said: set[str] = set()

    def once(text: str) -> None:  # a file read twice (reuse, then remember) is warned of once
        if text not in said:
            said.add(text)
            on_warning(text)

    found = reuse(devices, threads, fresh=fresh, max_age_s=max_age_s, on_warning=once)
    if found is not None:
        found.curves, found.curves_reused = measure_curves(devices, threads)
        return found
    measured = measure(devices, threads, fresh=fresh)
    remember(measured, threads, max_age_s=max_age_s, on_warning=once)
    return measured
