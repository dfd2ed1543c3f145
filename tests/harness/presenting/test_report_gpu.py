"""The GPU half of the report (issue 12.4): sections per device and dtype
with the machine, the ceiling and a conclusion; host cost per call in every
case table; on CUDA, the independent timer and the agreement with it; and
the defects found in libraries."""

import math
from dataclasses import dataclass

import pytest

import report
from harness.presenting.report import sections as report_sections

from .test_report import fixture_run

VARIANTS = (("cpu", "float32"), ("cuda", "float32"), ("cuda", "float16"))
ENTRIES = [("seed_loops", "numpy", "ok", 1e-2), ("torch_max_pool2d_indices", "torch", "ok", 1e-4),
           ("torch_max_pool2d", "torch", "upstream-defect", math.nan)]
GPU_META = {"gpu_name": "NVIDIA H100 80GB HBM3", "versions": {"torch": "2.13.0+cu126"}}


def _fields():
    fields = {}
    for device, dtype in VARIANTS:
        for name, _, _, median in ENTRIES:
            fields[(name, device, dtype)] = {"host_s": 7e-6}
            if device == "cuda" and median == median:
                # torch agrees with do_bench within 1 %; the seed's loop is 20 % off (at both sizes: the
                # fixture's medians grow with the size, so each is given here)
                fields[(name, device, dtype)].update(median_s=median, xcheck_s=median * (1.01 if "torch" in name else 0.8))
        fields[("torch_max_pool2d", device, dtype)].update(
            message="known upstream defect torch-x (torch 2.13.0): index 0 for an all -inf window")
    return fields


@dataclass(frozen=True)
class FakeDefect:
    strategy: str
    library: str
    versions: str
    condition: str
    description: str
    reproduction: str


DEFECT = FakeDefect(strategy="maxpool2d/torch_max_pool2d", library="torch", versions=">=1.0",
                    condition="device in cuda; layout in channels_last",
                    description="max_pool2d returns index 0 for an all -inf window",
                    reproduction="import torch\nprint(torch.nn.functional.max_pool2d)  # <b>not html</b>")


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    """One report of the three-variant run, with one known defect listed,
    shared by the tests that read it (a report with figures takes seconds)."""
    tmp_path = tmp_path_factory.mktemp("gpu-report")
    run = fixture_run(tmp_path / "gpu", entries=ENTRIES, variants=VARIANTS, meta=GPU_META, row_fields=_fields())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_sections, "known_defects", lambda: [DEFECT])
        md = report.build([run], tmp_path / "out").read_text()
    return md, (tmp_path / "out" / "report.html").read_text()


def _section(md: str, heading: str) -> str:
    start = md.index(heading + "\n")
    following = md.find("\n### ", start + 1)
    return md[start: following if following > 0 else len(md)]


def _table_rows(section: str, strategy: str) -> list[list[str]]:
    rows = []
    for line in section.splitlines():
        cells = [cell.strip().strip("*") for cell in line.strip("|").split("|")]
        if line.startswith("|") and cells[0] == strategy:
            rows.append(cells)
    return rows


