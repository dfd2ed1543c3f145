"""Sweep configs: YAML read with a safe loader, validated by pydantic, then
checked against the registry; every problem is one line naming the key."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from harness.base.cases import CASE_GROUP
from harness.base.errors import ConfigError
from impls.backends import BACKENDS, CASE_LAYOUTS, LEGACY_THREAD_KEYS, thread_knobs
from impls.registry import DTYPES, OPERATORS, devices, get_operator
from impls.training import FORWARD, MODES

__all__ = ["Case", "CheckSettings", "Config", "ConfigError", "expand", "load_config", "parse_config", "shard"]



class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


# SPEC 3 "Racing": every strategy runs at least this many rounds (harness/results/racing.py).
MIN_ROUNDS = 2
# SPEC 3 "Racing": two strategies within this fraction of each other are equivalent.
DEFAULT_EQUIVALENCE = 0.05


class Timing(Strict):
    # docs/SPEC.md §3: at least 5 samples, whatever the budget; a median and IQR of fewer say little.
    min_samples: int = Field(5, ge=5)
    max_samples: int = Field(2000, ge=5)
    budget_s: float = Field(0.5, gt=0, le=3600)
    warmup_s: float = Field(0.05, ge=0, le=3600)
    timeout_s: float = Field(120.0, gt=0, le=86400)
    # CUDA: also time each case with triton.testing.do_bench and store it (xcheck_s)
    cross_check: bool = True
    # SPEC 3 "Rounds" and "Racing": the strategies of one point are sampled in rounds, a fresh
    # random order and a fresh prepare each round. After each round from the second, each one
    # still in the race is judged against the fastest (harness/results/racing.py): slower or
    # equivalent, it leaves; undecided, it runs another round while its budget lasts: at most
    # max_rounds rounds, and budget_s of sampling (each round a 1/max_rounds share of it; a
    # strategy that spends it keeps racing only until it has min_samples samples).
    max_rounds: int = Field(24, ge=MIN_ROUNDS, le=200)
    # Two strategies within this fraction of each other are "equivalent": an answer, either will do.
    equivalence: float = Field(DEFAULT_EQUIVALENCE, gt=0, lt=1)

    @model_validator(mode="after")
    def _max_at_least_min(self):
        if self.max_samples < self.min_samples:
            raise ValueError(f"max_samples {self.max_samples} is below min_samples {self.min_samples}")
        return self


# Threads per backend (its ThreadKnob in impls/backends.py); None leaves the library's default.
ThreadCount = Annotated[StrictInt, Field(ge=1)]


AUTO_THREADS = "auto"


def auto_thread_count() -> int:
    """``threads: auto`` (and a config that sets no threads): every core but
    one, at least one. A pool sized to every core waits for its slowest
    thread, and one neighbour on one core stalls it: maxunpool numba_fused
    1-D B=64 can take 10x longer from one run to the next on a 2-core machine.
    The core left free takes the neighbour."""
    import os

    return max(1, (os.cpu_count() or 1) - 1)


def _threads_by_backend(value):
    """``threads: 2`` sets every backend's knob; a mapping is keyed by backend
    name, and the suite's older keys still read (``blas`` is numpy's).
    ``auto``, for all or for one backend, is ``auto_thread_count()``,
    resolved here so that every reader (the run's metadata, the ceilings'
    key, the verdict cache) sees the count."""
    if value == AUTO_THREADS:
        value = auto_thread_count()
    if isinstance(value, int) and not isinstance(value, bool):
        return {backend.name: value for backend in thread_knobs()}
    if not isinstance(value, dict):
        return value
    value = {key: auto_thread_count() if count == AUTO_THREADS else count for key, count in value.items()}
    renamed, given = {}, {}
    for key, count in value.items():
        name = LEGACY_THREAD_KEYS.get(key, key)
        if name in renamed:
            older = key if key != name else given[name]
            raise ValueError(f"{given[name]!r} and {key!r} both set {name}'s threads ({older!r} is the older name)")
        renamed[name], given[name] = count, key
    return renamed


class CheckSettings(Strict):
    # `check` checks a config point only up to this many bytes read and written with
    # float64 values (the operator's bytes formula at 8 bytes a value: what the
    # float64 reference costs); a bigger point is named as skipped.
    max_bytes: int = Field(8 << 20, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data):
        if isinstance(data, dict) and "max_elements" in data:
            raise ValueError("max_elements is now max_bytes: the bytes a config point reads and writes with "
                             "float64 values (8 times the old number for float values)")
        return data


# Strict: YAML's `true` is not a size, and "64" is not 64.
ParamValue = Union[StrictInt, StrictStr]
# A grid is expanded only below this many points: a typo like 60 values on
# each of four axes (13 M cases) is refused before it fills the memory.
MAX_GRID_POINTS = 100_000


class Benchmark(Strict):
    op: str
    strategies: list[str] | Literal["all"] = "all"
    exclude: list[str] = []
    devices: list[str] | None = None
    dtypes: list[str] | None = None
    params: dict[str, ParamValue | list[ParamValue]]
    # docs/SPEC.md §1.5: what each case times; forward alone unless asked, so every
    # older config keeps its meaning.
    modes: list[Literal[MODES]] = Field([FORWARD], min_length=1)
    # docs/SPEC.md §2: how the 4-D inputs lie in memory; contiguous alone unless asked. A point
    # where a layout changes nothing (a 1-D unpool, one channel) is timed contiguous only.
    layouts: list[Literal[CASE_LAYOUTS]] = Field([CASE_LAYOUTS[0]], min_length=1)

    @field_validator("params")
    @classmethod
    def _grid_not_empty(cls, params):
        for key, value in params.items():
            if isinstance(value, list) and not value:
                raise ValueError(f"parameter {key!r} has an empty list: the grid would be empty")
        return params


class Config(Strict):
    name: str | None = None
    seed: int = Field(0, ge=0, le=2**63 - 1)
    devices: list[str] = ["cpu"]
    dtypes: list[str] = ["float32"]
    timing: Timing = Timing()
    # Absent: ``auto``, every backend's pool at every core but one (auto_thread_count).
    threads: Annotated[dict[str, ThreadCount | None], BeforeValidator(_threads_by_backend)] = Field(
        default_factory=lambda: _threads_by_backend(AUTO_THREADS), validate_default=True)
    check: CheckSettings = CheckSettings()
    benchmarks: list[Benchmark] = Field(min_length=1)


@dataclass(frozen=True)
class Case:
    """One timed measurement: an (operator, strategy, backend, device, dtype, params) row."""

    op: str
    strategy: str
    device: str
    dtype: str
    params: tuple  # sorted (name, value) pairs, hashable
    mode: str = FORWARD  # docs/SPEC.md §1.5: forward, backward or forward+backward
    layout: str = CASE_LAYOUTS[0]  # docs/SPEC.md §2: contiguous or channels_last

    @property
    def params_dict(self) -> dict:
        return dict(self.params)

    @property
    def params_json(self) -> str:
        return json.dumps(self.params_dict, sort_keys=True)

    @property
    def case_id(self) -> str:
        """Forward contiguous cases keep the id they had before modes and
        layouts existed, so older runs and baselines still match them; a
        training mode is appended, then a layout other than contiguous."""
        base = f"{self.op}|{self.strategy}|{self.device}|{self.dtype}|{self.params_json}"
        base = base if self.mode == FORWARD else f"{base}|{self.mode}"
        return base if self.layout == CASE_LAYOUTS[0] else f"{base}|{self.layout}"

    @property
    def group(self) -> tuple:
        """Cases sharing inputs and oracle: the values of `CASE_GROUP`."""
        return tuple(getattr(self, column) for column in CASE_GROUP)


def _location(loc) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def parse_config(data: Any, source: str = "<config>") -> Config:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        config = Config.model_validate(data)
    except ValidationError as error:
        errors = error.errors()
        # A misspelt key also makes the real one missing: name the misspelling, and what it should be.
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            missing = [str(e["loc"][-1]) for e in errors
                       if e["type"] == "missing" and tuple(e["loc"][:-1]) == tuple(first["loc"][:-1])]
            message = "unknown key" + _did_you_mean(str(first["loc"][-1]), missing)
        raise ConfigError(f"{source}: {_location(first['loc'])}: {message}") from None
    _check_machine(config, source)
    for index, bench in enumerate(config.benchmarks):
        _check_benchmark(config, bench, f"{source}: benchmarks[{index}]")
    return config


def _check_devices(listed, where: str) -> None:
    known = devices()
    for index, device in enumerate(listed):
        if device not in known:
            raise ConfigError(f"{where}[{index}]: unknown device {device!r} (known: {', '.join(known)})")


def _check_machine(config: Config, source: str) -> None:
    """Devices any registered backend runs on; threads keyed by a backend with a threads knob."""
    _check_devices(config.devices, f"{source}: devices")
    knobs = [backend.name for backend in thread_knobs()]
    for name in config.threads:
        if name not in knobs:
            what = "has no threads setting" if name in BACKENDS else "is not a backend"
            raise ConfigError(f"{source}: threads.{name}: {name!r} {what} (threads are keyed by backend: "
                              f"{', '.join(knobs)}; or one number for all)")


def _did_you_mean(word: str, candidates) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(candidates), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _check_benchmark(config: Config, bench: Benchmark, where: str) -> None:
    if bench.op not in OPERATORS:
        raise ConfigError(f"{where}.op: unknown operator {bench.op!r} (known: {', '.join(sorted(OPERATORS))})")
    op = get_operator(bench.op)
    known = op.strategies
    names = list(known) if bench.strategies == "all" else bench.strategies
    for key, listed in (("strategies", names), ("exclude", bench.exclude)):
        for name in listed:
            if name not in known:
                hint = _did_you_mean(name, known) or f" (see `scatterbench list --op {bench.op}`)"
                raise ConfigError(f"{where}.{key}: unknown strategy {name!r} for {bench.op}{hint}")
    if not [n for n in names if n not in bench.exclude]:
        raise ConfigError(f"{where}.strategies: no strategy left after exclude")
    _check_devices(bench.devices or [], f"{where}.devices")
    for key, dtypes in (("dtypes", config.dtypes), ("dtypes", bench.dtypes or [])):
        for dtype in dtypes:
            if dtype not in DTYPES:
                raise ConfigError(f"{where}.{key}: unknown dtype {dtype!r} (known: {', '.join(DTYPES)})")
    if bench.strategies != "all":
        for dtype in bench.dtypes or config.dtypes:
            for name in names:
                strat = known[name]
                if dtype not in strat.dtypes:
                    raise ConfigError(f"{where}.dtypes: {dtype} is not supported by {name} ({strat.backend} "
                                      f"takes {', '.join(strat.dtypes)})")
    specs = {spec.name: spec for spec in op.params}
    for key in bench.params:
        if key not in specs:
            raise ConfigError(f"{where}.params.{key}: unknown parameter for {bench.op} "
                              f"(expected {', '.join(specs)})")
    for key, spec in specs.items():
        if key not in bench.params and spec.choices is None and spec.required:
            raise ConfigError(f"{where}.params.{key}: missing")
        values = bench.params.get(key, [spec.choices[0]] if spec.choices else [])
        for value in values if isinstance(values, list) else [values]:
            _check_value(spec, value, f"{where}.params.{key}")
    points = 1
    for value in bench.params.values():
        points *= len(value) if isinstance(value, list) else 1
    if points > MAX_GRID_POINTS:
        raise ConfigError(f"{where}.params: the grid has {points:,} points, more than the {MAX_GRID_POINTS:,} "
                          f"a sweep may hold; split it into several benchmarks or configs")
    for point in _grid(op, bench.params):
        try:
            op.validate(point)
        except ValueError as error:
            raise ConfigError(f"{where}.params: {error}") from None
    for index, layout in enumerate(bench.layouts):
        if not any(op.layout_changes(point, layout) for point in _grid(op, bench.params)):
            why = (f"{bench.op} is not checked in {layout}, so it is not timed in it" if layout not in op.check_layouts
                   else f"it leaves every input of {bench.op} at these params in the same memory order")
            raise ConfigError(f"{where}.layouts[{index}]: {layout}: {why} (drop it)")


def _check_value(spec, value, where: str) -> None:
    if spec.choices is not None:
        if value not in spec.choices:
            raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, spec.choices))}")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}: expected an integer, got {value!r}")
    if spec.minimum is not None and value < spec.minimum:
        raise ConfigError(f"{where}: {value} is below the minimum {spec.minimum}")


def _grid(op, params: dict) -> list[dict]:
    names, values = [], []
    for spec in op.params:
        raw = params.get(spec.name, [spec.choices[0]] if spec.choices else None)
        if raw is None:  # an optional parameter this benchmark does not use
            continue
        names.append(spec.name)
        values.append(raw if isinstance(raw, list) else [raw])
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read ({error.strerror})") from None
    except UnicodeDecodeError as error:
        line = path.read_bytes()[: error.start].count(b"\n") + 1
        raise ConfigError(f"{path}: line {line}: not UTF-8 text") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}:{where}: malformed YAML: {problem}") from None
    config = parse_config(data, str(path))
    if config.name is None:
        config.name = path.stem
    return config


def with_threads(config: Config, threads: str) -> Config:
    """``config`` with every backend's threads set to ``threads`` (``run --threads``: a count, or
    ``auto``, as the config's ``threads:`` key takes them): one config measured at 1 thread and at
    every core, without a second file that repeats its benchmarks. A bad value is a one-line error."""
    text = str(threads).strip()
    if text == AUTO_THREADS:
        value = AUTO_THREADS
    elif text.isdigit() and int(text) >= 1:
        value = int(text)
    else:
        raise ConfigError(f"--threads {threads!r}: a count of threads (1 or more) or {AUTO_THREADS!r}")
    return config.model_copy(update={"threads": _threads_by_backend(value)})


def expand(config: Config) -> list[Case]:
    """Every case of the sweep, in a stable order, grouped so that cases sharing
    inputs are adjacent. A strategy is paired only with the devices and dtypes
    it supports; the others are not cases at all."""
    cases: list[Case] = []
    seen: set[str] = set()
    for bench in config.benchmarks:
        op = get_operator(bench.op)
        names = list(op.strategies) if bench.strategies == "all" else bench.strategies
        names = [n for n in names if n not in bench.exclude]
        for point in _grid(op, bench.params):
            for device in bench.devices or config.devices:
                for dtype in bench.dtypes or config.dtypes:
                    for mode in dict.fromkeys(bench.modes):
                        for layout in dict.fromkeys(bench.layouts):
                            if not op.layout_changes(point, layout):
                                continue
                            for name in names:
                                strat = op.strategies[name]
                                if not strat.runs_on(device) or dtype not in strat.dtypes:
                                    continue
                                case = Case(bench.op, name, device, dtype, tuple(sorted(point.items())), mode,
                                            layout)
                                if case.case_id not in seen:
                                    seen.add(case.case_id)
                                    cases.append(case)
    return cases


# What a case's measurement depends on beyond its own key (op, strategy,
# device, dtype, params): rows measured under different values of these are
# not one run, though their case ids match.
MEASUREMENT_KEYS = ("seed", "threads", "timing")


def measurement_differences(recorded: Any, config: Any) -> list[str]:
    """``key: recorded -> config`` for each measurement setting that differs
    between two configs as dumped into meta.json (missing on either side:
    an older run, not a difference)."""
    if not isinstance(recorded, dict) or not isinstance(config, dict):
        return []
    differences = []
    for key in MEASUREMENT_KEYS:
        if key not in recorded or key not in config:
            continue
        old, new = recorded[key], config[key]
        if key == "threads":  # older runs' keys (``blas``) as the config's
            old, new = _threads_by_backend(old), _threads_by_backend(new)
        if isinstance(old, dict) and isinstance(new, dict):
            # A setting the run did not record (a backend or timing key added
            # since) is not a difference; one it recorded and the config drops is.
            differences += [f"{key}.{name}: {old.get(name)!r} -> {new.get(name)!r}"
                            for name in sorted(old) if old.get(name) != new.get(name)]
        elif old != new:
            differences.append(f"{key}: {old!r} -> {new!r}")
    return differences


def shard(cases: list[Case], index: int, count: int) -> list[Case]:
    """The index-th of count slices (0-based), cut between groups of shared inputs."""
    groups: dict[tuple, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.group, []).append(case)
    ordered = list(groups.values())
    return [case for i, group in enumerate(ordered) if i % count == index for case in group]
