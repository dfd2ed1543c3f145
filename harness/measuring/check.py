"""Correctness: a strategy's output against the float64 oracle (docs/SPEC.md §1, 2).

The one path from a case to a verdict, used by ``check``, the sweep (before it
times a case) and the pytest-benchmark view: ``reference`` makes a case's
inputs (rounded to the dtype) and the oracle's answer; ``attempt`` converts
them to the strategy's backend and device, prepares the strategy (its setup
time is measured, ``prepare_case``), calls it and judges the output
(``judge``) of its first call and of a later one on the same inputs, and
checks that the inputs are as they were (``judge_again``: the sweep asks it
once more after timing); whatever the strategy raises becomes the case's
verdict (``failure_verdict``). ``check_plan`` lists what ``scatterbench check`` runs
for a config, ``adversarial_items`` what one strategy is held to per device and
dtype, and ``run_one_check`` runs one item of either.

Training modes (docs/SPEC.md §1.5, impls/training.py): a ``Reference`` made in
``backward`` or ``forward+backward`` also holds the case's incoming gradient
and the oracle's gradient of the differentiated input; ``prepare_case``
prepares the strategy's timed call in that mode (``training.prepare``),
``judge`` holds its output to ``training.compare``, and everything else
(the known-defect rule, call 1 against call 4, the inputs' snapshots, the
incoming gradient's among them) is the forward's. A strategy with no
backward is ``skipped`` in those modes with the reason. ``check`` also runs
``torch.autograd.gradcheck`` in float64 on a small case for each eager
torch strategy it checks in a training mode (``GradcheckItem``): what it
finds is printed, never judged (the float64 oracle is the judge).
"""

from __future__ import annotations

import math
import os
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from harness.base.plugins import project_path
from harness.measuring import memory, timing, work_counts
from impls.backends import (applied_layout, backend_of, float_dtypes, get_backend, layout_reorders, to_numpy,
                            torch_device)
from impls import training, tuning
from impls.common import DTYPE_DIFFERENCE, Verdict, on_device, round_to_dtype
from impls.registry import NotApplicable, Strategy, get_operator
from impls.status import (
    ERROR,
    INPUT_MODIFIED,
    MISMATCH,
    OK,
    SEVERITY,
    SKIPPED,
    TIMEOUT,
    UNREPEATABLE,
    UPSTREAM_DEFECT,
)

MODES = ("random", "adversarial")  # the input generator's modes (not the training modes, training.MODES)
FORWARD = training.FORWARD
BACKWARD = training.BACKWARD
# Phases of checking one case, as the sweep's progress display and phase_s name them.
PHASE_CHECK, PHASE_PREPARE = "check", "prepare/compile"
# What a strategy may raise that is a finding about it, not a crash of the suite:
# CaseTimeout is a BaseException (libraries catching Exception must not swallow
# it), and a strategy calling sys.exit is an error like any other. Ctrl-C and
# the sweep's own Interrupted are not in this list: they stop the run.
STRATEGY_FAULTS = (Exception, SystemExit, timing.CaseTimeout)
# The call judged after the first, on the same prepared inputs: state kept
# between calls (an accumulator zeroed once in prepare) shows by then, as 4x the
# answer, and the three calls cost little on the check's small cases. The sweep
# judges a timed case's call 1 and the last of its timed samples (which
# follow many calls); a case it counts or does not time, call 2
# (SWEEP_REPEAT_CALL): a call and a judgement of a big case can take seconds.
REPEAT_CALL = 4
SWEEP_REPEAT_CALL = 2
# The check's rules that came after runs were stored (a run published beside
# newer ones is named with the rules it predates), and the result schema of
# the first runs all held to them: each call judged (call 1, REPEAT_CALL, the
# call after timing) with its inputs compared, and subnormal values in the
# adversarial sets, both landed while runs were written as schema 4 (commits
# 11520f7 and 3bf2645), so a schema 4 run may predate them; every schema 5 run
# was held to them.
LATER_RULES = ("judged on their first call only (not on a later call, nor after their timing), without a check that "
               "they left their inputs alone", "checked without subnormal values in the adversarial sets")
LATER_RULES_SCHEMA = 5


def rules_predated(schema_written: int | None) -> tuple[str, bool]:
    """Of a run written as ``schema_written``: the check's rules it predates,
    as one phrase ("" for none), and whether that is certain (a run written
    as the schema they landed in may have been held to them)."""
    if not isinstance(schema_written, int) or schema_written >= LATER_RULES_SCHEMA:
        return "", True
    return ", and ".join(LATER_RULES), schema_written < LATER_RULES_SCHEMA - 1


# Where a case is judged (SCATTERBENCH_JUDGE): "auto", a case on a device
# other than the CPU where its arrays are (the operator's one oracle and
# compare, written over the array namespace, run on torch float64 tensors
# there: a CUDA case's reference and judgement stay on the GPU, and only the
# verdict comes back), a CPU case by numpy on the host; "numpy", every case on
# the host; "device", CPU cases too with torch on CPU tensors (the tests'
# rehearsal of the device path).
JUDGE_ENV = "SCATTERBENCH_JUDGE"
JUDGES = ("auto", "numpy", "device")


def judge_device(device: str, op) -> str | None:
    """The torch device a case of ``op`` on ``device`` is judged on, or None:
    by numpy on the host (also for an operator whose oracles and compares
    take numpy arrays only, ``Operator.any_namespace`` False: a plugin's)."""
    choice = os.environ.get(JUDGE_ENV) or "auto"
    if choice not in JUDGES:
        raise ValueError(f"{JUDGE_ENV}={choice!r}: expected one of {', '.join(JUDGES)}")
    if choice == "numpy" or not op.any_namespace:
        return None
    if device == "cpu" and choice == "auto":
        return None
    return device if torch_device(device) else None  # a plugin backend's own device: numpy judges it


def device_tensors(arrays: dict, device: str) -> dict:
    """The reference's numpy inputs as torch tensors on ``device`` (float64 and int64 as they are)."""
    import torch

    return {key: torch.as_tensor(np.ascontiguousarray(value), device=device) if isinstance(value, np.ndarray)
            else value for key, value in arrays.items()}


