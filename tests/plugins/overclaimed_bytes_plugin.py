"""An operator whose bytes formula claims ten times the traffic its
strategies move: the floor by size must flag its rows ("over the floor:
bytes formula or curve wrong") rather than print a speed past the machine's.
Loaded through SCATTERBENCH_PLUGINS.

claimed_rowmax: the maximum of each row of x (R, L) -> (R,), as rowmax.
"""

import numpy as np

from impls import common
from impls.registry import Operator, ParamSpec, register_operator, strategy

CLAIMED = 10  # the formula's bytes over the real ones


def generate(params, mode="random", seed=0):
    rng = np.random.default_rng(seed)
    shape = (params["R"], params["L"])
    if mode == "random":
        return {"x": rng.standard_normal(shape)}
    return {"x": rng.integers(-3, 4, size=shape).astype(np.float64)}


def bytes_moved(params, itemsize, returns="output"):
    return CLAIMED * params["R"] * (params["L"] + 1) * itemsize


def bytes_written(params, itemsize, returns="output"):
    return CLAIMED * params["R"] * itemsize


register_operator(Operator(
    name="claimed_rowmax", doc=__doc__, params=(ParamSpec("R"), ParamSpec("L")), generate=generate,
    oracle=lambda inputs, params: inputs["x"].max(axis=-1), bytes_moved=bytes_moved, bytes_written=bytes_written,
    compare=lambda out, ref, inputs, dtype, strat, params=None: common.compare_bitwise("output", out, ref, dtype),
    validate=lambda params: None, check_cases=lambda: [dict(R=3, L=5), dict(R=1, L=1)], reference="numpy_max",
    layout_keys=("x",), check_layouts=("contiguous",)))


@strategy("claimed_rowmax", backend="numpy", baseline=True, builtin=True)
def numpy_max(inputs, params):
    """numpy's own reduction: reads x once, writes R values."""
    x = inputs["x"]
    return lambda: x.max(axis=-1)
