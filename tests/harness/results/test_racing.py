"""SPEC 3 "Racing": the rule of harness/results/racing.py, case by case."""

import math

import numpy as np
import pytest

from harness.results import racing

MARGIN = math.log(1.05)


@pytest.mark.parametrize("ratios", [
    (1.65, 2.0, 20.5),  # the 25-17 VM's 2-D maxunpool: numba_fused ahead in all three rounds, printed a tie
    (1.29, 1.30, 2.16),
    (1.46, 1.06, 1.56),
    (1.06, 1.06, 1.06, 1.06),
])
def test_rounds_that_all_put_one_ahead_beyond_the_margin_are_never_a_tie(ratios):
    assert racing.pair_decision(np.log(ratios), racing.PRIOR_NOISE) == racing.SLOWER
    assert racing.pair_decision(-np.log(ratios), racing.PRIOR_NOISE) == racing.FASTER


def test_any_three_or_more_rounds_beyond_the_margin_decide_at_the_committed_noise():
    rng = np.random.default_rng(0)
    for _ in range(2000):
        n = int(rng.integers(3, 12))
        d = MARGIN + rng.exponential(rng.choice([0.01, 0.1, 1.0]), size=n) + 1e-9
        assert racing.pair_decision(d, racing.PRIOR_NOISE) == racing.SLOWER, d


def test_where_the_noise_makes_three_rounds_untrustworthy_the_sign_rule_asks_for_more():
    """At σ 0.2 (0e2d-like and worse) three rounds beyond the margin happen
    to two equal strategies too often: the error rates win (docs/TIMING.md)."""
    assert racing.sign_rounds(racing.PRIOR_NOISE) == 3
    assert racing.sign_rounds(0.2) > 3
    d = np.log([1.07, 1.08, 1.06])
    assert racing.pair_decision(d, 0.2) == racing.UNDECIDED
    assert racing.pair_decision(d, racing.PRIOR_NOISE) == racing.SLOWER


def test_two_rounds_drop_a_strategy_far_behind_and_nothing_close():
    assert racing.pair_decision(np.log([3.0, 3.0]), racing.PRIOR_NOISE) == racing.SLOWER
    assert racing.pair_decision(np.log([20.0, 1.1]), racing.PRIOR_NOISE) == racing.SLOWER  # mean 4.7x
    assert racing.pair_decision(np.log([1.3, 1.3]), racing.PRIOR_NOISE) == racing.UNDECIDED
    # one round 20x off, the other level: noise, not a lead
    assert racing.pair_decision(np.log([1.0, 20.0]), racing.PRIOR_NOISE) == racing.UNDECIDED
    assert racing.pair_decision(np.log([0.9, 1.2]), racing.PRIOR_NOISE) == racing.UNDECIDED
    assert racing.pair_decision([0.1], racing.PRIOR_NOISE) == racing.UNDECIDED  # one round decides nothing


def test_steady_rounds_within_the_margin_are_equivalent_and_noisy_ones_undecided():
    rng = np.random.default_rng(1)
    steady = rng.normal(0.01, 0.01, size=8)
    assert racing.pair_decision(steady, 0.01) == racing.EQUIVALENT
    assert racing.pair_decision(rng.normal(0.0, 0.3, size=8), 0.3) == racing.UNDECIDED
    # the point's noise floors the spread: three rounds that agree on a 4 % lead do not pass for a quiet
    # machine's (equivalent at σ 0.01), and are undecided at the committed runs' σ
    agreeing = np.log([1.04, 1.041, 1.039])
    assert racing.pair_decision(agreeing, 0.001) == racing.EQUIVALENT
    assert racing.pair_decision(agreeing, racing.PRIOR_NOISE) == racing.UNDECIDED


def test_the_point_noise_reads_every_strategy_and_leans_on_the_prior_when_few():
    assert racing.point_noise({"a": [1.0, 1.0], "b": [2.0, 2.0]}) == pytest.approx(racing.PRIOR_NOISE)
    quiet = {f"s{index}": [1.0 + index, 1.0 + index] for index in range(20)}
    shrunk = racing.PRIOR_NOISE * math.sqrt(racing.PRIOR_WEIGHT / (20 + racing.PRIOR_WEIGHT))
    assert racing.point_noise(quiet) == pytest.approx(shrunk)
    rng = np.random.default_rng(2)
    noisy = {f"s{index}": list(np.exp(rng.normal(0, 0.3, size=2))) for index in range(40)}
    assert 0.25 < racing.point_noise(noisy) < 0.5


def test_a_strategy_returning_less_never_leads_the_race():
    """maxpool2d's values-only strategy does less work: faster than every whole-output one, it
    led the race and sent them out "slower" after two rounds (a CI run under load). It may be
    judged against the leader, never lead: the whole-output strategies race among themselves."""
    medians = {"values_only": [0.2, 0.2], "fused": [1.0, 1.0], "seed": [100.0, 90.0]}
    whole = {"fused", "seed"}
    assert racing.leader(medians, medians) == "values_only"
    assert racing.leader(medians, medians, whole) == "fused"
    leaving = racing.race_step(medians, medians, racing.PRIOR_NOISE, eligible=whole)
    assert set(leaving) == {"seed"} and leaving["seed"].against == "fused"  # values_only, ahead, stays
    standings = racing.final_standings(medians, ["fused", "values_only"], leaving, whole)
    assert standings["values_only"] == racing.Standing(racing.UNDECIDED, 2, "fused")
    assert racing.leader(medians, ["values_only"], whole) == "values_only"  # none eligible left: itself


def test_a_race_step_takes_out_what_is_decided_and_the_final_standings_name_the_outcome():
    medians = {"fast": [1.0, 1.0, 1.0], "twin": [1.0, 1.0, 1.0], "seed": [100.0, 90.0, 110.0],
               "close": [1.2, 1.1, 1.4]}
    leaving = racing.race_step(medians, medians, racing.PRIOR_NOISE)
    assert leaving["seed"] == racing.Standing(racing.SLOWER, 3, "fast")
    assert leaving["close"].decision == racing.SLOWER  # every round beyond the margin
    assert leaving["twin"] == racing.Standing(racing.EQUIVALENT, 3, "fast")  # three level rounds
    standings = racing.final_standings(medians, ["fast"], leaving)
    assert standings["fast"] == racing.Standing(racing.EQUIVALENT, 3)
    undecided = racing.final_standings(medians, ["fast", "close"], {"seed": leaving["seed"]})
    assert undecided["fast"].decision == undecided["close"].decision == racing.UNDECIDED
    alone = racing.final_standings(medians, ["fast"], {"seed": leaving["seed"]})
    assert alone["fast"] == racing.Standing(racing.FASTER, 3)
