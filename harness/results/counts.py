"""Counts (``scatterbench run CONFIG --instrument callgrind``): what a counted
row holds, how it is read from Callgrind's dumps, and the rule that judges two
counts of one case. The count columns themselves are declared in
harness/results/metrics.py (``COUNTS``), which computes them with this module.

Per call, from one Callgrind run with cache simulation:

- ``instructions``: Callgrind's ``Ir``, the instructions executed.
- ``est_cycles``: ``Ir + 10 × (I1mr + D1mr + D1mw) + 100 × (ILmr + DLmr + DLmw)``,
  KCachegrind's "cycle estimation" (its default formula, and the weighting of
  the valgrind-based CI tools): an L1 miss that hits the last-level cache
  costs about 10 cycles more than a hit, a last-level miss about 100 (a DRAM
  access). It is an estimate: no out-of-order overlap, no prefetching, no
  bandwidth limit; what it adds to ``instructions`` is that a change which
  makes the same instructions walk memory worse shows at all.

Counts barely move between runs of the same code (within 0.1 %, whatever
the load, est_cycles of the interpreter-bound seeds at quick.yaml's small
sizes within 0.25 %; docs/COUNTING.md), so no
statistical test is needed: a count regresses when it grew by more than the
factor (``metrics.COUNTS.factor``, 1.03), and improves when it shrank by as much. A case that was correct and now fails its check is broken, by the same
rule as times (``regression.status_change``).
"""

from __future__ import annotations

from pathlib import Path

# Cycles an L1 miss (that hits the last level) and a last-level miss add to an instruction.
L1_MISS_CYCLES = 10
LL_MISS_CYCLES = 100
EST_CYCLES_FORMULA = (f"Ir + {L1_MISS_CYCLES}*(I1mr + D1mr + D1mw) + {LL_MISS_CYCLES}*(ILmr + DLmr + DLmw)")
NOT_COUNTED = "not counted"


class DumpError(ValueError):
    """A Callgrind dump that cannot be read (missing, cut short, no summary)."""


def read_dump(path) -> dict[str, int]:
    """The event totals of one Callgrind dump: its header's ``events:`` names
    and its last line's ``totals:`` (trailing zeros may be left out). Not the
    header's ``summary:``, which Callgrind gets wrong (wrapped below zero)
    once instrumentation has been switched off and on between dumps; the
    totals then still add up to what it reports collected at exit."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            head = handle.read(8192).decode("utf-8", errors="replace")
            handle.seek(max(0, handle.seek(0, 2) - 4096))
            tail = handle.read().decode("utf-8", errors="replace")
    except OSError as error:
        raise DumpError(f"{path}: cannot read the Callgrind dump ({error.strerror or error})") from None
    names = next((line.split(":", 1)[1].split() for line in head.splitlines() if line.startswith("events:")), None)
    totals = next((line.split(":", 1)[1].split() for line in reversed(tail.splitlines())
                   if line.startswith("totals:")), None)
    if not names or totals is None:
        raise DumpError(f"{path}: no events header or totals line: not a Callgrind dump, or cut short")
    try:
        values = [int(value) for value in totals]
    except ValueError:
        raise DumpError(f"{path}: the totals line is not a list of counts") from None
    if len(values) > len(names):
        raise DumpError(f"{path}: {len(values)} totals for {len(names)} events")
    return dict(zip(names, values + [0] * (len(names) - len(values))))


def est_cycles(events: dict) -> float:
    """``EST_CYCLES_FORMULA`` on a dump's events (cache simulation required)."""
    missing = [name for name in ("I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw") if name not in events]
    if missing:
        raise DumpError(f"the dump has no {', '.join(missing)}: Callgrind ran without --cache-sim=yes")
    l1 = events["I1mr"] + events["D1mr"] + events["D1mw"]
    ll = events["ILmr"] + events["DLmr"] + events["DLmw"]
    return float(events["Ir"] + L1_MISS_CYCLES * l1 + LL_MISS_CYCLES * ll)
