"""``scatterbench baseline`` (``make baseline``): re-measures the two gates'
baselines on this machine from the current code. The wall-time baseline
lives one per CPU (``results/baseline-quick/<cpu>``: model name,
family-model, cores; ``regress`` takes the one measured on the CPU it runs
on), the counts baseline one per tool-and-library version set
(``results/baseline-counts/<versions>``), counted without its Callgrind
dumps, which stay out of git. Each is removed, then measured again whole.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Callable

from harness.base.errors import EXIT_INTERRUPTED, EXIT_OK, UsageError
from harness.judging import count_gate
from harness.measuring import callgrind, facts, gpu_steps

CONFIG = "configs/quick.yaml"  # the gates' config: what `make regress` runs
WALL_ROOT = "results/baseline-quick"
COUNTS_ROOT = "results/baseline-counts"


def wall_directory(root) -> Path:
    """This CPU's wall-time baseline under ``root``."""
    return Path(root) / facts.cpu_slug()


def counts_directory(root) -> Path:
    """This machine's version set's counts baseline under ``root``."""
    return Path(root) / count_gate.versions_slug(callgrind.count_versions())


def run_command(command: list[str]) -> int:
    """A measuring run in a subprocess, its output this process's; an interrupt stops it as a run
    stops (what finished is written), exit 130."""
    status, stopped = gpu_steps.run_step(command)
    return EXIT_INTERRUPTED if stopped else status


def measure_baselines(config: str = CONFIG, wall_root=WALL_ROOT, counts_root=COUNTS_ROOT, *,
                      run: Callable[[list[str]], int] | None = None, say: Callable[[str], None] = print) -> int:
    """The wall-time baseline of this CPU, then (``counts_root`` not None) the counts baseline of
    this version set, each removed and measured again from ``config``. Returns the first failing
    run's exit status, else 0. Where counts cannot be taken here (no valgrind or C compiler), says
    why before anything is removed."""
    run = run or run_command  # each run a subprocess, as `scatterbench run` from the shell
    unable = callgrind.unavailable() if counts_root is not None else None
    if unable:
        raise UsageError(f"the counts baseline cannot be counted here: {unable}; --no-counts re-measures the "
                         f"wall-time baseline alone")
    harness = [sys.executable, "-m", "harness", "run", str(config)]
    wall = wall_directory(wall_root)
    say(f"baseline: timing {config} into {wall}")
    shutil.rmtree(wall, ignore_errors=True)
    status = run([*harness, "-o", str(wall), "--no-progress"])
    if status != EXIT_OK or counts_root is None:
        return status
    counted = counts_directory(counts_root)
    say(f"baseline: counting {config} under Callgrind into {counted}")
    shutil.rmtree(counted, ignore_errors=True)
    status = run([*harness, "--instrument", callgrind.INSTRUMENT, "-o", str(counted), "--no-progress"])
    shutil.rmtree(counted / callgrind.DUMP_DIR, ignore_errors=True)
    return status
