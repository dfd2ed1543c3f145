"""Triton kernels, one fused kernel per operator; imported only by the Triton
strategies. On a machine without a GPU they run under ``TRITON_INTERPRET=1``
on CPU tensors, which is how CI checks them.

Every kernel takes element strides, so non-contiguous and channels-last
inputs are read in place; outputs are contiguous and written exactly once.

Tiles. Every kernel works on a 2-D tile: BLOCK_R output rows by BLOCK_W
contiguous columns, so the integer division that splits a row number into its
(plane, row) coordinates runs once per row of the tile, not once per element.
BLOCK_W is the row's width rounded up to a power of two, capped at MAX_W;
BLOCK_R = TILE // BLOCK_W. TILE, MAX_W and num_warps are autotuned on a GPU
(`TUNING_CONFIGS`), keyed by the sizes; the strategies run each wrapper once
in `prepare` (`prepared`), so tuning and compiling stay out of timed calls.

Sizes past 2**31 (docs/SPEC.md §2). Each wrapper works out from the sizes whether any
offset or index a kernel computes can pass int32 and passes WIDE: when set,
the kernel widens its program id and every integer argument to int64 first,
so all index arithmetic that follows is 64-bit; otherwise it stays in int32,
the fast path. The grid is one axis (x, up to 2**31 - 1 programs; y and z
stop at 65,535), each program finding its (row block, column block) from its
id with one scalar division.

Every kernel opens with the same tile prologue, written once in `_tile`
(program id, row and column numbers, the mask of live elements): the one
``@triton.jit`` helper, inlined where it is called. Otherwise the kernels use
Triton builtins only, not the standard library's jit functions (tl.cdiv,
tl.zeros): under TRITON_INTERPRET every jit function is an interpreter object,
and the compile test, which builds these kernels for a GPU target in that same
process, compiles JITFunctions of this module's helpers in their place; it
cannot do so for the standard library's.
"""

from __future__ import annotations

import math
import os

# Fused multiply-add in the dispersion sums (one rounding, not two); said
# explicitly because Triton 3.9 warns that its default is about to change.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from impls import tuning  # noqa: E402
from impls.registry import NotApplicable  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
INT32_MAX = 2**31 - 1
# The row and column numbers of the last tile run up to one tile (at most 2048
# elements) past the sizes, and the masks are computed from them, so int32
# must hold each size plus that. The offsets of masked-off lanes may wrap in
# int32: they are never dereferenced.
_TILE_SLACK = 2**16


def _config(tile: int, max_w: int, num_warps: int) -> triton.Config:
    return triton.Config({"TILE": tile, "MAX_W": max_w}, num_warps=num_warps)


# Candidates for every kernel on a GPU, 2 to 16 elements a thread: a
# 1024-element tile with 4 warps; smaller tiles (more programs, for sizes that
# fill less than one wave of the SMs); more warps (occupancy); wider rows
# (fewer partly used column blocks, fewer sectors re-read at block edges); 16
# elements a thread (more memory requests in flight, which the H100 counters
# say the float16 paths lack); and 2 elements a thread, the shape of the
# kernels torch.compile generates (256 threads, 2 outputs each). Compiled for
# sm_90, that last shape is the only one in which maxpool2d needs no layout
# conversion between its strided loads and its vector stores: with 4 or more
# elements a thread Triton routes every output through shared memory
# (st.shared, bar.sync, and ldmatrix in float16) and needs 48-56 registers,
# where 2 a thread needs 22 (the compiled kernel: 24-25). None spills (the
# compile test checks each); 8192-element tiles did, in the int64 variants.
TUNING_CONFIGS = [
    _config(256, 128, 4),
    _config(512, 256, 8),
    _config(512, 128, 2),
    _config(1024, 128, 4),
    _config(1024, 256, 8),
    _config(2048, 256, 8),
    _config(2048, 512, 8),
    _config(2048, 128, 4),
]
# The interpreter's one config: nothing to tune on a CPU, and benchmarking six
# configs there would take minutes. Big tiles mean fewer interpreted programs;
# 128 columns keep the check cases that are wider than 128 columns running
# several column blocks per row.
INTERPRETER_CONFIG = _config(2048, 128, 4)


