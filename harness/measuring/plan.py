"""A sweep's plan for a short device window: what each phase of ``make gpu``
should cost on a kind of device, from what earlier runs on it measured, and
the order that measures the most of the config first within a budget.

Estimates come from earlier result directories measured on the same device
(``device`` in their rows): a run's ``phase_s`` (seconds per phase, summed over
its resumed attempts), its rows (``setup_s``: the prepare/compile of a case;
``median_s``, ``host_s`` and ``n_samples``: what its timing cost), and the
step records ``make gpu`` leaves in ``DIR/steps`` (the check, the CUDA
tests and the report, with their seconds). Where nothing was measured a
phase's estimate is a default named here, and says so: every estimate carries
the text of where it comes from.

The order (``--budget``): the cases of one input point (operator, device,
dtype, parameters, every mode and strategy) stay together, as the sweep
needs them to share their inputs and oracles. **Per-operator coverage
first**: the cheapest point of each operator, operators by that cost, so a
window cut short still has every operator timed on the device; then the
other points by estimated seconds per case, cheapest first, so the rest of
the budget measures as many cases as it can. Every case of the config is in
the plan, done already, left for a later call past the budget, or named as
recorded without being measured (no backward in a training mode; more
memory than the device has) with the reason.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness.base.cases import mode_and_layout
from harness.base.config import Case, Config
from harness.base.errors import ResultError, UsageError
from harness.measuring import check, gpu_steps, memory, timing, verdict_cache
from harness.measuring.gpu_steps import read_steps
from harness.measuring.sweep import PHASE_ADVERSARIAL, PHASE_SETTLE, PHASE_TIME
from harness.results import store
from impls import training
from impls.backends import NotApplicable, itemsize
from impls.registry import OPERATORS, get_operator

# Defaults where no earlier run on the device measured a phase (each says why it is what it is).
DEFAULT_CEILINGS_S = 10.0  # three 1 GiB copies per device and the fresh-output writes: seconds, not minutes
# The adversarial check of one strategy key (strategy, device, dtype, mode) in a worker sharing the device:
# the H100's 228 keys outlasted 184 s in 16 workers (README "GPUs"), before checks stopped autotuning.
DEFAULT_ADVERSARIAL_S_PER_KEY = 1.0
# `make gpu`'s check of one item (a strategy prepared, called and judged on one adversarial case) where no
# check of the device was recorded: the H200's of 2026-12-04, 498 s in three steps, one worker
# (../shared/measurements/gpu-h200-2026-12-04), measured before the check stopped entering Triton's
# autotuner, kept its references and JAX jits for the whole check and resumed from its journal. Per item
# run: of its 6,956 checks, 444 were skipped before anything ran (config points over check.max_bytes, no
# backward), leaving 1,604 + 2,328 + 2,580 = 6,512, as `planned_checks` counts them.
H200_CHECK_S, H200_CHECK_ITEMS = 498, 6512
# Of those 498 s, the autotune benchmarks are counted and gone. That check forgot each item's tuned sizes
# (impls/tuning.py then), and Triton 3.6 benchmarks even the one config a prune leaves, so each autotuned
# kernel an item entered was one do_bench: 25 ms of warm-up and 100 ms of repetitions, at least
# DO_BENCH_S. Counted for the same config at that commit (a7e0d31) by benchmarks/check_counts.py on the
# CPU, Triton interpreted, as the autotuned kernels each item entered: maxpool2d 596, maxunpool 812,
# dispersion 496 (dispersion_pinv, which that check never reached, 503). The check enters no autotuner
# now (tests/harness/measuring/test_work_counts.py counts 0). The rest of the 498 s is kept per item,
# though the check has since cut more of it (one process for three, references kept, JAX jits reused):
# those are not counted in seconds, so the figure stays an upper bound until a GPU measures the check.
H200_CHECK_BENCHMARKS = {"maxpool2d": 596, "maxunpool": 812, "dispersion": 496}
DO_BENCH_S = 0.125
DEFAULT_CHECK_S_PER_ITEM = (H200_CHECK_S - sum(H200_CHECK_BENCHMARKS.values()) * DO_BENCH_S) / H200_CHECK_ITEMS
# A case's oracle and judging where no run on the device recorded the sweep's check phase: the
# harness's own work on the case (its first call's judging, each round's judging again), plus its
# share of its point's inputs, drawn and rounded on the host once per point and dtype (its training
# modes share them); the device's float64 oracle and compares are milliseconds at a GPU's rate.
# Measured on the 2-core VM, 2026-12-04: benchmarks/gpu_rehearsal.py (gpu.yaml at small sizes, every
# strategy that runs on the CPU) spent 3.8 s in the check phase over 313 cases; drawing and rounding
# gpu.yaml's nine points took 30.6 s a dtype (numpy's standard_normal and float16 rounding, one
# core), per byte of the point's float64 reference (memory.reference_bytes) by operator:
CHECK_HARNESS_S_PER_CASE = 3.8 / 313
INPUT_S_PER_REFERENCE_BYTE = {"maxpool2d": 9.96 / 3.02e9, "maxunpool": 12.49 / 10.54e9,
                              "dispersion": 8.07 / 4.58e9, "dispersion_pinv": 0.05 / 4.58e9}
INPUT_S_PER_REFERENCE_BYTE_ELSE = 30.6 / 22.7e9  # an operator not measured: all nine points' rate
DEFAULT_PREPARE_S = 2.0  # a compile or an autotune per case (the H200's triton_fused: 2 to 5 s)
DEFAULT_PYTEST_S = 120.0  # `pytest -m cuda`: the H200's was cut at 90 s after its first test
# report.build of gpu.yaml's rows, figures included: 14.7 s for benchmarks/gpu_rehearsal.py's 313 rows
# on the 2-core VM, 2026-12-04 (host work: the GPU's machine builds it on its own CPU).
DEFAULT_REPORT_S = 15.0
# Racing (SPEC 3): of a point's strategies in one mode, one runs all max_rounds rounds and the others
# leave when decided. benchmarks/gpu_rehearsal.py, 2026-12-04: each of its 30 groups had one case run
# all 24 rounds; the other 263 left by round 3 (237 at round 2, the fewest rounds the race allows).
ROUNDS_TO_LEAVE = 3
# An unmeasured strategy's call, as a multiple of its floor (bytes at the copy ceiling), where no
# measured row of its backend gives the ratio.
DEFAULT_FLOOR_MULTIPLE = 10.0
# triton.testing.do_bench's warm-up and repetitions (timing.XCHECK_*_MS), and its estimate first (5
# calls) and launches: 10 ms more
XCHECK_S = (timing.XCHECK_WARMUP_MS + timing.XCHECK_REP_MS) / 1e3 + 0.010

# The plan's phases that are the sweep's cases' own (summed over them), and the report's.
PHASE_CASE_CHECK, PHASE_REPORT = "check per case", "report"
CASE_PHASES = (PHASE_CASE_CHECK, check.PHASE_PREPARE, PHASE_TIME)


# ---------------------------------------------------------------- what was measured
@dataclass
class Measured:
    """One earlier run on the device: its directory, meta, rows on the device, and its steps' records."""

    path: Path
    meta: dict
    rows: list[dict]
    steps: dict[str, dict]

    @property
    def label(self) -> str:
        gpu = self.meta.get("gpu_name")
        return f"{self.path}" + (f" ({gpu})" if gpu else "")


