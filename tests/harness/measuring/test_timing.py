import time
import types

import numpy as np
import pytest

from harness.base.config import Timing
from harness.measuring import timing
from harness.results import stats


def test_cpu_timer_measures_a_known_sleep():
    samples = timing.time_host(lambda: time.sleep(0.01), Timing(min_samples=5, budget_s=0.05, warmup_s=0)).samples_s
    assert len(samples) >= 5
    assert 0.0095 <= np.median(samples) < 0.02


def test_stopping_rule_needs_both_min_count_and_budget():
    fast = timing.time_host(lambda: None, Timing(min_samples=5, budget_s=0.05, warmup_s=0, max_samples=10**7)).samples_s
    assert len(fast) > 100  # the budget, not the count, stopped it
    slow = timing.time_host(lambda: time.sleep(0.02), Timing(min_samples=7, budget_s=0.001, warmup_s=0)).samples_s
    assert len(slow) == 7  # the count, not the budget, stopped it
    capped = timing.time_host(lambda: None, Timing(min_samples=5, budget_s=10, warmup_s=0, max_samples=50))
    assert len(capped.samples_s) + capped.slow_start == 50  # calls timed, kept or dropped as a slow start


def test_a_deliberately_slowed_strategy_is_measured_slower():
    x = np.random.default_rng(0).standard_normal((256, 256))
    settings = Timing(min_samples=5, budget_s=0.05, warmup_s=0.01)
    plain = np.median(timing.time_host(lambda: x.max(), settings).samples_s)
    slowed = np.median(timing.time_host(lambda: (x.max(), time.sleep(0.002)), settings).samples_s)
    assert slowed > plain + 0.0015


def test_deadline_interrupts_python_code():
    with pytest.raises(timing.CaseTimeout, match="0.2 s"):
        with timing.deadline(0.2):
            while True:
                pass


def test_copy_ceiling_is_a_plausible_bandwidth():
    gbps = timing.copy_ceiling_gbps("cpu", nbytes=32 << 20, repeats=3)
    assert 0.5 < gbps < 2000


def test_fresh_write_bandwidth_is_plausible_and_names_a_bad_allocator():
    for allocator in ("numpy", "torch"):
        assert 0.1 < timing.fresh_write_gbps(allocator, nbytes=32 << 20, repeats=2) < 2000
    with pytest.raises(ValueError, match="allocator='malloc'"):
        timing.fresh_write_gbps("malloc")


def test_summary_statistics_on_known_samples():
    summary = stats.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert summary.median_s == 3.0 and summary.min_s == 1.0 and summary.n_samples == 5
    assert summary.iqr_s == pytest.approx(2.0)
    assert stats.gbps(2e9, 1.0) == 2.0
    assert stats.floor_s(1e9, 10.0) == pytest.approx(0.1)
    assert stats.pct_of_ceiling(1e9, 0.2, 10.0) == pytest.approx(50.0)


def test_mann_whitney_on_known_samples():
    same = stats.mann_whitney_p([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6])
    apart = stats.mann_whitney_p(list(range(10)), list(range(100, 110)))
    assert same > 0.5
    assert apart < 0.001


@pytest.mark.cuda
def test_cuda_timer_agrees_with_triton_do_bench():
    import torch
    import torch.nn.functional as F
    import triton.testing

    x = torch.randn(64, 32, 128, 128, device="cuda")
    fn = lambda: F.max_pool2d(x, 2, return_indices=True)  # noqa: E731
    from impls.backends import get_backend

    torch_backend = get_backend("torch")
    timed = timing.time_call(fn, torch_backend, "cuda", Timing(min_samples=50, budget_s=0.5, warmup_s=0.1),
                             torch_backend.cache_flush("cuda"))
    ours = np.median(timed.samples_s)
    theirs = triton.testing.do_bench(fn, warmup=100, rep=500, return_mode="median") / 1e3
    assert abs(ours - theirs) / theirs < 0.05
    assert abs(timed.xcheck_s - theirs) / theirs < 0.05 and timed.host_s > 0


def test_device_delay_covers_the_host_cost():
    """The delay queued before each timed call is sized from the call's host
    cost, so a slow host launch never leaves the device idle inside the event
    pair; it is capped."""
    assert timing.device_delay_s(300e-6) > 300e-6
    assert timing.device_delay_s(10.0) == timing.DELAY_CAP_S