def _autotuned(key: list[str]):
    """triton.autotune over TUNING_CONFIGS, keyed by the kernel arguments in
    `key` (Triton adds the tensors' dtypes); one fixed config when interpreted.
    `tuning_configs` keeps the GPU's list for the compile test, which builds
    every one of them."""

    def decorate(kernel):
        # Checks launch the first config, never the autotuner (impls/tuning.py); timed sizes tune for real.
        tuned = triton.autotune(configs=[INTERPRETER_CONFIG] if INTERPRETED else TUNING_CONFIGS, key=key)(kernel)
        tuned.tuning_configs = TUNING_CONFIGS
        return tuning.register(tuned)

    return decorate


def prepared(run):
    """`run`, called once first when the kernels are compiled (a GPU): compiling
    and autotuning for these sizes happen there, in the strategy's prepare,
    not in its first timed call or in the call that measures peak memory (the
    autotuner's benchmark allocates an L2-flush buffer). Interpreted, there is
    nothing to compile or tune, and the extra call would double CI's time."""
    if not INTERPRETED:
        run()
    return run


def block_shape(meta: dict) -> tuple[int, int]:
    """(BLOCK_R, BLOCK_W) of a launch with these meta-parameters, as the kernels
    derive them: keep the two in step."""
    block_w = min(meta["MAX_W"], meta["WIDTH_P2"])
    return meta["TILE"] // block_w, block_w


def _grid(kernel, rows: int, width: int):
    """(grid, WIDTH_P2) for `rows` rows `width` columns wide: one program per
    tile, all on axis 0. Declares the case NotApplicable if a config the
    autotuner may pick would need more programs than axis 0 holds (2**40
    elements and up: more than any GPU's memory)."""
    width_p2 = triton.next_power_of_2(max(width, 1))

    def programs(meta):
        block_r, block_w = block_shape(meta)
        return triton.cdiv(rows, block_r) * triton.cdiv(width, block_w)

    most = max(programs({**config.kwargs, "WIDTH_P2": width_p2}) for config in kernel.configs)
    if most > INT32_MAX:
        raise NotApplicable(f"{rows} rows of {width} need {most} Triton programs; the grid holds {INT32_MAX}")
    return lambda meta: (programs(meta),), width_p2


def needs_int64(*extents: int) -> bool:
    """Whether some offset or index can pass int32. Each extent bounds the
    quantities a kernel computes for its live lanes: a tensor's span in
    elements bounds every offset into it, a plane's size every flat index."""
    return max(extents) > INT32_MAX - _TILE_SLACK


