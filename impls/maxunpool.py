"""maxunpool — put pooled values back at stored positions (docs/SPEC.md §1.2, seed 002).

in:  values (..., L) float, positions (..., L) int64, size P: each position is
     a flat index into the last axis of an output of shape (..., P).
     form "1d" (the seed's): values (B, F, L), positions inside bins of width
     f, P = L*f, output (B, F, P).
     form "2d": the inverse of maxpool2d — values and flat indices of shape
     (N, C, H//k, W//k) scattered into (N, C, H, W), P = H*W.
out: zeros with ``values`` written at ``positions``. Positions in one row are
     distinct; one outside [0, P) is an error raised by ``maxunpool`` (the
     public entry point), never a silent write.
bytes: values + positions + output.
"""

from __future__ import annotations

import math

import numpy as np
from array_api_compat import array_namespace

from impls import common, maxpool2d
from impls.common import Verdict
from impls.registry import Gradient, NotApplicable, Operator, ParamSpec, compiled, register_operator, strategy

SEED = "seed 002_d8b5391e7a3d2e33.txt"
FORM_PARAMS = {"1d": ("B", "F", "L", "f"), "2d": ("N", "C", "H", "W", "k")}


# ---------------------------------------------------------------- contract
def validate(params) -> None:
    form = params["form"]
    needed = FORM_PARAMS[form]
    missing = [key for key in needed if key not in params]
    if missing:
        raise ValueError(f"form {form} needs {', '.join(needed)}; missing {', '.join(missing)}")
    extra = [key for key in params if key != "form" and key not in needed]
    if extra:
        raise ValueError(f"form {form} takes {', '.join(needed)}; {', '.join(extra)} belongs to the other form")
    if form == "2d":
        maxpool2d.validate(params)


