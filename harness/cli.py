"""``scatterbench`` (also ``python -m harness``): list, check, run, plan, gpu, launch, compare,
regress, baseline, merge, dashboard, report, cache.

This module parses and prints; the work is done by the module each command
names (check.py, sweep.py, compare.py, ...). Every subcommand is declared
once, with ``@command``. Exit status: 0 fine, 1 findings (a failed check, a
regression), 2 bad input or data (one line on stderr, no traceback unless
``--debug``), 3 `compare` of a pair the fitness rule refuses (one line on
stderr: which run, why; nothing broke), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

from harness.base.errors import (
    EXIT_FINDINGS,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_UNFIT,
    EXIT_USAGE,
    ResultError,
    ScatterbenchError,
    UsageError,
    retried_later,
)
from harness.results.metrics import COUNTS

__all__ = ["EXIT_FINDINGS", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_UNFIT", "EXIT_USAGE", "UsageError", "main"]


def arg(*flags, **options) -> tuple:
    return flags, options


def quoting(text: str, module: str, name: str) -> Callable[[], str]:
    """Help that quotes a default living in ``module`` as ``name`` (``{}``
    in ``text`` stands for it, with its format), read when the help is
    printed: the help cannot drift from the value, and parsing a command
    line does not import the module (pandas, torch) before SIGTERM is handled."""

    def text_now() -> str:
        import importlib

        return text.format(getattr(importlib.import_module(module), name))

    return text_now


class HelpParser(argparse.ArgumentParser):
    """Reads each `quoting` help when its help is printed."""

    def format_help(self) -> str:
        for action in self._actions:
            if callable(action.help):
                action.help = action.help()
        return super().format_help()


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    arguments: tuple
    run: Callable


COMMANDS: list[Command] = []


def command(name: str, help: str, *arguments):
    """Declares a subcommand: its name, one line of help, its arguments."""

    def register(run):
        COMMANDS.append(Command(name, help, arguments, run))
        return run

    return register


NO_PROGRESS = arg("--no-progress", action="store_true", help="no progress bar (CI logs)")
CONFIG = arg("config", help="sweep config (YAML), e.g. configs/default.yaml")
OP = arg("--op", help="only this operator")
STRATEGY = arg("--strategy", action="append", metavar="NAME", help="only this strategy (repeatable)")


# ------------------------------------------------------------------------ list
@command("list", "list registered strategies, their backends, dtypes and preconditions",
         arg("--op", help="only this operator"),
         arg("--device", help="only strategies that run on this device (cpu, cuda, or any a backend adds)"))
def cmd_list(args) -> int:
    import impls
    from harness.presenting.tables import console, strategies_table
    from impls.backends import devices

    if args.device is not None and args.device not in devices():
        raise UsageError(f"--device {args.device!r}: unknown device (known: {', '.join(devices())})")
    try:
        strategies = impls.all_strategies(args.op, args.device)
    except KeyError as error:
        raise UsageError(error.args[0]) from None
    console().print(strategies_table(strategies))
    return EXIT_OK


# ----------------------------------------------------------------------- check
# `check` prints this many FAIL lines unless --all is given; the rest are counted.
FAIL_LINES_SHOWN = 20


@command("check", "check strategies against the float64 oracle (no timing)",
         CONFIG, OP, STRATEGY, NO_PROGRESS,
         arg("--all", action="store_true", help=f"print every FAIL line (default: the first {FAIL_LINES_SHOWN})"),
         arg("--counts", metavar="FILE", help="write what the check cost (calls, oracle runs, compilations and "
                                              "their seconds, per operator) to FILE as JSON"))
def cmd_check(args) -> int:
    from harness.base.config import load_config
    from harness.measuring import check, pinning, prefetch, verdict_cache, work_counts
    from harness.measuring.sweep import require_devices, select_cases
    from harness.presenting.tables import check_table, console, progress_bar

    config = load_config(args.config)
    require_devices(config)
    cases = select_cases(config, args.op, args.strategy)
    items = check.check_plan(config, cases)
    # The config's threads, as its run has them: the run then takes the adversarial verdicts from the cache.
    with pinning.threads_applied(config.threads) as threads, progress_bar(disable=args.no_progress) as progress:
        task = progress.add_task("check", total=len(items))
        planned, counted = set(items), set()

        def advance(item):
            if item in planned and item not in counted:
                counted.add(item)
                progress.update(task, advance=1, description=f"check {item.strategy.key} {item.device} {item.dtype}")

        # The adversarial items, strategy key by key, in one worker process per core (what a worker
        # cannot load, a strategy defined only in this process, is run here with the rest).
        kept = verdict_cache.VerdictCache(config.seed, threads)
        # A check cut before (a lease's end) resumes: the items its journal holds are not run again.
        journal = verdict_cache.ItemJournal(kept)
        known: dict = journal.read(items)
        for item in known:
            advance(item)
        keys = [key for key in kept.keys(cases) if kept.keeps(key[0])
                and not all(item in known for item in check.adversarial_items(*key))]
        if known:
            print(f"check: {len(known)} of {len(items)} items judged before by the same code ({journal.path}); "
                  f"{len(keys)} strategy keys to check")
        per_key: dict = {}  # the workers' counts, per strategy key
        here: dict = {}  # what this process ran itself, per operator
        last = work_counts.snapshot()

        def ran_here(result):
            nonlocal last
            journal.write([result])
            here.setdefault(result.item.strategy.op, []).append(work_counts.since(last))
            last = work_counts.snapshot()

        try:
            prefetch.check_items(keys, config.seed, config.timing.timeout_s, threads,
                                 prefetch.workers_for(keys), on_item=advance, results=known, counts=per_key,
                                 on_key=lambda key, came: journal.write(came))
            last = work_counts.snapshot()
            results = check.run_checks(items, config.seed, on_item=advance, timeout_s=config.timing.timeout_s,
                                       known=known, on_result=ran_here)
        except KeyboardInterrupt:  # Ctrl-C, or SIGTERM at a lease's limit: the keys checked whole are kept
            verdict_cache.keep_from_check(kept, list(known.values()), cases, config.timing.timeout_s)
            _write_counts(args.counts, per_key, here, stopped=True)
            raise
        verdict_cache.keep_from_check(kept, results, cases, config.timing.timeout_s)
    counted = _write_counts(args.counts, per_key, here)
    console().print(check_table(results))
    summary = check.summarize_checks(results)
    shown = summary.failure_lines if args.all else summary.failure_lines[:FAIL_LINES_SHOWN]
    for line in shown:
        print(line)
    if len(summary.failure_lines) > len(shown):
        print(f"…and {len(summary.failure_lines) - len(shown)} more failures (see --all)")
    for line in summary.defect_lines + summary.skip_lines:
        print(line)
    print(f"work: {work_counts.line(counted)}")
    print(summary.text)
    return EXIT_FINDINGS if summary.failed else EXIT_OK


def _write_counts(path, per_key: dict, here: dict, stopped: bool = False) -> dict:
    """The check's ``work_counts``, in all and per operator (the workers' per strategy key, and
    what this process ran itself, per operator: ``here``), written to ``path`` (--counts) when
    given; returns the total."""
    from pathlib import Path

    from harness.base import caches
    from harness.measuring import work_counts

    per_operator: dict = {op: list(parts) for op, parts in here.items()}
    for key, counts in per_key.items():
        per_operator.setdefault(key[0].op, []).append(counts)
    by_op = {op: work_counts.total(parts) for op, parts in per_operator.items()}
    everything = work_counts.total(by_op.values())
    if path:
        caches.write_json(Path(path), {"fields": [field.what for field in work_counts.FIELDS],
                                       "total": everything, "per_operator": by_op,
                                       "keys_checked": len(per_key), "stopped": stopped})
    return everything


# ------------------------------------------------------------------------- run
@command("run", "run a sweep: check, time, record; prints a summary",
         CONFIG,
         arg("-o", "--output", help="result directory, new or empty (default results/<run-id>)"),
         arg("--resume", metavar="DIR", help="run only the cases missing from DIR"),
         arg("--shard", metavar="I/N", help="run the I-th of N slices of the sweep (0-based)"),
         arg("--isolate", action="store_true", help="each case in its own process (survives crashes)"),
         OP, STRATEGY,
         arg("--report", action="store_true", help="write DIR/report when done"),
         arg("--tables", action="store_true", help="print one table per case (strategy, status, median, IQR, "
                                                   "GB/s, %% of ceiling, speedup) instead of the compact grid"),
         arg("--grid", action="store_true", help="the compact strategies × sizes grid (the default)"),
         arg("--budget", type=float, metavar="SECONDS",
             help="this call's seconds: the cases in `scatterbench plan`'s order, stopping before a case that "
                  "would outlast them (interrupted, as by Ctrl-C: continue with --resume)"),
         arg("--instrument", choices=("callgrind",),
             help="count instead of time: each CPU case's instructions and estimated cycles per call, in one "
                  "process under Callgrind (valgrind), every library at 1 thread"),
         arg("--threads", metavar="N",
             help="every library's threads, a count or 'auto' (every core but one), instead of the config's "
                  "threads: key: one config at 1 thread and at every core"),
         NO_PROGRESS)
def cmd_run(args) -> int:
    plan = _plan_run(args)
    outcome = _execute_with_progress(args, plan)
    threads = f" --threads {args.threads}" if args.threads is not None else ""
    resume_hint = f"scatterbench run {args.config}{threads} --resume {plan.out_dir}"
    if outcome.interrupted:
        print(f"\ninterrupted ({outcome.interrupted}): every finished case is in {plan.out_dir} "
              f"({outcome.cases_on_disk} on disk); continue with: {resume_hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if outcome.disk_full:
        raise ResultError(f"{plan.out_dir}: {outcome.disk_full}; stopped with {outcome.cases_on_disk} cases "
                          f"safely on disk; free space and continue with: {resume_hint}")
    _print_run_results(args, plan)
    if args.report:
        from harness.presenting import report

        # PNG only: the SVGs (for docs/, `make report`) drew every figure twice, 5 s of a `make bench`.
        written = report.build([plan.out_dir], plan.out_dir / "report", svg=False)
        print(f"report: {written}")
    return EXIT_OK


def _plan_run(args):
    """The run's plan, once the flags agree with each other and with the run
    resumed; its notes on stderr."""
    from harness.measuring import sweep
    from harness.results import store

    if args.instrument and (args.isolate or args.report):
        raise UsageError(f"--instrument {args.instrument}: counts every case in one process, without a report; "
                         f"drop {'--isolate' if args.isolate else '--report'}")
    if args.budget is not None and args.instrument:
        raise UsageError(f"--budget: a counting run (--instrument {args.instrument}) has no budget; drop one of them")
    plan = sweep.plan_run(args.config, output=args.output, resume=args.resume, shard_text=args.shard,
                          op=args.op, strategies=args.strategy, threads=args.threads)
    if args.budget is not None:
        from harness.measuring import plan as window

        plan.notes += window.apply_budget(plan, args.budget)
    if plan.resuming and store.read_meta(plan.out_dir).get("instrument") != args.instrument:
        was = store.read_meta(plan.out_dir).get("instrument")
        raise UsageError(f"--resume {plan.out_dir}: that run was {f'counted (--instrument {was})' if was else 'timed'}"
                         f"; resume it the same way")
    for note in plan.notes:
        print(note, file=sys.stderr)
    return plan


def _execute_with_progress(args, plan):
    """The sweep (timed, or counted under --instrument), its progress on stderr."""
    from harness.measuring import sweep
    from harness.presenting.tables import console, progress_bar

    err = console(stderr=True)
    with progress_bar(disable=args.no_progress, console=err) as progress:
        task = progress.add_task("ceilings", total=len(plan.cases))
        current = {"label": ""}

        def on_start(ceilings, fresh_writes, notes=()):
            err.print(f"run {plan.run_id}: {len(plan.cases)} cases -> {plan.out_dir}  "
                      + (f"counted under {args.instrument}" if args.instrument else "")
                      + "  ".join(f"{d} copy ceiling {g:.1f} GB/s" for d, g in ceilings.items())
                      + "".join(f"  fresh {a} output {g:.1f} GB/s" for a, g in fresh_writes.items()),
                      highlight=False, markup=False)
            for note in notes:  # a busy ceiling left unused, the verdicts from the cache
                err.print(note, highlight=False, markup=False, soft_wrap=True)

        def on_case(case, row):
            if row == "start":
                current["label"] = f"{case.op}/{case.strategy} {case.device} {case.dtype}"
                progress.update(task, description=current["label"])
            else:
                progress.advance(task)

        def on_phase(phase):
            progress.update(task, description=f"{phase:<15} {current['label']}")

        def on_warning(text):
            err.print(f"warning: {text}", highlight=False, markup=False, soft_wrap=True)

        if args.instrument:
            from harness.measuring.callgrind import execute_counting_run

            return execute_counting_run(plan, sys.argv, on_start=on_start, on_case=on_case, on_phase=on_phase)
        return sweep.execute_run(plan, sys.argv, isolate=args.isolate, on_start=on_start,
                                 on_case=on_case, on_phase=on_phase, on_warning=on_warning)


def _print_run_results(args, plan) -> None:
    """The run's tables (counts, or the grid or per-case tables) and its status counts."""
    from harness.judging import analysis
    from harness.presenting.tables import console, run_summary
    from harness.results import store

    rows = store.read_rows(plan.out_dir)
    unfit = [] if args.instrument else analysis.run_unfit_reasons(store.read_meta(plan.out_dir), rows)
    for renderable in ([_counts_table(rows)] if args.instrument else
                       run_summary(rows, grid=not args.tables, unfit_reasons=unfit)):
        console().print(renderable)
    counts = rows["status"].value_counts().to_dict()
    print(f"results: {plan.out_dir}  ({', '.join(f'{n} {s}' for s, n in counts.items())})")


