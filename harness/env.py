"""The machine a run measures: thread settings applied, and metadata recorded."""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata as importlib_metadata


def apply_threads(threads) -> dict:
    """Sets torch's, numba's and the BLAS/OpenMP pools' thread counts; returns what is in force."""
    import torch

    if threads.torch:
        torch.set_num_threads(threads.torch)
    if threads.blas:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads.blas)
    applied = {"torch": torch.get_num_threads(), "blas": threads.blas, "numba": None}
    if threads.numba:
        try:
            import numba

            numba.set_num_threads(min(threads.numba, numba.config.NUMBA_NUM_THREADS))
            applied["numba"] = numba.get_num_threads()
        except ImportError:
            pass
    return applied


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name() -> str | None:
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(0)
    except ImportError:
        pass
    return None


def git_commit(cwd: str | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             cwd=cwd or os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                             timeout=10)
        commit = out.stdout.strip()
        if not commit:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10,
                               cwd=cwd or os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        return commit + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def version(package: str) -> str | None:
    try:
        return importlib_metadata.version(package)
    except importlib_metadata.PackageNotFoundError:
        return None


def machine_name() -> str:
    """Host, CPU and GPU in one label: what history is grouped by."""
    gpu = gpu_name()
    return f"{socket.gethostname()} / {cpu_model()} x{os.cpu_count()}" + (f" / {gpu}" if gpu else "")


def run_metadata(threads_applied: dict, config_path: str | None, command: list[str]) -> dict:
    import torch

    return {
        "start_time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_name": gpu_name(),
        "cuda_version": torch.version.cuda,
        "machine": machine_name(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": {name: version(name) for name in
                     ("numpy", "torch", "triton", "numba", "pytensor", "scipy", "pandas")},
        "threads": threads_applied,
        "config_file": config_path,
        "command": " ".join(command),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
    }