def measured_runs(roots, device: str) -> list[Measured]:
    """Every result directory under ``roots`` with rows on ``device``, newest first."""
    found, seen = [], set()
    for root in roots:
        if not Path(root).is_dir():
            continue
        for path in store.find_runs(root):
            if path.resolve() in seen:
                continue
            seen.add(path.resolve())
            try:
                meta, rows = store.read_meta(path), store.read_rows(path)
            except (ResultError, OSError, ValueError):
                continue  # a damaged directory estimates nothing; `report` names what is wrong with it
            on_device = rows[rows["device"] == device]
            # A run's steps are the device's when the run measures on it alone (the check and tests ran there).
            steps = read_steps(path) if _devices(meta.get("config")) == [device] else {}
            if len(on_device) or steps:
                found.append(Measured(path, meta, on_device.to_dict("records"), steps))
    return sorted(found, key=lambda run: str(run.meta.get("start_time") or ""), reverse=True)


def _devices(config) -> list[str]:
    """The devices a config (as parsed, or as meta.json holds it) measures on."""
    if isinstance(config, Config):
        config = config.model_dump()
    if not isinstance(config, dict):
        return []
    listed = list(config.get("devices") or ["cpu"])
    listed += [d for bench in config.get("benchmarks") or [] if isinstance(bench, dict) for d in bench.get("devices") or []]
    return list(dict.fromkeys(listed))


@dataclass(frozen=True)
class Estimate:
    seconds: float
    source: str  # where the figure comes from, or "no measurement: ..." and the default assumed

    @property
    def measured(self) -> bool:
        return not self.source.startswith("no measurement")


def seconds_text(seconds: float) -> str:
    """Seconds as the plan prints them: whole above 10, two figures below."""
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.2g}"


