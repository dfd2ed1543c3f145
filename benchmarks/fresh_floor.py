"""How close the best CPU kernels come to the floor a fresh output allows:
``python benchmarks/fresh_floor.py [-o DIR] [--budget S] [RUN_DIR ...]``.

Issue 32's CPU target: the best CPU strategy of each operator, forward and
backward, at the large shapes, at 85 % or more of its fresh-output-aware floor
(``stats.fresh_floor_s``: bytes read at the copy ceiling plus bytes written at
the run's fresh-write bandwidth, the OS zeroing each new output page on first
touch included). This runs the large default shapes (and the CASSI training
size) in forward and backward with the candidate fastest CPU strategies,
through ``scatterbench run`` in a child process, and prints, per operator and
mode, the fastest correct strategy's median, % of copy ceiling, % of fresh
floor and % of its floor by size (the cache-aware roofline,
harness/results/floors.py: flagged, never a number, past 110 %), its factor
over the fastest built-in of its layout, with the thread setting and the
load the run saw; then, where the runs measured their bandwidth curves
apart, how far those curves stray from each other (±10 % is agreement). Given result directories instead, it reads
them (any run: the default sweep's, the models sweep's).

Not a timed test: the numbers depend on the machine and its load, printed with
them. In backward the fresh output is the gradient (``Gradient.bytes_written``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.base import plugins  # noqa: E402
from harness.base.cases import mode_and_layout, with_case_columns  # noqa: E402
from harness.base.format import fmt_pct, fmt_ratio, fmt_time, params_label  # noqa: E402
from harness.judging import analysis  # noqa: E402
from harness.presenting.report.document import Doc, render_markdown  # noqa: E402
from harness.presenting.report.sections import curves_agreement_table  # noqa: E402
from harness.results import floors, store  # noqa: E402
from impls.backends import threads_text  # noqa: E402

# The large shapes of configs/default.yaml and the CASSI training size of
# configs/models.yaml, with the strategies that lead them on the CPU.
CONFIG = """
name: fresh-floor
devices: [cpu]
dtypes: [float32]
timing: {{min_samples: 5, budget_s: {budget}, warmup_s: 0.05, timeout_s: 300}}
threads: 2
benchmarks:
  - op: maxpool2d
    strategies: [numba_fused, torch_max_pool2d_indices, torch_compile_reshape_argmax]
    params: {{N: 64, C: 32, H: 128, W: 128, k: 2}}
    modes: [forward, backward]
  - op: maxunpool
    strategies: [numba_fused, torch_max_unpool2d, torch_scatter, numpy_put_along_axis]
    params: {{form: 2d, N: 64, C: 32, H: 128, W: 128, k: 2}}
    modes: [forward, backward]
  - op: dispersion
    strategies: [numba_fused, torch_index_add, torch_fold]
    params: {{B: 5, C: 28, H: 256, W: 256, S: 2}}
    modes: [forward, backward]
  - op: dispersion_pinv
    strategies: [numba_fused, torch_unfold_view, numpy_window_view]
    params: {{B: 5, C: 28, H: 256, W: 256, S: 2}}
    modes: [forward, backward]
"""


def measure(out: Path, budget: float) -> Path:
    config = out / "fresh-floor.yaml"
    config.write_text(CONFIG.format(budget=budget))
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(config), "-o", str(out / "run"),
                           "--no-progress"], cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"fresh_floor: the run failed (exit {done.returncode})")
    return out / "run"


HEADER = ["run", "threads", "operator", "size", "mode", "fastest", "median", "% of ceiling", "% of fresh floor",
          "% of floor by size", "× fastest built-in (which)", "load"]


def table(run_dirs) -> str:
    """The table of the module's docstring as Markdown, through the report's own table writer
    (cells escaped), with the curves' agreement table under it where the runs measured theirs apart."""
    plugins.load_plugins()  # a plugin's rows: their bytes written come from its operator
    cells, metas = [], []
    for directory in run_dirs:
        meta, rows, _ = store.read_run(Path(directory))
        metas.append(meta)
        threads = threads_text(meta.get("threads"))
        rows = with_case_columns(rows[rows["device"] == "cpu"])
        for (op, params, mode, layout), case in rows.groupby(["op", "params", "mode", "layout"], sort=False):
            found = analysis.answer(case)  # within one layout: each is its own answer (docs/SPEC.md §2)
            if found is None:
                continue
            best = found.best
            builtin = (f"{fmt_ratio(found.over_builtin)} ({found.builtin})" if found.builtin and
                       found.builtin != best["strategy"] else "is one" if found.builtin else "–")
            cells.append([str(meta.get("run_id", directory)), threads, op, params_label(params),
                          mode_and_layout({"mode": mode, "layout": layout}),
                          f"{best['strategy']}{' (tie)' if found.tie else ''}", fmt_time(best["median_s"]),
                          fmt_pct(best["pct_of_ceiling"]), floors.ceiling_cell(best.get("pct_of_fresh_floor")),
                          floors.floor_cell(best.get("pct_of_floor")), builtin, f"{best['load_avg']:.2g}"])
    doc = Doc()
    doc.table(HEADER, cells)
    header, agreement = curves_agreement_table(metas)
    if agreement:  # the curves these floors rest on, where the runs measured them apart
        doc.table(header, agreement)
    return render_markdown(doc, "").rstrip("\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="*", help="result directories to read instead of measuring")
    parser.add_argument("-o", "--output", help="where the run goes (default: a temporary folder)")
    parser.add_argument("--budget", type=float, default=0.5, help="timing budget per case, seconds")
    args = parser.parse_args(argv)
    if args.runs:
        print(table(args.runs))
        return 0
    out = Path(args.output) if args.output else Path(tempfile.mkdtemp(prefix="fresh-floor-"))
    out.mkdir(parents=True, exist_ok=True)
    print(table([measure(out, args.budget)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
