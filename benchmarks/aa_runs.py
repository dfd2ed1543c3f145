"""The A/A test of two runs: ``python benchmarks/aa_runs.py RUN_A RUN_B``.

Issue 40's done-when: two ``make bench`` runs of the same commit on one
machine, at least 10 minutes apart, never contradict each other (no case
where one run's clear winner is clearly slower than another strategy in the
other run: ``analysis.contradictions``), and at least half the answer cells
are clear in both. Prints both runs' commits, start times, fitness and
loads, how many cases each calls clearly, how many are clear in both, and
every contradiction. Exit 1 on a contradiction, 2 on unusable input.

Not a timed test: it reads what two runs measured on a machine, which only
that machine can repeat.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.base.cases import CASE_GROUP, mode_and_layout, with_case_columns  # noqa: E402
from harness.base.format import params_label  # noqa: E402
from harness.judging import analysis  # noqa: E402
from harness.results import store  # noqa: E402


def clear_cases(rows) -> set:
    return {key for key, case in with_case_columns(rows).groupby(CASE_GROUP, sort=False)
            if (found := analysis.answer(case)) is not None and found.clear}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs=2, type=Path)
    args = parser.parse_args(argv)
    loaded = []
    for directory in args.runs:
        try:
            meta, rows, _ = store.read_run(directory)
        except Exception as error:  # noqa: BLE001 - one line for any unreadable run
            print(f"aa_runs: {directory}: {error}", file=sys.stderr)
            return 2
        reasons = analysis.run_unfit_reasons(meta, rows)
        print(f"{directory.name}: commit {str(meta.get('git_commit'))[:12]}, start {meta.get('start_time')}, "
              f"peak case load {rows['load_avg'].max():.2f}, "
              + ("fit" if not reasons else "unfit: " + "; ".join(reasons)))
        loaded.append(rows)
    first, second = loaded
    clear_first, clear_second = clear_cases(first), clear_cases(second)
    both = {key for key, _ in with_case_columns(first).groupby(CASE_GROUP, sort=False)} \
        & {key for key, _ in with_case_columns(second).groupby(CASE_GROUP, sort=False)}
    clear_both = clear_first & clear_second & both
    print(f"cases in both: {len(both)}; clear in the first: {len(clear_first & both)}, in the second: "
          f"{len(clear_second & both)}, in both: {len(clear_both)} ({100 * len(clear_both) / max(len(both), 1):.0f} %)")
    found = analysis.contradictions(first, second)
    for key, named, winner, rival in found:
        op, device, dtype, params, mode, layout = key
        print(f"contradiction: {op} {params_label(params)} {device} {dtype} "
              f"{mode_and_layout({'mode': mode, 'layout': layout})}: the {named} run's clear "
              f"winner {winner} is clearly slower than {rival} in the other run")
    print(f"contradictions: {len(found)}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