def _counts_table(rows):
    from rich.markup import escape

    from harness.base.format import params_label
    from harness.presenting.tables import STATUS_STYLE, Column, console, fitted_table

    # The headline count stays longest when the table is too wide, the others in their declared order.
    columns = [Column("op", 2), Column("strategy", 0), Column("dtype", 4), Column("params", 3, flexible=True),
               Column("status", 0), *(Column(metric.name, min(index, 1), "right")
                                      for index, metric in enumerate(COUNTS.fields)),
               Column("message", 5, flexible=True)]
    cells = [[escape(r["op"]), escape(r["strategy"]), r["dtype"], escape(params_label(r["params"])),
              f"[{STATUS_STYLE.get(r['status'], '')}]{r['status']}[/]",
              *(metric.format(r[metric.name]) for metric in COUNTS.fields), escape(str(r["message"]))]
             for _, r in rows.iterrows()]
    return fitted_table("counts per call (Callgrind)", columns, cells, console().width)


# ------------------------------------------------------------------------ plan
@command("plan", "estimate a config's device time per phase from earlier runs, and the order that fits a budget",
         CONFIG,
         arg("--device", help="the device planned for (default: the config's first); nothing is measured, so "
                              "a CUDA plan is made on any machine"),
         arg("--budget", type=float, metavar="SECONDS",
             help="one call's device time for `make gpu`'s steps (GPU_BUDGET): where the order is cut, and what "
                  "is left for the next call. The order: the cheapest input point of each operator first, then "
                  "the others by seconds per case, cheapest first; coverage first, so that a window cut short "
                  "still has every operator measured, then as many cases as the rest of the budget holds"),
         arg("--results", action="append", metavar="DIR",
             help="where earlier runs are (repeatable; default: results): their phase_s, rows and make gpu's "
                  "steps records on the device"),
         arg("--resume", metavar="DIR", help="plan what is left of the run in DIR"))
