import time

import numpy as np
import pytest

from harness import stats, timing
from harness.config import Timing


def test_cpu_timer_measures_a_known_sleep():
    samples = timing.time_host(lambda: time.sleep(0.01), Timing(min_samples=5, budget_s=0.05, warmup_s=0)).samples_s
    assert len(samples) >= 5
    assert 0.0095 <= np.median(samples) < 0.02


def test_stopping_rule_needs_both_min_count_and_budget():
    fast = timing.time_host(lambda: None, Timing(min_samples=5, budget_s=0.05, warmup_s=0, max_samples=10**7)).samples_s
    assert len(fast) > 100  # the budget, not the count, stopped it
    slow = timing.time_host(lambda: time.sleep(0.02), Timing(min_samples=7, budget_s=0.001, warmup_s=0)).samples_s
    assert len(slow) == 7  # the count, not the budget, stopped it
    capped = timing.time_host(lambda: None, Timing(min_samples=1, budget_s=10, warmup_s=0, max_samples=50)).samples_s
    assert len(capped) == 50


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
    calls = []

    class Recorder:
        name = "recorder"
        device_delay = None

        def events(self, device):
            return None

        def synchronize(self, device):
            calls.append(device)

    timed = timing.time_call(lambda: None, Recorder(), "cpu", Timing(min_samples=5, budget_s=0.001, warmup_s=0))
    assert len(timed.samples_s) >= 5 and len(calls) >= len(timed.samples_s)
    assert timed.host_s == np.median(timed.samples_s)


@pytest.mark.slow
def test_thread_settings_hold_once_all_are_applied():
    """numba's threading layer used to reset torch's thread count after it was
    set: the run then recorded torch=1 while torch ran on every core."""
    import subprocess
    import sys

    code = ("import torch; from harness import env; from harness.config import Threads; "
            "applied = env.apply_threads(Threads(torch=1, blas=1, numba=1)); "
            "print(applied['torch'], torch.get_num_threads())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "1"]
