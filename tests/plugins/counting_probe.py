"""Plants for testing the two gates of ``make regress`` (counts and wall time).

``dispersion/probe_channel_steps``: dispersion as one numpy step per channel
(``y[..., i*S : i*S+W] += x[:, i] * mask``, as ``numpy_loop`` does), plus
``SCATTERBENCH_PROBE_EXTRA_PCT`` percent more of the same steps into a
scratch array of y's shape (C=20 and 5 make one step more): real work, not a
sleep, so its instruction count grows by about that much (a little less:
allocating y is not repeated) and nothing else changes.

``SCATTERBENCH_PROBE_SLEEP="op/strategy:factor"`` makes that strategy's call
take ``factor`` times as long by sleeping after it: a slowdown only a clock
sees (a few hundred instructions per call), as a memory-bound slowdown is.

Both stand for a change in this checkout's code, so a process running
another commit's code (a gate measuring its baseline from a commit) gets
neither."""

import dataclasses
import os
import time
from pathlib import Path

import numpy as np

import impls
from impls.registry import get_operator, strategy

_CHECKOUT = Path(__file__).resolve().parents[2]
_PLANTED = Path(impls.__file__).resolve().parents[1] == _CHECKOUT


@strategy("dispersion", backend="numpy", source="test plugin (tests/plugins/counting_probe.py)")
def probe_channel_steps(inputs, params):
    """Test plugin: one numpy slice-add per channel, plus
    SCATTERBENCH_PROBE_EXTRA_PCT percent more of them on a scratch row."""
    x, mask = inputs["x"], inputs["mask"]
    B, C, H, W = x.shape
    S = params["S"]
    percent = float(os.environ.get("SCATTERBENCH_PROBE_EXTRA_PCT", "0") or 0) if _PLANTED else 0.0
    extra = round(C * percent / 100)
    shape = (B, 1, H, W + (C - 1) * S)
    scratch = np.zeros(shape, dtype=x.dtype)  # the extra steps' target: the same shape, strides and slices

    def run():
        y = np.zeros(shape, dtype=x.dtype)
        for i in range(C):
            y[:, 0, :, i * S:i * S + W] += x[:, i] * mask
        for i in range(extra):
            scratch[:, 0, :, i * S:i * S + W] += x[:, i] * mask
        return y

    return run


_spec = os.environ.get("SCATTERBENCH_PROBE_SLEEP", "")
if _spec and _PLANTED:
    key, _, factor_text = _spec.partition(":")
    op_name, _, strategy_name = key.partition("/")
    operator = get_operator(op_name)
    original = operator.strategies[strategy_name]

    def slept_prepare(inputs, params, _prepare=original.prepare, _factor=float(factor_text or "3")):
        run = _prepare(inputs, params)

        def slept():
            start = time.perf_counter()
            out = run()
            time.sleep((_factor - 1) * (time.perf_counter() - start))
            return out

        return slept

    operator.strategies[strategy_name] = dataclasses.replace(original, prepare=slept_prepare)