def cmd_plan(args) -> int:
    from harness.measuring import plan as window

    planned = window.plan_config(args.config, args.device, args.results or window.DEFAULT_ROOTS,
                                 budget_s=args.budget, resume=args.resume)
    print("\n".join(window.lines(planned)))
    return EXIT_OK


# --------------------------------------------------------------------- compare
@command("compare", "compare two result directories; exit 1 on a regression or breakage, 3 when a run is "
                    "unfit (its times are then not judged; a breakage still exits 1)",
         arg("base", help="the earlier result directory"),
         arg("new", help="the later result directory"),
         arg("--factor", type=float, default=None,
             help=quoting("median ratio beyond which a change counts ({:g})", "harness.judging.regression", "DEFAULT_FACTOR")),
         arg("--alpha", type=float, default=None,
             help=quoting("Mann–Whitney U p-value threshold ({:g})", "harness.judging.regression", "DEFAULT_ALPHA")),
         arg("--relative-to", action="append", metavar="STRATEGY",
             help="normalise by this strategy's median in the same run and case (repeatable: the first "
                  "one present in a case is used)"),
         arg("--normalise", action="store_true",
             help="normalise each operator by its declared reference strategy (what `make regress` uses)"),
         arg("--statistic", choices=("median", "p10"), default="median",
             help="the typical time compared: the median, or the 10th percentile (steadier on a busy machine)"),
         arg("--metric", choices=("time", *COUNTS.names), default="time",
             help="what is compared: times (the default), or a count per call from `run --instrument callgrind` ("
                  + "; ".join(f"{metric.name}: {metric.description}" for metric in COUNTS.fields).replace("%", "%%")
                  + f"), which regresses past --factor ({COUNTS.factor:g}) with no statistical test: counts are "
                    f"deterministic"),
         arg("--format", choices=("table", "md", "json"), default="table", help="output format"),
         arg("-o", "--output", help="also write the Markdown (or JSON) to this file"))
