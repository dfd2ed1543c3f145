"""What a check spends its work on, counted: the strategies' calls, the
float64 oracle's runs, and the compilations the calls trigger (torch.compile's
graphs, JAX's traces and XLA compiles, Triton's autotuner and the kernels it
specialises), each with the seconds it took.

On a GPU the check of gpu.yaml took 11 minutes, and not in the strategies'
own work: autotune benchmarks at every check size, references computed again
for every strategy, a fresh ``jax.jit`` per training item. None of that shows
on a CPU in seconds, but all of it shows in these counts, so CI holds the
check's counts at tiny sizes (tests/harness/measuring/test_work_counts.py)
and ``scatterbench check --counts FILE`` records them per operator for
``scatterbench plan`` (harness/measuring/plan.py) to estimate a window with.

``FIELDS`` is the one list of what is counted: each is a count and, where the
library says how long it took, seconds (``<name>_s``). The counts are this
process's; ``install()`` hooks the libraries once per process (each worker
of the check installs its own, and sends back what each strategy key cost:
``since``). Nothing here changes what runs.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    name: str
    what: str
    timed: bool = True  # whether the seconds are known (``<name>_s``)


CALLS, ORACLE_RUNS = "calls", "oracle_runs"
TORCH_COMPILES, JAX_TRACES, JAX_COMPILES = "torch_compiles", "jax_traces", "jax_compiles"
TRITON_AUTOTUNER_RUNS, TRITON_BENCHMARKS, TRITON_COMPILES = (
    "triton_autotuner_runs", "triton_benchmarks", "triton_compiles")

FIELDS = (
    Field(CALLS, "calls of a strategy (the check's call 1 and the calls after it)"),
    Field(ORACLE_RUNS, "float64 oracle runs (a forward or a gradient oracle)"),
    Field(TORCH_COMPILES, "torch.compile compilations (Dynamo frames and lazily compiled backwards)"),
    Field(JAX_TRACES, "jax.jit traces (a new jit, or a jit meeting new shapes)"),
    Field(JAX_COMPILES, "XLA compilations (a persistent-cache hit is none)"),
    Field(TRITON_AUTOTUNER_RUNS, "launches through triton.autotune's tuner", timed=False),
    Field(TRITON_BENCHMARKS, "autotune benchmarks (do_bench of one config)"),
    Field(TRITON_COMPILES, "Triton kernels compiled (a specialisation; none under the interpreter)"),
)
NAMES = tuple(field.name for field in FIELDS)

_lock = threading.Lock()
_counts: Counter = Counter()
_seconds: Counter = Counter()
_installed: set[str] = set()


def add(name: str, seconds: float = 0.0, count: int = 1) -> None:
    if name not in NAMES:
        raise KeyError(f"{name!r}: not one of work_counts.FIELDS")
    with _lock:
        _counts[name] += count
        _seconds[name] += seconds


@contextmanager
def timed(name: str):
    """Counts one ``name`` and the seconds the block took (counted also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - start)


def snapshot() -> dict:
    """This process's counts so far: {name: count, name_s: seconds} for every field."""
    with _lock:
        out = {}
        for field in FIELDS:
            out[field.name] = _counts[field.name]
            if field.timed:
                out[field.name + "_s"] = round(_seconds[field.name], 6)
        return out


def since(before: dict) -> dict:
    """What was counted since ``before`` (a ``snapshot``)."""
    now = snapshot()
    return {key: (round(value - before.get(key, 0), 6) if key.endswith("_s") else value - before.get(key, 0))
            for key, value in now.items()}


def total(parts) -> dict:
    """The sum of several counts (``snapshot``/``since`` dicts)."""
    out = dict.fromkeys(snapshot(), 0)
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return {key: round(value, 6) if key.endswith("_s") else value for key, value in out.items()}


# ------------------------------------------------------------------ the hooks
def install(module: str) -> None:
    """Hooks ``module`` (a backend's library: torch, jax or triton; any other
    has nothing to count) once per process. The check calls it before each
    item with the item's backend, so a library no strategy uses is never
    imported for the counts' sake; a library that is not installed is
    skipped, and so is one whose version lacks the hook read (the check never
    fails for its counts)."""
    hook = _HOOKS.get(module)
    if hook is None or module in _installed:
        return
    _installed.add(module)
    try:
        hook()
    except (ImportError, AttributeError):  # not installed, or a version without the hook: not counted
        pass


def _hook_torch() -> None:
    from torch._dynamo.callback import callback_handler

    started: list[float] = []

    def start(args) -> None:
        started.append(time.perf_counter())

    def end(args) -> None:
        add(TORCH_COMPILES, time.perf_counter() - started.pop() if started else 0.0)

    callback_handler.register_start_callback(start)
    callback_handler.register_end_callback(end)


_JAX_EVENTS = {"/jax/core/compile/jaxpr_trace_duration": JAX_TRACES,
               "/jax/core/compile/backend_compile_duration": JAX_COMPILES}


def _hook_jax() -> None:
    import jax.monitoring

    def listen(event: str, duration_s: float, **kwargs) -> None:
        name = _JAX_EVENTS.get(event)
        if name:
            add(name, duration_s)

    jax.monitoring.register_event_duration_secs_listener(listen)


def _hook_triton() -> None:
    from triton.runtime.autotuner import Autotuner

    run, bench = Autotuner.run, Autotuner._bench

    def counted_run(self, *args, **kwargs):
        add(TRITON_AUTOTUNER_RUNS)
        return run(self, *args, **kwargs)

    def counted_bench(self, *args, **kwargs):
        with timed(TRITON_BENCHMARKS):
            return bench(self, *args, **kwargs)

    Autotuner.run, Autotuner._bench = counted_run, counted_bench
    try:
        from triton import knobs
    except ImportError:  # before Triton 3.4: no compile hooks to read
        return
    runtime = knobs.runtime
    before_compile, after_compile = runtime.jit_cache_hook, runtime.jit_post_compile_hook
    compiling: list[float] = []

    def cache_hook(*args, **kwargs):
        compiling.append(time.perf_counter())
        return before_compile(*args, **kwargs) if before_compile else False

    def post_compile_hook(*args, **kwargs):
        add(TRITON_COMPILES, time.perf_counter() - compiling.pop() if compiling else 0.0)
        return after_compile(*args, **kwargs) if after_compile else None

    runtime.jit_cache_hook, runtime.jit_post_compile_hook = cache_hook, post_compile_hook


_HOOKS = {"torch": _hook_torch, "jax": _hook_jax, "triton": _hook_triton}


def line(counts: dict) -> str:
    """One line of the non-zero counts: "calls 412 (3.1 s), oracle_runs 36 (0.2 s), ..."."""
    parts = []
    for field in FIELDS:
        value = counts.get(field.name, 0)
        if value:
            seconds = counts.get(field.name + "_s")
            parts.append(f"{field.name} {value}" + (f" ({seconds:.1f} s)" if field.timed and seconds else ""))
    return ", ".join(parts) or "nothing counted"