def _finite(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# --------------------------------------------------------------------- a case
@dataclass
class CaseCost:
    case: Case
    check_s: float
    prepare: Estimate
    time: Estimate
    skipped: str = ""  # recorded by the sweep without being measured: why

    @property
    def seconds(self) -> float:
        return 0.0 if self.skipped else self.check_s + self.prepare.seconds + self.time.seconds


def _compiles(case: Case) -> tuple[str, bool]:
    """What a strategy's prepare cost is most like: its backend, and whether it compiles per shape."""
    strat = get_operator(case.op).strategies[case.strategy]
    return strat.backend, bool(strat.quick_check)


def _case_bytes(case: Case) -> float:
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    try:
        return float(training.bytes_moved(op, case.params_dict, itemsize(case.dtype), case.mode, strat.returns))
    except NotApplicable:
        return math.nan


class CaseModel:
    """Each case's seconds from the rows of earlier runs on the device: the
    same case where measured, else its strategy's or its kind's (backend, and
    whether it compiles per shape) medians, else the defaults."""

    def __init__(self, runs: list[Measured], config: Config, device: str):
        self.config, self.device = config, device
        self.same: dict[str, tuple[dict, Measured]] = {}
        self.by_strategy: dict[tuple, list[float]] = {}
        self.by_kind: dict[tuple, list[float]] = {}
        self.floor_multiple: dict[str, list[float]] = {}
        self.ceiling = None
        for run in runs:  # newest first: the newest measurement of a case wins
            ceiling = _finite((run.meta.get("ceilings_gbps") or {}).get(device))
            self.ceiling = self.ceiling or ceiling
            for row in run.rows:
                if row["case_id"] not in self.same:
                    self.same[row["case_id"]] = (row, run)
                setup = _finite(row.get("setup_s"))
                if setup is not None and row["strategy"] in getattr(OPERATORS.get(row["op"]), "strategies", {}):
                    kind = _compiles(Case(row["op"], row["strategy"], device, row["dtype"], ()))
                    self.by_strategy.setdefault((row["op"], row["strategy"]), []).append(setup)
                    self.by_kind.setdefault(kind, []).append(setup)
                median, floor = _finite(row.get("median_s")), _finite(row.get("floor_s"))
                if median and floor:
                    self.floor_multiple.setdefault(str(row.get("backend")), []).append(median / floor)
        self.check_rate = _check_rate(runs)

    def prepare(self, case: Case) -> Estimate:
        measured = self.same.get(case.case_id)
        if measured and _finite(measured[0].get("setup_s")) is not None:
            return Estimate(float(measured[0]["setup_s"]), f"this case in {measured[1].path.name}")
        strategy = self.by_strategy.get((case.op, case.strategy))
        if strategy:
            return Estimate(statistics.median(strategy), f"median of {len(strategy)} {case.strategy} cases")
        backend, compiles = _compiles(case)
        kind = self.by_kind.get((backend, compiles))
        if kind:
            what = f"{backend}{' per-shape compiled' if compiles else ''}"
            return Estimate(statistics.median(kind), f"median of {len(kind)} {what} cases")
        return Estimate(DEFAULT_PREPARE_S, f"no measurement: assumes {DEFAULT_PREPARE_S:g} s")

    def call_s(self, case: Case) -> tuple[float, float, str]:
        """One call's device time and host time, and where they come from."""
        measured = self.same.get(case.case_id)
        if measured:
            row, run = measured
            median = _finite(row.get("median_s"))
            if median is not None:
                return median, _finite(row.get("host_s")) or 0.0, f"this case's median in {run.path.name}"
        backend = get_operator(case.op).strategies[case.strategy].backend
        multiples = self.floor_multiple.get(backend) or [m for ms in self.floor_multiple.values() for m in ms]
        multiple = statistics.median(multiples) if multiples else DEFAULT_FLOOR_MULTIPLE
        nbytes = _case_bytes(case)
        if not self.ceiling or not math.isfinite(nbytes):
            return 0.0, 0.0, "no measurement: assumes the timing budget bounds it"
        if not multiples:
            return nbytes / (self.ceiling * 1e9) * multiple, 0.0, f"no measurement: {multiple:g}× its floor"
        said = (f"{multiple:.1f}× its floor, the median of {backend}'s measured cases" if backend in self.floor_multiple
                else f"{multiple:.1f}× its floor, the median of every measured case")
        return nbytes / (self.ceiling * 1e9) * multiple, 0.0, said

    def timing_s(self, case: Case, raced: int = 1) -> Estimate:
        """The time phase of a case on a device with events (harness/measuring/timing.py ``time_device``),
        raced against ``raced - 1`` others (SPEC 3): its rounds' warm-ups and samples (all
        ``max_rounds`` of them reach the budget, or the fewest samples), one of the group's cases
        staying to the end and the others leaving after ``ROUNDS_TO_LEAVE`` rounds, shared evenly
        (which stays is the race's to find); its host cost's calls, and the cross-check's do_bench."""
        device_s, host_s, source = self.call_s(case)
        settings = self.config.timing
        call = max(device_s, host_s)
        whole = settings.warmup_s + max(settings.budget_s, settings.min_samples * (call + timing.device_delay_s(host_s)))
        rounds = max(1, int(settings.max_rounds))
        left_early = whole * min(rounds, ROUNDS_TO_LEAVE) / rounds
        seconds = (whole + (raced - 1) * left_early) / raced + timing.HOST_COST_CALLS * call
        seconds += XCHECK_S if settings.cross_check and self.device == "cuda" else 0.0
        if source.startswith("no measurement"):
            return Estimate(seconds, f"no measurement of its call: the timing settings alone ({source[16:].lstrip(': ')})")
        return Estimate(seconds, f"timing settings and {source}")

    def check_s(self, case: Case, point_cases: int = 1) -> float:
        """The sweep's check of ``case``: by the device's measured rate per byte, else the harness's
        per-case work and a ``point_cases``-th of drawing its point's inputs on the host."""
        nbytes = _case_bytes(case)
        if self.check_rate is not None and math.isfinite(nbytes):
            return nbytes * self.check_rate[0]
        op = get_operator(case.op)
        rate = INPUT_S_PER_REFERENCE_BYTE.get(case.op, INPUT_S_PER_REFERENCE_BYTE_ELSE)
        drawing = rate * memory.reference_bytes(op, case.params_dict) / max(point_cases, 1)
        return CHECK_HARNESS_S_PER_CASE + drawing

    def cost(self, case: Case, device_memory: float | None, raced: int = 1, point_cases: int = 1) -> CaseCost:
        strat = get_operator(case.op).strategies[case.strategy]
        skipped = training.applies(strat, case.mode, case.params_dict) or check.layout_skipped(strat, case.layout) or ""
        if not skipped and device_memory:
            needed = memory.needed_bytes(get_operator(case.op), strat, case.params_dict, case.dtype)
            if not memory.fits(needed, device_memory):
                skipped = f"needs about {needed / 2**30:.1f} GiB, the device has {device_memory / 2**30:.0f}"
        return CaseCost(case, self.check_s(case, point_cases), self.prepare(case), self.timing_s(case, raced), skipped)


def _check_rate(runs: list[Measured]) -> tuple[float, str] | None:
    """Seconds of the sweep's check phase (oracles and judging) per byte a case moves, from the
    newest run that recorded ``phase_s``: big points cost their oracles in proportion."""
    for run in runs:
        seconds = _finite((run.meta.get("phase_s") or {}).get(check.PHASE_CHECK))
        moved = sum(b for b in (_finite(row.get("bytes")) for row in run.rows) if b)
        if seconds is not None and moved > 0:
            return seconds / moved, run.label
    return None


# --------------------------------------------------------------------- the plan
@dataclass
class Point:
    """The cases of one input point: they share inputs and oracles, so they run together."""

    op: str
    dtype: str
    params: str
    costs: list[CaseCost]

    @property
    def seconds(self) -> float:
        return sum(cost.seconds for cost in self.costs)

    @property
    def measured(self) -> list[CaseCost]:
        return [cost for cost in self.costs if not cost.skipped]

    @property
    def modes(self) -> list[str]:
        """Its training modes, each with its layout where that is not contiguous (``backward channels_last``)."""
        return list(dict.fromkeys(_mode_label(cost.case) for cost in self.costs))


@dataclass
class Plan:
    config_path: str
    device: str
    phases: list[tuple[str, Estimate]]  # in the order `make gpu` runs them
    points: list[Point]  # in the order the sweep takes them
    sources: list[Measured]
    done: int = 0  # cases already in the run resumed
    budget_s: float | None = None
    fitting: int = 0  # cases, in order, that fit the budget after the phases before them
    notes: list[str] = field(default_factory=list)

    @property
    def cases(self) -> list[CaseCost]:
        return [cost for point in self.points for cost in point.costs]

    def order(self) -> list[Case]:
        return [cost.case for cost in self.cases]

    @property
    def sweep_s(self) -> float:
        return sum(point.seconds for point in self.points)

    @property
    def before_cases_s(self) -> float:
        """The phases before the first case: the check, the tests, the ceilings, the adversarial check."""
        return sum(e.seconds for name, e in self.phases if name not in CASE_PHASES + (PHASE_REPORT,))

    @property
    def total_s(self) -> float:
        return sum(estimate.seconds for _, estimate in self.phases)


def _mode_label(case: Case) -> str:
    return mode_and_layout({"mode": case.mode, "layout": case.layout})


def coverage_first(points: list[Point]) -> list[Point]:
    """The cheapest point of each operator first (operators by that cost), then
    the rest by seconds per measured case, cheapest first (see the module's docstring)."""
    def per_case(point: Point) -> float:
        return point.seconds / max(len(point.measured), 1)

    firsts = {}
    for point in sorted(points, key=lambda p: p.seconds):
        firsts.setdefault(point.op, point)
    head = sorted(firsts.values(), key=lambda p: p.seconds)
    chosen = {id(point) for point in head}
    return head + sorted((p for p in points if id(p) not in chosen), key=per_case)


def _device_memory(runs: list[Measured], device: str) -> float | None:
    if device == "cpu":
        return None  # the host's free memory is read by the sweep itself, when the case comes
    for run in runs:
        gpu = (run.meta.get("hardware") or {}).get("gpu") or {}
        found = _finite(gpu.get("memory_bytes"))
        if found:
            return found
    return None


def _step_estimate(runs: list[Measured], step: str, default: float, what: str, parts: int = 1) -> Estimate:
    """A step's seconds from the newest `make gpu` records of it, else ``default``. Runs before
    2026-12-05 recorded the check per operator (``step``-<op>, ``parts`` of them, the config's
    operators): the operators such a run did not record are taken at the mean of those it did."""
    for run in runs:
        whole = run.steps.get(step)
        if whole is not None:
            return Estimate(float(whole["seconds"]), f"{run.label}: steps/{step}.json")
        records = [record for name, record in run.steps.items() if gpu_steps.step_of(name) == step]
        if records:
            seconds = sum(float(r["seconds"]) for r in records)
            if len(records) < parts:
                return Estimate(seconds / len(records) * parts,
                                f"{run.label}: {len(records)} of {parts} steps/{step}-*.json, "
                                f"{seconds / len(records):.0f} s each")
            return Estimate(seconds, f"{run.label}: steps/{step}*.json ({len(records)} record{'s' * (len(records) > 1)})")
    return Estimate(default, f"no measurement: assumes {seconds_text(default)} s ({what})")


def _phase_estimate(runs: list[Measured], phase: str, default: float, what: str) -> Estimate:
    for run in runs:
        seconds = _finite((run.meta.get("phase_s") or {}).get(phase))
        if seconds is not None:
            return Estimate(seconds, f"{run.label}: phase_s[{phase!r}]")
    return Estimate(default, f"no measurement: assumes {seconds_text(default)} s ({what})")


def _adversarial_estimate(runs: list[Measured], keys: int) -> Estimate:
    """The adversarial check of ``keys`` strategy keys, from the newest run whose phase_s has it,
    per key it checked (those not taken from the verdict cache)."""
    for run in runs:
        phase_s = run.meta.get("phase_s") or {}
        seconds = _finite(phase_s.get(PHASE_ADVERSARIAL))
        asked = len({(r["op"], r["strategy"], r["dtype"], r.get("mode") or "forward") for r in run.rows})
        checked = asked - int(_finite(run.meta.get("adversarial_from_cache")) or 0)
        if seconds is not None and checked > 0:
            seconds += _finite(phase_s.get(PHASE_SETTLE)) or 0.0
            per_key = seconds / checked
            return Estimate(per_key * keys, f"{run.label}: phase_s, {per_key:.2f} s a key over its {checked} keys")
    return Estimate(DEFAULT_ADVERSARIAL_S_PER_KEY * keys,
                    f"no measurement: assumes {DEFAULT_ADVERSARIAL_S_PER_KEY:g} s a strategy key, {keys} keys")


def _left_of(estimate: Estimate, finished: dict[str, dict], name: str) -> Estimate:
    """``estimate`` of step ``name``, or nothing where ``finished`` (the resumed directory's steps)
    records it. A check cut midway is estimated whole: its journal's share is not counted off."""
    return Estimate(0.0, "finished already") if name in finished else estimate


def make_plan(config: Config, config_path: str, cases: list[Case], device: str, roots, *,
              budget_s: float | None = None, done: int = 0, steps: bool = True,
              finished: dict[str, dict] | None = None) -> Plan:
    """The plan of ``cases`` (the config's on ``device``, less those done) from the runs under ``roots``:
    of `make gpu`'s steps (``steps``; those ``finished`` in the run resumed cost nothing), or of the
    sweep alone (``run --budget``)."""
    finished = finished or {}
    runs = measured_runs(roots, device)
    model = CaseModel(runs, config, device)
    device_memory = _device_memory(runs, device)
    raced = Counter((case.op, case.dtype, case.params_json, case.mode, case.layout) for case in cases)
    point_cases = Counter((case.op, case.dtype, case.params_json) for case in cases)
    groups: dict[tuple, Point] = {}
    for case in cases:
        key = (case.op, case.dtype, case.params_json)
        cost = model.cost(case, device_memory, raced[key + (case.mode, case.layout)], point_cases[key])
        groups.setdefault(key, Point(case.op, case.dtype, case.params_json, [])).costs.append(cost)
    points = coverage_first(list(groups.values()))
    keys = len(verdict_cache.VerdictCache.keys(cases))
    adversarial = _adversarial_estimate(runs, keys)
    ops = gpu_steps.checked_ops(config)  # make gpu checks them in one step; older runs recorded one each
    checks = planned_checks(config, cases)
    check_estimate = _step_estimate(
        runs, gpu_steps.STEP_CHECK, sum(checks.values()) * DEFAULT_CHECK_S_PER_ITEM,
        f"{sum(checks.values())} items ({', '.join(f'{op} {n}' for op, n in checks.items())}) at "
        f"{DEFAULT_CHECK_S_PER_ITEM:.3f} s an item: the H200's check of 2026-12-04, "
        f"{H200_CHECK_S / H200_CHECK_ITEMS:.3f} s an item, less its "
        f"{sum(H200_CHECK_BENCHMARKS.values()):,} autotune benchmarks ({DO_BENCH_S:g} s each), which the check "
        f"no longer runs; an upper bound: its other costs since cut are not counted off", len(ops))
    sweep_phases = [
        ("ceilings", _phase_estimate(runs, "ceilings", DEFAULT_CEILINGS_S, "copies on the device")),
        ("adversarial (sweep)", Estimate(0.0, f"make gpu's check keeps its verdicts for the sweep; "
                                              f"the sweep alone: {adversarial.seconds:.0f} s ({adversarial.source})")
         if steps else adversarial),
        (PHASE_CASE_CHECK, _sum_estimate([c.check_s for p in points for c in p.measured], model.check_rate)),
        (check.PHASE_PREPARE, _case_phase([c.prepare for p in points for c in p.measured])),
        (PHASE_TIME, _case_phase([c.time for p in points for c in p.measured])),
    ]
    phases = [
        ("check (make gpu)", _left_of(check_estimate, finished, gpu_steps.STEP_CHECK)),
        (f"pytest -m {device}" if device == "cuda" else "pytest",
         _left_of(_step_estimate(runs, gpu_steps.STEP_PYTEST, DEFAULT_PYTEST_S, "its tests on the device"), finished,
                  gpu_steps.STEP_PYTEST)),
        *sweep_phases,
        (PHASE_REPORT, _step_estimate(runs, gpu_steps.STEP_REPORT, DEFAULT_REPORT_S, "report.build with its figures")),
    ] if steps else sweep_phases
    plan = Plan(config_path, device, phases, points, runs, done, budget_s)
    if not runs:
        plan.notes.append(f"no earlier run measured anything on {device} under {', '.join(map(str, roots))}: "
                          f"every figure is a default")
    plan.fitting = _fitting(plan)
    return plan


def planned_checks(config: Config, cases: list[Case]) -> dict[str, int]:
    """How many items ``check`` runs for ``cases``, per operator: every adversarial item and config
    point of ``check.check_plan`` but those skipped before anything runs (a config point over
    check.max_bytes, a case the strategy does not compute, a training mode it has no backward for)."""
    counts: dict[str, int] = {}
    for item in check.check_plan(config, cases):
        # an item the check skips before preparing anything: over max_bytes, or a case the
        # strategy does not compute (a window it was not written for) or has no backward for
        if not item.skip and not training.applies(item.strategy, item.training, dict(item.params)):
            counts[item.strategy.op] = counts.get(item.strategy.op, 0) + 1
    return counts


def _sum_estimate(seconds: list[float], rate) -> Estimate:
    total = sum(seconds)
    if rate is None:
        return Estimate(total, f"no measurement on the device: {CHECK_HARNESS_S_PER_CASE:.3f} s a case of harness work "
                               f"and drawing each point's inputs on the host, at the 2-core VM's rates, "
                               f"{len(seconds)} cases")
    return Estimate(total, f"{rate[1]}: phase_s['check'] per byte moved, {len(seconds)} cases")


def _case_phase(estimates: list[Estimate]) -> Estimate:
    """A phase summed over cases, saying how many of them rest on what."""
    kinds: dict[str, int] = {}
    for estimate in estimates:
        kind = ("no measurement" if not estimate.measured else "this case measured" if "this case" in estimate.source
                else "its strategy's or kind's median")
        kinds[kind] = kinds.get(kind, 0) + 1
    said = ", ".join(f"{count} cases: {kind}" for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]))
    source = said or "no case"
    if kinds.get("no measurement") == len(estimates) and estimates:
        source = "no measurement: " + estimates[0].source
    return Estimate(sum(e.seconds for e in estimates), source)