@dataclass(frozen=True)
class Reference:
    inputs: dict  # float64 numpy, holding exactly the values the dtype can store
    expected: object  # the oracle's output (torch tensors on ``judged_on`` when it is set)
    mode: str = ""  # the generator mode the inputs were drawn in
    params: dict = field(default_factory=dict)  # the case's parameters (the compare may need them)
    training: str = FORWARD  # the training mode (docs/SPEC.md §1.5) the case is run and judged in
    grad: Any = None  # training modes: the incoming gradient, float64 holding what the dtype stores
    expected_grad: Any = None  # training modes: the oracle's gradient of the differentiated input
    # The torch device the oracles were computed on and the case is judged on
    # (``judge_device``), with the inputs and the incoming gradient there as
    # tensors; None: numpy on the host.
    judged_on: str | None = None
    device_inputs: dict | None = None
    device_grad: Any = None


def reference(op_name: str, params: dict, dtype: str, mode: str, seed: int, training_mode: str = FORWARD,
              reuse: Reference | None = None, device: str = "cpu") -> Reference:
    """A case's inputs drawn in the generator's ``mode`` and rounded to
    ``dtype``, the oracle's output and, in a training mode, the incoming
    gradient (drawn in the same generator mode) and the oracle's gradient;
    the oracles computed where the case on ``device`` is judged
    (``judge_device``): on the device, in torch float64, or by numpy.

    ``reuse``: the reference of the same case (operator, params, dtype, mode,
    seed, device) in another training mode. Its inputs, forward oracle and gradient
    are this one's too (none depends on the training mode), so only what it
    lacks is computed: at a real network's size the float64 oracle takes
    seconds to tens of seconds, and a sweep in three modes paid it three times."""
    training.check_mode(training_mode)
    op = get_operator(op_name)
    on = judge_device(device, op)
    if reuse is None:
        raw = op.generate(params, mode, seed)
        inputs = {key: round_to_dtype(value, dtype) if getattr(value, "dtype", None) is not None
                  and value.dtype.kind == "f" else value for key, value in raw.items()}
        if on is None:
            with work_counts.timed(work_counts.ORACLE_RUNS):
                expected = op.oracle(inputs, params)
            reuse = Reference(inputs, expected, mode, dict(params))
        else:
            tensors = device_tensors(inputs, on)
            with work_counts.timed(work_counts.ORACLE_RUNS):
                expected = op.oracle(tensors, params)
            reuse = Reference(inputs, expected, mode, dict(params), judged_on=on, device_inputs=tensors)
    elif reuse.mode != mode or reuse.params != dict(params) or reuse.judged_on != on:
        raise ValueError(f"reuse: a reference of {reuse.mode} inputs at {reuse.params} judged on "
                         f"{reuse.judged_on or 'the host'}, not {mode} at {params} on {on or 'the host'}")
    ref = replace(reuse, training=training_mode)
    if training_mode == FORWARD or op.gradient is None:
        # without a gradient training.prepare skips every strategy
        return replace(ref, grad=None, expected_grad=None, device_grad=None)
    if ref.grad is not None:
        return ref
    if on is None:
        def counted_oracle(inputs, grad, params):
            with work_counts.timed(work_counts.ORACLE_RUNS):
                return op.gradient.oracle(inputs, grad, params)

        grad, expected_grad = training.gradient_case(op, ref.inputs, params, mode, seed, dtype, oracle=counted_oracle)
        return replace(ref, grad=grad, expected_grad=expected_grad)
    on_device = {}

    def oracle_on_device(inputs, grad, params):
        on_device["grad"] = device_tensors({"grad": grad}, on)["grad"]
        with work_counts.timed(work_counts.ORACLE_RUNS):
            return op.gradient.oracle(ref.device_inputs, on_device["grad"], params)

    grad, expected_grad = training.gradient_case(op, ref.inputs, params, mode, seed, dtype, oracle=oracle_on_device)
    return replace(ref, grad=grad, expected_grad=expected_grad, device_grad=on_device["grad"])


# The check's references, newest last: its items ask for the same case once
# per strategy, layout and training mode, and each gets the one computed
# first (the oracle once per case, for the whole check). Kept while those
# judged on the host hold at most HOST_REFERENCE_BYTES together, and those
# judged on a device at most DEVICE_REFERENCE_BYTES of its memory (the
# strategies' memory): the oldest freed before a new one is made there, and
# the newest always kept. The adversarial cases are kilobytes, so every
# strategy shares them; a config point near check.max_bytes is freed before
# the next one.
HOST_REFERENCE_BYTES = 1 << 30
DEVICE_REFERENCE_BYTES = 256 << 20
_REFERENCES: "OrderedDict[tuple, Reference]" = OrderedDict()


def cached_reference(op_name: str, params: dict, dtype: str, mode: str, seed: int,
                     training_mode: str = FORWARD, device: str = "cpu") -> Reference:
    """``reference``, made once per case (operator, params, dtype, input
    mode, seed, where it is judged) for every training mode: another mode
    reuses it, adding only the gradient it lacks."""
    op = get_operator(op_name)
    on = judge_device(device, op)
    # The operator itself is part of the case: one registered again under its name (a notebook cell
    # run again, a plugin reloaded) draws and judges anew, never from the old one's references.
    key = (op_name, tuple(sorted(params.items())), dtype, mode, seed, id(op), on)
    kept = _REFERENCES.pop(key, None)
    if kept is None:
        needed = memory.reference_bytes(op, params, training_mode)
        limit = HOST_REFERENCE_BYTES if on is None else DEVICE_REFERENCE_BYTES
        for other in [other for other in _REFERENCES if (other[-1] is None) == (on is None)]:
            if _reference_bytes(on_device=on is not None) + needed <= limit:
                break
            del _REFERENCES[other]  # freed before this one is made
            _REFERENCE_BYTES.pop(other, None)
    ref = reference(op_name, params, dtype, mode, seed, training_mode, reuse=kept, device=device)
    _REFERENCES[key] = ref if ref.grad is not None or kept is None else kept  # the one holding most
    if _REFERENCES[key] is not kept:  # reckoned when made or grown by a gradient, not on every reuse
        _REFERENCE_BYTES[key] = memory.reference_bytes(op, params, _REFERENCES[key].training)
    return ref


# What each kept reference holds, reckoned when it is kept: its operator may be gone since.
_REFERENCE_BYTES: dict[tuple, int] = {}


def _reference_bytes(on_device: bool) -> int:
    """What the kept references judged on a device (else on the host) hold there."""
    return sum(_REFERENCE_BYTES.get(key, 0) for key in _REFERENCES if (key[-1] is not None) == on_device)


def clear_references() -> None:
    """Frees every reference the check keeps (a device's memory included)."""
    _REFERENCES.clear()
    _REFERENCE_BYTES.clear()


def strategy_file(strat: Strategy | None) -> str | None:
    """The file that defines ``strat``'s prepare function (a plugin's own file)."""
    code = getattr(getattr(strat, "prepare", None), "__code__", None)
    return code.co_filename if code else None


