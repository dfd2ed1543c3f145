import json
import math

import numpy as np
from PIL import Image

import report
from harness.results.store import COLUMNS, RunWriter

ENTRIES = [("seed_loops", "numpy", "ok", 1e-2), ("torch_max_pool2d_indices", "torch", "ok", 1e-4),
           ("numpy_sliding_window", "numpy", "inexact", 1e-3), ("broken<script>", "torch", "error", math.nan),
           ("wrong|pipe", "numpy", "mismatch", math.nan)]


CEILINGS = {"cpu": 20.0, "cuda": 3000.0}


def fixture_run(directory, machine_cpu="Fixture CPU", entries=ENTRIES, meta=None, row_fields=None,
                start_time="2026-11-22T00:00:00+00:00", variants=(("cpu", "float32"),)):
    """A maxpool2d run at two sizes per (device, dtype) of ``variants``;
    ``entries``: (strategy, backend, status, median); ``meta`` and
    ``row_fields`` (strategy, or (strategy, device, dtype) -> columns) override."""
    devices = {device for device, _ in variants}
    writer = RunWriter(directory, {"run_id": directory.name, "cpu_model": machine_cpu, "cpu_count": 2,
                                   "ceilings_gbps": {d: CEILINGS[d] for d in sorted(devices)},
                                   "config_file": "configs/x.yaml",
                                   "fresh_write_gbps": {"numpy": 17.5, "torch": 4.25},
                                   "start_time": start_time, "threads": {"torch": 2},
                                   # a quiet machine: the fitness rule judges only runs that recorded their load
                                   "load_avg_start": [0.2, 0.2, 0.2], "load_avg_end": [0.3, 0.2, 0.2],
                                   "versions": {"torch": "2.13.0"}, "backend_versions": {"torch": "2.13.0"},
                                   **(meta or {})})
    for device, dtype in variants:
        suffix = "" if (device, dtype) == ("cpu", "float32") else f"-{device}-{dtype}"
        ceiling = CEILINGS[device]
        for size in (4, 8):
            p = json.dumps({"N": 1, "C": 1, "H": size, "W": size, "k": 2})
            for name, backend, status, median in entries:
                row = {c: "" for c in COLUMNS}
                scale = size / 4
                row.update(run_id=directory.name, case_id=f"{name}{size}{suffix}", op="maxpool2d", strategy=name,
                           backend=backend, device=device, dtype=dtype, params=p, status=status,
                           message="<b>boom</b>" if status == "error" else "", median_s=median * scale,
                           iqr_s=median / 10, min_s=median, n_samples=5, bytes=1000 * scale,
                           gbps=1000 * scale / median / 1e9 if median == median else math.nan,
                           ceiling_gbps=ceiling, floor_s=1000 * scale / (ceiling * 1e9),
                           pct_of_ceiling=100 * (1000 * scale / (ceiling * 1e9)) / median if median == median
                           else math.nan, rel_err=0.0, max_abs_err=0.0, peak_mem_bytes=0,
                           source="seed x" if "seed" in name else "added")
                row.update((row_fields or {}).get(name, {}))
                row.update((row_fields or {}).get((name, device, dtype), {}))
                # A failed case has no samples, as in a real run.
                writer.append(row, [median] * 5 if math.isfinite(median) else None)
    writer.close()
    return directory


def test_report_writes_every_file_with_real_figures(tmp_path):
    run = fixture_run(tmp_path / "run1")
    written = report.build([run], tmp_path / "out")
    md = written.read_text()
    html_text = (tmp_path / "out" / "report.html").read_text()
    assert "torch_max_pool2d_indices" in md and "data:image/png;base64," in html_text
    assert "numpy 17.5, torch 4.2" in md  # the run's fresh-output write bandwidths
    # Each median shows the sample count it rests on.
    assert "| median | IQR | n |" in md and any("torch_max_pool2d_indices" in line and "| **5** |" in line
                                                 for line in md.splitlines() if line.startswith("|"))
    pngs = sorted((tmp_path / "out" / "figures").glob("*.png"))
    svgs = sorted((tmp_path / "out" / "figures").glob("*.svg"))
    # PNG only unless asked: docs/figures holds one format (issue 41).
    assert pngs and not svgs
    assert any("scaling" in p.name for p in pngs)
    for png in pngs:
        with Image.open(png) as image:
            assert image.width == 800 and image.height >= 150
            assert len(np.unique(np.asarray(image.convert("L")))) > 10  # not a blank image
    # failed strategies are reported, marked, not dropped
    assert "mismatch" in md and "error" in md


def test_hostile_text_is_escaped(tmp_path):
    run = fixture_run(tmp_path / "run1")
    report.build([run], tmp_path / "out")
    html_text = (tmp_path / "out" / "report.html").read_text()
    md = (tmp_path / "out" / "report.md").read_text()
    assert "<script>" not in html_text and "&lt;script&gt;" in html_text
    assert "<b>boom</b>" not in html_text
    assert "wrong|pipe" not in md and "wrong\\|pipe" in md


def test_two_runs_on_two_machines(tmp_path):
    report.build([fixture_run(tmp_path / "a"), fixture_run(tmp_path / "b", "Other CPU")], tmp_path / "out")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "Fixture CPU" in md and "Other CPU" in md


def test_missing_or_malformed_result_directory(tmp_path, capsys):
    assert report.main([str(tmp_path / "absent"), "-o", str(tmp_path / "out")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.json").write_text("{")
    assert report.main([str(tmp_path / "bad")]) == 2
    assert "malformed JSON" in capsys.readouterr().err


def test_a_list_is_a_line_an_item_in_markdown_and_escaped_in_html(tmp_path):
    """The answer's lines per machine and mode are a list: one Markdown line each (as paragraphs,
    seven machines and settings pushed the last answers past the first 40 lines)."""
    from harness.presenting.report.document import Doc, render_html, render_markdown

    doc = Doc()
    doc.bullets(["cpu: A, inference: use x", "<b>boom</b> | y"])
    md = render_markdown(doc, "figures")
    assert md == "- cpu: A, inference: use x\n- \\<b\\>boom\\</b\\> \\| y\n"
    page = render_html(doc, tmp_path, "t")
    assert "<ul><li>cpu: A, inference: use x</li><li>&lt;b&gt;boom&lt;/b&gt; | y</li></ul>" in page
