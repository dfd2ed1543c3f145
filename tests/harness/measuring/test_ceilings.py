"""The copy ceiling: several tries, each with its load, the median kept; one
measured busy is flagged and never judged with; bench() reuses a recent
quiet one of this machine and says so. (The bandwidth curves: test_curves.py.)"""

import json
import math
import time

import pytest

import scatterbench
from harness import cli
from harness.base import caches
from harness.base.errors import CacheWarning
from harness.measuring import ceilings, facts, sweep, timing
from harness.results.store import read_meta, read_rows

PINNED = {"torch": 1, "numpy": 1, "numba": 1}


def fake_machine(monkeypatch, gbps, loads, cores=2):
    """The measuring child's world: copies at ``gbps`` in turn, the 1-minute
    load at ``loads`` in turn (an OSError where None), ``cores`` CPUs."""
    speeds, seen = iter(gbps), iter(loads)

    def getloadavg():
        load = next(seen)
        if load is None:
            raise OSError("no load average here")
        return (load, load, load)

    monkeypatch.setattr(timing, "copy_ceiling_gbps", lambda device, nbytes=None, repeats=10: next(speeds))
    monkeypatch.setattr(ceilings.os, "getloadavg", getloadavg)
    monkeypatch.setattr(ceilings.os, "cpu_count", lambda: cores)
    monkeypatch.setattr(ceilings, "TRY_GAP_S", 0.0)


def measured_here(devices=("cpu",)):
    return ceilings.judged(ceilings.measure_here({"devices": list(devices), "threads": {}, "fresh": False}))


def test_every_try_is_recorded_with_its_load_and_the_median_is_the_ceiling(monkeypatch):
    """Not the luckiest try: run 450c's best of 52.5, 30.0 and 27.6 GB/s was
    +56 % over the machine's history (issue 40, item 4)."""
    fake_machine(monkeypatch, [5.0, 9.0, 7.0], [0.4, 0.5, 0.6])
    measured = measured_here()
    assert measured.tries == {"cpu": [{"gbps": 5.0, "load": 0.4}, {"gbps": 9.0, "load": 0.5},
                                      {"gbps": 7.0, "load": 0.6}]}
    assert measured.ceilings == {"cpu": 7.0} and measured.busy == {}
    assert measured.meta() == {"ceilings_gbps": {"cpu": 7.0}, "ceiling_tries": measured.tries, "ceiling_busy": {},
                               "ceiling_reused_from": None, "fresh_write_gbps": {}, "bandwidth_curves": {},
                               "bandwidth_curves_reused": {}}
    assert measured.lines() == []


def test_the_median_of_an_even_count_is_a_try_that_ran():
    assert ceilings.median_try([{"gbps": 52.5}, {"gbps": 30.0}, {"gbps": 27.6}, {"gbps": 29.0}]) == {"gbps": 29.0}
    assert ceilings.median_try([{"gbps": math.nan}, {"gbps": 4.0}]) == {"gbps": 4.0}
    assert ceilings.median_try([]) == {}


def test_a_ceiling_whose_every_try_was_at_capacity_is_flagged_and_not_used(monkeypatch):
    fake_machine(monkeypatch, [6.09, 5.5, 6.0], [3.4, 3.6, 3.5])
    measured = measured_here()
    assert measured.busy == {"cpu": "load 3.4 on 2 cores"}
    assert measured.ceilings == {} and measured.median_gbps == {"cpu": 6.0}
    assert len(measured.tries["cpu"]) == 3  # still recorded, for whoever asks why
    assert any("busy" in line and "not used" in line and "load 3.4 on 2 cores" in line for line in measured.lines())


def test_a_median_needs_a_quiet_majority_of_tries(monkeypatch):
    """The median is kept, so one quiet try no longer vouches for the rest:
    half or more of the tries at capacity and the median may be a busy one."""
    fake_machine(monkeypatch, [6.0, 20.0, 7.0], [3.0, 1.2, 1.0])
    assert measured_here().busy == {}
    fake_machine(monkeypatch, [6.0, 20.0, 7.0], [3.0, 1.2, 3.1])
    assert measured_here().busy == {"cpu": "load 3 on 2 cores"}


def test_busy_is_decided_by_the_one_rule_of_facts(monkeypatch):
    fake_machine(monkeypatch, [20.0] * 3, [0.1] * 3, cores=64)
    monkeypatch.setattr(facts, "at_capacity", lambda load, cores: True)
    assert measured_here().busy == {"cpu": "load 0.1 on 64 cores"}


def test_an_unknown_load_is_recorded_as_unknown_and_not_called_busy(monkeypatch):
    fake_machine(monkeypatch, [20.0] * 3, [None] * 3)
    measured = measured_here()
    assert [one["load"] for one in measured.tries["cpu"]] == [None, None, None] and measured.busy == {}


