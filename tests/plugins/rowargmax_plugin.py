"""A plugin operator that returns argmax indices, and a tie rule of its own
read from the strategies' ``ties`` (docs/PLUGINS.md, "Argmax indices and the
tie rule"): the keyword is every operator's, the operator's compare applies it.

rowargmax: the maximum of each row of x (R, L) and its index, (R,) float and
(R,) int64; ties: the first maximum, or with ``ties="any"`` any maximum.
"""

import numpy as np

from impls import common
from impls.common import Verdict
from impls.registry import Operator, ParamSpec, register_operator, strategy


def oracle(inputs, params):
    x = inputs["x"]
    return x.max(axis=-1), x.argmax(axis=-1)


def generate(params, mode="random", seed=0):
    rng = np.random.default_rng(seed)
    shape = (params["R"], params["L"])
    if mode == "random":
        return {"x": rng.standard_normal(shape)}
    return {"x": rng.integers(-1, 2, size=shape).astype(np.float64)}  # ties in almost every row


def bytes_moved(params, itemsize, returns="output"):
    return params["R"] * (params["L"] * itemsize + itemsize + 8)


def compare(out, ref, inputs, dtype, strat, params=None):
    """Values bitwise; indices exactly under first-maximum ties, or, for a
    strategy declaring ties="any", pointing at a maximum of their row. An
    undeclared strategy ("n/a") is held to the first maximum."""
    values, indices = out
    verdict = common.compare_bitwise("values", values, ref[0], dtype)
    if strat.ties == "any":
        pointed = np.take_along_axis(inputs["x"], indices[:, None], axis=-1)[:, 0]
        fine = pointed == ref[0]
    else:
        fine = indices == ref[1]
    if not fine.all():
        return common.merge_verdicts(verdict, Verdict(
            "mismatch", f"indices ({'any' if strat.ties == 'any' else 'first'} ties): "
            + common.first_difference(indices, ref[1], ~fine), differences=frozenset({common.INDEX})))
    return verdict


register_operator(Operator(
    name="rowargmax", doc=__doc__, params=(ParamSpec("R"), ParamSpec("L")), generate=generate, oracle=oracle,
    bytes_moved=bytes_moved, compare=compare, validate=lambda params: None,
    check_cases=lambda: [dict(R=16, L=7), dict(R=4, L=1)], reference="numpy_argmax",
    check_layouts=("contiguous",)))


def _last_maximum(x):
    """The last maximum of each row: the reversed row's first."""
    indices = x.shape[-1] - 1 - x[:, ::-1].argmax(axis=-1)
    return np.take_along_axis(x, indices[:, None], axis=-1)[:, 0], indices


@strategy("rowargmax", backend="numpy", baseline=True, ties="first")
def numpy_argmax(inputs, params):
    """numpy's argmax: the first maximum."""
    x = inputs["x"]
    return lambda: (x.max(axis=-1), x.argmax(axis=-1))


@strategy("rowargmax", backend="numpy", ties="any")
def last_maximum_declared(inputs, params):
    """The last maximum, declared ties="any": correct under its declaration."""
    return lambda: _last_maximum(inputs["x"])


@strategy("rowargmax", backend="numpy")
def last_maximum_undeclared(inputs, params):
    """The last maximum with no ties=: held to the first, a mismatch on ties."""
    return lambda: _last_maximum(inputs["x"])