def cmd_compare(args) -> int:
    from harness.judging import compare
    from harness.presenting.tables import compare_table, console

    if args.metric != "time":
        return _compare_counts(args)
    rule = _rule(args)
    result = compare.compare_dirs(args.base, args.new, rule, args.relative_to, args.normalise, fitness=True)
    for warning in result.warnings:
        print(warning, file=sys.stderr)
    table = result.table
    relative = result.normalised

    def show_table():
        console().print(compare_table(table, relative))
        print(compare.counts_line(table))

    return _emit_comparison(args, table, lambda: compare.as_markdown(table, relative, result.unfit), show_table,
                            f"factor {rule.factor}, alpha {rule.alpha}", result.unfit)


def _emit_comparison(args, table, markdown, show_table, rule_text: str, unfit: str = "") -> int:
    """A comparison as --format asks (the Markdown also to --output), then its
    exit status: 1 with one line on stderr when any case regressed or broke,
    else 3 with ``unfit`` (the line saying which run the fitness rule refuses)."""
    from harness.judging import compare

    text = markdown() if args.format == "md" else compare.as_json(table, unfit) if args.format == "json" else None
    if args.output:
        _write_text(args.output, text if text is not None else markdown())
    if text is not None:
        print(text)
    else:
        show_table()
    if unfit:
        print(unfit, file=sys.stderr)
    bad = compare.regressed(table)
    if len(bad):
        print(f"{len(bad)} {'broken' if unfit else 'regressed'} ({rule_text})", file=sys.stderr)
        return EXIT_FINDINGS
    return EXIT_UNFIT if unfit else EXIT_OK


