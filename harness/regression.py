"""The one regression rule, used by ``compare`` (and so the CI gate) and the
dashboard.

A case regresses when its typical time (the median; the gate uses the 10th
percentile, see harness/gate.py) grew by more than ``factor`` *and* a
Mann–Whitney U test on the raw samples says the shift is real (p < ``alpha``):
the ratio guards against flagging tiny real changes, the test against
flagging noise. With few samples (5 or 6 a side: a slow case in a 0.5 s
budget) the test cannot reach ``alpha`` at all, and a 3x slowdown would pass
as "same"; there the rule asks for what the test would say at its strongest,
every sample of one run beyond every sample of the other. A case that was
correct and now fails its check is broken.

Whether two runs are fit to be judged at all (`unfit_reasons`: same CPU, a
machine not shared, steady timings) is decided here too, for the dashboard,
which cannot re-measure a suspect as the CI gate does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from harness import env, stats
from impls.status import CORRECT

DEFAULT_FACTOR = 1.10
DEFAULT_ALPHA = 0.002

REGRESSED, IMPROVED, SAME, BROKEN, FIXED, NOT_TIMED = "regressed", "improved", "same", "broken", "fixed", "not timed"
ONLY_IN_BASE, ONLY_IN_NEW = "only in base", "only in new"
# Verdicts that fail the gate.
FAILING = (REGRESSED, BROKEN)


STATISTICS = ("median", "p10")

# A run more than this share of whose timed cases are unstable (IQR above
# stats.UNSTABLE_REL_IQR of the median) is not fit to judge on wall time. Measured over
# the committed results: quiet runs had 0-21 % of their cases unstable, the two
# default runs taken on a busy VM 56 %, a baseline taken under load 79 %.
MAX_UNSTABLE_SHARE = 0.25

# Instruction counts (Callgrind, the counting gate) are deterministic: they are
# judged by their ratio alone, past this factor, and only between runs on the
# same CPU with the same library versions.
COUNT_METRICS = ("instructions", "est_cycles")
COUNT_FACTOR = 1.03


@dataclass(frozen=True)
class Rule:
    factor: float = DEFAULT_FACTOR
    alpha: float = DEFAULT_ALPHA
    # "median", or "p10": the 10th percentile, which load from other
    # processes moves far less than the median (it only ever adds time).
    statistic: str = "median"

    def __post_init__(self):
        if not (isinstance(self.factor, (int, float)) and math.isfinite(self.factor) and self.factor > 1):
            raise ValueError(f"--factor {self.factor}: must be a finite number > 1")
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha < 1):
            raise ValueError(f"--alpha {self.alpha}: must be in (0, 1)")
        if self.statistic not in STATISTICS:
            raise ValueError(f"statistic {self.statistic!r}: expected one of {', '.join(STATISTICS)}")

    def typical(self, samples) -> float:
        return typical_s(samples, self.statistic)


def typical_s(samples, statistic: str = "median") -> float:
    import numpy as np

    values = np.asarray(samples, dtype=float)
    return float(np.median(values) if statistic == "median" else np.percentile(values, 10))


@dataclass(frozen=True)
class Change:
    verdict: str
    base_s: float = math.nan
    new_s: float = math.nan
    ratio: float = math.nan
    p_value: float = math.nan


def status_change(base_status: str, new_status: str) -> str | None:
    """BROKEN / FIXED / NOT_TIMED from the two statuses, or None when both are correct."""
    base_ok, new_ok = base_status in CORRECT, new_status in CORRECT
    if base_ok and not new_ok:
        return BROKEN
    if new_ok and not base_ok:
        return FIXED
    if not (base_ok or new_ok):
        return NOT_TIMED
    return None


def timing_change(base_samples, new_samples, rule: Rule) -> Change:
    """The verdict on two sets of raw samples of one case."""
    if not len(base_samples) or not len(new_samples):
        raise ValueError("no samples to compare")
    base_s, new_s = rule.typical(base_samples), rule.typical(new_samples)
    ratio = new_s / base_s if base_s > 0 else math.inf
    p_value = stats.mann_whitney_p(base_samples, new_samples)
    if stats.smallest_p(len(base_samples), len(new_samples)) >= rule.alpha:
        shift = stats.separated(base_samples, new_samples)  # too few samples for the test to reach alpha
    else:
        shift = 1 if p_value < rule.alpha and ratio > 1 else -1 if p_value < rule.alpha else 0
    verdict = SAME
    if ratio > rule.factor and shift > 0:
        verdict = REGRESSED
    elif ratio < 1 / rule.factor and shift < 0:
        verdict = IMPROVED
    return Change(verdict, base_s, new_s, ratio, p_value)


def judge_change(base_status: str, new_status: str, base_samples, new_samples, rule: Rule) -> Change:
    by_status = status_change(base_status, new_status)
    if by_status:
        return Change(by_status)
    if not base_samples or not new_samples:
        return Change(NOT_TIMED)
    return timing_change(base_samples, new_samples, rule)


def unfit_reasons(base_meta: dict, base_rows, new_meta: dict, new_rows, metric: str = "time") -> list[str]:
    """Why the change between two runs cannot be judged on ``metric`` ("time",
    or one of COUNT_METRICS), as short phrases; empty when both runs are fit.

    Wall time is judged only between runs on the same CPU (`env.same_machine`),
    each with its peak 1-minute load below its core count (another process
    competed with the timed calls otherwise; a run that recorded no load is
    not known to be quiet) and at most MAX_UNSTABLE_SHARE of its timed cases
    unstable. Counts do not see load; they are judged between runs on the
    same CPU with the same library versions. ``*_rows`` are the runs' result
    rows (status, median_s, iqr_s, load_avg)."""
    reasons = []
    if not env.same_machine(base_meta, new_meta):
        labels = env.machine_label(base_meta), env.machine_label(new_meta)
        reasons.append("different CPU" + (f" ({labels[0]} → {labels[1]})" if labels[0] != labels[1] else ""))
    if metric in COUNT_METRICS:
        base_versions, new_versions = base_meta.get("versions") or {}, new_meta.get("versions") or {}
        changed = [f"{name} {base_versions.get(name)} → {new_versions.get(name)}"
                   for name in sorted(set(base_versions) | set(new_versions))
                   if base_versions.get(name) != new_versions.get(name)]
        if changed:
            reasons.append("different library versions (" + ", ".join(changed) + ")")
        return reasons
    for side, meta, rows in (("base", base_meta, base_rows), ("new", new_meta, new_rows)):
        where = "" if side == "new" else " (base)"
        # The highest 1-minute load average recorded: at the start, at the end, or when a case finished.
        loads = [meta[key][0] for key in ("load_avg_start", "load_avg_end") if isinstance(meta.get(key), list)
                 and meta[key]]
        loads += list(rows["load_avg"].to_numpy(float)) if "load_avg" in rows else []
        loads = [float(v) for v in loads if isinstance(v, (int, float)) and math.isfinite(v)]
        peak = max(loads) if loads else None
        cores = (meta.get("hardware") or {}).get("cpu_count") or meta.get("cpu_count")
        if peak is None:
            reasons.append(f"load not recorded{where}")
        elif cores and peak >= cores:
            reasons.append(f"load {peak:.2g} on {cores} cores{where}")
        medians, iqrs = rows["median_s"].to_numpy(float), rows["iqr_s"].to_numpy(float)
        timed = [index for index, status in enumerate(rows["status"]) if status in CORRECT and medians[index] > 0]
        unstable = sum(stats.is_unstable(iqrs[index], medians[index]) for index in timed)
        if timed and unstable > MAX_UNSTABLE_SHARE * len(timed):
            reasons.append(f"{unstable} of {len(timed)} unstable{where}")
    return reasons
