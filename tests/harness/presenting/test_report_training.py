"""The answer table's training step (docs/SPEC.md §1.5), on committed runs: the H200
run trained maxpool2d at 64×32×128² only, the CPU run trained nothing."""

from harness.presenting.report import load as report_load
from harness.presenting.report import sections
from tests.helpers import ROOT

GPU_RUN = ROOT / "results" / "20261126T045242-vm-gpu-1067"
CPU_RUN = ROOT / "results" / "20261126T041354-vm-default-5246"


def _row(table, size, dtype="float32"):
    return next(cells for cells in table if cells[0] == "maxpool2d" and cells[1] == size and cells[2] == dtype)


def test_a_training_step_is_named_only_where_a_run_trained_that_case():
    rows, _ = report_load.load([GPU_RUN, CPU_RUN])
    header, table = sections.answer_table(rows)
    gpu = next(i for i, name in enumerate(header) if "H200" in name)
    cpu = next(i for i, name in enumerate(header) if name.startswith("cpu"))
    trained = _row(table, "N=64 C=32 H=128 W=128 k=2")
    assert trained[gpu].startswith("torch_compile_reshape_argmax: ")
    assert "; training step: triton_fused (forward+backward: " in trained[gpu]
    assert "training step" not in trained[cpu]  # the CPU run trained nothing: no "not run" noise
    untrained = _row(table, "N=16 C=64 H=512 W=512 k=3")
    assert not any("training step" in cell for cell in untrained)


def test_the_sentence_names_where_inference_and_training_disagree():
    rows, _ = report_load.load([GPU_RUN])
    sentence = sections.training_sentence(rows)
    assert ("maxpool2d N=64 C=32 H=128 W=128 k=2 float32 on cuda: NVIDIA H200: torch_compile_reshape_argmax for "
            "inference, triton_fused for a training step (forward+backward)") in sentence
    assert sentence.endswith("(no other case has a clear winner in both).")


def test_one_machine_keeps_a_training_column_with_a_dash_where_no_run_trained():
    rows, _ = report_load.load([GPU_RUN])
    header, table = sections.answer_table(rows)
    assert header[-1] == "training step"
    assert _row(table, "N=16 C=64 H=512 W=512 k=3")[-1] == "–"
    assert _row(table, "N=64 C=32 H=128 W=128 k=2", "float16")[-1].startswith("triton_fused (forward+backward: ")


def test_the_models_sweep_has_its_own_section_and_other_runs_do_not(tmp_path):
    import report
    from tests.harness.presenting.test_report import fixture_run

    models = fixture_run(tmp_path / "models", meta={"config": {"name": "models"}})
    other = fixture_run(tmp_path / "other", machine_cpu="Other CPU", meta={"config": {"name": "default"}})
    md = report.build([models, other], tmp_path / "out").read_text()
    section = md.split("## Network shapes: inference and training", 1)
    assert len(section) == 2, "no section for the models run"
    body = section[1].split("\n## ", 1)[0]
    assert "| network | layer | operator | shape | change from the paper | machine |" in body
    assert "torch_max_pool2d_indices" in body
    assert "Other CPU" not in body  # only the models run's rows
    # its cases are tabled in the operator's section, drawn only where the other run measured them
    assert "without figures" in body
    figures = {path.name for path in (tmp_path / "out" / "figures").glob("*-time.png")}
    assert figures and all("Other-CPU" in name or "other" in name.lower() for name in figures), figures
    assert "## Network shapes" not in report.build([other], tmp_path / "out2").read_text()


def test_a_network_cell_marks_an_unstable_winner_as_every_other_table_does():
    """The network-shapes table printed no ⚠, though its committed runs have unstable winners:
    each cell's time is marked exactly where its winner's row is unstable (analysis.unstable)."""
    from harness.judging import analysis
    from harness.presenting.report import summary
    from harness.presenting.report.build import models_directories

    listed = (ROOT / "docs" / "RUNS").read_text().split()
    rows, metas = report_load.load([ROOT / run for run in listed])
    shapes = rows[rows["run_dir"].isin(models_directories(metas))]
    marked = unmarked = 0
    for (_op, _params, _dtype, _machine), case in shapes.groupby(["op", "params", "dtype", "machine"]):
        for kind in (summary.INFERENCE, summary.TRAINING):
            found_rows = summary.mode_rows(case, kind)
            found = analysis.answer(found_rows) if found_rows is not None else None
            if found is None:
                continue
            cell = summary.shape_cell(case, kind)
            if analysis.unstable(found.best):
                assert sections.UNSTABLE_MARK in cell, cell
                marked += 1
            else:
                assert sections.UNSTABLE_MARK not in cell, cell
                unmarked += 1
    assert marked and unmarked, (marked, unmarked)