def describe_error(error: BaseException, strat: Strategy | None = None) -> str:
    """One line: the exception and where it was raised: the innermost frame
    in the strategy's own file (a plugin's line, not the harness's call of
    it), else the innermost frame of ours."""
    frames = traceback.extract_tb(error.__traceback__)
    own = strategy_file(strat)
    chosen = next((frame for frame in reversed(frames) if own and frame.filename == own), None) \
        or next((frame for frame in reversed(frames)
                 if "/impls/" in frame.filename or "/harness/" in frame.filename), None)
    where = f" (at {project_path(chosen.filename)}:{chosen.lineno})" if chosen else ""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {text}{where}"


def failure_verdict(error: BaseException, strat: Strategy, device: str) -> Verdict:
    """What one of ``STRATEGY_FAULTS`` makes of its case: ``skipped`` when the
    strategy declared it not applicable, ``timeout`` past the case's time
    limit, ``error`` otherwise (out of memory said so, the device's cache
    released), with the strategy's own file and line."""
    if isinstance(error, NotApplicable):
        return Verdict(SKIPPED, str(error))
    if isinstance(error, timing.CaseTimeout):
        return Verdict(TIMEOUT, str(error))
    if isinstance(error, SystemExit):
        return Verdict(ERROR, f"the strategy called sys.exit({error.code!r})")
    backend = get_backend(strat.backend)
    if backend.is_oom(error):
        backend.release_memory(device)
        text = str(error).splitlines()[0] if str(error) else ""
        return Verdict(ERROR, "out of memory" + (f": {text}" if text else " (host)"))
    return Verdict(ERROR, describe_error(error, strat))


@dataclass(frozen=True)
class Snapshot:
    """What an input held: a C-order copy of it (read back through its
    backend's ``to_numpy``), or why it could no longer be read (a donated or
    deleted buffer). A copy and one bitwise compare cost about half of
    hashing the same bytes (SHA-1: 4 s of a `make bench`). A torch tensor of
    a case judged on its device is copied there instead (``on_device``), and
    compared there: a GPU case's inputs never cross to the host."""
    copy: np.ndarray | None = None  # (``snapshot(copy=False)``: the input read in place, not copied)
    unreadable: str = ""
    on_device: Any = None  # a torch tensor's clone, where the case is judged on its device

    def same_as(self, other: "Snapshot") -> bool:
        """Bit for bit (NaN payloads and the sign of zero included), dtype and shape too."""
        if self.on_device is not None or other.on_device is not None:
            mine, theirs = self.on_device, other.on_device
            if mine is None or theirs is None or mine.dtype != theirs.dtype or mine.shape != theirs.shape:
                return False
            return bool((_tensor_bits(mine) == _tensor_bits(theirs)).all())
        if self.copy is None or other.copy is None:
            return self.copy is None and other.copy is None and self.unreadable == other.unreadable
        if self.copy.dtype != other.copy.dtype or self.copy.shape != other.copy.shape:
            return False
        return bool(np.array_equal(_bits(self.copy), _bits(other.copy)))


def _bits(array: np.ndarray) -> np.ndarray:
    """``array``'s bytes as unsigned integers of its item's width (one compare per element), in its
    own layout: a view, never a copy, where the width is an integer's (a strided input read in place)."""
    width = array.dtype.itemsize
    return array.view(f"u{width}") if width in (1, 2, 4, 8) else array.reshape(-1).view(np.uint8)


def _tensor_bits(tensor):
    """A tensor's elements as integers of their width (``_bits`` on the device)."""
    import torch

    if not tensor.is_floating_point():
        return tensor
    return tensor.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


def snapshot(value: Any, on_device: bool = False, copy: bool = True) -> Snapshot:
    """``Snapshot`` of one input; ``on_device``: a torch tensor is copied where it is. ``copy=False``:
    the input as it is now, read in place where its backend can (what a snapshot taken before is
    compared with: a second copy of each input, every round, was most of judging a round again)."""
    try:
        if on_device and backend_of(value) is not None and backend_of(value).name == "torch":
            return Snapshot(on_device=value.detach().clone() if copy else value.detach())
        now = to_numpy(value)
        return Snapshot(np.array(now, copy=True, order="C") if copy else np.asarray(now))
    except Exception as error:  # noqa: BLE001 - any failure to read it back is the finding
        text = str(error).strip()
        return Snapshot(unreadable=f"unreadable ({type(error).__name__}: {text.splitlines()[0] if text else ''})")


def snapshots(inputs: dict, on_device: bool = False) -> dict[str, Snapshot]:
    """``snapshot`` of every array input (what a backend owns, or numpy)."""
    return {key: snapshot(value, on_device) for key, value in inputs.items()
            if isinstance(value, np.ndarray) or backend_of(value) is not None}


@dataclass(frozen=True)
class Prepared:
    run: Callable[[], Any]  # the timed call
    setup_s: float  # conversion excluded; prepare (tables, kernels, compiles) included
    inputs: dict = field(default_factory=dict)  # what the strategy was prepared on, on its backend
    input_snapshots: dict = field(default_factory=dict)  # what they held before prepare

    def changed_inputs(self) -> str | None:
        """How the inputs differ from what they were before prepare, in one
        line naming each changed input; None when none did."""
        changed = []
        for key, before in self.input_snapshots.items():
            after = snapshot(self.inputs[key], before.on_device is not None, copy=False)
            if before.same_as(after):
                continue
            changed.append(f"left its input {key!r} {after.unreadable}" if after.unreadable
                           else f"overwrote its input {key!r}")
        return "; ".join(changed) or None


