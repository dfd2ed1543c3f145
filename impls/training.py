"""Training modes (docs/SPEC.md §1.5): one operator's backward, run, checked and
costed like its forward.

Modes (``MODES``; not to be confused with the input generator's modes,
``random`` and ``adversarial``):

- ``forward``: the strategy as registered (``Strategy.prepare``), unchanged;
- ``backward``: the timed call is the backward alone. What the forward saved
  (indices, autograd's graph, JAX's residuals) is made once, outside the
  timed call, and every call makes a fresh gradient, as autograd replays it;
- ``forward+backward``: one call runs the forward and then the backward of
  that forward's output: one training step's cost of the operator.

How a strategy differentiates (``Strategy.differentiation``):

- ``autograd``: every torch strategy, eager or ``torch.compile``'d (the
  compiled backward through AOTAutograd), with no code of its own. The
  differentiated input becomes a leaf that requires grad before the strategy
  is prepared on it; backward calls ``torch.autograd.grad(out, x, grad,
  retain_graph=True)`` on a graph built once; forward+backward builds the
  graph and frees it in the same call.
- ``jax.vjp``: every JAX strategy, through the ``JaxCall`` that
  ``backends.jax_compiled`` returns: ``jax.vjp`` of the same function with
  respect to its first argument, under ``jit``. backward computes the vjp
  function once (jitted) and calls a jitted application of it; forward+
  backward jits forward, vjp and its application together.
- ``explicit``: the strategy's declared ``backward`` (numpy, numba; docs/SPEC.md §1.5),
  given the strategy's own forward output (its indices) as ``saved``.
- ``none``: it declares why (``no_backward``), or its backend has no
  framework and it declares no backward; the training modes skip it with
  that reason (``NotApplicable``), never as an error.

Partial outputs: a maxpool2d strategy returning the values only
(``returns="values"``) is differentiated where its framework can: torch's
``max_pool2d`` saves its indices for autograd whatever it returns, so
``torch_max_pool2d`` has a backward, and its forward+backward pays for the
indices as every training step does. A numpy values-only strategy saves no
indices to scatter to and declares no backward (recomputing the argmax
would be another strategy's forward). In the training modes every strategy
returns the same whole gradient, so being partial in the forward does not
make a strategy's backward partial: ``forward+backward``'s bytes count the
whole forward output (``bytes_moved``), the indices included, for all.

Hostile checks (SPEC 1.5): every operator's adversarial incoming gradients
hold -0.0, subnormals, ±inf, NaN and the largest finite values, the harness
adding each one its generator lacks (``incoming_gradient``); an operator
whose judgement cannot take them says so (``Gradient.normal_values_only``:
the shift operators, judged by a relative error). The index operators'
are compared bitwise but for the sign of a zero
(``common.compare_gradient_bitwise``). They come in every layout the inputs
are checked in, and in ``TRANSPOSED``, with the integer inputs (positions)
and, in ``backward``, what an explicit backward's forward saved (indices) in
the same layout (``relaid``).

The "× the seed" baseline of an operator is its ``baseline`` strategy in
every mode: in the backward modes that is maxpool2d's ``seed_loops`` with
its explicit seed-style loop backward, maxunpool's ``numpy_seed_row_loop``
with its row loop, and, for dispersion and dispersion_pinv, the seed's own
torch ``A`` and ``A_pinv`` differentiated by autograd.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from impls import status
from impls.backends import NotApplicable, convert, float_dtypes, get_backend, to_numpy
from impls.common import (DTYPE_DIFFERENCE, Verdict, merge_verdicts, on_device, round_to_dtype,
                          with_hostile_values)
from impls.registry import Gradient, Operator, Strategy, get_operator

FORWARD, BACKWARD, FORWARD_BACKWARD = MODES = ("forward", "backward", "forward+backward")
TRAINING_MODES = (BACKWARD, FORWARD_BACKWARD)


def check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; known: {', '.join(MODES)}")


def gradient_of(op: Operator | str) -> Gradient | None:
    op = get_operator(op) if isinstance(op, str) else op
    return op.gradient


def missing(strat: Strategy, params: Mapping[str, Any] | None = None) -> str | None:
    """Why ``strat`` has no backward (for this case, when ``params`` is
    given), in words a table can print; None when it has one."""
    if gradient_of(strat.op) is None:
        return f"{strat.op} defines no backward (no Operator.gradient), so it has no training modes"
    if strat.differentiation == "none":
        if strat.no_backward:
            return f"no backward: {strat.no_backward}"
        return (f"no backward: a {strat.backend} strategy differentiates by an explicit backward "
                f"(@strategy(..., backward=...)) and this one declares none")
    if params is not None and strat.no_backward_when is not None:
        reason = strat.no_backward_when(params)
        if reason:
            return f"no backward for this case: {reason}"
    return None


def describe(strat: Strategy) -> str:
    """How ``strat`` differentiates, for ``list``'s column: ``autograd``,
    ``jax.vjp``, ``explicit (seed_update_grad_input)`` or ``none: why``."""
    reason = missing(strat)
    if reason:
        return "none: " + reason.removeprefix("no backward: ")
    if strat.differentiation == "explicit":
        return f"explicit ({getattr(strat.backward, '__name__', '?')})"
    return strat.differentiation


def applies(strat: Strategy, mode: str, params: Mapping[str, Any] | None = None) -> str | None:
    """None when ``strat`` runs in ``mode`` (for this case), else the reason
    it is skipped."""
    check_mode(mode)
    if params is not None and strat.outside_when is not None:
        reason = strat.outside_when(params)
        if reason:
            return f"not for this case: {reason}"
    if mode == FORWARD:
        return None
    return missing(strat, params)


# ------------------------------------------------------------------ reference
def gradient_case(op: Operator | str, inputs: Mapping[str, Any], params: Mapping[str, Any], input_mode: str,
                  seed: int, dtype: str, oracle: Callable | None = None) -> tuple[np.ndarray, Any]:
    """The incoming gradient of a case (float64, holding exactly the values
    ``dtype`` can store) and the float64 oracle's gradient of the
    differentiated input. ``inputs``: the case's float64 inputs, already
    rounded to ``dtype`` (what the forward's reference holds). ``oracle``:
    ``Gradient.oracle`` called another way (on the device's tensors,
    harness/measuring/check.py); left out, ``Gradient.oracle`` on these inputs."""
    op = get_operator(op) if isinstance(op, str) else op
    if op.gradient is None:
        raise NotApplicable(f"{op.name} defines no backward")
    grad = incoming_gradient(op, params, input_mode, seed)
    grad = round_to_dtype(grad, dtype)
    return grad, (oracle or op.gradient.oracle)(inputs, grad, params)


def incoming_gradient(op: Operator, params: Mapping[str, Any], input_mode: str, seed: int) -> np.ndarray:
    """The operator's incoming gradient (float64) as the check gives it: ``Gradient.generate``'s,
    and in any input mode but ``random`` with every hostile value it lacks
    (``common.with_hostile_values``; SPEC 1.5), unless the operator declares normal values only
    (``Gradient.normal_values_only``, with its reason)."""
    grad = op.gradient.generate(params, input_mode, seed)
    if input_mode == "random" or op.gradient.normal_values_only:
        return grad
    return with_hostile_values(grad, np.random.default_rng((seed, 2, HOSTILE_STREAM)))


# The hostile values' own random stream (beside a generator's (seed, 1)): the same case, the same values.
HOSTILE_STREAM = 51


# A layout of the training checks only (SPEC 1.5), beside the inputs' layouts
# (impls.backends.LAYOUTS): the incoming gradient and the integer inputs the
# backward is given (maxunpool's positions) with their last two axes swapped
# in memory, the float inputs contiguous; in ``backward`` what the forward
# saved (maxpool2d's indices) too. Where a backend's arrays have strides.
TRANSPOSED = "transposed"


def transposed_applies(op: Operator | str, params: Mapping[str, Any], backend: str) -> bool:
    """Whether ``TRANSPOSED`` is a layout of its own for ``op`` at ``params``
    on ``backend``: its arrays have strides (it offers a non-contiguous
    layout; JAX's do not), and the incoming gradient's last two axes are both
    longer than 1 (otherwise swapping them changes no stride that matters)."""
    op = get_operator(op) if isinstance(op, str) else op
    if op.gradient is None or "noncontiguous" not in get_backend(backend).layouts:
        return False
    shape = np.shape(op.gradient.generate(dict(params), "random", 0))
    return len(shape) >= 2 and min(shape[-2:]) > 1


def relaid(value: Any, backend: str, device: str, dtype: str, layout: str) -> Any:
    """``value`` (an array on ``backend``, or a tuple of them) with the same
    contents in ``layout``: one of the inputs' layouts, made by the backend's
    own conversion, or ``TRANSPOSED``. Integers stay int64 (the converters'
    rule), floats ``dtype``. Setup, never timed."""
    if isinstance(value, (tuple, list)):
        return tuple(relaid(item, backend, device, dtype, layout) for item in value)
    if layout == "contiguous" or not hasattr(value, "shape"):
        return value
    record = get_backend(backend)
    array = to_numpy(value)
    if layout != TRANSPOSED:
        return convert({"saved": array}, record, device, dtype, layout, ("saved",))["saved"]
    if array.ndim < 2:
        return value
    swapped = convert({"saved": np.swapaxes(array, -1, -2)}, record, device, dtype)["saved"]
    return swapped.swapaxes(-1, -2)  # numpy's and torch's: a view, strides swapped


def inputs_to_backend(op: Operator | str, inputs: Mapping[str, Any], backend: str, device: str, dtype: str,
                      layout: str = "contiguous") -> dict:
    """A training case's inputs on the strategy's backend: in one of the
    inputs' layouts as the forward's (``Operator.to_backend``); in
    ``TRANSPOSED``, the float inputs contiguous and the integer arrays (the
    positions the backward is given) transposed."""
    op = get_operator(op) if isinstance(op, str) else op
    if layout != TRANSPOSED:
        return op.to_backend(inputs, backend, device, dtype, layout)
    converted = op.to_backend(inputs, backend, device, dtype)
    for key, value in inputs.items():
        if isinstance(value, np.ndarray) and value.dtype.kind in "iu":
            converted[key] = relaid(converted[key], backend, device, dtype, TRANSPOSED)
    return converted


def gradient_to_backend(op: Operator | str, grad: np.ndarray, backend: str, device: str, dtype: str,
                        layout: str = "contiguous"):
    """The incoming gradient on the strategy's backend and device, in
    ``dtype`` and in the case's layout (non-contiguous, channels-last where
    the backend has them, ``TRANSPOSED``): the gradient's layout is checked
    like the inputs'."""
    op = get_operator(op) if isinstance(op, str) else op
    name = op.gradient.name
    if layout == TRANSPOSED:
        return relaid(convert({name: grad}, get_backend(backend), device, dtype)[name], backend, device, dtype,
                      TRANSPOSED)
    return convert({name: grad}, get_backend(backend), device, dtype, layout, (name,))[name]


# ------------------------------------------------------------------ prepare
def prepare(strat: Strategy, inputs: Mapping[str, Any], grad: Any, params: Mapping[str, Any],
            mode: str, layout: str = "contiguous", device: str = "cpu") -> Callable[[], Any]:
    """The zero-argument timed call of ``strat`` in ``mode``.

    ``inputs``: the operator's inputs on the strategy's backend (as for
    ``Strategy.prepare``); ``grad``: the incoming gradient on the same
    backend (``gradient_to_backend``; ignored in ``forward``). The call
    returns, by mode: the forward output; the gradient of the operator's
    differentiated input (``Gradient.input``); the pair (forward output,
    that gradient). Everything the backward needs saved is made here, outside
    the call. ``layout``/``device``: the case's (an explicit backward in
    ``backward`` mode is given what its forward saved in that layout, as a
    framework may hand it over). Raises NotApplicable (the case is skipped)
    with ``applies``'s reason (a case it does not compute, no backward);
    whatever the strategy raises otherwise."""
    reason = (mode != FORWARD and missing(strat)) or applies(strat, mode, params)
    if reason:  # no backward at all; a case it does not compute
        raise NotApplicable(reason)
    if mode == FORWARD:
        return strat.prepare(inputs, params)
    gradient = get_operator(strat.op).gradient
    how = strat.differentiation
    if how == "explicit":
        return _explicit(strat, inputs, grad, params, mode, layout, device)
    if how == "autograd":
        return _autograd(strat, gradient, inputs, grad, params, mode)
    if how == "jax.vjp":
        return _jax_vjp(strat, gradient, inputs, grad, params, mode)
    raise NotApplicable(f"no backward: {strat.backend}'s way of differentiating, {how!r}, is not one the "
                        "training modes know (autograd, jax.vjp, explicit)")


def _explicit(strat, inputs, grad, params, mode, layout, device):
    run = strat.prepare(inputs, params)
    backward = strat.backward(inputs, params)
    if mode == BACKWARD:
        # The forward, once: what it saved (indices) is the backward's input, in the case's layout
        # (SPEC 1.5: the saved indices are as hostile as the inputs).
        saved = relaid(run(), strat.backend, device, dtype_of(grad), layout)

        def call():
            return backward(saved, grad)
    else:
        def call():
            output = run()
            return output, backward(output, grad)
    if get_backend(strat.backend).compiles:
        call()  # compiles the backward (numba) outside the timed calls, as the forwards do
    return call


def dtype_of(array) -> str:
    """The float dtype's name of a backend's array ("float32", "bfloat16")."""
    return str(array.dtype).rsplit(".", 1)[-1]


def _detached(output):
    if isinstance(output, (tuple, list)):
        return tuple(_detached(item) for item in output)
    return output.detach() if hasattr(output, "detach") else output


def _autograd(strat, gradient: Gradient, inputs, grad, params, mode):
    import torch

    x = inputs[gradient.input]
    if not torch.is_tensor(x) or not x.is_floating_point():
        raise TypeError(f"{strat.key}: input {gradient.input!r} is not a float tensor, autograd cannot "
                        "differentiate it")
    # A leaf sharing x's storage and strides: the strategy sees the same layout.
    leaf = x.detach().requires_grad_(True)
    run = strat.prepare({**inputs, gradient.input: leaf}, params)
    if mode == BACKWARD:
        # The graph, once; each call replays its backward into a fresh gradient.
        differentiable = gradient.output(run())

        def call():
            return torch.autograd.grad(differentiable, leaf, grad, retain_graph=True)[0]
    else:
        def call():
            output = run()
            (grad_input,) = torch.autograd.grad(gradient.output(output), leaf, grad)
            return _detached(output), grad_input
    if strat.quick_check or get_backend(strat.backend).compiles:
        call()  # torch.compile compiles the backward graph at its first call: outside the timed calls
    return call


def _jax_vjp(strat, gradient: Gradient, inputs, grad, params, mode):
    from impls.backends import JaxCall, _jax

    jax = _jax()
    run = strat.prepare(inputs, params)
    if not isinstance(run, JaxCall):
        raise TypeError(f"{strat.key}: a JAX strategy is differentiated through the call "
                        "impls.backends.jax_compiled returns; this one returns a plain callable")
    fn, args, static = run.fn, run.args, run.static_argnums
    x = inputs[gradient.input]
    first = args[0] if args else None
    if first is None or getattr(first, "size", None) != x.size or first.dtype != x.dtype:
        raise TypeError(f"{strat.key}: its jitted function's first argument is not the operator's "
                        f"{gradient.input!r} (JaxCall differentiates with respect to the first)")
    jitted = _jax_training_jits(fn, gradient.output, static, mode, x.shape)
    if mode == BACKWARD:
        # Residuals once (jitted forward and linearisation); each call applies
        # the pullback, jitted, into a fresh gradient.
        pullback, _ = jitted.residuals(*args)

        def call():
            return jitted.apply(pullback, grad)
    else:
        def call():
            return jitted.step(*args, grad)
    jax.block_until_ready(call())  # compiled here, outside the timed calls
    return call


@dataclass(frozen=True)
class _JaxTrainingJits:
    residuals: Any = None  # backward: the arguments -> (pullback, output)
    apply: Any = None  # backward: (pullback, cotangent) -> the gradient
    step: Any = None  # forward+backward: (arguments..., cotangent) -> (output, gradient)


@functools.lru_cache(maxsize=None)
def _jax_training_jits(fn, output, static: tuple, mode: str, shape: tuple) -> _JaxTrainingJits:
    """The jitted functions of a JAX strategy's training ``mode``, one set per
    (function, static arguments, mode, shape): jax.jit caches its traces per
    jit object, so a new one per case (the check prepares each strategy at
    every adversarial case, layout and input mode) traced the same program
    again every time."""
    from impls.backends import _jax

    jax = _jax()

    def vjp_of(*arguments):
        rest = arguments[1:]

        def forward(value):
            result = fn(value, *rest)
            return output(result), result

        _, pullback, result = jax.vjp(forward, arguments[0], has_aux=True)
        return pullback, result

    if mode == BACKWARD:
        return _JaxTrainingJits(residuals=jax.jit(vjp_of, static_argnums=static),
                                apply=jax.jit(lambda pull, cotangent: pull(cotangent)[0].reshape(shape)))

    def step_of(*arguments):
        pullback, result = vjp_of(*arguments[:-1])
        return result, pullback(arguments[-1])[0].reshape(shape)

    return _JaxTrainingJits(step=jax.jit(step_of, static_argnums=static))


# ------------------------------------------------------------------ judging
def compare(strat: Strategy, output: Any, expected: Any, expected_grad: np.ndarray, inputs: Mapping[str, Any],
            grad: np.ndarray, dtype: str, params: Mapping[str, Any], mode: str, device: str | None = None) -> Verdict:
    """A training-mode output against the float64 oracles, by the operator's
    rules: the gradient by ``Gradient.compare``; in forward+backward the
    forward output too, by ``Operator.compare``, both judged (one verdict
    naming every problem). ``expected``: the forward oracle's output;
    ``inputs``/``grad``: the case's float64 inputs and incoming gradient.
    ``device``: the oracles and ``inputs``/``grad`` are torch tensors there,
    and the output is moved there to be judged by the same rules. A known
    upstream defect is the caller's to apply (as for the forward)."""
    check_mode(mode)
    op = get_operator(strat.op)
    wrong = [name for name in float_dtypes(output) if name != dtype]
    if wrong:
        return Verdict(status.MISMATCH, f"{strat.op} {mode} output: dtype {wrong[0]}, expected {dtype}",
                       differences=frozenset({DTYPE_DIFFERENCE}))
    convert = to_numpy if device is None else (lambda value: on_device(value, device))
    if mode == FORWARD:
        return op.compare(convert(output), expected, inputs, dtype, strat, dict(params))
    if mode == BACKWARD:
        return op.gradient.compare(convert(output), expected_grad, inputs, grad, dtype, strat, dict(params))
    if not (isinstance(output, tuple) and len(output) == 2):
        return Verdict(status.MISMATCH, "forward+backward: expected (forward output, gradient)")
    forward_output, grad_input = output
    return merge_verdicts(op.compare(convert(forward_output), expected, inputs, dtype, strat, dict(params)),
                          op.gradient.compare(convert(grad_input), expected_grad, inputs, grad, dtype, strat,
                                              dict(params)))


# ------------------------------------------------------------------ bytes
def bytes_moved(op: Operator | str, params: Mapping[str, Any], itemsize: int, mode: str,
                returns: str | None = None) -> int:
    """docs/SPEC.md §1.5's bytes of ``mode``: forward, the operator's formula for what
    the strategy returns; backward, the gradients read and written plus the
    saved integers or mask read; forward+backward, both, with the forward's
    whole output (a training step saves the indices whatever it returns)."""
    check_mode(mode)
    op = get_operator(op) if isinstance(op, str) else op
    if mode == FORWARD:
        return op.bytes_moved(params, itemsize, returns or op.whole_output)
    if op.gradient is None:
        raise NotApplicable(f"{op.name} defines no backward")
    backward = op.gradient.bytes_moved(params, itemsize)
    if mode == BACKWARD:
        return backward
    return op.bytes_moved(params, itemsize, op.whole_output) + backward


def written_buffers(op: Operator | str, params: Mapping[str, Any], itemsize: int, mode: str,
                    returns: str | None = None) -> tuple[int, ...] | None:
    """Each output the timed call allocates afresh, in bytes (the fresh-output
    floor's split of ``bytes_moved``): the forward's outputs (``Operator.written_buffers``,
    or one of ``Operator.bytes_written``), the gradient, or both in
    forward+backward (the forward's whole output, as ``bytes_moved`` counts
    it). None where the operator does not split its bytes."""
    check_mode(mode)
    op = get_operator(op) if isinstance(op, str) else op

    def forward(returns: str):
        if op.bytes_written is None:
            return None
        if op.written_buffers is not None:
            return tuple(op.written_buffers(params, itemsize, returns))
        return (op.bytes_written(params, itemsize, returns),)

    if mode == FORWARD:
        return forward(returns or op.whole_output)
    gradient = None if op.gradient is None else op.gradient.bytes_written
    if gradient is None:
        return None
    if mode == BACKWARD:
        return (gradient(params, itemsize),)
    outputs = forward(op.whole_output)
    return None if outputs is None else outputs + (gradient(params, itemsize),)


def bytes_written(op: Operator | str, params: Mapping[str, Any], itemsize: int, mode: str,
                  returns: str | None = None) -> int | None:
    """The part of ``bytes_moved`` that is output written afresh by the timed
    call: the sum of ``written_buffers``. None where the operator does not split it."""
    buffers = written_buffers(op, params, itemsize, mode, returns)
    return None if buffers is None else sum(buffers)
