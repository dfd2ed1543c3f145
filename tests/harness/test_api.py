"""The one-call Python API."""

import json

import pytest

import scatterbench

# Pinned: unpinned threads on the shared VM would (rightly) warn, nondeterministically.
PINNED = {"torch": 1, "numpy": 1, "numba": 1}

pytestmark = pytest.mark.slow  # subprocesses, sweeps or compiles: `make test` runs them, `make test-fast` does not


def test_bench_checks_times_and_plots_a_sweep():
    result = scatterbench.bench("dispersion", ["seed_loop", "torch_index_add", "numpy_loop"], B=1, C=[2, 4, 8],
                                H=8, W=8, S=1, timing={"budget_s": 0.01, "warmup_s": 0}, threads=PINNED)
    assert len(result.rows) == 9 and set(result.rows["status"]) == {"ok"}
    assert result.rows["median_s"].gt(0).all()
    assert sorted({json.loads(p)["C"] for p in result.rows["params"]}) == [2, 4, 8]
    baseline = result.rows[result.rows["strategy"] == "seed_loop"]
    if result.unfit_reasons:  # a busy machine (CI's): times, but no speed-up, and the notes say why
        assert result.rows["speedup"].isna().all()
        assert f"this measurement fails the fitness rule ({'; '.join(result.unfit_reasons)})" in " ".join(result.notes)
    else:
        assert (baseline["speedup"] == 1.0).all()
    assert len(result.checks) > 0 and set(result.checks["status"]) <= {"ok", "inexact", "skipped"}
    axes = result.figure.axes[0]
    labels = {text.get_text() for text in axes.get_legend().get_texts()}
    assert labels >= {"seed_loop", "numpy_loop", "torch_index_add"}
    # Times in µs/ms as the report prints them, not powers of ten of seconds.
    result.figure.canvas.draw()
    ticks = [label.get_text() for label in axes.get_yticklabels() if label.get_text()]
    assert ticks and "10^" not in " ".join(ticks) and any(text.endswith(("µs", "ms", "ns")) for text in ticks), ticks


def test_bench_writes_a_result_directory_when_asked(tmp_path):
    from harness.results.store import read_run

    scatterbench.bench("maxpool2d", ["torch_max_pool2d_indices"], N=1, C=1, H=8, W=8, k=2, threads=PINNED,
                       plot=False, timing={"budget_s": 0.01, "warmup_s": 0}, out=tmp_path / "run")
    meta, rows, samples = read_run(tmp_path / "run")
    assert len(rows) == 1 and rows["status"].iloc[0] == "ok" and len(samples) == 1
    # It reads like a directory `run` wrote: finished, and its rows carry its run id.
    assert meta["status"] == "complete" and meta.get("end_time")
    # Its thread settings and its adversarial check's cost, as a run records them.
    assert {name: meta["threads"][name] for name in PINNED} == PINNED and meta["phase_s"]["adversarial"] > 0
    assert set(rows["run_id"]) == {meta["run_id"]}