def prepare_case(strat: Strategy, ref: Reference, params: dict, dtype: str, device: str,
                 layout: str = "contiguous", watch_inputs: bool = True) -> Prepared:
    """The reference inputs on the strategy's backend and device (a copy of each
    kept), and the strategy prepared on them; in a training
    mode, the incoming gradient too, in the same layout (an input like the
    others: a backward must leave it alone), and the strategy's call in that
    mode (``training.prepare``: NotApplicable, so ``skipped``, for a strategy
    with no backward). A case layout the strategy does not take natively
    (``Strategy.handed_layout``) is handed to it contiguous, and its call starts by copying the
    case's arrays into what it was handed (``converting``). Raises what the strategy raises."""
    op = get_operator(strat.op)
    backend = get_backend(strat.backend)
    reason = training.applies(strat, ref.training, params)  # a window it was not written for; no backward
    if reason:
        raise NotApplicable(reason)
    # the inputs' layouts as Operator.to_backend's, and the training checks' own (training.TRANSPOSED)
    inputs = training.inputs_to_backend(op, ref.inputs, strat.backend, device, dtype, layout)
    native_grad, watched = None, dict(inputs)
    if ref.training != FORWARD:
        native_grad = training.gradient_to_backend(op, ref.grad, strat.backend, device, dtype, layout)
        watched[op.gradient.name] = native_grad
    handed = strat.handed_layout(layout)
    given, given_grad, conversions = inputs, native_grad, []
    if handed != layout:
        given, given_grad, conversions = _handed(op, ref, strat.backend, device, dtype, layout, handed, inputs,
                                                 native_grad)
        # What it was handed is watched too: each call's copy into it would hide a write into it.
        copies = {key: value for key, value in given.items() if value is not inputs[key]}
        if given_grad is not native_grad:
            copies[op.gradient.name] = given_grad
        watched.update({f"{key} as handed ({handed})": value for key, value in copies.items()})
    backend.synchronize(device)
    before = snapshots(watched, on_device=ref.judged_on is not None) if watch_inputs else {}
    start = time.perf_counter()
    if ref.training == FORWARD:
        run = strat.prepare(given, params)
    else:
        run = training.prepare(strat, given, given_grad, params, ref.training, handed, device)
    if conversions:
        run = converting(run, conversions, backend.copy_into)
    backend.synchronize(device)
    # A copy of the mapping: a strategy rebinding a key must not change what is compared.
    return Prepared(run, time.perf_counter() - start, watched, before)


def _handed(op, ref: Reference, backend: str, device: str, dtype: str, layout: str, handed: str, inputs: dict,
            grad: Any) -> tuple[dict, Any, list[tuple[Any, Any]]]:
    """What a strategy taking ``handed`` natively is given in a case held in ``layout``: a copy in
    ``handed`` of each array the case's layout reorders (the others as they are), and the
    conversions its timed call starts with, (what it was handed, the case's array) for each array
    that call reads: the reordered inputs forward, the incoming gradient in the training modes (in
    backward, the forward's inputs were read once, to make what the backward replays)."""
    relaid = training.inputs_to_backend(op, ref.inputs, backend, device, dtype, handed)
    reordered = [key for key in op.layout_keys if key in inputs and layout_reorders(tuple(inputs[key].shape), layout)]
    given = {**inputs, **{key: relaid[key] for key in reordered}}
    conversions = [] if ref.training == BACKWARD else [(given[key], inputs[key]) for key in reordered]
    given_grad = grad
    if grad is not None and layout_reorders(tuple(grad.shape), layout):
        given_grad = training.gradient_to_backend(op, ref.grad, backend, device, dtype, handed)
        conversions.append((given_grad, grad))
    return given, given_grad, conversions


def converting(run: Callable[[], Any], conversions: list[tuple[Any, Any]],
               copy_into: Callable[[Any, Any], None]) -> Callable[[], Any]:
    """``run``, each call starting with the conversion from the case's layout to the one the strategy
    takes (``copy_into`` each case array into what it was handed): what a user holding the tensors
    in the case's layout pays before calling it, timed with the call. Into buffers made once, as a
    layer that keeps its converted activations would; a fresh ``.contiguous()`` would also allocate."""

    def call():
        for destination, source in conversions:
            copy_into(destination, source)
        return run()

    return call


def judge(strat: Strategy, output: Any, ref: Reference, dtype: str, device: str = "cpu",
          layout: str = "contiguous") -> Verdict:
    """A strategy's output against the oracle, by its operator's rule (in a
    training mode, ``training.compare``: the gradient, and in forward+backward
    the forward output too); a mismatch a listed upstream defect explains
    becomes ``upstream-defect``."""
    on = ref.judged_on
    if ref.training != FORWARD:
        inputs, grad = (ref.inputs, ref.grad) if on is None else (ref.device_inputs, ref.device_grad)
        verdict = training.compare(strat, output, ref.expected, ref.expected_grad, inputs, grad, dtype,
                                   ref.params, ref.training, device=on)
        return known_defect(strat, verdict, device=device, dtype=dtype, layout=layout, mode=ref.mode,
                            training_mode=ref.training)
    op = get_operator(strat.op)
    wrong = [name for name in float_dtypes(output) if name != dtype]
    if wrong:
        return Verdict(MISMATCH, f"{strat.op} output: dtype {wrong[0]}, expected {dtype}",
                       differences=frozenset({DTYPE_DIFFERENCE}))
    if on is None:
        verdict = op.compare(to_numpy(output), ref.expected, ref.inputs, dtype, strat, ref.params)
    else:
        verdict = op.compare(on_device(output, on), ref.expected, ref.device_inputs, dtype, strat, ref.params)
    return known_defect(strat, verdict, device=device, dtype=dtype, layout=layout, mode=ref.mode)


@dataclass(frozen=True)
class Attempt:
    """One strategy on one case, called, judged, and judged again."""
    verdict: Verdict
    prepared: Prepared | None = None  # None when prepare or the first call failed
    setup_s: float = math.nan
    peak_mem_bytes: float = math.nan
    first_call_s: float = 0.0  # how long call 1 took (0.0: not made): a warm-up already done


def attempt(strat: Strategy, ref: Reference, dtype: str, device: str, layout: str = "contiguous", *,
            peak: bool = False, on_phase: Callable[[str], None] = lambda phase: None,
            repeat_call: int = REPEAT_CALL) -> Attempt:
    """Prepares ``strat`` on the reference inputs, calls it once (measuring
    its peak memory when ``peak``) and judges the output, then calls it until
    its ``repeat_call``-th call and judges that one and the inputs
    (``judge_again``; ``repeat_call=1``: not here, the caller does it later). Never raises for a strategy's fault
    (``STRATEGY_FAULTS``); Ctrl-C and the caller's own interruptions do
    propagate. The one path of ``check`` and of the sweep."""
    setup_s = math.nan
    try:
        on_phase(PHASE_PREPARE)
        prepared = prepare_case(strat, ref, ref.params, dtype, device, layout)
        setup_s = prepared.setup_s
        on_phase(PHASE_CHECK)
        start = time.perf_counter()
        if peak:
            output, peak_bytes = memory.call_with_peak(prepared.run, get_backend(strat.backend), device)
        else:
            output, peak_bytes = prepared.run(), math.nan
        first_call_s = time.perf_counter() - start
        work_counts.add(work_counts.CALLS, first_call_s)
        verdict = judge(strat, output, ref, dtype, device, layout)
        del output  # the later calls allocate theirs as the timed ones do
        if repeat_call > 1:  # 1: the caller judges a later call itself (the sweep, after timing)
            verdict = judge_again(strat, prepared, ref, dtype, device, layout, verdict, calls=repeat_call - 1,
                                  which=f"call {repeat_call}")
    except STRATEGY_FAULTS as error:
        return Attempt(failure_verdict(error, strat, device), setup_s=setup_s)
    return Attempt(verdict, prepared, setup_s, peak_bytes, first_call_s)


