"""Machines side by side (issue 25): the report opens with the answer table,
and an operator run on several machines gets, per size, one strategy ×
machine table and a sentence naming who wins where and where the order flips."""

import json
import math
import shutil
from pathlib import Path

import pandas as pd

import report
from harness.judging import analysis
from harness.presenting.report import sections
from tests.helpers import ROOT

from .test_report import fixture_run

ZEN5 = ROOT / "results" / "20261125T024630-vm-default-0507"  # AMD EPYC family 26 model 2
XEON = ROOT / "results" / "20261125T111017-vm-default-ea9f"  # Intel Xeon family 6 model 167


def _headings(md: str, level: int) -> list[str]:
    return [line[level + 1:] for line in md.splitlines() if line.startswith("#" * level + " ")]


def _busy_copy(source: Path, target: Path, load: float) -> Path:
    """A copy of a committed run with its recorded load edited: the same
    numbers, on a machine the fitness rule calls busy."""
    shutil.copytree(source, target)
    meta = json.loads((target / "meta.json").read_text())
    meta["load_avg_start"] = meta["load_avg_end"] = [load, load, load]
    (target / "meta.json").write_text(json.dumps(meta))
    rows = pd.read_csv(target / "rows.csv")
    rows["load_avg"] = load
    rows.to_csv(target / "rows.csv", index=False)
    return target


