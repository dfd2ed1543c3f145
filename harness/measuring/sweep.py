"""Running a sweep: every case checked against the oracle, then timed, then
recorded; a failing case is a row with its status, and the sweep goes on.
The strategies of one point (operator, parameters, dtype, device, mode) are
timed together, in rounds (SPEC 3): a fresh random order and a fresh prepare
each round, so that a slow minute of the machine, or a slow state set when a
strategy was prepared, falls on all of them (``time_in_rounds``).

``plan_run`` turns a config and the command line's selection into the cases
to run and where they go; ``execute_run`` measures the ceilings, writes the
metadata and runs the cases, each finished case appended to the result
directory at once. ``execute_case`` is the whole life of one case; it runs
in-process, or in a child process per case under ``--isolate`` (a crash or a
hang in native code then costs only that case).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from harness.base.config import (
    Case,
    Config,
    expand,
    load_config,
    measurement_differences,
    shard,
    with_threads,
)
from harness.base.errors import UsageError
from harness.base import caches
from harness.base.format import shorten
from harness.base.loaded_code import loaded_code
from harness.measuring import ceilings as machine_ceilings
from harness.measuring import check, facts, memory, pinning, prefetch, timing, verdict_cache
from harness.measuring.check import PHASE_CHECK, Reference, reference
from harness.measuring.session import Interrupted, PhaseClock, RunOutcome, RunSession  # noqa: F401 - Interrupted: sweep's public name
from harness.results import floors, racing, stats, store
from impls import training
from impls.backends import NotApplicable, device_present, get_backend, itemsize
from impls.common import Verdict
from impls.registry import get_operator
from impls.status import CORRECT, ERROR, SKIPPED, TIMEOUT

# Phases of a case, as the progress display and phase_s name them (check and
# prepare/compile: harness/measuring/check.py). "adversarial": the strategy's adversarial
# check, once per strategy, device and dtype in a run, before its first case is timed.
PHASE_ADVERSARIAL, PHASE_TIME = "adversarial", "time"
# Waiting for the load the adversarial workers left to fall (facts.settle).
PHASE_SETTLE = "load settling"
# --isolate: the parent's share of a case (starting the child process, importing);
# the child's own phases are added to theirs.
PHASE_ISOLATED = "isolated process"


@dataclass
class CaseResult:
    row: dict
    samples_s: list
    round_sizes: list = field(default_factory=list)  # how many of samples_s each round took, in order


def backends_of(cases) -> set[str]:
    """The backends the cases' strategies run on."""
    return {get_operator(case.op).strategies[case.strategy].backend for case in cases}


# ---------------------------------------------------------------------- memory
def memory_guard(case: Case) -> str | None:
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    needed = memory.needed_bytes(op, strat, case.params_dict, case.dtype, case.mode)
    free = memory.free_bytes(get_backend(strat.backend), case.device)
    gap = memory.shortfall(needed, free, case.device)
    return f"{gap}: skipped before allocating" if gap else None


# ------------------------------------------------------------------------ case
def base_row(case: Case, run_id: str, ceiling_gbps: float) -> dict:
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    try:
        nbytes = training.bytes_moved(op, case.params_dict, itemsize(case.dtype), case.mode, strat.returns)
    except NotApplicable:  # an operator with no backward: its training rows are skipped, with no bytes
        nbytes = math.nan
    return {"run_id": run_id, "case_id": case.case_id, "op": case.op, "strategy": case.strategy,
            "backend": strat.backend, "device": case.device, "dtype": case.dtype,
            "params": case.params_json, "mode": case.mode, "layout": case.layout, "bytes": nbytes,
            "ceiling_gbps": ceiling_gbps, "floor_s": stats.floor_s(nbytes, ceiling_gbps), "source": strat.source,
            "status": "", "message": ""}


def fresh_floor(case: Case, row: dict, fresh_write_gbps: dict | None) -> dict:
    """The case's row's fresh-output-aware floor and % of it (``stats.fresh_floor``)."""
    return stats.fresh_floor(case.op, case.strategy, case.params_dict, case.dtype, case.device, case.mode, row,
                             fresh_write_gbps)


def _load_avg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return math.nan



