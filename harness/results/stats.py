"""Pure statistics on timing samples (seconds). No I/O, no state."""

from __future__ import annotations

import functools
import json
import math
from dataclasses import asdict, make_dataclass

import numpy as np

from harness.results.metrics import TIMING

# scipy.stats is imported in the functions that use it (metrics._iqr too): it
# takes 0.5-1.4 s to import on the 2-core VM, and commands that never compare
# or time (`check`, `list`, a dashboard build) should not pay for it, nor be
# inside it when a SIGTERM arrives.


# A slow start: the first samples of a case more than this many times slower
# than its median. Measured on the 2-core VM: right after a torch.compile case
# (or any burst of allocation), numba_fused maxpool2d 64x32x128x128 took
# 189-225 ms for four calls, then 26 ms, steady; with 5 samples in the budget
# its median came out 8x too slow. Memory the VM's host has not yet backed is
# slow to touch the first time (1 GiB of fresh pages took 1.9-3.7 s to fill,
# against 0.1 s once backed). Ordinary noise on that VM stays within 2x.
SLOW_START_FACTOR = 2.0


# Sampling goes on while the latest quarter of the samples is this many times
# faster than all of them: a stall may be ending (gradually: 71, 50, 34 ms,
# then 22 ms steady was measured too), and a few more samples settle it.
SETTLING_FACTOR = 1.5


