"""``scatterbench`` (also ``python -m harness``): list, check, run, compare,
merge, dashboard, report. Bad input is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    pass


def _parse_shard(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    try:
        index, count = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"--shard {text!r}: need 0 <= I < N")
    return index, count


def cmd_list(args) -> int:
    import impls
    from harness.tables import console, strategies_table

    try:
        strategies = impls.all_strategies(args.op, args.device)
    except KeyError as error:
        raise UsageError(error.args[0]) from None
    console().print(strategies_table(strategies))
    return EXIT_OK


def _selected_cases(config, args):
    from harness.config import expand

    cases = expand(config)
    if getattr(args, "op", None):
        cases = [c for c in cases if c.op == args.op]
    if getattr(args, "strategy", None):
        cases = [c for c in cases if c.strategy in args.strategy]
    return cases


def cmd_check(args) -> int:
    from rich.progress import track

    from harness.check import cached_reference, check_plan, check_strategy
    from harness.config import load_config
    from harness.tables import check_table, console

    config = load_config(args.config)
    _require_devices(config)
    items = check_plan(config, _selected_cases(config, args))
    results = []
    for item in track(items, description="checking", console=console(stderr=True),
                      disable=args.no_progress):
        unavailable = item.strategy.available()
        t0 = time.perf_counter()
        if unavailable:
            from impls.common import Verdict

            verdict = Verdict("skipped", unavailable)
        else:
            ref = cached_reference(item.strategy.op, dict(item.params), item.dtype, item.mode, config.seed)
            verdict = check_strategy(item.strategy, dict(item.params), item.dtype, item.device, ref, item.layout)
        results.append((item, verdict, time.perf_counter() - t0))
    out = console()
    out.print(check_table(results))
    failed = [(i, v) for i, v, _ in results if v.status in ("mismatch", "error")]
    for item, verdict in failed[:20]:
        print(f"FAIL {item.strategy.key} [{item.device} {item.dtype} {item.label}]: {verdict.message}")
    print(f"{len(results)} checks, {len(failed)} failed")
    return EXIT_FAIL if failed else EXIT_OK


def _require_devices(config) -> None:
    from harness.config import ConfigError

    wanted = set(config.devices) | {d for b in config.benchmarks for d in (b.devices or [])}
    if "cuda" in wanted:
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"devices: cuda requested but no CUDA device is available here "
                              f"(torch {torch.__version__})")


def cmd_run(args) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from harness import env, store, sweep
    from harness.config import load_config, shard
    from harness.tables import console, summary_tables

    config = load_config(args.config)
    _require_devices(config)
    cases = _selected_cases(config, args)
    shard_spec = _parse_shard(args.shard)
    if shard_spec:
        cases = shard(cases, *shard_spec)
    if args.resume:
        out_dir = Path(args.resume)
        meta = store.read_meta(out_dir)
        run_id = meta["run_id"]
        done = set(store.read_rows(out_dir)["case_id"])
        cases = [c for c in cases if c.case_id not in done]
        print(f"resuming {out_dir}: {len(done)} cases done, {len(cases)} to run", file=sys.stderr)
    else:
        run_id = sweep.new_run_id(config.name + (f"-shard{shard_spec[0]}of{shard_spec[1]}" if shard_spec else ""))
        out_dir = Path(args.output) if args.output else sweep.default_out_dir(run_id)
        if (out_dir / store.META).exists():
            raise UsageError(f"{out_dir} already holds a run; use --resume {out_dir} or another -o")
    threads = env.apply_threads(config.threads)
    ceilings = sweep.measure_ceilings(c.device for c in cases) if cases else {}
    fresh_writes = sweep.measure_fresh_writes(c.device for c in cases) if cases else {}
    meta = env.run_metadata(threads, str(args.config), sys.argv)
    meta.update(run_id=run_id, config=config.model_dump(), ceilings_gbps=ceilings,
                fresh_write_gbps=fresh_writes,
                shard=list(shard_spec) if shard_spec else None, n_cases=len(cases),
                isolate=bool(args.isolate), status="running")
    writer = store.RunWriter(out_dir, meta)
    err = console(stderr=True)
    err.print(f"run {run_id}: {len(cases)} cases -> {out_dir}  "
              + "  ".join(f"{d} copy ceiling {g:.1f} GB/s" for d, g in ceilings.items())
              + "".join(f"  fresh {a} output {g:.1f} GB/s" for a, g in fresh_writes.items()))
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, disable=args.no_progress)
    task = progress.add_task("sweep", total=len(cases))

    def on_case(case, row):
        if row == "start":
            progress.update(task, description=f"{case.op}/{case.strategy} {case.device} {case.dtype}")
        else:
            progress.advance(task)

    try:
        with progress:
            sweep.run_sweep(cases, config, writer, run_id, ceilings, isolate=args.isolate, on_case=on_case)
    except KeyboardInterrupt:
        writer.update_meta(status="interrupted")
        writer.close()
        print(f"\ninterrupted: every finished case is in {out_dir}; "
              f"continue with: scatterbench run {args.config} --resume {out_dir}", file=sys.stderr)
        return EXIT_INTERRUPTED
    writer.update_meta(status="complete", end_time=time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()))
    writer.close()
    rows = store.read_rows(out_dir)
    out = console()
    for table in summary_tables(rows):
        out.print(table)
    counts = rows["status"].value_counts().to_dict()
    print(f"results: {out_dir}  ({', '.join(f'{n} {s}' for s, n in counts.items())})")
    if args.report:
        import report

        written = report.build([out_dir], out_dir / "report")
        print(f"report: {written}")
    return EXIT_OK


def cmd_case(args) -> int:
    from harness.sweep import child_main

    child_main(sys.stdin.read())
    return EXIT_OK


def cmd_report(args) -> int:
    import report

    return report.main(args.report_args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scatterbench", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks for usage errors")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list registered strategies")
    p.add_argument("--op")
    p.add_argument("--device", choices=("cpu", "cuda"))
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("check", help="check strategies against the float64 oracle")
    p.add_argument("config")
    p.add_argument("--op")
    p.add_argument("--strategy", action="append", help="only this strategy (repeatable)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("run", help="run a sweep: check, time, record")
    p.add_argument("config")
    p.add_argument("-o", "--output", help="result directory (default results/<run-id>)")
    p.add_argument("--resume", metavar="DIR", help="run only the cases missing from DIR")
    p.add_argument("--shard", metavar="I/N", help="run the I-th of N slices of the sweep (0-based)")
    p.add_argument("--isolate", action="store_true", help="each case in its own process")
    p.add_argument("--op")
    p.add_argument("--strategy", action="append", help="only this strategy (repeatable)")
    p.add_argument("--report", action="store_true", help="write DIR/report when done")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("report", help="write the report of result directories (same as report.py)")
    p.add_argument("report_args", nargs=argparse.REMAINDER)
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("_case", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_case)

    from harness import compare, dashboard, merge

    compare.add_parser(sub)
    merge.add_parser(sub)
    dashboard.add_parser(sub)

    return parser


def load_plugins() -> None:
    """Imports the modules named in SCATTERBENCH_PLUGINS (comma-separated), which
    register extra strategies; isolated cases inherit the variable."""
    import importlib
    import os

    import impls  # noqa: F401  (the built-in strategies first)

    for name in filter(None, (part.strip() for part in os.environ.get("SCATTERBENCH_PLUGINS", "").split(","))):
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise UsageError(f"SCATTERBENCH_PLUGINS: cannot import {name!r}: {error}") from None


def main(argv: list[str] | None = None) -> int:
    from harness.config import ConfigError
    from harness.store import ResultError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        load_plugins()
        return args.func(args)
    except (ConfigError, ResultError, UsageError) as error:
        if args.debug:
            raise
        print(f"scatterbench: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
