"""Pieces every operator module shares: dtype rounding and the two
comparison rules of docs/SPEC.md §1 (bitwise, and relative error). Conversion between
backends lives with the backends (impls/backends.py)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from impls.backends import to_numpy  # noqa: F401  (operator modules use common.to_numpy)

# docs/SPEC.md §1.3: relative-error bounds per dtype.
REL_TOL = {"float64": 1e-12, "float32": 1e-5, "float16": 1e-2, "bfloat16": 1e-2}
# Above this relative error a result is wrong, not rounded. One lost channel of
# 512 is an error of about 1.5e-2 and one of 56 about 4.6e-2, so one bound for
# every dtype (5e-2) called those float32 results "inexact": correct, timed and
# compared. The widest honest rounding is a half-type accumulator over hundreds
# of channels (about 2e-2) and, in float32, cuDNN's TF32 convolutions (about 5e-4).
WRONG_REL_ERR = {"float64": 1e-4, "float32": 1e-2, "float16": 5e-2, "bfloat16": 5e-2}


# Kinds of difference a bitwise compare finds (Verdict.differences); a known
# upstream defect (impls/defects.py) explains a mismatch only when every
# difference is of the kinds it lists.
ZERO_SIGN = "zero-sign"  # both zero, the sign differs (-0.0 against +0.0)
# both subnormal or zero in the dtype, not both zero (what flushing or mis-converting subnormals does)
SUBNORMAL = "subnormal"
VALUE = "value"  # any other differing value
SHAPE = "shape"
DTYPE_DIFFERENCE = "dtype"  # the output's dtype is not the one asked for (not a dtype itself)
INDEX = "index"  # an index that is not the expected one
SUBNORMAL_WINDOW_INDEX = "subnormal-window-index"  # a wrong index in a window holding a subnormal
INDEX_OUTSIDE = "index-outside-plane"
NEG_INF_WINDOW_INDEX_0 = "neg-inf-window-index-0"  # index 0 for an all -inf window that does not hold it
# a gradient that differs only because all -inf windows' gradients went to the plane's element 0
NEG_INF_WINDOW_GRAD_0 = "neg-inf-window-grad-0"
# ... and the one kind a relative compare names: inf or NaN where the oracle is finite.
NON_FINITE = "non-finite"


@dataclass(frozen=True)
class Verdict:
    status: str  # a status of impls/status.py (ok | inexact | mismatch here; the check adds upstream-defect)
    message: str = ""
    max_abs_err: float = 0.0
    rel_err: float = 0.0
    # A mismatch's kinds of difference (bitwise compares), e.g. {"zero-sign"}.
    differences: frozenset = frozenset()


def special_integers(rng, shape, bounds: tuple[float, float, float]) -> np.ndarray:
    """Adversarial values for the index operators: integers in [-3, 3] (ties
    everywhere), with NaN, +inf and -inf where a uniform draw falls below
    ``bounds[0]``, in [bounds[0], bounds[1]) and in [bounds[1], bounds[2]),
    and half the zeros -0.0 (a zero's sign must survive)."""
    values = rng.integers(-3, 4, size=shape).astype(np.float64)
    special = rng.random(shape)
    values[special < bounds[0]] = np.nan
    values[(special >= bounds[0]) & (special < bounds[1])] = np.inf
    values[(special >= bounds[1]) & (special < bounds[2])] = -np.inf
    values[(values == 0) & (rng.random(shape) < 0.5)] = -0.0
    return values


# Subnormal numbers of each float type, as multiples of its smallest one: its
# subnormals are m * SUBNORMAL_UNIT for 0 < m < SUBNORMAL_STEPS, and its
# smallest normal number is SUBNORMAL_UNIT * SUBNORMAL_STEPS. bfloat16 has
# float32's exponent range and 7 mantissa bits, so its subnormals are float32
# subnormals too (those that are multiples of 2**-133). All are exact float64s.
SUBNORMAL_UNIT = {"float64": 2.0**-1074, "float32": 2.0**-149, "bfloat16": 2.0**-133, "float16": 2.0**-24}
SUBNORMAL_STEPS = {"float64": 2**52, "float32": 2**23, "bfloat16": 2**7, "float16": 2**10}


def subnormal(dtype: str, multiple) -> np.ndarray | float:
    """``multiple`` (a signed integer, or an array of them) times ``dtype``'s
    smallest subnormal, as float64: subnormal in ``dtype`` for 0 < |multiple| <
    SUBNORMAL_STEPS[dtype]. In a narrower type it rounds to a zero of its sign
    or a smaller subnormal; in a wider one it is a normal number."""
    return np.asarray(multiple, dtype=np.float64) * SUBNORMAL_UNIT[dtype]


def is_subnormal(values: np.ndarray, dtype: str) -> np.ndarray:
    """Where ``values`` (float64 holding ``dtype``'s values) are subnormal in ``dtype``."""
    magnitude = np.abs(values)
    return (magnitude > 0) & (magnitude < SUBNORMAL_UNIT[dtype] * SUBNORMAL_STEPS[dtype])


def sprinkle_subnormals(rng, values: np.ndarray, share: float) -> np.ndarray:
    """``values`` with ``share`` of them (at least two per float type, at
    most half of them) replaced by subnormals of every float type in turn, so
    that each dtype's check holds subnormals of its own: the smallest, the
    largest and sizes between, of alternating sign."""
    count = min(max(2 * len(SUBNORMAL_UNIT), round(share * values.size)), values.size // 2)
    out = values.copy().reshape(-1)
    where = rng.permutation(values.size)[:count]  # drawn before the series: the generator's order is the inputs'
    out[where] = subnormal_series(rng, count)
    return out.reshape(values.shape)


def subnormal_series(rng, count: int) -> np.ndarray:
    """``count`` subnormals (float64), of every float type in turn: the
    smallest, the largest and sizes between, of alternating sign."""
    types = list(SUBNORMAL_UNIT)
    out = np.empty(count)
    for turn in range(count):
        dtype, round_ = types[turn % len(types)], turn // len(types)
        steps = SUBNORMAL_STEPS[dtype]
        multiple = (1, steps - 1, int(rng.integers(1, steps)))[round_ % 3]
        out[turn] = subnormal(dtype, -multiple if round_ % 2 else multiple)
    return out


# Adversarial gradients cycle through 1..GRADIENT_CYCLE: integers that every
# dtype holds exactly (bfloat16's 8 significant bits stop at 256).
GRADIENT_CYCLE = 251
# The share of an index operator's adversarial gradient that is special
# (``gradient_values(special=True)``): enough that the small check cases hold
# every kind, few enough that most windows' gradients stay distinct integers.
SPECIAL_GRADIENT_SHARE = 0.3


def largest_finite(dtype: str) -> float:
    """``dtype``'s largest finite value, as a float64 (bfloat16 through torch's finfo)."""
    if dtype == "bfloat16":
        import torch

        return float(torch.finfo(torch.bfloat16).max)
    return float(np.finfo(dtype).max)


def gradient_values(rng, shape, mode: str, special: bool = False) -> np.ndarray:
    """An incoming gradient (docs/SPEC.md §1.5): ``random``, standard normal;
    ``adversarial`` (and any other mode, e.g. maxunpool's ``scattered``),
    non-zero integers ±1..251 counting up along the flat order, so neighbours
    (and the gradients of neighbouring windows) differ and a gradient sent to
    the wrong place shows. ``special`` (the index operators, whose backward
    moves values and is compared bitwise): SPECIAL_GRADIENT_SHARE of them, at
    least one of each kind where the gradient has room, become -0.0, +0.0,
    NaN, ±inf, ± the largest finite value of every float type, and subnormals
    of every float type (``sprinkle_subnormals``): each dtype's check holds its
    own largest value and its own subnormals (a wider type's round to ±inf or
    ±0 in a narrower one, which is then just another special value). Without
    ``special`` (the shift operators, which sum), normal values only."""
    if mode == "random":
        return rng.standard_normal(shape)
    count = int(np.prod(shape))
    magnitudes = np.arange(count) % GRADIENT_CYCLE + 1
    signs = np.where(rng.random(count) < 0.5, -1.0, 1.0)
    values = magnitudes * signs
    if not special or count < 2:
        return values.reshape(shape)
    kinds = [-0.0, 0.0, np.nan, np.inf, -np.inf]
    kinds += [sign * largest_finite(dtype) for dtype in SUBNORMAL_UNIT for sign in (1.0, -1.0)]
    chosen = rng.permutation(count)[:max(min(len(kinds), count // 2), round(SPECIAL_GRADIENT_SHARE * count))]
    # kinds in a fresh order per gradient (a small one holds a few); about 2 in 5 of them subnormals
    split = len(chosen) * len(kinds) // (len(kinds) + 2 * len(SUBNORMAL_UNIT))
    values[chosen[:split]] = np.resize(rng.permutation(kinds), split)
    tiny = subnormal_series(rng, len(chosen) - split)
    values[chosen[split:]] = tiny
    return values.reshape(shape)


def round_to_dtype(array: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values an input takes once stored in ``dtype``.

    The oracle runs on these, so rounding of the inputs is never blamed on a
    strategy. bfloat16 goes through torch, numpy has no such type.
    """
    if dtype == "bfloat16":
        import torch

        return torch.from_numpy(np.ascontiguousarray(array)).to(torch.bfloat16).to(torch.float64).numpy()
    if not isinstance(array, np.ndarray) or array.size <= CHUNK_ELEMENTS or not array.flags.c_contiguous:
        with np.errstate(over="ignore"):  # a value past the dtype's range is stored as ±inf: that is the input
            return np.asarray(array).astype(dtype).astype(np.float64)
    rounded = np.empty(array.shape, dtype=np.float64)

    def round_piece(out_piece, in_piece):
        with np.errstate(over="ignore"):  # a value past the dtype's range is stored as ±inf: that is the input
            out_piece[...] = in_piece.astype(dtype)

    over_chunks(round_piece, rounded, array)  # a GPU case's inputs: seconds, not tens of seconds
    return rounded


def storage_dtype_name(array: np.ndarray, expected: str) -> str:
    # bfloat16 comes back as float32 (see to_numpy); name it as the strategy made it.
    if expected == "bfloat16" and array.dtype == np.float32:
        return "bfloat16"
    return str(array.dtype)


def plain(value) -> str:
    """A number as a message shows it: whole (the shortest text that reads
    back as the same value in its own dtype) and plain (``nan``, ``-0.0``,
    ``3``; never numpy's ``np.float64(nan)``)."""
    if isinstance(value, np.generic) and (value.dtype.kind in "iub" or value.dtype.itemsize < 4):
        return str(value.item())  # float16's own shortest text is "6.55e+04" for 65504
    return str(value)


def first_difference(out: np.ndarray, ref: np.ndarray, differs: np.ndarray) -> str:
    where = tuple(int(i) for i in np.argwhere(differs)[0])
    return f"first difference at {where}: got {plain(out[where])}, expected {plain(ref[where])}"


def check_shape_dtype(name: str, out: np.ndarray, ref: np.ndarray, dtype: str) -> Verdict | None:
    if not isinstance(out, np.ndarray):
        return Verdict("mismatch", f"{name}: expected an array, got {type(out).__name__}",
                       differences=frozenset({SHAPE}))
    if out.shape != ref.shape:
        return Verdict("mismatch", f"{name}: shape {out.shape}, expected {ref.shape}",
                       differences=frozenset({SHAPE}))
    got = storage_dtype_name(out, dtype)
    if got != dtype:
        return Verdict("mismatch", f"{name}: dtype {got}, expected {dtype}", differences=frozenset({DTYPE_DIFFERENCE}))
    return None


def _signed(value) -> str:
    return f"{float(value):+}"


def merge_verdicts(*verdicts: Verdict) -> Verdict:
    """One verdict for an output of several parts (maxpool2d's values and
    indices): ok when all are, else a mismatch naming every part's problem."""
    bad = [v for v in verdicts if v.status != "ok"]
    if not bad:
        return Verdict("ok")
    if len(bad) == 1:
        return bad[0]
    return Verdict("mismatch", "; ".join(v.message for v in bad),
                   max_abs_err=max(v.max_abs_err for v in bad), rel_err=float("nan"),
                   differences=frozenset().union(*(v.differences for v in bad)))


def compare_bitwise(name: str, out: np.ndarray, ref64: np.ndarray, dtype: str, *,
                    signed_zeros: bool = True) -> Verdict:
    """Exact comparison for operators that only move values (docs/SPEC.md §1.1, 1.2).

    The float64 oracle is cast to ``dtype`` (exact: its values are inputs) and
    compared bit for bit; any NaN matches any NaN, since which NaN payload a
    library propagates is not part of any contract. ``signed_zeros=False``: -0.0
    matches +0.0 (``compare_gradient_bitwise``, the one caller).
    """
    bad = check_shape_dtype(name, out, ref64, dtype)
    if bad:
        return bad
    target = np.dtype(np.float32 if dtype == "bfloat16" else dtype)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[target.itemsize]

    def chunk_differs(out_chunk, ref_chunk) -> bool:
        ref_chunk = ref_chunk.astype(target)
        return bool((out_chunk.astype(target, copy=False).view(uint) != ref_chunk.view(uint)).any())

    if not any(over_chunks(chunk_differs, out, ref64)):  # the usual answer: no NaN masks to build
        return Verdict("ok")
    ref = ref64.astype(target)
    out = out.astype(target, copy=False)
    differs = out.view(uint) != ref.view(uint)
    differs &= ~(np.isnan(out) & np.isnan(ref))
    if not signed_zeros:
        differs &= ~((out == 0) & (ref == 0))
    if not differs.any():
        return Verdict("ok")
    # -0.0 == +0.0 numerically: a difference between two zeros is one of sign only.
    zero_sign = differs & (out == 0) & (ref == 0)
    other = differs & ~zero_sign
    tiny = differs & ~zero_sign & _subnormal_or_zero(out, dtype) & _subnormal_or_zero(ref, dtype)
    kinds = frozenset(kind for kind, mask in ((ZERO_SIGN, zero_sign), (SUBNORMAL, tiny),
                                              (VALUE, other & ~tiny)) if mask.any())
    if not other.any():
        where = tuple(int(i) for i in np.argwhere(zero_sign)[0])
        count = int(zero_sign.sum())
        return Verdict("mismatch", f"{name}: sign of zero differs at {where} (got {_signed(out[where])}, "
                       f"expected {_signed(ref[where])}); {count} element{'s' if count > 1 else ''} in all",
                       max_abs_err=0.0, rel_err=float("nan"), differences=kinds)
    finite = ~np.isnan(out) & ~np.isnan(ref) & np.isfinite(out) & np.isfinite(ref)
    # in float64: two of the dtype's largest finite values of opposite sign (a hostile gradient's) overflow it
    err = float(np.abs(out[finite].astype(np.float64) - ref[finite]).max()) if finite.any() else float("inf")
    signs = f" ({int(zero_sign.sum())} of them only in the sign of zero)" if zero_sign.any() else ""
    return Verdict("mismatch", f"{name}: {int(differs.sum())} elements differ{signs}; "
                   + first_difference(out, ref, other), max_abs_err=err, rel_err=float("nan"),
                   differences=kinds)


def compare_gradient_bitwise(name: str, out: np.ndarray, ref64: np.ndarray, dtype: str) -> Verdict:
    """docs/SPEC.md §1.5's bitwise for a gradient (the index operators' backward, a
    scatter or a gather): the value's bits, except the sign of a zero. A
    backward that scatters by adding into zeros (autograd's) turns an incoming
    -0.0 into +0.0, and that is allowed; a flushed subnormal, a changed NaN
    into a number or anything else is a difference as in ``compare_bitwise``."""
    return compare_bitwise(name, out, ref64, dtype, signed_zeros=False)


def _subnormal_or_zero(values: np.ndarray, dtype: str) -> np.ndarray:
    return (values == 0) | is_subnormal(values.astype(np.float64), dtype)


def compare_relative(name: str, out: np.ndarray, ref: np.ndarray, dtype: str) -> Verdict:
    """docs/SPEC.md §1.3: ‖out − ref‖ / ‖ref‖ against the dtype's bound."""
    bad = check_shape_dtype(name, out, ref, dtype)
    if bad:
        return bad

    def finite_and_largest(out_chunk, ref_chunk):
        return bool(np.isfinite(out_chunk).all()), float(np.abs(ref_chunk).max())

    firsts = over_chunks(finite_and_largest, out, ref)
    if not all(finite for finite, _ in firsts):
        out64 = out.astype(np.float64)
        differs = ~np.isfinite(out64)
        return Verdict("mismatch", f"{name}: {int(differs.sum())} non-finite elements; "
                       + first_difference(out64, ref, differs), max_abs_err=float("inf"),
                       rel_err=float("inf"), differences=frozenset({NON_FINITE}))
    # Norms of values near float64's largest (a subnormal float64 mask's
    # quotients) would overflow when squared: both taken in units of a power
    # of two near the largest reference value, which changes no ratio.
    # np.max, not max(): a NaN in the reference carries through whichever piece holds it
    largest = float(np.max([chunk_largest for _, chunk_largest in firsts])) if firsts else 0.0
    unit = float(np.ldexp(1.0, np.frexp(largest)[1] - 1)) if np.isfinite(largest) and largest > 0 else 1.0

    def squares_and_worst(out_chunk, ref_chunk):
        scaled_ref = ref_chunk / unit
        diff = out_chunk.astype(np.float64) - ref_chunk
        scaled_diff = diff / unit
        return float(scaled_ref @ scaled_ref), float(scaled_diff @ scaled_diff), float(np.abs(diff).max())

    sums = over_chunks(squares_and_worst, out, ref)
    ref_norm = float(np.sqrt(sum(ref_part for ref_part, _, _ in sums)))
    diff_norm = float(np.sqrt(sum(diff_part for _, diff_part, _ in sums)))
    rel_err = diff_norm / ref_norm if ref_norm > 0 else diff_norm * unit
    max_abs_err = float(np.max([worst for _, _, worst in sums])) if sums else 0.0
    tol = REL_TOL[dtype]
    if rel_err <= tol:
        return Verdict("ok", max_abs_err=max_abs_err, rel_err=rel_err)
    out64 = out.astype(np.float64)
    worst = np.abs(out64 - ref) == max_abs_err
    if not worst.any():  # no largest difference to name: a NaN in the reference
        worst = np.isnan(out64 - ref)
    detail = f"relative error {rel_err:.3g} over the {dtype} bound {tol:g}; " + first_difference(out64, ref, worst)
    status = "inexact" if rel_err <= WRONG_REL_ERR[dtype] else "mismatch"
    return Verdict(status, f"{name}: {detail}", max_abs_err=max_abs_err, rel_err=rel_err)


# A compare walks its arrays in pieces of this many elements, the pieces shared
# out over the machine's cores: at a GPU sweep's sizes (half a billion
# elements) one whole-array pass per step took 20 s a judgement, in float64
# temporaries of 4 GB each; pieces stay in cache and need no such temporaries.
CHUNK_ELEMENTS = 1 << 20


def compare_threads() -> int:
    """The threads a compare uses: the cores this process may run on (a
    compare runs between timed calls, never during them)."""
    return max(1, min(16, len(os.sched_getaffinity(0))))


def over_chunks(fn, out: np.ndarray, ref: np.ndarray) -> list:
    """``fn(out_piece, ref_piece)`` over the two same-shaped arrays taken flat in C
    order (a copy only for an output not C-contiguous), piece by piece, on
    ``compare_threads`` threads when there is more than one piece (numpy lets go of the GIL)."""
    flat_out, flat_ref = np.ravel(out), np.ravel(ref)
    starts = range(0, flat_ref.size, CHUNK_ELEMENTS)
    if len(starts) <= 1:
        return [fn(flat_out, flat_ref)] if flat_ref.size else []

    def piece(start: int):
        return fn(flat_out[start:start + CHUNK_ELEMENTS], flat_ref[start:start + CHUNK_ELEMENTS])

    with ThreadPoolExecutor(max_workers=compare_threads()) as pool:
        return list(pool.map(piece, starts))


# ------------------------------------------------------------ judged on the device
# A CUDA case is judged where its arrays are (harness/measuring/check.py,
# ``judge_device``): the float64 oracle computed by torch on the device, and
# these compares, which follow the numpy compares above rule for rule (the
# same bounds, kinds and messages) and bring back only the verdict, its error
# figures and the first differing element. Any torch device works: the tests
# run them on CPU tensors against the numpy compares.
def on_device(output: Any, device: str) -> Any:
    """A strategy's output (array, tensor, or tuple of them) as torch tensors
    on ``device``: a tensor as it is (moved when it is elsewhere), another
    backend's array through DLPack, without a trip through the host where
    the library allows; what torch cannot hold (an object array) stays as
    numpy makes it, for the compare to refuse."""
    import torch

    if isinstance(output, (tuple, list)):
        return tuple(on_device(item, device) for item in output)
    if torch.is_tensor(output):
        return output.detach().to(device)
    if not isinstance(output, np.ndarray) and hasattr(output, "__dlpack__"):
        try:
            return torch.from_dlpack(output).to(device)
        except (RuntimeError, TypeError, BufferError):
            pass  # a type DLPack does not carry: through the host below
    array = to_numpy(output)
    if isinstance(array, np.ndarray) and array.dtype.kind in "fiub":
        return torch.from_numpy(np.ascontiguousarray(array)).to(device)
    return array


def _host_scalar(tensor, where: tuple):
    """One element as numpy holds it (bfloat16 widened to float32, as
    ``to_numpy`` does), for ``plain``: the messages read as the host's."""
    import torch

    value = tensor[where].detach()
    if value.dtype == torch.bfloat16:
        value = value.float()
    return value.cpu().numpy()[()]


def device_first_difference(out, ref, differs) -> str:
    """``first_difference`` of tensors: the first True of ``differs`` in C order."""
    where = first_true(differs)
    return (f"first difference at {where}: got {plain(_host_scalar(out, where))}, "
            f"expected {plain(_host_scalar(ref, where))}")


def first_true(mask) -> tuple:
    """Where a boolean tensor's first True is, in C order (argmax takes the first maximum)."""
    import torch

    flat = int(mask.reshape(-1).to(torch.uint8).argmax())
    return tuple(int(i) for i in np.unravel_index(flat, tuple(mask.shape)))


def tensor_dtype_name(value) -> str:
    """A tensor's dtype as numpy names it ("float32", "int64")."""
    return str(value.dtype).removeprefix("torch.")


def device_check_shape_dtype(name: str, out, ref, dtype: str) -> Verdict | None:
    """``check_shape_dtype`` of a tensor against the reference tensor."""
    import torch

    if not torch.is_tensor(out):
        if not isinstance(out, np.ndarray):
            return Verdict("mismatch", f"{name}: expected an array, got {type(out).__name__}",
                           differences=frozenset({SHAPE}))
        if out.shape != tuple(ref.shape):  # an array torch cannot hold (objects): refused as the host does
            return Verdict("mismatch", f"{name}: shape {out.shape}, expected {tuple(ref.shape)}",
                           differences=frozenset({SHAPE}))
        return Verdict("mismatch", f"{name}: dtype {out.dtype}, expected {dtype}",
                       differences=frozenset({DTYPE_DIFFERENCE}))
    if tuple(out.shape) != tuple(ref.shape):
        return Verdict("mismatch", f"{name}: shape {tuple(out.shape)}, expected {tuple(ref.shape)}",
                       differences=frozenset({SHAPE}))
    got = tensor_dtype_name(out)
    if got != dtype:
        return Verdict("mismatch", f"{name}: dtype {got}, expected {dtype}", differences=frozenset({DTYPE_DIFFERENCE}))
    return None


def device_is_subnormal(values, dtype: str):
    """``is_subnormal`` of a tensor (any float type, read as float64)."""
    magnitude = values.abs().double()
    return (magnitude > 0) & (magnitude < SUBNORMAL_UNIT[dtype] * SUBNORMAL_STEPS[dtype])


def device_compare_bitwise(name: str, out, ref64, dtype: str, *, signed_zeros: bool = True) -> Verdict:
    """``compare_bitwise`` on the device: the oracle cast to ``dtype`` and
    compared bit for bit, any NaN matching any NaN (and with
    ``signed_zeros=False`` -0.0 matching +0.0), a mismatch's kinds (zero-sign,
    subnormal, value) and message as the host's."""
    import torch

    bad = device_check_shape_dtype(name, out, ref64, dtype)
    if bad:
        return bad
    ref = ref64.to(getattr(torch, dtype))
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[ref.element_size()]
    differs = out.view(bits) != ref.view(bits)
    differs &= ~(torch.isnan(out) & torch.isnan(ref))
    if not signed_zeros:
        differs &= ~((out == 0) & (ref == 0))
    if not bool(differs.any()):
        return Verdict("ok")
    zero_sign = differs & (out == 0) & (ref == 0)
    other = differs & ~zero_sign
    tiny = other & ((out == 0) | device_is_subnormal(out, dtype)) & ((ref == 0) | device_is_subnormal(ref, dtype))
    kinds = frozenset(kind for kind, mask in ((ZERO_SIGN, zero_sign), (SUBNORMAL, tiny), (VALUE, other & ~tiny))
                      if bool(mask.any()))
    if not bool(other.any()):
        where = first_true(zero_sign)
        count = int(zero_sign.sum())
        return Verdict("mismatch", f"{name}: sign of zero differs at {where} (got "
                       f"{_signed(_host_scalar(out, where))}, expected {_signed(_host_scalar(ref, where))}); "
                       f"{count} element{'s' if count > 1 else ''} in all",
                       max_abs_err=0.0, rel_err=float("nan"), differences=kinds)
    finite = torch.isfinite(out) & torch.isfinite(ref)
    # in float64, as the host computes it: two of the dtype's largest finite values of opposite sign overflow it
    err = float((out[finite].double() - ref[finite].double()).abs().max()) if bool(finite.any()) else float("inf")
    signs = f" ({int(zero_sign.sum())} of them only in the sign of zero)" if bool(zero_sign.any()) else ""
    return Verdict("mismatch", f"{name}: {int(differs.sum())} elements differ{signs}; "
                   + device_first_difference(out, ref, other), max_abs_err=err, rel_err=float("nan"),
                   differences=kinds)


def device_compare_gradient_bitwise(name: str, out, ref64, dtype: str) -> Verdict:
    """``compare_gradient_bitwise`` on the device: bits, except the sign of a zero."""
    return device_compare_bitwise(name, out, ref64, dtype, signed_zeros=False)


def device_compare_relative(name: str, out, ref, dtype: str) -> Verdict:
    """``compare_relative`` on the device: ‖out − ref‖ / ‖ref‖ in float64,
    both norms in units of a power of two near the largest reference value
    (as the host's), against the dtype's bound."""
    import torch

    bad = device_check_shape_dtype(name, out, ref, dtype)
    if bad:
        return bad
    out64 = out.double()
    if not bool(torch.isfinite(out64).all()):
        differs = ~torch.isfinite(out64)
        return Verdict("mismatch", f"{name}: {int(differs.sum())} non-finite elements; "
                       + device_first_difference(out64, ref, differs), max_abs_err=float("inf"),
                       rel_err=float("inf"), differences=frozenset({NON_FINITE}))
    if ref.numel() == 0:
        return Verdict("ok", max_abs_err=0.0, rel_err=0.0)
    largest = float(ref.abs().max())  # NaN in the reference carries through, as on the host
    unit = float(np.ldexp(1.0, np.frexp(largest)[1] - 1)) if np.isfinite(largest) and largest > 0 else 1.0
    diff = out64 - ref
    ref_norm = float(torch.sqrt(((ref / unit) ** 2).sum()))
    diff_norm = float(torch.sqrt(((diff / unit) ** 2).sum()))
    rel_err = diff_norm / ref_norm if ref_norm > 0 else diff_norm * unit
    max_abs_err = float(diff.abs().max())
    tol = REL_TOL[dtype]
    if rel_err <= tol:
        return Verdict("ok", max_abs_err=max_abs_err, rel_err=rel_err)
    worst = diff.abs() == max_abs_err
    if not bool(worst.any()):  # no largest difference to name: a NaN in the reference
        worst = torch.isnan(diff)
    detail = (f"relative error {rel_err:.3g} over the {dtype} bound {tol:g}; "
              + device_first_difference(out64, ref, worst))
    status = "inexact" if rel_err <= WRONG_REL_ERR[dtype] else "mismatch"
    return Verdict(status, f"{name}: {detail}", max_abs_err=max_abs_err, rel_err=rel_err)