def _compare_counts(args) -> int:
    from harness.judging import compare, regression

    given = [flag for flag, value in (("--alpha", args.alpha), ("--relative-to", args.relative_to),
                                      ("--normalise", args.normalise), ("--statistic", args.statistic != "median"))
             if value]
    if given:
        raise UsageError(f"{given[0]}: applies to times; counts (--metric {args.metric}) are compared as they are")
    factor = args.factor if args.factor is not None else regression.DEFAULT_COUNT_FACTOR
    try:
        regression.Rule(factor)  # the one check of a factor
    except ValueError as error:
        raise UsageError(str(error)) from None
    result = compare.compare_counts(args.base, args.new, args.metric, factor)
    for warning in result.warnings:
        print(warning, file=sys.stderr)
    table = result.table

    def show_table():
        from harness.presenting.tables import console

        console().print(_count_compare_table(table))
        for _, r in compare.regressed(table).iterrows():
            print(compare.count_verdict_line(r))
        print(compare.counts_line(table))

    return _emit_comparison(args, table, lambda: compare.counts_markdown(table), show_table,
                            f"{args.metric}, factor {factor:g}")


def _count_compare_table(table):
    from rich.markup import escape

    from harness.base.format import fmt_num, params_label
    from harness.presenting.tables import VERDICT_STYLE, Column, console, fitted_table

    metric = table["metric"].iloc[0] if len(table) else "count"
    columns = [Column("op", 2), Column("strategy", 0), Column("device", 6), Column("dtype", 5), Column("mode", 1),
               Column("params", 3, flexible=True), Column(f"base {metric}", 4, "right"),
               Column(f"new {metric}", 4, "right"), Column("ratio", 0, "right"), Column("verdict", 0)]
    cells = []
    for _, r in table.iterrows():
        style = VERDICT_STYLE.get(r["verdict"], "")
        shown = COUNTS[r["metric"]].format
        cells.append([escape(r["op"]), escape(r["strategy"]), r["device"], r["dtype"], r["mode"],
                      escape(params_label(r["params"])), shown(r["base_count"]), shown(r["new_count"]),
                      fmt_num(r["ratio"], 4, "×"), f"[{style}]{escape(r['verdict'])}[/]" if style
                      else escape(r["verdict"])])
    return fitted_table(f"compare {metric} per call (Callgrind)", columns, cells, console().width)


def _rule(args):
    from harness.judging import regression

    try:
        return regression.Rule(args.factor if args.factor is not None else regression.DEFAULT_FACTOR,
                               args.alpha if args.alpha is not None else regression.DEFAULT_ALPHA,
                               getattr(args, "statistic", "median"))
    except ValueError as error:
        raise UsageError(str(error)) from None


def _write_text(path, text: str) -> None:
    from pathlib import Path

    from harness.results.store import describe_os_error

    try:
        Path(path).write_text(text)
    except OSError as error:
        raise ResultError(f"{path}: cannot write ({describe_os_error(error, path)})") from None


