"""The cache-aware roofline (SPEC 3, "Floors by size"): a case's floor from
bandwidth curves measured over working-set sizes, not from one large copy.

A machine's curves (measured by harness/measuring/ceilings.py, stored in a
run's meta.json as ``bandwidth_curves``, kept per machine in the suite's
cache) give, per device and at each size in ``sizes_bytes``, the fastest rate (of its tries)
of reading a buffer of that size (``read_gbps``), of writing into one already
touched (``write_gbps``: a buffer reused), and, on the CPU, of allocating a
buffer from each allocator and writing it (``fresh_write_gbps[allocator]``:
the first-touch faults a fresh output pays; a small buffer comes back from
the allocator's free list, a large one from the OS, as a strategy's does).

A row's floor is ``bytes_read / read(working set) + bytes_written /
write(output size)``, each rate interpolated on its curve in log-size
(``rate_at``): the working set is everything the call touches (its bytes
moved), the output size its bytes written, and the write curve the one its
strategy allocates through (``write_curve``). On a fresh-write curve each
output the call allocates is priced at its own size (``write_rate``): what
a fresh output costs is its allocation's (a block the heap still holds, or
new pages from the OS), and max-pool's 51 MB values may come from the heap
while its 103 MB indices cannot; priced at their 154 MB total, a run whose
heap held the values read 119 % of its floor. The row stores the two rates
it used (the write rate the one that prices all its outputs' bytes alike),
so its floor recomputes from the row alone (``floor_from_rates``),
whatever the run's meta later holds. A row more than ``OVER_FLOOR_PCT`` % of
its floor ran faster than the machine can move its bytes: its bytes formula
(or the curve) is wrong, and it is flagged, never shown as a plain
percentage (``floor_cell``: the one wording every table and the report use).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from harness.base.format import fmt_pct

# A median this far past its floor (in %) moved fewer bytes than its formula says, or
# the curve is wrong: 10 % leaves room for the curves' own noise (their tries' spread).
OVER_FLOOR_PCT = 110.0
OVER_FLOOR_TEXT = "over the floor: bytes formula or curve wrong"
OVER_FLOOR_MARK = "⚠"  # a table cell too narrow for the wording: the mark, and the wording under the table
REUSED = "reused"  # the write curve of a buffer already touched
# Beside a fresh write curve's name: the row's outputs were each priced at their own size (``write_rate``);
# a row of a run before that priced them at their total, and is priced again when read (``repriced``).
PER_OUTPUT = "each output at its own size"
CURVES = "bandwidth_curves"  # the meta.json field holding them
# How the curves are measured (harness/measuring/ceilings.py); a stored curve of another method is
# measured again, not reused. 2: on the CPU each rate is the fastest of torch's, numpy's and a numba
# loop's (harness/measuring/bandwidth_kernels.py). 3: on the CPU the buffer is numpy's (transparent
# huge pages, as numpy asks for them), and a fresh output of up to ceilings.HEAP_HOLDS_BYTES is
# bounded by the write into a touched buffer as well. 4: each rate is the fastest of its tries, not
# their median (ceilings.CURVE_TRIES says why), each try with a buffer of its own, started on a huge page.
# 5: each try measures each size at several places in its buffer, the fastest place kept, each place
# gone over untimed first, each kernel the fastest of two samples there (ceilings.CURVE_PLACEMENTS,
# CURVE_WARM_CALLS and CURVE_PLACE_SAMPLES say why).
CURVE_METHOD = 5
# Curves of one machine class measured apart agree when each point is within this many % of
# their median (docs/SPEC.md §3): a floor that moves more between runs moves every row's % of floor.
CURVES_AGREE_PCT = 10.0

# The columns a row's floor by size fills (store.COLUMN_SPECS, schema 8).
EMPTY = {"bytes_written": math.nan, "read_gbps_used": math.nan, "write_gbps_used": math.nan,
         "floor_write_curve": "", "floor_by_size_s": math.nan, "pct_of_floor": math.nan}


def _number(value) -> float:
    """A number as a float (numpy's too: a row read into pandas holds them); NaN for anything else."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) else math.nan


def rate_at(sizes_bytes, rates_gbps, nbytes: float) -> float:
    """The curve's rate at ``nbytes``, interpolated linearly in log-size
    between its two nearest sizes; beyond its ends, the end's rate (past the
    last-level cache the rate stays memory's). NaN without a usable curve."""
    sizes = np.asarray(sizes_bytes, dtype=float)
    rates = np.asarray(rates_gbps, dtype=float)
    usable = (sizes > 0) & np.isfinite(sizes) & (rates > 0) & np.isfinite(rates) if sizes.shape == rates.shape \
        else np.zeros(0, bool)
    if not usable.any() or not (nbytes > 0 and math.isfinite(nbytes)):
        return math.nan
    order = np.argsort(sizes[usable])
    return float(np.interp(math.log(nbytes), np.log(sizes[usable][order]), rates[usable][order]))


def floor_from_rates(bytes_moved: float, bytes_written: float, read_gbps: float, write_gbps: float) -> float:
    """The floor of a call that moves ``bytes_moved``, ``bytes_written`` of
    them written: the rest read at ``read_gbps``, the written at ``write_gbps``
    (no bytes written: no write rate needed). NaN when a needed rate is not
    known or the bytes do not add up."""
    moved, written = _number(bytes_moved), _number(bytes_written)
    if not (math.isfinite(moved) and 0 <= written <= moved):
        return math.nan
    read_part = (moved - written) / (read_gbps * 1e9) if read_gbps > 0 else (0.0 if moved == written else math.nan)
    write_part = written / (write_gbps * 1e9) if write_gbps > 0 else (0.0 if written == 0 else math.nan)
    return read_part + write_part


def pct_of_floor(floor: float, median_s: float) -> float:
    """How close a median came to its floor, in % (100: at the floor)."""
    floor, median_s = _number(floor), _number(median_s)
    return 100.0 * floor / median_s if median_s > 0 and math.isfinite(floor) else math.nan


def over_floor(pct: float) -> bool:
    """Whether a row's % of floor says its bytes formula or the curve is wrong."""
    pct = _number(pct)
    return math.isfinite(pct) and pct > OVER_FLOOR_PCT


def floor_cell(pct: float, short: bool = False) -> str:
    """A % of floor as every table and the report show it: the percentage,
    or, past ``OVER_FLOOR_PCT``, the flag instead of a number a reader would
    take for a speed (``short``: the mark and "over the floor", for a
    narrow column, with ``over_floor_line`` under the table)."""
    if not over_floor(pct):
        return fmt_pct(pct)
    return f"{OVER_FLOOR_MARK} over the floor" if short else f"{OVER_FLOOR_MARK} {OVER_FLOOR_TEXT}"


# The copy ceiling and the fresh floor price every size at one large buffer's rates: a floor only for
# a working set past the last-level cache. A row past one is in a cache (whose bandwidth they do not
# measure) or its bytes formula is wrong; the floor by size tells which.
OVER_CEILING_TEXT = ("past a one-large-buffer rate: the working set is in a cache (a run with floors by size "
                     "has the floor for it) or the bytes formula is wrong")


def ceiling_cell(pct: float) -> str:
    """A % of the copy ceiling or of the fresh floor as the report shows it:
    past ``OVER_FLOOR_PCT`` marked beside its number, so that no reader takes
    it for a speed past memory's, nor for a wrong bytes formula where the
    working set is only in a cache (``ceiling_note`` says what the mark means)."""
    return f"{OVER_FLOOR_MARK} {fmt_pct(pct)}" if over_floor(pct) else fmt_pct(pct)


def ceiling_note() -> str:
    """The legend's sentence for a marked % of ceiling or of fresh floor."""
    return f"{OVER_FLOOR_MARK} on a % of ceiling or of fresh floor past {OVER_FLOOR_PCT:.0f} %: {OVER_CEILING_TEXT}"


def over_floor_line(name: str, pct: float) -> str | None:
    """The line under a table for a row over its floor (None for one that is not)."""
    if not over_floor(pct):
        return None
    return (f"{name}: {OVER_FLOOR_MARK} {OVER_FLOOR_TEXT} (its bytes take {_number(pct) / 100:.2g}× its median at "
            f"this machine's measured rates)")


def floor_note() -> str:
    """The sentence under a table with a % of floor column."""
    return (f"% of floor: the median against the time the call's bytes take at this machine's measured read and "
            f"write rates for its sizes (100 %: at the floor); past {OVER_FLOOR_PCT:.0f} %, "
            f"'{OVER_FLOOR_TEXT}'")


def allocator_of(backend_name: str) -> str:
    """The allocator a strategy's CPU outputs come from: its backend's own
    (``Backend.fresh_buffer``), numpy's for a backend whose arrays are numpy's
    (numba, PyTensor), else "" (its own pool, JAX's: not measured)."""
    from impls.backends import BACKENDS

    backend = BACKENDS.get(backend_name)
    if backend is None:
        return ""
    if backend.fresh_buffer is not None:
        return backend.name
    numpy_backend = BACKENDS.get("numpy")
    return "numpy" if numpy_backend is not None and backend.to_native is numpy_backend.to_native else ""


def write_curve(curve: dict, allocator: str) -> tuple[str, list]:
    """The write curve an output from ``allocator`` pays on a device's
    ``curve``: that allocator's fresh-write curve where measured, else the
    reused one (a pool that keeps its buffers, as CUDA's caching allocator
    does, writes into touched memory: and the fastest write keeps a floor a floor)."""
    fresh = curve.get("fresh_write_gbps") if isinstance(curve.get("fresh_write_gbps"), dict) else {}
    if allocator and isinstance(fresh.get(allocator), list):
        return f"fresh {allocator}", fresh[allocator]
    return REUSED, curve.get("write_gbps") or []


def write_rate(sizes_bytes, rates_gbps, written: float, buffers=None) -> float:
    """The one rate a row's written bytes are priced at on a write curve: the
    curve's rate at their size; given each output's size (``buffers``, summing
    to ``written``), each output at its own size's rate, and the rate that
    takes their bytes the same time (their bytes over the sum of their times)."""
    if not written > 0:
        return math.nan
    if buffers is None or len(buffers) < 2 or sum(buffers) != written:
        return rate_at(sizes_bytes, rates_gbps, written)
    seconds = sum(size / rate_at(sizes_bytes, rates_gbps, size) for size in buffers if size > 0)
    return written / seconds if seconds > 0 else math.nan


def usable_curve(curves: dict | None, device: str) -> dict | None:
    """A device's curve from meta's ``bandwidth_curves``, or None where it
    has none or it was measured busy (never used, as a busy ceiling is not)."""
    curve = (curves or {}).get(device) if isinstance(curves, dict) else None
    if not isinstance(curve, dict) or curve.get("busy") or not curve.get("sizes_bytes"):
        return None
    return curve


def row_floor(bytes_moved: float, bytes_written: float | None, median_s: float, curve: dict | None,
              allocator: str, buffers=None) -> dict:
    """A row's floor by size (the module's docstring) and what it rests on,
    as the row's columns (``EMPTY``'s keys). An operator that does not split
    its bytes (``bytes_written`` None) is charged everything at the read rate.
    ``buffers``: each fresh output's bytes, where the call allocates several;
    on a fresh-write curve each is priced at its own size (``write_rate``)."""
    if curve is None or not math.isfinite(_number(bytes_moved)):
        return dict(EMPTY)
    split = bytes_written is not None
    written = float(bytes_written) if split else 0.0
    sizes = curve["sizes_bytes"]
    read = rate_at(sizes, curve.get("read_gbps") or [], bytes_moved)
    name, rates = write_curve(curve, allocator)
    per_output = name != REUSED and buffers is not None and len(buffers) > 1
    write = write_rate(sizes, rates, written, buffers if per_output else None)
    name = f"{name}, {PER_OUTPUT}" if per_output else name
    floor = floor_from_rates(bytes_moved, written, read, write)
    return {"bytes_written": written if split else math.nan, "read_gbps_used": read, "write_gbps_used": write,
            "floor_write_curve": name if split else "unsplit: all bytes at the read rate",
            "floor_by_size_s": floor, "pct_of_floor": pct_of_floor(floor, median_s)}


def case_floor(op_name: str, strategy: str, params: dict, dtype: str, device: str, mode: str, row,
               curves: dict | None) -> dict:
    """``row_floor`` for one case of this checkout's registry (its bytes
    written in its mode, its strategy's allocator); empty for an operator or
    strategy this checkout does not know, or a device without a quiet curve."""
    from impls import training
    from impls.backends import NotApplicable, itemsize
    from impls.registry import get_operator

    curve = usable_curve(curves, device)
    if curve is None:
        return dict(EMPTY)
    try:
        op = get_operator(op_name)
        strat = op.strategies[strategy]
        buffers = training.written_buffers(op, params, itemsize(dtype), mode, strat.returns)
    except (KeyError, ValueError, NotApplicable):
        return dict(EMPTY)
    return row_floor(_number(row.get("bytes")), None if buffers is None else sum(buffers),
                     _number(row.get("median_s")), curve, allocator_of(strat.backend) if device == "cpu" else "",
                     buffers)


def repriced(rows, curves: dict | None):
    """The floors by size of a run's rows written before each output was
    priced at its own size (a fresh write curve's name without ``PER_OUTPUT``),
    priced again from the run's ``curves``, for the operators whose calls
    allocate several outputs; only a row whose stored read rate is the one
    these curves give its bytes (it was priced by them, not by an earlier
    attempt's of a resumed run), the others as they are. A copy of ``rows``
    (a DataFrame with the store's columns)."""
    import json

    from impls.registry import get_operator

    rows = rows.copy()
    if rows.empty or not isinstance(curves, dict) or "floor_write_curve" not in rows:
        return rows

    def several_outputs(name: str) -> bool:
        try:
            return get_operator(name).written_buffers is not None
        except KeyError:
            return False

    names = rows["floor_write_curve"].astype(str)
    several = {name: several_outputs(name) for name in rows["op"].unique()}  # a few operators, many rows
    stale = rows.index[names.str.startswith("fresh ") & ~names.str.endswith(PER_OUTPUT) & rows["op"].map(several)]
    for index in stale:
        row = rows.loc[index]
        try:
            params = json.loads(row["params"])
        except (TypeError, ValueError):
            continue
        found = case_floor(row["op"], row["strategy"], params, row["dtype"], row["device"],
                           row["mode"] or "forward", row, curves)
        if str(found["floor_write_curve"]).endswith(PER_OUTPUT) and math.isclose(
                found["read_gbps_used"], _number(row["read_gbps_used"]), rel_tol=1e-9):
            for name, value in found.items():
                rows.at[index, name] = value
    return rows


def recomputed(row) -> tuple[float, float]:
    """A stored row's floor by size and % of it, from its own columns alone
    (bytes, bytes_written, the rates it used, its median): what a reader of
    the files can check."""
    written = _number(row.get("bytes_written"))
    floor = floor_from_rates(_number(row.get("bytes")), written if math.isfinite(written) else 0.0,
                             _number(row.get("read_gbps_used")), _number(row.get("write_gbps_used")))
    return floor, pct_of_floor(floor, _number(row.get("median_s")))


def _meta_curves(meta: dict) -> tuple[dict, dict]:
    """A run's curves (device -> curve) and, of those reused from the cache, when they were
    measured (device -> date), from its meta.json; {} for either it lacks or holds malformed."""
    curves, reused = meta.get(CURVES), meta.get(f"{CURVES}_reused")
    return (curves if isinstance(curves, dict) else {}), (reused if isinstance(reused, dict) else {})


def curves_cell(meta: dict) -> str:
    """What a run's floors by size rest on, per device, for the report's run
    table: the curves measured by the run (when), reused from the cache
    (from when), or measured busy and not used; "–" for a run without any."""
    curves, reused = _meta_curves(meta)
    cells = []
    for device, curve in sorted(curves.items()):
        if not isinstance(curve, dict):
            continue
        if curve.get("busy"):
            cells.append(f"{device} measured busy ({curve['busy']}), not used")
        elif device in reused:
            cells.append(f"{device} reused from {reused[device]}")
        else:
            cells.append(f"{device} measured {curve.get('measured_at', '?')}")
    return ", ".join(cells) or "–"


# The first curve method whose curves are compared run to run: method 1 was torch's rates alone.
COMPARED_FROM_METHOD = 2


def own_curve(meta: dict, device: str = "cpu") -> dict | None:
    """The curve of ``device`` a run measured itself, quiet, by a method from ``COMPARED_FROM_METHOD``
    on (its ``method``: curves are compared only with curves of the same method); None where it
    reused one, measured it busy, or measured it by torch's rates alone."""
    curves, reused = _meta_curves(meta)
    curve = usable_curve(curves, device)
    if curve is None or device in reused or (curve.get("method") or 0) < COMPARED_FROM_METHOD:
        return None
    return curve


def curves_deviation(curves: list[dict]) -> dict[str, tuple[float, float]]:
    """How far curves measured apart stray from their median, per kind ("read", "write"): (the
    largest deviation in %, the size it is at), each curve read at the first one's sizes."""
    sizes = curves[0]["sizes_bytes"]
    found = {}
    for kind in ("read", "write"):
        worst = (0.0, float(sizes[0]))
        for size in sizes:
            rates = np.array([rate_at(curve["sizes_bytes"], curve.get(f"{kind}_gbps") or [], size) for curve in curves])
            rates = rates[np.isfinite(rates)]
            if len(rates) < 2:
                continue
            deviation = float(100 * np.max(np.abs(rates / np.median(rates) - 1)))
            if deviation > worst[0]:
                worst = (deviation, float(size))
        found[kind] = worst
    return found