def test_a_backend_without_events_is_timed_by_the_host_clock_with_its_synchronize():
    import dataclasses

    from impls.backends import get_backend

    calls, outputs = [], []
    recorder = dataclasses.replace(get_backend("numpy"), name="recorder", synchronize=calls.append,
                                   block_until_ready=outputs.append)
    timed = timing.time_call(lambda: "out", recorder, "cpu", Timing(min_samples=5, budget_s=0.001, warmup_s=0))
    assert len(timed.samples_s) >= 5 and len(calls) >= len(timed.samples_s)
    # each call's own output is waited for too (JAX's block_until_ready)
    assert len(outputs) == len(calls) and set(outputs) == {"out"}
    assert timed.host_s == np.median(timed.samples_s)


@pytest.mark.slow
def test_thread_settings_hold_once_all_are_applied():
    """numba's threading layer used to reset torch's thread count after it was
    set: the run then recorded torch=1 while torch ran on every core."""
    import subprocess
    import sys

    code = ("import torch, numba; from harness.measuring import pinning; from harness.base.config import parse_config; "
            "config = parse_config({'threads': {'torch': 1, 'blas': 1, 'numba': 1}, 'benchmarks': [{'op': "
            "'maxpool2d', 'params': {'N': 1, 'C': 1, 'H': 4, 'W': 4, 'k': 2}}]}); "
            "applied = pinning.apply_threads(config.threads); "
            "print(applied['torch'], torch.get_num_threads(), applied['numba'], numba.get_num_threads(), "
            "applied['numpy'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    # an older config's keys (blas) read as the backends' (numpy); each knob read back once all are set
    assert out == ["1", "1", "1", "1", "1"]
    # torch alone: reading numba's knob back (which starts its threading layer) must not undo it
    code = ("import torch; from harness.measuring import pinning; applied = pinning.apply_threads({'torch': 1}); "
            "print(applied['torch'], torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "1"]


# ------------------------------------------------ slow starts and the collector
class SlowStart:
    """A call that takes `slow_s` for its first `slow_calls` calls, then
    `fast_s`: the shape of the stall measured after a torch.compile case."""

    def __init__(self, slow_calls: int, slow_s: float, fast_s: float):
        self.calls, self.slow_calls, self.slow_s, self.fast_s = 0, slow_calls, slow_s, fast_s

    def __call__(self):
        self.calls += 1
        time.sleep(self.slow_s if self.calls <= self.slow_calls else self.fast_s)


def test_a_slow_start_that_outlasts_the_budget_is_dropped_not_kept():
    """Warm-up (one 0.1 s call) and the whole budget (0.3 s) go by in the
    stall: stopping at the budget would report 0.1 s for a 5 ms call."""
    call = SlowStart(slow_calls=5, slow_s=0.1, fast_s=0.005)
    timed = timing.time_host(call, Timing(min_samples=5, budget_s=0.3, warmup_s=0.01))
    assert 0.004 < np.median(timed.samples_s) < 0.009
    assert timed.slow_start == 4  # the five slow calls, less the warm-up's
    assert len(timed.samples_s) >= 5


def test_a_steady_noisy_call_keeps_every_sample(monkeypatch):
    # On a clock that only the calls move: a real sleep's first sample can
    # meet a busy scheduler (the shared VM at load 10), which is a slow start.
    rng = np.random.default_rng(1)
    clock = {"now": 0.0}
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: clock["now"]))

    def call():
        clock["now"] += 0.002 * rng.uniform(1.0, 1.8)

    timed = timing.time_host(call, Timing(min_samples=20, budget_s=0.05, warmup_s=0))
    assert timed.slow_start == 0 and len(timed.samples_s) >= 20


def test_a_call_slow_every_other_time_is_noisy_not_warming_up():
    """Half its calls 10x slower: no slow start is dropped (never more than
    half the samples), and the settling allowance bounds the time spent."""
    flips = iter(range(10**6))
    settings = Timing(min_samples=5, budget_s=0.05, warmup_s=0)
    begin = time.perf_counter()
    timed = timing.time_host(lambda: time.sleep(0.01 if next(flips) % 2 else 0.001), settings)
    assert time.perf_counter() - begin < timing.SETTLE_BUDGETS * settings.budget_s + 0.1
    assert timed.slow_start <= 1


