"""avgpool2d: average pooling, k x k windows, stride k, no padding.

The worked example of docs/PLUGINS.md: a new operator with its oracle,
generator, bytes formula, comparison, backward (the training modes) and
three strategies, and one more strategy for an existing operator
(maxpool2d). Loaded with

    SCATTERBENCH_PLUGINS=docs/examples/plugin_avgpool2d.py scatterbench check docs/examples/avgpool2d.yaml

in:  x (N, C, H, W) float.
out: (N, C, H//k, W//k), x's dtype: the mean of each window. Rows and
     columns past (H//k)*k and (W//k)*k are cropped, as maxpool2d crops them.
bytes: x + the output.
backward: grad_x (N, C, H, W) = each window's incoming gradient divided by
     k*k, on every element of the window; cropped rows and columns get zero.
"""

from __future__ import annotations

import numpy as np

from impls import common
from impls.registry import Gradient, Operator, ParamSpec, register_operator, strategy


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


def bytes_written(params, itemsize: int, returns: str = "output") -> int:
    """The part of bytes_moved that every call writes afresh: the output."""
    N, C, H, W, k = (params[key] for key in ("N", "C", "H", "W", "k"))
    return N * C * (H // k) * (W // k) * itemsize


def compare(out, expected, inputs, dtype: str, strat, params: dict):
    """An arithmetic operator: relative error against the dtype's bound
    (ok, then inexact, then mismatch), as dispersion is judged."""
    return common.compare_relative("output", out, expected, dtype)


def check_cases():
    """Small cases every strategy is checked on, in every mode and layout:
    divisible and not, k=1, k equal to the plane, an odd k, a wide plane."""
    return [dict(N=2, C=3, H=8, W=8, k=2), dict(N=2, C=3, H=7, W=9, k=2), dict(N=1, C=2, H=5, W=5, k=1),
            dict(N=1, C=1, H=4, W=4, k=4), dict(N=1, C=2, H=10, W=11, k=3), dict(N=1, C=1, H=3, W=300, k=3)]


OP = register_operator(Operator(
    name="avgpool2d", doc=__doc__,
    params=(ParamSpec("N"), ParamSpec("C"), ParamSpec("H"), ParamSpec("W"), ParamSpec("k", doc="window and stride")),
    generate=generate, oracle=oracle, bytes_moved=bytes_moved, bytes_written=bytes_written, compare=compare,
    validate=validate, check_cases=check_cases, reference="numpy_reshape_mean", layout_keys=("x",)))


# ---------------------------------------------------------------- backward
def grad_oracle(inputs, grad, params):
    """float64 backward, the formula itself: every element of a window gets
    the window's incoming gradient over k*k; cropped rows and columns, 0."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    grad_x = np.zeros((N, C, H, W))
    grad_x[:, :, :h * k, :w * k] = np.repeat(np.repeat(grad / (k * k), k, axis=2), k, axis=3)
    return grad_x


def generate_grad(params, mode: str = "random", seed: int = 0):
    """The incoming gradient, float64, the output's shape: standard normal, or
    (adversarial) non-zero integers that differ between neighbours, so a
    gradient spread over the wrong window shows."""
    rng = np.random.default_rng((seed, 1))
    shape = (params["N"], params["C"], params["H"] // params["k"], params["W"] // params["k"])
    return common.gradient_values(rng, shape, mode)


def grad_bytes(params, itemsize: int) -> int:
    """The incoming gradient read, grad_x written (nothing saved is read)."""
    N, C, H, W, k = (params[key] for key in ("N", "C", "H", "W", "k"))
    return (N * C * (H // k) * (W // k) + N * C * H * W) * itemsize


def grad_bytes_written(params, itemsize: int) -> int:
    """grad_x, the size of x: written afresh by every call."""
    return params["N"] * params["C"] * params["H"] * params["W"] * itemsize


def grad_compare(out, expected, inputs, grad, dtype: str, strat, params: dict):
    """A division by k*k: relative error against the dtype's bound, as the
    forward is judged."""
    return common.compare_relative("grad_x", out, expected, dtype)


# The harness adds -0.0, subnormals, ±inf, NaN and the largest finite values to every adversarial
# incoming gradient unless the operator says why it cannot take them: a mean is judged by a relative
# error, which NaN and ±inf leave unbounded.
OP.gradient = Gradient(input="x", name="grad_output", generate=generate_grad, oracle=grad_oracle,
                       bytes_moved=grad_bytes, compare=grad_compare, bytes_written=grad_bytes_written,
                       normal_values_only="a mean is judged by a relative error (SPEC 1.3), which NaN, ±inf and "
                                          "the largest finite values leave unbounded")


# ------------------------------------------------------------- strategies
def loop_backward(inputs, params):
    """python_loops' explicit backward, in its style: one slice assignment
    per window. ``saved`` (the forward's output) is not needed: a mean's
    gradient does not depend on the values averaged."""
    x, k = inputs["x"], params["k"]
    h, w = x.shape[2] // k, x.shape[3] // k

    def backward(saved, grad):
        grad_x = np.zeros(x.shape, dtype=grad.dtype)
        for i in range(h):
            for j in range(w):
                grad_x[:, :, i * k:(i + 1) * k, j * k:(j + 1) * k] = grad[:, :, i:i + 1, j:j + 1] / (k * k)
        return grad_x

    return backward


@strategy("avgpool2d", backend="numpy", source="example: the naive original", baseline=True,
          backward=loop_backward)
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


def broadcast_backward(inputs, params):
    """numpy_reshape_mean's explicit backward: the gradient over k*k,
    broadcast over each window's two axes and written into the crop of a
    zeroed grad_x in one assignment."""
    N, C, H, W = inputs["x"].shape
    k = params["k"]
    h, w = H // k, W // k

    def backward(saved, grad):
        grad_x = np.zeros((N, C, H, W), dtype=grad.dtype)
        spread = np.broadcast_to((grad / (k * k))[:, :, :, None, :, None], (N, C, h, k, w, k))
        grad_x[:, :, :h * k, :w * k] = spread.reshape(N, C, h * k, w * k)
        return grad_x

    return backward


@strategy("avgpool2d", backend="numpy", backward=broadcast_backward)
def numpy_reshape_mean(inputs, params):
    """Every window on two axes of one reshape, one mean over both: a single
    pass, and the regression gate's reference for this operator."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    return lambda: x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).mean(axis=(3, 5))


@strategy("avgpool2d", backend="torch", builtin=True, dtypes=("float32", "float64", "bfloat16"))
def torch_avg_pool2d(inputs, params):
    """PyTorch's own F.avg_pool2d: the built-in most users call. A torch
    strategy needs no backward of its own: autograd differentiates it."""
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
