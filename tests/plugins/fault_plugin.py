"""Strategies that fail on purpose, for the reliability tests (loaded through
SCATTERBENCH_PLUGINS, so isolated child processes register them too)."""

import ctypes
import time

import numpy as np

from impls.registry import strategy


def _op(name):
    return strategy("maxpool2d", backend="numpy", returns="values+indices", ties="first", name=name, source="test")


@_op("fault_raises")
def _raises(inputs, params):
    def run():
        raise RuntimeError("deliberate failure")
    return run


@_op("fault_sleeps")
def _sleeps(inputs, params):
    def run():
        while True:
            time.sleep(0.01)
    return run


@_op("fault_allocates")
def _allocates(inputs, params):
    return lambda: np.ones(1 << 50, dtype=np.uint8)  # a petabyte


@_op("fault_segfaults")
def _segfaults(inputs, params):
    return lambda: ctypes.string_at(0)
