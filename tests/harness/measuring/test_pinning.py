"""Thread pools: set by backend in the knobs' order, read back, put back
after bench(); a loaded machine with unpinned pools is said in one line."""

import os
import subprocess
import sys

from harness.measuring import pinning
from tests.helpers import ROOT


# A fresh process: no library's threading layer started yet, the caller's torch pool at one thread.
PIN_AND_PUT_BACK = """
import torch
torch.set_num_threads(1)
print(torch.get_num_threads())  # read, as a caller does: torch's OpenMP pool is started at 1
from harness.measuring import pinning
with pinning.threads_applied({"torch": 2}) as applied:
    print(applied["torch"], torch.get_num_threads())
print(torch.get_num_threads())
"""


def test_threads_applied_pins_for_the_block_and_puts_the_callers_settings_back():
    """Reading numba's knob starts its threading layer, which resets the
    OpenMP runtime torch shares: read before torch's, it turned the caller's
    1 thread into the library's default, and that was what got put back (seen
    only in a process where nothing had started numba's layer yet: an xdist
    worker, its torch at its share of the cores)."""
    done = subprocess.run([sys.executable, "-c", PIN_AND_PUT_BACK], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "2", "2", "1"], done.stdout


def test_only_the_named_backends_pools_left_unpinned_are_listed():
    every = pinning.unpinned_threads({})
    assert "torch" in every and "numpy" in every
    assert "torch" not in pinning.unpinned_threads({"torch": 1})
    assert pinning.unpinned_threads({}, backends={"torch"}) == ["torch"]


def test_the_warning_needs_an_unpinned_pool_and_a_machine_at_capacity():
    line = pinning.oversubscription_warning({}, load=2.0, cores=2, backends={"torch"})
    assert line and "threads.torch is unpinned" in line and "\n" not in line
    assert pinning.oversubscription_warning({}, load=1.5, cores=2, backends={"torch"}) is None
    assert pinning.oversubscription_warning({"torch": 1}, load=8.0, cores=2, backends={"torch"}) is None
