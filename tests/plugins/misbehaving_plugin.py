"""Strategies that misbehave in ways a sweep must survive, for
tests/harness/test_faults.py (loaded through SCATTERBENCH_PLUGINS).

``fault_exits`` calls ``sys.exit(0)`` from its timed call, in-process: the
case must be an ``error`` row and the sweep must go on. ``held_open`` is
correct but its calls wait until the file named by SCATTERBENCH_TEST_RELEASE
exists: a run holds its directory for as long as a test needs. The strategy named
``tex_$\\frac{1}{0}$`` is correct (it wraps numpy_sliding_window) and carries
matplotlib mathtext in its name, which every plot label must show as text;
``bad_$\\frac{1}$`` carries mathtext that does not parse (drawing it as math
raises).
"""

import os
import sys
import time

from impls import maxpool2d
from impls.registry import strategy

HOSTILE_NAME = r"tex_$\frac{1}{0}$"
BROKEN_NAME = r"bad_$\frac{1}$"


@strategy("maxpool2d", backend="numpy", returns="values+indices", ties="first", name="fault_exits", source="test")
def _exits(inputs, params):
    def run():
        sys.exit(0)

    return run


@strategy("maxpool2d", backend="numpy", returns="values+indices", ties="first", name=HOSTILE_NAME, source="test")
def _hostile(inputs, params):
    return maxpool2d.numpy_sliding_window(inputs, params)


@strategy("maxpool2d", backend="numpy", returns="values+indices", ties="first", name=BROKEN_NAME, source="test")
def _broken(inputs, params):
    return maxpool2d.numpy_sliding_window(inputs, params)


@strategy("maxpool2d", backend="numpy", returns="values+indices", ties="first", name="held_open", source="test")
def _held_open(inputs, params):
    answer = maxpool2d.numpy_sliding_window(inputs, params)()
    release = os.environ.get("SCATTERBENCH_TEST_RELEASE")

    def run():
        while release and not os.path.exists(release):
            time.sleep(0.01)
        return answer

    return run