@dataclass
class PendingCase:
    """A case checked correct, its rounds still to sample (``time_in_rounds``):
    the row so far, the verdict of its check, the timer's setting, and what
    each round gave. ``result`` is set once it is done: failed in a round, or
    finished (``finish``)."""
    case: Case
    row: dict
    strat: object
    backend: object
    ref: Reference
    verdict: Verdict
    flush: object
    cross_check: bool
    first_call_s: float
    timeout_s: float
    spent_s: float = 0.0  # of the case's time limit, the check included
    rounds: list = field(default_factory=list)  # timing.Timed per round
    result: CaseResult | None = None
    standing: racing.Standing | None = None  # its place in its point's race, once the race ends
    round_noise: float = math.nan  # the point's round-to-round noise the race judged by
    equivalence: float = math.nan  # the margin it judged with (the config's timing.equivalence)

    @property
    def round_medians(self) -> list[float]:
        return [float(np.median(timed.samples_s)) for timed in self.rounds]

    def budget_spent(self, timing_config) -> bool:
        """Its sampling budget (``budget_s`` of timed calls) spent, with at
        least ``min_samples`` samples and MIN_ROUNDS rounds: it races no more."""
        samples = [sample for timed in self.rounds for sample in timed.samples_s]
        return (len(self.rounds) >= racing.MIN_ROUNDS and len(samples) >= timing_config.min_samples
                and float(np.sum(samples)) >= timing_config.budget_s)

    def fail(self, status: str, message: str) -> None:
        self.row.update(status=status, message=message, load_avg=_load_avg())
        self.result = CaseResult(self.row, [])

    def finish(self) -> CaseResult:
        """The case's row from its rounds: the statistics of all their samples
        together, and each round's median (``round_medians_s``)."""
        if self.result is not None:
            return self.result
        samples = np.concatenate([timed.samples_s for timed in self.rounds])
        summary = stats.summarize(samples)
        xchecks = [timed.xcheck_s for timed in self.rounds if math.isfinite(timed.xcheck_s)]
        # The host clock's host cost is the call itself (its median over all samples); device
        # events measured it in round 1, and the later rounds reused it.
        events = self.backend.events(self.case.device) is not None
        host_s = self.rounds[0].host_s if events else summary.median_s
        self.row.update(summary.as_row(), host_s=host_s,
                        xcheck_s=xchecks[-1] if xchecks else math.nan,
                        slow_start=sum(timed.slow_start for timed in self.rounds),
                        gbps=stats.gbps(self.row["bytes"], summary.median_s),
                        pct_of_ceiling=stats.pct_of_ceiling(self.row["bytes"], summary.median_s,
                                                            self.row["ceiling_gbps"]),
                        round_medians_s=stats.round_medians_json(timed.samples_s for timed in self.rounds),
                        within_round_iqr_s=stats.within_round_iqr_s([timed.samples_s for timed in self.rounds],
                                                                    summary.median_s),
                        status=self.verdict.status, message=self.verdict.message, load_avg=_load_avg())
        if self.standing is not None:
            self.row.update(decision=self.standing.decision, decision_round=self.standing.round,
                            decided_against=self.standing.against, round_noise=self.round_noise,
                            equivalence=self.equivalence)
        self.result = CaseResult(self.row, samples.tolist(), [len(timed.samples_s) for timed in self.rounds])
        return self.result


def check_case(case: Case, config: Config, run_id: str, ceiling_gbps: float,
               ref: Reference | None = None, flush=None,
               on_phase: Callable[[str], None] = lambda phase: None,
               adversarial: check.AdversarialCheck | None = None, measure=None) -> CaseResult | PendingCase:
    """Everything of one case before its timed samples, in its mode (SPEC
    1.5): a ``CaseResult`` where it ends here (skipped, failed its
    adversarial or its own check, interpreted, or counted by ``measure``),
    else a ``PendingCase`` for ``time_in_rounds``. Never raises for a
    strategy's fault. See ``execute_case`` for the arguments."""
    row = base_row(case, run_id, ceiling_gbps)
    strat = get_operator(case.op).strategies[case.strategy]
    backend = get_backend(strat.backend)

    def finish(status: str, message: str = "", samples=()) -> CaseResult:
        row.update(status=status, message=message, load_avg=_load_avg())
        return CaseResult(row, list(samples))

    unavailable = strat.available()
    if unavailable:
        return finish(SKIPPED, unavailable)
    no_backward = training.applies(strat, case.mode, case.params_dict) or check.layout_skipped(strat, case.layout)
    if no_backward:
        return finish(SKIPPED, no_backward)
    too_big = memory_guard(case)
    if too_big:
        return finish(SKIPPED, too_big)
    if adversarial is not None and not strat.interpreted_on(case.device):
        on_phase(PHASE_ADVERSARIAL)
        failed = adversarial.failure(strat, case.device, case.dtype, mode=case.mode)
        if failed is not None:
            return finish(failed.status, failed.message)
    began = time.perf_counter()
    try:
        with timing.deadline(config.timing.timeout_s):
            on_phase(PHASE_CHECK)
            if ref is None:
                ref = reference(case.op, case.params_dict, case.dtype, "random", config.seed, case.mode,
                                device=case.device)
            # A case that will be timed is judged on call 1 and on the last of its last round's
            # samples (time_in_rounds); one that will not (counted, interpreted) on call 1 and call 2.
            timed_here = measure is None and not strat.interpreted_on(case.device)
            tried = check.attempt(strat, ref, case.dtype, case.device, case.layout, peak=True, on_phase=on_phase,
                                  repeat_call=1 if timed_here else check.SWEEP_REPEAT_CALL)
            verdict = tried.verdict
            row.update(setup_s=tried.setup_s, peak_mem_bytes=tried.peak_mem_bytes,
                       max_abs_err=verdict.max_abs_err, rel_err=verdict.rel_err)
            if verdict.status not in CORRECT:
                return finish(verdict.status, verdict.message)
            if strat.interpreted_on(case.device):
                # An interpreter's speed says nothing about the compiled kernel's.
                return finish(SKIPPED, f"checked under the {strat.backend} interpreter ({verdict.status}); "
                                       "not timed: the interpreter's speed is not the kernel's")
            if measure is not None:
                on_phase(PHASE_TIME)

                def make_run():
                    return check.prepare_case(strat, ref, ref.params, case.dtype, case.device, case.layout).run
                row.update(measure(make_run, backend, case.device))
                return finish(verdict.status, verdict.message)
            if flush is None:  # made only now: an unavailable backend's flush may not even import
                flush = backend.cache_flush(case.device)
    except check.STRATEGY_FAULTS as error:  # a reference too big, a flush failing, a call raising
        failed = check.failure_verdict(error, strat, case.device)
        return finish(failed.status, failed.message)
    # The check's prepared call is let go here: each round prepares its own (time_in_rounds), and
    # a group's strategies must not all hold their buffers at once while they wait for theirs.
    return PendingCase(case, row, strat, backend, ref, verdict, flush, config.timing.cross_check,
                       tried.first_call_s, config.timing.timeout_s, spent_s=time.perf_counter() - began)


