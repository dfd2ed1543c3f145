import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.judging.compare import (
    as_json,
    as_markdown,
    compare_frames,
    compare_runs,
    regressed,
)
from harness.results.store import RunWriter
from tests.helpers import as_quiet, benchmark, config_yaml, plugin_env, scatterbench

SPIN_CONFIG = config_yaml(benchmark("maxpool2d", ["spin_steady", "spin_planted"], N=1, C=2, H=8, W=8, k=2),
                          name=None, timing={"min_samples": 30, "budget_s": 0.15, "warmup_s": 0.01},
                          threads={"torch": 1, "numpy": 1})


def with_spin_plugin(*args, slowdown: float = 1.0) -> subprocess.CompletedProcess:
    return scatterbench(*args, env=plugin_env("spin_plugin", SCATTERBENCH_TEST_SLOWDOWN=str(slowdown)))


def frame(rows):
    columns = ["case_id", "op", "strategy", "device", "dtype", "params", "status", "median_s"]
    return pd.DataFrame([dict(zip(columns, r)) for r in rows])


def synthetic(scale_new: float, seed: int, noise: float = 0.02):
    rng = np.random.default_rng(seed)
    params = json.dumps({"k": 2})
    names = ["a", "b", "ref"]
    base = {n: list(1e-3 * (1 + noise * rng.standard_normal(200))) for n in names}
    new = {n: list(1e-3 * (scale_new if n == "a" else 1) * (1 + noise * rng.standard_normal(200))) for n in names}
    def rows(samples):
        return frame([(n, "maxpool2d", n, "cpu", "float32", params, "ok", float(np.median(samples[n]))) for n in names])
    return rows(base), base, rows(new), new


def synthetic_run(directory: Path, meta: dict, seed: int) -> Path:
    """A complete run on disk, ``synthetic``'s base rows and samples (from
    ``seed``) under ``meta``, its run id the directory's name."""
    writer = RunWriter(directory, {"run_id": directory.name, "status": "complete", **meta})
    rows, samples, _, _ = synthetic(1.0, seed)
    for row in rows.to_dict("records"):
        writer.append(dict(row, run_id=directory.name), samples[row["case_id"]])
    writer.close()
    return directory


def test_a_planted_slowdown_is_flagged_and_nothing_else():
    base_rows, base, new_rows, new = synthetic(1.3, 0)
    table = compare_frames(base_rows, base, new_rows, new)
    verdicts = dict(zip(table["strategy"], table["verdict"]))
    assert verdicts == {"a": "regressed", "b": "same", "ref": "same"}
    assert table.loc[table["strategy"] == "a", "ratio"].iloc[0] == pytest.approx(1.3, rel=0.02)


@pytest.mark.parametrize("trial", range(5))
def test_a_a_comparisons_flag_nothing(trial):
    base_rows, base, new_rows, new = synthetic(1.0, 100 + trial)
    assert len(regressed(compare_frames(base_rows, base, new_rows, new))) == 0


def test_small_real_shift_below_the_factor_is_not_flagged():
    base_rows, base, new_rows, new = synthetic(1.05, 7, noise=0.001)
    table = compare_frames(base_rows, base, new_rows, new)
    row = table[table["strategy"] == "a"].iloc[0]
    assert row["p_value"] < 1e-10 and row["verdict"] == "same"


def test_normalised_mode_cancels_a_uniformly_slower_machine():
    base_rows, base, new_rows, new = synthetic(1.0, 3)
    slower_new = {n: [s * 1.8 for s in v] for n, v in new.items()}
    slower_rows = new_rows.assign(median_s=new_rows["median_s"] * 1.8)
    plain = compare_frames(base_rows, base, slower_rows, slower_new)
    assert set(regressed(plain)["strategy"]) == {"a", "b", "ref"}
    # The reference itself is judged against the other strategies, so it cancels too.
    normalised = compare_frames(base_rows, base, slower_rows, slower_new, relative_to=["ref", "b"])
    assert len(regressed(normalised)) == 0


