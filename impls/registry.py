"""The operator and strategy registry (``OPERATORS``). The backends the
strategies run on have their own registry, ``impls.backends.BACKENDS``.

A *strategy* is a plain function ``prepare(inputs, params) -> run`` where
``inputs`` are the operator's inputs already converted to the strategy's
backend, device, dtype and layout, and ``run`` is a zero-argument callable
that computes the operator and returns its whole output, or the part it
declares with ``returns=`` (one of ``Operator.outputs``). Everything built
inside ``prepare`` (index tables, kernels, compiled functions) is a one-time
constant, excluded from the timed region (docs/SPEC.md §3); everything inside ``run``
is timed, output allocation included.

An *operator* bundles what docs/SPEC.md §1 asks for: a float64 oracle, a seeded input
generator, a bytes formula and a comparison rule, with the validation of its
parameters and its adversarial check cases. The built-in operator modules
register themselves when ``impls`` is imported, a plugin's operators and
strategies when ``SCATTERBENCH_PLUGINS`` loads it (``harness.base.plugins``).
Importing them imports numpy only: torch and the optional backends (triton,
numba, pytensor, JAX) are loaded inside the strategies.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from impls.backends import (BACKENDS, CASE_LAYOUTS, DTYPES, LAYOUTS, NotApplicable, convert, devices, get_backend,
                            layout_reorders)
from impls.status import CORRECT

__all__ = ["BACKENDS", "DTYPES", "devices", "Gradient", "NotApplicable", "Operator", "ParamSpec", "Strategy",
           "all_strategies", "check_registry", "compiled", "get_operator", "register_operator", "strategy"]


@dataclass(frozen=True)
class Strategy:
    op: str
    name: str
    backend: str
    prepare: Callable[[Mapping[str, Any], Mapping[str, Any]], Callable[[], Any]]
    source: str  # "seed 000 updateOutput", or "added"
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    # Which of the operator's outputs it returns (``Operator.outputs``); the
    # decorator's default is the whole output, so only a partial one is declared.
    returns: str = "output"  # maxpool2d: "values+indices" (whole) or "values"
    # Which maximum an argmax index may point at: "first" (the contract) or "any".
    # Any operator's strategy may declare it; the operator's compare and its
    # Gradient.compare read it (maxpool2d's hold anything but "any" to "first").
    ties: str = "n/a"
    seed: bool = False  # one of the seeds' own strategies
    doc: str = ""
    # Extra bytes of temporaries per byte of operator traffic, for the memory guard.
    temp_factor: float = 1.0
    # Each new shape costs a compile (torch.compile; PyTensor's graphs, numba-compiled
    # at their first call): checks use a reduced case set (harness.measuring.check).
    quick_check: bool = False
    # The seed's original strategy: speedups in tables and the report are over it.
    baseline: bool = False
    # A library's own call for this operator (torch's scatter_ and max_unpool,
    # numpy's put_along_axis, JAX's .at[].set alike: one definition, whatever
    # the library): the report measures the winner against the fastest of these.
    builtin: bool = False
    # Preconditions on the inputs beyond the operator's contract (docs/SPEC.md §1.2), e.g.
    # "positions-in-window": every position lies inside its own window or bin, as
    # maxpool2d's indices do. ``list`` shows them; the check keeps the strategy
    # out of the cases whose inputs break one (an operator's ``extra_checks``).
    requires: tuple[str, ...] = ()
    # How it differentiates in the training modes (docs/SPEC.md §1.5, impls/training.py).
    # ``backward``: an explicit backward, ``backward(inputs, params) -> apply``
    # with ``apply(saved, grad) -> the gradient of the operator's differentiated
    # input``, ``saved`` the strategy's own forward output (maxpool2d's indices
    # are in it); the outer call is setup (tables, JIT compiles), ``apply`` is
    # timed. Left out, the strategy differentiates by its backend's framework
    # (``Backend.differentiates``: torch's autograd, compiled or not; jax.vjp),
    # or has no backward.
    backward: Callable[[Mapping[str, Any], Mapping[str, Any]], Callable[[Any, Any], Any]] | None = None
    # Why it has no backward, where it has none by declaration (``list`` shows it;
    # the training modes skip it with this reason, never as an error).
    no_backward: str = ""
    # params -> why its backward cannot do this case by design, or None: the
    # training modes skip that case with the reason (what a forward's prepare
    # says by raising NotApplicable, for a backward written by a framework).
    no_backward_when: Callable[[Mapping[str, Any]], str | None] | None = None
    # params -> why it does not compute this case by design (a window it was not written
    # for), or None: that case is ``skipped`` with the reason in every mode, never computed
    # wrong (docs/SPEC.md §1.1: the seeds' reshape forms pool k×k windows at stride k only).
    outside_when: Callable[[Mapping[str, Any]], str | None] | None = None
    # The case layouts (``backends.CASE_LAYOUTS``) its prepare takes as they are (docs/SPEC.md §2).
    # A case in any other is handed to it contiguous, and its timed call starts by copying the case's
    # arrays into what it was handed: the conversion a user of that layout pays is timed
    # (``handed_layout``). The default, every layout: it reads any strides, or converts in its call.
    native_layouts: tuple[str, ...] = CASE_LAYOUTS

    def handed_layout(self, layout: str) -> str:
        """The layout its prepare is handed in a case held in ``layout``: that layout where it takes
        it natively, or where no timed case is held so (the check's strided views, the training
        checks' transposed indices: what it must read right, not a cost); contiguous otherwise."""
        if layout in self.native_layouts or layout not in CASE_LAYOUTS:
            return layout
        return "contiguous"

    @property
    def differentiation(self) -> str:
        """How it differentiates: "explicit" (its declared ``backward``), its
        backend's framework ("autograd", "jax.vjp"), or "none"."""
        if self.backward is not None:
            return "explicit"
        if self.no_backward:
            return "none"
        return get_backend(self.backend).differentiates or "none"

    @property
    def key(self) -> str:
        return f"{self.op}/{self.name}"

    def runs_on(self, device: str) -> bool:
        backend = get_backend(self.backend)
        return device in self.devices or backend.interpreted(device)

    def interpreted_on(self, device: str) -> bool:
        """Whether it reaches ``device`` only through an interpreter (Triton on
        the CPU): checked there, never timed."""
        return device not in self.devices and get_backend(self.backend).interpreted(device)

    def available(self) -> str | None:
        """None when the backend can be imported, else the reason it cannot."""
        return get_backend(self.backend).unavailable()


@dataclass(frozen=True)
class ParamSpec:
    name: str
    kind: type = int
    minimum: int | None = 1
    choices: tuple | None = None
    doc: str = ""
    required: bool = True  # False: needed by some forms only; the operator's validate says which


def whole_output(output):
    """A strategy's output as it is: the differentiable part of an operator
    with one output."""
    return output


@dataclass(frozen=True)
class Gradient:
    """An operator's backward (docs/SPEC.md §1.5): the vector-Jacobian product with
    respect to one float input, the integer and constant inputs held fixed.
    An operator without one (``Operator.gradient`` None, as a plugin's may
    be) has no training modes; impls/training.py runs and checks it."""

    input: str  # the input differentiated ("x"); the backward returns its gradient
    name: str  # the incoming gradient's name ("grad_values"), of the differentiable output's shape
    # (params, mode, seed) -> the incoming gradient, float64. ``adversarial``:
    # non-zero integers, distinct along a row, so a misplaced gradient shows.
    generate: Callable[[Mapping[str, Any], str, int], Any]
    # (float64 inputs, float64 gradient, params) -> the float64 gradient of
    # ``input``: docs/SPEC.md's formula, computed directly.
    oracle: Callable[[Mapping[str, Any], Any, Mapping[str, Any]], Any]
    # (params, itemsize) -> bytes: the gradients read and written plus the
    # saved integers or mask read.
    bytes_moved: Callable[[Mapping[str, Any], int], int]
    # (out, ref, float64 inputs, float64 gradient, dtype, strategy, params) -> Verdict
    compare: Callable[..., Any]
    # A strategy's forward output -> its differentiable part (maxpool2d: the
    # values; its indices are integers).
    output: Callable[[Any], Any] = whole_output
    # (params, itemsize) -> the bytes of ``bytes_moved`` that are the gradient
    # written, a fresh output (the fresh-output floor's split); None: not split.
    bytes_written: Callable[[Mapping[str, Any], int], int] | None = None
    # Why this operator's adversarial incoming gradients hold normal values only, in words a
    # reader takes as the contract (the shift operators: judged by a relative error, which is
    # finite values' measure). Empty (the default): the harness adds -0.0, subnormals, ±inf,
    # NaN and the largest finite values to whatever ``generate`` returns
    # (``common.with_hostile_values``), with no flag to ask for them.
    normal_values_only: str = ""


@dataclass
class Operator:
    name: str
    doc: str
    params: tuple[ParamSpec, ...]  # in the order tables and labels show them
    generate: Callable  # (params, mode, seed) -> dict[str, np.ndarray]
    oracle: Callable  # (float64 inputs, params) -> output
    bytes_moved: Callable  # (params, itemsize, returns) -> int
    compare: Callable  # (out, ref, inputs, dtype, strategy, params) -> Verdict
    validate: Callable  # (params) -> None, raises ValueError naming the problem
    check_cases: Callable  # () -> list of small adversarial parameter dicts
    # The strategy that regression checks normalise by: present on every
    # machine the gate runs on, and stable (see docs/REGRESSION.md).
    reference: str
    # The inputs a layout applies to (the big ones) and the layouts worth
    # checking for this operator; each backend narrows them to what it has.
    layout_keys: tuple[str, ...] = ()
    check_layouts: tuple[str, ...] = LAYOUTS
    # (params) -> {key: shape} of the layout_keys' arrays at a point, without drawing them: which
    # layouts a timed case can be given (``layout_changes``). None: every case is contiguous.
    layout_shapes: Callable | None = None
    strategies: dict[str, Strategy] = field(default_factory=dict)
    # What a strategy may return, the whole output first: every strategy
    # returns the whole output unless it declares ``returns=`` one of the others
    # (maxpool2d: ("values+indices", "values")). A partial one does less work
    # and is never ranked against the others.
    outputs: tuple[str, ...] = ("output",)
    # The library's own call for this operator, what a user means by "the built-in"
    # (F.max_pool2d(return_indices=True), F.max_unpool1d/2d): the strategies that are it, the
    # fastest present in a case being the one a report's first screen divides by. Empty: the
    # fastest built-in (``Strategy.builtin``: one library call), as for the shift operators.
    library_call: tuple[str, ...] = ()
    module: str = ""  # the module that registered it (set by register_operator)
    # (params, itemsize, returns) -> the part of ``bytes_moved`` written (the
    # outputs, allocated fresh by every call): splits the traffic for the
    # fresh-output-aware floor (reads at the copy bandwidth, writes at the
    # fresh-write bandwidth). None: the operator's rows have no such floor.
    bytes_written: Callable | None = None
    # (params, itemsize, returns) -> each fresh output's bytes, for an operator whose call
    # allocates several (maxpool2d: values, then indices); their sum is ``bytes_written``. A fresh
    # output's first-touch cost depends on its own size, not on the total (the floor by size prices
    # each at its own: harness/results/floors.py). None: one output, all of ``bytes_written``.
    written_buffers: Callable | None = None
    # Check cases beyond check_cases x MODES: () -> list of dicts with keys
    #   params   the parameter dict;
    #   modes    the generator modes to draw inputs in (a mode may be the operator's own,
    #            e.g. maxunpool's "scattered");
    #   dtypes   the dtypes to check in whatever the config asks for (None: the config's);
    #   layouts  None: every layout the strategy is checked in;
    #   violates preconditions (Strategy.requires) these inputs break: a strategy
    #            requiring one of them is kept out of the case;
    #   compiled whether per-shape compiled strategies (quick_check) run it (default True);
    #   why      one line: what the case is for.
    extra_checks: Callable[[], list] = list
    # ``Strategy.outside_when`` of a strategy that declares none: the cases the operator's
    # first contract did not have, which a strategy written before them never computes
    # (maxpool2d: overlapping and padded windows); one that computes every case says so
    # with ``outside_when=every_case``.
    default_outside_when: Callable[[Mapping[str, Any]], str | None] | None = None
    # Its backward (docs/SPEC.md §1.5); None: no training modes. Operator modules set
    # it after registering (``OP.gradient = Gradient(...)``).
    gradient: Gradient | None = None
    # Whether its oracles and compares (forward and backward) are written over
    # the array namespace of their arguments (array-api-compat: numpy, or
    # torch tensors on any device), as impls/common.py's compares are: a case
    # on a device other than the CPU is then judged there, the float64
    # reference computed on the device (harness/measuring/check.py,
    # ``judge_device``). False (a plugin's numpy oracle): judged on the host.
    any_namespace: bool = False

    def __setattr__(self, name, value):
        # A Gradient is checked when it is declared (``OP.gradient = Gradient(...)`` or the
        # constructor's ``gradient=``), so a plugin's mistake is one line naming its file,
        # not a strategy's KeyError in the first training case.
        if name == "gradient" and value is not None:
            check_gradient(self, value)
        super().__setattr__(name, value)

    @property
    def baseline(self) -> str | None:
        """The strategy marked ``baseline=True`` (the seed's original)."""
        return next((s.name for s in self.strategies.values() if s.baseline), None)

    @property
    def whole_output(self) -> str:
        """What the operator returns in full: the first of its ``outputs``."""
        return self.outputs[0]

    def partial(self, name: str) -> bool:
        """Whether strategy ``name`` returns less than the whole output
        (maxpool2d values without indices): it does less work, so it is
        never ranked against the others as the fastest."""
        return self.unranked_reason(name) is not None

    def unranked_reason(self, name: str) -> str | None:
        """Why strategy ``name`` is never ranked against the others, in words
        a report can print after its name; None for a ranked strategy."""
        strat = self.strategies.get(name)
        if strat is None or strat.returns == self.whole_output:
            return None
        return (f"it returns {strat.returns} only, not {self.whole_output} (declared returns={strat.returns!r}), "
                f"so it does less work")

    def missing_baseline(self, statuses: Mapping[str, str]) -> str | None:
        """Why a case's speedups over the seed's original cannot be given,
        from its strategies' statuses (name -> status); None when the
        baseline ran and passed, so they can."""
        status = statuses.get(self.baseline)
        if status is None:
            return f"the seed's original, {self.baseline}, was not among the strategies run"
        if status not in CORRECT:
            return f"the seed's original, {self.baseline}, is {status} here"
        return None

    def layout_changes(self, params: dict, layout: str) -> bool:
        """Whether a case at ``params`` can be timed in ``layout`` (docs/SPEC.md §2): contiguous always;
        another layout where the operator is checked in it and it puts one of the inputs in another
        memory order (``backends.layout_reorders``, the check's rule too)."""
        if layout == "contiguous":
            return True
        if layout not in self.check_layouts or self.layout_shapes is None:
            return False
        return any(layout_reorders(shape, layout) for shape in self.layout_shapes(params).values())

    def layouts(self, backend: str) -> tuple[str, ...]:
        offered = get_backend(backend).layouts
        return tuple(layout for layout in self.check_layouts if layout in offered)

    def to_backend(self, inputs, backend: str, device: str, dtype: str, layout: str = "contiguous") -> dict:
        return convert(inputs, get_backend(backend), device, dtype, layout, self.layout_keys)


OPERATORS: dict[str, Operator] = {}


def _declared_at() -> str:
    """The file and line that declared what is being checked: the first
    caller outside this module and the dataclass's generated ``__init__``."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename == __file__ or (
            frame.f_code.co_filename.startswith("<") and frame.f_code.co_name == "__init__")):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"


def check_gradient(op: Operator, gradient: Gradient) -> None:
    """ValueError, one line naming the declaring file, unless ``gradient``
    differentiates a float input of ``op`` and its incoming gradient's name is
    not one of ``op``'s inputs (the training check keeps both side by side).
    The inputs are those ``op.generate`` makes for its first check case."""
    where = f"{op.name}'s Gradient (declared at {_declared_at()})"
    try:
        params = op.check_cases()[0]
        inputs = op.generate(dict(params), "random", 0)
    except Exception as error:  # noqa: BLE001 - any failure is the plugin's, told in one line
        raise ValueError(f"{where}: cannot be checked, {op.name}'s generate of its first check case raised "
                         f"{type(error).__name__}: {' '.join(str(error).split())}") from None
    floats = [key for key, value in inputs.items() if getattr(getattr(value, "dtype", None), "kind", "") == "f"]
    if gradient.input not in floats:
        what = "no input has that name" if gradient.input not in inputs else "an input, but not a float one"
        raise ValueError(f"{where}: input={gradient.input!r} is not a float input of {op.name} ({what}); "
                         f"its float inputs: {', '.join(floats) or 'none'}")
    if gradient.name in inputs:
        raise ValueError(f"{where}: name={gradient.name!r} is the name of one of {op.name}'s inputs "
                         f"({', '.join(inputs)}); name the incoming gradient apart, e.g. 'grad_output'")
    problem = _gradient_shape_problem(op, gradient, params, inputs)
    if problem:
        raise ValueError(f"{where}: {problem}")


def _gradient_shape_problem(op: Operator, gradient: Gradient, params, inputs) -> str | None:
    """What the training check would stumble on midway, found on the first check case instead: a
    tuple output without ``output=`` to say which part is differentiated, and a ``generate`` that
    does not give a float64 array of that part's shape (in either input mode)."""
    def failed(what: str, error: Exception) -> str:
        return f"{what} raised {type(error).__name__}: {' '.join(str(error).split())}"

    try:
        out = op.oracle(inputs, params)
    except Exception as error:  # noqa: BLE001 - the plugin's code: told in one line
        return failed(f"cannot be checked, {op.name}'s oracle on its first check case", error)
    if isinstance(out, (tuple, list)) and gradient.output is whole_output:
        return (f"{op.name}'s oracle returns {len(out)} outputs, so the Gradient must say which one is "
                f"differentiated: output=, e.g. Gradient(..., output=lambda out: out[0])")
    try:
        differentiated = np.shape(gradient.output(out))
    except Exception as error:  # noqa: BLE001
        return failed("output= on the oracle's output", error)
    for mode in ("random", "adversarial"):
        try:
            grad = gradient.generate(params, mode, 0)
        except Exception as error:  # noqa: BLE001
            return failed(f"generate({params!r}, {mode!r}, 0)", error)
        if np.shape(grad) != differentiated or getattr(grad, "dtype", None) != np.float64:
            made = f"{getattr(grad, 'dtype', type(grad).__name__)} of shape {np.shape(grad)}"
            return (f"generate({params!r}, {mode!r}, 0) gives {made}; the incoming gradient is float64 of the "
                    f"differentiated output's shape, {differentiated}")
    return None


def defined_at(fn) -> str:
    """Where a function was defined, as ``module (file:line)``: what a
    registration clash names."""
    code = getattr(fn, "__code__", None)
    where = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
    return f"{getattr(fn, '__module__', '?')}{where}"


def _same_source(old, new) -> bool:
    """Two functions from the same module under the same name: the same
    definition run again (a notebook cell re-run, ``importlib.reload``)."""
    return (getattr(old, "__module__", None), getattr(old, "__qualname__", None)) == \
        (getattr(new, "__module__", None), getattr(new, "__qualname__", None))


def register_operator(op: Operator) -> Operator:
    """Registers ``op``. Registering it again from the same module (a notebook
    cell re-run, ``importlib.reload``) replaces it and keeps its strategies;
    the same name from another module is an error naming both."""
    op.module = sys._getframe(1).f_globals.get("__name__", "?")
    old = OPERATORS.get(op.name)
    if old is not None:
        if old.module != op.module:
            raise ValueError(f"operator {op.name!r} registered twice: by {old.module} and by "
                             f"{op.module}; rename one")
        op.strategies.update({name: strat for name, strat in old.strategies.items() if name not in op.strategies})
    if not op.outputs:
        raise ValueError(f"operator {op.name!r}: outputs is empty (give at least the whole output's name)")
    OPERATORS[op.name] = op
    return op


def every_case(params) -> None:
    """``outside_when`` of a strategy that computes every case of its operator."""
    return None


def strategy(op: str, *, backend: str, source: str = "added", devices=None,
             dtypes=None, returns: str | None = None, ties: str = "n/a",
             name: str | None = None, temp_factor: float = 1.0, quick_check: bool = False,
             baseline: bool = False, builtin: bool = False, requires: tuple[str, ...] = (),
             backward=None, no_backward: str = "", no_backward_when=None, outside_when=None,
             native_layouts: tuple[str, ...] = CASE_LAYOUTS):
    """Decorator registering ``prepare`` as a strategy of operator ``op``.

    ``returns``: which of the operator's ``outputs`` it returns; left out, the
    whole output (the check then holds it to all of it). ``backward``: its
    explicit backward (``Strategy.backward``); ``no_backward``: why it has
    none; ``no_backward_when``: the cases its backward cannot do (all three
    docs/SPEC.md §1.5, impls/training.py); ``outside_when``: the cases it does
    not compute at all (``Strategy.outside_when``; left out, the operator's
    ``default_outside_when``, and ``every_case`` for none); ``native_layouts``:
    the case layouts its prepare takes as they are (``Strategy.native_layouts``:
    any other is converted inside its timed call). Registering the same function again from
    the same module replaces it; another function under a name already taken
    is an error naming both."""

    def decorate(prepare):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; known: {', '.join(sorted(BACKENDS))}")
        operator = get_operator(op)
        strategy_name = name or prepare.__name__
        old = operator.strategies.get(strategy_name)
        if old is not None and not _same_source(old.prepare, prepare):
            raise ValueError(f"strategy {op}/{strategy_name} registered twice: by {defined_at(old.prepare)} and by "
                             f"{defined_at(prepare)}; rename one (name=...)")
        if baseline and operator.baseline not in (None, strategy_name):
            raise ValueError(f"strategy {op}/{strategy_name}: {op} already has a baseline "
                             f"({operator.baseline}); an operator has exactly one")
        output = returns or operator.whole_output
        if output not in operator.outputs:
            raise ValueError(f"strategy {op}/{strategy_name}: returns={output!r} is not one of {op}'s outputs "
                             f"({', '.join(map(repr, operator.outputs))})")
        if backward is not None and no_backward:
            raise ValueError(f"strategy {op}/{strategy_name}: declares both a backward and no_backward="
                             f"{no_backward!r}; drop one")
        unknown = [layout for layout in native_layouts if layout not in CASE_LAYOUTS]
        if unknown or "contiguous" not in native_layouts:
            raise ValueError(f"strategy {op}/{strategy_name}: native_layouts={tuple(native_layouts)!r} must name "
                             f"contiguous and only case layouts ({', '.join(CASE_LAYOUTS)})")
        record = get_backend(backend)
        doc = (prepare.__doc__ or "").strip()
        outside = operator.default_outside_when if outside_when is None else outside_when
        operator.strategies[strategy_name] = Strategy(
            op=op, name=strategy_name, backend=backend, prepare=prepare,
            source=source, devices=tuple(devices or record.devices),
            dtypes=tuple(dtypes or record.dtypes), returns=output,
            ties=ties, seed=source.startswith("seed"), doc=doc,
            temp_factor=temp_factor, quick_check=quick_check, baseline=baseline, builtin=builtin,
            requires=tuple(requires), backward=backward, no_backward=no_backward,
            no_backward_when=no_backward_when, outside_when=outside, native_layouts=tuple(native_layouts))
        return prepare

    return decorate


def check_registry() -> None:
    """Every operator has exactly one baseline strategy and a reference
    strategy that exists; raises ValueError naming the operator otherwise.
    Run once all strategies are registered (plugins included)."""
    for op in OPERATORS.values():
        if not op.strategies:
            raise ValueError(f"operator {op.name!r} has no strategies")
        if op.baseline is None:
            raise ValueError(f"operator {op.name!r} has no baseline strategy "
                             f"(mark the seed's original with @strategy(..., baseline=True))")
        if op.reference not in op.strategies:
            raise ValueError(f"operator {op.name!r}: reference strategy {op.reference!r} is not one of its "
                             f"strategies ({', '.join(op.strategies)})")
        unknown = [name for name in op.library_call if name not in op.strategies]
        if unknown:
            raise ValueError(f"operator {op.name!r}: library_call names {', '.join(unknown)}, not among its strategies")
        for strat in op.strategies.values():
            if strat.returns not in op.outputs:
                raise ValueError(f"strategy {strat.key}: returns={strat.returns!r} is not one of {op.name}'s "
                                 f"outputs ({', '.join(map(repr, op.outputs))})")


def speedup_note(op: str, statuses: Mapping[str, str]) -> str | None:
    """Why a case of ``op`` has no speedups over the seed's original (its
    strategies' statuses by name), or None when it has them."""
    if op not in OPERATORS:
        return f"{op} is not registered here (its plugin is not loaded), so its seed's original is unknown"
    return OPERATORS[op].missing_baseline(statuses)


def unranked_reason(op: str, name: str) -> str | None:
    """Why ``op``'s strategy ``name`` is not ranked (``Operator.unranked_reason``); None when it is."""
    return OPERATORS[op].unranked_reason(name) if op in OPERATORS else None


def get_operator(name: str) -> Operator:
    try:
        return OPERATORS[name]
    except KeyError:
        raise KeyError(f"unknown operator {name!r}; known: {', '.join(sorted(OPERATORS))}") from None


def all_strategies(op: str | None = None, device: str | None = None) -> list[Strategy]:
    ops = [get_operator(op)] if op else list(OPERATORS.values())
    found = [s for o in ops for s in o.strategies.values()]
    if device:
        found = [s for s in found if s.runs_on(device)]
    return found


# The compiled functions kept since Dynamo's last reset, by (function, what its
# graph is specialised on): the check prepares a strategy once per adversarial
# item, and its random and adversarial inputs of one shape, dtype and layout
# (and its training modes' leaves) share a graph instead of compiling it again.
# At most COMPILED_KEPT: Dynamo compiles at most 8 graphs of one function
# (its recompile limit) before it silently runs it eagerly, so past that many
# it is reset, as it was before every compile.
COMPILED_KEPT = 6
_COMPILED: dict = {}


def _specialised_on(value):
    """What a ``dynamic=False`` graph is specialised on in one argument (a
    tensor's shape, strides, dtype, device and whether it requires grad; a
    constant's value), or None for what cannot be keyed (never reused)."""
    if hasattr(value, "is_leaf") and hasattr(value, "stride"):
        return ("tensor", tuple(value.shape), tuple(value.stride()), value.storage_offset(), str(value.dtype),
                str(value.device), bool(value.requires_grad))
    try:
        hash(value)
    except TypeError:
        return None
    return ("value", type(value).__name__, value)


def compiled(fn, *args):
    """``torch.compile`` of ``fn(*args)``, compiled now (setup, outside the timed
    region) so that a call of the result runs the compiled code only. The
    same module-level ``fn`` on arguments its graph is specialised on alike
    (``_specialised_on``) reuses the graph compiled for them (``_COMPILED``)."""
    import torch

    signature = tuple(_specialised_on(arg) for arg in args)
    key = (fn, signature) if None not in signature else None
    compiled_fn = _COMPILED.get(key) if key is not None else None
    if compiled_fn is None:
        if key is None or len(_COMPILED) >= COMPILED_KEPT:
            torch._dynamo.reset()  # no stale graphs, no recompile limit
            _COMPILED.clear()
        compiled_fn = torch.compile(fn, dynamic=False)
        compiled_fn(*args)
        if key is not None:
            _COMPILED[key] = compiled_fn
    return lambda: compiled_fn(*args)