_CALL_IT = object()


def judge_again(strat: Strategy, prepared: Prepared, ref: Reference, dtype: str, device: str,
                layout: str, first: Verdict, *, calls: int, which: str, output: Any = _CALL_IT) -> Verdict:
    """The verdict on ``prepared`` once it has been called ``calls`` more
    times on the same inputs (``which`` names the last of them in messages),
    given ``first``, the verdict on its first call; ``output``: that last
    call's output where the caller made the calls (the sweep's last timed
    sample; ``calls`` is then 0). Its inputs changed since
    prepare: ``input-modified``, naming them (the likelier cause of any wrong
    answer). The last call wrong where the first was not: ``unrepeatable``.
    A later call raising: its ``failure_verdict``, saying which call.
    Otherwise the worse of the two verdicts. A first call already wrong is
    not called again (its inputs are still compared). Raises only a timeout
    that fires while the inputs are read back."""
    later, raised, last = None, None, "call 1"
    if first.status != MISMATCH:
        last = which
        try:
            if output is _CALL_IT:
                output = None
                for _ in range(calls):
                    output = None  # dropped before the next call, as the timer drops it
                    with work_counts.timed(work_counts.CALLS):
                        output = prepared.run()
            later = judge(strat, output, ref, dtype, device, layout)
            del output
        except STRATEGY_FAULTS as error:
            raised = error
    changed = prepared.changed_inputs()
    if changed:
        return Verdict(INPUT_MODIFIED, f"{changed} (inputs differ after {last} from before prepare; a strategy "
                                       f"must leave its inputs alone)")
    if raised is not None:
        failed = failure_verdict(raised, strat, device)
        return replace(failed, message=f"{which} on the same inputs: {failed.message}")
    if later is None:
        return first
    if later.status == MISMATCH:
        was = "matched the oracle" if first.status == OK else f"was {first.status}"
        return replace(later, status=UNREPEATABLE,
                       message=f"call 1 {was}, {which} on the same inputs did not: {later.message}")
    return first if SEVERITY.index(first.status) <= SEVERITY.index(later.status) else later


def check_strategy(strat: Strategy, params: dict, dtype: str, device: str, ref: Reference,
                   layout: str = "contiguous") -> Verdict:
    """``attempt``'s verdict on ``strat`` at ``params`` on the reference inputs."""
    return attempt(strat, replace(ref, params=dict(params)), dtype, device, layout).verdict


def known_defect(strat: Strategy, verdict: Verdict, *, device: str, dtype: str, layout: str,
                 mode: str, training_mode: str = FORWARD) -> Verdict:
    """A mismatch that a listed upstream defect explains (impls/defects.py)
    becomes ``upstream-defect``: still reported, with the defect and the
    differences in its message, but not a failure (docs/SPEC.md §2). Anything else is
    returned unchanged."""
    from impls import defects

    if verdict.status != MISMATCH:
        return verdict
    versions = defects.installed_versions()
    defect = defects.match(strat, verdict, device=device, dtype=dtype, layout=layout, mode=mode,
                           versions=versions, training_mode=training_mode)
    if defect is None:
        return verdict
    return replace(verdict, status=UPSTREAM_DEFECT,
                   message=f"{verdict.message} — {defect.summary(versions.get(defect.library))}")


@dataclass(frozen=True)
class CheckItem:
    strategy: Strategy
    params: tuple
    dtype: str
    device: str
    mode: str
    layout: str
    skip: str = ""  # why the item is not run (a config point over check.max_bytes); "" runs it
    training: str = FORWARD  # the training mode (docs/SPEC.md §1.5); ``mode`` is the input generator's
    # True: not a check but torch.autograd.gradcheck in float64 (``run_gradcheck``), informational
    gradcheck: bool = False

    @property
    def label(self) -> str:
        import json

        from harness.base.format import params_label

        if self.gradcheck:
            where = "gradcheck float64"
        else:
            where = (f"config point{'' if self.layout == 'contiguous' else ' ' + self.layout}" if self.skip
                     else f"{self.mode}/{self.layout}")
            if self.training != FORWARD:
                where = f"{self.training} {where}"
        return f"{where} {params_label(json.dumps(dict(self.params)))}"


@lru_cache(maxsize=256)
def _layout_arrays(op_name: str, params_items: tuple) -> tuple:
    op = get_operator(op_name)
    inputs = op.generate(dict(params_items), "random", 0)
    return tuple(inputs[key] for key in op.layout_keys if isinstance(inputs.get(key), np.ndarray))


def layout_applies(op, params: dict, layout: str, backend: str) -> bool:
    """Whether ``layout`` changes any input of ``op`` at ``params`` on
    ``backend`` (``impls.backends.applied_layout``): channels-last on a
    one-channel or 2-D array would be a contiguous one under another name,
    and is not an item. The sweep times a layout by the same rule
    (``backends.layout_reorders``), on the operator's declared shapes."""
    if layout == "contiguous":
        return True
    arrays = _layout_arrays(op.name, tuple(sorted(params.items())))
    return any(applied_layout(array, layout, get_backend(backend)) == layout for array in arrays)


def layout_skipped(strat: Strategy, layout: str) -> str | None:
    """Why a timed case of ``strat`` in ``layout`` is skipped (None: it runs): its backend cannot be
    handed an array in that memory order (JAX's arrays have no strides), so nothing it computes
    would be a measurement of that layout."""
    offered = get_backend(strat.backend).layouts
    if layout in offered:
        return None
    return (f"not for this layout: {strat.backend} arrays cannot be held {layout} (it takes "
            f"{', '.join(offered)}); an NHWC array is another shape, which this strategy does not take")


def adversarial_set(op, strat) -> tuple[list[dict], tuple[str, ...]]:
    """The check cases and layouts a strategy is checked on. A strategy that
    compiles per shape (``quick_check``) gets the first two cases, contiguous and
    strided: each further shape would cost a compile, not add coverage."""
    cases, layouts = op.check_cases(), op.layouts(strat.backend)
    if strat.quick_check:
        return cases[:2], layouts[:2]
    return cases, layouts


