"""The bandwidth curves by size (harness/measuring/ceilings.py): measured
through torch tensors (the GPU's path, exercised here on the CPU), refused
when measured under load, kept per machine and thread setting in the cache,
reused by the next run with its date said; and a ceiling that rose against
its machine's history is flagged as one that dropped is."""

import math
import time

import pytest

from harness.base import caches
from harness.judging import analysis
from harness.measuring import ceilings
from harness.presenting.report import sections
from harness.results import floors
from impls.backends import fresh_allocators

SMALL = {"points": 3, "smallest": 4 << 10, "top_bounds": [1 << 20, 1 << 20], "tries": 3, "pass_bytes": 1 << 20}
PINNED = {"torch": 1, "numpy": 1, "numba": 1}


def test_curves_are_measured_through_torch_tensors_at_every_size_for_every_allocator(monkeypatch):
    monkeypatch.setattr(ceilings, "_load_now", lambda: 0.25)  # this machine may be busy: its tries would be skipped
    curve = ceilings.measure_curves_here("cpu", **SMALL)
    sizes = curve["sizes_bytes"]
    assert sizes == ceilings.curve_sizes(0, 3, 4 << 10, [1 << 20, 1 << 20]) == [4096, 65536, 1 << 20]
    assert set(curve["fresh_write_gbps"]) == set(fresh_allocators())
    for rates in (curve["read_gbps"], curve["write_gbps"], *curve["fresh_write_gbps"].values()):
        assert len(rates) == len(sizes) and all(0 < rate < 1e5 for rate in rates)
    assert len(curve["tries"]) == 3 and all("load" in one for one in curve["tries"])
    assert isinstance(curve["measured_at"], str) and curve["measured_epoch"] <= time.time()


def test_each_cpu_rate_is_the_fastest_of_torch_numpy_and_a_numba_loop(monkeypatch):
    """An upper bound, not one library's speed: every kernel's medians are kept beside, and the
    curve's rate at each size is at least each one's."""
    monkeypatch.setattr(ceilings, "_load_now", lambda: 0.25)
    curve = ceilings.measure_curves_here("cpu", **SMALL)
    assert set(curve["read_by_kernel_gbps"]) == {"torch", "numpy", "numba"}
    assert set(curve["write_by_kernel_gbps"]) == {"torch", "numpy", "numba"}
    assert curve["method"] == ceilings.CURVE_METHOD
    for kind in ("read", "write"):
        for name, rates in curve[f"{kind}_by_kernel_gbps"].items():
            if name == "numpy" and kind == "write":  # numpy's fill only up to CURVE_SMALL_WRITE_BYTES
                rates = [rate for rate, size in zip(rates, curve["sizes_bytes"])
                         if size <= ceilings.CURVE_SMALL_WRITE_BYTES]
            assert all(best >= rate for best, rate in zip(curve[f"{kind}_gbps"], rates)), (kind, name)


def test_a_fresh_write_is_bounded_by_the_touched_write_where_the_heap_may_hold_it(monkeypatch):
    """Up to ``HEAP_HOLDS_BYTES`` a long-running process's heap may hand out pages already faulted in
    (a sweep's 51 MB unpool outputs ran at 2.2x a new mapping's floor): the fresh rate there is at
    least the write into a touched buffer; above it, the fresh write as found, kept beside."""
    monkeypatch.setattr(ceilings, "_load_now", lambda: 0.25)
    monkeypatch.setattr(ceilings, "HEAP_HOLDS_BYTES", 64 << 10)  # two of the three sizes held
    curve = ceilings.measure_curves_here("cpu", **SMALL)
    for name, rates in curve["fresh_write_gbps"].items():
        as_found = curve["fresh_write_as_found_gbps"][name]
        for size, rate, found, touched in zip(curve["sizes_bytes"], rates, as_found, curve["write_gbps"]):
            assert rate >= found
            if size <= 64 << 10:
                assert rate >= touched * 0.999, (name, size)  # the fastest of the per-try maxima
            else:
                assert rate == found, (name, size)