def shapes(params) -> tuple[tuple, tuple]:
    """(pooled shape, output shape) of a parameter set."""
    if params["form"] == "1d":
        B, F, L, f = (params[key] for key in FORM_PARAMS["1d"])
        return (B, F, L), (B, F, L * f)
    N, C, H, W, k = (params[key] for key in FORM_PARAMS["2d"])
    return (N, C, H // k, W // k), (N, C, H, W)


def oracle(inputs, params):
    """In the namespace of the inputs: zeroed output rows, each row's values
    written at its positions (distinct in a row, so the order is moot)."""
    values, positions = inputs["values"], inputs["positions"]
    xp = array_namespace(values, positions)
    _, out_shape = shapes(params)
    rows = math.prod(out_shape[:2])
    flat_out = common.float64_zeros(xp, (rows, math.prod(out_shape[2:])), values)
    flat_out[_row_ids(xp, rows, values), xp.reshape(positions, (rows, -1))] = xp.reshape(values, (rows, -1))
    return xp.reshape(flat_out, out_shape)


def _row_ids(xp, rows: int, like):
    """(rows, 1): each row's number, beside its positions in an index."""
    return xp.reshape(xp.arange(rows, device=common.array_device(like)), (rows, 1))


def generate(params, mode: str = "random", seed: int = 0):
    """1d: one position per bin of width f (adversarial: at the bins' edges);
    2d: values and indices from maxpool2d's oracle on a random or adversarial x.
    Adversarial values are small integers with zeros of either sign, NaN,
    ±inf and subnormals of every float type (in 2d, the maxima of maxpool2d's
    subnormal windows). ``scattered`` (either form): adversarial values at distinct positions
    drawn anywhere in their row, mostly outside their own window or bin: what
    docs/SPEC.md §1.2 asks of every strategy that does not declare "positions-in-window"."""
    rng = np.random.default_rng(seed)
    if mode == "scattered":
        return _scattered(params, rng)
    if params["form"] == "2d":
        pooled = maxpool2d.generate(params, mode, seed)
        values, positions = maxpool2d.oracle(pooled, params)
        return {"values": values, "positions": positions}
    (B, F, L), _ = shapes(params)
    f = params["f"]
    if mode == "random":
        values = rng.standard_normal((B, F, L))
        offsets = rng.integers(0, f, size=(B, F, L))
    else:
        values = _adversarial_values(rng, (B, F, L))
        offsets = np.where(rng.random((B, F, L)) < 0.5, 0, f - 1)
    positions = np.arange(L) * f + offsets
    return {"values": values, "positions": positions.astype(np.int64)}


def _adversarial_values(rng, shape):
    # -0.0 must arrive as -0.0: an output built by adding into zeros would lose
    # its sign. Subnormals of every type must land bit for bit (docs/SPEC.md §1.2
    # compares bitwise): a backend that flushes them on the way is wrong.
    values = common.special_integers(rng, shape, (0.05, 0.1, 0.15))
    return common.sprinkle_subnormals(rng, values, 0.15)


def _scattered(params, rng):
    pooled, out_shape = shapes(params)
    rows, P = math.prod(out_shape[:2]), math.prod(out_shape[2:])
    L = math.prod(pooled[2:])
    # L distinct positions per row, uniformly among all P.
    positions = np.argsort(rng.random((rows, P)), axis=1)[:, :L]
    return {"values": _adversarial_values(rng, pooled), "positions": positions.reshape(pooled).astype(np.int64)}


def bytes_moved(params, itemsize: int, returns: str = "output") -> int:
    pooled, out_shape = shapes(params)
    return math.prod(pooled) * (itemsize + 8) + math.prod(out_shape) * itemsize


def bytes_written(params, itemsize: int, returns: str = "output") -> int:
    """The part of ``bytes_moved`` written: the unpooled output, fresh on every call."""
    return math.prod(shapes(params)[1]) * itemsize


def compare(out, ref, inputs, dtype: str, strat, params=None) -> Verdict:
    return common.compare_bitwise("output", out, ref, dtype)


def check_cases():
    return [dict(form="1d", B=2, F=3, L=4, f=5), dict(form="1d", B=3, F=2, L=7, f=1),
            dict(form="1d", B=1, F=1, L=9, f=3), dict(form="2d", N=2, C=3, H=8, W=8, k=2),
            dict(form="2d", N=2, C=2, H=7, W=9, k=2), dict(form="2d", N=1, C=2, H=10, W=11, k=3),
            # rows wider than one 128-column Triton tile
            dict(form="1d", B=2, F=2, L=100, f=3), dict(form="2d", N=1, C=2, H=4, W=301, k=2)]


# docs/SPEC.md §1.2: the precondition a gather formulation needs (Strategy.requires).
POSITIONS_IN_WINDOW = "positions-in-window"


def extra_checks():
    """Distinct positions anywhere in their row (mode ``scattered``), both forms:
    every strategy must handle them, except those that declare they need
    positions inside their own window or bin."""
    why = "distinct positions outside their own window or bin (docs/SPEC.md §1.2)"
    return [dict(params=params, modes=("scattered",), violates=(POSITIONS_IN_WINDOW,), why=why)
            for params in (dict(form="1d", B=2, F=3, L=7, f=3), dict(form="1d", B=2, F=2, L=9, f=1),
                           dict(form="2d", N=2, C=2, H=7, W=9, k=2))]



OP = register_operator(Operator(
    name="maxunpool", doc=__doc__,
    params=(ParamSpec("form", kind=str, minimum=None, choices=("1d", "2d")),
            *(ParamSpec(key, required=False) for key in ("B", "F", "L", "f", "N", "C", "H", "W", "k"))),
    generate=generate, oracle=oracle, bytes_moved=bytes_moved, bytes_written=bytes_written, compare=compare,
    validate=validate, reference="torch_scatter", layout_keys=("values", "positions"),
    layout_shapes=lambda params: dict.fromkeys(("values", "positions"), shapes(params)[0]),
    check_cases=check_cases, extra_checks=extra_checks, any_namespace=True,
    library_call=("torch_max_unpool1d", "torch_max_unpool2d")))  # F.max_unpool1d, F.max_unpool2d


# ------------------------------------------------------------- gradient (docs/SPEC.md §1.5)
def grad_oracle(inputs, grad, params):
    """float64 backward, in the namespace of the inputs: the gather
    ``grad_values[..., l] = grad_out[..., positions[..., l]]``, every row at once."""
    positions = inputs["positions"]
    xp = array_namespace(positions, grad)
    pooled, out_shape = shapes(params)
    rows = math.prod(out_shape[:2])
    gathered = xp.reshape(grad, (rows, -1))[_row_ids(xp, rows, grad), xp.reshape(positions, (rows, -1))]
    return xp.reshape(xp.astype(gathered, xp.float64), pooled)


def generate_grad(params, mode: str = "random", seed: int = 0):
    """grad_out, the output's shape (common.gradient_values)."""
    _, out_shape = shapes(params)
    return common.gradient_values(np.random.default_rng((seed, 1)), out_shape, mode, special=True)


def grad_bytes(params, itemsize: int) -> int:
    """grad_out and the saved int64 positions read, grad_values written."""
    pooled, out_shape = shapes(params)
    return math.prod(out_shape) * itemsize + math.prod(pooled) * (8 + itemsize)


def grad_compare(out, ref, inputs, grad, dtype: str, strat, params=None) -> Verdict:
    """grad_values bitwise: a gather moves values, it computes none."""
    return common.compare_gradient_bitwise("grad_values", out, ref, dtype)


def grad_bytes_written(params, itemsize: int) -> int:
    """grad_values, the size of the pooled values."""
    pooled, _ = shapes(params)
    return math.prod(pooled) * itemsize


OP.gradient = Gradient(input="values", name="grad_out", generate=generate_grad, oracle=grad_oracle,
                       bytes_moved=grad_bytes, compare=grad_compare, bytes_written=grad_bytes_written)


def _grad_rows(grad_out, values):
    """grad_out as (A, B, P) rows (a view where the strides allow)."""
    return grad_out.reshape(values.shape[:2] + (-1,))


def seed_row_loop_backward(inputs, params):
    """The explicit backward of ``numpy_seed_row_loop``, in the seed's own
    style: the question's loop over (item, filter), one fancy-index read per
    row, ``grad_values[a, b, :] = grad_out[a, b, positions[a, b, :]]``. A·B
    interpreted iterations, each a small gather of L values. It is the
    baseline of "× the seed" in the backward modes. Source: seed 002's
    ``upsamplecode`` loop, read backwards."""
    values, positions, _, _ = _rows(inputs, params)
    shape = inputs["values"].shape

    def backward(saved, grad_out):
        upsampled_grad = _grad_rows(grad_out, values)
        encoded_grad = np.empty(values.shape, dtype=grad_out.dtype)
        for whichitem in range(values.shape[0]):
            for whichfilt in range(values.shape[1]):
                encoded_grad[whichitem, whichfilt, :] = upsampled_grad[whichitem, whichfilt,
                                                                       positions[whichitem, whichfilt, :]]
        return encoded_grad.reshape(shape)

    return backward


def seed_flat_backward(inputs, params):
    """The explicit backward of ``numpy_seed_flat_set``, in its style: one
    read of the flattened gradient at positions plus the precomputed per-row
    offsets (the same table as the forward's, built once). The add makes a
    full int64 temporary per call; a strided gradient is copied by the ravel."""
    values, positions, P, _ = _rows(inputs, params)
    A, B, L = values.shape
    flat_positions = positions.ravel()
    offsets = flat_row_offsets(A, B, L, P)
    shape = inputs["values"].shape

    def backward(saved, grad_out):
        return grad_out.ravel()[flat_positions + offsets].reshape(shape)

    return backward


def seed_broadcast_backward(inputs, params):
    """The explicit backward of ``numpy_seed_broadcast``, in its style: one
    advanced-index read ``grad_out[arange(A)[:,None,None], arange(B)[None,:,None], positions]``."""
    values, positions, _, _ = _rows(inputs, params)
    items = np.arange(values.shape[0]).reshape(-1, 1, 1)
    filters = np.arange(values.shape[1]).reshape(1, -1, 1)
    shape = inputs["values"].shape

    def backward(saved, grad_out):
        return _grad_rows(grad_out, values)[items, filters, positions].reshape(shape)

    return backward


def take_along_axis_backward(inputs, params):
    """The explicit backward of ``numpy_put_along_axis``: its adjoint,
    ``np.take_along_axis(grad_out, positions, axis=-1)``."""
    values, positions, _, _ = _rows(inputs, params)
    shape = inputs["values"].shape

    def backward(saved, grad_out):
        return np.take_along_axis(_grad_rows(grad_out, values), positions, axis=-1).reshape(shape)

    return backward


def numba_gather_backward(inputs, params):
    """The numba backward: a row-parallel gather, grad_values written once
    (``kernels_numba.maxunpool_backward``; in channels-last, where the
    positions are held so, ``maxunpool_nhwc_backward`` on them as they are)."""
    from impls import kernels_numba

    shape = inputs["values"].shape
    if _channels_last(inputs):
        positions = _pixels(inputs["positions"])
        N = shape[0]

        def backward(saved, grad_out):
            grad_values = np.empty(positions.shape, dtype=grad_out.dtype)
            # A gradient held otherwise is converted here, in the timed call.
            bad = kernels_numba.maxunpool_nhwc_backward(_pixels(grad_out).reshape(N, -1), positions, grad_values)
            if bad:
                raise ValueError(f"positions: {bad} outside [0, {params['H'] * params['W']})")
            return grad_values.transpose(0, 3, 1, 2)

        return backward
    values, positions, P, _ = _rows(inputs, params)
    rows = values.shape[0] * values.shape[1]
    flat_positions = positions.reshape(rows, -1)

    def backward(saved, grad_out):
        grad_values = np.empty(flat_positions.shape, dtype=grad_out.dtype)
        bad = kernels_numba.maxunpool_backward(grad_out.reshape(rows, P), flat_positions, grad_values)
        if bad:
            raise ValueError(f"positions: {bad} outside [0, {P})")
        return grad_values.reshape(shape)

    return backward


def triton_gather_backward(inputs, params):
    """The Triton backward of both Triton strategies
    (``kernels_triton.unpool_backward``): each grad_values element reads
    grad_out at its position, written once; a position outside [0, P) wrote
    nothing forward and gets 0."""
    from impls import kernels_triton

    positions, shape = inputs["positions"], tuple(inputs["values"].shape)

    def backward(saved, grad_out):
        return kernels_triton.unpool_backward(grad_out, positions, shape)

    return backward


PYTENSOR_NO_BACKWARD = ("backward not written yet (PyTensor's own pytensor.grad of the compiled graph "
                        "would be its framework's backward)")


# --------------------------------------------------------- public entry point
def maxunpool(values, positions, size: int):
    """Scatter ``values`` (..., L) to ``positions`` in zeros of shape (..., size).

    Works on numpy arrays and torch tensors; rejects a bad shape, dtype or
    position with a one-line ValueError before writing anything.
    """
    if tuple(values.shape) != tuple(positions.shape):
        raise ValueError(f"values shape {tuple(values.shape)} differs from positions shape {tuple(positions.shape)}")
    if str(positions.dtype).replace("torch.", "") not in ("int64", "int32"):
        raise ValueError(f"positions dtype {positions.dtype}: expected int64")
    if size < 1:
        raise ValueError(f"size {size}: must be >= 1")
    if positions.numel() if hasattr(positions, "numel") else positions.size:
        low, high = int(positions.min()), int(positions.max())
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            where = tuple(int(i) for i in np.argwhere(common.to_numpy(positions) == bad)[0])
            raise ValueError(f"positions: index {bad} at {where} is outside [0, {size})")
    if hasattr(values, "detach"):
        import torch

        out = torch.zeros(tuple(values.shape[:-1]) + (size,), dtype=values.dtype, device=values.device)
        return out.scatter_(-1, positions.to(torch.int64), values)
    out = np.zeros(values.shape[:-1] + (size,), dtype=values.dtype)
    np.put_along_axis(out, positions.astype(np.int64), values, axis=-1)
    return out


def flat_row_offsets(A: int, B: int, L: int, P: int) -> np.ndarray:
    """The seed's ``add_to_flattened_indices``: row (a, b)'s start in the flat
    output, repeated for each of its L values (int64, built once per case)."""
    return ((np.arange(A)[:, None, None] * B + np.arange(B)[None, :, None]) * P
            + np.zeros((1, 1, L), dtype=np.int64)).ravel()


# The strategies that take their rows with ``_rows`` in prepare: a reshape there would convert a
# channels-last case outside the timed call, so they declare contiguous rows their only native
# layout and the harness times that conversion in their call (docs/SPEC.md §2, Strategy.native_layouts).
ROWS_CONTIGUOUS = ("contiguous",)


def _rows(inputs, params):
    """values and positions as (A, B, L) (a view when contiguous), P and the output shape."""
    _, out_shape = shapes(params)
    lead = out_shape[:2]
    values = inputs["values"].reshape(*lead, -1)
    positions = inputs["positions"].reshape(*lead, -1)
    return values, positions, math.prod(out_shape[2:]), out_shape


# ------------------------------------------------------------- strategies
@strategy("maxunpool", backend="numpy", source=f"{SEED} upsamplecode (per-row set_subtensor loop)",
          baseline=True, backward=seed_row_loop_backward, native_layouts=ROWS_CONTIGUOUS)
def numpy_seed_row_loop(inputs, params):
    """The question's loop over (item, filter): one fancy-index assignment per
    row. A·B interpreted iterations, each a small scatter of L values."""
    values, positions, P, out_shape = _rows(inputs, params)

    def run():
        upsampled = np.zeros(values.shape[:2] + (P,), dtype=values.dtype)
        for whichitem in range(values.shape[0]):
            for whichfilt in range(values.shape[1]):
                upsampled[whichitem, whichfilt, positions[whichitem, whichfilt, :]] = values[whichitem, whichfilt, :]
        return upsampled.reshape(out_shape)

    return run


@strategy("maxunpool", backend="numpy", source=f"{SEED} upsamplecode2 (flattened indices + row offsets)",
          backward=seed_flat_backward, builtin=True, native_layouts=ROWS_CONTIGUOUS)
def numpy_seed_flat_set(inputs, params):
    """The question's update: one set on the flattened output, positions plus a
    precomputed per-row offset table (the seed's shared variable, built once).
    The add makes a full int64 temporary per call."""
    values, positions, P, out_shape = _rows(inputs, params)
    A, B, L = values.shape
    add_to_flattened_indices = flat_row_offsets(A, B, L, P)

    def run():
        upsampled = np.zeros(A * B * P, dtype=values.dtype)
        upsampled[positions.ravel() + add_to_flattened_indices] = values.ravel()
        return upsampled.reshape(out_shape)

    return run


@strategy("maxunpool", backend="numpy", source=f"{SEED} answer (advanced-index broadcast, numpy)",
          backward=seed_broadcast_backward, builtin=True, native_layouts=ROWS_CONTIGUOUS)
def numpy_seed_broadcast(inputs, params):
    """The answer: ``out[arange(A)[:,None,None], arange(B)[None,:,None], pos] = v``.
    One scatter; numpy broadcasts three index arrays to compute each offset."""
    values, positions, P, out_shape = _rows(inputs, params)
    shp = values.shape

    def run():
        upsampled_np = np.zeros((shp[0], shp[1], P), dtype=values.dtype)
        upsampled_np[np.arange(shp[0]).reshape(-1, 1, 1), np.arange(shp[1]).reshape(1, -1, 1), positions] = values
        return upsampled_np.reshape(out_shape)

    return run


@strategy("maxunpool", backend="numpy", builtin=True, backward=take_along_axis_backward,
          native_layouts=ROWS_CONTIGUOUS)
def numpy_put_along_axis(inputs, params):
    """Added: ``np.put_along_axis(out, positions, values, axis=-1)`` — the
    library's own call for this; builds the same fancy index internally."""
    values, positions, P, out_shape = _rows(inputs, params)

    def run():
        out = np.zeros(values.shape[:2] + (P,), dtype=values.dtype)
        np.put_along_axis(out, positions, values, axis=-1)
        return out.reshape(out_shape)

    return run


@strategy("maxunpool", backend="torch", source=f"{SEED} upsamplecode (per-row loop, torch)",
          native_layouts=ROWS_CONTIGUOUS)
def torch_seed_row_loop(inputs, params):
    """The question's per-(item, filter) loop in torch: A·B indexed
    assignments, each a kernel launch on CUDA."""
    import torch

    values, positions, P, out_shape = _rows(inputs, params)

    def run():
        upsampled = torch.zeros(values.shape[:2] + (P,), dtype=values.dtype, device=values.device)
        for whichitem in range(values.shape[0]):
            for whichfilt in range(values.shape[1]):
                upsampled[whichitem, whichfilt, positions[whichitem, whichfilt, :]] = values[whichitem, whichfilt, :]
        return upsampled.reshape(out_shape)

    return run


@strategy("maxunpool", backend="torch", source=f"{SEED} upsamplecode2 (flattened indices, torch)", builtin=True,
          native_layouts=ROWS_CONTIGUOUS)
def torch_seed_flat_set(inputs, params):
    """The question's flattened single set in torch, offsets precomputed once."""
    import torch

    values, positions, P, out_shape = _rows(inputs, params)
    A, B, L = values.shape
    offsets = ((torch.arange(A, device=values.device).view(A, 1, 1) * B
                + torch.arange(B, device=values.device).view(1, B, 1)) * P).expand(A, B, L).reshape(-1)

    def run():
        upsampled = torch.zeros(A * B * P, dtype=values.dtype, device=values.device)
        upsampled[positions.reshape(-1) + offsets] = values.reshape(-1)
        return upsampled.reshape(out_shape)

    return run


@strategy("maxunpool", backend="torch", source=f"{SEED} answer (advanced-index broadcast, torch)", builtin=True,
          native_layouts=ROWS_CONTIGUOUS)
def torch_seed_broadcast(inputs, params):
    """The answer's broadcast index in torch: ``index_put_`` with three
    broadcast index tensors (aranges built once)."""
    import torch

    values, positions, P, out_shape = _rows(inputs, params)
    A, B, _ = values.shape
    items = torch.arange(A, device=values.device).view(-1, 1, 1)
    filters = torch.arange(B, device=values.device).view(1, -1, 1)

    def run():
        upsampled = torch.zeros((A, B, P), dtype=values.dtype, device=values.device)
        upsampled[items, filters, positions] = values
        return upsampled.reshape(out_shape)

    return run


@strategy("maxunpool", backend="torch", builtin=True, native_layouts=ROWS_CONTIGUOUS)
def torch_scatter(inputs, params):
    """Added: ``zeros(...).scatter_(-1, positions, values)`` — one zero fill, one
    scatter kernel, no index arithmetic."""
    import torch

    values, positions, P, out_shape = _rows(inputs, params)

    def run():
        out = torch.zeros(values.shape[:2] + (P,), dtype=values.dtype, device=values.device)
        return out.scatter_(-1, positions, values).reshape(out_shape)

    return run


@strategy("maxunpool", backend="torch", builtin=True, native_layouts=ROWS_CONTIGUOUS)
def torch_index_put(inputs, params):
    """Added: ``index_put_`` on the flat output with flat indices built in-call
    (``positions + row*P``) — the accumulate-free flat write."""
    import torch

    values, positions, P, out_shape = _rows(inputs, params)
    A, B, L = values.shape
    row_base = (torch.arange(A * B, device=values.device) * P).view(A, B, 1)

    def run():
        out = torch.zeros(A * B * P, dtype=values.dtype, device=values.device)
        out.index_put_(((positions + row_base).reshape(-1),), values.reshape(-1))
        return out.view(out_shape)

    return run


# PyTorch's CUDA max-unpool kernels index the output with 32-bit ints (the index
# is read into an ``int``): past 2**31 elements a
# device-side assert kills the process, or a narrowed index writes elsewhere.
CUDA_INT32_ELEMENTS = 2**31


def refuse_cuda_int32_overflow(device, params, what: str) -> None:
    """NotApplicable, before anything is launched, for a case whose output or
    input has 2**31 elements or more on CUDA (docs/SPEC.md §2, Size)."""
    if getattr(device, "type", device) != "cuda":
        return
    pooled, out_shape = shapes(params)
    largest = max(math.prod(out_shape), math.prod(pooled))
    if largest >= CUDA_INT32_ELEMENTS:
        raise NotApplicable(f"{what} on CUDA indexes with 32-bit ints: {largest} elements "
                            f"(>= 2**31) would hit a device-side assert or a wrong write")


@strategy("maxunpool", backend="torch", builtin=True)
def torch_max_unpool1d(inputs, params):
    """Added: ``F.max_unpool1d(values, positions, f, output_size=P)`` — the
    built-in for the seed's 1-D form (the 2-D form's cropped size is outside
    what its window arithmetic allows)."""
    import torch.nn.functional as F

    if params["form"] != "1d":
        raise NotApplicable("max_unpool1d takes the 1-D form; the 2-D form is max_unpool2d's")
    values, positions, f = inputs["values"], inputs["positions"], params["f"]
    refuse_cuda_int32_overflow(values.device, params, "max_unpool1d (max_unpool2d's kernel)")
    P = values.shape[-1] * f
    return lambda: F.max_unpool1d(values, positions, f, output_size=(P,))


@strategy("maxunpool", backend="torch", builtin=True)
def torch_max_unpool2d(inputs, params):
    """Added: ``F.max_unpool2d`` — the built-in inverse of ``max_pool2d``; the
    1-D form runs as a (B, F, 1, L) plane with a (1, f) window. On CUDA it
    declares cases of 2**31 elements or more NotApplicable (32-bit indexing).
    Takes channels-last natively (ATen has an NHWC kernel). Strided positions
    are made contiguous here, in the untimed prepare: torch 2.13's backward of
    ``max_unpool2d`` ``view``s the positions it saved and raises ("view size
    is not compatible with input tensor's size and stride") on transposed
    ones; the forward copies strided positions itself. A strided view is the
    check's input only, never a timed case's (docs/SPEC.md §2)."""
    import torch
    import torch.nn.functional as F

    values, positions = inputs["values"], inputs["positions"]
    refuse_cuda_int32_overflow(values.device, params, "max_unpool2d")  # before any copy
    if not (positions.dim() == 4 and positions.is_contiguous(memory_format=torch.channels_last)):
        positions = positions.contiguous()
    if params["form"] == "2d":
        k, size = params["k"], (params["H"], params["W"])
        return lambda: F.max_unpool2d(values, positions, k, output_size=size)
    f = params["f"]
    size = (1, values.shape[-1] * f)
    values4, positions4 = values.unsqueeze(2), positions.unsqueeze(2)
    return lambda: F.max_unpool2d(values4, positions4, (1, f), output_size=size).squeeze(2)


# ---------------------------------------------------- PyTensor (Theano's successor)
# PyTensor 3 JIT-compiles each graph with numba at its first call, and these
# graphs bake in their shapes (zeros((A, B, P)), the unrolled rows, the offset
# table): every new shape is a compile of 1 to 3 s, so their checks use the
# reduced case set of the per-shape compiled strategies (``quick_check``).
# The compiled functions of this process, by what their graphs bake in: a
# sweep prepares a strategy once for its check and again for each round, and
# compiling the unrolled loop each time was 2.5 s a prepare (10 s of a `make
# bench`). At most PYTENSOR_KEPT, the oldest let go first.
PYTENSOR_KEPT = 8
_PYTENSOR_COMPILED: dict = {}


def _pytensor_function(values, build, P: int):
    """Compiles ``build(v, p)`` (outside the timed region), like
    ``theano.function``; once per process for each strategy's ``build``
    (named by where it is defined) on values of one shape and dtype and output rows of ``P``, which
    is all the graph bakes in (its shapes, its offset table; P apart: a
    cropped 9×9 plane pools to 4×4 as an 8×8 one does): a new prepare gets
    new inputs, the compiled code is a constant like a numba kernel."""
    import pytensor
    import pytensor.tensor as pt

    key = (build.__qualname__, tuple(values.shape), str(values.dtype), int(P))
    fn = _PYTENSOR_COMPILED.get(key)
    if fn is None:
        v = pt.tensor3("values", dtype=str(values.dtype))
        p = pt.tensor3("positions", dtype="int64")
        fn = pytensor.function([v, p], build(v, p, pt))
        while len(_PYTENSOR_COMPILED) >= PYTENSOR_KEPT:
            _PYTENSOR_COMPILED.pop(next(iter(_PYTENSOR_COMPILED)))
        _PYTENSOR_COMPILED[key] = fn
    return fn


@strategy("maxunpool", backend="pytensor", source=f"{SEED} upsamplecode (set_subtensor loop, PyTensor)",
          no_backward=PYTENSOR_NO_BACKWARD, quick_check=True, native_layouts=ROWS_CONTIGUOUS)
def pytensor_seed_row_loop(inputs, params):
    """The question's graph verbatim: A·B chained ``set_subtensor`` nodes,
    unrolled at graph-build time, compiled once."""
    values, positions, P, out_shape = _rows(inputs, params)
    A, B, _ = values.shape

    def build(v, p, pt):
        upsampled = pt.zeros((A, B, P), dtype=v.dtype)
        for whichitem in range(A):
            for whichfilt in range(B):
                upsampled = pt.set_subtensor(upsampled[whichitem, whichfilt, p[whichitem, whichfilt, :]],
                                             v[whichitem, whichfilt, :])
        return upsampled

    fn = _pytensor_function(values, build, P)
    return lambda: fn(values, positions).reshape(out_shape)


@strategy("maxunpool", backend="pytensor", source=f"{SEED} upsamplecode2 (flattened set_subtensor, PyTensor)",
          no_backward=PYTENSOR_NO_BACKWARD, quick_check=True, native_layouts=ROWS_CONTIGUOUS)
def pytensor_seed_flat_set(inputs, params):
    """The question's one ``set_subtensor`` on the flattened output with a
    shared offset table (int64 here: the seed's float offsets cast to int32
    would overflow past 2^31 elements)."""
    values, positions, P, out_shape = _rows(inputs, params)
    A, B, L = values.shape
    offsets = flat_row_offsets(A, B, L, P)

    def build(v, p, pt):
        import pytensor

        add_to_flattened_indices = pytensor.shared(offsets, name="add_to_flattened_indices")
        upsampled = pt.zeros((A, B, P), dtype=v.dtype)
        return pt.set_subtensor(upsampled.flatten()[p.flatten() + add_to_flattened_indices],
                                v.flatten()).reshape(upsampled.shape)

    fn = _pytensor_function(values, build, P)
    return lambda: fn(values, positions).reshape(out_shape)


@strategy("maxunpool", backend="pytensor", source=f"{SEED} answer (advanced-index broadcast, PyTensor)",
          no_backward=PYTENSOR_NO_BACKWARD, quick_check=True, native_layouts=ROWS_CONTIGUOUS)
def pytensor_seed_broadcast(inputs, params):
    """The answer's broadcast ``set_subtensor`` in PyTensor, compiled once."""
    values, positions, P, out_shape = _rows(inputs, params)

    def build(v, p, pt):
        shp = v.shape
        upsampled = pt.zeros((shp[0], shp[1], P), dtype=v.dtype)
        return pt.set_subtensor(upsampled[pt.arange(shp[0]).reshape((-1, 1, 1)),
                                          pt.arange(shp[1]).reshape((1, -1, 1)), p], v)

    fn = _pytensor_function(values, build, P)
    return lambda: fn(values, positions).reshape(out_shape)


# ------------------------------------------------------------ fused kernels
def scatter_fn(values, positions, P: int, out_shape):
    import torch

    out = torch.zeros(values.shape[:2] + (P,), dtype=values.dtype, device=values.device)
    return out.scatter_(-1, positions, values).reshape(out_shape)


@strategy("maxunpool", backend="torch", source="added: torch.compile of the scatter", quick_check=True,
          native_layouts=ROWS_CONTIGUOUS)
def torch_compile_scatter(inputs, params):
    """``torch.compile`` of zeros + ``scatter_``: Inductor emits a fill and a
    scatter kernel; compile time is setup, outside the timed region."""
    values, positions, P, out_shape = _rows(inputs, params)
    return compiled(scatter_fn, values, positions, P, out_shape)


@strategy("maxunpool", backend="numba", backward=numba_gather_backward)
def numba_fused(inputs, params):
    """Added: a parallel numba kernel per output row — zero the row while it
    sits in cache, scatter the row's values into it: the output is written
    to memory once. Positions outside [0, P) are counted, never written.
    A 2-D case held channels-last is unpooled as it is held
    (``kernels_numba.maxunpool_nhwc``: a band of output rows per pooled row,
    all C channels of a pixel side by side) into a channels-last output."""
    from impls import kernels_numba

    if _channels_last(inputs):
        values, positions = _pixels(inputs["values"]), _pixels(inputs["positions"])
        N, C, H, W = shapes(params)[1]

        def run():
            out = np.empty((N, H * W * C), dtype=values.dtype)
            bad = kernels_numba.maxunpool_nhwc(values, positions, params["k"], W, out)
            if bad:
                raise ValueError(f"positions: {bad} outside [0, {H * W})")
            return out.reshape(N, H, W, C).transpose(0, 3, 1, 2)

        run()  # JIT compile outside the timed region
        return run
    values, positions, P, out_shape = _rows(inputs, params)
    rows = values.shape[0] * values.shape[1]
    flat_values, flat_positions = values.reshape(rows, -1), positions.reshape(rows, -1)

    def run():
        out = np.empty((rows, P), dtype=values.dtype)
        bad = kernels_numba.maxunpool(flat_values, flat_positions, out)
        if bad:
            raise ValueError(f"positions: {bad} outside [0, {P})")
        return out.reshape(out_shape)

    run()  # JIT compile outside the timed region
    return run


def _channels_last(inputs) -> bool:
    """Both 2-D operands held channels-last (a case in that layout, as handed)."""
    return maxpool2d.channels_last(inputs["values"]) and maxpool2d.channels_last(inputs["positions"])


def _pixels(array):
    """(N, C, h, w) as (N, h, w, C): a view of a channels-last array; any other is copied."""
    return np.ascontiguousarray(array.transpose(0, 2, 3, 1))


def _window(params):
    return (params["k"], params["k"]) if params["form"] == "2d" else (1, params["f"])


@strategy("maxunpool", backend="triton", requires=(POSITIONS_IN_WINDOW,), backward=triton_gather_backward)
def triton_gather(inputs, params):
    """Added: unpooling as a gather over the output — each element reads the
    pooled value of its own window and keeps it if the stored position is its
    own: no zero fill, no atomics, output written once. Requires every position
    inside its own window or bin (true of max-pooling's indices): any other
    position is silently not written, so it declares "positions-in-window"."""
    from impls import kernels_triton

    values, positions = inputs["values"], inputs["positions"]
    _, out_shape = shapes(params)
    window = _window(params)
    # Compiled and autotuned for these sizes here, outside the timed calls.
    return kernels_triton.prepared(lambda: kernels_triton.unpool_gather(values, positions, out_shape, window))


@strategy("maxunpool", backend="triton", backward=triton_gather_backward)
def triton_scatter(inputs, params):
    """Added: the general form — zero fill, then one scatter kernel of
    value/position pairs (masked outside [0, P)): two passes over the output."""
    from impls import kernels_triton

    values, positions = inputs["values"], inputs["positions"]
    _, out_shape = shapes(params)
    # Compiled and autotuned for these sizes here, outside the timed calls.
    return kernels_triton.prepared(lambda: kernels_triton.unpool_scatter(values, positions, out_shape))


def jax_at_set_fn(values, positions, P: int, out_shape: tuple):
    """Zeros (A, B, P) with ``values`` set at their positions, row by row (JAX)."""
    import jax.numpy as jnp

    A, B, _ = values.shape
    out = jnp.zeros((A, B, P), dtype=values.dtype)
    # Positions in a row are distinct (docs/SPEC.md §1.2): the scatter may skip ordering.
    return out.at[jnp.arange(A)[:, None, None], jnp.arange(B)[None, :, None], positions].set(
        values, unique_indices=True).reshape(out_shape)


@strategy("maxunpool", backend="jax", builtin=True, native_layouts=ROWS_CONTIGUOUS)
def jax_at_set(inputs, params):
    """Added: ``jnp.zeros(...).at[rows, cols, positions].set(values)``, the
    seed answer's advanced-index broadcast in JAX, jitted: one zero fill and
    one scatter of L values per row (XLA's scatter, told the positions are
    unique). Compiled per shape in prepare."""
    from impls.backends import jax_compiled

    values, positions, P, out_shape = _rows(inputs, params)
    return jax_compiled(jax_at_set_fn, values, positions, P, tuple(out_shape), static_argnums=(2, 3))
