"""Pieces every operator module shares: dtype rounding and the two
comparison rules of docs/SPEC.md §1 (bitwise, and relative error), written
once over the array namespace of their arguments (array-api-compat): numpy
arrays on the host, or torch tensors wherever they live, a CUDA case's
judged on its GPU. The few steps the array API does not name (a view of the
bits, an element for a message, a masked assignment) are the namespace
primitives below, each with one branch per library. Conversion between
backends lives with the backends (impls/backends.py)."""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from array_api_compat import array_namespace, is_array_api_obj, is_numpy_array, is_numpy_namespace, is_torch_array
from array_api_compat import device as array_api_device

from impls import status
from impls.backends import DTYPE_RECORDS, DTYPES, dtype_record, to_numpy

# docs/SPEC.md §1.3's bounds per dtype, read from the dtype records (impls/backends.py).
REL_TOL = {record.name: record.rel_tol for record in DTYPE_RECORDS}
WRONG_REL_ERR = {record.name: record.wrong_rel_err for record in DTYPE_RECORDS}


# Kinds of difference a bitwise compare finds (Verdict.differences); a known
# upstream defect (impls/defects.py) explains a mismatch only when every
# difference is of the kinds it lists.
ZERO_SIGN = "zero-sign"  # both zero, the sign differs (-0.0 against +0.0)
# both subnormal or zero in the dtype, not both zero, and not a flush (what mis-converting subnormals does)
SUBNORMAL = "subnormal"
# zero where the reference is a (non-zero) subnormal: what flushing subnormals to zero does
FLUSHED_SUBNORMAL = "flushed-subnormal"
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


# Subnormal numbers of each float type, as multiples of its smallest one
# (``Dtype.subnormal_unit`` and ``subnormal_steps``), smallest unit first:
# the order the adversarial generators give each type its turn in.
SUBNORMAL_UNIT = {record.name: record.subnormal_unit
                  for record in sorted(DTYPE_RECORDS, key=lambda record: record.subnormal_unit)}
SUBNORMAL_STEPS = {name: dtype_record(name).subnormal_steps for name in SUBNORMAL_UNIT}


def subnormal(dtype: str, multiple) -> np.ndarray | float:
    """``multiple`` (a signed integer, or an array of them) times ``dtype``'s
    smallest subnormal, as float64: subnormal in ``dtype`` for 0 < |multiple| <
    SUBNORMAL_STEPS[dtype]. In a narrower type it rounds to a zero of its sign
    or a smaller subnormal; in a wider one it is a normal number."""
    return np.asarray(multiple, dtype=np.float64) * SUBNORMAL_UNIT[dtype]


def is_subnormal(values, dtype: str):
    """Where ``values`` (an array of any namespace holding ``dtype``'s values) are subnormal in ``dtype``."""
    values = values if is_array_api_obj(values) else np.asarray(values)
    magnitude = array_namespace(values).abs(values)
    record = dtype_record(dtype)
    return (magnitude > 0) & (magnitude < record.subnormal_unit * record.subnormal_steps)


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
    """``dtype``'s largest finite value, as a float64."""
    return dtype_record(dtype).largest


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


def hostile_kinds() -> list[float]:
    """The special values every adversarial incoming gradient holds (docs/SPEC.md §1.5), but the
    subnormals: -0.0, +0.0, NaN, ±inf and ± the largest finite value of every float type."""
    return [-0.0, 0.0, np.nan, np.inf, -np.inf] + [sign * largest_finite(dtype) for dtype in SUBNORMAL_UNIT
                                                   for sign in (1.0, -1.0)]


def _holds(values: np.ndarray, kind: float) -> bool:
    if np.isnan(kind):
        return bool(np.isnan(values).any())
    return bool(((values == kind) & (np.signbit(values) == np.signbit(kind))).any())