def test_on_the_cpu_the_curves_buffer_asks_for_huge_pages_and_starts_on_a_huge_page():
    """A strategy's arrays are numpy's, which asks for transparent huge pages (madvise): a buffer of
    4 KiB pages read 19 GB/s where numpy's read 27 (the 25-17 VM, 128 MiB), so the curve's buffer is
    numpy's, started on a huge page, so that every size's prefix is in huge pages from its first
    byte (started on a 4 KiB page, a 1.66 MiB prefix read 70-125 GB/s over eight buffers on the Xeon
    6-167 VM, on a huge page 101-125)."""
    from pathlib import Path

    buffer = ceilings._curve_buffer(8 << 20, "cpu")
    assert buffer.numel() * 4 == 8 << 20 and float(buffer.sum()) == buffer.numel()
    assert buffer.data_ptr() % ceilings.HUGE_PAGE_BYTES == 0
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if not thp.exists() or "[never]" in thp.read_text() or not Path("/proc/self/smaps").exists():
        pytest.skip("no transparent huge pages on this machine")
    region = None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            low, high = (int(part, 16) for part in head.split("-"))
            region = low <= buffer.data_ptr() < high
        elif region and line.startswith("THPeligible:"):
            assert line.split()[1] == "1", line  # numpy advised it; torch's allocator does not
            return
    pytest.fail("the buffer's mapping was not found in /proc/self/smaps")


def test_the_numba_loops_move_every_byte_of_every_pass():
    """No pass can be hoisted or dropped: the read sums every pass into one accumulator, and each
    write pass stores its own number."""
    import numpy as np

    from harness.measuring import bandwidth_kernels

    buffer = np.arange(1, 4097, dtype=np.float32) % 7
    assert bandwidth_kernels.read_passes(buffer, 5, 2) == pytest.approx(5 * float(buffer.sum()), rel=1e-5)
    bandwidth_kernels.write_passes(buffer, 3, 2)
    assert (buffer == 2.0).all()


def test_a_curve_measured_another_way_is_measured_again(monkeypatch):
    fake_child(monkeypatch)
    ceilings.measure(["cpu"], PINNED)
    assert ceilings.reuse_curves(["cpu"], PINNED)[0]
    monkeypatch.setattr(ceilings, "CURVE_METHOD", ceilings.CURVE_METHOD + 1)
    assert ceilings.reuse_curves(["cpu"], PINNED) == ({}, {})


def test_the_sizes_reach_well_past_the_last_level_cache_within_their_bounds():
    sizes = ceilings.curve_sizes(32 << 20)  # the VM's 32 MiB L3
    assert len(sizes) == ceilings.CURVE_POINTS == 3  # the test session's (tests/conftest.py)
    assert ceilings.curve_sizes(32 << 20, 12, 4 << 10, [64 << 20, 256 << 20])[-1] == 128 << 20
    assert ceilings.curve_sizes(0, 12, 4 << 10, [64 << 20, 256 << 20])[-1] == 64 << 20
    assert ceilings.curve_sizes(1 << 30, 12, 4 << 10, [64 << 20, 256 << 20])[-1] == 256 << 20
    assert all(size % 4096 == 0 for size in ceilings.curve_sizes(60 << 20, 12, 4 << 10, [64 << 20, 256 << 20]))


@pytest.mark.parametrize("text, expected", [("32768K", 32 << 20), ("2M", 2 << 20), ("48 KiB", 48 << 10),
                                            ("junk", 0)])
def test_sysfs_cache_sizes_are_read(text, expected):
    assert ceilings._cache_size_bytes(text) == expected


def busy_child(monkeypatch, load=3.5, cores=2):
    monkeypatch.setattr(ceilings, "_load_now", lambda: load)
    monkeypatch.setattr(ceilings.os, "cpu_count", lambda: cores)


