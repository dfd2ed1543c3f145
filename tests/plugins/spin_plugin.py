"""Strategies for the regression tests: correct answers that take a known time.

``spin_steady`` spins 2 ms per call; ``spin_planted`` spins 2 ms times
SCATTERBENCH_TEST_SLOWDOWN (default 1). Spinning on perf_counter is steady to
microseconds, so the tests measure the harness, not this machine's noise.
"""

import os
import time

from impls import maxpool2d
from impls.registry import strategy


def _spinning(seconds):
    def prepare(inputs, params):
        """Test strategy: numpy_sliding_window's answer computed once in
        prepare, then each call spins on perf_counter for a fixed time and
        returns it (a known cost, no memory traffic)."""
        answer = maxpool2d.numpy_sliding_window(inputs, params)()

        def run():
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
            return answer

        return run

    return prepare


strategy("maxpool2d", backend="numpy", returns="values+indices", ties="first", name="spin_steady",
         source="test")(_spinning(0.002))
strategy("maxpool2d", backend="numpy", returns="values+indices", ties="first", name="spin_planted",
         source="test")(_spinning(0.002 * float(os.environ.get("SCATTERBENCH_TEST_SLOWDOWN", "1"))))
