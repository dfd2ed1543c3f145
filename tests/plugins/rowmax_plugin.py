"""A whole operator defined outside the project, loaded only through
SCATTERBENCH_PLUGINS: proof that a new operator needs no edit to any file of
the suite (list, check, run, compare, regress, report and dashboard all see it).

rowmax: the maximum of each row of x (R, L) -> (R,), bitwise.
"""

import numpy as np

from impls import common
from impls.registry import Operator, ParamSpec, register_operator, strategy


def oracle(inputs, params):
    return inputs["x"].max(axis=-1)


def generate(params, mode="random", seed=0):
    rng = np.random.default_rng(seed)
    shape = (params["R"], params["L"])
    if mode == "random":
        return {"x": rng.standard_normal(shape)}
    return {"x": rng.integers(-3, 4, size=shape).astype(np.float64)}


def bytes_moved(params, itemsize, returns="output"):
    return params["R"] * (params["L"] + 1) * itemsize


def validate(params):
    if params["L"] > 1 << 24:
        raise ValueError(f"L={params['L']}: rows longer than 2**24 are not supported")


def compare(out, ref, inputs, dtype, strat, params=None):
    return common.compare_bitwise("output", out, ref, dtype)


register_operator(Operator(
    name="rowmax", doc=__doc__, params=(ParamSpec("R"), ParamSpec("L")), generate=generate, oracle=oracle,
    bytes_moved=bytes_moved, compare=compare, validate=validate,
    check_cases=lambda: [dict(R=3, L=5), dict(R=1, L=1)], reference="numpy_max", layout_keys=("x",),
    check_layouts=("contiguous", "noncontiguous")))


@strategy("rowmax", backend="numpy", source="plugin loop", baseline=True)
def python_loop(inputs, params):
    """A Python loop over rows: the slow original."""
    x = inputs["x"]
    return lambda: np.array([row.max() for row in x], dtype=x.dtype)


@strategy("rowmax", backend="numpy", builtin=True)
def numpy_max(inputs, params):
    """numpy's own reduction."""
    x = inputs["x"]
    return lambda: x.max(axis=-1)