def extra_set(op, strat, dtype: str) -> list[tuple[dict, str, str, str]]:
    """The operator's ``extra_checks`` a strategy runs when checked in ``dtype``:
    (params, dtype, mode, layout) tuples. A case whose inputs break a
    precondition the strategy declares (``requires``) is left out, and so is
    one not meant for compiled strategies; a case with its own dtypes runs in
    those the strategy has, whatever ``dtype`` is."""
    _, strategy_layouts = adversarial_set(op, strat)
    found = []
    for extra in op.extra_checks():
        if set(extra.get("violates", ())) & set(strat.requires):
            continue
        if strat.quick_check and not extra.get("compiled", True):
            continue
        dtypes = [d for d in (extra.get("dtypes") or (dtype,)) if d in strat.dtypes]
        layouts = [l for l in (extra.get("layouts") or strategy_layouts) if l in strategy_layouts
                   and layout_applies(op, extra["params"], l, strat.backend)]
        if strat.quick_check:
            layouts = layouts[:1]
        for this_dtype in dtypes:
            for mode in extra.get("modes", MODES):
                for layout in layouts:
                    found.append((extra["params"], this_dtype, mode, layout))
    return found


def adversarial_items(strat: Strategy, device: str, dtype: str, mode: str = FORWARD) -> list[CheckItem]:
    """What ``strat`` is held to on ``device`` in ``dtype`` and the training
    ``mode``, by ``check`` and before the sweep times it: the operator's
    small adversarial cases in both input modes and every layout its backend
    has (the incoming gradient in the same layout), then its extra checks
    (other input modes, other dtypes; kept out of those that break a
    precondition the strategy declares). In a training mode, also the
    adversarial cases in ``training.TRANSPOSED`` (one for a per-shape
    compiled strategy), and a strategy with no backward has the same items,
    each ``skipped`` with the reason."""
    training.check_mode(mode)
    op = get_operator(strat.op)
    check_cases, layouts = adversarial_set(op, strat)
    items = [CheckItem(strat, tuple(sorted(params.items())), dtype, device, input_mode, layout, training=mode)
             for params in check_cases for input_mode in MODES for layout in layouts
             if layout_applies(op, params, layout, strat.backend)]
    if mode != FORWARD:  # SPEC 1.5: the gradient and the saved positions transposed too (adversarial values)
        items += [CheckItem(strat, tuple(sorted(params.items())), dtype, device, "adversarial", training.TRANSPOSED,
                            training=mode)
                  for params in check_cases[:1 if strat.quick_check else None]
                  if training.transposed_applies(op, params, strat.backend)]
    items += [CheckItem(strat, tuple(sorted(params.items())), this_dtype, device, input_mode, layout,
                        training=mode)
              for params, this_dtype, input_mode, layout in extra_set(op, strat, dtype)]
    return items


def gradcheck_applies(strat: Strategy) -> bool:
    """Whether ``check`` runs ``torch.autograd.gradcheck`` on ``strat``: an
    eager torch strategy differentiated by autograd that computes in float64
    (a compiled one would compile a graph per perturbed call)."""
    return (strat.backend == "torch" and strat.differentiation == "autograd" and not strat.quick_check
            and not get_backend(strat.backend).compiles and "float64" in strat.dtypes
            and training.missing(strat) is None)


def gradcheck_item(strat: Strategy, device: str, mode: str) -> CheckItem:
    """The gradcheck of ``strat`` on ``device``: the operator's smallest check
    case (by ``float64_bytes``), random inputs (ties would make the
    finite differences straddle a kink), float64, contiguous."""
    op = get_operator(strat.op)
    params = min(op.check_cases(), key=lambda case: float64_bytes(op, case))
    return CheckItem(strat, tuple(sorted(params.items())), "float64", device, "random", "contiguous",
                     training=mode, gradcheck=True)


def float64_bytes(op, params: dict) -> int:
    """The bytes a case reads and writes with float64 values (its bytes
    formula at 8 bytes a value): what ``check.max_bytes`` bounds."""
    return op.bytes_moved(params, 8)


def check_plan(config, cases) -> list[CheckItem]:
    """Each selected strategy's ``adversarial_items`` per device, dtype and
    training mode (the cases' modes: config ``modes``), plus each config point
    that reads and writes at most ``check.max_bytes`` in float64
    (``float64_bytes``), in both input modes, its training mode and its layout; a point
    over it is one item that is not run, saying so (``skip``). An eager torch
    strategy checked in a training mode also gets one ``gradcheck_item`` per
    device."""
    items: list[CheckItem] = []
    seen, listed = set(), set()
    limit = config.check.max_bytes
    for case in cases:
        op = get_operator(case.op)
        strat = op.strategies[case.strategy]
        mode = getattr(case, "mode", FORWARD)
        key = (case.op, case.strategy, case.device, case.dtype, mode)
        if key not in seen:
            seen.add(key)
            # half-type extra cases come once, whatever dtypes the config has
            for item in adversarial_items(strat, case.device, case.dtype, mode):
                if item not in listed:
                    listed.add(item)
                    items.append(item)
            if mode != FORWARD and gradcheck_applies(strat) \
                    and (case.op, case.strategy, case.device, "gradcheck") not in seen:
                seen.add((case.op, case.strategy, case.device, "gradcheck"))
                items.append(gradcheck_item(strat, case.device, mode))
        layout = getattr(case, "layout", "contiguous")  # the point as the sweep times it
        if layout_skipped(strat, layout):  # the sweep skips the case: nothing of it to check
            continue
        moved = float64_bytes(op, case.params_dict)
        if moved <= limit:
            for input_mode in MODES:
                items.append(CheckItem(strat, case.params, case.dtype, case.device, input_mode, layout,
                                       training=mode))
        else:
            items.append(CheckItem(strat, case.params, case.dtype, case.device, MODES[0], layout,
                                   skip=f"not checked: it reads and writes {moved} bytes in float64, over "
                                        f"check.max_bytes = {limit} (raise it to check this point)",
                                   training=mode))
    return items


# --------------------------------------------------------------------- running
@dataclass(frozen=True)
class CheckResult:
    item: CheckItem
    verdict: Verdict
    seconds: float
    # The code the process that ran it had loaded ({dependency: digest}, harness.base.loaded_code);
    # None: this process ran it.
    depends: dict | None = field(default=None, compare=False, repr=False)