def with_hostile_values(values, rng) -> np.ndarray:
    """``values`` (an operator's adversarial incoming gradient, float64) holding every hostile
    kind (``hostile_kinds``, and a subnormal of every float type) where it has room: each kind it
    lacks is put in place of one of its ordinary values (finite, a normal number in every float
    type), at random, while at least half of the values stay ordinary. The harness applies it to
    every operator's ``Gradient.generate`` (impls/training.py), so an operator whose generator
    draws normal values only is checked with them too; one that places its own (the index
    operators' ``gradient_values(special=True)``, maxpool2d's colliding windows) gets only what it
    lacks, and one with all of them is returned unchanged."""
    values = np.array(values, dtype=np.float64)
    flat = values.reshape(-1)
    missing = [kind for kind in hostile_kinds() if not _holds(flat, kind)]
    for dtype in SUBNORMAL_UNIT:
        if not bool(is_subnormal(flat, dtype).any()):
            missing.append(float(subnormal(dtype, rng.choice([-1, 1]) * int(rng.integers(1, SUBNORMAL_STEPS[dtype])))))
    smallest_normal = SUBNORMAL_UNIT["float16"] * SUBNORMAL_STEPS["float16"]
    ordinary = np.flatnonzero(np.isfinite(flat) & (np.abs(flat) >= smallest_normal)
                              & (np.abs(flat) <= largest_finite("float16")))
    room = len(ordinary) - (flat.size + 1) // 2  # at least half of the values stay ordinary
    if not missing or room <= 0:
        return values
    chosen = rng.permutation(ordinary)[:min(room, len(missing))]
    flat[chosen] = rng.permutation(np.array(missing, dtype=np.float64))[:len(chosen)]
    return values


def round_to_dtype(array, dtype: str):
    """The float64 values an input takes once stored in ``dtype``.

    The oracle runs on these, so rounding of the inputs is never blamed on a
    strategy. A type numpy lacks (bfloat16) goes through torch; a torch
    tensor stays one, where it is (a judge's reference on a device).
    """
    if is_torch_array(array):
        import torch

        return array.to(getattr(torch, dtype)).to(torch.float64)
    if not dtype_record(dtype).in_numpy:
        import torch

        return torch.from_numpy(np.ascontiguousarray(array)).to(getattr(torch, dtype)).to(torch.float64).numpy()
    if not isinstance(array, np.ndarray) or array.size <= CHUNK_ELEMENTS or not array.flags.c_contiguous:
        with np.errstate(over="ignore"):  # a value past the dtype's range is stored as ±inf: that is the input
            return np.asarray(array).astype(dtype).astype(np.float64)
    rounded = np.empty(array.shape, dtype=np.float64)

    def round_piece(out_piece, in_piece):
        with np.errstate(over="ignore"):  # a value past the dtype's range is stored as ±inf: that is the input
            out_piece[...] = in_piece.astype(dtype)

    over_chunks(round_piece, rounded, array)  # a GPU case's inputs: seconds, not tens of seconds
    return rounded


# ------------------------------------------------------------ namespace primitives
# What the rules below need beyond the array API, one branch per library:
# numpy (the host) and torch (any device). Everything else is the namespace's.
def is_array(value) -> bool:
    """Whether ``value`` is an array of a namespace the judge reads (numpy, torch)."""
    return is_array_api_obj(value)


def shape_of(value) -> tuple | None:
    """An array's shape as a tuple of ints (a torch.Size reads as one too), or None."""
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(shape)


def public_call(torch_prepare, numpy_prepare, inputs: dict, params: dict):
    """A public entry point's result: ``torch_prepare``'s strategy, prepared
    and called once, when the first input is a torch tensor, else
    ``numpy_prepare``'s."""
    prepare = torch_prepare if hasattr(next(iter(inputs.values())), "detach") else numpy_prepare
    return prepare(inputs, params)()


def dtype_name(array) -> str:
    """An array's dtype as numpy names it ("float32", "int64", "bfloat16")."""
    return str(array.dtype).removeprefix("torch.")


def storage_dtype_name(array, expected: str) -> str:
    """The dtype a strategy made ``array`` in: a numpy array holding a type
    numpy lacks (bfloat16, widened to float32 by ``to_numpy``) is named as that type."""
    name = dtype_name(array)
    record = dtype_record(expected) if expected in DTYPES else None
    if is_numpy_array(array) and record is not None and not record.in_numpy and name == record.host:
        return expected
    return name


def storage_dtype(xp, dtype: str):
    """The namespace's type holding ``dtype``'s values: the type itself, or
    on numpy its ``Dtype.host`` (float32 for bfloat16)."""
    if is_numpy_namespace(xp):
        return np.dtype(dtype_record(dtype).host)
    import torch

    return getattr(torch, dtype)


def array_device(array):
    """Where an array lives (what ``xp.zeros(..., device=)`` takes)."""
    return array_api_device(array)


def float64_zeros(xp, shape, like):
    """float64 zeros of ``shape`` where ``like`` lives: an oracle's output."""
    return xp.zeros(tuple(shape), dtype=xp.float64, device=array_device(like))


def bits(array):
    """The array's bits as integers of its width (a view)."""
    if is_torch_array(array):
        import torch

        return array.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[array.element_size()])
    return array.view(f"u{array.dtype.itemsize}")