def time_round(pending: PendingCase, share, on_phase: Callable[[str], None], cross_check: bool = False) -> None:
    """One round of one pending case: prepared afresh on new copies of its
    inputs, warmed up, sampled for the round's ``share`` of the budget, and
    its last timed call's output judged again (and its inputs, against their
    copy): a wrong answer in any round publishes no time. Every round is
    judged because any round may be a strategy's last (it leaves the race
    when the rounds decide it). A fault or the case's time limit (over all
    its rounds) ends the case with its status. ``cross_check``: time it with
    the independent timer too (CUDA), in one round of its race."""
    case, strat = pending.case, pending.strat
    began = time.perf_counter()
    remaining = pending.timeout_s - pending.spent_s
    try:
        if remaining <= 0:
            raise timing.CaseTimeout(f"exceeded the case time limit of {pending.timeout_s:g} s")
        with timing.deadline(remaining):
            on_phase(check.PHASE_PREPARE)
            prepared = check.prepare_case(strat, pending.ref, pending.ref.params, case.dtype, case.device,
                                          case.layout)
            on_phase(PHASE_TIME)
            # A call at least a round's warm-up long is its own warm-up: the check's call 1
            # compiled and touched what the code needs, and a fresh prepare does not undo that.
            warmed = pending.first_call_s if pending.first_call_s >= share.warmup_s else 0.0
            timed = timing.time_call(prepared.run, pending.backend, case.device, share, pending.flush,
                                     cross_check=pending.cross_check and cross_check, warmed_s=warmed,
                                     host_s=pending.rounds[0].host_s if pending.rounds else None,
                                     keep_last=True)
            output = timed.last_output
            pending.rounds.append(dataclasses.replace(timed, last_output=None))
            del timed
            # Every timed call must have computed the answer: the last of the round is judged
            # (a wrong one after the first shows there: state kept between calls), and the
            # inputs are compared with their copy.
            on_phase(PHASE_CHECK)
            count = sum(len(t.samples_s) + t.slow_start for t in pending.rounds)
            which = f"the last of its {count} timed samples (round {len(pending.rounds)})"
            again = check.judge_again(strat, prepared, pending.ref, case.dtype, case.device, case.layout,
                                      pending.verdict, calls=0, which=which, output=output)
            if again.status not in CORRECT:
                pending.fail(again.status, f"{again.message}; its timing is not published")
            else:
                pending.verdict = again
            del output, prepared
    except check.STRATEGY_FAULTS as error:
        failed = check.failure_verdict(error, strat, case.device)
        pending.fail(failed.status, failed.message)
    finally:
        pending.spent_s += time.perf_counter() - began


def round_order(order_seed: int, group: tuple) -> np.random.Generator:
    """The random generator of one point's round orders: the run's recorded
    seed (meta ``round_order_seed``) and the point itself, so a resumed run,
    or a reader repeating a run, draws the same orders for it."""
    key = zlib.crc32(json.dumps([str(part) for part in group]).encode())
    return np.random.default_rng([int(order_seed), key])


