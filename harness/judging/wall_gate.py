"""The CI regression gate (``scatterbench regress BASELINE CONFIG``, run by
``make regress``): quiet under load, still sharp.

0. Baseline: the stored run measured on this CPU, or else one measured here
   and now from the stored baselines' commit (`choose_baseline`).
1. Screen: run CONFIG and compare it with BASELINE, normalised to each
   operator's declared reference strategy (a faster or slower machine
   cancels out), by the one regression rule on 10th percentiles rather than
   medians, at the square root of the gate factor (1.41 for 2.0): the screen
   only picks suspects, and a short sweep's ratios scatter. Measured on
   this VM, quiet, an unchanged strategy's screened ratio ranged 0.52-1.42,
   and on CI a planted 3x slowdown of a reference screened at 1.95 because
   a burst of load slowed the other strategies of its case more. Load from other processes only ever adds
   time, and it moves medians by 2-100x (measured: with the load average at
   4.6 on 2 cores, a torch Python loop's median grew 52x while its minimum
   grew 3.4x); a median-inflated reference would also hide a real slowdown
   of everything normalised by it.
2. Confirm: noise makes suspects, not verdicts. Each case the screen flags
   ``regressed`` is measured again in this process, in rounds with every
   other strategy of its case (a fresh random order and a fresh prepare each
   round, as the sweep's), so that all see the same moment's contention:
   per round, the fastest of a few calls of each. Against each
   other strategy, the suspect's ratio (median over rounds) is divided by the
   same ratio in the baseline (10th percentiles); the change is the lower
   median of these over the other strategies, so one that was noisy in the
   baseline, or got faster since, cannot decide (with two partners, the
   smaller: on CI, after numba's max-pool backward got 1.6-5x faster, the
   plain median, the mean of two, failed torch's at 14.4x, its other partner
   having screened at 1.16x). The suspect fails the gate only if that change exceeds the
   (full) factor in each of ``retries`` measurements. Pairing
   with all the others (not only the reference) also judges the reference
   itself. A case that breaks (correct before, failing its check now) fails
   at once: that is deterministic.
"""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.base.cases import in_group
from harness.base.checkout import ROOT
from harness.base.config import load_config
from harness.base.errors import ResultError
from harness.judging import compare, regression
from harness.measuring import facts, pinning, sweep, timing
from harness.measuring.check import prepare_case, reference
from harness.results import runmeta, stats, store
from harness.results.runmeta import RunMeta
from impls.backends import get_backend
from impls.registry import get_operator

DEFAULT_GATE_FACTOR = 2.0
DEFAULT_RETRIES = 2  # re-measurements of a suspect (`regress --retries`)
PAIRED_ROUNDS = 31
CALLS_PER_ROUND = 3


@dataclass
class BaselineChoice:
    """The stored baseline run (``run``): the one measured on this CPU, or
    else the newest, with the commit it was measured at (``commit``), whose
    code to measure here as the baseline instead; and a line saying which and
    why."""
    run: Path
    commit: str | None
    line: str




def choose_baseline(path) -> BaselineChoice:
    """What to gate against.

    ``path`` is one result directory, taken as it is, or a directory of
    them, one per CPU (as asv keeps results per machine): the one measured on
    this CPU (`runmeta.same_cpu`) is chosen. Normalising by a reference strategy
    cancels a uniformly faster or slower machine, not a different
    microarchitecture: measured on this project's VMs, with nothing changed,
    the ratio of dispersion/numba_fused to the other strategies of its case
    was 1.6-1.76x the AMD Zen 3 baseline's on an Intel Xeon, and 2.2x on an
    AMD Zen 4 that reports the same model name, "AMD EPYC" (a failed CI gate).
    Without a baseline from this CPU, the baseline is measured here, now,
    from the code of the commit the newest stored baseline was measured at,
    as ``asv continuous`` compares two commits on one machine (`run_gate`
    falls back to the newest stored baseline, saying so, when that cannot be
    done)."""
    path = Path(path)
    if (path / store.META).exists():
        return BaselineChoice(path, None, f"regress: baseline {path}")
    runs = [run for run in store.find_runs(path) if run.parent == path]
    if not runs:
        raise ResultError(f"{path}: no baseline result directory (meta.json) in it or directly under it")
    here = facts.hardware()
    described = f"{here['cpu_model']} {here.get('cpu_family_model') or ''} x{here['cpu_count']}".replace("  ", " ")
    metas = {run: store.read_meta(run) for run in runs}
    for run in reversed(runs):
        if runmeta.same_cpu(here, RunMeta.of(metas[run]).cpu()):
            return BaselineChoice(run, None, f"regress: baseline {run}, measured on this CPU ({described})")
    newest = runs[-1]
    commit = str(metas[newest].get("git_commit") or "").removesuffix("-dirty")
    stored = ", ".join(run.name for run in runs)
    if not commit:
        raise ResultError(f"{path}: no baseline was measured on this CPU ({described}; there are {stored}), and "
                          f"{newest / store.META} records no git commit to measure one from: `make baseline`")
    return BaselineChoice(newest, commit, (
        f"regress: no baseline under {path} was measured on this CPU ({described}; there are {stored}): "
        f"measuring one here from commit {commit[:12]}, which {newest.name} was measured at. "
        f"`make baseline` stores one for this CPU"))


