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

import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

BACKENDS = ("numpy", "torch", "triton", "numba", "pytensor")
DEVICES = ("cpu", "cuda")
DTYPES = ("float16", "bfloat16", "float32", "float64")
# numpy has no bfloat16; the compiled CPU backends are written for real types.
BACKEND_DTYPES = {
    "numpy": ("float16", "float32", "float64"),
    "torch": DTYPES,
    "triton": ("float16", "bfloat16", "float32"),
    "numba": ("float32", "float64"),
    "pytensor": ("float32", "float64"),
}
BACKEND_DEVICES = {
    "numpy": ("cpu",),
    "numba": ("cpu",),
    "pytensor": ("cpu",),
    "torch": ("cpu", "cuda"),
    "triton": ("cuda",),
}
# Python module that must be importable for a backend to run at all.
BACKEND_MODULE = {"numpy": "numpy", "torch": "torch", "triton": "triton",
                  "numba": "numba", "pytensor": "pytensor"}


class NotApplicable(Exception):
    """Raised by ``prepare`` when a strategy cannot run this case by design.

    The case is recorded as ``skipped`` with the message, not as an error.
    """


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
    # Preconditions on the inputs beyond the operator's contract (SPEC 1.2), e.g.
    # "positions-in-window": every position lies inside its own window or bin, as
    # maxpool2d's indices do. ``list`` shows them; the check keeps the strategy
    # out of the cases whose inputs break one (an operator's ``extra_checks``).
    requires: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.op}/{self.name}"

    def runs_on(self, device: str) -> bool:
        # Triton kernels run on CPU tensors under its interpreter; that is how CI
        # checks their correctness (never how they are timed).
        if self.backend == "triton" and device == "cpu":
            return os.environ.get("TRITON_INTERPRET") == "1"
        return device in self.devices

    def available(self) -> str | None:
        """None when the backend can be imported, else the reason it cannot."""
        module = BACKEND_MODULE[self.backend]
        if importlib.util.find_spec(module) is None:
            return f"backend {self.backend!r} is not installed (pip install '.[{self.backend}]')"
        return None


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
    params: tuple[ParamSpec, ...]
    generate: Callable  # (params, mode, seed) -> dict[str, np.ndarray]
    oracle: Callable  # (float64 inputs, params) -> output
    bytes_moved: Callable  # (params, itemsize) -> int
    compare: Callable  # (out, ref, inputs, dtype, strategy) -> Verdict
    validate: Callable  # (params) -> None, raises ValueError naming the problem
    to_backend: Callable  # (inputs np, backend, device, dtype, layout) -> inputs
    baseline: str  # the seed's original strategy: speedups are over this one
    check_cases: Callable  # () -> list of small adversarial parameter dicts
    layouts: Callable  # (backend) -> layouts the check exercises
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


OPERATORS: dict[str, Operator] = {}


def register_operator(op: Operator) -> Operator:
    if op.name in OPERATORS:
        raise ValueError(f"operator {op.name!r} registered twice")
    OPERATORS[op.name] = op
    return op


def strategy(op: str, *, backend: str, source: str = "added", devices=None,
             dtypes=None, returns: str = "output", ties: str = "n/a",
             name: str | None = None, temp_factor: float = 1.0, quick_check: bool = False,
             requires: tuple[str, ...] = ()):
    """Decorator registering ``prepare`` as a strategy of operator ``op``."""

    def decorate(prepare):
        if backend not in BACKENDS:
            raise ValueError(f"unknown backend {backend!r}")
        operator = OPERATORS[op]
        strategy_name = name or prepare.__name__
        if strategy_name in operator.strategies:
            raise ValueError(f"strategy {op}/{strategy_name} registered twice")
        doc = (prepare.__doc__ or "").strip()
        operator.strategies[strategy_name] = Strategy(
            op=op, name=strategy_name, backend=backend, prepare=prepare,
            source=source, devices=tuple(devices or BACKEND_DEVICES[backend]),
            dtypes=tuple(dtypes or BACKEND_DTYPES[backend]), returns=returns,
            ties=ties, seed=source.startswith("seed"), doc=doc,
            temp_factor=temp_factor, quick_check=quick_check, requires=tuple(requires))
        return prepare

    return decorate


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
