"""The strategy registry: the suite's only global state.

A *strategy* is a plain function ``prepare(inputs, params) -> run`` where
``inputs`` are the operator's inputs already converted to the strategy's
backend and device, and ``run`` is a zero-argument callable that computes the
operator and returns its output. Everything built inside ``prepare`` (index
tables, kernels, compiled functions) is a one-time constant, excluded from the
timed region (SPEC 3); everything inside ``run`` is timed, output allocation
included.

An *operator* bundles what SPEC 1 asks for: a float64 oracle, a seeded input
generator, a bytes formula and a comparison rule. Operator modules register
themselves when ``impls`` is imported; importing them never imports an
optional backend (triton, numba, pytensor), which strategies load lazily.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from impls.backends import BACKENDS, DTYPES, LAYOUTS, NotApplicable, convert, devices, get_backend

__all__ = ["BACKENDS", "DTYPES", "devices", "NotApplicable", "Operator", "ParamSpec", "Strategy",
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
    returns: str = "output"  # maxpool2d: "values" or "values+indices"
    ties: str = "n/a"  # maxpool2d: "first" or "any"
    seed: bool = False  # one of the seeds' own strategies
    doc: str = ""
    # Extra bytes of temporaries per byte of operator traffic, for the memory guard.
    temp_factor: float = 1.0
    # Each new shape costs a compile (torch.compile): checks use a reduced case set.
    quick_check: bool = False
    # The seed's original strategy: speedups in tables and the report are over it.
    baseline: bool = False
    # A library's own built-in for this operator (what most users call): the
    # report measures the winner against the fastest of these.
    builtin: bool = False
    # Preconditions on the inputs beyond the operator's contract (SPEC 1.2), e.g.
    # "positions-in-window": every position lies inside its own window or bin, as
    # maxpool2d's indices do. ``list`` shows them; the check keeps the strategy
    # out of the cases whose inputs break one (an operator's ``extra_checks``).
    requires: tuple[str, ...] = ()

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
    # machine the gate runs on, and stable (see README, "Regression gate").
    reference: str
    # The inputs a layout applies to (the big ones) and the layouts worth
    # checking for this operator; each backend narrows them to what it has.
    layout_keys: tuple[str, ...] = ()
    check_layouts: tuple[str, ...] = LAYOUTS
    strategies: dict[str, Strategy] = field(default_factory=dict)
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

    @property
    def baseline(self) -> str | None:
        """The strategy marked ``baseline=True`` (the seed's original)."""
        return next((s.name for s in self.strategies.values() if s.baseline), None)

    @property
    def whole_output(self) -> str | None:
        """What the operator returns in full: its baseline's ``returns``."""
        return next((s.returns for s in self.strategies.values() if s.baseline), None)

    def partial(self, name: str) -> bool:
        """Whether strategy ``name`` returns less than the whole output
        (maxpool2d values without indices): it does less work, so it is
        never ranked against the others as the fastest."""
        strat = self.strategies.get(name)
        return bool(strat and self.whole_output and strat.returns != self.whole_output)

    def layouts(self, backend: str) -> tuple[str, ...]:
        offered = get_backend(backend).layouts
        return tuple(layout for layout in self.check_layouts if layout in offered)

    def to_backend(self, inputs, backend: str, device: str, dtype: str, layout: str = "contiguous") -> dict:
        return convert(inputs, get_backend(backend), device, dtype, layout, self.layout_keys)


OPERATORS: dict[str, Operator] = {}


def register_operator(op: Operator) -> Operator:
    if op.name in OPERATORS:
        raise ValueError(f"operator {op.name!r} registered twice")
    OPERATORS[op.name] = op
    return op


def strategy(op: str, *, backend: str, source: str = "added", devices=None,
             dtypes=None, returns: str = "output", ties: str = "n/a",
             name: str | None = None, temp_factor: float = 1.0, quick_check: bool = False,
             baseline: bool = False, builtin: bool = False, requires: tuple[str, ...] = ()):
    """Decorator registering ``prepare`` as a strategy of operator ``op``."""

    def decorate(prepare):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}; known: {', '.join(sorted(BACKENDS))}")
        operator = get_operator(op)
        strategy_name = name or prepare.__name__
        if strategy_name in operator.strategies:
            raise ValueError(f"strategy {op}/{strategy_name} registered twice")
        if baseline and operator.baseline:
            raise ValueError(f"strategy {op}/{strategy_name}: {op} already has a baseline "
                             f"({operator.baseline}); an operator has exactly one")
        record = get_backend(backend)
        doc = (prepare.__doc__ or "").strip()
        operator.strategies[strategy_name] = Strategy(
            op=op, name=strategy_name, backend=backend, prepare=prepare,
            source=source, devices=tuple(devices or record.devices),
            dtypes=tuple(dtypes or record.dtypes), returns=returns,
            ties=ties, seed=source.startswith("seed"), doc=doc,
            temp_factor=temp_factor, quick_check=quick_check, baseline=baseline, builtin=builtin,
            requires=tuple(requires))
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


PLUGINS_VARIABLE = "SCATTERBENCH_PLUGINS"


def load_plugins() -> None:
    """Imports the built-in operators, then the modules named in
    SCATTERBENCH_PLUGINS (comma-separated), which register extra backends,
    operators and strategies, and checks the registry. Every process of a run
    calls it (the CLI, an isolated case's child, the ceiling's child), so a
    plugin's backend is known wherever it is measured. Raises ValueError
    naming the module or the registry's problem."""
    import importlib
    import os

    import impls  # noqa: F401  (the built-in strategies first)

    for name in filter(None, (part.strip() for part in os.environ.get(PLUGINS_VARIABLE, "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ValueError(f"cannot import {name!r}: {error}") from None
    check_registry()


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


def compiled(fn, *args):
    """``torch.compile`` of ``fn(*args)``, compiled now (setup, outside the timed
    region) so that a call of the result runs the compiled code only."""
    import torch

    torch._dynamo.reset()  # one case at a time: no stale graphs, no recompile limit
    compiled_fn = torch.compile(fn, dynamic=False)
    compiled_fn(*args)
    return lambda: compiled_fn(*args)