def _header(section: str) -> list[str]:
    line = next(line for line in section.splitlines() if line.startswith("| strategy |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_one_section_per_device_and_dtype_with_machine_ceiling_and_conclusion(gpu_report):
    md, _ = gpu_report
    headings = [line for line in md.splitlines() if line.startswith("### maxpool2d · ")]
    assert headings == ["### maxpool2d · cpu: Fixture CPU, 2 cores, 2 threads per library · float32",
                        "### maxpool2d · cuda: NVIDIA H100 80GB HBM3 · float32",
                        "### maxpool2d · cuda: NVIDIA H100 80GB HBM3 · float16"]
    for heading in headings:
        section = _section(md, heading)
        device = "cuda" if "cuda" in heading else "cpu"
        assert f"copy ceiling {'3,000' if device == 'cuda' else 20} GB/s (run gpu)" in section
        dtype = heading.rsplit(" · ", 1)[1]
        assert f"Conclusion: {heading.split(' · ')[1]}, N=1 C=1 H=8 W=8 k=2 {dtype}: use torch_max_pool2d_indices" \
            in section


def test_host_cost_everywhere_and_timer_agreement_on_cuda(gpu_report):
    md, _ = gpu_report
    cpu = _section(md, "### maxpool2d · cpu: Fixture CPU, 2 cores, 2 threads per library · float32")
    cuda = _section(md, "### maxpool2d · cuda: NVIDIA H100 80GB HBM3 · float16")
    assert "host/call" in _header(cpu) and "do_bench" not in _header(cpu)
    header = _header(cuda)
    assert {"host/call", "do_bench", "ours / do_bench"} <= set(header)
    agreement = header.index("ours / do_bench")
    torch_rows, seed_rows = _table_rows(cuda, "torch_max_pool2d_indices"), _table_rows(cuda, "seed_loops")
    assert torch_rows[0][header.index("host/call")] == "7 µs"
    assert torch_rows[0][agreement] == "0.99"  # within 5 %: not flagged
    assert seed_rows[0][agreement] == "1.25 ⚠"  # 20 % off: flagged, with the note saying why
    # The note is the legend's, said once for the report (issue 41: no note repeated under every table).
    assert md.count(report_sections.XCHECK_NOTE) == 1 and report_sections.XCHECK_NOTE not in cuda + cpu


def test_older_runs_without_host_or_xcheck_columns_keep_their_tables(tmp_path):
    md = report.build([fixture_run(tmp_path / "old")], tmp_path / "out").read_text()
    assert "host/call" not in md and "do_bench" not in md


def test_defects_found_in_libraries(gpu_report):
    md, page = gpu_report
    section = md[md.index("## Defects and documented behaviour of libraries"):]
    # Headed by the listing and its strategies, never by a version range nobody measured.
    assert "#### ?: torch, maxpool2d/torch_max_pool2d" in section and "\\>=1.0" not in section
    assert "Condition: device in cuda; layout in channels_last." in section
    assert "max_pool2d returns index 0 for an all -inf window" in section
    assert "measured in these runs: torch 2.13.0+cu126 (run" in section and "Observed in 6 case(s)" in section
    assert "```\nimport torch\nprint(torch.nn.functional.max_pool2d)  # <b>not html</b>\n```" in section
    assert "&lt;b&gt;not html&lt;/b&gt;" in page and "<b>not html</b>" not in page
    recorded = _table_rows(section, "maxpool2d")
    assert len(recorded) == 6 and all("index 0 for an all -inf window" in row[-1] for row in recorded)


def test_no_defects_section_without_registry_or_such_rows(tmp_path, monkeypatch):
    monkeypatch.setattr(report_sections, "known_defects", lambda: None)
    md = report.build([fixture_run(tmp_path / "run")], tmp_path / "out").read_text()
    assert "Defects found in libraries" not in md


def test_the_defect_registry_is_impls_defects():
    found = report_sections.known_defects()
    assert found and all(defect.strategy and defect.reproduction for defect in found)


def _ran(*rows):
    import pandas as pd

    return pd.DataFrame([dict(zip(("op", "strategy", "device", "dtype", "mode", "status", "run_dir"), row))
                         for row in rows])


def _defect(**condition):
    from impls.defects import Condition, KnownDefect

    return KnownDefect(id="x", strategy="maxpool2d/torch_max_pool2d", library="torch", versions=">=1.0",
                       condition=Condition(differences=frozenset({"neg-inf-window-index-0"}), **condition),
                       description="d", reproduction="r")


def test_a_defect_no_row_records_is_said_to_be_unseeable_unseen_or_recorded_as_mismatch():
    """The published report said "not observed in these runs, though they
    could have shown it" of a CUDA defect its GPU run had recorded eight times
    as mismatch (checked before the defect's backward was listed), and of
    defects whose dtype no row ran. Each case now reads as what it is."""
    cpu = ("maxpool2d", "torch_max_pool2d", "cpu", "float32", "forward", "ok", "a")
    cuda = ("maxpool2d", "torch_max_pool2d", "cuda", "float32", "backward", "mismatch", "g")
    say = report_sections.observability
    assert say(_defect(devices=("cuda",)), _ran(cpu)).startswith("Not observable here: its condition needs cuda")
    assert say(_defect(), _ran(("maxpool2d", "seed_loops", "cpu", "float32", "forward", "ok", "a"))) == \
        "Not observable here: these runs did not run the strategy."
    assert say(_defect(dtypes=("bfloat16",)), _ran(cpu)) == ("Not observable here: its condition needs dtype "
                                                             "bfloat16, and these runs ran torch_max_pool2d in "
                                                             "float32 only.")
    assert say(_defect(modes=("backward",)), _ran(cpu)).startswith("Not observable here: its condition needs mode")
    recorded = say(_defect(devices=("cuda",)), _ran(cpu, cuda, cuda), [{"directory": "g", "run_id": "gpu-run",
                                                                         "git_commit": "c9fb7fa0123"}])
    assert recorded.startswith("Recorded as mismatch, not as this defect, in 2 case(s)") and \
        "run gpu-run at c9fb7fa" in recorded
    unseen = say(_defect(devices=("cpu",)), _ran(cpu))
    assert unseen.startswith("Not recorded in these runs' rows, which cannot show it") and "could have" not in unseen