def test_bench_figure_draws_the_reports_quartiles_and_colours():
    """bench()'s figure had median ± IQR/2 bars in matplotlib's default
    colours: on a skewed sample the bar reached below the fastest sample.
    It now draws Q1 to Q3 in each strategy's report colour, and a far-off Q3
    is cut at the axis's edge and marked there."""
    import numpy as np
    import pandas as pd
    from matplotlib.colors import to_rgba

    from harness.api import _figure
    from harness.presenting.report.figures import CLIP_MARK, strategy_colour
    from harness.results import metrics

    skewed = np.concatenate([np.full(40, 185e-6), 185e-6 * np.exp(np.random.default_rng(0).exponential(2.0, 60))])
    params = json.dumps({"N": 1, "C": 1, "H": 8, "W": 8, "k": 2})
    rows = pd.DataFrame([dict(op="maxpool2d", strategy="seed_loops", params=params, **metrics.TIMING.compute(skewed)),
                         dict(op="maxpool2d", strategy="numba_fused", params=params,
                              **dict(metrics.TIMING.compute(np.full(5, 2e-5)), q3_s=2e-1, max_s=3e-1,
                                     q1_s=1e-10, min_s=1e-10))])
    ax = _figure(rows, "maxpool2d").axes[0]
    bars = sorted(ax.patches, key=lambda bar: bar.get_width())
    assert [to_rgba(bar.get_facecolor()) for bar in bars] == [to_rgba(strategy_colour(name))
                                                              for name in ("numba_fused", "seed_loops")]
    (whiskers,) = [collection for collection in ax.collections]
    ends = {round(segment[0][1]): (segment[0][0], segment[1][0]) for segment in whiskers.get_segments()}
    seed = rows.iloc[0]
    assert ends[1] == pytest.approx((seed["q1_s"], seed["q3_s"])) and ends[1][0] >= seed["min_s"]
    left, right = ax.get_xlim()
    assert ends[0] == pytest.approx((left, right)) and right < 2e-1 and left > 1e-10
    assert sorted(line.get_marker() for line in ax.get_lines() if line.get_gid() == CLIP_MARK) == ["<", ">"]


def test_bench_figure_keeps_a_strategys_colour_and_tells_its_modes_apart():
    import numpy as np
    import pandas as pd
    from matplotlib.colors import to_rgba

    from harness.api import _figure
    from harness.presenting.report.figures import strategy_colour
    from harness.results import metrics

    rows = pd.DataFrame([dict(op="maxpool2d", strategy="numba_fused", mode=mode, params=json.dumps({"N": n, "k": 2}),
                              **metrics.TIMING.compute(np.full(5, 1e-5 * n * (1 + index))))
                         for index, mode in enumerate(("forward", "backward", "forward+backward")) for n in (1, 4)])
    ax = _figure(rows, "maxpool2d").axes[0]
    handles, labels = ax.get_legend_handles_labels()
    lines = {text: handle[0] for handle, text in zip(handles, labels)}  # an errorbar's data line
    assert set(lines) == {"numba_fused (forward)", "numba_fused (backward)", "numba_fused (forward+backward)"}
    assert {to_rgba(line.get_color()) for line in lines.values()} == {to_rgba(strategy_colour("numba_fused"))}
    assert len({line.get_linestyle() for line in lines.values()}) == 3


@pytest.mark.parametrize("load", ["quiet", "busy"])
def test_bench_gives_no_speed_up_from_a_measurement_the_fitness_rule_refuses(monkeypatch, load):
    """`run`'s tables and the report give no speed-up from an unfit run;
    bench() gave one from a measurement at any load. At the core count the
    times are still given, the speed-ups are not, and the notes say why."""
    import math
    import os

    cores = os.cpu_count()
    level = cores + 1.0 if load == "busy" else 0.1
    monkeypatch.setattr(os, "getloadavg", lambda: (level, level, level))
    result = scatterbench.bench("maxpool2d", ["seed_loops", "torch_max_pool2d_indices"], N=1, C=1, H=8, W=8, k=2,
                                timing={"budget_s": 0.01, "warmup_s": 0}, threads=PINNED, plot=False)
    assert result.rows["median_s"].gt(0).all()
    load_reasons = [reason for reason in result.unfit_reasons if reason.startswith("load")]
    if load == "busy":
        assert load_reasons == [f"load {level:.2g} on {cores} cores"]
        assert result.rows["speedup"].isna().all()
        assert any(note.startswith("this measurement fails the fitness rule (load ") and
                   note.endswith("its times are shown, but no speed-up is given") for note in result.notes)
    else:
        assert load_reasons == []
        if not result.unfit_reasons:  # two cases, one of them unstable on a busy CI machine: unfit too
            assert (result.rows.set_index("strategy")["speedup"]["seed_loops"] == 1.0)
            assert not math.isnan(result.rows.set_index("strategy")["speedup"]["torch_max_pool2d_indices"])