def assign_where(target, mask, source) -> None:
    """``target`` takes ``source`` (an array or a number) where ``mask`` holds, in place."""
    if is_torch_array(target):
        import torch

        target.copy_(torch.where(mask, source, target))
    else:
        np.copyto(target, source, where=mask)


def host_scalar(array, where: tuple):
    """One element as numpy holds it (a type numpy lacks widened to its
    ``Dtype.host``, as ``to_numpy`` does), for ``plain``: a message reads
    the same whichever namespace judged."""
    if is_torch_array(array):
        return to_numpy(array[where])[()]
    return array[where]


def first_true(mask) -> tuple:
    """Where a boolean array's first True is, in C order (argmax takes the first maximum)."""
    xp = array_namespace(mask)
    flat = int(xp.argmax(xp.astype(xp.reshape(mask, (-1,)), xp.uint8)))
    return tuple(int(i) for i in np.unravel_index(flat, shape_of(mask)))


def count(mask) -> int:
    """How many elements of a boolean array hold."""
    xp = array_namespace(mask)
    return int(xp.sum(xp.astype(mask, xp.int64)))


def any_of(mask) -> bool:
    """Whether any element of a boolean array holds (a Python bool, brought back from a device)."""
    return bool(array_namespace(mask).any(mask))


def all_of(mask) -> bool:
    """Whether every element of a boolean array holds."""
    return bool(array_namespace(mask).all(mask))


def on_device(output: Any, device: str) -> Any:
    """A strategy's output (array, tensor, or tuple of them) as torch tensors
    on ``device``, to be judged where its reference is: a tensor as it is
    (moved when it is elsewhere), another backend's array through DLPack,
    without a trip through the host where the library allows; what torch
    cannot hold (an object array) stays as numpy makes it, for the compare
    to refuse."""
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


# ------------------------------------------------------------ the compares
def plain(value) -> str:
    """A number as a message shows it: whole (the shortest text that reads
    back as the same value in its own dtype) and plain (``nan``, ``-0.0``,
    ``3``; never numpy's ``np.float64(nan)``)."""
    if isinstance(value, np.generic) and (value.dtype.kind in "iub" or value.dtype.itemsize < 4):
        return str(value.item())  # float16's own shortest text is "6.55e+04" for 65504
    return str(value)


def first_difference(out, ref, differs) -> str:
    """The first True of ``differs`` in C order, with both elements."""
    where = first_true(differs)
    return f"first difference at {where}: got {plain(host_scalar(out, where))}, expected {plain(host_scalar(ref, where))}"


def check_shape_dtype(name: str, out, ref, dtype: str) -> Verdict | None:
    if not is_array(out):
        return Verdict(status.MISMATCH, f"{name}: expected an array, got {type(out).__name__}",
                       differences=frozenset({SHAPE}))
    if shape_of(out) != shape_of(ref):
        return Verdict(status.MISMATCH, f"{name}: shape {shape_of(out)}, expected {shape_of(ref)}",
                       differences=frozenset({SHAPE}))
    got = storage_dtype_name(out, dtype)
    if got != dtype:
        return Verdict(status.MISMATCH, f"{name}: dtype {got}, expected {dtype}",
                       differences=frozenset({DTYPE_DIFFERENCE}))
    return None


def _signed(value) -> str:
    return f"{float(value):+}"


def merge_verdicts(*verdicts: Verdict) -> Verdict:
    """One verdict for an output of several parts (maxpool2d's values and
    indices): ok when all are, else a mismatch naming every part's problem."""
    bad = [v for v in verdicts if v.status != status.OK]
    if not bad:
        return Verdict(status.OK)
    if len(bad) == 1:
        return bad[0]
    return Verdict(status.MISMATCH, "; ".join(v.message for v in bad),
                   max_abs_err=max(v.max_abs_err for v in bad), rel_err=float("nan"),
                   differences=frozenset().union(*(v.differences for v in bad)))


