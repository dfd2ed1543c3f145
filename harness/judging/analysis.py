"""The analysis layer: measured rows turned into judgements, each decided here once.

- **Ranking**: which rows are timed (`timed`: correct, with a finite,
  positive median), which may be called fastest (exact, timed, returning the
  operator's whole output), the fastest of a case (`answer`; a counting
  run's fewest instructions, `fewest_counted`), speedups over the seed's
  original (the operator's baseline), and when the data supports "A is faster
  than B" at all (`clearly_faster`: the per-round ratios of their medians,
  SPEC 3 "Rounds"; the quartiles for a run that stored no rounds), and so
  the ties, which name every strategy the winner does not clearly beat.
- **Flags**: unstable, slow start, timer disagreement, inexact, a busy machine
  or a low ceiling; each with its threshold, its marks and the sentence that
  explains it; and whether two stored runs are fit to be judged against
  each other at all (`unfit_reasons`: the dashboard's red needs it).
- **Regression verdicts**: the gate's rule lives in :mod:`harness.judging.regression`
  and is re-exported here, so that every reader of results (the CLI tables,
  the report, the dashboard, ``scatterbench.bench``) imports one module.

Nothing here prints or draws; the terminal tables (``harness.presenting.tables``), the
report (``harness.presenting.report``) and the dashboard render what this module decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from harness.base.cases import CASE_GROUP, mode_and_layout, with_case_columns
from harness.base.config import MIN_ROUNDS  # a pair is judged on its rounds from this many
from harness.base.format import fmt_time, params_label
from harness.judging.regression import (  # noqa: F401  (re-exported)
    DEFAULT_ALPHA,
    DEFAULT_FACTOR,
    FAILING,
    STATISTICS,
    Rule,
)
from harness.measuring import facts
from harness.results import metrics, racing, runmeta, stats
from harness.results.runmeta import record
from impls.registry import OPERATORS
from impls.status import CORRECT, INEXACT, OK


# ------------------------------------------------------------------ flags
@dataclass(frozen=True)
class Flag:
    """A property of a measurement a reader must see: its mark in the report
    and the dashboard (``mark``), its mark in a terminal table (``ascii``:
    one cell wide in any terminal) and the sentence that explains it."""
    name: str
    mark: str
    ascii: str
    meaning: str


# The IQR beyond which a case's timing is called unstable: torch.utils.benchmark
# warns at the same 10 % of the median.
UNSTABLE_REL_IQR = 0.10
# Our device-timer median against an independent timer's (CUDA: triton's do_bench):
# beyond this relative difference the case's time is uncertain beyond its IQR.
XCHECK_TOLERANCE = 0.05
# A run's ceiling this far below the median of earlier runs on the machine: busy or throttled;
# this far above: a lucky try, or not the machine its history is (ceiling_rose).
CEILING_DROP_PCT = 20.0

UNSTABLE = Flag("unstable", "⚠", "!",
                f"the IQR (within a round, where the case took rounds) exceeds {100 * UNSTABLE_REL_IQR:.0f} % of the median (the threshold at which "
                f"torch.utils.benchmark warns): the machine was busy or the case is noisy, so compare it with care")
TIMERS_DISAGREE = Flag("timers disagree", "⚠", "!",
                       f"the suite's CUDA-event median and triton.testing.do_bench's median (an independent timer) "
                       f"differ by more than {100 * XCHECK_TOLERANCE:.0f} %, so this case's time is uncertain "
                       f"beyond its IQR")
SLOW_START = Flag("slow start", "·", ".",
                  f"the first samples, each over {stats.SLOW_START_FACTOR:g}× the median, were dropped like "
                  f"warm-up and counted in the slow_start column")
INEXACT_FLAG = Flag(INEXACT, INEXACT, "~",
                    "over the dtype's rounding bound but under the wrong-answer bound: reported and timed, "
                    "never ranked fastest")
BEST_MARK = "*"  # beside the bold, which a log or a pipe does not show
PARTIAL_MARK = "(part)"


def is_unstable(iqr_s: float, median_s: float) -> bool:
    """An IQR beyond UNSTABLE_REL_IQR of the median."""
    rel = stats.rel_iqr(iqr_s, median_s)
    return math.isfinite(rel) and rel > UNSTABLE_REL_IQR


def unstable(row) -> bool:
    """Whether a row was measured unsteadily: within its rounds where it took them (stats.steadiness_iqr_s)."""
    return is_unstable(stats.steadiness_iqr_s(row), row["median_s"])


def slow_started(row) -> bool:
    value = row.get("slow_start", 0) if hasattr(row, "get") else 0
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def xcheck_ratio(row) -> float:
    """Our median over the independent timer's (CUDA rows; NaN elsewhere)."""
    ours, theirs = row.get("median_s", math.nan), row.get("xcheck_s", math.nan)
    return ours / theirs if finite(ours) and finite(theirs) and theirs > 0 else math.nan