def _span(t: torch.Tensor) -> int:
    """Elements from a tensor's first to one past its last, through its strides."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


def _launch(kernel, grid, *args, **constexprs):
    # One place that launches, so a test can capture the arguments and compile
    # the kernel for a GPU target without one.
    kernel[grid](*args, **constexprs)


def _launch_tiles(kernel, rows: int, width: int, extents: tuple[int, ...], *args, **constexprs):
    """``kernel`` launched over the tiles of a (rows, width) grid (`_grid`),
    with its WIDTH_P2 and its WIDE (`needs_int64` of ``extents``)."""
    grid, width_p2 = _grid(kernel, rows, width)
    _launch(kernel, grid, *args, WIDTH_P2=width_p2, WIDE=needs_int64(*extents), **constexprs)


@triton.jit
def _tile(rows, width, WIDTH_P2: tl.constexpr, WIDE: tl.constexpr, TILE: tl.constexpr, MAX_W: tl.constexpr):
    """This program's tile of a (rows, width) grid, as `_grid` numbers them:
    its row and column numbers (int64 when WIDE), the mask of the elements
    inside the grid, and its first column. Inlined into each kernel."""
    BLOCK_W: tl.constexpr = MAX_W if MAX_W < WIDTH_P2 else WIDTH_P2
    BLOCK_R: tl.constexpr = TILE // BLOCK_W
    pid = tl.program_id(0)
    if WIDE:
        pid, width = tl.cast(pid, tl.int64), tl.cast(width, tl.int64)
    col_blocks = (width + BLOCK_W - 1) // BLOCK_W
    row = (pid // col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)
    first_col = (pid % col_blocks) * BLOCK_W
    col = first_col + tl.arange(0, BLOCK_W)
    live = (row < rows)[:, None] & (col < width)[None, :]
    return row, col, live, first_col


@_autotuned(key=["rows", "w", "W", "sw", "K", "S", "P"])
@triton.jit
def _maxpool2d_kernel(x_ptr, values_ptr, indices_ptr, rows, C, h, w, H, W, sn, sc, sh, sw,
                      K: tl.constexpr, S: tl.constexpr, P: tl.constexpr, WIDTH_P2: tl.constexpr, WIDE: tl.constexpr,
                      TILE: tl.constexpr, MAX_W: tl.constexpr):
    out_row, j, live, _ = _tile(rows, w, WIDTH_P2, WIDE, TILE, MAX_W)  # out_row over N*C*h
    if WIDE:
        C, h, w, W = tl.cast(C, tl.int64), tl.cast(h, tl.int64), tl.cast(w, tl.int64), tl.cast(W, tl.int64)
        H = tl.cast(H, tl.int64)
        sn, sc, sh, sw = tl.cast(sn, tl.int64), tl.cast(sc, tl.int64), tl.cast(sh, tl.int64), tl.cast(sw, tl.int64)
    plane = out_row // h
    top = (out_row % h) * S - P
    row_base = (plane // C) * sn + (plane % C) * sc + top * sh
    left = j * S - P
    window = x_ptr + row_base[:, None] + (left * sw)[None, :]
    first = (top * W)[:, None] + left[None, :]
    # Compared in float32: exact for the half types, and Triton's interpreter
    # orders bfloat16 by its raw bits. Stored back unchanged. Padded (P > 0):
    # a place in the padding is never loaded nor taken; a window's first real
    # element is taken whatever it holds (an all -inf window's index).
    if P == 0:
        best = tl.load(window, mask=live, other=0.0).to(tl.float32)
        arg = first
    else:
        # The place in the window (int32, kr*K + kc) is kept, not the flat index: fewer registers.
        best = tl.full(live.shape, float("-inf"), tl.float32)
        place = tl.full(live.shape, 0, tl.int32)
        seen = tl.full(live.shape, False, tl.int1)
    for kr in tl.static_range(K):
        for kc in tl.static_range(K):
            if P == 0:
                if kr + kc > 0:
                    v = tl.load(window + (kr * sh + kc * sw), mask=live, other=0.0).to(tl.float32)
                    # first maximum in row-major order; a NaN wins and the first NaN stays
                    take = (v > best) | ((v != v) & (best == best))
                    best = tl.where(take, v, best)
                    arg = tl.where(take, first + (kr * W + kc), arg)
            else:
                real = (live & ((top + kr >= 0) & (top + kr < H))[:, None]
                        & ((left + kc >= 0) & (left + kc < W))[None, :])
                v = tl.load(window + (kr * sh + kc * sw), mask=real, other=0.0).to(tl.float32)
                take = real & ((v > best) | ((v != v) & (best == best)) | ~seen)
                best = tl.where(take, v, best)
                place = tl.where(take, kr * K + kc, place)
                seen = seen | real
    if P > 0:
        place = place.to(first.dtype)  # int64 when WIDE: every offset computed in one width
        arg = first + (place // K) * W + place % K
    out = out_row[:, None] * w + j[None, :]
    tl.store(values_ptr + out, best.to(values_ptr.dtype.element_ty), mask=live)
    tl.store(indices_ptr + out, arg.to(tl.int64), mask=live)


def maxpool2d(x: torch.Tensor, k: int, s: int | None = None, p: int = 0):
    """k×k windows at stride s (k where not given), padded by p (docs/SPEC.md §1.1)."""
    s = k if s is None else s
    N, C, H, W = x.shape
    h, w = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    values = torch.empty((N, C, h, w), dtype=x.dtype, device=x.device)
    indices = torch.empty((N, C, h, w), dtype=torch.int64, device=x.device)
    rows = N * C * h
    if values.numel():
        _launch_tiles(_maxpool2d_kernel, rows, w, (_span(x), H * W, values.numel()),
                      x, values, indices, rows, C, h, w, H, W, *x.stride(), K=k, S=s, P=p)
    return values, indices


@_autotuned(key=["rows", "H", "W", "h", "w", "K", "S", "P"])
@triton.jit
def _maxpool2d_backward_kernel(grad_ptr, indices_ptr, grad_x_ptr, rows, H, W, h, w,
                               K: tl.constexpr, S: tl.constexpr, P: tl.constexpr, WIDTH_P2: tl.constexpr,
                               WIDE: tl.constexpr, TILE: tl.constexpr, MAX_W: tl.constexpr):
    out_row, col, live, _ = _tile(rows, W, WIDTH_P2, WIDE, TILE, MAX_W)  # out_row over planes*H
    if WIDE:
        H, W = tl.cast(H, tl.int64), tl.cast(W, tl.int64)
        h, w = tl.cast(h, tl.int64), tl.cast(w, tl.int64)
    row = out_row % H
    plane_base = (out_row // H) * (h * w)
    here = ((row * W)[:, None] + col[None, :]).to(tl.int64)
    # The windows covering (row, col): i*S <= row + P < i*S + K, the last such i
    # first (numerators never negative); at most ceil(K/S) of them each way.
    last_i, last_j = (row + P) // S, (col + P) // S
    acc = tl.full(live.shape, 0.0, dtype=tl.float32)
    for di in tl.static_range((K + S - 1) // S):
        i = last_i - di
        row_in = (i >= 0) & (i < h) & (row + P - i * S < K)
        for dj in tl.static_range((K + S - 1) // S):
            j = last_j - dj
            col_in = (j >= 0) & (j < w) & (col + P - j * S < K)
            inside = live & row_in[:, None] & col_in[None, :]
            pooled = (plane_base + i * w)[:, None] + j[None, :]
            index = tl.load(indices_ptr + pooled, mask=inside, other=-1)
            g = tl.load(grad_ptr + pooled, mask=inside & (index == here), other=0.0)
            acc += g.to(tl.float32)
    out = out_row[:, None] * W + col[None, :]
    tl.store(grad_x_ptr + out, acc.to(grad_x_ptr.dtype.element_ty), mask=live)


def maxpool2d_backward(grad: torch.Tensor, indices: torch.Tensor, x_shape, k: int, s: int, p: int):
    """The backward of windows that may overlap (docs/SPEC.md §1.5) as a gather: each
    grad_x element reads the indices of the (at most ceil(k/s)²) windows
    covering it and sums, in float32, the gradients of those whose index is
    itself. No zero fill, no atomics, each element written once; the same sum
    on every call."""
    planes = x_shape[0] * x_shape[1]
    H, W = x_shape[2], x_shape[3]
    h, w = grad.shape[2], grad.shape[3]
    grad, indices = grad.contiguous(), indices.contiguous()
    grad_x = torch.empty(x_shape, dtype=grad.dtype, device=grad.device)
    if grad_x.numel():
        _launch_tiles(_maxpool2d_backward_kernel, planes * H, W, (grad_x.numel(), grad.numel()),
                      grad, indices, grad_x, planes * H, H, W, h, w, K=k, S=s, P=p)
    return grad_x


@_autotuned(key=["rows", "H", "W", "h", "w", "KH", "KW"])
@triton.jit
def _unpool_gather_kernel(values_ptr, positions_ptr, out_ptr, rows, H, W, h, w,
                          KH: tl.constexpr, KW: tl.constexpr, WIDTH_P2: tl.constexpr, WIDE: tl.constexpr,
                          TILE: tl.constexpr, MAX_W: tl.constexpr):
    out_row, col, live, _ = _tile(rows, W, WIDTH_P2, WIDE, TILE, MAX_W)  # out_row over planes*H
    if WIDE:
        H, W = tl.cast(H, tl.int64), tl.cast(W, tl.int64)
        h, w = tl.cast(h, tl.int64), tl.cast(w, tl.int64)
    row = out_row % H
    i, j = row // KH, col // KW
    inside = live & (i < h)[:, None] & (j < w)[None, :]
    pooled = ((out_row // H) * (h * w) + i * w)[:, None] + j[None, :]
    pos = tl.load(positions_ptr + pooled, mask=inside, other=-1)
    val = tl.load(values_ptr + pooled, mask=inside, other=0.0)
    hit = pos == ((row * W)[:, None] + col[None, :]).to(tl.int64)
    out = out_row[:, None] * W + col[None, :]
    tl.store(out_ptr + out, tl.where(hit, val, 0.0), mask=live)


def unpool_gather(values: torch.Tensor, positions: torch.Tensor, out_shape, window):
    """Each output element reads the one pooled value whose window holds it:
    a gather, no zero fill, no atomics. Valid when every position lies inside
    its own (KH, KW) window, as max-pooling's indices do."""
    KH, KW = window
    planes = out_shape[0] * out_shape[1]
    H, W = (out_shape[2], out_shape[3]) if len(out_shape) == 4 else (1, out_shape[2])
    h, w = (values.shape[2], values.shape[3]) if values.dim() == 4 else (1, values.shape[2])
    values, positions = values.contiguous(), positions.contiguous()
    out = torch.empty(out_shape, dtype=values.dtype, device=values.device)
    if out.numel():
        _launch_tiles(_unpool_gather_kernel, planes * H, W, (out.numel(), values.numel()),
                      values, positions, out, planes * H, H, W, h, w, KH=KH, KW=KW)
    return out