def _fitting(plan: Plan) -> int:
    """How many cases, in order, fit the budget after the phases before the sweep's cases (the
    report comes once the sweep is whole, in whichever call that is): the sweep stops before the
    first case that does not."""
    if plan.budget_s is None:
        return len(plan.cases)
    left, count = plan.budget_s - plan.before_cases_s, 0
    for cost in plan.cases:
        left -= cost.seconds
        if left < 0:
            break
        count += 1
    return count


# ------------------------------------------------------------------ the budget
class Budget:
    """``run --budget``: the sweep takes the plan's order, and stops before a
    case that would not end before the budget does (``stop_before``), so that
    a later ``--resume`` goes on from there with nothing measured lost."""

    def __init__(self, seconds: float, costs: dict[str, float], clock=None):
        self.seconds, self.costs = seconds, costs
        self.clock = clock or (lambda: time.monotonic())  # looked up at each call: a test's clock replaces it
        self.deadline = self.clock() + seconds

    def stop_before(self, point: list[Case]) -> str | None:
        """A reason to stop before ``point``, the cases the sweep times together
        in rounds (and writes together), when they would not end in time."""
        left = self.deadline - self.clock()
        needed = sum(self.costs.get(case.case_id, 0.0) for case in point)
        if needed > left:
            what = "case needs" if len(point) == 1 else f"point ({len(point)} cases) needs"
            return (f"budget of {self.seconds:g} s: the next {what} about {seconds_text(needed)} s and "
                    f"{seconds_text(max(left, 0))} s are left")
        return None


