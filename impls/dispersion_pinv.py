"""dispersion_pinv — shift back (docs/SPEC.md §1.4, seed 001 ``A_pinv``).

in:  y (B, 1, H, W'), mask (H, W), S, C with W' = W + (C-1)*S.
out: x (B, C, H, W), x[b,i,h,w] = y[b,0,h,w+i*S] / alpha[w+i*S] / mask[h,w],
     alpha[w'] = how many channels cover column w'.
identity: dispersion(dispersion_pinv(y)) == y for y in dispersion's range.
The generator draws mask in [1e-3, 1); the public entry point rejects zeros,
so a subnormal mask entry is in the contract (mode ``subnormal-mask-<dtype>``).
compare: relative error as dispersion. bytes: y + mask + x.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from impls import common, dispersion
from impls.backends import HALF_DTYPES
from impls.common import Verdict
from impls.registry import Gradient, NotApplicable, Operator, compiled, register_operator, strategy

SEED = dispersion.SEED


def validate(params) -> None:
    dispersion.validate(params)


def oracle(inputs, params):
    """In the namespace of y: each channel reads its W-wide slice of y, divided by coverage and mask."""
    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    xp = array_namespace(y, mask)
    H, W = common.shape_of(mask)
    coverage = _coverage(xp, C, W, S, y)
    x = common.float64_zeros(xp, (common.shape_of(y)[0], C, H, W), y)
    for i in range(C):
        x[:, i] = y[:, 0, :, i * S:i * S + W] / coverage[i * S:i * S + W] / mask
    return x


# A mode whose mask holds subnormals of the dtype it names: the mask is the
# one input here whose small values the contract covers (y is in dispersion's
# range, normal numbers, docs/SPEC.md §2). Its mode names the dtype because another
# type would round them to zero (a mask the entry point rejects) or to normal
# numbers: each dtype gets its own extra check.
SUBNORMAL_MASK = "subnormal-mask-"


def subnormal_mask_mode(dtype: str) -> str:
    return SUBNORMAL_MASK + dtype


def generate(params, mode: str = "random", seed: int = 0):
    """y uniform in [0, C) (a dispersed image's range); ``adversarial``: small
    integers, and binary-fraction masks so each quotient is exact;
    ``subnormal-mask-<dtype>``: the adversarial inputs with one subnormal mask
    entry per row (``_plant_subnormal_mask``)."""
    rng = np.random.default_rng(seed)
    B, C, H, W = (params[key] for key in ("B", "C", "H", "W"))
    shape = (B, 1, H, dispersion.out_width(params))
    y = rng.random(shape) * C if mode == "random" else rng.integers(-4, 5, size=shape).astype(np.float64)
    if mode.startswith(SUBNORMAL_MASK):
        mask = dispersion.generate_mask(rng, (H, W), "adversarial")
        _plant_subnormal_mask(rng, y, mask, params["S"], C, mode[len(SUBNORMAL_MASK):])
        return {"y": y, "mask": mask}
    return {"y": y, "mask": dispersion.generate_mask(rng, (H, W), mode)}


def _plant_subnormal_mask(rng, y, mask, S: int, C: int, dtype: str) -> None:
    """One entry of each mask row becomes a subnormal of ``dtype`` (the
    smallest and the largest of the top binade, then sizes between), and the
    y every channel reads through it becomes -1, 0 or 1. Only the top binade:
    below it 1/mask overflows the type, so x would be inf for any y the
    suite's inputs hold. With |y| <= 1 and coverage >= 1, every x is finite
    (at most 2**127 in float32, 2**15 in float16); a backend that flushes the
    mask to zero gives inf, or NaN for 0/0."""
    H, W = mask.shape
    steps = common.SUBNORMAL_STEPS[dtype]
    for h in range(H):
        w = int(rng.integers(W))
        multiple = (steps // 2, steps - 1, int(rng.integers(steps // 2, steps)))[min(h, 2)]
        mask[h, w] = common.subnormal(dtype, multiple)
        for i in range(C):
            y[:, 0, h, w + i * S] = rng.integers(-1, 2, size=y.shape[0])


def bytes_moved(params, itemsize: int, returns: str = "output") -> int:
    return dispersion.bytes_moved(params, itemsize)


def bytes_written(params, itemsize: int, returns: str = "output") -> int:
    """The part of ``bytes_moved`` written: x (B, C, H, W), fresh on every call."""
    return params["B"] * params["C"] * params["H"] * params["W"] * itemsize


def compare(out, ref, inputs, dtype: str, strat, params=None) -> Verdict:
    return common.compare_relative("x", out, ref, dtype)



def extra_checks():
    """dispersion's many-channel cases in the half types: no sum here, but the
    coverage reaches 300, which bfloat16 cannot count to by adding ones (it
    stops at 256), so a coverage built in the half type would show. And a
    subnormal mask in each dtype, on the first check case (contiguous only:
    the layouts change y, not the mask). Compiled strategies get the float32
    one, whose shapes their adversarial check has compiled already; each other
    dtype would be a compile of its own."""
    many = [dict(params=params, modes=("random",), dtypes=HALF_DTYPES,
                 layouts=("contiguous",), compiled=False,
                 why="coverage of hundreds of channels, in float16 and bfloat16")
            for params in dispersion.MANY_CHANNELS]
    subnormal = [dict(params=dispersion.check_cases()[0], modes=(subnormal_mask_mode(dtype),), dtypes=(dtype,),
                      layouts=("contiguous",), compiled=dtype == "float32",
                      why=f"a subnormal {dtype} mask entry (not zero: the entry point accepts it)")
                 for dtype in common.SUBNORMAL_UNIT]
    return many + subnormal


OP = register_operator(Operator(
    name="dispersion_pinv", doc=__doc__, params=dispersion.OP.params,
    generate=generate, oracle=oracle, bytes_moved=bytes_moved, bytes_written=bytes_written, compare=compare,
    validate=validate, reference="seed_loop_cat", layout_keys=("y",),
    # y has one channel: channels-last leaves its memory order as it is
    layout_shapes=lambda params: {"y": (params["B"], 1, params["H"], dispersion.out_width(params))},
    check_cases=dispersion.check_cases, extra_checks=extra_checks, any_namespace=True))


# ------------------------------------------------------------- gradient (docs/SPEC.md §1.5)
def grad_oracle(inputs, grad, params):
    """float64 adjoint of the pseudo-inverse, the formula itself, in the namespace of the gradient:
    ``grad_y[b,0,h,w'] = Σ_i grad_x[b,i,h,w'-i*S] / alpha[w'] / mask[h,w'-i*S]``
    over the channels covering w'; a column no channel covers (S > W) gets
    the empty sum, 0."""
    mask, S, C = inputs["mask"], params["S"], params["C"]
    xp = array_namespace(grad, mask)
    H, W = common.shape_of(mask)
    coverage = _coverage(xp, C, W, S, grad)
    grad_y = common.float64_zeros(xp, (common.shape_of(grad)[0], 1, H, dispersion.out_width(params)), grad)
    for i in range(C):
        grad_y[:, 0, :, i * S:i * S + W] += grad[:, i] / coverage[i * S:i * S + W] / mask
    return grad_y


def generate_grad(params, mode: str = "random", seed: int = 0):
    """grad_x, x's shape (common.gradient_values). Under a subnormal mask
    (the ``subnormal-mask-*`` modes) the gradient is ±1: the backward divides
    by the mask, and 251 / (a float16 subnormal) is past float16's range, an
    overflow of the exact answer itself, not a strategy's error."""
    shape = (params["B"], params["C"], params["H"], params["W"])
    grad = common.gradient_values(np.random.default_rng((seed, 1)), shape,
                                  "random" if mode == "random" else "adversarial")
    return np.sign(grad) if mode.startswith("subnormal-mask") else grad


def grad_bytes(params, itemsize: int) -> int:
    """grad_x and the mask read, grad_y written."""
    return dispersion.grad_bytes(params, itemsize)


def grad_compare(out, ref, inputs, grad, dtype: str, strat, params=None) -> Verdict:
    return common.compare_relative("grad_y", out, ref, dtype)


def grad_bytes_written(params, itemsize: int) -> int:
    """grad_y, the size of y."""
    return params["B"] * params["H"] * dispersion.out_width(params) * itemsize


def _coverage(xp, C: int, W: int, S: int, like):
    """``dispersion.alpha`` (float64) where ``like`` lives."""
    return xp.asarray(dispersion.alpha(C, W, S), device=common.array_device(like))


OP.gradient = Gradient(input="y", name="grad_x", generate=generate_grad, oracle=grad_oracle,
                       bytes_moved=grad_bytes, compare=grad_compare, bytes_written=grad_bytes_written,
                       normal_values_only=dispersion.NORMAL_GRADIENTS)


def _backward_case(inputs, params):
    """What the numpy backwards read off a case: mask, S, C, y's B, H and W',
    x's W, and the coverage alpha (float64, W' columns)."""
    mask, S, C = inputs["mask"], params["S"], params["C"]
    B, _, H, out_W = inputs["y"].shape
    W = mask.shape[1]
    return mask, S, C, B, H, out_W, W, dispersion.alpha(C, W, S)


def loop_cat_backward(inputs, params):
    """The explicit backward of ``numpy_loop_cat``, in the seed's own style
    (the adjoint of its three passes, last first): grad_x divided by the
    mask, its C channels added into zeroed grad_y at their offsets (the
    adjoint of the concatenation of slices), then a division by alpha
    (columns no channel covers keep 0, where ``y / alpha`` read backwards
    would make 0/0). Source and cost: seed 001's ``A_pinv``, read backwards."""
    mask, S, C, B, H, out_W, W, coverage = _backward_case(inputs, params)
    covered = coverage > 0

    def backward(saved, grad_x):
        z = grad_x / mask
        grad_y = np.zeros((B, 1, H, out_W), dtype=grad_x.dtype)
        for i in range(C):
            grad_y[..., (i * S):(i * S + W)] += z[:, (i):(i + 1)]
        np.divide(grad_y, coverage.astype(grad_x.dtype), out=grad_y, where=covered)
        return grad_y

    return backward


def window_view_backward(inputs, params):
    """The explicit backward of ``numpy_window_view``, vectorised: grad_x
    divided by the case's constant alpha·mask, then ``np.add.at`` into
    zeroed grad_y through the (C·H·W) flat positions of the window view
    (the adjoint of its strided gather; built once)."""
    mask, S, C, B, H, out_W, W, coverage = _backward_case(inputs, params)
    columns = np.arange(W) + np.arange(C)[:, None] * S
    denominator = (coverage[columns][:, None, :] * mask).astype(mask.dtype)
    index = (columns[:, None, :] + np.arange(H)[None, :, None] * out_W).reshape(-1)
    batch = np.arange(B)[:, None]

    def backward(saved, grad_x):
        grad_y = np.zeros((B, H * out_W), dtype=grad_x.dtype)
        np.add.at(grad_y, (batch, index), (grad_x / denominator).reshape(B, -1))
        return grad_y.reshape(B, 1, H, out_W)

    return backward


def numba_adjoint_backward(inputs, params):
    """The numba backward (``kernels_numba.dispersion_pinv_backward``): per
    (b, h) row, grad_y's row zeroed in L1, each channel's row divided by the
    mask added at its offset, then divided by the coverage; grad_y written once."""
    from impls import kernels_numba

    return kernels_numba.backward_into_fresh(kernels_numba.dispersion_pinv_backward, inputs["y"].shape,
                                             inputs["mask"], params["S"])


def triton_adjoint_backward(inputs, params):
    """The Triton backward, with dispersion's kernel (``kernels_triton.
    dispersion``): the adjoint sums, for each column of grad_y, the channels
    landing on it, each divided by the mask (the kernel's mask table is
    1/mask here, float32, float32 accumulation), then one torch multiply by
    1/alpha (0 where no channel covers a column: its gradient is the empty
    sum). Two passes over grad_y where a fused kernel would make one: that
    kernel is not written yet."""
    import torch

    from impls import kernels_triton

    mask, S, C = inputs["mask"], params["S"], params["C"]
    inv_coverage, inv_mask = kernels_triton.pinv_tables(mask, S, C)
    scale = torch.where(torch.isinf(inv_coverage), torch.zeros_like(inv_coverage), inv_coverage)

    def backward(saved, grad_x):
        summed = kernels_triton.dispersion(grad_x, inv_mask, S)
        return torch.mul(summed, scale, out=summed)  # in float32, stored in grad_x's dtype

    return backward


def uncovered_columns(params):
    """Why autograd's backward of ``y / alpha`` is wrong here: with S > W
    (and C > 1) some columns of y no channel covers, alpha is 0 there, and
    the gradient of the division, ``g / alpha``, is 0/0 = NaN where the
    true gradient is the empty sum, 0 (found by the check)."""
    if params["S"] > params["W"] and params["C"] > 1:
        return (f"S={params['S']} > W={params['W']}: columns no channel covers have alpha = 0, and autograd's "
                "gradient of y / alpha there is 0/0 = NaN where the true gradient is 0 (seed's A_pinv)")
    return None


def dispersion_pinv(y, mask, S: int, C: int):
    """Public entry point: validated shift-back, numpy or torch."""
    if C < 1:
        raise ValueError(f"C={C}: need at least one channel")
    if S < 0:
        raise ValueError(f"S={S}: the step must be >= 0")
    H, W = mask.shape
    expected = (H, W + (C - 1) * S)
    if y.ndim != 4 or y.shape[1] != 1 or tuple(y.shape[2:]) != expected:
        raise ValueError(f"y shape {tuple(y.shape)}: expected (B, 1, {expected[0]}, {expected[1]}) for C={C}, S={S}")
    if bool((mask == 0).any()):
        raise ValueError("mask has zeros: the pseudo-inverse divides by it")
    params = dict(B=y.shape[0], C=C, H=H, W=W, S=S)
    return common.public_call(torch_unfold_view, numpy_window_view, {"y": y, "mask": mask}, params)


# ------------------------------------------------------------- strategies
@strategy("dispersion_pinv", backend="numpy", source=f"{SEED} A_pinv (numpy port)", backward=loop_cat_backward)
def numpy_loop_cat(inputs, params):
    """The seed's loop + concatenate in numpy: divide y by alpha, C slices
    concatenated (a copy), then a division by mask (another pass)."""
    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    W = mask.shape[1]
    coverage = dispersion.alpha(C, W, S).astype(y.dtype)

    def run():
        with np.errstate(divide="ignore", invalid="ignore"):  # 0/0 in uncovered columns, never read
            z = y / coverage
        return np.concatenate([z[..., (i * S):(i * S + W)] for i in range(C)], axis=1) / mask

    return run


def loop_cat_fn(y, mask, coverage, S: int, C: int):
    import torch

    W = mask.shape[1]
    z = y / coverage
    return torch.cat([z[..., (i * S):(i * S + W)] for i in range(C)], dim=1) / mask


@strategy("dispersion_pinv", backend="torch", source=f"{SEED} A_pinv", baseline=True,
          no_backward_when=uncovered_columns)
def seed_loop_cat(inputs, params):
    """The question's ``A_pinv``: ``z = y / alpha``, ``cat`` of C slices, ``/ mask``
    — three passes, a C-sized concatenated temporary."""
    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    coverage = dispersion.alpha(C, mask.shape[1], S, like=y)
    return lambda: loop_cat_fn(y, mask, coverage, S, C)


def _conv_transpose2d(inputs, params, tf32: bool):
    import torch.nn.functional as F

    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    W = mask.shape[1]
    if S > W and C > 1:
        # Found by the check: columns no channel covers have alpha = 0, so y/alpha
        # is 0/0 there, and the kernel's zero taps spread that NaN to every output.
        raise NotApplicable(f"S={S} > W={W}: y/alpha is 0/0 in uncovered columns and "
                            "conv_transpose2d's zero taps spread the NaN (seed's A_pinv_fast)")
    coverage = dispersion.alpha(C, W, S, like=y)
    kernel = dispersion.one_hot_kernel(C, S, y)

    def compute():
        return F.conv_transpose2d(y / coverage, kernel, padding=(0, (C - 1) * S)) / mask

    if tf32:
        return compute

    def run():
        with dispersion.tf32_disabled(y.device.type):
            return compute()

    return run


@strategy("dispersion_pinv", backend="torch", source=f"{SEED} A_pinv_fast", builtin=True)
def seed_conv_transpose2d(inputs, params):
    """The question's ``A_pinv_fast``: conv_transpose2d with the one-hot kernel:
    (C-1)S+1 taps per input column for each of C outputs, C of them non-zero,
    about ((C-1)S+1)× the needed arithmetic (67× at C=28, S=2); TF32 by
    default on recent GPUs."""
    return _conv_transpose2d(inputs, params, tf32=True)


@strategy("dispersion_pinv", backend="torch", source=f"{SEED} A_pinv_fast, TF32 off", builtin=True)
def seed_conv_transpose2d_no_tf32(inputs, params):
    """``A_pinv_fast`` with cuDNN's TF32 off, for comparison with the default."""
    return _conv_transpose2d(inputs, params, tf32=False)


def unfold_view_fn(y, denominator, S: int, C: int):
    W = denominator.shape[-1]
    windows = y.unfold(-1, W, max(S, 1)) if S else y.unsqueeze(-2).expand(-1, -1, -1, C, -1)
    view = windows[:, 0].permute(0, 2, 1, 3)  # (B, C, H, W), still a view of y
    return view / denominator


def unfold_denominator(y, mask, S: int, C: int):
    """alpha·mask per (channel, row, column): the same unfold applied to alpha."""
    W = mask.shape[1]
    coverage = dispersion.alpha(C, W, S, like=y)
    coverage_per_channel = (coverage.unfold(-1, W, max(S, 1)) if S else coverage.expand(C, W))[:, None, :]
    return coverage_per_channel * mask


@strategy("dispersion_pinv", backend="torch", builtin=True)
def torch_unfold_view(inputs, params):
    """Added: one gather through a zero-copy view — ``y.unfold(-1, W, S)`` is
    (B, 1, H, C, W) without copying; a single broadcast division by the
    case's constant ``alpha·mask`` writes x (no loop, no copy before it)."""
    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    denominator = unfold_denominator(y, mask, S, C)
    return lambda: unfold_view_fn(y, denominator, S, C)


@strategy("dispersion_pinv", backend="numpy", backward=window_view_backward, builtin=True)
def numpy_window_view(inputs, params):
    """Added: numpy's ``sliding_window_view`` strided by S — the same zero-copy
    gather as the torch unfold, one division pass."""
    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    W = mask.shape[1]
    coverage = dispersion.alpha(C, W, S).astype(y.dtype)
    windows_of = np.lib.stride_tricks.sliding_window_view
    coverage_per_channel = windows_of(coverage, W)[::S][:C] if S else np.broadcast_to(coverage, (C, W))
    denominator = coverage_per_channel[:, None, :] * mask

    def run():
        windows = windows_of(y[:, 0], W, axis=-1)  # (B, H, W'-W+1, W), a view
        view = windows[:, :, ::S][:, :, :C] if S else np.broadcast_to(windows, (y.shape[0], y.shape[2], C, W))
        return view.transpose(0, 2, 1, 3) / denominator

    return run


@strategy("dispersion_pinv", backend="torch", source=f"{SEED} A_pinv, torch.compile", quick_check=True,
          no_backward_when=uncovered_columns)
def torch_compile_loop_cat(inputs, params):
    """``torch.compile`` of the seed's loop + cat: Inductor can fuse the two
    divisions into the concatenation; compile time is setup."""
    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    coverage = dispersion.alpha(C, mask.shape[1], S, like=y)
    return compiled(loop_cat_fn, y, mask, coverage, S, C)


@strategy("dispersion_pinv", backend="torch", source="added: torch.compile of the unfold view", quick_check=True)
def torch_compile_unfold_view(inputs, params):
    """``torch.compile`` of the unfold-view gather: one generated kernel that
    reads y through the view and divides; compile time is setup."""
    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    return compiled(unfold_view_fn, y, unfold_denominator(y, mask, S, C), S, C)


@strategy("dispersion_pinv", backend="numba", backward=numba_adjoint_backward)
def numba_fused(inputs, params):
    """Added: a parallel numba kernel per (b, h) row, coverage computed once per
    call; each channel's slice of y (in L1) divided by coverage and mask:
    x written once, y read once from memory."""
    from impls import kernels_numba

    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    B, _, H, _ = y.shape
    W = mask.shape[1]
    return kernels_numba.compiled_into_fresh(kernels_numba.dispersion_pinv, (B, C, H, W), y.dtype, y, mask, S)


@strategy("dispersion_pinv", backend="triton", backward=triton_adjoint_backward)
def triton_fused(inputs, params):
    """Added: one Triton kernel, one x element per lane: its y element read
    through strides, times its column's 1/coverage and its 1/mask (float32
    tables of W' and H*W elements, the case's constants, computed here once,
    as the unfold strategies compute alpha·mask): y read once, x written once,
    no division per element."""
    from impls import kernels_triton

    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    tables = kernels_triton.pinv_tables(mask, S, C)
    # Compiled and autotuned for these sizes here, outside the timed calls.
    return kernels_triton.prepared(lambda: kernels_triton.dispersion_pinv(y, mask, S, C, tables))


def jax_gather_fn(y, mask, index, coverage, C: int):
    B = y.shape[0]
    H, W = mask.shape
    wide = coverage.dtype
    x = y.reshape(B, -1)[:, index].reshape(B, C, H, W)
    return (x.astype(wide) / coverage / mask.astype(wide)).astype(y.dtype)


def _jax_tables(y, mask, S: int, C: int):
    """The (C·H·W) flat positions of each channel's pixels in y's plane, and
    the coverage each reads, (C, 1, W), in the accumulator type (a half type
    cannot count to 300)."""
    import jax.numpy as jnp

    H, W = mask.shape
    out_W = W + (C - 1) * S
    index = (np.arange(W) + np.arange(C)[:, None, None] * S + np.arange(H)[None, :, None] * out_W).reshape(-1)
    columns = np.arange(W) + np.arange(C)[:, None] * S
    coverage = dispersion.alpha(C, W, S)[columns][:, None, :]
    wide = dispersion.jax_accumulator(y.dtype)
    return jnp.asarray(index, dtype=jnp.int64), jnp.asarray(coverage, dtype=wide)


@strategy("dispersion_pinv", backend="jax", builtin=True)
def jax_gather(inputs, params):
    """Added: the adjoint of ``jax_at_add`` — a gather ``y[:, index]`` through
    the same (C·H·W) index table — divided by each pixel's coverage and the
    mask, jitted: XLA fuses the gather and both divisions into one pass
    writing x. Half types divide in float32. Compiled per shape in prepare."""
    from impls.backends import jax_compiled

    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    index, coverage = _jax_tables(y, mask, S, C)
    return jax_compiled(jax_gather_fn, y, mask, index, coverage, C, static_argnums=4)


def jax_conv_adjoint_fn(y, mask, kernel, coverage):
    from jax import lax

    wide = coverage.dtype
    x = lax.conv_general_dilated(y.astype(wide), kernel, window_strides=(1, 1), padding="VALID",
                                 precision=lax.Precision.HIGHEST)
    return (x / coverage / mask.astype(wide)).astype(y.dtype)


@strategy("dispersion_pinv", backend="jax", builtin=True)
def jax_conv_adjoint(inputs, params):
    """Added: the adjoint of ``jax_conv`` — its one-hot kernel flipped along W
    with input and output channels swapped, correlated over y without padding
    (channel i reads y at w + i·S), then divided by coverage and mask; jitted.
    Unlike the seed's ``A_pinv_fast`` it divides after the convolution, so
    uncovered columns (S > W) never spread 0/0. About ((C-1)S+1)x the needed
    arithmetic, as the forward conv; half types in float32. Compiled per
    shape in prepare."""
    import jax.numpy as jnp

    from impls.backends import jax_compiled

    y, mask, S, C = inputs["y"], inputs["mask"], params["S"], params["C"]
    _, coverage = _jax_tables(y, mask, S, C)
    forward = dispersion.jax_one_hot_kernel(C, S, coverage.dtype)
    kernel = jnp.flip(forward, axis=-1).transpose(1, 0, 2, 3)
    return jax_compiled(jax_conv_adjoint_fn, y, mask, kernel, coverage)
