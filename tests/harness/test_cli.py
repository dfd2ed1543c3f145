"""The CLI end to end on tiny configs, in subprocesses as a user runs it."""

import sys

import pytest

from harness.judging import analysis
from harness.results.store import read_meta, read_rows, read_samples
from tests.helpers import benchmark, config_yaml, scatterbench

TINY_BENCHMARKS = (benchmark("maxpool2d", ["seed_reshape_argmax", "torch_max_pool2d_indices", "seed_loops"],
                             N=1, C=2, H=6, W=6, k=2),
                   benchmark("dispersion", ["seed_loop", "torch_fold"], B=1, C=3, H=4, W=5, S=1))
TINY = config_yaml(*TINY_BENCHMARKS, threads={"torch": 1, "numpy": 1})


@pytest.mark.slow
def test_list_filters_by_op_and_device():
    result = scatterbench("list", "--op", "maxunpool", "--device", "cpu")
    assert result.returncode == 0
    assert "numpy_seed_row_loop" in result.stdout and "seed_loops" not in result.stdout
    bad = scatterbench("list", "--op", "nope")
    assert bad.returncode == 2 and "unknown operator 'nope'" in bad.stderr


@pytest.mark.slow
def test_check_passes_and_prints_a_table(tiny_config):
    result = scatterbench("check", tiny_config(TINY), "--no-progress")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "seed_reshape_argmax" in result.stdout and "0 failed" in result.stdout


@pytest.mark.slow
def test_run_writes_every_spec_column_and_a_summary(tiny_config, tmp_path):
    out = tmp_path / "run"
    result = scatterbench("run", tiny_config(TINY), "-o", out, "--no-progress", "--report", "--tables")
    assert result.returncode == 0, result.stderr
    rows = read_rows(out)
    assert len(rows) == 5 and set(rows["status"]) == {"ok"}
    meta = read_meta(out)
    assert "GB/s" in result.stdout
    # Speed-ups only for a run the fitness rule stands behind; on a busy machine (CI's: "2 of 5
    # unstable") the tables say why there are none instead.
    unfit = analysis.run_unfit_reasons(meta, rows)
    if unfit:
        assert f"warning: this run fails the fitness rule ({'; '.join(unfit)})" in " ".join(result.stdout.split())
        assert "speedup over" not in result.stdout
    else:
        assert "speedup over seed_loops" in result.stdout and "fitness rule" not in result.stdout
    # A ceiling measured on a machine at capacity is not used (harness/measuring/ceilings.py).
    judged = ("ceiling_gbps", "pct_of_ceiling") if "cpu" not in meta.get("ceiling_busy", {}) else ()
    for column in ("median_s", "iqr_s", "min_s", "n_samples", "bytes", "gbps", *judged,
                   "max_abs_err", "rel_err", "peak_mem_bytes"):
        assert rows[column].notna().all(), column
    if not judged:
        assert rows["pct_of_ceiling"].isna().all() and "cpu copy ceiling measured busy" in result.stderr
    # SPEC 3 "Racing": five samples for a strategy that races to the end, two rounds' for one that leaves
    left_early = rows["decision"].isin(["slower", "equivalent"])
    assert (rows["n_samples"] >= 2).all() and (rows.loc[~left_early, "n_samples"] >= 5).all()
    for key in ("run_id", "start_time", "git_commit", "host", "cpu_model", "cpu_count", "python",
                "versions", "threads", "config_file", "ceilings_gbps"):
        assert key in meta, key
    assert meta["threads"]["torch"] == 1 and meta["status"] == "complete"
    assert set(meta["phase_s"]) >= {"ceilings", "adversarial", "check", "prepare/compile", "time"}
    assert meta["hardware"]["cpu_model"] and meta["load_avg_start"] is not None
    assert rows["host_s"].notna().all() and rows["load_avg"].notna().all()
    assert set(meta["fresh_write_gbps"]) == {"numpy", "torch"}
    samples = read_samples(out)
    assert set(samples) == set(rows["case_id"])
    assert (out / "report" / "report.html").exists()
    # the run's own report: PNG figures only (make report adds the SVGs); a run the fitness
    # rule refuses (this machine busy) has its tables in the appendix and no figures at all
    assert not list((out / "report").rglob("*.svg"))
    if not unfit:
        assert list((out / "report" / "figures").glob("*.png"))