def verdict_json(verdict: Verdict | None) -> dict | None:
    """A verdict as JSON (None, a key that passed, stays None); ``verdict_of_json`` reads it back."""
    if verdict is None:
        return None
    return {"status": verdict.status, "message": verdict.message, "max_abs_err": verdict.max_abs_err,
            "rel_err": verdict.rel_err, "differences": sorted(verdict.differences)}


def verdict_of_json(data: dict | None) -> Verdict | None:
    """``verdict_json``'s verdict; a ValueError where ``data`` is not one (a damaged file's)."""
    from impls.status import STATUSES

    if data is None:
        return None
    if not isinstance(data, dict) or data.get("status") not in STATUSES or not isinstance(data.get("message"), str):
        raise ValueError(f"not a verdict: {data!r}")
    return Verdict(data["status"], data["message"], max_abs_err=float(data.get("max_abs_err", 0.0)),
                   rel_err=float(data.get("rel_err", 0.0)), differences=frozenset(data.get("differences", ())))


def check_memory_guard(item: CheckItem) -> str | None:
    """Why the item would not fit, or None: the float64 reference and the
    comparison live where the case is judged (``judge_device``), the
    device or the host; judged on a device, the host still holds the
    reference's float64 inputs."""
    op = get_operator(item.strategy.op)
    params = dict(item.params)
    needed = memory.needed_bytes(op, item.strategy, params, item.dtype, item.training)
    on = judge_device(item.device, op)
    places = [("the host", needed, memory.host_free_bytes())]
    if on is not None:
        backend = get_backend(item.strategy.backend)
        places = [(on, needed, memory.free_bytes(backend, on)),
                  ("the host", memory.reference_bytes(op, params, item.training), memory.host_free_bytes())]
    for where, bytes_needed, free in places:
        gap = memory.shortfall(bytes_needed, free, where, " with its float64 reference")
        if gap:
            return f"the check {gap}: skipped before allocating (lower check.max_bytes)"
    return None


def run_one_check(item: CheckItem, seed: int, timeout_s: float | None = None) -> Verdict:
    """One item: skipped when its backend is missing or its float64 reference
    would not fit, or, in a training mode, when it has no backward (the
    reason); else ``attempt``, within ``timeout_s`` (a hang is a
    ``timeout`` verdict, not a hung check). An item with a ``skip`` reason
    is skipped with it. A ``gradcheck`` item is ``run_gradcheck``'s."""
    if item.skip:
        return Verdict(SKIPPED, item.skip)
    unavailable = item.strategy.available()
    if unavailable:
        return Verdict(SKIPPED, unavailable)
    no_backward = training.applies(item.strategy, item.training, dict(item.params))
    if no_backward:
        return Verdict(SKIPPED, no_backward)
    if item.gradcheck:
        try:
            with timing.deadline(timeout_s):
                return run_gradcheck(item, seed)
        except timing.CaseTimeout as error:
            return Verdict(SKIPPED, f"gradcheck not finished: {error}")
    too_big = check_memory_guard(item)
    if too_big:
        return Verdict(SKIPPED, too_big)
    try:
        ref = cached_reference(item.strategy.op, dict(item.params), item.dtype, item.mode, seed, item.training,
                               device=item.device)
    except MemoryError:
        return Verdict(SKIPPED, "out of memory while building the float64 reference")
    work_counts.install(get_backend(item.strategy.backend).module)
    try:
        # Nothing is timed here: autotuned kernels launch their first config, never their autotuner.
        with tuning.untimed(), timing.deadline(timeout_s):
            return attempt(item.strategy, ref, item.dtype, item.device, item.layout).verdict
    except timing.CaseTimeout as error:  # fired between the attempt's end and the deadline's
        return Verdict(TIMEOUT, str(error))


GRADCHECK_AGREES = "autograd's backward agrees with the finite differences of its forward"


def run_gradcheck(item: CheckItem, seed: int) -> Verdict:
    """``torch.autograd.gradcheck`` of ``item``'s strategy in float64:
    autograd's backward against the finite differences of the strategy's own
    forward. The forward is held to the oracle by the checks, so agreement
    shows that autograd's Jacobian and the oracle's agree. Informational,
    never the judge: ``ok`` with what it found in the message (agreeing or
    not), ``skipped`` when it could not run."""
    import torch

    strat, params = item.strategy, dict(item.params)
    op = get_operator(strat.op)
    key = op.gradient.input
    try:
        native = op.to_backend(op.generate(params, item.mode, seed), strat.backend, item.device, "float64")

        def differentiable(value):
            return op.gradient.output(strat.prepare({**native, key: value}, params)())

        x = native[key].detach().clone().requires_grad_(True)
        agrees = torch.autograd.gradcheck(differentiable, (x,), eps=1e-6, atol=1e-7, raise_exception=False)
    except STRATEGY_FAULTS as error:
        return Verdict(SKIPPED, f"gradcheck not run: {failure_verdict(error, strat, item.device).message}")
    if agrees:
        return Verdict(OK, f"gradcheck: {GRADCHECK_AGREES}")
    return Verdict(OK, "gradcheck: autograd's backward DISAGREES with the finite differences of its forward "
                       "(informational: the float64 oracle judges the backward)")


def run_checks(items: list[CheckItem], seed: int, on_item=None, timeout_s: float | None = None,
               known: dict | None = None, on_result=None) -> list[CheckResult]:
    """Each item's result, in order; ``known``: results already reached
    elsewhere (worker processes, harness/measuring/prefetch.py; a journal),
    not run again. ``on_result(result)`` as each item run here ends."""
    results = []
    for item in items:
        if known and item in known:
            results.append(known[item])
            continue
        start = time.perf_counter()
        verdict = run_one_check(item, seed, timeout_s)
        results.append(CheckResult(item, verdict, time.perf_counter() - start))
        if on_result:
            on_result(results[-1])
        if on_item:
            on_item(item)
    return results