def timers_disagree(row) -> bool:
    ratio = xcheck_ratio(row)
    return math.isfinite(ratio) and abs(ratio - 1) > XCHECK_TOLERANCE


def timer_disagreement(row) -> str:
    """The disagreement in words, or "" where the timers agree or one is missing."""
    if not timers_disagree(row):
        return ""
    ours, theirs = row["median_s"], row["xcheck_s"]
    return (f"timers disagree: median {fmt_time(ours)}, triton.testing.do_bench {fmt_time(theirs)} "
            f"({100 * (ours / theirs - 1):+.0f} %)")


def cores(meta) -> int | None:
    run = record(meta)
    count = run.hardware.cpu_count or run.cpu_count
    return int(count) if finite(count) and count > 0 else None


def first_load(value) -> float | None:
    """The 1-minute figure of a recorded load average ([1, 5, 15] minutes; as
    `RunMeta.load_avg_start` types it, None where the file held another shape)."""
    return float(value[0]) if value and finite(value[0]) else None


def busy(load: float | None, meta: dict) -> bool:
    """Other work competed with the timed calls: a 1-minute load at or above the core count."""
    return facts.at_capacity(load, cores(meta))


# The fitness rule in words, for every page that states it (`run_unfit_reasons` decides it).
FITNESS_RULE = ("a 1-minute load at or above the core count at the start, at the end or when a case finished, "
                "or a copy ceiling or bandwidth curve measured busy")


def unfit_reasons(base_meta: dict, base_rows: pd.DataFrame, new_meta: dict, new_rows: pd.DataFrame,
                  metric: str = "time") -> list[str]:
    """Why the change between two runs cannot be judged on ``metric``
    ("time", or one of metrics.COUNTS), as short phrases; empty
    when both runs are fit. What the dashboard asks of a pair of stored runs
    before it calls a change red, since it cannot re-measure as the CI gate does.

    Wall time is judged only between runs on the same CPU (`runmeta.same_machine`), at the same
    thread setting and under the same timing protocol (`runmeta.unlike_settings`: another setting
    measures another thing), neither of them `busy` at its peak 1-minute load (at its start, at its end,
    or when any case finished; a run that recorded none is not known to be
    quiet), nor measured its ceiling or curves busy (`run_unfit_reasons`). Counts do not see load: they are judged between runs on the
    same CPU counted with the same tool-and-library versions (``count_versions``). ``*_rows``: the runs' rows
    (status, median_s, iqr_s, load_avg)."""
    reasons = []
    if not runmeta.same_machine(base_meta, new_meta):
        labels = runmeta.machine_label(base_meta), runmeta.machine_label(new_meta)
        reasons.append("different CPU" + (f" ({labels[0]} → {labels[1]})" if labels[0] != labels[1] else ""))
    if metric != "time":
        changed = runmeta.version_changes(base_meta.get("count_versions"), new_meta.get("count_versions"))
        return reasons + (["different library versions (" + ", ".join(changed) + ")"] if changed else [])
    reasons += runmeta.unlike_settings(base_meta, new_meta)
    for meta, rows, where in ((base_meta, base_rows, " (base)"), (new_meta, new_rows, "")):
        reasons += [reason + where for reason in run_unfit_reasons(meta, rows)]
    return reasons


def run_unfit_reasons(meta: dict, rows: pd.DataFrame) -> list[str]:
    """Why one run's wall times cannot be stood behind, as short phrases;
    empty when it is fit. The one fitness rule of every judge of wall time
    (the dashboard's red, the report's answers, winners, speed-ups, flips and
    % of ceiling, ``make publish``, `run`'s tables, ``bench()``'s speed-ups).
    Fitness judges the machine; the race judges each point (SPEC 3
    "Racing": a point whose rounds stay noisy gets more of them, and is
    undecided if they do not settle). A run is unfit when the machine was
    busy: its peak 1-minute load (at its start, at its end, or when any case
    finished) at or above its core count (`busy`; a run that recorded no
    load is not known to be quiet), or its copy ceiling or bandwidth curves
    measured busy. Noisy small cases do not make a run unfit; their points
    say how well their rounds decided. ``rows``: the run's rows (load_avg).
    A counting run (no times) is judged by `unfit_reasons` with its metric instead."""
    run = record(meta)
    loads = [first_load(run.load_avg_start), first_load(run.load_avg_end)]
    loads += rows["load_avg"].to_numpy(float).tolist() if "load_avg" in rows else []
    loads = [load for load in loads if load is not None and math.isfinite(load)]
    peak = max(loads) if loads else None
    reasons = []
    if peak is None:
        reasons.append("load not recorded")
    elif busy(peak, meta):
        reasons.append(f"load {peak:.2g} on {cores(meta)} cores")
    ceiling_busy = meta.get("ceiling_busy") if isinstance(meta, dict) else None
    if isinstance(ceiling_busy, dict) and ceiling_busy:
        reasons += [f"{device} ceiling measured busy ({why})" for device, why in sorted(ceiling_busy.items())]
    curves = meta.get("bandwidth_curves") if isinstance(meta, dict) else None
    if isinstance(curves, dict):
        reasons += [f"{device} curves measured busy ({curve['busy']})" for device, curve in sorted(curves.items())
                    if isinstance(curve, dict) and curve.get("busy")]
    return reasons