def compare_bitwise(name: str, out, ref64, dtype: str, *, signed_zeros: bool = True) -> Verdict:
    """Exact comparison for operators that only move values (docs/SPEC.md §1.1, 1.2).

    The float64 oracle is cast to ``dtype`` (exact: its values are inputs) and
    compared bit for bit; any NaN matches any NaN, since which NaN payload a
    library propagates is not part of any contract. ``signed_zeros=False``: -0.0
    matches +0.0 (``compare_gradient_bitwise``, the one caller).
    """
    bad = check_shape_dtype(name, out, ref64, dtype)
    if bad:
        return bad
    xp = array_namespace(out, ref64)
    target = storage_dtype(xp, dtype)

    def chunk_differs(out_chunk, ref_chunk) -> bool:
        return any_of(bits(xp.astype(out_chunk, target, copy=False)) != bits(xp.astype(ref_chunk, target)))

    if not any(over_chunks(chunk_differs, out, ref64)):  # the usual answer: no NaN masks to build
        return Verdict(status.OK)
    ref = xp.astype(ref64, target)
    out = xp.astype(out, target, copy=False)
    differs = bits(out) != bits(ref)
    differs &= ~(xp.isnan(out) & xp.isnan(ref))
    if not signed_zeros:
        differs &= ~((out == 0) & (ref == 0))
    if not any_of(differs):
        return Verdict(status.OK)
    # -0.0 == +0.0 numerically: a difference between two zeros is one of sign only.
    zero_sign = differs & (out == 0) & (ref == 0)
    other = differs & ~zero_sign
    tiny = other & _subnormal_or_zero(out, dtype) & _subnormal_or_zero(ref, dtype)
    flushed = tiny & (out == 0)  # ref is then a non-zero subnormal: two zeros do not differ here
    kinds = frozenset(kind for kind, mask in ((ZERO_SIGN, zero_sign), (FLUSHED_SUBNORMAL, flushed),
                                              (SUBNORMAL, tiny & ~flushed), (VALUE, other & ~tiny))
                      if any_of(mask))
    if not any_of(other):
        where = first_true(zero_sign)
        zeros = count(zero_sign)
        return Verdict(status.MISMATCH, f"{name}: sign of zero differs at {where} (got "
                       f"{_signed(host_scalar(out, where))}, expected {_signed(host_scalar(ref, where))}); "
                       f"{zeros} element{'s' if zeros > 1 else ''} in all",
                       max_abs_err=0.0, rel_err=float("nan"), differences=kinds)
    finite = xp.isfinite(out) & xp.isfinite(ref)
    # in float64: two of the dtype's largest finite values of opposite sign (a hostile gradient's) overflow it
    err = (float(xp.max(xp.abs(xp.astype(out[finite], xp.float64) - xp.astype(ref[finite], xp.float64))))
           if any_of(finite) else float("inf"))
    signs = f" ({count(zero_sign)} of them only in the sign of zero)" if any_of(zero_sign) else ""
    return Verdict(status.MISMATCH, f"{name}: {count(differs)} elements differ{signs}; "
                   + first_difference(out, ref, other), max_abs_err=err, rel_err=float("nan"),
                   differences=kinds)


def compare_gradient_bitwise(name: str, out, ref64, dtype: str) -> Verdict:
    """docs/SPEC.md §1.5's bitwise for a gradient (the index operators' backward, a
    scatter or a gather): the value's bits, except the sign of a zero. A
    backward that scatters by adding into zeros (autograd's) turns an incoming
    -0.0 into +0.0, and that is allowed; a flushed subnormal, a changed NaN
    into a number or anything else is a difference as in ``compare_bitwise``."""
    return compare_bitwise(name, out, ref64, dtype, signed_zeros=False)


def _subnormal_or_zero(values, dtype: str):
    xp = array_namespace(values)
    return (values == 0) | is_subnormal(xp.astype(values, xp.float64), dtype)