@triton.jit
def _row_positions(positions_ptr, rows, L, P, WIDTH_P2: tl.constexpr, WIDE: tl.constexpr, TILE: tl.constexpr,
                   MAX_W: tl.constexpr):
    """This program's tile of a (rows, L) table of positions into rows of P:
    the tile's offsets into the table, its live mask, the mask of positions in
    [0, P), and each position's offset into the (rows, P) output. Inlined
    into the unpool scatter and its backward, which share it."""
    row, col, live, _ = _tile(rows, L, WIDTH_P2, WIDE, TILE, MAX_W)
    if WIDE:
        L, P = tl.cast(L, tl.int64), tl.cast(P, tl.int64)
    pooled = row[:, None] * L + col[None, :]
    pos = tl.load(positions_ptr + pooled, mask=live, other=0)
    inside = live & (pos >= 0) & (pos < P)
    if not WIDE:
        # Where it is used, pos is in [0, P) and P fits int32: keep the
        # offset arithmetic 32-bit (positions arrive as int64).
        pos = pos.to(tl.int32)
    return pooled, live, inside, row[:, None] * P + pos


@_autotuned(key=["rows", "L", "P"])
@triton.jit
def _unpool_scatter_kernel(values_ptr, positions_ptr, out_ptr, rows, L, P,
                           WIDTH_P2: tl.constexpr, WIDE: tl.constexpr, TILE: tl.constexpr, MAX_W: tl.constexpr):
    pooled, live, inside, out = _row_positions(positions_ptr, rows, L, P, WIDTH_P2, WIDE, TILE, MAX_W)
    val = tl.load(values_ptr + pooled, mask=live, other=0.0)
    tl.store(out_ptr + out, val, mask=inside)