def ceiling_dropped(entry) -> bool:
    """A ceiling-history entry (meta ``ceiling_history[device]``) more than CEILING_DROP_PCT below its history."""
    deviation = entry.get("deviation_pct") if isinstance(entry, dict) else None
    return finite(deviation) and deviation < -CEILING_DROP_PCT


def ceiling_rose(entry) -> bool:
    """A ceiling-history entry more than CEILING_DROP_PCT above its history:
    a lucky try, or another machine under the same name (run 450c's 52.5 GB/s,
    +56 %, priced its rows 36 % below rows measured beside them)."""
    deviation = entry.get("deviation_pct") if isinstance(entry, dict) else None
    return finite(deviation) and deviation > CEILING_DROP_PCT


# ------------------------------------------------------------------ ranking
def strategy(op: str, name: str):
    """The registered strategy, or None (a removed strategy, an unloaded plugin's)."""
    return OPERATORS[op].strategies.get(name) if op in OPERATORS else None


def partial_output(op: str, name: str) -> bool:
    """Whether ``name`` returns less than its operator's whole output (never ranked fastest)."""
    return op in OPERATORS and OPERATORS[op].partial(name)


def whole_output(op: str) -> str | None:
    return OPERATORS[op].whole_output if op in OPERATORS else None


def is_builtin(op: str, name: str) -> bool:
    found = strategy(op, name)
    return bool(found and found.builtin)


def is_baseline(op: str, name: str) -> bool:
    found = strategy(op, name)
    return bool(found and found.baseline)


def baseline_name(op: str) -> str | None:
    return OPERATORS[op].baseline if op in OPERATORS else None


def timed(rows: pd.DataFrame) -> pd.Series:
    """Which rows are correct and timed, as a mask over ``rows``: a status
    in CORRECT (the answer is the operator's, exact or within tolerance) and
    a finite, positive median. The one rule of what may be compared,
    averaged, ranked or drawn as a time (the unstable flags,
    the gates' screen, the normalised comparison, the answer, the figures):
    a failed row, a counting run's row (counts, no times) and a row whose
    time was withheld are not timed."""
    median = pd.to_numeric(rows["median_s"], errors="coerce")
    return rows["status"].isin(CORRECT) & np.isfinite(median) & (median > 0)


def rankable(rows: pd.DataFrame) -> pd.Series:
    """Rows that may be called fastest: exact (status ok, not merely inexact),
    timed, and returning the operator's whole output."""
    if rows.empty:
        return pd.Series(False, index=rows.index)
    whole = ~rows.apply(lambda r: partial_output(r["op"], r["strategy"]), axis=1).astype(bool)
    return timed(rows) & (rows["status"] == OK) & whole


def ranked(case: pd.DataFrame) -> pd.DataFrame:
    """One case's rankable rows, fastest first (ties keep the rows' order)."""
    return case[rankable(case)].sort_values("median_s", kind="stable")


def partial_rows(case: pd.DataFrame) -> pd.DataFrame:
    """The exact, timed rows left out of the ranking for returning less than the whole output."""
    exact = case[timed(case) & (case["status"] == OK)]
    return exact[exact.apply(lambda r: partial_output(r["op"], r["strategy"]), axis=1).astype(bool)] \
        if len(exact) else exact


def case_keys(rows: pd.DataFrame) -> list[str]:
    """What makes one case's group (`CASE_GROUP`), and the machine where rows come from several."""
    return CASE_GROUP + (["machine"] if "machine" in rows.columns else [])


def contradictions(first: pd.DataFrame, second: pd.DataFrame) -> list[tuple[tuple, str, str, str]]:
    """The A/A test of two runs of one config on one machine (SPEC 3
    "Rounds"): every case where one run's clear winner (`answer`) is clearly
    slower (`clearly_faster`) than another strategy in the other run, as
    (case key, which run named the winner: "first" or "second", the winner,
    the strategy clearly faster than it in the other run). Empty when the two
    runs never contradict each other; a tie in either run is no claim."""
    found = []
    first, second = with_case_columns(first), with_case_columns(second)
    seconds = {key: group for key, group in second.groupby(CASE_GROUP, sort=False)}
    for key, mine in first.groupby(CASE_GROUP, sort=False):
        theirs = seconds.get(key)
        if theirs is None:
            continue
        for named, claimed, other in (("first", mine, theirs), ("second", theirs, mine)):
            found_answer = answer(claimed)
            if found_answer is None or not found_answer.clear:
                continue
            winner = str(found_answer.best["strategy"])
            order = ranked(other)
            there = order[order["strategy"] == winner]
            if there.empty:
                continue
            for _, rival in order.iterrows():
                if rival["strategy"] != winner and clearly_faster(rival, there.iloc[0]):
                    found.append((key, named, winner, str(rival["strategy"])))
                    break
    return found


