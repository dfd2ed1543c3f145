"""One call from a notebook: ``scatterbench.bench("dispersion", C=[4, 8, 16])``.

Builds the config the CLI would read, checks each strategy against the float64
oracle on the operator's adversarial cases, times every case with the same
timer as ``scatterbench run``, and returns the rows as a DataFrame plus a
figure (time against the swept parameter, or a bar per strategy). Nothing is
written to disk unless ``out`` names a result directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from harness import check, env, store, sweep
from harness.config import expand, parse_config
from harness.errors import UsageError
from harness.format import fmt_time


@dataclass
class BenchResult:
    rows: pd.DataFrame  # one row per case, the result schema's columns plus ``speedup``
    figure: Any  # a matplotlib Figure, or None with plot=False
    checks: pd.DataFrame  # one row per (strategy, check case, mode, layout)

    def _repr_html_(self):  # a notebook shows the table
        return self.rows[["strategy", "params", "status", "median_s", "iqr_s", "pct_of_ceiling",
                          "speedup"]]._repr_html_()


def bench(op: str, strategies: list[str] | None = None, *, device: str = "cpu", dtype: str = "float32",
          timing: dict | None = None, check_first: bool = True, plot: bool = True, out: str | Path | None = None,
          seed: int = 0, **params) -> BenchResult:
    """Checks and times ``op`` over the grid ``params`` (a list is swept).

    ``strategies``: names, or None for every strategy that runs on ``device``.
    ``timing``: the config's timing keys (default: 5 samples, 0.2 s budget).
    """
    import impls  # noqa: F401  (registers the strategies)

    config = parse_config({
        "name": f"bench-{op}", "seed": seed, "devices": [device], "dtypes": [dtype],
        "timing": {"min_samples": 5, "budget_s": 0.2, "warmup_s": 0.02, **(timing or {})},
        "benchmarks": [{"op": op, "strategies": strategies or "all", "params": params}]}, "bench()")
    cases = expand(config)
    if not cases:
        raise UsageError(f"bench({op!r}): no strategy runs on {device} in {dtype}")
    check_rows = []
    if check_first:
        for result in check.run_checks(check.check_plan(config, cases), seed):
            check_rows.append({"strategy": result.item.strategy.name, "case": result.item.label,
                               "dtype": result.item.dtype, "status": result.verdict.status,
                               "message": result.verdict.message})
    ceilings = sweep.measure_ceilings((case.device for case in cases), config.threads)
    run_id = sweep.new_run_id(config.name)
    if out is not None:
        store.prepare_output_dir(Path(out))
        meta = env.run_metadata(env.apply_threads(config.threads), None, ["scatterbench.bench", op])
        meta.update(run_id=run_id, config=config.model_dump(), ceilings_gbps=ceilings, status="running")
        writer = store.RunWriter(Path(out), meta)
    else:
        writer = _MemoryWriter()
    try:
        sweep.run_sweep(cases, config, writer, run_id, ceilings)
        # A result directory written by bench() reads like one `run` wrote: finished, with its end.
        writer.update_meta(status="complete", end_time=env.now_iso(), load_avg_end=env.load_average())
    except KeyboardInterrupt:
        writer.update_meta(status="interrupted", interrupted_by="SIGINT")
        raise
    finally:
        writer.close()
    from harness.analysis import with_speedups

    rows = with_speedups(pd.DataFrame.from_records(writer.rows) if out is None else store.read_rows(Path(out)))
    figure = _figure(rows, op) if plot else None
    return BenchResult(rows, figure, pd.DataFrame.from_records(check_rows))


class _MemoryWriter:
    def __init__(self):
        self.rows: list[dict] = []

    def append(self, row: dict, samples_s=None) -> None:
        self.rows.append(dict(row))

    def update_meta(self, **fields) -> None:
        pass

    def close(self) -> None:
        pass


def _figure(rows: pd.DataFrame, op: str):

    import matplotlib.pyplot as plt

    timed = rows[rows["median_s"].notna()].copy()
    params = timed["params"].map(json.loads)
    keys = sorted({key for p in params for key in p})
    varying = [key for key in keys if params.map(lambda p: p.get(key)).nunique() > 1]
    fig, ax = plt.subplots(figsize=(8, 4.5), layout="constrained")
    if len(varying) == 1 and len(timed):
        key = varying[0]
        timed["x"] = params.map(lambda p: p[key])
        for name, line in timed.groupby("strategy"):
            line = line.sort_values("x")
            ax.errorbar(line["x"], line["median_s"], yerr=line["iqr_s"] / 2, marker="o", markersize=3,
                        capsize=2, label=name)
        ax.set_xscale("log")
        ax.set_xlabel(key)
    else:
        ordered = timed.sort_values("median_s")
        ax.barh(range(len(ordered)), ordered["median_s"], xerr=ordered["iqr_s"] / 2)
        ax.set_yticks(range(len(ordered)), [str(n).replace("$", r"\$") for n in ordered["strategy"]], fontsize=8)
    ax.set_yscale("log") if len(varying) == 1 else ax.set_xscale("log")
    # Times in µs/ms, as the report prints them, not "4×10⁻⁵" seconds; bars span median ± IQR/2.
    from matplotlib.ticker import FuncFormatter

    (ax.yaxis if len(varying) == 1 else ax.xaxis).set_major_formatter(FuncFormatter(lambda s, _: fmt_time(s)))
    ax.set_title(f"{op}: median time per call (bars: median ± IQR/2)", fontsize=10)
    if len(varying) == 1:
        ax.set_ylabel("median time per call")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, alpha=0.3, which="both")
    return fig