def unpool_scatter(values: torch.Tensor, positions: torch.Tensor, out_shape):
    """General positions: a zero fill, then one scatter kernel (out-of-range
    positions are masked, never written)."""
    rows = out_shape[0] * out_shape[1]
    values, positions = values.reshape(rows, -1).contiguous(), positions.reshape(rows, -1).contiguous()
    L, P = values.shape[1], math.prod(out_shape[2:])
    out = torch.zeros(out_shape, dtype=values.dtype, device=values.device)
    if values.numel():
        _launch_tiles(_unpool_scatter_kernel, rows, L, (values.numel(), out.numel()), values, positions, out, rows, L, P)
    return out


@_autotuned(key=["rows", "L", "P"])
@triton.jit
def _unpool_backward_kernel(grad_ptr, positions_ptr, grad_values_ptr, rows, L, P,
                            WIDTH_P2: tl.constexpr, WIDE: tl.constexpr, TILE: tl.constexpr, MAX_W: tl.constexpr):
    pooled, live, inside, at = _row_positions(positions_ptr, rows, L, P, WIDTH_P2, WIDE, TILE, MAX_W)
    # A position outside [0, P) wrote nothing forward (unpool_scatter masks
    # it), so nothing depends on its value: its gradient is 0.
    grad = tl.load(grad_ptr + at, mask=inside, other=0.0)
    tl.store(grad_values_ptr + pooled, grad, mask=live)


