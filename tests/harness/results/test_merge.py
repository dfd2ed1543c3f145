"""``merge``: shards of a sweep merge back into the whole; a case present
twice is kept once, from the later run; runs from different hardware or
settings are refused."""

import pytest

from harness.results.merge import merge_runs
from harness.results.store import ResultError, read_meta, read_rows
from tests.harness.judging.test_compare import synthetic_run
from tests.helpers import scatterbench


@pytest.mark.slow
def test_shards_merge_back_into_the_whole_sweep(tmp_path, tiny_config):
    config = tiny_config("""
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0}
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d_indices, numpy_sliding_window]
    params: {N: 1, C: 2, H: [4, 6, 8], W: 4, k: 2}
  - op: dispersion
    strategies: [seed_loop]
    params: {B: 1, C: 3, H: 4, W: 5, S: [0, 1]}
""")
    shards = []
    for index in range(3):
        out = tmp_path / f"shard{index}"
        result = scatterbench("run", config, "--shard", f"{index}/3", "-o", out, "--no-progress")
        assert result.returncode == 0, result.stderr
        shards.append(out)
    whole = tmp_path / "whole"
    assert scatterbench("run", config, "-o", whole, "--no-progress").returncode == 0
    merged = merge_runs(shards, tmp_path / "merged")
    merged_ids = sorted(read_rows(merged)["case_id"])
    assert merged_ids == sorted(read_rows(whole)["case_id"])
    assert len(merged_ids) == len(set(merged_ids)) == 8
    bad = scatterbench("run", config, "--shard", "3/3")
    assert bad.returncode == 2 and "--shard" in bad.stderr


def test_merge_refuses_runs_from_different_hardware(tmp_path):
    """Rows carry no machine: merging a Zen 3 and a Zen 4 run (both "AMD
    EPYC") would collapse their cases and label the result with one of them."""
    def run(name, family_model, host):
        hardware = {"cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_family_model": family_model}
        return synthetic_run(tmp_path / name, {"cpu_model": "AMD EPYC", "cpu_count": 2, "hardware": hardware,
                                               "machine": f"{host} / AMD EPYC x2",
                                               "start_time": f"2026-11-2{len(name)}T00:00:00+00:00"}, 15)

    zen3, zen4, zen4_other_node = run("z3", "25-1", "a"), run("z4", "25-17", "a"), run("z4b", "25-17", "b")
    with pytest.raises(ResultError, match="different hardware"):
        merge_runs([zen3, zen4], tmp_path / "merged")
    cli = scatterbench("merge", zen3, zen4, "-o", tmp_path / "m2")
    assert cli.returncode == 2 and "z3" in cli.stderr and "z4" in cli.stderr and len(cli.stderr.splitlines()) == 1
    assert len(read_rows(merge_runs([zen4, zen4_other_node], tmp_path / "same"))) == 3


def test_merge_refuses_runs_measured_under_different_settings(tmp_path):
    def run(name, budget_s):
        return synthetic_run(tmp_path / name, {"cpu_model": "X", "cpu_count": 2,
                                               "config": {"seed": 0, "timing": {"budget_s": budget_s}},
                                               "start_time": "2026-11-25T00:00:00+00:00"}, 16)

    with pytest.raises(ResultError, match=r"timing.budget_s: 0.5 -> 0.01"):
        merge_runs([run("a", 0.5), run("b", 0.01)], tmp_path / "merged")


def test_a_case_in_two_runs_is_kept_once_from_the_later_run(tmp_path, capsys):
    def run(name, start):
        return synthetic_run(tmp_path / name, {"cpu_model": "X", "cpu_count": 2, "start_time": start,
                                               "ceilings_gbps": {name: 1.0}}, 17)

    # given newest first: the order is the runs' start times, not the arguments'
    later, earlier = run("later", "2026-11-26T00:00:00+00:00"), run("earlier", "2026-11-25T00:00:00+00:00")
    merged = merge_runs([later, earlier], tmp_path / "merged")
    rows = read_rows(merged)
    assert rows["case_id"].is_unique and set(rows["run_id"]) == {"later"}
    assert "appears twice; keeping the later run's" in capsys.readouterr().err
    meta = read_meta(merged)
    assert [source["run_id"] for source in meta["merged_from"]] == ["earlier", "later"]
    assert meta["ceilings_gbps"] == {"earlier": 1.0, "later": 1.0} and meta["status"] == "complete"
    with pytest.raises(ResultError, match="already holds a run"):
        merge_runs([earlier], merged)