def test_the_collector_does_not_run_inside_timed_calls():
    """Each call leaves reference cycles behind; with the collector running,
    a full collection of a large heap would land in some call."""
    import gc

    collections, inside = [], [False]

    def record(phase, info):
        if phase == "start" and inside[0]:
            collections.append(info["generation"])

    def leaves_a_cycle():
        inside[0] = True
        cycle = []
        cycle.append(cycle)
        inside[0] = False

    gc.callbacks.append(record)
    try:
        timing.time_host(leaves_a_cycle, Timing(min_samples=5000, budget_s=0.01, warmup_s=0, max_samples=5000))
    finally:
        gc.callbacks.remove(record)
    assert collections == []
    assert gc.isenabled()


@pytest.mark.parametrize("samples, dropped", [
    ([0.2, 0.2, 0.2, 0.2, 0.026, 0.025, 0.026, 0.025, 0.025], 4),  # the measured stall
    ([0.03, 0.031, 0.029, 0.03, 0.018], 0),  # one fast outlier at the end
    ([0.3, 0.01, 0.3, 0.01, 0.3, 0.01], 0),  # bimodal
    ([0.05, 0.01, 0.01, 0.01, 0.01], 1),  # one slow first call
])
def test_slow_start_counts_only_a_leading_run_of_slow_samples(samples, dropped):
    assert stats.slow_start(samples) == dropped


def test_settling_sees_a_case_that_just_got_faster():
    assert stats.settling([0.2, 0.2, 0.2, 0.2, 0.026])
    assert not stats.settling([0.2, 0.2, 0.2, 0.2, 0.026, 0.025, 0.026, 0.025, 0.025])
    # one fast sample at the end: a few more samples, not a slow start
    assert stats.settling([0.03, 0.031, 0.029, 0.03, 0.018])
    assert not stats.settling([0.03, 0.031, 0.029, 0.03, 0.018, 0.03, 0.029, 0.031])


def test_an_isolated_case_flushes_the_device_cache_like_an_in_process_one(planted, capsys):
    """--isolate runs each case in a child (sweep.child_main): its timed
    calls must be preceded by the backend's cache flush, as in-process ones
    are (a CUDA case in a child was once timed with a warm L2)."""
    import json

    from harness.measuring.sweep import child_main
    from impls import maxpool2d
    from impls.backends import BACKENDS, Backend, DeviceEvents, register_backend

    flushes = []

    class HostEvents(DeviceEvents):
        def start(self):
            self.begin = time.perf_counter()

        def stop(self):
            self.end = time.perf_counter()

        def elapsed_s(self):
            return self.end - self.begin

    numpy_backend = BACKENDS["numpy"]
    register_backend(Backend(name="flushed", module="numpy", devices=("cpu",), dtypes=("float32",),
                             layouts=("contiguous",), to_native=numpy_backend.to_native,
                             to_numpy=numpy_backend.to_numpy, owns=lambda value: False,
                             events=lambda device: HostEvents(),
                             cache_flush=lambda device: (lambda: flushes.append(1))))
    try:
        planted("maxpool2d", "flushed_pool", lambda inputs, params: (
            lambda: maxpool2d.oracle({"x": inputs["x"].astype(np.float64)}, params)[0].astype(np.float32)),
            backend="flushed", returns="values", ties="any", dtypes=("float32",))
        config = {"timing": {"min_samples": 5, "max_samples": 20, "budget_s": 0.01, "warmup_s": 0},
                  "benchmarks": [{"op": "maxpool2d", "strategies": ["flushed_pool"],
                                  "params": {"N": 1, "C": 1, "H": 4, "W": 4, "k": 2}}]}
        child_main(json.dumps({"config": config, "run_id": "r", "ceiling_gbps": 30.0,
                               "case": ["maxpool2d", "flushed_pool", "cpu", "float32",
                                        {"N": 1, "C": 1, "H": 4, "W": 4, "k": 2}]}))
        answer = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert answer["row"]["status"] == "ok", answer["row"]["message"]
        assert len(flushes) >= len(answer["samples_s"]) >= 5
    finally:
        BACKENDS.pop("flushed", None)