def with_speedups(rows: pd.DataFrame) -> pd.DataFrame:
    """Adds ``speedup`` over the operator's baseline (the seed's original
    strategy) measured in the same case, on the same machine where the rows
    come from several; NaN where the baseline was not measured correct."""
    rows = with_case_columns(rows).copy()
    rows["speedup"] = math.nan
    if rows.empty:
        return rows
    for _, group in rows.groupby(case_keys(rows), sort=False):
        base = group[(group["strategy"] == baseline_name(group["op"].iloc[0])) & group["status"].isin(CORRECT)]
        if len(base):
            seed = base.iloc[0]
            rows.loc[group.index, "speedup"] = [ratio(row, seed) for _, row in group.iterrows()]
    return rows


def _value(row, column: str) -> float:
    value = row.get(column, math.nan) if hasattr(row, "get") else math.nan
    return float(value) if finite(value) else math.nan


def spread(row) -> tuple[float, float]:
    """(low, high) of a row's time: the first and third quartiles of its
    samples, which rows store since schema 3 (``q1_s``, ``q3_s``). What the
    tie rule (`clearly_faster`) compares and the figures' error bars draw. On
    a skewed sample median ± IQR/2 reached below the fastest sample (a bar to
    about 20 µs for a strategy whose fastest sample took 185 µs); a quartile
    cannot. Rows written before the quartiles were stored fall back to
    median ± IQR/2, clipped to their fastest and slowest samples where known,
    so it never claims a time no sample took; the median alone where nothing
    is known, or where the fallback reaches zero, which no time axis can show."""
    median = _value(row, "median_s")
    q1, q3 = _value(row, "q1_s"), _value(row, "q3_s")
    if not (math.isfinite(q1) and math.isfinite(q3)):
        iqr = _value(row, "iqr_s")
        half = iqr / 2 if math.isfinite(iqr) else 0.0
        q1, q3 = median - half, median + half
    fastest, slowest = _value(row, "min_s"), _value(row, "max_s")
    if math.isfinite(fastest):
        q1 = max(q1, fastest)
    if math.isfinite(slowest):
        q3 = min(q3, slowest)
    q1, q3 = min(q1, median), max(q3, median)
    return (q1 if q1 > 0 else median), q3


# The rules a pair of rows may be judged by: the race's (SPEC 3 "Racing", rows with a decision:
# harness/results/racing.py), and the rules of older runs, which keep theirs: the agreement of
# their rounds beyond their spread (schema 7-9), the quartiles (before rounds).
RACING_RULE, ROUNDS_RULE, QUARTILE_RULE = "racing", "rounds", "Q1–Q3"
# What each of the race's decisions means, for every legend (harness/results/racing.py).
DECISIONS = racing.DECISIONS
FASTER, EQUIVALENT, UNDECIDED, SLOWER = racing.FASTER, racing.EQUIVALENT, racing.UNDECIDED, racing.SLOWER


def raced(row) -> bool:
    """The row was timed in a race (schema 10): it carries its decision."""
    value = row.get("decision", "") if hasattr(row, "get") else ""
    return isinstance(value, str) and value in racing.DECISIONS


def equivalence_of(row) -> float:
    """The equivalence margin the row's race was judged with."""
    value = _value(row, "equivalence")
    return value if math.isfinite(value) and value > 0 else racing.DEFAULT_EQUIVALENCE


def race_verdict(fast, slow) -> str:
    """What the race's rule says of ``slow`` against ``fast`` (both raced
    rows of one point) over the rounds both ran, at the noise and margin
    their race judged by: racing.SLOWER, FASTER, EQUIVALENT or UNDECIDED."""
    noise = _value(fast, "round_noise")
    noise = noise if math.isfinite(noise) and noise > 0 else racing.PRIOR_NOISE
    return racing.pair_decision(racing.log_ratios(round_medians(fast), round_medians(slow)), noise,
                                equivalence_of(fast))


def ratio(fast, slow) -> float:
    """How many times slower ``slow`` is than ``fast``: the one factor every
    reader prints (× seed, × built-in, the runner-up's lead, ``speedup``).
    The median of their per-round ratios over the rounds both ran (SPEC 3:
    decided from the per-round ratios of their medians, and so always inside
    its own `ratio_interval`); the ratio of their medians for rows without
    two common rounds (a run before rounds)."""
    logs = racing.log_ratios(round_medians(fast), round_medians(slow))
    if logs.size >= MIN_ROUNDS and np.isfinite(logs).all():
        return float(np.exp(np.median(logs)))
    return float(slow["median_s"]) / float(fast["median_s"])