def test_a_curve_measured_under_load_is_refused_never_kept_and_gives_no_floor(monkeypatch):
    busy_child(monkeypatch)
    measured = ceilings.judged(ceilings.measure_here({"devices": [], "threads": {}, "fresh": False,
                                                      "curves": ["cpu"], "curve_settings": SMALL}))
    curve = measured.curves["cpu"]
    assert curve["busy"] == "load 3.5 on 2 cores" and [one["load"] for one in curve["tries"]] == [3.5] * 3
    # each busy try was recorded and skipped: no rate from a busy machine, and no time spent on one
    assert all(one["skipped"] for one in curve["tries"]) and curve["read_gbps"] == [None] * 3
    assert any("cpu bandwidth curves measured busy (load 3.5 on 2 cores): not used" in line
               for line in measured.lines())
    ceilings.remember_curves(measured.curves, {})
    assert not (caches.cache_root() / ceilings.CURVES_FILE).exists()
    assert floors.usable_curve(measured.curves, "cpu") is None
    row = {"bytes": 1 << 20, "median_s": 1e-3}
    params = {"N": 1, "C": 1, "H": 64, "W": 64, "k": 2}
    assert math.isnan(floors.case_floor("maxpool2d", "numpy_sliding_window", params, "float32", "cpu", "forward",
                                        row, measured.meta()[floors.CURVES])["floor_by_size_s"])


def test_a_quiet_majority_of_tries_gives_a_curve_from_its_quiet_tries(monkeypatch):
    loads = iter([3.5, 0.5, 0.6])
    monkeypatch.setattr(ceilings, "_load_now", lambda: next(loads))
    monkeypatch.setattr(ceilings.os, "cpu_count", lambda: 2)
    measured = ceilings.judged({"tries": {}, "cores": 2, "curves": {"cpu": ceilings.measure_curves_here("cpu",
                                                                                                       **SMALL)}})
    curve = measured.curves["cpu"]
    assert curve["busy"] is None and [one.get("skipped", False) for one in curve["tries"]] == [True, False, False]
    assert all(rate > 0 for rate in curve["read_gbps"]) and floors.usable_curve(measured.curves, "cpu") is curve


def quiet_curve(epoch=None):
    epoch = time.time() if epoch is None else epoch
    return {"sizes_bytes": [4096, 1 << 20], "read_gbps": [90.0, 20.0], "write_gbps": [40.0, 15.0],
            "fresh_write_gbps": {"numpy": [8.0, 5.0]}, "tries": [{"load": 0.3}] * 3,
            "measured_at": "2030-01-02T03:04:05+00:00", "measured_epoch": epoch, "method": ceilings.CURVE_METHOD}


def fake_child(monkeypatch):
    """The measuring child, answering with a quiet ceiling and quiet curves
    for the devices it is asked to measure; returns the requests it got."""
    requests = []

    def run_child(request):
        requests.append(request)
        return {"tries": {device: [{"gbps": 20.0, "load": 0.3}] * 3 for device in request["devices"]},
                "fresh_writes": {}, "curves": {device: quiet_curve() for device in request["curves"]},
                "cores": 2, "measured_at": "2030-01-02T03:04:05+00:00", "measured_epoch": time.time()}

    monkeypatch.setattr(ceilings, "_run_child", run_child)
    return requests


def test_quiet_curves_are_kept_and_the_next_run_reuses_them_saying_from_when(monkeypatch):
    requests = fake_child(monkeypatch)
    first = ceilings.measure(["cpu"], PINNED)
    second = ceilings.measure(["cpu"], PINNED)
    assert [request["curves"] for request in requests] == [["cpu"], []]  # the ceiling is measured each time
    assert requests[0]["curve_settings"] == ceilings.curve_settings()
    assert first.curves_reused == {} and any("bandwidth curves (2 sizes, 4 KiB to 1 MiB) measured now, at load 0.30"
                                             in line for line in first.lines())
    assert second.curves["cpu"]["read_gbps"] == [90.0, 20.0]
    assert second.curves_reused == {"cpu": "2030-01-02T03:04:05+00:00"}
    assert second.meta()["bandwidth_curves_reused"] == {"cpu": "2030-01-02T03:04:05+00:00"}
    assert any("cpu bandwidth curves (2 sizes, 4 KiB to 1 MiB) reused from 2030-01-02T03:04:05+00:00" in line
               for line in second.lines())
    # bench()'s reused ceiling is given the same curves, from the cache, with no child
    assert ceilings.measure_curves(["cpu"], PINNED) == (second.curves, second.curves_reused) and len(requests) == 2