def budget_for(plan: Plan, seconds: float) -> Budget:
    return Budget(seconds, {cost.case.case_id: cost.seconds for cost in plan.cases})


# ------------------------------------------------------------------- printing
SOURCES_SHOWN = 3  # the newest runs named in the plan's head; each estimate names its own
def _per_op(costs: list[CaseCost]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for cost in costs:
        counts[cost.case.op] = counts.get(cost.case.op, 0) + 1
    return counts



def lines(plan: Plan) -> list[str]:
    """The plan as text: the phases with their sources, the order with its running total,
    the budget's cut, and every case the sweep records without measuring."""
    measured = sum(len(p.measured) for p in plan.points)
    out = [f"plan of {plan.config_path} on {plan.device}: {len(plan.cases)} cases to run"
           + (f" ({plan.done} done already)" if plan.done else "")
           + f", {measured} measured and {len(plan.cases) - measured} recorded as skipped, "
             f"in {len(plan.points)} input points"]
    if plan.sources:
        shown = plan.sources[:SOURCES_SHOWN]
        more = len(plan.sources) - len(shown)
        out.append("estimated from: " + "; ".join(
            f"{run.label}, {len(run.rows)} rows" + (", phase_s" if run.meta.get("phase_s") else ", no phase_s")
            + (f", steps {', '.join(sorted(run.steps))}" if run.steps else "")
            for run in shown) + (f"; and {more} older runs" if more else ""))
    out += plan.notes
    out.append("")
    width = max(len(name) for name, _ in plan.phases)
    out.append(f"{'phase':<{width}}  {'seconds':>8}  from")
    for name, estimate in plan.phases:
        out.append(f"{name:<{width}}  {estimate.seconds:>8.0f}  {estimate.source}")
    out.append(f"{'total':<{width}}  {plan.total_s:>8.0f}  ({plan.total_s / 60:.1f} min of device time, "
               f"start-up not included)")
    out.append("")
    out.append("order (per-operator coverage first, then cheapest per case):")
    out.append(f"{'#':>3}  {'op':<16} {'dtype':<8} {'cases':>5} {'skip':>4} {'seconds':>8} {'cumul.':>8}  params, modes")
    running, counted = plan.before_cases_s, 0
    for index, point in enumerate(plan.points):
        within = min(max(plan.fitting - counted, 0), len(point.costs))
        if plan.budget_s is not None and counted <= plan.fitting < counted + len(point.costs):
            out.append(f"---- the budget of {plan.budget_s:g} s ends here"
                       + (f", {within} of the next point's {len(point.costs)} cases in it" if within else "")
                       + ": the rest is left for the next call (resume) ----")
        counted += len(point.costs)
        running += point.seconds
        out.append(f"{index + 1:>3}  {point.op:<16} {point.dtype:<8} {len(point.measured):>5} "
                   f"{len(point.costs) - len(point.measured):>4} {point.seconds:>8.0f} {running:>8.0f}  "
                   f"{point.params} {', '.join(point.modes)}")
    skipped = [cost for cost in plan.cases if cost.skipped]
    if plan.budget_s is not None:
        within = [cost for cost in plan.cases[:plan.fitting] if not cost.skipped]
        later = [cost for cost in plan.cases[plan.fitting:] if not cost.skipped]
        out.append("")
        out.append(f"within the budget: {len(within)} cases measured "
                   f"({', '.join(f'{op} {n}' for op, n in _per_op(within).items()) or 'none'}); "
                   f"left for the next call: {len(later)} cases")
    if skipped:
        out.append("")
        out.append(f"recorded as skipped, not measured ({len(skipped)} cases):")
        reasons: dict[str, list[str]] = {}
        for cost in skipped:
            reasons.setdefault(cost.skipped, []).append(
                f"{cost.case.op}/{cost.case.strategy} {cost.case.dtype} {_mode_label(cost.case)}")
        for reason, names in reasons.items():
            out.append(f"  {reason}: {len(names)} cases: {', '.join(sorted(set(names)))}")
    return out


# ---------------------------------------------------------- from the command line
DEFAULT_ROOTS = ("results",)  # where `plan` and `run --budget` look for earlier runs unless told


def plan_config(config_path: str, device: str | None, roots, *, budget_s: float | None = None,
                resume: str | None = None) -> Plan:
    """``scatterbench plan``: the plan of a config's cases on ``device`` (the config's first device
    when None), less those done in the run ``resume``, estimated from the runs under ``roots``
    (and ``resume`` itself). Needs no device: it measures nothing."""
    from harness.base.config import expand, load_config

    config = load_config(config_path)
    devices = _devices(config)
    device = device or devices[0]
    if device not in devices:
        raise UsageError(f"--device {device}: {config_path} measures on {', '.join(devices)} only")
    if budget_s is not None and not budget_s > 0:
        raise UsageError(f"--budget {budget_s:g}: must be a positive number of seconds")
    cases = [case for case in expand(config) if case.device == device]
    done: set = set()
    if resume:
        if not Path(resume).is_dir():
            raise UsageError(f"--resume {resume}: no such directory")
        # make gpu's directory holds no run before its sweep starts, only the steps finished
        done = set(store.read_rows(resume)["case_id"]) if (Path(resume) / store.META).exists() else set()
        roots = [resume, *roots]
    left = [case for case in cases if case.case_id not in done]
    return make_plan(config, config_path, left, device, roots, budget_s=budget_s, done=len(cases) - len(left),
                     finished=read_steps(resume) if resume else None)


def apply_budget(run_plan, seconds: float, roots=DEFAULT_ROOTS) -> list[str]:
    """``run --budget``: ``run_plan``'s cases (a ``sweep.RunPlan``) in the plan's order, and its
    stop before a case the budget cannot hold, counted from now. Returns notes for the user."""
    if not seconds > 0:
        raise UsageError(f"--budget {seconds:g}: must be a positive number of seconds")
    roots = [run_plan.out_dir, *roots] if run_plan.resuming else list(roots)
    notes, ordered, costs = [], [], {}
    for device in dict.fromkeys(case.device for case in run_plan.cases):
        cases = [case for case in run_plan.cases if case.device == device]
        plan = make_plan(run_plan.config, run_plan.config_path, cases, device, roots, budget_s=seconds, steps=False)
        ordered += plan.order()
        costs.update((cost.case.case_id, cost.seconds) for cost in plan.cases)
        fits = sum(1 for cost in plan.cases[:plan.fitting] if not cost.skipped)
        notes.append(f"budget {seconds:g} s on {device}: the cases in the plan's order (per-operator coverage "
                     f"first), {plan.sweep_s:.0f} s estimated for {len(cases)} cases, about {fits} measured "
                     f"within the budget; the run stops before a case that would outlast it")
    run_plan.cases = ordered
    run_plan.stop_before = Budget(seconds, costs).stop_before
    return notes