def ratio_interval(fast, slow) -> tuple[float, float] | None:
    """(lowest, highest) of slow's per-round ratio to fast over the rounds both
    ran: the interval every printed ratio carries ("8.9× (7.1–10.4)"); None
    where either stored no rounds."""
    ratios = np.exp(racing.log_ratios(round_medians(fast), round_medians(slow)))
    if ratios.size == 0 or not np.isfinite(ratios).all():
        return None
    return float(ratios.min()), float(ratios.max())


def round_medians(row) -> list[float]:
    """A row's per-round medians (``round_medians_s``); [] for a row written
    before rounds were stored (schema < 7), or one not timed."""
    return stats.round_medians(row.get("round_medians_s", "") if hasattr(row, "get") else "")


def round_ratios(fast, slow) -> list[float] | None:
    """slow's median over fast's, round by round (round i of both was taken
    in the same stretch of the run, in a random order); None unless both
    rows have the same number of rounds, at least MIN_ROUNDS."""
    a, b = round_medians(fast), round_medians(slow)
    if len(a) < MIN_ROUNDS or len(a) != len(b):
        return None
    return [second / first for first, second in zip(a, b)]


def rule_basis(fast, slow) -> str:
    """Which rule `clearly_faster` decides this pair by: RACING_RULE for two
    raced rows; an older run keeps its own: ROUNDS_RULE, or QUARTILE_RULE
    for rows that stored no rounds (a run before schema 7)."""
    if raced(fast) and raced(slow):
        return RACING_RULE
    return ROUNDS_RULE if round_ratios(fast, slow) is not None else QUARTILE_RULE


def rounds_agree(ratios) -> bool:
    """The rounds' ratios (slow over fast) say fast is faster beyond their
    own spread: in logs, their median exceeds their range (max - min). That
    implies every round agrees (the smallest ratio is above 1 by more than
    the largest is above the median), and asks more of rounds that scatter:
    ratios 1.05, 1.10, 1.30 agree in direction but scatter by more than
    their median's lead, and are a tie. Three rounds of two equal strategies
    (log ratios iid normal) pass it 4.4 % of the time in a given direction,
    against 12.5 % for "all rounds agree" alone."""
    logs = np.log(np.asarray(ratios, dtype=float))
    if logs.size == 0 or not np.isfinite(logs).all():
        return False
    return float(np.median(logs)) > float(logs.max() - logs.min())


def clearly_faster(fast, slow) -> bool:
    """The data supports "fast is faster than slow": the one rule of
    "inconclusive" (the answer table's ties, the conclusions, the ranking
    flips, the mode check and ``bench()``). The gates and the dashboard's
    red ask another question, "slower than the base run by more than the
    factor", from the rounds too: each round's change must pass the factor
    (`wall_gate.settle`).

    Rows with rounds (SPEC 3): the per-round ratios of their medians agree
    beyond their own spread (`rounds_agree`); round i of both rows was taken
    in the same stretch of the run, so a slow period, or a slow state set
    when a round prepared its strategies, moves both and cancels in the
    ratio. Their pooled quartiles are not asked too: a slow third of a run
    widens every strategy's Q1–Q3 until they overlap, which is the drift
    the rounds see through. Rows of an older run, which stored no rounds,
    fall back to the quartiles (fast's Q1–Q3 wholly below slow's, `spread`;
    `rule_basis` says which rule decided). Raced rows (SPEC 3 "Racing") are
    judged by the race's rule (`race_verdict`): slow is shown slower."""
    if rule_basis(fast, slow) == RACING_RULE:
        return race_verdict(fast, slow) == racing.SLOWER
    ratios = round_ratios(fast, slow)
    if ratios is None:
        return spread(fast)[1] < spread(slow)[0]
    return rounds_agree(ratios)


def tie_reason(fast, slow) -> str:
    """Why fast is not clearly faster than slow, in a phrase for a cell or a note."""
    if rule_basis(fast, slow) == RACING_RULE:
        rounds = len(racing.log_ratios(round_medians(fast), round_medians(slow)))
        if race_verdict(fast, slow) == racing.EQUIVALENT:
            return f"equivalent: within ±{equivalence_of(fast):.0%} over {rounds} rounds"
        return f"undecided after {rounds} rounds"
    ratios = round_ratios(fast, slow)
    if ratios is None:
        return "their Q1–Q3 ranges overlap (no rounds stored: the older quartile rule)"
    shown = ", ".join(f"{ratio:.2f}" for ratio in ratios)
    return f"the per-round ratios {shown} do not agree beyond their spread"


def inexact(row) -> bool:
    return row["status"] == INEXACT


# ------------------------------------------------------------------ the modes
PART_FASTER = Flag("faster than its part", "⚠", "!",
                   "forward+backward ran faster than its forward or its backward alone, beyond their spreads "
                   "(analysis.clearly_faster): a step cannot cost less than a part of it, so one of the timings is not "
                   "of the work it claims (work skipped, a result kept between calls, a noisy part)")


