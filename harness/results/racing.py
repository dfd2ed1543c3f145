"""SPEC 3 "Racing": the rule that decides, after each round of a point, which
strategies leave the race, and what a pair of timed rows says of each other.

A point's strategies are timed in rounds (a fresh prepare and a fresh random
order each round). From the second round on, every strategy still in the race
is judged against the leader (the one whose round medians have the smallest
mean logarithm) on the logarithms of their per-round ratios, ``d_i = log(x_i /
leader_i)``, three ways (`pair_decision`):

- ``slower``: it is behind beyond the equivalence margin ``δ = log(1 + e)``
  (``timing.equivalence``, default 5 %). It leaves the race.
- ``equivalent``: within ``±δ`` of the leader. An answer ("either"); it leaves.
- ``undecided``: neither yet; it runs another round while its budget lasts.

The rule, and why each part:

- **All rounds beyond the margin** (n ≥ `sign_rounds`, three at least): every
  ``d_i > δ`` is "slower", whatever the spread of the ratios: rounds of 1.65×,
  2× and 20.5× are a lead, not a tie. For two equal strategies it fires with
  probability ``2 p^n``, ``p = P(d_i > δ)``; where the point's noise makes
  ``2 p^3`` exceed 3.6 % (a round-to-round spread σ of about 0.09 in the
  logarithm), three rounds are not enough and the rule asks for as many as keep
  it at 3.6 %.
- **Two rounds**: "slower" when both are behind beyond the margin and their
  mean puts it 1.65× behind: a strategy 3× behind leaves after two rounds of
  one call each, and one round 20× off on its own does not drop an equal
  strategy.
- **A bound on the mean** (n ≥ 3): the mean of the ``d_i`` (the middle ones
  from five rounds on, the fastest and slowest dropped: one 20× round does not
  move it) and their standard deviation ``s`` (never below the point's σ, so
  that three rounds that happen to agree do not pass for a quiet machine):
  "slower" when ``mean - t(0.99) s/√n > δ``, "equivalent" when ``|mean| +
  t(0.70) s/√n < δ`` (two one-sided tests at 30 %: an equivalence claimed
  is one a 5 % margin holds, not a proof that it does at 95 %).

σ, the point's round-to-round noise in a pair's log ratio (`point_noise`), is
read from every strategy of the point, not from the pair alone: each
strategy's change between its first two rounds, whose spread across
strategies is the noise of one round (1.4826 times their median absolute
deviation), shrunk towards `PRIOR_NOISE`, the median of the committed runs,
where a point has few strategies. It is stored in each row (``round_noise``),
so a pair recomputes its decision from its two rows alone
(harness/judging/analysis.py, ``race_verdict``).

The error rates this gives under the noise of the committed runs are measured
by ``benchmarks/race_simulation.py`` (in CI, fixed seed) and stated in
docs/TIMING.md.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from harness.base.config import DEFAULT_EQUIVALENCE, MIN_ROUNDS  # noqa: F401 (SPEC 3's, re-exported)

FASTER, EQUIVALENT, UNDECIDED, SLOWER = "faster", "equivalent", "undecided", "slower"
# What a row's ``decision`` column may hold; what each means, for a legend.
DECISIONS = {
    FASTER: "clearly faster than every other strategy of its point (each left the race slower)",
    EQUIVALENT: "within the equivalence margin of the fastest: either will do",
    UNDECIDED: "the budget ran out before the rounds could tell it from the fastest",
    SLOWER: "shown slower than the fastest beyond the margin; left the race in the round named",
}
PRIOR_NOISE = 0.076  # σ of a round's log ratio, median of the committed 2-core runs (race_simulation)
PRIOR_WEIGHT = 3.0  # strategies' worth of the prior in `point_noise`
TWO_ROUND_LEAD = math.log(1.65)  # a mean of two rounds this far behind (or ahead) decides
SIGN_ALPHA = 0.036
BOUND_T = 0.99  # one-sided level of "slower" from three rounds on
EQUIVALENT_T = 0.70  # one-sided level of each of the two tests of "equivalent"
TRIM_FROM = 5  # rounds from which the fastest and slowest d_i are dropped


def _logs(values) -> np.ndarray:
    return np.log(np.asarray(values, dtype=np.float64))


def point_noise(round_medians: Mapping[str, Sequence[float]]) -> float:
    """σ of one round's log ratio between two strategies of a point, from
    every strategy's first two round medians (``{strategy: [s, ...]}``;
    strategies with fewer are ignored)."""
    changes = [float(np.diff(_logs(values[:2]))[0]) for values in round_medians.values()
               if len(values) >= 2 and all(v > 0 and math.isfinite(v) for v in values[:2])]
    count = len(changes)
    if count >= 3:
        spread = 1.4826 * float(np.median(np.abs(np.asarray(changes) - np.median(changes))))
    else:
        spread, count = 0.0, 0
    # a strategy's change holds two rounds' noise of one strategy: its spread is one pair's round noise
    return math.sqrt((count * spread ** 2 + PRIOR_WEIGHT * PRIOR_NOISE ** 2) / (count + PRIOR_WEIGHT))


@functools.lru_cache(maxsize=4096)
def _student(level: float, df: int) -> float:
    from scipy.stats import t as student

    return float(student.ppf(level, df))


@functools.lru_cache(maxsize=4096)
def sign_rounds(noise: float, equivalence: float = DEFAULT_EQUIVALENCE) -> int:
    """How many rounds all beyond the margin make "slower" at this noise:
    three, or more where ``2 p^3`` would exceed SIGN_ALPHA."""
    from scipy.stats import norm

    margin = math.log1p(equivalence)
    p = float(norm.sf(margin / max(noise, 1e-12)))
    rounds = 3
    while 2 * p ** rounds > SIGN_ALPHA and rounds < 64:
        rounds += 1
    return rounds


def pair_decision(d: Sequence[float], noise: float, equivalence: float = DEFAULT_EQUIVALENCE) -> str:
    """What the rounds say of the second strategy against the first: ``d``
    are the logs of its per-round ratios (second over first), ``noise`` the
    point's σ (`point_noise`). SLOWER or FASTER (the second is behind, or
    ahead, beyond the margin), EQUIVALENT, or UNDECIDED; UNDECIDED below
    MIN_ROUNDS rounds or where a ratio is not finite."""
    d = np.asarray(d, dtype=np.float64)
    n = d.size
    if n < MIN_ROUNDS or not np.isfinite(d).all():
        return UNDECIDED
    margin = math.log1p(equivalence)
    noise = max(float(noise), 1e-12)
    if n >= sign_rounds(noise, equivalence):
        if d.min() > margin:
            return SLOWER
        if d.max() < -margin:
            return FASTER
    if n == 2:
        mean = float(d.mean())
        if mean > max(TWO_ROUND_LEAD, margin) and d.min() > margin:
            return SLOWER
        if mean < -max(TWO_ROUND_LEAD, margin) and d.max() < -margin:
            return FASTER
        return UNDECIDED
    core = np.sort(d)[1:-1] if n >= TRIM_FROM else d
    mean = float(core.mean())
    spread = max(float(core.std(ddof=1)), noise)
    df = core.size - 1
    bound = _student(BOUND_T, df) * spread / math.sqrt(n)
    if mean - bound > margin:
        return SLOWER
    if mean + bound < -margin:
        return FASTER
    if abs(mean) + _student(EQUIVALENT_T, df) * spread / math.sqrt(n) < margin:
        return EQUIVALENT
    return UNDECIDED


def log_ratios(fast: Sequence[float], slow: Sequence[float]) -> np.ndarray:
    """log(slow_i / fast_i) over the rounds both ran (the first ``min`` of each)."""
    count = min(len(fast), len(slow))
    return _logs(slow[:count]) - _logs(fast[:count])


@dataclass(frozen=True)
class Standing:
    """Where one strategy stands in its point's race: its decision, the
    round it left in (or the last it ran), and the strategy it was judged
    against (none for the one that led to the end)."""
    decision: str
    round: int
    against: str = ""


def leader(round_medians: Mapping[str, Sequence[float]], names, eligible=None) -> str:
    """The strategy among ``names`` whose rounds have the smallest mean logarithm
    (over the rounds they all ran), ties to the first named. ``eligible``: the
    strategies that may lead (those returning the whole output: one that returns
    less does less work, and is never the answer); all where None or none is in ``names``."""
    names = list(names)
    count = min(len(round_medians[name]) for name in names)
    candidates = [name for name in names if eligible is None or name in eligible] or names
    return min(candidates, key=lambda name: float(_logs(round_medians[name][:count]).mean()))


def race_step(round_medians: Mapping[str, Sequence[float]], in_race, noise: float,
              equivalence: float = DEFAULT_EQUIVALENCE, eligible=None) -> dict[str, Standing]:
    """After a round: the strategies of ``in_race`` that leave it now, each
    with its decision against the leader (SLOWER or EQUIVALENT; `leader`,
    among ``eligible``). A strategy found ahead of the leader stays: it leads
    the next round, or, not eligible, stays to its own budget's end."""
    names = list(in_race)
    if len(names) < 2:
        return {}
    first = leader(round_medians, names, eligible)
    leaving = {}
    for name in names:
        if name == first:
            continue
        d = log_ratios(round_medians[first], round_medians[name])
        decision = pair_decision(d, noise, equivalence)
        if decision in (SLOWER, EQUIVALENT):
            leaving[name] = Standing(decision, int(d.size), first)
    return leaving


def final_standings(round_medians: Mapping[str, Sequence[float]], in_race, left: Mapping[str, Standing],
                    eligible=None) -> dict[str, Standing]:
    """The standings once the race ends (its budget spent, or one strategy
    left): the leader is FASTER where every other strategy left slower,
    EQUIVALENT where some left equivalent and none is undecided, else
    UNDECIDED; the others still in the race are UNDECIDED against it."""
    names = list(in_race)
    standings = dict(left)
    if not names:
        return standings
    first = leader(round_medians, names, eligible)
    for name in names:
        if name != first:
            standings[name] = Standing(UNDECIDED, len(round_medians[name]), first)
    others = [standing.decision for name, standing in standings.items() if name != first]
    decision = UNDECIDED if UNDECIDED in others else EQUIVALENT if EQUIVALENT in others else FASTER
    standings[first] = Standing(decision, len(round_medians[first]))
    return standings