def test_old_curves_or_other_threads_are_measured_again(monkeypatch):
    fake_child(monkeypatch)
    ceilings.measure(["cpu"], PINNED)
    assert ceilings.reuse_curves(["cpu"], PINNED)[0]
    assert ceilings.reuse_curves(["cpu"], {**PINNED, "torch": 2}) == ({}, {})
    later = time.time() + ceilings.CURVES_REUSE_MAX_AGE_S + 1
    assert ceilings.reuse_curves(["cpu"], PINNED, now=lambda: later) == ({}, {})


def test_a_resumed_run_keeps_the_curves_of_devices_it_did_not_measure_again():
    measured = ceilings.Measured({"cpu": 6.0}, {"cpu": []}, curves={"cpu": quiet_curve()})
    after = ceilings.meta_after({"bandwidth_curves": {"cuda": {"sizes_bytes": [1]}, "cpu": {"old": True}}}, measured)
    assert after["bandwidth_curves"] == {"cuda": {"sizes_bytes": [1]}, "cpu": quiet_curve() | {
        "measured_epoch": after["bandwidth_curves"]["cpu"]["measured_epoch"]}}


# ------------------------------------------------------------------ history
def test_a_ceiling_above_its_history_is_flagged_as_one_below_it_is():
    assert analysis.ceiling_rose({"deviation_pct": 56.0}) and not analysis.ceiling_rose({"deviation_pct": 15.0})
    assert not analysis.ceiling_rose({"deviation_pct": -56.0}) and not analysis.ceiling_rose("garbage")
    meta = {"run_id": "450c", "ceilings_gbps": {"cpu": 52.5},
            "ceiling_history": {"cpu": {"history_median_gbps": 33.6, "runs": 5, "deviation_pct": 56.25}}}
    said = " ".join(sections.run_warnings(meta))
    assert "measured its cpu copy ceiling at 52.5 GB/s, 56 % above the median of earlier runs" in said
    assert "read low" in said
    meta["ceiling_history"]["cpu"]["deviation_pct"] = 5.0
    assert sections.run_warnings(meta) == []


def test_each_point_is_the_fastest_of_its_tries(monkeypatch):
    """Method 4: a curve bounds what the machine can do, so each point is its fastest try, not the
    median, which neighbours sharing the caches pull down (at a cache's edge the rate is bimodal:
    63-127 GB/s in 20 tries at 1.66 MiB on the Xeon 6-167 VM). Here try t runs every kernel at
    10·t GB/s: every point must read 10·tries, where the median of three would read 20."""
    tries = {"n": 0}

    def next_try():
        tries["n"] += 1
        return 0.25

    monkeypatch.setattr(ceilings, "_load_now", next_try)
    monkeypatch.setattr(ceilings, "_rate", lambda clock, call, moved: 10.0 * tries["n"])
    curve = ceilings.measure_curves_here("cpu", **SMALL)
    assert tries["n"] == len(curve["tries"]) == 3
    for rates in (curve["read_gbps"], curve["write_gbps"], *curve["fresh_write_gbps"].values(),
                  *curve["fresh_write_as_found_gbps"].values(), *curve["read_by_kernel_gbps"].values()):
        assert rates == [30.0] * len(curve["sizes_bytes"])
    assert curve["method"] == ceilings.CURVE_METHOD == 5


def test_each_try_measures_a_buffer_of_its_own(monkeypatch):
    """Where a size sits in the caches depends on the buffer's physical pages: two default runs 3
    min apart, each with one buffer, read ±17.4 % apart at 1.66 MiB on the Xeon 6-167 VM, where four
    groups of tries with a buffer each agreed within ±5.6 %. So every try allocates its own."""
    made = []
    real = ceilings._curve_buffer

    def counted(nbytes, device):
        made.append(nbytes)
        return real(nbytes, device)

    monkeypatch.setattr(ceilings, "_load_now", lambda: 0.25)
    monkeypatch.setattr(ceilings, "_curve_buffer", counted)
    curve = ceilings.measure_curves_here("cpu", **SMALL)
    assert made == [max(max(curve["sizes_bytes"]), ceilings.CURVE_PLACEMENTS * ceilings.HUGE_PAGE_BYTES)] * SMALL["tries"]