def settling(samples_s, factor: float = SETTLING_FACTOR) -> bool:
    """Whether the latest quarter of the samples (at least the last one) is
    more than ``factor`` times faster than the median of all: the case may
    still be leaving a slow start, and stopping now would keep it."""
    if len(samples_s) < 2:
        return False
    recent = samples_s[-max(1, len(samples_s) // 4):]
    return factor * float(np.median(recent)) < float(np.median(samples_s))


def slow_start(samples_s, factor: float = SLOW_START_FACTOR) -> int:
    """How many leading samples are each more than ``factor`` times the
    median: a slow start, to be dropped like warm-up. Never more than half
    the samples (a case slow half the time is noisy, not warming up)."""
    samples = np.asarray(samples_s, dtype=np.float64)
    median = float(np.median(samples)) if samples.size else math.nan
    count = 0
    while count < samples.size // 2 and samples[count] > factor * median:
        count += 1
    return count


Summary = make_dataclass("Summary", [(metric.name, metric.type) for metric in TIMING.fields], frozen=True,
                         namespace={"__doc__": "The timing statistics (metrics.TIMING) of one case's samples.",
                                    "as_row": lambda self: asdict(self)})


def summarize(samples_s) -> Summary:
    """The statistics of ``metrics.TIMING``, from one case's samples (seconds)."""
    samples = np.asarray(samples_s, dtype=np.float64)
    if samples.size == 0:
        raise ValueError("no samples to summarize")
    return Summary(**TIMING.compute(samples))


def round_medians_json(rounds) -> str:
    """The ``round_medians_s`` column (SPEC 3 "Rounds"): each round's median,
    in round order, as a JSON list; "" without rounds."""
    medians = [float(np.median(np.asarray(samples, dtype=np.float64))) for samples in rounds if len(samples)]
    return json.dumps(medians) if medians else ""


def within_round_iqr_s(rounds, median_s: float) -> float:
    """The ``within_round_iqr_s`` column: how steadily the machine timed one
    prepared state, the median over rounds of each round's IQR relative to
    its own median, scaled to the case's ``median_s``. With rounds the
    samples' pooled IQR also holds what differs between rounds (the state
    each prepare sets, the machine's drift over minutes: SPEC 3 "Rounds"),
    which the rule between strategies judges from the round medians; a busy
    machine shows here, within a round. NaN with no round of two samples."""
    from scipy import stats as scipy_stats  # as metrics._iqr: only commands that time pay its import

    relative = []
    for samples in rounds:
        samples = np.asarray(samples, dtype=np.float64)
        middle = float(np.median(samples)) if samples.size else math.nan
        if samples.size >= 2 and middle > 0:
            relative.append(float(scipy_stats.iqr(samples)) / middle)
    return float(np.median(relative)) * median_s if relative and median_s > 0 else math.nan


def steadiness_iqr_s(row) -> float:
    """The IQR that says whether a row was measured steadily (the unstable
    mark, the fitness rule): within its rounds where it took them
    (``within_round_iqr_s``), else its samples' IQR (a run before schema 9)."""
    within = row.get("within_round_iqr_s", math.nan) if hasattr(row, "get") else math.nan
    if isinstance(within, (int, float)) and not isinstance(within, bool) and math.isfinite(within):
        return float(within)
    return row["iqr_s"]


def round_medians(value) -> list[float]:
    """A row's ``round_medians_s`` read back: the rounds' medians, or [] for a
    row without them (a run before schema 7, a case not timed, a value that
    is not a JSON list of positive finite numbers)."""
    if isinstance(value, (list, tuple)):
        found = value
    elif isinstance(value, str) and value.strip():
        try:
            found = json.loads(value)
        except ValueError:
            return []
    else:
        return []
    if not isinstance(found, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               and math.isfinite(v) and v > 0 for v in found):
        return []
    return [float(v) for v in found]


def rel_iqr(iqr_s: float, median_s: float) -> float:
    """The IQR as a fraction of the median (the run's per-case dispersion)."""
    try:
        return iqr_s / median_s if median_s > 0 and math.isfinite(iqr_s) else float("nan")
    except TypeError:
        return float("nan")


def gbps(bytes_moved: float, seconds: float) -> float:
    return bytes_moved / seconds / 1e9 if seconds > 0 else float("nan")


def floor_s(bytes_moved: float, ceiling_gbps: float) -> float:
    """The time the case would take at the device's measured copy bandwidth."""
    return bytes_moved / (ceiling_gbps * 1e9) if ceiling_gbps > 0 else float("nan")


def pct_of_ceiling(bytes_moved: float, median_s: float, ceiling_gbps: float) -> float:
    return 100.0 * floor_s(bytes_moved, ceiling_gbps) / median_s if median_s > 0 else float("nan")


def fresh_floor_s(bytes_moved: float, bytes_written: float, ceiling_gbps: float, fresh_write_gbps: float) -> float:
    """The CPU floor that counts what a fresh output costs: the bytes read at
    the copy bandwidth plus the bytes written at the fresh-write bandwidth
    (a newly allocated buffer, its pages zeroed by the OS on first touch:
    ``timing.fresh_write_gbps``), the rate every timed call's outputs pay (docs/SPEC.md §3)."""
    if not (ceiling_gbps > 0 and fresh_write_gbps > 0) or not 0 <= bytes_written <= bytes_moved:
        return float("nan")
    return (bytes_moved - bytes_written) / (ceiling_gbps * 1e9) + bytes_written / (fresh_write_gbps * 1e9)


def best_fresh_write_gbps(fresh_write_gbps: dict | None) -> float:
    """The fastest fresh-write bandwidth a run measured over the allocators
    (a floor is the least time the case could take); NaN where none."""
    return max((g for g in (fresh_write_gbps or {}).values() if isinstance(g, (int, float)) and g > 0),
               default=math.nan)


def case_bytes_written(op_name: str, strategy: str, params_json: str, dtype: str, mode: str) -> int | None:
    """The bytes a case writes in its mode (``training.bytes_written``: the
    outputs, the gradient, or both); None where the operator does not split
    its bytes, or this checkout does not know the operator or strategy (an
    older run's, a plugin not loaded)."""
    return _bytes_written(op_name, strategy, params_json, dtype, mode)


@functools.lru_cache(maxsize=4096)  # a report reads thousands of rows of a few hundred cases
def _bytes_written(op_name: str, strategy: str, params_json: str, dtype: str, mode: str) -> int | None:
    import json

    from impls import training
    from impls.backends import itemsize
    from impls.registry import get_operator

    try:
        op = get_operator(op_name)
        return training.bytes_written(op, json.loads(params_json), itemsize(dtype), mode,
                                      op.strategies[strategy].returns)
    except (KeyError, ValueError):
        return None


def fresh_floor(op_name: str, strategy: str, params: dict, dtype: str, device: str, mode: str, row,
                fresh_write_gbps: dict | None) -> dict:
    """A CPU row's fresh-output-aware floor and the median's % of it
    (``fresh_floor_s``), at the best fresh-write bandwidth the run measured
    over the allocators (``best_fresh_write_gbps``), in the case's mode
    (``case_bytes_written``); NaN on other devices (their floor is the
    copy's), where the operator does not split its bytes, where nothing was
    measured, and for an operator or strategy this checkout does not know.
    The sweep stores it with each row; a run read back gets it again from
    its stored figures (store.derive_older)."""
    empty = {"fresh_floor_s": math.nan, "pct_of_fresh_floor": math.nan}
    fresh = best_fresh_write_gbps(fresh_write_gbps)
    if device != "cpu" or not math.isfinite(fresh):
        return empty
    import json

    written = case_bytes_written(op_name, strategy, json.dumps(params, sort_keys=True), dtype, mode)
    if written is None:
        return empty
    # An isolated case's row comes back through JSON: its empty numbers are None.
    number = {key: (row.get(key) if isinstance(row.get(key), (int, float)) else math.nan)
              for key in ("bytes", "ceiling_gbps", "median_s")}
    floor = fresh_floor_s(number["bytes"], written, number["ceiling_gbps"], fresh)
    return {"fresh_floor_s": floor, "pct_of_fresh_floor": pct_of_floor(floor, number["median_s"])}


def pct_of_floor(floor: float, median_s: float) -> float:
    """How close a median came to a floor time, in % (100: at the floor)."""
    return 100.0 * floor / median_s if median_s > 0 and math.isfinite(floor) else float("nan")


def smallest_p(n_base: int, n_new: int) -> float:
    """The smallest two-sided p-value the exact Mann–Whitney test can give
    for these sample counts (complete separation): 2 / C(n+m, n). With 5 and
    5 samples it is 0.0079, so no p below 0.002 can ever be reached."""
    if not (n_base and n_new):
        return 1.0
    arrangements = math.comb(n_base + n_new, n_base)
    return min(1.0, 2.0 / arrangements) if arrangements < 1e300 else 0.0  # thousands of samples: no float holds it


def separated(base_s, new_s) -> int:
    """+1 when every new sample is above every base sample, -1 when every one
    is below, else 0: the strongest evidence of a shift a rank test can see."""
    base, new = np.asarray(base_s, float), np.asarray(new_s, float)
    if base.size == 0 or new.size == 0:
        return 0
    if new.min() > base.max():
        return 1
    if new.max() < base.min():
        return -1
    return 0


# Up to this many samples on the smaller side, the p-value comes from the exact null
# distribution even where two samples tie (the clock's last digit). scipy's "auto" takes the
# normal approximation at the first tie, and with few samples a side it is far off in the tail:
# 3 samples above all 125 of the baseline (one tie among them) gave 0.0032, not the exact
# 6e-6, so the CI gate's screen passed a planted 3x slowdown that a raced run had sampled 3
# times. Ties among float timings are rare, and the exact test then only errs a little high.
EXACT_MANN_WHITNEY_UP_TO = 8


def mann_whitney_p(base_s, new_s) -> float:
    """Two-sided Mann–Whitney U p-value: do the two sample sets differ in location?"""
    base, new = np.asarray(base_s, float), np.asarray(new_s, float)
    if base.size == 0 or new.size == 0:
        return float("nan")
    if np.all(base == base[0]) and np.all(new == new[0]) and base[0] == new[0]:
        return 1.0
    from scipy import stats as scipy_stats

    method = "exact" if min(base.size, new.size) <= EXACT_MANN_WHITNEY_UP_TO else "auto"
    return float(scipy_stats.mannwhitneyu(base, new, alternative="two-sided", method=method).pvalue)


def typical_s(samples, statistic: str = "median") -> float:
    import numpy as np

    values = np.asarray(samples, dtype=float)
    return float(np.median(values) if statistic == "median" else np.percentile(values, 10))