def measure_baseline_at(commit: str, config_path, output: Path, extra_args=()) -> Path:
    """Run ``config_path`` with the code of ``commit`` (its own copy of the
    config where it has one, so that it names only strategies that code
    knows), in a subprocess on this machine, into ``output``; ``extra_args``
    go to its ``run`` (the count gate's ``--instrument callgrind``)."""
    root = ROOT
    try:
        found = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, capture_output=True,
                               timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        raise ResultError(f"cannot run git to measure a baseline at {commit[:12]} ({error})") from None
    if found.returncode != 0:
        raise ResultError(f"commit {commit[:12]} is not in the git history of {root}: cannot measure a baseline "
                          f"from it (`make baseline` stores one for this CPU from the current code)")
    output = Path(output).resolve()  # the child runs in the source directory
    source = output.parent / f"{output.name}-source"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=root, capture_output=True, timeout=120)
    if archive.returncode != 0:
        raise ResultError(f"git archive {commit[:12]} failed: {archive.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(source, filter="data")
    config = Path(config_path).resolve()
    try:
        own = source / config.relative_to(root)
        config = own if own.exists() else config
    except ValueError:
        pass
    # The old code first on the path, ahead of an editable install of this checkout.
    child_env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")])))
    try:
        done = subprocess.run([sys.executable, "-m", "harness", "run", str(config), "-o", str(output), "--no-progress",
                               *extra_args], cwd=source, env=child_env, stdout=subprocess.DEVNULL)  # errors: stderr
    finally:
        shutil.rmtree(source, ignore_errors=True)
    if done.returncode != 0:
        raise ResultError(f"measuring the baseline at commit {commit[:12]} failed (exit {done.returncode}; its "
                          f"output is above)")
    return output


def screening_factor(factor: float) -> float:
    """The ratio past which the screen makes a case a suspect: looser than
    the gate's factor (its square root, always > 1), since re-measurement
    decides."""
    return math.sqrt(factor)


@dataclass
class GateResult:
    table: pd.DataFrame
    failed: bool
    summary: str
    runs: list


def _fastest_call_s(run, clock: timing.Clock, calls: int) -> float:
    """The fastest of ``calls`` samples, each taken by the case's own clock
    (the sweep's: the backend's events, or the host clock and its synchronize)."""
    return min(clock.sample_s(run) for _ in range(calls))


def paired_times(op: str, params: dict, dtype: str, device: str, names: list[str], seed: int,
                 rounds: int = PAIRED_ROUNDS) -> list[list[float]]:
    """Per round, the fastest of a few calls of each strategy in ``names``
    (one list per round, in the order of ``names``), measured in this process
    in rounds as the sweep's (SPEC 3 "Rounds", harness/measuring/sweep.py):
    each round in a fresh random order (drawn from ``seed``) and each
    strategy prepared afresh and warmed up by one call, so that all see the
    same moment's contention and no state set at one prepare decides."""
    ref = reference(op, params, dtype, "random", seed)
    strategies = get_operator(op).strategies
    clocks = []
    for name in names:
        backend = get_backend(strategies[name].backend)
        clocks.append(timing.Clock(backend, device, backend.cache_flush(device)))
    order = np.random.default_rng(seed)
    times = [[math.nan] * len(names) for _ in range(rounds)]
    for round_times in times:
        for index in order.permutation(len(names)):
            prepared = prepare_case(strategies[names[index]], ref, params, dtype, device)
            _fastest_call_s(prepared.run, clocks[index], 1)  # warm-up
            round_times[index] = _fastest_call_s(prepared.run, clocks[index], CALLS_PER_ROUND)
            del prepared
    return times


def partners(table: pd.DataFrame, suspect) -> list[str]:
    """Every other strategy of the suspect's case that was timed in both runs
    (``table``: the screen's)."""
    case = in_group(table, suspect)
    timed = case[(case["strategy"] != suspect["strategy"]) & case["new_s"].notna() & case["base_s"].notna()]
    return [str(name) for name in timed["strategy"]]


def typical_times(rows: pd.DataFrame, samples: dict, suspect, names: list[str]) -> dict:
    """Each named strategy's time in the suspect's case of one run, as the
    screen takes it: the 10th percentile of its samples (its median where it
    has none)."""
    case = in_group(rows, suspect).set_index("strategy")
    return {name: stats.typical_s(samples[case.loc[name, "case_id"]], "p10")
            if case.loc[name, "case_id"] in samples else float(case.loc[name, "median_s"]) for name in names}


def confirmed_change(base_rows: pd.DataFrame, base_samples: dict, suspect, partners: list[str], seed: int) -> float:
    """How many times its baseline ratio to each partner the suspect's time
    now is, re-measured in alternation: the lower median over partners (so
    one partner that was noisy in the baseline, or got faster, cannot
    decide), or against its own baseline time when it has no partner. Baseline times are 10th
    percentiles of its samples, like the screen's."""
    names = [suspect["strategy"]] + partners
    rounds = paired_times(suspect["op"], json.loads(suspect["params"]), suspect["dtype"], suspect["device"],
                          names, seed)
    return partner_change(typical_times(base_rows, base_samples, suspect, names), rounds, names)


def partner_change(base: dict, rounds: list[list[float]], names: list[str]) -> float:
    """The confirmation's statistic: how many times its baseline ratio to
    each partner (``names[1:]``) the suspect's (``names[0]``) time now is,
    the lower median over partners, so the smaller of two (the median over ``rounds`` of the times now,
    one list per round in the order of ``names``); against its own baseline
    time when it has no partner. ``base``: baseline time per name. The
    dashboard applies it to a stored run (one round) instead of a re-measurement."""
    suspect, partners = names[0], names[1:]
    if not partners:
        return statistics.median(times[0] for times in rounds) / base[suspect]
    changes = []
    for index, partner in enumerate(partners, start=1):
        now = statistics.median(times[0] / times[index] for times in rounds)
        changes.append(now / (base[suspect] / base[partner]))
    return statistics.median_low(changes)


def screen_rule(rule: regression.Rule, retries: int = DEFAULT_RETRIES) -> regression.Rule:
    """Step 1's rule: 10th percentiles, at the `screening_factor` of the
    gate's, or at the full factor when no re-measurement follows
    (``retries`` 0), since the screen's verdict is then final."""
    return regression.Rule(screening_factor(rule.factor) if retries else rule.factor, rule.alpha, "p10")


def _screened(table: pd.DataFrame) -> pd.DataFrame:
    table["confirmed_ratio"] = math.nan  # filled by `settle` for each suspect
    return table


def screen(base_rows, base_samples, new_rows, new_samples, rule: regression.Rule) -> pd.DataFrame:
    """Step 1 on two runs' rows and samples (the dashboard's stored runs): the
    comparison normalised to each operator's reference, by `screen_rule`;
    its ``regressed`` rows are the suspects (`suspects`)."""
    return _screened(compare.compare_frames(base_rows, base_samples, new_rows, new_samples, screen_rule(rule),
                                            normalise=True))


def suspects(table: pd.DataFrame) -> pd.DataFrame:
    """The cases the screen flags: what step 2 confirms or clears."""
    return table[table["verdict"] == regression.REGRESSED]


def settle(table: pd.DataFrame, index, ratios: list[float], factor: float) -> bool:
    """Step 2's verdict on the suspect at ``index``, from its confirmed
    changes (`partner_change`, one per measurement): regressed only if every
    one exceeds ``factor``, else back to ``same``. Records the smallest."""
    confirmed = all(ratio > factor for ratio in ratios)
    table.loc[index, "confirmed_ratio"] = min(ratios)
    if not confirmed:
        table.loc[index, "verdict"] = regression.SAME
    return confirmed


def run_gate(baseline, config_path, rule: regression.Rule, output=None, retries: int = DEFAULT_RETRIES,
             log=lambda text: None) -> GateResult:
    """The gate (module docstring): step 0, the run of ``config_path``, step 1, step 2."""
    choice = choose_baseline(baseline)
    log(choice.line)
    out_root = Path(output) if output else Path(tempfile.mkdtemp(prefix="scatterbench-regress-"))
    baseline = _baseline_run(choice, config_path, out_root, log)
    config = load_config(config_path)
    new = _run_config(config_path, out_root / "run", log)
    table = _screened(compare.compare_dirs(baseline, new, screen_rule(rule, retries), normalise=True).table)
    if len(suspects(table)) and retries:
        _confirm_suspects(table, baseline, config, rule, retries, log)
    failing = compare.regressed(table)
    return GateResult(table, bool(len(failing)), _summary(table, failing, rule, retries), [new])


def _baseline_run(choice: BaselineChoice, config_path, out_root: Path, log) -> Path:
    """Step 0, once `choose_baseline` chose: the stored run, or one measured
    here from its commit (the stored one where that cannot be done)."""
    if not choice.commit:
        return choice.run
    try:
        return measure_baseline_at(choice.commit, config_path, out_root / "baseline")
    except ResultError as error:
        # A gate that stops CI because git is missing would be worse than
        # one that may cry wolf across CPUs: warn and use the stored one.
        log(f"regress: {error}; gating against {choice.run} instead, measured on another CPU: ratios "
            f"between strategies can shift across CPUs")
        return choice.run


def _run_config(config_path, output: Path, log) -> Path:
    """The run the gate judges, into ``output``."""
    plan = sweep.plan_run(str(config_path), output=str(output))
    outcome = sweep.execute_run(plan, ["scatterbench", "regress", str(config_path)],
                                on_warning=lambda text: log(f"warning: {text}"))
    if outcome.interrupted:
        raise KeyboardInterrupt
    return output


def _confirm_suspects(table: pd.DataFrame, baseline: Path, config, rule: regression.Rule, retries: int,
                      log) -> None:
    """Step 2 on every suspect of ``table``, in place: re-measured up to
    ``retries`` times against its partners (stopping at the first
    measurement within the factor), then `settle`."""
    flagged = suspects(table)
    pinning.apply_threads(config.threads)
    _, base_rows, base_samples = store.read_run(Path(baseline))
    log(f"regress: {len(flagged)} suspect(s); re-measuring each in alternation with the other strategies "
        f"of its case, up to {retries} time(s): "
        + ", ".join(f"{s['op']}/{s['strategy']}" for _, s in flagged.iterrows()))
    for index, suspect in flagged.iterrows():
        others = partners(table, suspect)
        ratios = []
        for _attempt in range(retries):
            ratios.append(confirmed_change(base_rows, base_samples, suspect, others, config.seed))
            if ratios[-1] <= rule.factor:
                break
        confirmed = settle(table, index, ratios, rule.factor)
        log(f"regress: {suspect['op']}/{suspect['strategy']} against {len(others)} other strateg"
            f"{'y' if len(others) == 1 else 'ies'}: {', '.join(f'{r:.3g}x' for r in ratios)} the "
            f"baseline's ratio -> {'confirmed' if confirmed else 'noise'}")


def _summary(table: pd.DataFrame, failing: pd.DataFrame, rule: regression.Rule, retries: int) -> str:
    """The verdict counts, the rule, and a FAIL line per failing case."""
    summary = (compare.counts_line(table)
               + f"  (factor {rule.factor:g}, screened at {screen_rule(rule, retries).factor:.3g}, "
               f"alpha {rule.alpha:g}, 10th percentiles, retries {retries})")
    for _, r in failing.iterrows():
        summary += f"\nFAIL {r['op']}/{r['strategy']} {r['device']} {r['dtype']} {r['params']}: {r['verdict']}"
        if math.isfinite(r["confirmed_ratio"]):
            summary += (f", {r['confirmed_ratio']:.3g}x the baseline's ratio to the other strategies of its case "
                        f"when re-measured")
    return summary