def test_places_are_huge_pages_apart_spread_over_the_buffer_and_each_holds_its_size():
    huge = ceilings.HUGE_PAGE_BYTES
    assert ceilings.curve_placements(4 << 10, 16 * huge, 8) == [0, 2 * huge, 4 * huge, 6 * huge, 9 * huge,
                                                                11 * huge, 13 * huge, 15 * huge]
    for size, buffer, count in [(4 << 10, 256 << 20, 8), (93 << 20, 256 << 20, 8), (1 << 20, 3 * huge, 8),
                                (huge, 4 * huge, 3), (7 << 20, 8 << 20, 8)]:
        places = ceilings.curve_placements(size, buffer, count)
        assert places[0] == 0 and places == sorted(set(places)) and len(places) <= count
        assert all(place % huge == 0 and place + size <= buffer for place in places), (size, buffer, places)
        assert len(places) == min(count, (buffer - size) // huge + 1)
    assert ceilings.curve_placements(256 << 20, 256 << 20, 8) == [0]  # the largest size: one place


def _place_of(call, whole_start: list) -> int | None:
    """The huge page of the try's buffer a curve kernel's closure measures (None for a fresh
    write, which allocates its own)."""
    import numpy as np
    import torch

    for cell in call.__closure__ or ():
        found = cell.cell_contents
        if isinstance(found, torch.Tensor):
            return (found.data_ptr() - whole_start[0]) // ceilings.HUGE_PAGE_BYTES
        if isinstance(found, np.ndarray):
            return (found.ctypes.data - whole_start[0]) // ceilings.HUGE_PAGE_BYTES
    return None


def test_each_point_is_the_fastest_of_its_places_each_warmed_before_it_is_timed(monkeypatch):
    """Method 5: where a size sits in a cache depends on which pages hold it (at 32 places of one
    buffer a 1.66 MiB read ran at 46-152 GB/s on the Xeon 6-167 VM), so each try measures each size
    at several places and keeps the fastest; and a region new to the core is slow for its first
    passes, so each place is gone over untimed first. Here a kernel runs at 1 + its place's huge
    page GB/s: every point must read the last place's rate, and every timed call must come after its
    place's warm calls."""
    import torch

    whole_start, warm_calls, timed = [0], [], []
    real_buffer, real_sum = ceilings._curve_buffer, torch.sum

    def buffer(nbytes, device):
        made = real_buffer(nbytes, device)
        whole_start[0] = made.data_ptr()
        return made

    def rate(clock, call, moved):
        place = _place_of(call, whole_start)
        timed.append(place)
        return 0.5 if place is None else 1.0 + place

    def counted_sum(tensor, *args, **kwargs):  # the readers' first kernel: torch.sum
        warm_calls.append((len(timed), (tensor.data_ptr() - whole_start[0]) // ceilings.HUGE_PAGE_BYTES))
        return real_sum(tensor, *args, **kwargs)

    monkeypatch.setattr(ceilings, "_load_now", lambda: 0.25)
    monkeypatch.setattr(ceilings, "_curve_buffer", buffer)
    monkeypatch.setattr(ceilings, "_rate", rate)
    monkeypatch.setattr(torch, "sum", counted_sum)
    settings = {**SMALL, "tries": 1, "placements": 4}
    curve = ceilings.measure_curves_here("cpu", **settings)
    buffer_bytes = max(max(curve["sizes_bytes"]), 4 * ceilings.HUGE_PAGE_BYTES)
    for size, read, write in zip(curve["sizes_bytes"], curve["read_gbps"], curve["write_gbps"]):
        last = ceilings.curve_placements(size, buffer_bytes, 4)[-1] // ceilings.HUGE_PAGE_BYTES
        assert read == write == 1.0 + last, (size, read, write)
    # torch.sum (the timed calls go through the patched _rate): CURVE_WARM_CALLS calls at each
    # place, each group right before the place's first timed call
    warm = ceilings.CURVE_WARM_CALLS
    assert len(warm_calls) == len(curve["sizes_bytes"]) * 4 * warm
    groups = [warm_calls[k:k + warm] for k in range(0, len(warm_calls), warm)]
    assert all(len(set(group)) == 1 for group in groups)
    assert all(timed[before] == place for (before, place), *_ in groups)
