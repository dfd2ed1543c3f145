"""Machines side by side (issue 25): the report opens with the answer table,
and an operator run on several machines gets, per size, one strategy ×
machine table and a sentence naming who wins where and where the order flips."""

import json
import math
from pathlib import Path

import pandas as pd

import report
from harness.judging import analysis
from harness.presenting.report import sections
from tests.helpers import ROOT

from .test_report import fixture_run

ZEN5 = ROOT / "results" / "20261125T024630-vm-default-0507"  # AMD EPYC family 26 model 2
ZEN3 = ROOT / "results" / "20261123T192534-vm-default-d9d3"  # AMD EPYC, no family-model recorded


def _headings(md: str, level: int) -> list[str]:
    return [line[level + 1:] for line in md.splitlines() if line.startswith("#" * level + " ")]


def test_two_committed_cpus_side_by_side(tmp_path):
    assert report.main([str(ZEN5), str(ZEN3), "-o", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert _headings(md, 2)[0] == "The answer"  # the answer first, runs and hardware after it
    header = md.split("## The answer", 1)[1].strip().splitlines()[0]
    assert "cpu: AMD EPYC (26-2) ×2" in header and "cpu: AMD EPYC ×2" in header
    assert "### maxunpool across machines" in md
    # Measured: at form=1d B=64 F=32 L=1024 max_unpool2d leads on the Zen 5 (1.73 ms, 88.6 % of
    # its ceiling) and is 6th on the Zen 3, where numba_fused leads: a flip the sentence names.
    block = md.split("#### maxunpool form=1d B=64 F=32 L=1024 f=5 float32 · machines side by side", 1)[1]
    sentence = next(line for line in block.splitlines() if line.startswith("Fastest"))
    assert sentence.startswith("Fastest: torch_max_unpool2d on cpu: AMD EPYC (26-2) ×2; "
                               "numba_fused on cpu: AMD EPYC ×2.")
    assert "The ranking flips: torch_max_unpool2d beats numba_fused on cpu: AMD EPYC (26-2) ×2 but " \
           "numba_fused beats torch_max_unpool2d on cpu: AMD EPYC ×2" in sentence
    table = block.split("\n\n")[1].splitlines()
    assert table[2].startswith("| torch_max_unpool2d | 1.73 ms · 88.6 % · rank 1 |")


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
    assert "Fastest: numba_fused on cpu: Fixture CPU ×2; triton_fused on cuda: NVIDIA H100 80GB HBM3. " \
           "The ranking flips: numba_fused beats triton_fused on cpu: Fixture CPU ×2 but triton_fused beats " \
           "numba_fused on cuda: NVIDIA H100 80GB HBM3." in md
    answer = md.split("## The answer", 1)[1].split("\n\n")[1].splitlines()
    assert answer[0] == "| operator | size | dtype | cpu: Fixture CPU ×2 | cuda: NVIDIA H100 80GB HBM3 |"
    assert "triton_fused: 20 µs" in answer[2] and "5,000× the seed" in answer[2]


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