# --------------------------------------------------------------------- regress
@command("regress", "the CI gate: run a config, compare with a baseline (normalised), re-run suspects",
         arg("baseline", help="the committed baseline result directory"),
         CONFIG,
         arg("-o", "--output", help="where the new run goes (default: a temporary directory)"),
         arg("--factor", type=float, default=None,
             help=quoting("median ratio beyond which a change counts ({:g})", "harness.judging.wall_gate", "DEFAULT_GATE_FACTOR")),
         arg("--alpha", type=float, default=None,
             help=quoting("Mann–Whitney U p-value threshold ({:g})", "harness.judging.regression", "DEFAULT_ALPHA")),
         arg("--retries", type=int, default=None,
             help=quoting("re-measure a suspect case this many times ({})", "harness.judging.wall_gate", "DEFAULT_RETRIES")),
         arg("--counts", metavar="COUNTS_BASELINE",
             help="also the gate on counts: CONFIG counted under Callgrind against this baseline (a counting "
                  "run, or a directory of them, one per tool-and-library version set)"),
         arg("--counts-factor", type=float, default=None,
             help=quoting("count ratio beyond which a case regresses ({:g})", "harness.judging.regression", "DEFAULT_COUNT_FACTOR")),
         NO_PROGRESS)
def cmd_regress(args) -> int:
    from harness.judging import regression, wall_gate
    from harness.presenting.tables import compare_table, console

    if args.factor is None:
        args.factor = wall_gate.DEFAULT_GATE_FACTOR
    if args.retries is None:
        args.retries = wall_gate.DEFAULT_RETRIES
    rule = _rule(args)
    if args.retries < 0:
        raise UsageError(f"--retries {args.retries}: must be >= 0")
    counts_factor = args.counts_factor if args.counts_factor is not None else regression.DEFAULT_COUNT_FACTOR
    try:
        regression.Rule(counts_factor)
    except ValueError:
        raise UsageError(f"--counts-factor {counts_factor}: must be a finite number > 1") from None
    log = lambda text: print(text, file=sys.stderr)  # noqa: E731
    result = wall_gate.run_gate(args.baseline, args.config, rule, output=args.output, retries=args.retries, log=log)
    console().print(compare_table(result.table, True))
    print(result.summary)
    failed = result.failed
    if args.counts:
        from pathlib import Path

        from harness.judging.count_gate import run_count_gate

        counted = run_count_gate(args.counts, args.config, counts_factor,
                                 output=Path(args.output) if args.output else None, log=log)
        if len(counted.table):
            headline = counted.table[counted.table["metric"] == COUNTS.primary.name]  # the others: in the summary
            console().print(_count_compare_table(headline))
        print(counted.summary)
        failed = failed or counted.failed
    return EXIT_FINDINGS if failed else EXIT_OK


# ------------------------------------------------------------------------- gpu
@command("gpu", "everything a GPU machine should do (make gpu), as steps a later call resumes: the check "
                "(every operator, one step), the CUDA tests, the sweep and its report",
         arg("config", nargs="?", default=None,
             help=quoting("sweep config (default: the checkout's {}, planned to fit one 15-minute lease; "
                          "configs/gpu-more.yaml is its larger points, for a second lease, with "
                          "SCATTERBENCH_CACHE_DIR=<gpu.yaml's run>/steps/cache so that its check reads that run's "
                          "verdicts)", "harness.measuring.gpu_steps", "DEFAULT_CONFIG")),
         arg("-o", "--output", metavar="DIR",
             help="the run's directory, its steps' records, logs, counts and caches (the check's journal, the "
                  "compiled kernels) in DIR/steps (make gpu's GPU_RESULTS; default: results/<commit date>-<config's "
                  "name>-<commit>-<GPU>); the same command again on it goes on, on this machine or, the directory "
                  "committed whole, on the next lease, never redoing a finished step or case"),
         arg("--budget", type=float, metavar="SECONDS",
             help="this call's seconds (GPU_BUDGET): each step gets what is left, a step cut by it runs again next "
                  "call, and the sweep stops before a case that would outlast it (exit 130)"),
         arg("--tests", metavar="ARGS", default=None,
             help=quoting("pytest's arguments, as one string (GPU_TESTS; default {!r}); give it as --tests='...'",
                          "harness.measuring.gpu_steps", "DEFAULT_TESTS")))
def cmd_gpu(args) -> int:
    from harness.measuring import gpu_steps

    config = str(args.config or gpu_steps.default_config())
    directory = args.output or gpu_steps.default_directory(config)
    return gpu_steps.run_gpu(config, directory, budget_s=args.budget,
                             tests=gpu_steps.DEFAULT_TESTS if args.tests is None else args.tests)


# -------------------------------------------------------------------- baseline
@command("baseline", "re-measure this machine's baselines of the regress gates (make baseline): wall time for "
                     "this CPU, counts for this tool-and-library version set",
         arg("--config", default=None,
             help=quoting("the gates' config (default {})", "harness.judging.baselines", "CONFIG")),
         arg("--wall", metavar="ROOT", default=None,
             help=quoting("where the wall-time baselines are, one per CPU (default {})", "harness.judging.baselines",
                          "WALL_ROOT")),
         arg("--counts", metavar="ROOT", default=None,
             help=quoting("where the counts baselines are, one per version set (default {}; make's "
                          "COUNTS_BASELINE)", "harness.judging.baselines", "COUNTS_ROOT")),
         arg("--no-counts", action="store_true", help="the wall-time baseline alone (no Callgrind here)"))