def test_a_slowdown_of_the_reference_itself_is_still_flagged():
    """Normalising by R hides a slowdown of R; R is judged against the other
    strategies of its case, so it is caught."""
    base_rows, base, new_rows, new = synthetic(1.0, 5)
    new = {n: ([s * 3 for s in v] if n == "ref" else v) for n, v in new.items()}
    new_rows = new_rows.assign(median_s=[m * 3 if s == "ref" else m
                                         for s, m in zip(new_rows["strategy"], new_rows["median_s"])])
    for references in (["ref", "b"], ["ref"]):
        table = compare_frames(base_rows, base, new_rows, new, relative_to=references)
        assert "ref" in set(regressed(table)["strategy"]), references


def test_status_changes_and_one_sided_cases():
    params = json.dumps({"k": 2})
    base_rows = frame([("x", "maxpool2d", "x", "cpu", "float32", params, "ok", 1e-3),
                       ("gone", "maxpool2d", "gone", "cpu", "float32", params, "ok", 1e-3)])
    new_rows = frame([("x", "maxpool2d", "x", "cpu", "float32", params, "mismatch", np.nan),
                      ("new", "maxpool2d", "new", "cpu", "float32", params, "ok", 1e-3)])
    table = compare_frames(base_rows, {"x": [1e-3] * 5, "gone": [1e-3] * 5}, new_rows, {"new": [1e-3] * 5})
    verdicts = dict(zip(table["strategy"], table["verdict"]))
    assert verdicts == {"x": "broken", "gone": "only in base", "new": "only in new"}
    assert list(regressed(table)["strategy"]) == ["x"]
    assert json.loads(as_json(table))["regressed"] == 1


def test_markdown_escapes_hostile_names():
    params = json.dumps({"k": 2})
    rows = frame([("x", "maxpool2d", "<img src=x onerror=alert(1)>|", "cpu", "float32", params, "ok", 1e-3)])
    text = as_markdown(compare_frames(rows, {"x": [1e-3] * 5}, rows, {"x": [1e-3] * 5}))
    assert not re.search(r"(?<!\\)<", text) and "\\<img" in text


@pytest.mark.slow
@pytest.mark.quiet  # a 1.5x slowdown told from an A/A pair by wall time
def test_real_runs_planted_slowdown_then_a_a(tmp_path, tiny_config):
    config = tiny_config(SPIN_CONFIG)
    base, slow, again = tmp_path / "base", tmp_path / "slow", tmp_path / "again"
    for out, slowdown in ((base, 1.0), (slow, 1.5), (again, 1.0)):
        result = with_spin_plugin("run", config, "-o", out, "--no-progress", slowdown=slowdown)
        assert result.returncode == 0, result.stderr
        as_quiet(out)  # compare judges only runs the fitness rule admits, whatever this machine's load
    # 10th percentiles: the spin is wall-clock time, and on a loaded machine a
    # preempted call ends late in every run alike, which moves the medians.
    flagged = regressed(compare_runs(base, slow, statistic="p10"))
    assert list(flagged["strategy"]) == ["spin_planted"]
    assert len(regressed(compare_runs(base, again, statistic="p10"))) == 0
    cli = with_spin_plugin("compare", base, slow, "--format", "md", "--statistic", "p10")
    assert cli.returncode == 1 and "**regressed**" in cli.stdout
    same = scatterbench("compare", base, base)
    assert same.returncode == 0, same.stderr
    bad = scatterbench("compare", base, tmp_path / "nope")
    assert bad.returncode == 2 and "no such directory" in bad.stderr


def with_rows(samples: dict, statuses: dict | None = None) -> pd.DataFrame:
    params = json.dumps({"k": 2})
    statuses = statuses or {}
    return frame([(n, "maxpool2d", n, "cpu", "float32", params, statuses.get(n, "ok"), float(np.median(v)))
                  for n, v in samples.items()])