def test_a_busy_run_is_judged_nowhere_and_sits_in_the_appendix(tmp_path):
    """A fit run (the Zen 5's) beside a run at load 8 on 2 cores (a copy of the
    committed Xeon run, its load edited): the answer, the machines side by
    side, the flips and the conclusions name nothing from the busy run; its
    tables sit in the appendix under the reason."""
    busy = _busy_copy(XEON, tmp_path / "xeon-busy", 8.0)
    assert report.main([str(ZEN5), str(busy), "-o", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert _headings(md, 2)[0] == "The answer"
    body, appendix = md.split("## Appendix: runs not fit to be judged", 1)
    xeon = "Intel(R) Xeon(R) Processor Rocket Lake (6-167), 2 cores, 2 threads per library"
    answer = body.split("## The answer", 1)[1].split("## How to read the tables", 1)[0]
    # what ran where (after the answers) names every run, the busy one too: the answers themselves do not
    answer = "\n".join(line for line in answer.splitlines() if not line.startswith("What ran where"))
    assert "### Answer table · cpu: AMD EPYC Zen 5 (26-2), 2 cores, 2 threads per library" in answer  # a table per machine, a column per quantity
    assert "| operator | size | dtype | fastest |" in answer and xeon not in answer
    assert not any(h.endswith("across machines") for h in _headings(body, 3))
    assert not any(h.endswith("machines side by side") for h in _headings(body, 4))
    assert "The ranking flips:" not in body
    conclusions = [line for line in body.splitlines() if line.startswith("Conclusion")]
    assert conclusions and not any("Xeon" in line for line in conclusions)
    assert not any(xeon in heading for heading in _headings(body, 3))  # no per-machine section for it
    assert f"### Run {XEON.name}: load 8 on 2 cores" in appendix  # the run id its meta records
    assert f"#### maxpool2d N=64 C=32 H=128 W=128 k=2 · cpu: {xeon} · float32" in appendix
    assert "% of ceiling" not in appendix and "× seed" not in appendix  # shown, never judged
    # said after the answers, before the tables (the first screen answers: issue 51)
    assert "failed the fitness rule (" + XEON.name + ": load 8 on 2 cores" in md.split("### What was measured where", 1)[0]


def _cpu_and_cuda(tmp_path) -> Path:
    """A synthetic run on a CPU and a GPU: numba_fused leads on the CPU,
    triton_fused on the GPU (their spreads far apart), seed_loops last on both."""
    medians = {("numba_fused", "cpu"): 1e-4, ("triton_fused", "cpu"): 5e-4, ("seed_loops", "cpu"): 1e-1,
               ("numba_fused", "cuda"): 3e-4, ("triton_fused", "cuda"): 2e-5, ("seed_loops", "cuda"): 1e-1}
    entries = [("numba_fused", "numba", "ok", 1.0), ("triton_fused", "triton", "ok", 1.0),
               ("seed_loops", "numpy", "ok", 1.0)]
    fields = {(name, device, "float32"): {"median_s": median, "iqr_s": median / 20}
              for (name, device), median in medians.items()}
    return fixture_run(tmp_path / "run", entries=entries, row_fields=fields,
                       meta={"gpu_name": "NVIDIA H100 80GB HBM3"},
                       variants=(("cpu", "float32"), ("cuda", "float32")))


def test_a_cpu_and_a_gpu_side_by_side(tmp_path):
    run = _cpu_and_cuda(tmp_path)
    assert report.main([str(run), "-o", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "### maxpool2d across machines" in md
    assert "Fastest: numba_fused on cpu: Fixture CPU, 2 cores, 2 threads per library; triton_fused on cuda: NVIDIA H100 80GB HBM3. " \
           "The ranking flips: numba_fused beats triton_fused on cpu: Fixture CPU, 2 cores, 2 threads per library but triton_fused beats " \
           "numba_fused on cuda: NVIDIA H100 80GB HBM3." in md
    # Each machine its own answer table (issue 41: no wall of "not run" where a machine missed a case).
    cuda = md.split("### Answer table · cuda: NVIDIA H100 80GB HBM3\n\n", 1)[1].split("\n\n")[0].splitlines()
    assert cuda[0].startswith("| operator | size | dtype | fastest | median |")
    assert "| triton_fused | 20 µs |" in cuda[2] and "| 5,000× |" in cuda[2]
    assert "### Answer table · cpu: Fixture CPU, 2 cores, 2 threads per library" in md


def _case(rows):
    frame = pd.DataFrame([dict(op="maxpool2d", strategy=name, status="ok", median_s=median, iqr_s=iqr,
                               machine=machine, device="cpu", params=json.dumps({"N": 1}), dtype="float32",
                               pct_of_ceiling=math.nan, backend="numpy")
                          for name, machine, median, iqr in rows])
    return {machine: frame[frame["machine"] == machine] for machine in dict.fromkeys(frame["machine"])}


def test_a_flip_within_the_spread_is_not_a_flip():
    # a before b on m1 and b before a on m2, but on m2 their spreads overlap: the data does not say.
    overlapping = _case([("numba_fused", "m1", 1.0, 0.01), ("seed_loops", "m1", 2.0, 0.01),
                         ("numba_fused", "m2", 1.0, 0.4), ("seed_loops", "m2", 0.9, 0.4)])
    assert analysis.rank_flips(overlapping) == []
    clear = _case([("numba_fused", "m1", 1.0, 0.01), ("seed_loops", "m1", 2.0, 0.01),
                   ("numba_fused", "m2", 1.0, 0.01), ("seed_loops", "m2", 0.5, 0.01)])
    assert analysis.rank_flips(clear) == [("numba_fused", "seed_loops", "m1", "m2")]


def test_the_answer_marks_unstable_and_names_a_faster_inexact_strategy():
    frame = pd.DataFrame([
        dict(op="maxpool2d", strategy="numba_fused", status="ok", median_s=1e-3, iqr_s=5e-4, machine="m",
             device="cpu", params="{}", dtype="float32", pct_of_ceiling=50.0),
        dict(op="maxpool2d", strategy="triton_fused", status="inexact", median_s=1e-4, iqr_s=1e-6, machine="m",
             device="cpu", params="{}", dtype="float32", pct_of_ceiling=500.0)])
    name, median, *_ = sections._answer_cells(frame)
    assert name == "numba_fused (faster but inexact: triton_fused)"
    assert median == "1 ms ⚠"


def test_publishing_refuses_an_unfit_run_in_one_line_and_writes_nothing(tmp_path, capsys):
    busy = _busy_copy(XEON, tmp_path / "xeon-busy", 8.0)
    out = tmp_path / "out"
    (out / "figures").mkdir(parents=True)
    (out / "figures" / "older.png").write_bytes(b"kept")
    assert report.main([str(ZEN5), str(busy), "-o", str(out), "--fit-only", "--fresh-figures"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1
    assert error.startswith(f"report.py: error: not fit to publish: {busy} (load 8 on 2 cores") and "ALLOW_UNFIT=1" in error
    assert (out / "figures" / "older.png").exists() and not (out / "report.md").exists()
    # The fit run alone publishes, and the figures directory holds only its figures.
    assert report.main([str(ZEN5), "-o", str(out), "--fit-only", "--fresh-figures", "--light"]) == 0
    assert not (out / "figures" / "older.png").exists() and (out / "report.md").exists()


def test_a_run_left_out_names_the_machine_it_leaves_missing(tmp_path, capsys):
    """make publish leaves the Xeon's busy run out (docs/RUNS_LEFT_OUT): the
    report's first paragraph names it, its reasons and the machine missing,
    and shows none of its rows; a fit run cannot be left out this way."""
    out = tmp_path / "out"
    assert report.main([str(ZEN5), "--left-out", str(XEON), "-o", str(out), "--fit-only", "--light"]) == 0
    md = (out / "report.md").read_text()
    first = next(line for line in md.splitlines() if line.startswith("What ran where"))
    assert ("Left out for failing the fitness rule, tables and all: run 20261125T111017-vm-default-ea9f (load 8.1 "
            "on 2 cores) on cpu: Intel(R) Xeon(R) Processor Rocket Lake (6-167), 2 cores, 2 threads per library, which "
            "no published run measured, so that machine is missing from this report.") in first
    assert "Xeon" not in md.replace(first, "") and "Appendix" not in md
    capsys.readouterr()
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "figures" / "older.png").write_bytes(b"kept")
    assert report.main([str(ZEN5), "--left-out", str(ZEN5), "-o", str(out), "--light", "--fresh-figures"]) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "--left-out names a run the fitness rule finds fit" in error
    assert (out / "figures" / "older.png").exists()  # refused before the figures were emptied


def test_overlapping_spreads_are_a_tie_in_the_answer_table_named_with_both():
    def row(name, median, q1, q3):
        return dict(op="maxpool2d", strategy=name, status="ok", median_s=median, iqr_s=q3 - q1, q1_s=q1, q3_s=q3,
                    machine="m", device="cpu", params="{}", dtype="float32", pct_of_ceiling=50.0, backend="numpy")
    # Medians 1.00 and 1.04 ms; the leader's Q3 (1.05) reaches past the runner-up's Q1 (1.02).
    tied = pd.DataFrame([row("numba_fused", 1.00e-3, 0.97e-3, 1.05e-3), row("numpy_sliding_window", 1.04e-3,
                                                                         1.02e-3, 1.06e-3)])
    name, median, *_ = sections._answer_cells(tied)
    assert name == "tie: numba_fused / numpy_sliding_window" and median == "1 ms"
    # The same medians with tight quartiles: a win, named alone.
    clear = pd.DataFrame([row("numba_fused", 1.00e-3, 0.99e-3, 1.01e-3), row("numpy_sliding_window", 1.04e-3,
                                                                          1.03e-3, 1.05e-3)])
    assert sections._answer_cells(clear)[0] == "numba_fused"
    # The conclusions and the flips use the same rule.
    assert not analysis.clearly_faster(tied.iloc[0], tied.iloc[1]) and analysis.clearly_faster(clear.iloc[0],
                                                                                               clear.iloc[1])
    # So do the case's winner sentence and its table: the published report had said "Fastest:
    # torch_scatter" of a case its answer table called a tie.
    assert sections.machines_sentence(tied) == ("Fastest on every machine: numba_fused and numpy_sliding_window "
                                                "(a tie: their Q1–Q3 ranges overlap).")
    assert sections.machines_sentence(clear) == "Fastest on every machine: numba_fused."
    tied = tied.assign(backend="numpy", n_samples=10, gbps=1.0, speedup=math.nan, rel_err=0.0, max_abs_err=0.0,
                       source="", message="", host_s=math.nan, xcheck_s=math.nan, pct_of_fresh_floor=math.nan)
    _, _, bold, notes = sections.case_table(tied)
    assert bold is None and any("numba_fused and numpy_sliding_window (a tie" in note for note in notes)


def test_what_ran_where_names_the_operators_a_machine_missed_and_the_runs_older_checks_passed():
    """The published paragraph said "cuda: NVIDIA H200 (1 run, 1 fit to
    judge)" of a run that measured max-pool only, and nothing of the Zen 5
    runs' being checked before each call was judged and subnormals were in
    the adversarial sets (they were stored as schema 2)."""
    rows = pd.DataFrame([
        {"machine": "cpu: A", "device": "cpu", "op": "maxpool2d", "run_dir": "old"},
        {"machine": "cpu: A", "device": "cpu", "op": "dispersion", "run_dir": "old"},
        {"machine": "cpu: B", "device": "cpu", "op": "dispersion", "run_dir": "maybe"},
        {"machine": "cuda: H", "device": "cuda", "op": "maxpool2d", "run_dir": "new"}])
    metas = [{"directory": "old", "run_id": "zen5", "git_commit": "5f63bad0", "schema_written": 2},
             {"directory": "maybe", "run_id": "mid", "git_commit": "1234567", "schema_written": 4},
             {"directory": "new", "run_id": "gpu", "git_commit": "c9fb7fa", "schema_written": 6}]
    text = sections.what_ran_where(rows, metas)
    assert "cpu: A (1 run, 1 fit to judge)" in text
    assert "cpu: B (1 run, 1 fit to judge; maxpool2d not measured there)" in text
    assert "cuda: H (1 run, 1 fit to judge; dispersion not measured there)" in text
    assert "Run zen5 (commit 5f63bad, stored as result schema 2) predate rules the check has now: its strategies " \
           "were judged on their first call only" in text and "subnormal" in text
    assert "Run mid (commit 1234567, stored as result schema 4) may predate" in text and "Run gpu" not in text


def test_a_run_read_back_remembers_the_schema_it_was_written_as(tmp_path):
    run = fixture_run(tmp_path / "run")
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(dict(meta, schema_version=2)))
    from harness.results import store

    written = store.read_meta(run)
    assert written["schema_written"] == 2 and written["schema_version"] == store.SCHEMA_VERSION


def test_the_published_reports_first_paragraph_is_what_its_runs_say():
    """docs/REPORT.md's "what ran where" is true of the runs `make publish`
    reads (docs/RUNS) and leaves out (docs/RUNS_LEFT_OUT): a run added,
    dropped or re-judged without publishing again fails here."""
    from harness.presenting.report.build import left_out_runs, read_left_out
    from harness.presenting.report.load import load

    listed = (ROOT / "docs" / "RUNS").read_text().split()
    left = read_left_out(ROOT / "docs" / "RUNS_LEFT_OUT")
    rows, metas = load([ROOT / run for run in listed])
    text = sections.what_ran_where(rows, metas, left_out_runs([(ROOT / run, reason) for run, reason in left]))
    published = (ROOT / "docs" / "REPORT.md").read_text()
    assert text in published.splitlines(), text
    # The old AMD EPYC VM's runs (schema 1 and 2, no load or too unstable) leave it missing; the rest are counted.
    # They recorded no family-model, and the sentence says so: the AMD EPYC machines with one are others.
    assert ("on cpu: AMD EPYC, 2 cores, 2 threads per library (it recorded no CPU family and model, so it cannot "
            "be matched with the AMD EPYC machines above), which no published run measured, so that machine is "
            "missing from this report") in text
    # 5246's five repeats, 5246 itself (superseded by 0e2d, measured in rounds), 0e2d's A/A repeat 007f,
    # the AMD EPYC 23-1 VM's four runs beside its published 5b79 (8d28, c685, a7b3 and the A/A repeat 0a81),
    # 0e2d (superseded by f5ec, measured in racing rounds) with f5ec's A/A repeat 278d, and f5ec
    # (superseded by 440c, both layouts) with 440c's A/A repeat af18, 440c (superseded by 0232, floors
    # against the upper-bound curves) with 0232's A/A repeat 947f, models' max-pool 450c (by b601), and
    # 0232 and b601 (superseded by c9f3 and 0343, method 3 curves) with c9f3's A/A repeat 2d11, and on the
    # Intel Xeon 6-167 VM 324a (superseded by 9c61, two threads, this version), 3122's A/A repeat 3a78 and
    # 9c61's A/A repeat c736, then 9047 (superseded by e285, short rows padded) with e285's A/A repeat
    # b875, and models' max-pool 959e and 18bb (superseded by 39c3), then 39c3 (superseded by 6267, the
    # backward per plane)
    assert "34 fit: repeats compared with the published runs" in text


def test_every_cpu_label_says_its_core_and_thread_setting_and_settings_are_never_pooled():
    """Issue 51: runs at 1 and at 2 threads per library stood side by side under one label. A CPU's
    label now carries its core (from the family-model) and its thread setting, so each setting is
    a machine of its own in every answer, flip and side-by-side table."""
    from harness.presenting.report.load import device_label

    meta = {"cpu_model": "AMD EPYC", "cpu_count": 2, "hardware": {"cpu_family_model": "25-17"},
            "threads": {"jax": 1, "numba": 1, "numpy": 1, "torch": 1}}
    assert device_label(meta, "cpu") == "cpu: AMD EPYC Zen 4 (25-17), 2 cores, 1 thread per library"
    assert device_label(dict(meta, threads={"blas": 2, "torch": 2}), "cpu") == \
        "cpu: AMD EPYC Zen 4 (25-17), 2 cores, 2 threads per library"
    assert device_label(dict(meta, threads={"numba": 2, "numpy": 1}), "cpu") == \
        "cpu: AMD EPYC Zen 4 (25-17), 2 cores, threads numba 2, numpy 1"
    assert device_label(dict(meta, hardware={}, threads={}), "cpu") == "cpu: AMD EPYC, 2 cores, threads not recorded"
    published = (ROOT / "docs" / "REPORT.md").read_text()
    for setting in ("1 thread per library", "2 threads per library"):
        assert f"cpu: AMD EPYC Zen 4 (25-17), 2 cores, {setting}, inference" in published


def test_the_answer_says_which_operators_have_no_gpu_answer_and_why():
    """Issue 51 item 10: the GPU's gaps are said beside the answers, not only in the runs table."""
    published = (ROOT / "docs" / "REPORT.md").read_text().split("### What was measured where", 1)[0]
    assert ("No GPU answer for maxunpool, dispersion, dispersion_pinv: not measured on a GPU. Run "
            "20261126T045242-vm-gpu-1067 (NVIDIA H200) measured 52 of its 316 cases, stopped by SIGTERM, before "
            "reaching them.") in published


def test_a_case_in_a_cache_shows_its_fresh_floor_marked_and_its_floor_by_size_judges():
    """Run cdd5 (Intel Xeon 6-167 VM): the 64x16x28x28 max-pool in channels-last
    at 189 % of its fresh floor and 79 % of its floor by size. Its table said
    "bytes formula or curve wrong" of the first, which only a floor by size can say."""
    from harness.results import floors

    rows = pd.DataFrame([dict(op="maxpool2d", strategy="numba_fused", status="ok", median_s=207e-6, iqr_s=4e-6,
                              q1_s=205e-6, q3_s=209e-6, machine="m", device="cpu", params="{}", dtype="float32",
                              pct_of_ceiling=113.0, backend="numba", n_samples=40, gbps=27.0, speedup=9.0,
                              rel_err=0.0, max_abs_err=0.0, source="added", message="", host_s=math.nan,
                              xcheck_s=math.nan, pct_of_fresh_floor=189.0, pct_of_floor=79.1)])
    header, cells, *_ = sections.case_table(rows)
    row = dict(zip(header, cells[0]))
    assert row["% of fresh floor"] == "⚠ 189 %" and row["% of floor"] == "79.1 %"
    assert not any(floors.OVER_FLOOR_TEXT in cell for cell in cells[0])
    assert floors.ceiling_note() + "." in sections.legend_notes(rows)
