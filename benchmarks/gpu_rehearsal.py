"""Where `make gpu`'s sweep spends its time, rehearsed on the CPU:
``python benchmarks/gpu_rehearsal.py [-o DIR] [--size small|tiny]``.

Issue 58, item 4: gpu.yaml's sweep, cross-check and report must fit 8
minutes of an H200 after the checks. The sweep's seconds are of two kinds:
sampling, which the config's timing settings fix (``budget_s`` a case, the
same on any machine), and everything else (references, each case's first
call and its judging, each round's prepare and judging again, writing,
the report), which is the harness's own cost. This runs gpu.yaml's
benchmarks, dtypes, modes and timing on the CPU, every strategy that runs
there natively, at small sizes, then its report, and prints each phase's
seconds in total and per case: what is not measurement, and so what to cut.

Not a timed test: a 2-core VM's figures; the GPU's own come from `make gpu`
(``phase_s`` in the run's meta.json), which `scatterbench plan` reads first.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.base.config import parse_config  # noqa: E402
from impls.registry import get_operator  # noqa: E402

# gpu.yaml's sizes made small, per parameter name: "small" keeps arrays of some thousands of
# elements (the harness's cost shows, the kernels' barely); "tiny" is the CI rehearsal's.
SIZES = {"small": {"N": 4, "C": 8, "H": 32, "W": 32, "B": 2, "F": 4, "L": 512},
         "tiny": {"N": 1, "C": 2, "H": 8, "W": 8, "B": 1, "F": 2, "L": 40}}


def rehearsal_config(size: str = "small") -> dict:
    """configs/gpu.yaml on the CPU: its benchmarks, dtypes, modes and timing,
    with every strategy that runs on the CPU without an interpreter, at
    ``SIZES[size]``."""
    gpu = yaml.safe_load((ROOT / "configs" / "gpu.yaml").read_text())
    benchmarks = []
    for bench in gpu["benchmarks"]:
        strategies = get_operator(bench["op"]).strategies
        # "all" less what cannot run natively on the CPU: a dtype a strategy does not take is
        # then left out for that dtype alone (numba_fused runs in float32, not float16).
        exclude = [name for name, strat in strategies.items() if name in bench.get("exclude", [])
                   or "cpu" not in strat.devices or strat.interpreted_on("cpu") or strat.quick_check]
        benchmarks.append({"op": bench["op"], "strategies": "all", "exclude": exclude,
                           "params": {key: SIZES[size].get(key, value) for key, value in bench["params"].items()},
                           "modes": bench.get("modes", ["forward"])})
    config = {"name": f"gpu-rehearsal-{size}", "devices": ["cpu"], "dtypes": gpu["dtypes"],
              "timing": gpu["timing"], "threads": 1, "benchmarks": benchmarks}
    parse_config(config, "<gpu rehearsal>")
    return config


def timed(command: list[str]) -> float:
    began = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - began


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, help="where the run goes (default: a temporary folder)")
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    args = parser.parse_args(argv)
    folder = args.output or Path(tempfile.mkdtemp(prefix="gpu-rehearsal-"))
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "rehearsal.yaml"
    settings = rehearsal_config(args.size)
    config.write_text(yaml.safe_dump(settings, sort_keys=False))
    run = folder / "run"
    harness = [sys.executable, "-m", "harness"]
    sweep_s = timed([*harness, "run", str(config), "-o", str(run), "--no-progress"])
    report_s = timed([*harness, "report", str(run), "-o", str(run / "report")])
    meta = json.loads((run / "meta.json").read_text())
    # a line of samples.jsonl per case timed
    timed_cases = sum(1 for line in (run / "samples.jsonl").read_text().splitlines() if line.strip())
    phases = dict(meta.get("phase_s") or {})
    cases = meta.get("n_cases") or timed_cases
    print(f"gpu.yaml rehearsed on {meta.get('machine')}, {args.size} sizes, timing {json.dumps(settings['timing'])}")
    print(f"{cases} cases, {timed_cases} timed; the sweep's process {sweep_s:.1f} s, the report {report_s:.1f} s")
    print(f"{'phase':<22}{'seconds':>9}{'per case':>10}{'share':>8}")
    total = sum(phases.values()) + report_s
    for name, seconds in [*sorted(phases.items(), key=lambda kv: -kv[1]), ("report", report_s)]:
        print(f"{name:<22}{seconds:9.1f}{seconds / max(cases, 1):10.3f}{100 * seconds / total:7.0f}%")
    outside = sweep_s - sum(phases.values())
    print(f"{'(start-up, writing)':<22}{outside:9.1f}{outside / max(cases, 1):10.3f}")
    print(f"run: {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