def test_a_reference_missing_from_one_run_does_not_switch_the_gate_off():
    """The reference is gone from the new run (renamed, deselected): the
    others are judged against the geometric mean of what both runs timed, so
    a 10x slowdown still fails."""
    base_rows, base, _, new = synthetic(1.0, 11)
    new = {n: ([s * 10 for s in v] if n == "a" else v) for n, v in new.items() if n != "ref"}
    table = compare_frames(base_rows, base, with_rows(new), new, relative_to=["ref"])
    verdicts = dict(zip(table["strategy"], table["verdict"]))
    # b, divided by a, looks faster: that does not fail, a's slowdown does.
    assert verdicts == {"a": "regressed", "b": "improved", "ref": "only in base"}
    assert set(regressed(table)["strategy"]) == {"a"}


def test_both_runs_are_divided_by_the_same_reference():
    """--relative-to ref b: ref is missing from the new run only. Dividing the
    base by ref and the new run by b would call a steady strategy 3x slower."""
    base_rows, base, _, new = synthetic(1.0, 12)
    new = {n: ([s * 3 for s in v] if n == "b" else v) for n, v in new.items() if n != "ref"}
    base = {n: ([s * 3 for s in v] if n == "b" else v) for n, v in base.items()}
    table = compare_frames(with_rows(base), base, with_rows(new), new, relative_to=["ref", "b"])
    verdicts = dict(zip(table["strategy"], table["verdict"]))
    assert verdicts == {"a": "same", "b": "same", "ref": "only in base"}
    assert dict(zip(table["strategy"], table["reference"]))["a"] == "b"


def test_a_strategy_added_to_the_new_run_does_not_flag_the_reference():
    """The reference is judged against the strategies both runs timed: a much
    faster newcomer must not make it look slower."""
    base_rows, base, _, new = synthetic(1.0, 13)
    new = dict(new, fast=[s / 50 for s in new["a"]])
    table = compare_frames(base_rows, base, with_rows(new), new, normalise=False, relative_to=["ref"])
    verdicts = dict(zip(table["strategy"], table["verdict"]))
    assert verdicts == {"a": "same", "b": "same", "ref": "same", "fast": "only in new"}


def test_every_unknown_relative_to_name_is_refused(tmp_path):
    from harness.base.errors import UsageError
    from harness.judging.compare import compare_dirs

    base_rows, base, new_rows, new = synthetic(1.0, 14)
    for name, rows, samples in (("base", base_rows, base), ("new", new_rows, new)):
        writer = RunWriter(tmp_path / name, {"run_id": name, "status": "complete"})
        for row in rows.to_dict("records"):
            writer.append(row, samples[row["case_id"]])
        writer.close()
    assert len(compare_dirs(tmp_path / "base", tmp_path / "new", relative_to=["ref"]).table) == 3
    with pytest.raises(UsageError, match="refx"):
        compare_dirs(tmp_path / "base", tmp_path / "new", relative_to=["ref", "refx"])


def test_compare_warns_when_the_runs_come_from_different_cpus(tmp_path):
    from harness.judging.compare import compare_dirs

    def run(name, family_model):
        return synthetic_run(tmp_path / name, {"cpu_model": "AMD EPYC", "cpu_count": 2, "machine": "vm / AMD EPYC x2",
                                               "hardware": {"cpu_model": "AMD EPYC", "cpu_count": 2,
                                                            "cpu_family_model": family_model}}, 17)

    zen3, zen5, zen5_again = run("zen3", "25-1"), run("zen5", "26-2"), run("zen5b", "26-2")
    (warning,) = compare_dirs(zen3, zen5).warnings
    assert "different hardware" in warning and "[25-1]" in warning and "[26-2]" in warning
    assert compare_dirs(zen5, zen5_again).warnings == [] and compare_dirs(zen3, zen5, normalise=True).warnings == []