def time_in_rounds(pending: list[PendingCase], timing_config, rng: np.random.Generator,
                   on_phase: Callable[[str], None] = lambda phase: None, before=None) -> list[list[int]]:
    """SPEC 3 "Rounds" and "Racing": the pending cases of one point sampled
    in rounds, each in a fresh random order drawn from ``rng`` and each case
    prepared afresh every round (``time_round``), with a round's share of
    its budget (``timing.round_share``), so a slow period of the machine, or
    a slow state set at prepare time, falls on all of them and not on one
    strategy's block of samples. From the second round on, the rule of
    harness/results/racing.py takes out each strategy the rounds decide
    (slower than the fastest, or equivalent to it), and one whose budget is
    spent. Once one is left (the others decided, or failed) it is timed alone
    until its own budget is spent: a strategy that stays in the race to its
    end gets ``min_samples`` and its budget (SPEC 3). At most
    ``timing_config.max_rounds`` rounds.
    Each case's ``standing`` says where it ended. ``before(case)``: called as
    each case's round starts (what the run records in flight). Returns the
    order of each round (indices into ``pending``)."""
    share = timing.round_share(timing_config)
    equivalence = timing_config.equivalence
    in_race = list(range(len(pending)))
    # Only a strategy returning the whole output may lead: one that returns less (maxpool2d's values
    # alone) does less work, is never the answer, and must not send the others out as slower than it.
    eligible = {position for position, case in enumerate(pending)
                if not get_operator(case.case.op).partial(case.case.strategy)}
    left: dict[int, racing.Standing] = {}
    noise = racing.PRIOR_NOISE
    orders = []
    for index in range(timing_config.max_rounds):
        order = [int(i) for i in rng.permutation(len(pending))]
        orders.append(order)
        for position in order:
            if position not in in_race:
                continue
            if before:
                before(pending[position].case)
            time_round(pending[position], share, on_phase, cross_check=index == racing.MIN_ROUNDS - 1)
        in_race = [position for position in in_race if pending[position].result is None]  # failed: out
        if not in_race:
            break
        if index + 1 < racing.MIN_ROUNDS:
            continue
        # Alone: a case timed alone (no race), the one left by failures, or the race's winner once every
        # other strategy has left. It stays to the race's end: its whole budget and min_samples (SPEC 3).
        if len(in_race) < 2:
            if pending[in_race[0]].budget_spent(timing_config):
                break
            continue
        medians = {position: pending[position].round_medians for position in in_race}
        if index + 1 == racing.MIN_ROUNDS:
            noise = racing.point_noise(medians)
        leaving = racing.race_step(medians, in_race, noise, equivalence, eligible)
        front = racing.leader(medians, in_race, eligible)
        spent = [position for position in in_race
                 if position not in leaving and pending[position].budget_spent(timing_config)]
        if front in spent:  # the leader's budget is spent: the race ends with its round
            left.update(leaving)
            in_race = [position for position in in_race if position not in leaving]
            break
        leaving.update({position: racing.Standing(racing.UNDECIDED, len(medians[position]), front)
                        for position in spent})
        left.update(leaving)
        in_race = [position for position in in_race if position not in leaving]
    timed_ones = [position for position in range(len(pending)) if pending[position].result is None]
    if len(timed_ones) < 2:
        return orders
    medians = {position: pending[position].round_medians for position in timed_ones}
    standings = racing.final_standings(medians, [p for p in in_race if p in medians],
                                       {p: standing for p, standing in left.items() if p in medians}, eligible)
    for position, standing in standings.items():
        against = standing.against
        pending[position].standing = dataclasses.replace(
            standing, against=str(pending[against].case.strategy) if against != "" else "")
        pending[position].round_noise = noise
        pending[position].equivalence = equivalence
    return orders


def execute_case(case: Case, config: Config, run_id: str, ceiling_gbps: float,
                 ref: Reference | None = None, flush=None,
                 on_phase: Callable[[str], None] = lambda phase: None,
                 adversarial: check.AdversarialCheck | None = None, measure=None,
                 order_seed: int = 0) -> CaseResult:
    """Checks, then times one case alone, in its mode (SPEC 1.5), in its rounds
    (``time_in_rounds``; a sweep interleaves the rounds of a point's cases,
    ``run_sweep``). Never raises for a strategy's fault
    (``Interrupted`` and ``KeyboardInterrupt`` do propagate). ``flush``: the
    backend's cache flush for the device, made here unless the caller passes
    the one it keeps (an isolated case's child has none to pass). ``adversarial``:
    the run's adversarial check; a strategy that fails it is recorded with
    that failure and never timed (a strategy only interpreted on the device
    is never timed, so it is not held up by it). ``measure(make_run, backend,
    device) -> row fields``, when given, measures the checked case instead of
    the timer (the counting instrument, harness/measuring/callgrind.py); ``make_run()``
    prepares the strategy again on the same inputs and returns the new call,
    so that what the call touches is allocated where the measure chooses
    (counting prepares it in its own thread's fresh heap). In a training
    mode (``case.mode``), a strategy with no backward is ``skipped`` with the
    reason; otherwise ``training.prepare``'s call is checked against the
    gradient oracle (``ref``, drawn in the case's mode: ``check.reference``),
    timed and judged again, by the check's own path, as a forward call is."""
    checked = check_case(case, config, run_id, ceiling_gbps, ref, flush, on_phase, adversarial, measure)
    if isinstance(checked, CaseResult):
        return checked
    time_in_rounds([checked], config.timing, round_order(order_seed, case.group), on_phase)
    return checked.finish()