def compare_relative(name: str, out, ref, dtype: str) -> Verdict:
    """docs/SPEC.md §1.3: ‖out − ref‖ / ‖ref‖ against the dtype's bound.

    The norms are sums of squares in float64, added in pairs in a fixed tree
    (``tree_sum``), so the figures are the same bits whichever namespace, device
    or thread count computes them."""
    bad = check_shape_dtype(name, out, ref, dtype)
    if bad:
        return bad
    xp = array_namespace(out, ref)

    def finite_and_largest(out_chunk, ref_chunk):
        return all_of(xp.isfinite(out_chunk)), float(xp.max(xp.abs(ref_chunk)))

    firsts = over_chunks(finite_and_largest, out, ref)
    if not all(finite for finite, _ in firsts):
        out64 = xp.astype(out, xp.float64)
        differs = ~xp.isfinite(out64)
        return Verdict(status.MISMATCH, f"{name}: {count(differs)} non-finite elements; "
                       + first_difference(out64, ref, differs), max_abs_err=float("inf"),
                       rel_err=float("inf"), differences=frozenset({NON_FINITE}))
    # Norms of values near float64's largest (a subnormal float64 mask's
    # quotients) would overflow when squared: both taken in units of a power
    # of two near the largest reference value, which changes no ratio.
    # np.max, not max(): a NaN in the reference carries through whichever piece holds it
    largest = float(np.max([chunk_largest for _, chunk_largest in firsts])) if firsts else 0.0
    unit = math.ldexp(1.0, math.frexp(largest)[1] - 1) if math.isfinite(largest) and largest > 0 else 1.0

    def squares_and_worst(out_chunk, ref_chunk):
        scaled_ref = ref_chunk / unit
        diff = xp.astype(out_chunk, xp.float64) - ref_chunk
        scaled_diff = diff / unit
        return (tree_sum(scaled_ref * scaled_ref), tree_sum(scaled_diff * scaled_diff),
                float(xp.max(xp.abs(diff))))

    sums = over_chunks(squares_and_worst, out, ref)
    ref_norm = math.sqrt(tree_sum(np.array([ref_part for ref_part, _, _ in sums], dtype=np.float64)))
    diff_norm = math.sqrt(tree_sum(np.array([diff_part for _, diff_part, _ in sums], dtype=np.float64)))
    rel_err = diff_norm / ref_norm if ref_norm > 0 else diff_norm * unit
    max_abs_err = float(np.max([worst for _, _, worst in sums])) if sums else 0.0
    record = dtype_record(dtype)
    if rel_err <= record.rel_tol:
        return Verdict(status.OK, max_abs_err=max_abs_err, rel_err=rel_err)
    out64 = xp.astype(out, xp.float64)
    worst = xp.abs(out64 - ref) == max_abs_err
    if not any_of(worst):  # no largest difference to name: a NaN in the reference
        worst = xp.isnan(out64 - ref)
    detail = (f"relative error {rel_err:.3g} over the {dtype} bound {record.rel_tol:g}; "
              + first_difference(out64, ref, worst))
    verdict = status.INEXACT if rel_err <= record.wrong_rel_err else status.MISMATCH
    return Verdict(verdict, f"{name}: {detail}", max_abs_err=max_abs_err, rel_err=rel_err)


def tree_sum(values) -> float:
    """The sum of a 1-D float64 array, added in pairs: element i with i + p/2
    of the array zero-padded to the power of two p, halving until one is
    left. Elementwise additions round alike in every namespace and on every
    device, so the sum is the same bits wherever it is taken (a library's own
    sum or dot adds in an order of its own). NaN and ±inf carry through."""
    xp = array_namespace(values)
    n = int(values.shape[0])
    if n == 0:
        return 0.0
    size = 1 << (n - 1).bit_length()
    if size != n:
        values = xp.concat([values, xp.zeros(size - n, dtype=values.dtype, device=array_device(values))])
    while size > 1:
        size //= 2
        values = values[:size] + values[size:]
    return float(values[0])


# A compare walks its arrays in pieces of this many elements (a power of two,
# ``tree_sum``'s pieces), numpy's shared out over the machine's cores: at a
# GPU sweep's sizes (half a billion elements) one whole-array pass per step
# took 20 s a judgement, in float64 temporaries of 4 GB each; pieces stay in
# cache and need no such temporaries. A device's pieces run one after another
# (the device is parallel itself), with no temporary the size of the case.
CHUNK_ELEMENTS = 1 << 20


def compare_threads() -> int:
    """The threads a compare uses: the cores this process may run on (a
    compare runs between timed calls, never during them)."""
    return max(1, min(16, len(os.sched_getaffinity(0))))


def over_chunks(fn, out, ref) -> list:
    """``fn(out_piece, ref_piece)`` over the two same-shaped arrays taken flat in C
    order (a copy only for an output not C-contiguous), piece by piece: on
    ``compare_threads`` threads when numpy's arrays make more than one piece
    (numpy lets go of the GIL), in turn for another namespace's."""
    xp = array_namespace(out, ref)
    flat_out, flat_ref = xp.reshape(out, (-1,)), xp.reshape(ref, (-1,))
    size = int(flat_ref.shape[0])
    starts = range(0, size, CHUNK_ELEMENTS)
    if len(starts) <= 1:
        return [fn(flat_out, flat_ref)] if size else []

    def piece(start: int):
        return fn(flat_out[start:start + CHUNK_ELEMENTS], flat_ref[start:start + CHUNK_ELEMENTS])

    if not is_numpy_namespace(xp):
        return [piece(start) for start in starts]
    with ThreadPoolExecutor(max_workers=compare_threads()) as pool:
        return list(pool.map(piece, starts))
