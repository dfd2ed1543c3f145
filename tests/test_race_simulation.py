"""SPEC 3 "Racing": the rule's error rates, by simulation under the committed
runs' own round-to-round noise (benchmarks/race_simulation.py), at a fixed
seed, 1,000 races per property. docs/TIMING.md gives the full table, per run,
and says where a target is missed and at which noise."""

import pytest

from benchmarks import race_simulation


@pytest.mark.slow
def test_the_racing_rule_keeps_its_error_rates_under_the_committed_noise():
    pools = race_simulation.noise_pools()
    assert sorted(pools) == sorted(race_simulation.NOISE_RUNS)  # the noise model is what it says
    rates = race_simulation.rates(pools, races=1000, seed=0)
    assert rates["winner_dropped_1.25"] <= 0.01
    assert rates["lead_1.25_called"] >= 0.90
    assert rates["three_times_out_after_two"] >= 0.99
    assert rates["identical_called_faster"] <= 0.05
    assert rates["winner_dropped_1.10"] <= 0.01
    assert rates["within_2pct_equivalent"] >= 0.80


@pytest.mark.slow
def test_on_the_quieter_runs_every_target_holds():
    """The four committed runs at σ 0.065-0.069 (TIMING.md): SPEC 3's rates all hold there too."""
    pools = race_simulation.noise_pools()
    quiet = ["20261128T232830-vm-default-c685", "20261129T000314-vm-default-0a81",
             "20261129T002858-vm-default-5b79", "20261129T003215-vm-models-7778"]
    rates = race_simulation.rates(pools, races=1000, seed=0, runs=quiet)
    assert rates["identical_called_faster"] <= 0.05
    assert rates["winner_dropped_1.10"] <= 0.01 and rates["winner_dropped_1.25"] <= 0.01
    assert rates["lead_1.25_called"] >= 0.90
    assert rates["three_times_out_after_two"] >= 0.99
    assert rates["within_2pct_equivalent"] >= 0.80