def training_faster_than_parts(rows: pd.DataFrame) -> list[dict]:
    """The forward+backward rows clearly faster (`clearly_faster`, the one
    rule) than their own forward or backward row (same operator, strategy,
    device, dtype and parameters; the same machine where rows come from
    several): one dict per such pair, with the keys, ``part`` (the mode it
    beats) and both medians, for the flag ``PART_FASTER``."""
    from impls.training import BACKWARD, FORWARD, FORWARD_BACKWARD

    rows = with_case_columns(rows)
    keys = ["op", "strategy", "device", "dtype", "params", "layout"] + (["machine"] if "machine" in rows.columns
                                                                         else [])
    found = []
    for key, group in rows[timed(rows)].groupby(keys, sort=False, observed=True):
        by_mode = {mode: group[group["mode"] == mode] for mode in (FORWARD, BACKWARD, FORWARD_BACKWARD)}
        if by_mode[FORWARD_BACKWARD].empty:
            continue
        step = by_mode[FORWARD_BACKWARD].iloc[0]
        for part in (FORWARD, BACKWARD):
            if by_mode[part].empty:
                continue
            alone = by_mode[part].iloc[0]
            if clearly_faster(step, alone):
                found.append({**dict(zip(keys, key)), "part": part, "step_s": float(step["median_s"]),
                              "part_s": float(alone["median_s"])})
    return found


# ------------------------------------------------------------------ the answer
@dataclass(frozen=True)
class Answer:
    """One case's answer to the suite's question on one machine: the fastest
    rankable strategy (a row), and how much faster it is than the seed's
    original and than the fastest library built-in (NaN where either was not
    measured correct, 1.0 where the fastest is that strategy itself)."""
    best: pd.Series
    over_seed: float
    over_builtin: float
    builtin: str | None  # the fastest correct built-in's name
    # The first strategy ``best`` does not clearly beat (`clearly_faster`), else the next one.
    runner_up: pd.Series | None = None
    # Whether some rankable strategy is not clearly beaten by ``best``: a tie, named as such, never a win.
    tie: bool = False
    tied: tuple = ()  # every rankable strategy ``best`` does not clearly beat, fastest first
    unclear: str = ""  # why no win can be claimed whatever the times (timers disagree, incomplete)
    basis: str = ROUNDS_RULE  # the rule the pairs were judged by (QUARTILE_RULE: a run without rounds)
    # (lowest, highest) per-round ratio behind each factor (`ratio_interval`); None without rounds
    seed_interval: tuple | None = None
    builtin_interval: tuple | None = None
    # Of a tie judged by the race: the tied strategies shown equivalent to ``best``; the rest are undecided.
    equivalent: tuple = ()

    @property
    def outcome(self) -> str:
        """FASTER (a clear win), EQUIVALENT (every tied strategy within the
        margin: either will do) or UNDECIDED (the rounds could not tell);
        "tie" for a tie judged by an older run's rule, which cannot say which."""
        if not self.tie:
            return FASTER
        if self.basis != RACING_RULE:
            return "tie"
        return EQUIVALENT if set(self.equivalent) == set(self.tied) else UNDECIDED

    @property
    def clear(self) -> bool:
        """A clear win: no tie, nothing that forbids one. Only a clear win prints a speed-up."""
        return not self.tie and not self.unclear


def incomplete(case: pd.DataFrame, planned=None) -> list[str]:
    """The strategies the case's benchmark meant to time (``planned``: the
    names it selects here, `planned_strategies`) that have no row: a run that
    ended before them (the H200 run whose GPU window closed after 3 of 7), so
    any of them might have won. A row that failed (error, timeout, mismatch)
    is not missing: it was run, and a strategy that raises, runs past its
    limit or answers wrongly is no contender; the answer's tables show why."""
    if planned is None:
        return []
    present = set(case["strategy"].astype(str))
    return [str(name) for name in planned if str(name) not in present]


# A row column the report adds for an unfinished run: the strategies its point meant to time, space-separated.
PLANNED = "planned"


def planned_strategies(meta: dict) -> dict | None:
    """{(op, device, dtype, params JSON, mode, layout): [strategy, ...]}: what an
    unfinished run's config meant to time at each point, for `answer`'s
    ``planned`` (a run that ended before some strategies of a point, as the
    H200 run whose GPU window closed after 3 of 7). None for a complete run
    (it timed what it selected; its config may hold more than ``--op`` or
    ``--strategy`` chose) and where the config cannot be expanded here (a
    plugin not loaded). Since rounds, a point's rows are written together,
    so only runs from before them can stop inside a point."""
    from harness.base.config import expand, parse_config

    config = meta.get("config") if isinstance(meta, dict) else None
    if meta.get("status") == "complete" or not isinstance(config, dict):
        return None
    try:
        cases = expand(parse_config(config, "meta.json"))
    except Exception:  # noqa: BLE001 - an unknown strategy or operator: no plan to hold the rows to
        return None
    planned: dict[tuple, list[str]] = {}
    for case in cases:
        planned.setdefault((case.op, case.device, case.dtype, case.params_json, case.mode, case.layout),
                           []).append(case.strategy)
    return planned