def cmd_baseline(args) -> int:
    from harness.judging import baselines

    if args.no_counts and args.counts:
        raise UsageError("--no-counts: drop --counts, or this flag")
    return baselines.measure_baselines(args.config or baselines.CONFIG, args.wall or baselines.WALL_ROOT,
                                       None if args.no_counts else args.counts or baselines.COUNTS_ROOT)


# ---------------------------------------------------------------------- launch
@command("launch", "run a sweep as N shards through submitit (Slurm or local processes), then merge them",
         CONFIG,
         arg("--executor", choices=("slurm", "local"), required=True,
             help="slurm: one job array through sbatch; local: the same jobs as processes on this machine"),
         arg("--shards", type=int, required=True, metavar="N", help="number of shards (array tasks)"),
         arg("-o", "--output", required=True, metavar="DIR",
             help="the launch's directory: shards under DIR/shards, the merged result in DIR; "
                  "the same command again follows the jobs recorded there"),
         arg("--partition", help="Slurm partition"),
         arg("--gpus-per-task", type=int, metavar="G", help="GPUs per shard"),
         arg("--time-min", type=int, default=None, metavar="M",
             help=quoting("time limit per shard in minutes ({})", "harness.measuring.launch", "DEFAULT_TIME_MIN")),
         arg("--slurm-arg", action="append", metavar="KEY=VALUE",
             help="any sbatch option, passed to submitit unchanged (repeatable), e.g. qos=high"),
         NO_PROGRESS)