# ------------------------------------------------------------------ isolation
def execute_isolated(case: Case, config: Config, run_id: str, ceiling_gbps: float,
                     adversarial: check.AdversarialCheck | None = None,
                     order_seed: int = 0) -> tuple[CaseResult, dict]:
    """Runs ``execute_case`` in a fresh interpreter; a crash or hang costs only
    this case (its rounds are its own, not interleaved with its point's other
    strategies: they run in this process). The child asks ``adversarial``'s question only when the parent has no
    answer yet, and its answer comes back into ``adversarial``. Returns the result
    and the seconds the child spent per phase."""
    request = {"case": [case.op, case.strategy, case.device, case.dtype, case.params_dict, case.mode, case.layout],
               "config": config.model_dump(), "run_id": run_id, "ceiling_gbps": ceiling_gbps,
               "adversarial": None, "order_seed": order_seed}
    strat = get_operator(case.op).strategies[case.strategy]
    if adversarial is not None:
        asked, failure = adversarial.known(strat, case.device, case.dtype, mode=case.mode)
        request["adversarial"] = {"asked": asked, "failure": check.verdict_json(failure)}
    # The child's own deadline fires first; this one catches a native hang.
    limit = config.timing.timeout_s + 60
    try:
        child = subprocess.run([sys.executable, "-m", "harness", "_case"], input=json.dumps(request),
                               capture_output=True, text=True, timeout=limit,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except subprocess.TimeoutExpired:
        result = CaseResult(base_row(case, run_id, ceiling_gbps), [])
        result.row.update(status=TIMEOUT, message=f"isolated case killed after {limit:g} s")
        return result, {}
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        result = CaseResult(base_row(case, run_id, ceiling_gbps), [])
        reason = (f"killed by signal {-child.returncode}" if child.returncode < 0
                  else f"exited with status {child.returncode}")
        tail = shorten((child.stderr.strip().splitlines() or [""])[-1], 300)
        result.row.update(status=ERROR, message=f"isolated case {reason}" + (f": {tail}" if tail else ""))
        return result, {}
    answer = json.loads(lines[-1])
    if adversarial is not None and answer.get("adversarial", {}).get("asked"):
        adversarial.remember(strat, case.device, case.dtype, check.verdict_of_json(answer["adversarial"]["failure"]),
                             mode=case.mode, depends=answer["adversarial"].get("depends"))
    return CaseResult(answer["row"], answer["samples_s"], answer.get("round_sizes") or []), answer.get("phase_s", {})


def child_main(stdin_text: str) -> None:
    """Entry point of ``python -m harness _case``: one case from JSON, row to stdout."""
    from harness.base.config import parse_config

    request = json.loads(stdin_text)
    config = parse_config(request["config"], "<isolated case>")
    pinning.apply_threads(config.threads)
    # the mode and the layout: forward and contiguous where left out (a caller's own request)
    op, strategy, device, dtype, params, *rest = request["case"]
    case = Case(op, strategy, device, dtype, tuple(sorted(params.items())), *rest)
    strat = get_operator(op).strategies[strategy]
    adversarial = None
    if request.get("adversarial") is not None:
        adversarial = check.AdversarialCheck(config.seed, config.timing.timeout_s)
        if request["adversarial"]["asked"]:
            adversarial.remember(strat, device, dtype, check.verdict_of_json(request["adversarial"]["failure"]),
                                 mode=case.mode)
    clock = PhaseClock()
    result = execute_case(case, config, request["run_id"], request["ceiling_gbps"], on_phase=clock,
                          adversarial=adversarial, order_seed=request.get("order_seed", 0))
    clean = {key: (None if isinstance(value, float) and math.isnan(value) else value)
             for key, value in result.row.items()}
    answer = {"row": clean, "samples_s": [float(s) for s in result.samples_s], "round_sizes": result.round_sizes,
              "phase_s": clock.totals()}
    if adversarial is not None:
        asked, failure = adversarial.known(strat, device, dtype, mode=case.mode)
        # what this child loaded checking it: the parent keeps the verdict with it
        answer["adversarial"] = {"asked": asked, "failure": check.verdict_json(failure), "depends": loaded_code()}
    print(json.dumps(answer), flush=True)


# ---------------------------------------------------------------------- sweep
def strategy_key(case: Case) -> tuple[str, str, str, str]:
    """What a crash is blamed on: the strategy, on one device, in one dtype."""
    return case.op, case.strategy, case.device, case.dtype


def run_sweep(cases: list[Case], config: Config, writer, run_id: str, ceilings: dict,
              isolate: bool = False, on_case=None, on_phase=None,
              adversarial: check.AdversarialCheck | None = None, isolate_keys=frozenset(), measure=None,
              stop_before: Callable[[list[Case]], str | None] | None = None) -> list[dict]:
    """Runs ``cases`` point by point (the cases of one ``Case.group``, adjacent
    as ``expand`` lists them), appending each finished case to ``writer``;
    each strategy passes ``adversarial`` (the run's adversarial check, made here
    unless the caller keeps its own) before its first case is timed. A point's
    cases are each checked, then timed together in rounds (``time_in_rounds``,
    their orders drawn from the run's ``round_order_seed``, recorded in its
    metadata), then written. Each case is recorded in flight before each of
    its steps; a case whose ``strategy_key`` is in ``isolate_keys`` (one that
    crashed the run before) runs in its own process even without ``isolate``.
    ``measure``: see ``execute_case`` (counting takes no rounds).
    ``stop_before(point)``: a reason to stop before a point's cases (a budget
    spent: harness/measuring/plan.py), ending the run as interrupted by it;
    asked per point, since a point's cases are timed and written together."""
    rows = []
    ref, flushes, previous_case = None, {}, None
    adversarial = adversarial if adversarial is not None else check.AdversarialCheck(config.seed, config.timing.timeout_s)
    on_phase = on_phase or (lambda phase: None)
    order_seed = recorded_order_seed(writer, config.timing.max_rounds)
    for group in grouped(cases):
        stop = stop_before(group) if stop_before else None
        if stop:
            raise Interrupted(stop)
        results: dict[str, CaseResult] = {}
        pending: list[PendingCase] = []
        for case in group:
            if on_case:
                on_case(case, "start")
            ceiling = ceilings.get(case.device, math.nan)
            writer.begin_case({"case_id": case.case_id, "strategy_key": list(strategy_key(case))})
            if isolate or strategy_key(case) in isolate_keys:
                on_phase(PHASE_ISOLATED)
                results[case.case_id], child_phases = execute_isolated(case, config, run_id, ceiling, adversarial,
                                                                       order_seed)
                if isinstance(on_phase, PhaseClock):
                    on_phase.absorb(child_phases)
                continue
            if previous_case is None or previous_case.group != case.group:
                # The same point in the next training mode shares its inputs and oracles; any
                # other point lets the previous inputs go first.
                reuse = ref if ref is not None and same_case(previous_case, case) else None
                ref = None
                try:
                    if memory_guard(case) is None:
                        ref = reference(case.op, case.params_dict, case.dtype, "random", config.seed, case.mode,
                                        reuse=reuse, device=case.device)
                except MemoryError:
                    ref = None
                del reuse
            previous_case = case
            backend = get_backend(get_operator(case.op).strategies[case.strategy].backend)
            key = (backend.name, case.device)
            if key not in flushes:
                flushes[key] = backend.cache_flush(case.device)
            checked = check_case(case, config, run_id, ceiling, ref, flushes[key], on_phase, adversarial, measure)
            if isinstance(checked, CaseResult):
                results[case.case_id] = checked
            else:
                pending.append(checked)

        def before(case):
            if on_case:
                on_case(case, "start")
            writer.begin_case({"case_id": case.case_id, "strategy_key": list(strategy_key(case))})

        if pending:
            time_in_rounds(pending, config.timing, round_order(order_seed, group[0].group), on_phase, before)
        for item in pending:
            results[item.case.case_id] = item.finish()
        for case in group:
            result = results[case.case_id]
            result.row.update(fresh_floor(case, result.row, getattr(writer, "meta", {}).get("fresh_write_gbps")))
            result.row.update(floors.case_floor(case.op, case.strategy, case.params_dict, case.dtype, case.device,
                                                case.mode, result.row, getattr(writer, "meta", {}).get(floors.CURVES)))
            writer.append(result.row, result.samples_s, round_sizes=result.round_sizes)
            rows.append(result.row)
            if on_case:
                on_case(case, result.row)
    return rows


def grouped(cases: list[Case]) -> list[list[Case]]:
    """``cases`` cut into runs of adjacent cases of one point (``Case.group``):
    the strategies compared with each other, timed together in rounds."""
    groups: list[list[Case]] = []
    for case in cases:
        if groups and groups[-1][0].group == case.group:
            groups[-1].append(case)
        else:
            groups.append([case])
    return groups


def recorded_order_seed(writer, rounds: int) -> int:
    """The seed of the run's round orders: the one its metadata records (a
    resumed run keeps its own), else a fresh one, recorded there with the
    most rounds a race may run (``round_order_seed``, ``rounds``) so the orders can be drawn again."""
    meta = getattr(writer, "meta", None)
    if isinstance(meta, dict) and isinstance(meta.get("round_order_seed"), int):
        return meta["round_order_seed"]
    seed = int(np.random.SeedSequence().entropy % (1 << 63))
    if hasattr(writer, "update_meta"):
        writer.update_meta(round_order_seed=seed, rounds=rounds)
    return seed


def new_run_id(config_name: str) -> str:
    import secrets
    import socket

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    host = "".join(ch for ch in socket.gethostname() if ch.isalnum() or ch in "-_")[:20] or "host"
    return f"{stamp}-{host}-{safe_name(config_name)}-{secrets.token_hex(2)}"


def safe_name(text: str) -> str:
    """A name (a config's, a strategy's) as one path component: letters,
    digits, '-', '_' and '.', never '..' or a separator."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", str(text)).strip(".-") or "run"
    return cleaned.replace("..", "-")[:60]


def default_out_dir(run_id: str) -> Path:
    return Path("results") / safe_name(run_id)


# ------------------------------------------------------------------------ plan
@dataclass
class RunPlan:
    config_path: str
    config: Config
    cases: list[Case]
    out_dir: Path
    run_id: str
    resuming: bool
    shard_spec: tuple[int, int] | None = None
    done: int = 0
    notes: list[str] = field(default_factory=list)
    # Strategies (op, strategy, device, dtype) whose case was in flight when an
    # earlier attempt at this run died: their cases run isolated from now on.
    crashed: list[tuple] = field(default_factory=list)
    # A reason to stop before a case (``run_sweep``'s ``stop_before``): ``run --budget``'s.
    stop_before: Callable[[Case], str | None] | None = None


def select_cases(config: Config, op: str | None = None, strategies: list[str] | None = None,
                 device: str | None = None) -> list[Case]:
    """The config's cases narrowed by the command line; an empty result is a
    usage error naming why, never a silent no-op."""
    from impls.registry import OPERATORS

    cases = expand(config)
    if op:
        if op not in OPERATORS:
            raise UsageError(f"--op {op!r}: unknown operator (known: {', '.join(sorted(OPERATORS))})")
        if not any(b.op == op for b in config.benchmarks):
            raise UsageError(f"--op {op}: the config has no benchmark for it")
        cases = [c for c in cases if c.op == op]
    if strategies:
        known = {name for o in OPERATORS.values() for name in o.strategies}
        for name in strategies:
            if name not in known:
                raise UsageError(f"--strategy {name!r}: no operator has such a strategy "
                                 f"(see `scatterbench list`)")
        in_config = {c.strategy for c in cases}
        absent = [name for name in strategies if name not in in_config]
        cases = [c for c in cases if c.strategy in strategies]
        if absent and not cases:
            raise UsageError(f"--strategy {', '.join(absent)}: not selected by the config on any of its "
                             f"devices and dtypes")
    if not cases:
        raise UsageError(_why_empty(config))
    return cases


def _why_empty(config: Config) -> str:
    """Why a config selects no case (strategies whose devices or dtypes it never asks for)."""
    reasons = []
    for bench in config.benchmarks:
        op = get_operator(bench.op)
        names = list(op.strategies) if bench.strategies == "all" else bench.strategies
        for name in names:
            strat = op.strategies[name]
            devices = bench.devices or config.devices
            if not any(strat.runs_on(d) for d in devices):
                reasons.append(f"{name} runs on {', '.join(strat.devices)}, not {', '.join(devices)}")
            elif not set(strat.dtypes) & set(bench.dtypes or config.dtypes):
                reasons.append(f"{name} takes {', '.join(strat.dtypes)}")
    return "the selection holds no case" + (f" ({'; '.join(reasons[:3])})" if reasons else "")


def crashed_strategies(out_dir: Path, meta: dict, done: set) -> list[tuple]:
    """The strategies that crashed earlier attempts at a run: those recorded
    in its meta, and the one whose case was left in flight (unless that
    case's row was written after all)."""
    crashed = [tuple(key) for key in meta.get("crashed") or [] if isinstance(key, list) and len(key) == 4]
    in_flight = store.read_in_flight(out_dir)
    if in_flight and in_flight["case_id"] not in done:
        key = in_flight.get("strategy_key")
        if isinstance(key, list) and len(key) == 4 and tuple(key) not in crashed:
            crashed.append(tuple(key))
    return crashed


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard {text!r}: need 0 <= I < N")
    return index, count


def require_devices(config: Config) -> None:
    from harness.base.errors import ConfigError

    wanted = set(config.devices) | {d for b in config.benchmarks for d in (b.devices or [])}
    for device in sorted(wanted):
        if not device_present(device):
            raise ConfigError(f"devices: {device} requested but no {device} device is available here (no "
                              f"installed backend that runs on it finds one)")


def plan_run(config_path: str, *, output: str | None = None, resume: str | None = None,
             shard_text: str | None = None, op: str | None = None,
             strategies: list[str] | None = None, threads: str | None = None) -> RunPlan:
    """Everything decided before anything is measured: the cases, the run id,
    the output directory (checked writable, and free of another run).
    ``threads`` (``run --threads``): every backend's threads instead of the
    config's, a count or ``auto`` (``config.with_threads``)."""
    config = load_config(config_path)
    if threads is not None:
        config = with_threads(config, threads)
    require_devices(config)
    cases = select_cases(config, op, strategies)
    shard_spec = parse_shard(shard_text)
    if shard_spec:
        cases = shard(cases, *shard_spec)
    if resume:
        out_dir = Path(resume)
        meta = store.read_meta(out_dir)
        differences = measurement_differences(meta.get("config"), config.model_dump())
        if differences:
            raise UsageError(f"--resume {out_dir}: {config_path} measures differently from the run it would "
                             f"complete ({'; '.join(differences)}); resume with the run's own config "
                             f"({meta.get('config_file', 'see its meta.json')}) or start a new run")
        # A run names one commit: rows measured from other code would be published as that commit's.
        measured_at, here = meta.get("git_commit"), facts.git_commit()
        if measured_at and here and measured_at != here:
            raise UsageError(f"--resume {out_dir}: the run was measured at commit {measured_at[:12]} and this "
                             f"checkout is at {here[:12]}; resume it from that commit, or start a new run "
                             f"(scatterbench merge and report.py take runs of different commits side by side)")
        store.prepare_output_dir(out_dir, resuming=True)
        run_id = meta["run_id"]
        done = set(store.resumed_rows(out_dir)["case_id"])
        cases = [c for c in cases if c.case_id not in done]
        plan = RunPlan(str(config_path), config, cases, out_dir, run_id, True, shard_spec, len(done))
        plan.notes.append(f"resuming {out_dir}: {len(done)} cases done, {len(cases)} to run")
        plan.crashed = crashed_strategies(out_dir, meta, done)
        for op, name, device, dtype in plan.crashed:
            plan.notes.append(f"{op}/{name} ({device}, {dtype}) was running when an earlier attempt at this run "
                              f"died without a word (a crash in native code, or kill -9): its cases run each in "
                              f"its own process, as with --isolate")
        return plan
    suffix = f"-shard{shard_spec[0]}of{shard_spec[1]}" if shard_spec else ""
    run_id = new_run_id((config.name or "run") + suffix)
    out_dir = Path(output) if output else default_out_dir(run_id)
    store.prepare_output_dir(out_dir, resuming=False)
    return RunPlan(str(config_path), config, cases, out_dir, run_id, False, shard_spec)


# ------------------------------------------------------------------- execution
def execute_run(plan: RunPlan, argv: list[str], *, isolate: bool = False, on_start=None, on_case=None,
                on_phase=None, on_warning=None) -> RunOutcome:
    """Writes the metadata, measures the ceilings and runs the plan's cases,
    in a ``RunSession`` (harness/measuring/session.py: Ctrl-C and SIGTERM end
    it as ``interrupted``; a full disk ends it with every case written so far
    intact). ``on_start(ceilings, fresh_writes, notes)`` hears the quiet
    ceilings and what a reader must be told before the cases (a busy ceiling
    left unused, the verdicts taken from the cache); ``on_warning``, in one
    line, of unpinned thread pools on a loaded machine and of a cache file
    that could not be used. Returns what happened."""
    with RunSession(plan.out_dir, plan.run_id, on_phase=on_phase) as session:
        session.pin_threads(plan.config.threads)
        warning = pinning.oversubscription_warning(plan.config.threads, backends=backends_of(plan.cases))
        if warning and on_warning:
            on_warning(warning)
        writer = session.open(plan.config, plan.config_path, argv, **plan_meta(plan), isolate=bool(isolate))
        if plan.crashed:
            writer.update_meta(crashed=[list(key) for key in plan.crashed])
        caches.enable_compile_caches()
        session.clock("ceilings")
        measured = machine_ceilings.measure([c.device for c in plan.cases], plan.config.threads)
        machine_ceilings.remember(measured, plan.config.threads, on_warning=on_warning or caches.warn)
        writer.update_meta(**machine_ceilings.meta_after(writer.meta, measured), status="running",
                           ceiling_history=facts.ceiling_history(plan.out_dir, measured.ceilings, writer.meta))
        adversarial = check.AdversarialCheck(plan.config.seed, plan.config.timing.timeout_s)
        kept = verdict_cache.VerdictCache(plan.config.seed, session.threads, on_warning=on_warning or caches.warn)
        from_cache, asked = kept.preload(adversarial, plan.cases)
        writer.update_meta(adversarial_from_cache=from_cache)
        # Workers load the strategies from their files: only those whose code the cache's digest
        # covers (not one defined or patched in this process) are theirs to check.
        for_workers = [key for key in kept.keys(plan.cases) if kept.keeps(key[0])
                       and not adversarial.known(*key)[0]]
        workers = prefetch.workers_for(for_workers)
        if on_start:
            on_start(measured.ceilings, measured.fresh_writes,
                     measured.lines() + [verdict_cache.line(from_cache, asked, kept.path)]
                     + ([f"adversarial check: {len(for_workers)} strategy keys in {workers} worker processes, "
                         f"before any case is timed"] if workers else []))
        try:
            if workers:
                load_before = facts.one_minute_load()
                session.clock(PHASE_ADVERSARIAL)
                prefetch.prefetch(adversarial, for_workers, session.threads, workers)
                # Their load lingers in the average the fitness rule reads at each case's end.
                facts.settle(load_before, os.cpu_count(), on_wait=lambda: session.clock(PHASE_SETTLE))
            run_sweep(plan.cases, plan.config, writer, plan.run_id, measured.ceilings, isolate=isolate,
                      on_case=on_case, on_phase=session.clock, adversarial=adversarial,
                      isolate_keys=frozenset(plan.crashed), stop_before=plan.stop_before)
        finally:  # what was checked before Ctrl-C is kept too
            kept.save(adversarial, plan.cases)
        session.complete()
    return session.outcome


def same_case(first, second) -> bool:
    """Whether two cases differ at most in their training mode (and strategy)."""
    return first is not None and (first.op, first.params, first.dtype) == (second.op, second.params, second.dtype)


def plan_meta(plan: RunPlan) -> dict:
    """What meta.json says of a planned run (besides the session's own fields): its shard and size."""
    return {"shard": list(plan.shard_spec) if plan.shard_spec else None, "n_cases": len(plan.cases)}