@pytest.mark.slow
def test_run_refuses_to_overwrite_and_resumes(tiny_config, tmp_path):
    out = tmp_path / "run"
    config = tiny_config(TINY)
    assert scatterbench("run", config, "-o", out, "--no-progress", "--strategy", "seed_loop").returncode == 0
    again = scatterbench("run", config, "-o", out, "--no-progress")
    assert again.returncode == 2 and "already holds a run" in again.stderr
    resumed = scatterbench("run", config, "--resume", out, "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "1 cases done, 4 to run" in resumed.stderr
    rows = read_rows(out)
    assert len(rows) == 5 and rows["case_id"].is_unique
    # Completing a run under other settings would mix two measurements under one meta.json.
    other = tiny_config(config_yaml(*TINY_BENCHMARKS, threads={"torch": 2, "numpy": 1}, seed=7), "other.yaml")
    stopped = tmp_path / "stopped"
    assert scatterbench("run", config, "-o", stopped, "--no-progress", "--strategy", "seed_loop").returncode == 0
    refused = scatterbench("run", other, "--resume", stopped, "--no-progress")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "seed: 0 -> 7" in refused.stderr and "threads.torch: 1 -> 2" in refused.stderr
    assert len(read_rows(stopped)) == 1


@pytest.mark.slow
def test_run_summary_is_a_grid_readable_at_80_columns(tiny_config, tmp_path):
    """The default summary is the strategies x sizes grid; at 80 columns no
    strategy name is cut."""
    import os

    result = scatterbench("run", tiny_config(TINY), "-o", tmp_path / "run", "--no-progress",
                          env=dict(os.environ, COLUMNS="80"))
    assert result.returncode == 0, result.stderr
    table_lines = [line for line in result.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table_lines and max(len(line) for line in table_lines) <= 80
    for name in ("seed_reshape_argmax", "torch_max_pool2d_indices", "seed_loops", "torch_fold"):
        assert name in result.stdout, name
    assert "…" not in result.stdout


def test_every_subcommand_has_help_and_no_internal_one_shows():
    from harness.cli import COMMANDS, build_parser

    top = scatterbench("--help")
    assert top.returncode == 0 and "SUPPRESS" not in top.stdout and "_case" not in top.stdout
    parser = build_parser()
    for declared in COMMANDS:
        assert declared.help, declared.name
        result = scatterbench(declared.name, "--help")
        assert result.returncode == 0, declared.name + result.stderr
        for action in parser._subparsers._group_actions[0].choices[declared.name]._actions:
            if action.dest not in ("help",):
                assert action.help, f"{declared.name} {action.dest} has no help text"


def test_an_unexpected_exception_is_one_line_and_exit_2(monkeypatch, capsys):
    """A bug (ours or a plugin's) still ends in one line naming the
    exception, with the traceback behind --debug."""
    from harness import cli

    def explode(args):
        raise TypeError("unhashable type: 'list'")

    monkeypatch.setattr(cli, "COMMANDS", cli.COMMANDS + [cli.Command("explode", "raises", (), explode)])
    assert cli.main(["explode"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unexpected TypeError: unhashable type" in err and "--debug" in err
    with pytest.raises(TypeError):
        cli.main(["--debug", "explode"])
    with pytest.raises(TypeError):  # after the command too, as the hint reads it
        cli.main(["explode", "--debug"])


def test_the_grid_marks_the_fastest_in_text_and_never_ranks_a_partial_output():
    """Bold does not survive a log or a pipe: the fastest cell carries a '*'.
    A values-only maxpool2d strategy is marked and never starred."""
    import json

    import pandas as pd
    from rich.console import Console

    from harness.presenting.tables import grid_tables

    params = json.dumps({"N": 1, "C": 1, "H": 8, "W": 8, "k": 2})
    rows = pd.DataFrame([dict(op="maxpool2d", strategy=name, device="cpu", dtype="float32", params=params,
                              status="ok", median_s=median, iqr_s=median / 100, gbps=1.0, pct_of_ceiling=1.0,
                              message="", case_id=name)
                         for name, median in (("seed_loops", 1e-2), ("torch_max_pool2d", 1e-5),
                                              ("torch_max_pool2d_indices", 1e-4))])
    console = Console(width=100, record=True, color_system=None, force_terminal=False)
    for table in grid_tables(rows):
        console.print(table)
    text = console.export_text()
    lines = {line.split()[1]: line for line in text.splitlines() if line.startswith("│")}
    assert "*" in lines["torch_max_pool2d_indices"], text
    assert "*" not in lines["torch_max_pool2d"] and "(part)" in lines["torch_max_pool2d"], text
    assert "returns less than values+indices" in text


@pytest.mark.parametrize("width", [80, 100, 200])
def test_list_compare_and_check_tables_fit_the_width_and_keep_names_whole(width):
    """At 80 columns every cell after the strategy read '…' and params wrapped
    over five lines: the tables now leave out the least important columns
    (and say which) instead of cutting names, statuses and verdicts."""
    import json

    import pandas as pd
    from rich.console import Console

    from harness.measuring.check import CheckItem, CheckResult
    from harness.presenting.tables import check_table, compare_table, strategies_table
    from impls.common import Verdict
    from impls.registry import all_strategies

    strategies = all_strategies()
    params = json.dumps({"N": 16, "C": 16, "H": 32, "W": 32, "k": 2})
    compared = pd.DataFrame([dict(op=s.op, strategy=s.name, device="cpu", dtype="float32", mode="forward", params=params,
                                  base_s=1e-3, new_s=2e-3, ratio=2.0, p_value=1e-9, verdict="regressed")
                             for s in strategies])
    results = [CheckResult(CheckItem(s, (("C", 3), ("N", 2)), "float32", "cpu", "adversarial", "contiguous"),
                           Verdict("mismatch", "values: sign of zero differs at (0, 2, 2, 2) " * 4), 0.01)
               for s in strategies]
    for table in (strategies_table(strategies, width), compare_table(compared, width=width),
                  check_table(results, width)):
        console = Console(width=width, record=True, color_system=None)
        console.print(table)
        text = console.export_text()
        lines = text.splitlines()
        assert max(len(line) for line in lines) <= width, text
        body = [line for line in lines if line.startswith("│")]
        for s in strategies:
            assert any(f"│ {s.name} " in line for line in body), (s.name, text)
        if "verdict" in text:
            assert all("regressed" in line for line in body)
        if "first problem" in text or "cases" in text:
            assert all("mismatch" in line for line in body)
        if width == 80:
            assert "left out at 80 columns" in text


@pytest.mark.parametrize("width", [80, 120])
def test_the_progress_line_keeps_its_count_and_eta_at_any_width(width):
    from rich.console import Console

    from harness.presenting.tables import progress_bar

    console = Console(width=width, record=True, color_system=None, force_terminal=False)
    with progress_bar(console=console) as progress:
        task = progress.add_task("x", total=82)
        progress.update(task, advance=7, description="prepare/compile dispersion_pinv/torch_compile_unfold_view "
                                                     "cpu float32")
        progress.refresh()
    line = [line for line in console.export_text().splitlines() if "7/82" in line][-1]
    assert len(line) <= width and "eta" in line and "7/82" in line, line


def test_sigterm_inside_an_import_is_raised_once_the_import_is_done(tmp_path, monkeypatch):
    """A library's import may swallow the KeyboardInterrupt a SIGTERM raises
    in it (``import torch`` does), and `check` then ran to the end with exit 0.
    The handler sends the signal again once the import is over."""
    import signal
    import time

    from harness import cli

    (tmp_path / "swallowing_import.py").write_text(
        "import os, signal, time\n"
        "try:\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    time.sleep(0.3)\n"
        "except BaseException:  # what a library's import may do\n"
        "    pass\n"
        "DONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    previous = cli._terminate_like_interrupt()
    try:
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            import swallowing_import  # noqa: F401
            time.sleep(5)
    finally:
        signal.signal(signal.SIGTERM, previous)
        module = sys.modules.pop("swallowing_import", None)
    assert module is not None and module.DONE


def test_run_threads_sets_every_library_and_its_reproduce_line_keeps_it(tiny_config, tmp_path):
    """One config at 1 thread and at every core (issue 50), without a second file repeating its
    benchmarks: ``--threads`` overrides the config's ``threads:`` for every library, is recorded, and
    resuming under another setting is refused as a config's would be."""
    from harness.presenting.report.build import reproduce_line

    config = tiny_config(TINY)
    out = tmp_path / "two"
    done = scatterbench("run", config, "--threads", "2", "-o", out, "--no-progress", "--strategy", "seed_loop")
    assert done.returncode == 0, done.stderr
    meta = read_meta(out)
    assert set(meta["threads"].values()) == {2} and {"torch", "numpy", "numba"} <= set(meta["threads"])
    assert reproduce_line(meta).endswith(" --threads 2 --strategy seed_loop")
    refused = scatterbench("run", config, "--resume", out, "--no-progress")
    assert refused.returncode == 2 and "threads.torch: 2 -> 1" in refused.stderr, refused.stderr
    bad = scatterbench("run", config, "--threads", "0", "-o", tmp_path / "bad", "--no-progress")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--threads '0': a count of threads (1 or more) or 'auto'" in bad.stderr