def test_ceiling_history_counts_only_runs_on_the_same_cpu(tmp_path):
    """A Zen 5's ceiling against a Zen 3's history read as +116 %: both VMs
    are named "vm / AMD EPYC x2"."""
    from harness.measuring import facts

    def meta(family_model, gbps):
        return {"machine": "vm / AMD EPYC x2", "ceilings_gbps": {"cpu": gbps},
                "hardware": {"cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_family_model": family_model}}

    for name, family_model, gbps in (("a", "25-1", 30.0), ("b", "25-1", 32.0), ("c", "26-2", 70.0)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text(json.dumps(meta(family_model, gbps)))
    (tmp_path / "new").mkdir()
    history = facts.ceiling_history(tmp_path / "new", {"cpu": 71.0}, meta("26-2", 71.0))
    assert history["cpu"]["runs"] == 1 and history["cpu"]["history_median_gbps"] == 70.0


def test_a_p_value_that_underflowed_is_shown_as_a_bound():
    from harness.base.format import fmt_p

    assert fmt_p(0.0) == "< 1e-300" and fmt_p(0.00123) == "0.0012" and fmt_p(float("nan")) == "–"


# ------------------------------------------------ the fitness rule and the mode column
def run_on_disk(directory: Path, samples: dict, statuses: dict | None = None, load: float = 0.1,
                modes: dict | None = None) -> Path:
    """A complete run on a 2-core machine (``as_quiet``'s quiet figures, then
    its 1-minute loads set to ``load``): ``samples`` {case: seconds}, each
    case a strategy of its own name (``modes``: a case's training mode,
    forward where not given)."""
    meta = {"run_id": directory.name, "status": "complete", "cpu_count": 2, "cpu_model": "AMD EPYC"}
    writer = RunWriter(directory, meta)
    modes = modes or {}
    for row in with_rows(samples, statuses).to_dict("records"):
        name = row["case_id"]
        row.update(strategy=name.split("@")[0], mode=modes.get(name, "forward"), run_id=directory.name)
        writer.append(row, samples[name])
    writer.close()
    as_quiet(directory)
    if load != 0.1:
        meta = json.loads((directory / "meta.json").read_text())
        meta["load_avg_start"] = meta["load_avg_end"] = [load, load, load]
        (directory / "meta.json").write_text(json.dumps(meta))
    return directory


def planted_pair(tmp_path, new_load: float, broken: bool = False):
    """``a`` 1.3x slower in the new run (a regression on a fit pair), and
    ``b`` a mismatch in it where ``broken``; the new run's load ``new_load``."""
    _, base, _, new = synthetic(1.3, 21)
    base_dir = run_on_disk(tmp_path / "base", base)
    new_dir = run_on_disk(tmp_path / "new", new, {"b": "mismatch"} if broken else None, load=new_load)
    return base_dir, new_dir


def compare_cli(capsys, *args):
    from harness import cli

    status = cli.main(["compare", *map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_fit_pair_with_a_planted_slowdown_regresses(tmp_path, capsys):
    """The pair the next test makes unfit, judged: the slowdown is found (so
    the unfit pair's silence is the fitness rule's, not a blind comparison)."""
    status, out, err = compare_cli(capsys, *planted_pair(tmp_path, new_load=0.1))
    assert status == 1 and "1 regressed" in err and "not judged" not in out + err


@pytest.mark.parametrize("fmt", ["table", "md", "json"])
def test_an_unfit_pair_says_which_run_and_why_in_one_line_never_regressed_and_exits_3(tmp_path, capsys, fmt):
    from harness.base.errors import EXIT_UNFIT

    base_dir, new_dir = planted_pair(tmp_path, new_load=9.0)  # at or above 2 cores: busy
    status, out, err = compare_cli(capsys, base_dir, new_dir, "--format", fmt)
    assert status == EXIT_UNFIT == 3
    (line,) = [line for line in err.splitlines() if line.strip()]
    assert line.startswith("not judged: the new run ") and str(new_dir) in line and "load 9 on 2 cores" in line
    assert "the base run" not in line  # the base is fit: only the unfit run is named
    shown = out if fmt != "json" else json.dumps(json.loads(out)["cases"])
    assert "regressed" not in shown and "improved" not in shown and "same" not in shown.replace("same_", "")
    if fmt == "json":
        assert json.loads(out)["unfit"] == line and json.loads(out)["regressed"] == 0
    if fmt == "md":
        assert "not judged: unfit |" in out and "not judged: the new run" in out


def test_a_pair_at_different_thread_settings_is_not_judged_and_says_why(tmp_path, capsys):
    """Issue 51: a 2-thread run against a 1-thread one measures another thing; compare says so in
    its one line and exits 3, the planted slowdown never a regression."""
    base_dir, new_dir = planted_pair(tmp_path, new_load=0.1)
    for directory, threads in ((base_dir, {"numpy": 2, "torch": 2}), (new_dir, {"numpy": 1, "torch": 1})):
        meta = json.loads((directory / "meta.json").read_text())
        (directory / "meta.json").write_text(json.dumps(dict(meta, threads=threads)))
    status, out, err = compare_cli(capsys, base_dir, new_dir)
    (line,) = err.strip().splitlines()
    assert status == 3 and "regressed" not in out + err
    assert "the runs are not alike (different thread settings (numpy 2, torch 2 → numpy 1, torch 1))" in line, line


def test_both_runs_unfit_are_named_in_the_one_line(tmp_path, capsys):
    _, base, _, new = synthetic(1.3, 22)
    base_dir, new_dir = run_on_disk(tmp_path / "base", base, load=4.0), run_on_disk(tmp_path / "new", new, load=9.0)
    status, out, err = compare_cli(capsys, base_dir, new_dir)
    (line,) = err.strip().splitlines()
    assert status == 3 and "the base run" in line and "load 4 on 2 cores" in line and "load 9 on 2 cores" in line
    assert "regressed" not in out + err


def test_a_breakage_in_an_unfit_pair_is_still_a_finding(tmp_path, capsys):
    """The check's verdict does not depend on the load: a case that broke
    exits 1, named broken, never regressed, and the times stay unjudged."""
    status, out, err = compare_cli(capsys, *planted_pair(tmp_path, new_load=9.0, broken=True))
    assert status == 1 and "1 broken" in err and "not judged: the new run" in err
    assert "regressed" not in out + err and "broken" in out


def test_mode_is_a_column_of_compares_table_and_markdown(tmp_path, capsys):
    """A case timed forward and backward: two rows told apart by their mode."""
    samples = {"a": [1e-3] * 9, "a@backward": [2e-3] * 9}
    modes = {"a@backward": "backward"}
    base_dir = run_on_disk(tmp_path / "base", samples, modes=modes)
    new_dir = run_on_disk(tmp_path / "new", samples, modes=modes)
    table = compare_runs(base_dir, new_dir)
    assert sorted(zip(table["strategy"], table["mode"])) == [("a", "backward"), ("a", "forward")]
    lines = as_markdown(table).splitlines()
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:4]]
    assert header[4] == "mode" and sorted(row[4] for row in rows) == ["backward", "forward"]
    assert len({tuple(row) for row in rows}) == 2
    status, drawn, _ = compare_cli(capsys, base_dir, new_dir)
    (header,) = [line for line in drawn.splitlines() if " strategy " in line]
    assert status == 0 and " mode " in header
    assert {mode for mode in ("forward", "backward") if f" {mode} " in drawn} == {"forward", "backward"}
    status, out, _ = compare_cli(capsys, base_dir, new_dir, "--format", "md")
    assert status == 0 and "| mode |" in out and "| backward |" in out