def busy_measure(devices, threads=None, fresh=True):
    tries = {device: [{"gbps": 6.09, "load": 3.4}, {"gbps": 5.0, "load": 3.5}, {"gbps": 5.9, "load": 3.6}]
             for device in devices}
    return ceilings.judged({"tries": tries, "cores": 2, "fresh_writes": {}, "measured_at": facts.now_iso(),
                            "measured_epoch": time.time()})


def test_a_run_under_a_busy_ceiling_has_no_floor_nor_percent_and_says_why(tiny_config, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(ceilings, "measure", busy_measure)
    config = tiny_config("""
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0}
threads: {torch: 1, numpy: 1}
benchmarks:
  - op: maxpool2d
    strategies: [numpy_sliding_window]
    params: {N: 1, C: 1, H: 8, W: 8, k: 2}
""")
    assert cli.main(["run", str(config), "-o", str(tmp_path / "out"), "--no-progress"]) == 0
    start = capsys.readouterr().err
    assert "cpu copy ceiling measured busy (load 3.4 on 2 cores" in start and "not used" in start
    rows = read_rows(tmp_path / "out")
    assert rows["status"].iloc[0] == "ok" and rows["median_s"].iloc[0] > 0
    assert math.isnan(rows["pct_of_ceiling"].iloc[0]) and math.isnan(rows["floor_s"].iloc[0])
    meta = read_meta(tmp_path / "out")
    assert meta["ceiling_busy"] == {"cpu": "load 3.4 on 2 cores"} and "cpu" not in meta["ceilings_gbps"]
    assert [one["load"] for one in meta["ceiling_tries"]["cpu"]] == [3.4, 3.5, 3.6]


def test_a_resumed_run_keeps_the_ceilings_of_devices_it_did_not_measure_again():
    measured = ceilings.Measured({"cpu": 6.0}, {"cpu": [{"gbps": 6.0, "load": 3.0}]}, busy={"cpu": "load 3 on 2 cores"})
    earlier = {"ceilings_gbps": {"cpu": 20.0, "cuda": 900.0}, "ceiling_tries": {"cuda": [{"gbps": 900.0, "load": 0.1}]},
               "fresh_write_gbps": {"numpy": 9.0}}
    after = ceilings.meta_after(earlier, measured)
    assert after["ceilings_gbps"] == {"cuda": 900.0} and after["ceiling_busy"] == {"cpu": "load 3 on 2 cores"}
    assert set(after["ceiling_tries"]) == {"cpu", "cuda"} and after["fresh_write_gbps"] == {"numpy": 9.0}


# ------------------------------------------------------------------- reuse
def quiet(gbps=21.0, load=0.42, epoch=None):
    epoch = time.time() if epoch is None else epoch
    return ceilings.Measured({"cpu": gbps}, {"cpu": [{"gbps": gbps - 1, "load": load + 0.1},
                                                     {"gbps": gbps, "load": load},
                                                     {"gbps": gbps + 1, "load": load + 0.2}]},
                             fresh_writes={"numpy": 9.0, "torch": 8.0},
                             measured_at="2030-01-02T03:04:05+00:00", measured_epoch=epoch)


def counting_measure(monkeypatch, result):
    calls = []

    def measure(devices, threads=None, fresh=True):
        calls.append(sorted(set(devices)))
        return result() if callable(result) else result

    monkeypatch.setattr(ceilings, "measure", measure)
    # The curves a reused ceiling is given (test_curves.py tests them): none here.
    monkeypatch.setattr(ceilings, "measure_curves", lambda devices, threads=None: ({}, {}))
    return calls


def test_bench_twice_reuses_the_ceiling_the_second_time_and_says_so(monkeypatch):
    calls = counting_measure(monkeypatch, quiet)
    arguments = dict(N=1, C=1, H=8, W=8, k=2, threads=PINNED, plot=False,
                     timing={"budget_s": 0.01, "warmup_s": 0})
    first = scatterbench.bench("maxpool2d", ["numpy_sliding_window"], **arguments)
    second = scatterbench.bench("maxpool2d", ["numpy_sliding_window"], **arguments)
    assert calls == [["cpu"]]
    assert not any("reused" in note for note in first.notes)
    said = " ".join(second.notes)
    assert "copy ceiling reused from 2030-01-02T03:04:05+00:00, measured at load 0.42" in said
    assert "reused" in second._repr_html_()
    assert second.rows["ceiling_gbps"].iloc[0] == 21.0 and second.rows["pct_of_ceiling"].iloc[0] > 0
    # The CPU rows' fresh-output floor, from the fresh-write bandwidth measured with the ceiling
    # (the best allocator's), reused with it the second time.
    for result in (first, second):
        row = result.rows.iloc[0]
        assert row["fresh_floor_s"] > row["floor_s"] > 0 and row["pct_of_fresh_floor"] > row["pct_of_ceiling"]
    assert second.rows["fresh_floor_s"].iloc[0] == pytest.approx(first.rows["fresh_floor_s"].iloc[0])


def test_a_stored_ceiling_without_fresh_writes_is_not_reused_where_they_are_asked_for(monkeypatch):
    """bench() needs the CPU's fresh-write bandwidth for its floor: a stored
    ceiling measured without it (an older cache) is measured again, once."""
    calls = counting_measure(monkeypatch, lambda: ceilings.Measured(
        {"cpu": 21.0}, {"cpu": [{"gbps": 21.0, "load": 0.4}]}, measured_at="2030-01-02T03:04:05+00:00",
        measured_epoch=time.time()))
    ceilings.measure_or_reuse(["cpu"], PINNED)
    assert ceilings.reuse(["cpu"], PINNED) is not None and ceilings.reuse(["cpu"], PINNED, fresh=True) is None
    again = counting_measure(monkeypatch, quiet)
    for _ in range(2):
        ceilings.measure_or_reuse(["cpu"], PINNED, fresh=True)
    assert ceilings.reuse(["cpu"], PINNED, fresh=True).fresh_writes == {"numpy": 9.0, "torch": 8.0}
    assert len(calls) == 1 and len(again) == 1  # measured again once, then reused with its fresh writes


def test_bench_records_the_reuse_in_its_result_directory(monkeypatch, tmp_path):
    counting_measure(monkeypatch, quiet)
    arguments = dict(N=1, C=1, H=8, W=8, k=2, threads=PINNED, plot=False, timing={"budget_s": 0.01, "warmup_s": 0})
    scatterbench.bench("maxpool2d", ["numpy_sliding_window"], **arguments)
    scatterbench.bench("maxpool2d", ["numpy_sliding_window"], out=tmp_path / "run", **arguments)
    meta = read_meta(tmp_path / "run")
    assert meta["ceiling_reused_from"] == "2030-01-02T03:04:05+00:00" and meta["ceilings_gbps"] == {"cpu": 21.0}
    assert [one["load"] for one in meta["ceiling_tries"]["cpu"]] == [0.52, 0.42, 0.62]


def test_a_busy_ceiling_is_never_stored_so_never_reused(monkeypatch):
    calls = counting_measure(monkeypatch, lambda: busy_measure(["cpu"]))
    for _ in range(2):
        measured = ceilings.measure_or_reuse(["cpu"], PINNED)
        assert measured.busy and measured.reused_from is None
    assert len(calls) == 2 and not (caches.cache_root() / ceilings.CACHE_FILE).exists()


def test_an_old_ceiling_or_other_threads_are_measured_again(monkeypatch):
    calls = counting_measure(monkeypatch, quiet)
    ceilings.measure_or_reuse(["cpu"], PINNED)
    later = time.time() + ceilings.REUSE_MAX_AGE_S + 1
    assert ceilings.reuse(["cpu"], PINNED, now=lambda: later) is None
    assert ceilings.reuse(["cpu"], {**PINNED, "torch": 2}) is None
    assert ceilings.reuse(["cpu", "cuda"], PINNED) is None  # every device must have one
    assert ceilings.reuse(["cpu"], PINNED).reused_from == "2030-01-02T03:04:05+00:00"
    assert len(calls) == 1


def test_another_machine_does_not_reuse_this_ones_ceiling(monkeypatch):
    counting_measure(monkeypatch, quiet)
    ceilings.measure_or_reuse(["cpu"], PINNED)
    monkeypatch.setattr(facts, "machine_name", lambda: "elsewhere / Other CPU x64")
    assert ceilings.reuse(["cpu"], PINNED) is None


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", json.dumps({"machines": "junk"}),
                                     json.dumps({"machines": {"KEY": {"cpu": {"gbps": "fast"}}}}),
                                     json.dumps({"machines": {"KEY": ["cpu"]}})])
def test_a_corrupt_cache_file_is_ignored_with_a_warning_and_measured_again(monkeypatch, content):
    calls = counting_measure(monkeypatch, quiet)
    path = caches.cache_root() / ceilings.CACHE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content.replace("KEY", ceilings.machine_key(PINNED)))
    with pytest.warns(CacheWarning, match="ceilings.json"):
        measured = ceilings.measure_or_reuse(["cpu"], PINNED)
    assert measured.ceilings == {"cpu": 21.0} and measured.reused_from is None and len(calls) == 1
    assert ceilings.reuse(["cpu"], PINNED) is not None  # written anew


def test_the_sweep_measures_through_this_module():
    assert not hasattr(sweep, "measure_machine") and not hasattr(sweep, "measure_ceilings")
