"""avgpool2d: average pooling, k x k windows, stride k, no padding.

The worked example of docs/PLUGINS.md: a new operator with its oracle,
generator, bytes formula, comparison and three strategies, and one more
strategy for an existing operator (maxpool2d). Loaded with

    SCATTERBENCH_PLUGINS=docs/examples/plugin_avgpool2d.py scatterbench check docs/examples/avgpool2d.yaml

in:  x (N, C, H, W) float.
out: (N, C, H//k, W//k), x's dtype: the mean of each window. Rows and
     columns past (H//k)*k and (W//k)*k are cropped, as maxpool2d crops them.
bytes: x + the output.
"""

from __future__ import annotations

import numpy as np

from impls import common
from impls.registry import Operator, ParamSpec, register_operator, strategy


# ---------------------------------------------------------------- contract
def validate(params) -> None:
    """Raises ValueError naming the problem; a config that breaks it is refused
    before anything runs (one line naming the file and key)."""
    if params["k"] > params["H"] or params["k"] > params["W"]:
        raise ValueError(f"k={params['k']} is larger than the plane {params['H']}x{params['W']}")


def oracle(inputs, params):
    """float64 reference: the windows laid out on two axes, then their mean."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    return x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).mean(axis=(3, 5))


def generate(params, mode: str = "random", seed: int = 0):
    """x as float64. ``random``: standard normal. ``adversarial``: small
    integers around 5000, where a 4x4 window's sum (80,000) overflows
    float16's largest value (65,504): a strategy summing a half-type input in
    its own type fails there, one summing in float32 is exact."""
    rng = np.random.default_rng(seed)
    shape = (params["N"], params["C"], params["H"], params["W"])
    if mode == "random":
        return {"x": rng.standard_normal(shape)}
    return {"x": 5000.0 + rng.integers(-3, 4, size=shape).astype(np.float64)}


def bytes_moved(params, itemsize: int, returns: str = "output") -> int:
    """What any strategy must read and write: x once, the output once."""
    N, C, H, W, k = (params[key] for key in ("N", "C", "H", "W", "k"))
    return (N * C * H * W + N * C * (H // k) * (W // k)) * itemsize


def compare(out, expected, inputs, dtype: str, strat, params: dict):
    """An arithmetic operator: relative error against the dtype's bound
    (ok, then inexact, then mismatch), as dispersion is judged."""
    return common.compare_relative("output", out, expected, dtype)


def check_cases():
    """Small cases every strategy is checked on, in every mode and layout:
    divisible and not, k=1, k equal to the plane, an odd k, a wide plane."""
    return [dict(N=2, C=3, H=8, W=8, k=2), dict(N=2, C=3, H=7, W=9, k=2), dict(N=1, C=2, H=5, W=5, k=1),
            dict(N=1, C=1, H=4, W=4, k=4), dict(N=1, C=2, H=10, W=11, k=3), dict(N=1, C=1, H=3, W=300, k=3)]


register_operator(Operator(
    name="avgpool2d", doc=__doc__,
    params=(ParamSpec("N"), ParamSpec("C"), ParamSpec("H"), ParamSpec("W"), ParamSpec("k", doc="window and stride")),
    generate=generate, oracle=oracle, bytes_moved=bytes_moved, compare=compare, validate=validate,
    check_cases=check_cases, reference="numpy_reshape_mean", layout_keys=("x",)))


# ------------------------------------------------------------- strategies
@strategy("avgpool2d", backend="numpy", source="example: the naive original", baseline=True)
def python_loops(inputs, params):
    """A Python loop over output positions, one numpy mean per window: the
    slow original every speedup is measured against."""
    x, k = inputs["x"], params["k"]
    h, w = x.shape[2] // k, x.shape[3] // k

    def run():
        out = np.empty(x.shape[:2] + (h, w), dtype=x.dtype)
        for i in range(h):
            for j in range(w):
                out[:, :, i, j] = x[:, :, i * k:(i + 1) * k, j * k:(j + 1) * k].mean(axis=(2, 3))
        return out

    return run


@strategy("avgpool2d", backend="numpy")
def numpy_reshape_mean(inputs, params):
    """Every window on two axes of one reshape, one mean over both: a single
    pass, and the regression gate's reference for this operator."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    return lambda: x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).mean(axis=(3, 5))


@strategy("avgpool2d", backend="torch", builtin=True, dtypes=("float32", "float64", "bfloat16"))
def torch_avg_pool2d(inputs, params):
    """PyTorch's own F.avg_pool2d: the built-in most users call."""
    import torch.nn.functional as F

    x, k = inputs["x"], params["k"]
    return lambda: F.avg_pool2d(x, k)


# ----------------------------------------- one more strategy for maxpool2d
@strategy("maxpool2d", backend="torch", dtypes=("float32", "float64"))
def torch_unfold_max(inputs, params):
    """F.unfold lays every window out as a column, torch.max takes its first
    maximum (values and positions); the position in the window becomes the
    flat index in the plane. Returns maxpool2d's whole output, values and
    indices, so it declares neither ``returns=`` nor ``ties=``: it is checked
    on both, with first-maximum ties, and ranked with the others."""
    import torch
    import torch.nn.functional as F

    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    rows = (torch.arange(h).view(h, 1) * k).view(1, 1, 1, h, 1)
    cols = (torch.arange(w).view(1, w) * k).view(1, 1, 1, 1, w)

    def run():
        windows = F.unfold(x, k, stride=k).view(N, C, k * k, h, w)
        values, where = windows.max(dim=2, keepdim=True)
        indices = (rows + where // k) * W + cols + where % k
        return values.squeeze(2), indices.squeeze(2)

    return run