def cmd_launch(args) -> int:
    from harness.measuring import launch
    from harness.presenting.tables import console, progress_bar

    options = launch.parse_options(args.config, args.executor, args.shards, partition=args.partition,
                                   gpus_per_task=args.gpus_per_task,
                                   time_min=launch.DEFAULT_TIME_MIN if args.time_min is None else args.time_min,
                                   slurm_args=args.slurm_arg)
    plan = launch.plan_launch(options, args.output)
    err = console(stderr=True)
    # The bar starts with the first state of the shards, after the submission
    # (a refused one is then one line, not a line under an empty bar).
    progress = progress_bar(disable=args.no_progress, console=err)
    task = progress.add_task("shards", total=sum(plan.sizes))
    seen = {}

    def on_update(shards):
        if not progress.live.is_started:
            progress.start()
        states = " · ".join(f"{s.index} {s.state} {s.finished}/{s.cases}" for s in shards)
        progress.update(task, description=f"shards {states}", completed=sum(s.finished for s in shards))
        if args.no_progress:  # a CI log gets a line per change instead of a bar
            for s in shards:
                if seen.get(s.index) != (s.state, s.job_id):
                    seen[s.index] = (s.state, s.job_id)
                    print(f"shard {s.index}/{len(shards)} {s.state} (job {s.job_id}, {s.finished}/{s.cases} "
                          f"cases)", file=sys.stderr)

    def log(text):  # paths and commands whole, never wrapped: they are copied
        err.print(text, highlight=False, markup=False, soft_wrap=True)

    try:
        out = launch.execute_launch(plan, on_update=on_update, log=log)
    except KeyboardInterrupt:
        progress.stop()
        print(f"\nlaunch interrupted: finished cases are on disk under {plan.out_dir / launch.SHARDS_DIR}; the same "
              f"command again follows the running jobs (resubmitting any that stopped, with --resume) and merges",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        progress.stop()
    print(f"{args.shards} shards merged in {out}")
    return EXIT_OK


# ---------------------------------------------------------------- merge, etc.
@command("merge", "combine result directories (shards, machines) into one",
         arg("dirs", nargs="+", help="result directories"),
         arg("-o", "--output", required=True, help="the new, merged result directory"))
def cmd_merge(args) -> int:
    from harness.results.merge import merge_runs

    out = merge_runs(args.dirs, args.output)
    print(f"merged {len(args.dirs)} runs into {out}")
    return EXIT_OK


@command("dashboard", "write a static regression dashboard of every run under a directory",
         arg("root", help="directory holding result directories (e.g. results)"),
         arg("-o", "--output", default="site", help="site directory (default ./%(default)s)"),
         arg("--factor", type=float, default=None,
             help=quoting("the gate's factor on normalised 10th percentiles ({:g})", "harness.judging.wall_gate", "DEFAULT_GATE_FACTOR")),
         arg("--alpha", type=float, default=None,
             help=quoting("Mann–Whitney U p-value threshold ({:g})", "harness.judging.regression", "DEFAULT_ALPHA")),
         arg("--reports", type=int, default=None, metavar="N",
             help=quoting("keep the light report of the newest N runs (default {})", "harness.presenting.dashboard",
                          "DEFAULT_REPORTS")),
         arg("--no-reports", action="store_true", help="do not write any run's report"))
def cmd_dashboard(args) -> int:
    from harness.judging import history, wall_gate
    from harness.presenting import dashboard

    if args.factor is None:
        args.factor = wall_gate.DEFAULT_GATE_FACTOR
    reports = dashboard.DEFAULT_REPORTS if args.reports is None else args.reports
    if reports < 0:
        raise UsageError(f"--reports {reports}: must be >= 0")
    rule = _rule(args)
    index = dashboard.build_dashboard(args.root, args.output, history.gate_rule(rule.factor, rule.alpha),
                                      not args.no_reports, reports)
    print(f"dashboard: {index}")
    return EXIT_OK


@command("report", "write the report of result directories (same as report.py)",
         arg("report_args", nargs=argparse.REMAINDER, help="arguments of report.py (see report.py --help)"))
def cmd_report(args) -> int:
    from harness.presenting import report

    return report.main(args.report_args)


@command("cache", "the suite's cache folder (docs/CACHES.md): clear removes it and the compile caches; "
                  "only time is lost",
         arg("action", choices=("clear",), help="clear: remove the cache folder and the compile caches' folder"))
def cmd_cache(args) -> int:
    from harness.base import caches

    for folder, there in caches.clear().items():
        print(f"removed {folder}" if there else f"{folder}: not there, nothing to remove")
    return EXIT_OK


def cmd_case(args) -> int:
    from harness.measuring.sweep import child_main

    child_main(sys.stdin.read())
    return EXIT_OK


def cmd_count(args) -> int:
    from harness.measuring.callgrind import child_main

    child_main(sys.stdin.read())
    return EXIT_OK


# ---------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = HelpParser(prog="scatterbench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--debug", action="store_true", help="show the traceback of any error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for declared in COMMANDS:
        p = sub.add_parser(declared.name, help=declared.help, description=declared.help)
        for flags, options in declared.arguments:
            p.add_argument(*flags, **options)
        # after the command too (`scatterbench check --debug`, as the error line's hint reads); unset
        # here, the one before the command stands
        p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the traceback of any error")
        p.set_defaults(func=declared.run)
    # The isolated-case child: internal, so it is left out of the help's list.
    for name, run in (("_case", cmd_case), ("_count", cmd_count)):
        sub.add_parser(name).set_defaults(func=run)
    sub._choices_actions = [action for action in sub._choices_actions if action.dest not in ("_case", "_count")]
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    previous = _terminate_like_interrupt()
    try:
        from harness.base.plugins import load_plugins

        load_plugins()
        return args.func(args)
    except ScatterbenchError as error:
        if args.debug:
            raise
        print(f"scatterbench: error: {_one_line(error)}", file=sys.stderr)
        return error.exit_status
    except KeyboardInterrupt as interrupt:
        by = f" by {interrupt.args[0]}" if interrupt.args else ""
        print(f"\nscatterbench: interrupted{by}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as error:  # an output we could not write, named by the OS
        if args.debug:
            raise
        from harness.results.store import describe_os_error

        # matplotlib's and some libraries' errors carry no file name: name the output asked for.
        where = error.filename or getattr(args, "output", None) or "output"
        print(f"scatterbench: error: {where}: {describe_os_error(error, where)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as error:  # noqa: BLE001 - a bug (ours or a plugin's) still ends in one line
        if args.debug:
            raise
        print(f"scatterbench: error: unexpected {type(error).__name__}: {_one_line(error)} "
              f"(rerun with --debug for the traceback)", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if previous is not None:
            import signal

            signal.signal(signal.SIGTERM, previous)


def _terminate_like_interrupt():
    """SIGTERM (timeout, Slurm, Docker) ends every command as Ctrl-C does:
    one line, exit 130 (`check` died silently with 143). `run` installs its
    own handlers on top, which also mark its results interrupted."""
    import signal

    def interrupt(signum, frame):
        if retried_later(signum, frame):
            return
        raise KeyboardInterrupt(signal.Signals(signum).name)

    try:
        return signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread (an embedding application): leave it alone
        return None


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split("\n"))


if __name__ == "__main__":
    sys.exit(main())
