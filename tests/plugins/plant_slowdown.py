"""Plants a slowdown in a registered strategy, for testing the regression
gate: SCATTERBENCH_PLANT="op/strategy:factor" makes that strategy's timed
call take ``factor`` times as long, as a kernel losing its vectorisation
would: the call runs, then spins for (factor - 1) times what it took.
(Running the work several times is not a faithful plant: the repeats find
caches and the allocator warm and cost less than the first.)

The plant stands for a change in this checkout's code, so a process running
another commit's code (the gate measuring a baseline from a commit) does not
get it."""

import dataclasses
import os
import time
from pathlib import Path

import impls
from impls.registry import get_operator

_CHECKOUT = Path(__file__).resolve().parents[2]
_spec = os.environ.get("SCATTERBENCH_PLANT", "")
if _spec and Path(impls.__file__).resolve().parents[1] == _CHECKOUT:
    key, _, factor_text = _spec.partition(":")
    op_name, _, strategy_name = key.partition("/")
    factor = float(factor_text or "3")
    operator = get_operator(op_name)
    original = operator.strategies[strategy_name]

    def slowed_prepare(inputs, params, _prepare=original.prepare, _factor=factor):
        run = _prepare(inputs, params)

        def slowed():
            start = time.perf_counter()
            out = run()
            elapsed = time.perf_counter() - start
            until = start + _factor * elapsed
            while time.perf_counter() < until:
                pass
            return out

        return slowed

    operator.strategies[strategy_name] = dataclasses.replace(original, prepare=slowed_prepare)