def unpool_backward(grad_out: torch.Tensor, positions: torch.Tensor, values_shape):
    """maxunpool's backward (docs/SPEC.md §1.5): grad_values = grad_out gathered at the
    positions, one read per pooled element, grad_values written once. A
    strided gradient is copied first (the kernel reads rows of P)."""
    rows, L = values_shape[0] * values_shape[1], math.prod(values_shape[2:])
    P = grad_out.numel() // max(rows, 1)
    grad_out = grad_out.contiguous().reshape(rows, P)
    positions = positions.reshape(rows, L).contiguous()
    grad_values = torch.empty(values_shape, dtype=grad_out.dtype, device=grad_out.device)
    if grad_values.numel():
        _launch_tiles(_unpool_backward_kernel, rows, L, (grad_out.numel(), grad_values.numel()),
                      grad_out, positions, grad_values, rows, L, P)
    return grad_values


@_autotuned(key=["rows", "C", "H", "W", "S", "sw"])
@triton.jit
def _dispersion_kernel(x_ptr, mask_ptr, y_ptr, rows, C, H, W, out_W, S, sb, sc, sh, sw,
                       WIDTH_P2: tl.constexpr, WIDE: tl.constexpr, TILE: tl.constexpr, MAX_W: tl.constexpr):
    out_row, col, live, first_col = _tile(rows, out_W, WIDTH_P2, WIDE, TILE, MAX_W)  # out_row over B*H
    if WIDE:
        C, H, W = tl.cast(C, tl.int64), tl.cast(H, tl.int64), tl.cast(W, tl.int64)
        out_W, S = tl.cast(out_W, tl.int64), tl.cast(S, tl.int64)
        sb, sc, sh, sw = tl.cast(sb, tl.int64), tl.cast(sc, tl.int64), tl.cast(sh, tl.int64), tl.cast(sw, tl.int64)
    row_live = out_row < rows
    row = out_row % H
    x_row = (out_row // H) * sb + row * sh
    # Only the channels that land on this block of columns, 0 <= col - i*S < W:
    # about W/S of them, not C. Written without branches so S may be 0.
    step = tl.maximum(S, 1)
    low = tl.where(S > 0, tl.maximum((first_col - W + step) // step, 0), 0)
    high = tl.where(S > 0, tl.minimum((first_col + col.shape[0] - 1) // step, C - 1), C - 1)
    acc = tl.full(live.shape, 0.0, dtype=tl.float32)
    for i in range(low, high + 1):
        in_col = col - i * S
        valid = row_live[:, None] & ((in_col >= 0) & (in_col < W))[None, :]
        xv = tl.load(x_ptr + (x_row + i * sc)[:, None] + (in_col * sw)[None, :], mask=valid, other=0.0)
        mv = tl.load(mask_ptr + (row * W)[:, None] + in_col[None, :], mask=valid, other=0.0)
        acc += xv.to(tl.float32) * mv.to(tl.float32)
    out = out_row[:, None] * out_W + col[None, :]
    tl.store(y_ptr + out, acc.to(y_ptr.dtype.element_ty), mask=live)


def dispersion(x: torch.Tensor, mask: torch.Tensor, S: int):
    """Each output sums the C inputs that land on it (a gather): every x element
    read once, the mask multiply fused, y written once, no atomics, float32
    accumulation for the half types. Each program loops over only the
    channels that reach its columns (about W/S of them, not C)."""
    B, C, H, W = x.shape
    out_W = W + (C - 1) * S
    y = torch.empty((B, 1, H, out_W), dtype=x.dtype, device=x.device)
    mask = mask.contiguous()
    if y.numel():
        _launch_tiles(_dispersion_kernel, B * H, out_W, (_span(x), H * W, y.numel()),
                      x, mask, y, B * H, C, H, W, out_W, S, *x.stride())
    return y


@_autotuned(key=["rows", "C", "H", "W", "S", "syw"])
@triton.jit
def _dispersion_pinv_kernel(y_ptr, inv_coverage_ptr, inv_mask_ptr, x_ptr, rows, C, H, W, S, syb, syh, syw,
                            WIDTH_P2: tl.constexpr, WIDE: tl.constexpr, TILE: tl.constexpr, MAX_W: tl.constexpr):
    out_row, w, live, _ = _tile(rows, W, WIDTH_P2, WIDE, TILE, MAX_W)  # out_row over B*C*H
    if WIDE:
        C, H, W, S = tl.cast(C, tl.int64), tl.cast(H, tl.int64), tl.cast(W, tl.int64), tl.cast(S, tl.int64)
        syb, syh, syw = tl.cast(syb, tl.int64), tl.cast(syh, tl.int64), tl.cast(syw, tl.int64)
    row = out_row % H
    channel = (out_row // H) % C
    b = out_row // (H * C)
    col = (channel * S)[:, None] + w[None, :]
    y_row = b * syb + row * syh
    yv = tl.load(y_ptr + y_row[:, None] + col * syw, mask=live, other=0.0).to(tl.float32)
    cv = tl.load(inv_coverage_ptr + col, mask=live, other=0.0)
    mv = tl.load(inv_mask_ptr + (row * W)[:, None] + w[None, :], mask=live, other=0.0)
    out = out_row[:, None] * W + w[None, :]
    tl.store(x_ptr + out, (yv * cv * mv).to(x_ptr.dtype.element_ty), mask=live)


def pinv_tables(mask: torch.Tensor, S: int, C: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The case's constants, once per case (a strategy computes them in its
    prepare): 1/coverage per column of y (W + (C-1)*S) and 1/mask per (h, w),
    both float32 (a half type cannot hold a coverage above 256 exactly), each
    reciprocal rounded once from float64. They turn the kernel's per-element
    work into two multiplies: computing the coverage in the kernel took two
    integer divisions by S per column and a float division per element, which
    made it instruction-bound (PTX for sm_90, float16, 1024-element tiles: 11
    div.s32, 8 div.u32 and 8 div.full.f32 per thread of 8 elements; ncu: 16 %
    of DRAM peak at 92 % occupancy). Both tables stay in L2 (W' and H*W
    elements, against B*C*H*W written)."""
    H, W = mask.shape
    cols = torch.arange(W + (C - 1) * S, device=mask.device, dtype=torch.int64)
    if S > 0:
        # channel i covers column c when 0 <= c - i*S < W
        first = torch.clamp((cols - W) // S + 1, min=0)
        last = torch.clamp(cols // S, max=C - 1)
        coverage = (last - first + 1).to(torch.float64)
    else:
        coverage = torch.full((W,), float(C), dtype=torch.float64, device=mask.device)
    inv_coverage = (1.0 / coverage).to(torch.float32)
    inv_mask = (1.0 / mask.to(torch.float64)).to(torch.float32).contiguous()
    return inv_coverage, inv_mask


def dispersion_pinv(y: torch.Tensor, mask: torch.Tensor, S: int, C: int, tables=None):
    """One pass: each x element reads its y element and multiplies it by its
    column's 1/coverage and its 1/mask (`pinv_tables`, computed here unless
    the caller passes them)."""
    B, _, H, _ = y.shape
    W = mask.shape[1]
    x = torch.empty((B, C, H, W), dtype=y.dtype, device=y.device)
    if x.numel():
        inv_coverage, inv_mask = tables if tables is not None else pinv_tables(mask, S, C)
        _launch_tiles(_dispersion_pinv_kernel, B * C * H, W, (_span(y), H * W, x.numel()),
                      y, inv_coverage, inv_mask, x, B * C * H, C, H, W, S, y.stride(0), y.stride(2), y.stride(3))
    return x