def test_a_triton_kernel_under_the_cpu_interpreter_is_checked_but_not_timed(monkeypatch):
    """TRITON_INTERPRET=1 lets `run` reach Triton strategies on the CPU: they
    are checked there, and never timed (the interpreter's speed would be
    published as the kernel's)."""
    pytest.importorskip("triton")
    from harness.base.config import Case, parse_config
    from harness.measuring.sweep import execute_case

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    params = {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}
    config = parse_config({"timing": {"min_samples": 5, "budget_s": 0.01, "warmup_s": 0},
                           "benchmarks": [{"op": "maxpool2d", "strategies": ["triton_fused"], "params": params}]})
    result = execute_case(Case("maxpool2d", "triton_fused", "cpu", "float32", tuple(sorted(params.items()))),
                          config, "r", 30.0)
    assert result.row["status"] == "skipped" and "not timed" in result.row["message"], result.row["message"]
    assert "(ok)" in result.row["message"] and not result.samples_s


def test_dropping_a_slow_start_never_leaves_fewer_than_min_samples():
    """docs/SPEC.md §3: at least 5 samples. Calls slower than the settling allowance
    end sampling at 5; the slow start dropped from them may not leave 3."""
    call = SlowStart(slow_calls=3, slow_s=0.05, fast_s=0.004)  # the warm-up takes one slow call
    timed = timing.time_host(call, Timing(min_samples=5, budget_s=0.01, warmup_s=0))
    assert len(timed.samples_s) >= 5, (len(timed.samples_s), timed.slow_start)


def test_few_samples_a_side_still_catch_a_3x_slowdown_and_not_noise():
    """5 vs 5 samples: the exact Mann-Whitney test cannot go below p = 0.0079,
    above alpha = 0.002; a 3x slowdown must still be flagged, overlapping noise not."""
    from harness.judging import regression

    rule = regression.Rule()
    base = [0.200, 0.204, 0.198, 0.210, 0.201]
    assert stats.smallest_p(5, 5) == pytest.approx(2 / 252) and stats.smallest_p(2000, 2000) == 0.0
    assert regression.timing_change(base, [3 * s for s in base], rule).verdict == "regressed"
    assert regression.timing_change(base, [s / 3 for s in base], rule).verdict == "improved"
    assert regression.timing_change(base[:3], [3 * s for s in base[:3]], rule).verdict == "regressed"
    overlapping = [0.199, 0.26, 0.25, 0.24, 0.27]  # median 1.24x, but one sample among the base's
    assert regression.timing_change(base, overlapping, rule).verdict == "same"
    # With enough samples the test decides, as before.
    rng = np.random.default_rng(0)
    many = list(0.2 * (1 + 0.02 * rng.standard_normal(30)))
    assert regression.timing_change(many, [1.3 * s for s in many], rule).verdict == "regressed"


def test_calls_already_made_for_at_least_the_warm_up_time_are_its_warm_up():
    """The check's call 1 comes just before the timing: a call slower than
    the warm-up (a seed's 1.2 s) was made once more for nothing."""
    settings = Timing(min_samples=5, budget_s=0.001, warmup_s=0.02)
    calls = []
    timed = timing.time_host(lambda: calls.append(time.sleep(0.001)), settings, warmed_s=0.02)
    assert len(calls) == len(timed.samples_s) + timed.slow_start  # no call but the samples
    calls.clear()
    timed = timing.time_host(lambda: calls.append(time.sleep(0.001)), settings, warmed_s=0.019)
    assert len(calls) >= len(timed.samples_s) + timed.slow_start + 3  # short of it: warm up by time, as ever


def test_the_cross_check_is_do_bench_at_the_suites_warm_up_and_repetitions(monkeypatch):
    """The cross-check's do_bench takes timing.XCHECK_*_MS (not Triton's 25 + 100 ms, 0.15 s a case:
    a third of gpu.yaml's timing), its median, in seconds; the plan counts the same milliseconds.
    No timer on the CPU."""
    triton_testing = pytest.importorskip("triton.testing")
    from harness.measuring import plan

    asked = []

    def do_bench(fn, **kwargs):
        asked.append(kwargs)
        return 2.0  # ms

    monkeypatch.setattr(triton_testing, "do_bench", do_bench)
    assert timing.xcheck_s(lambda: None, "cuda") == pytest.approx(2e-3)
    assert asked == [{"warmup": timing.XCHECK_WARMUP_MS, "rep": timing.XCHECK_REP_MS, "return_mode": "median"}]
    assert timing.XCHECK_WARMUP_MS + timing.XCHECK_REP_MS <= 30
    assert plan.XCHECK_S == pytest.approx((timing.XCHECK_WARMUP_MS + timing.XCHECK_REP_MS) / 1e3 + 0.010)
    assert np.isnan(timing.xcheck_s(lambda: None, "cpu")) and len(asked) == 1