def _readings(row) -> tuple[float, float]:
    """A row's time by the faster and by the slower of its timers (the
    median, and the independent timer's where it has one)."""
    readings = [float(row["median_s"])] + ([float(row["xcheck_s"])] if finite(row.get("xcheck_s")) else [])
    return min(readings), max(readings)


def answer(case: pd.DataFrame, planned=None) -> Answer | None:
    """The answer for one case on one machine, or None when nothing is
    rankable. ``planned``: the strategies the case's benchmark meant to time
    (`incomplete`). A tie names every rankable strategy the fastest does not
    clearly beat; a case is never a clear win (``unclear`` says why) where
    the fastest strategy's timers disagree, or a rival's do so that by one of
    them it is as fast as the fastest by either (its place is unsure), or
    that is incomplete."""
    order = ranked(case)
    if order.empty:
        return None
    best = order.iloc[0]
    op = best["op"]
    correct = case[timed(case)]
    seed = correct[correct["strategy"] == baseline_name(op)]
    builtin = fastest_builtin(case)
    over_seed = ratio(best, seed.iloc[0]) if len(seed) else math.nan
    over_builtin = ratio(best, builtin) if builtin is not None else math.nan
    others = [order.iloc[i] for i in range(1, len(order))]
    tied = [other for other in others if not clearly_faster(best, other)]
    runner_up = tied[0] if tied else (others[0] if others else None)
    reasons = [f"{row['strategy']}'s {timer_disagreement(row)}" for row in [best, *others]
               if timers_disagree(row) and (row is best or _readings(row)[0] <= _readings(best)[1])]
    if planned is None and PLANNED in case:
        # the report's rows carry it (an unfinished run's points: report/load.py)
        planned = sorted({name for names in case[PLANNED].dropna() for name in str(names).split()}) or None
    not_timed = incomplete(case, planned)
    if not_timed:
        reasons.append(f"incomplete: {', '.join(not_timed)} not timed")
    bases = {rule_basis(best, other) for other in others}
    basis = (QUARTILE_RULE if QUARTILE_RULE in bases else ROUNDS_RULE if ROUNDS_RULE in bases
             else RACING_RULE if bases else (RACING_RULE if raced(best) else ROUNDS_RULE))
    equivalent = tuple(str(other["strategy"]) for other in tied
                       if basis == RACING_RULE and race_verdict(best, other) == racing.EQUIVALENT)
    return Answer(best, over_seed, over_builtin, str(builtin["strategy"]) if builtin is not None else None,
                  runner_up, bool(tied), tuple(str(other["strategy"]) for other in tied), "; ".join(reasons), basis,
                  ratio_interval(best, seed.iloc[0]) if len(seed) else None,
                  ratio_interval(best, builtin) if builtin is not None else None, equivalent)


def by_count(case: pd.DataFrame) -> pd.DataFrame:
    """One case's correct rows (`CORRECT`) that hold the headline count
    (`metrics.COUNTS.primary`, instructions per call), fewest first, ties in
    the rows' order: a counting run's ranking, whose first is its answer
    (`fewest_counted`)."""
    name = metrics.COUNTS.primary.name
    if name not in case:
        return case.iloc[:0]
    counted = case[case["status"].isin(CORRECT) & case[name].map(finite)]
    return counted.sort_values(name, kind="stable")


def fewest_counted(case: pd.DataFrame) -> pd.Series | None:
    """A counting run's answer for one case on one machine: the correct
    strategy that executes the fewest of the headline count per call (the
    first of `by_count`), or None where the case holds a time (`answer`
    judges it by time) or no correct strategy was counted. Counts are not
    time (docs/COUNTING.md): the fewest is named, no speed-up."""
    if case["median_s"].map(finite).any():
        return None
    order = by_count(case)
    return order.iloc[0] if len(order) else None


def winners(found: Answer | None) -> list[str]:
    """The strategies an answer calls fastest: its winner, or every strategy
    of a tie; none without an answer."""
    if found is None:
        return []
    return [str(found.best["strategy"]), *found.tied]


def winner_text(found: Answer | None) -> str | None:
    """An answer's winner as a sentence names it: the strategy, or every
    strategy of a tie and why (by the rounds, or, for a run without them,
    by the quartiles it names), and why a win cannot be claimed; None where
    nothing was rankable. ``found.basis`` says which rule, for a table's note."""
    names = winners(found)
    if not names:
        return None
    if len(names) > 1:
        listed = ", ".join(names[:-1]) + f" and {names[-1]}"
        if found.basis == RACING_RULE:
            text = f"{listed} ({tie_label(found)})"
        else:
            why = (f"{found.best['strategy']} does not beat "
                   + ("it" if len(names) == 2 else "them") + " beyond the rounds' spread"
                   if found.basis == ROUNDS_RULE else "their Q1–Q3 ranges overlap")
            text = f"{listed} (a tie: {why})"
    else:
        text = names[0]
    return text + (f" (no clear win: {found.unclear})" if found.unclear else "")


