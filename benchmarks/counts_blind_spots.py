"""What instruction counts cannot see: ``python benchmarks/counts_blind_spots.py [-o DIR]``.

Measures, with the suite's own commands, one example of each blind spot the
docs/COUNTING.md names, on one maxpool2d case large enough to live in
DRAM (8×32×128×128 float32: 16.8 MB in, 4.2 MB of values and 8.4 MB of int64
indices out per call), for a numpy and a torch strategy:

- memory bandwidth: the case timed quiet and beside a process that copies
  256 MiB arrays in a loop (a bandwidth hog on the other core), and counted
  in both conditions: Callgrind simulates caches, not the memory bus;
- page faults: timed with glibc's defaults (every allocation of 128 KiB or
  more a fresh mapping, its pages zeroed by the kernel on first touch, each
  call) and with the heap kept and reused (``GLIBC_TUNABLES``: mappings only
  from 32 MiB, no trimming): Callgrind counts user space, not the kernel;
- other threads: timed at 1 and at 2 threads; counting runs every library at
  1 thread (spin-waits are not deterministic), so a change in how a strategy
  scales over threads is not counted.

Each timing is one ``scatterbench run`` (30+ samples, median and IQR) and each
count one ``scatterbench run --instrument callgrind``, in child processes.
Not a timed test: the numbers depend on the machine and what else runs on it
(the load average is printed with them). Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.results import store  # noqa: E402

STRATEGIES = ("numpy_sliding_window", "torch_max_pool2d_indices")
CONFIG = """
name: blind-spots
devices: [cpu]
dtypes: [float32]
timing: {{min_samples: 30, budget_s: 1.0, warmup_s: 0.1, timeout_s: 120}}
threads: {threads}
benchmarks:
  - op: maxpool2d
    strategies: [{strategies}]
    params: {{N: 8, C: 32, H: 128, W: 128, k: 2}}
"""
HOG = ("import numpy as np\n"
       "a = np.ones(2**25); b = np.empty_like(a)\n"
       "while True: np.copyto(b, a)\n")  # 256 MiB read + 256 MiB written per copy
REUSE_HEAP = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967295:glibc.malloc.top_pad=67108864"


def _config(directory: Path, threads: int) -> Path:
    path = directory / f"blind-spots-{threads}.yaml"
    path.write_text(CONFIG.format(threads=threads, strategies=", ".join(STRATEGIES)))
    return path


def _run(config: Path, out: Path, *extra: str, env: dict | None = None) -> dict:
    """{strategy: row} of one run of ``config`` into ``out``."""
    command = [sys.executable, "-m", "harness", "run", str(config), "-o", str(out), "--no-progress", *extra]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    rows = store.read_rows(out)
    return {row["strategy"]: row for _, row in rows.iterrows()}


class Hog:
    """The bandwidth hog, for the length of a ``with`` block."""

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-c", HOG])
        time.sleep(2)  # its arrays allocated and touched
        return self

    def __exit__(self, *_):
        self.process.kill()
        self.process.wait()


def _time_cell(row) -> str:
    return f"{1e3 * row['median_s']:.2f} ms (IQR {100 * row['iqr_s'] / row['median_s']:.0f} %)"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, help="where the runs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    base = args.output or Path(tempfile.mkdtemp(prefix="blind-spots-"))
    base.mkdir(parents=True, exist_ok=True)
    one, two = _config(base, 1), _config(base, 2)
    print(f"runs under {base}", file=sys.stderr)
    timed = {}
    # Quiet and contended alternate, so a drift of the machine shows as a difference between the quiet runs.
    timed["quiet"] = _run(one, base / "quiet")
    with Hog():
        timed["hog"] = _run(one, base / "hog")
    timed["quiet again"] = _run(one, base / "quiet-again")
    timed["heap reused"] = _run(one, base / "heap-reused", env={"GLIBC_TUNABLES": REUSE_HEAP})
    timed["2 threads"] = _run(two, base / "threads-2")
    counted = {"quiet": _run(one, base / "counted-quiet", "--instrument", "callgrind")}
    with Hog():
        counted["hog"] = _run(one, base / "counted-hog", "--instrument", "callgrind")
    print(f"\nload average after: {os.getloadavg()[0]:.1f} (1 min), {os.cpu_count()} cores\n")
    print("| strategy | quiet | bandwidth hog | quiet again | heap reused (no page faults) | 2 threads "
          "| instructions quiet / beside the hog | est_cycles quiet / beside the hog |")
    print("|---|---|---|---|---|---|---|---|")
    for name in STRATEGIES:
        cells = [_time_cell(timed[key][name]) for key in ("quiet", "hog", "quiet again", "heap reused", "2 threads")]
        for metric in ("instructions", "est_cycles"):
            quiet, hog = counted["quiet"][name][metric], counted["hog"][name][metric]
            cells.append(f"{quiet:,.0f} / {hog:,.0f} ({100 * (hog / quiet - 1):+.3f} %)")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
