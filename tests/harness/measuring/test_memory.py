"""Memory: the peak a call needed, and the room the memory guard may use
(the smallest of what the machine, the cgroup and the rlimit allow)."""

import resource

import numpy as np
import pytest

from harness.measuring import memory
from impls.backends import get_backend

NUMPY = get_backend("numpy")


@pytest.mark.skipif(not memory.cpu_peak_supported(), reason="no /proc/self/clear_refs here")
def test_the_peak_of_a_call_counts_what_it_allocated():
    size = 64 << 20
    out, peak = memory.call_with_peak(lambda: np.ones(size, dtype=np.uint8), NUMPY, "cpu")
    assert out.nbytes == size
    assert size * 0.9 <= peak <= size * 2


def test_a_device_without_its_own_meter_has_no_peak():
    out, peak = memory.call_with_peak(lambda: 7, NUMPY, "cuda")
    assert out == 7 and np.isnan(peak)


def test_the_room_is_the_smallest_limit_and_an_rlimit_counts(monkeypatch):
    import psutil

    assert 0 < memory.host_free_bytes() <= psutil.virtual_memory().available
    monkeypatch.setattr(memory, "cgroup_free_bytes", lambda: 123)
    assert memory.host_free_bytes() == 123
    monkeypatch.setattr(memory, "rlimit_free_bytes", lambda: 45)
    assert memory.free_bytes(NUMPY, "cpu") == 45


def test_the_address_space_limit_is_read_against_what_is_mapped():
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        pytest.skip("an address-space limit is already set")
    assert memory.rlimit_free_bytes() is None