def undecided_points(rows: pd.DataFrame) -> list[tuple[str, list[str], int]]:
    """Every point whose answer is UNDECIDED: (its label, the strategies
    still in the race when its budget ran out, fastest first, the rounds
    they ran)."""
    found_points = []
    for _group, case in with_case_columns(rows).groupby(CASE_GROUP, sort=False):
        found = answer(case)
        if found is None or found.outcome != UNDECIDED:
            continue
        first = case.iloc[0]
        label = (f"{first['op']} {first['device']} {first['dtype']} {params_label(first['params'])} "
                 f"({mode_and_layout(first)})")
        found_points.append((label, winners(found), len(round_medians(found.best))))
    return found_points


def tie_label(found: Answer) -> str:
    """A tie in a phrase: "equivalent within ±5 %" (an answer: either will
    do), "undecided after N rounds" (the budget ran out before the rounds
    could tell), or "tie" for an older run's rule, which cannot say which."""
    if found.outcome == EQUIVALENT:
        return f"equivalent within ±{equivalence_of(found.best):.0%}"
    if found.outcome == UNDECIDED:
        rounds = max(len(round_medians(found.best)), 0)
        return f"undecided after {rounds} rounds"
    return "tie"


def fastest_of(case: pd.DataFrame, names) -> pd.Series | None:
    """The fastest row of ``names`` in one case that passed the check and was timed; None where none was."""
    correct = case[timed(case) & case["strategy"].isin(list(names))] if len(case) else case
    return correct.sort_values("median_s", kind="stable").iloc[0] if len(correct) else None


def library_call(case: pd.DataFrame) -> pd.Series | None:
    """The library's own call in one case, what a user means by "the built-in": the fastest of the
    operator's ``library_call`` strategies (F.max_pool2d(return_indices=True), F.max_unpool1d/2d),
    or, for an operator that names none, the fastest built-in (`fastest_builtin`)."""
    op = OPERATORS.get(case["op"].iloc[0]) if len(case) else None
    if op is not None and op.library_call:
        return fastest_of(case, op.library_call)
    return fastest_builtin(case)


def seed_versions(op: str) -> list[str]:
    """The seed thread's own versions of ``op`` (a strategy whose source cites the seed, in its own
    code: not a torch.compile of one): the naive one (the baseline) and the author's faster ones."""
    found = OPERATORS.get(op)
    return [name for name, strat in (found.strategies.items() if found else ())
            if strat.source.startswith("seed") and "torch.compile" not in strat.source]


def fastest_builtin(case: pd.DataFrame) -> pd.Series | None:
    """The fastest library built-in (`is_builtin`) of one case that passed the
    check (exact or within tolerance) and returns the whole output: what the
    answer table's "× built-in" and the conclusions' "faster than the fastest
    library built-in" both measure against; None where none was measured."""
    if case.empty:
        return None
    correct = case[timed(case)]
    builtins = correct[correct.apply(lambda r: is_builtin(r["op"], r["strategy"])
                                     and not partial_output(r["op"], r["strategy"]), axis=1).astype(bool)] \
        if len(correct) else correct
    return builtins.sort_values("median_s", kind="stable").iloc[0] if len(builtins) else None


def ranks(case: pd.DataFrame) -> dict[str, int]:
    """Each rankable strategy's place (1 = fastest) within one case on one machine."""
    return {str(name): place for place, name in enumerate(ranked(case)["strategy"], start=1)}


def rank_flips(by_machine: dict[str, pd.DataFrame], top: int = 3) -> list[tuple[str, str, str, str]]:
    """Pairs of strategies whose order differs between machines, as
    (faster on first, faster on second, first machine, second machine): only
    pairs that reach the ``top`` places on some machine (a swap of two slow
    strategies answers nobody's question), and only where both machines' data
    support their order (``clearly_faster`` on each)."""
    machines = list(by_machine)
    flips = []
    for i, first in enumerate(machines):
        for second in machines[i + 1:]:
            a_rows, b_rows = ranked(by_machine[first]), ranked(by_machine[second])
            common = [name for name in a_rows["strategy"] if name in set(b_rows["strategy"])]
            leaders = set(a_rows["strategy"].head(top)) | set(b_rows["strategy"].head(top))
            a_by, b_by = a_rows.set_index("strategy"), b_rows.set_index("strategy")
            for x_index, x in enumerate(common):
                for y in common[x_index + 1:]:  # x before y on the first machine
                    if not ({x, y} & leaders):
                        continue
                    if clearly_faster(a_by.loc[x], a_by.loc[y]) and clearly_faster(b_by.loc[y], b_by.loc[x]):
                        flips.append((x, y, first, second))
    return flips