class AdversarialCheck:
    """What the sweep asks before it times a case: has this strategy, on this
    device, in this dtype and in this training mode, passed its
    ``adversarial_items``? Each is asked once per run (each item is run
    once, whichever key it serves), and the first failing item is the answer
    for that key; ``results`` keeps every item run, ``seconds`` what they
    cost. A strategy with no backward has no failure in a training mode
    (its items are skipped; the sweep skips its cases with the reason).
    (Not a gate: "gate" is the CI regression gate, harness/judging/wall_gate.py.)"""

    def __init__(self, seed: int, timeout_s: float | None = None):
        self.seed, self.timeout_s = seed, timeout_s
        self.results: list[CheckResult] = []
        self.seconds = 0.0
        self._items: dict[CheckItem, Verdict] = {}
        self._failures: dict[tuple, Verdict | None] = {}
        # The code each answer told by another process (a worker, a child, the cache) was reached with
        # ({dependency: digest}); an answer reached here has none: this process's code is its.
        self.depends: dict[tuple, dict] = {}

    @staticmethod
    def key(strat: Strategy, device: str, dtype: str, mode: str = FORWARD) -> tuple:
        training.check_mode(mode)
        return strat.op, strat.name, device, dtype, mode

    def failure(self, strat: Strategy, device: str, dtype: str, mode: str = FORWARD) -> Verdict | None:
        """The first adversarial failure of ``strat`` in the training
        ``mode`` (its status, and the case in its message), or None once
        every item passed."""
        key = self.key(strat, device, dtype, mode)
        if key not in self._failures:
            self._failures[key] = self._first_failure(strat, device, dtype, mode)
        return self._failures[key]

    def known(self, strat: Strategy, device: str, dtype: str, mode: str = FORWARD) -> tuple[bool, Verdict | None]:
        """(asked already, its answer): what a child process need not ask again."""
        key = self.key(strat, device, dtype, mode)
        return key in self._failures, self._failures.get(key)

    def remember(self, strat: Strategy, device: str, dtype: str, failure: Verdict | None,
                 mode: str = FORWARD, depends: dict | None = None) -> None:
        """Takes an answer reached elsewhere, with the code that reached it (``depends``)."""
        key = self.key(strat, device, dtype, mode)
        self._failures[key] = failure
        if depends is not None:
            self.depends[key] = depends

    def forget(self, strat: Strategy, device: str, dtype: str, mode: str = FORWARD) -> None:
        """Unasks a key (its answer may not be kept)."""
        key = self.key(strat, device, dtype, mode)
        self._failures.pop(key, None)
        self.depends.pop(key, None)

    def absorb(self, results: list[CheckResult]) -> None:
        """Takes the verdicts of items run elsewhere (``run_checks``: the same
        items, seed and time limit give the same verdicts), so that a key whose
        items were all run is answered without running any (``covers``)."""
        for result in results:
            self._items.setdefault(result.item, result.verdict)

    def covers(self, strat: Strategy, device: str, dtype: str, mode: str = FORWARD) -> bool:
        """Whether every adversarial item of the key has a verdict here already."""
        return all(item in self._items for item in adversarial_items(strat, device, dtype, mode))

    def _first_failure(self, strat: Strategy, device: str, dtype: str, mode: str) -> Verdict | None:
        from impls.status import FAILED

        for item in adversarial_items(strat, device, dtype, mode):
            if item not in self._items:
                start = time.perf_counter()
                self._items[item] = run_one_check(item, self.seed, self.timeout_s)
                elapsed = time.perf_counter() - start
                self.seconds += elapsed
                self.results.append(CheckResult(item, self._items[item], elapsed))
            verdict = self._items[item]
            if verdict.status in FAILED:
                where = item.label + (f" {item.dtype}" if item.dtype != dtype else "")
                return Verdict(verdict.status, f"adversarial check {where}: {verdict.message}")
        return None


@dataclass(frozen=True)
class CheckSummary:
    failed: int
    text: str
    failure_lines: list
    defect_lines: list
    skip_lines: list = field(default_factory=list)
    gradcheck_lines: list = field(default_factory=list)  # informational; also at the head of ``text``


def summarize_checks(results: list[CheckResult]) -> CheckSummary:
    """The counts by status, a FAIL line per failure, a line per known
    upstream defect, and SKIPPED lines: each config point over
    ``check.max_bytes`` by name, once for the strategies it was skipped for,
    and any other reason once per strategy and training mode (a backend not
    installed, no backward). Gradchecks are not checks: each is a GRADCHECK
    line (``text`` starts with them, so ``check`` prints them), never counted."""
    from collections import Counter

    from impls.status import FAILED, UPSTREAM_DEFECT

    gradcheck_lines = [f"GRADCHECK {r.item.strategy.key} [{r.item.device} float64 "
                       f"{params_text(r.item.params)}]: {r.verdict.message}"
                       for r in results if r.item.gradcheck]
    results = [r for r in results if not r.item.gradcheck]
    counts = Counter(r.verdict.status for r in results)
    failures = [r for r in results if r.verdict.status in FAILED]
    failure_lines = [f"FAIL {r.item.strategy.key} [{r.item.device} {r.item.dtype} {r.item.label}]: "
                     f"{r.verdict.message}" for r in failures]
    defects = {}
    for r in results:
        if r.verdict.status == UPSTREAM_DEFECT:
            defects.setdefault(r.item.strategy.key, r.verdict.message)
    defect_lines = [f"KNOWN UPSTREAM DEFECT {key}: {message}" for key, message in defects.items()]
    # A config point over the limit once for all the strategies it was skipped for; any
    # other reason once per strategy (a backend not installed skips every item of it).
    points: dict[tuple, list] = {}
    reasons: dict[tuple, list] = {}
    for r in results:
        if r.verdict.status != SKIPPED:
            continue
        item = r.item
        if item.skip:
            points.setdefault((item.strategy.op, item.device, item.dtype, item.label, item.skip), []).append(item)
        else:
            key = item.strategy.key + ("" if item.training == FORWARD else f" {item.training}")
            reasons.setdefault((key, item.device, item.dtype, r.verdict.message), []).append(item)
    skip_lines = [f"SKIPPED {op} [{device} {dtype} {label}] for "
                  f"{items[0].strategy.name if len(items) == 1 else f'{len(items)} strategies'}: {why}"
                  for (op, device, dtype, label, why), items in points.items()]
    skip_lines += [f"SKIPPED {key} [{device} {dtype} "
                   f"{items[0].label if len(items) == 1 else f'{len(items)} items'}]: {message}"
                   for (key, device, dtype, message), items in reasons.items()]
    detail = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    text = f"{len(results)} checks, {len(failures)} failed" + (f" ({detail})" if detail else "")
    modes = Counter(r.item.training for r in results)
    if len(modes) > 1:  # each training mode's own count: the three modes are three checks of a strategy
        failed_in = Counter(r.item.training for r in failures)
        text += "\nby mode: " + "; ".join(f"{mode} {modes[mode]} checks, {failed_in[mode]} failed"
                                          for mode in training.MODES if mode in modes)
    text = "\n".join([*gradcheck_lines, text])
    return CheckSummary(len(failures), text, failure_lines, defect_lines, skip_lines, gradcheck_lines)


def params_text(params: tuple) -> str:
    import json

    from harness.base.format import params_label

    return params_label(json.dumps(dict(params)))
