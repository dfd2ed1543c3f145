"""The machine a run measures: its hardware, load, versions, commit, copy
ceilings over time and the metadata a run records."""

from __future__ import annotations

import datetime as dt
import os
import platform
import re
import socket
import subprocess
import sys
import time
from importlib import metadata as importlib_metadata
from pathlib import Path

from harness.base.checkout import ROOT

from harness.results.runmeta import machine_label, record


def competing_load(samples: int = 5, interval_s: float = 0.02) -> float:
    """How much other work competes for the cores now: the 1-minute load
    average, or the tasks runnable at this moment besides this one (median
    of a few looks at /proc/loadavg), whichever is higher. The average lags
    a minute behind work that just started; the count does not."""
    import statistics
    import time

    average = (load_average() or [0.0])[0]
    runnable = []
    for index in range(samples):
        try:
            with open("/proc/loadavg") as handle:
                running = int(handle.read().split()[3].split("/")[0])
        except (OSError, ValueError, IndexError):
            break
        runnable.append(running - 1)  # this process is running while it reads
        if index + 1 < samples:
            time.sleep(interval_s)
    return max(average, statistics.median(runnable) if runnable else 0.0)


def at_capacity(load: float | None, cores: int | None) -> bool:
    """Other work competes for the cores: a load at or above their count (the
    one rule for the unpinned-threads warning and for a run too busy to judge)."""
    return load is not None and cores is not None and load >= cores


# The longest a run waits before its first case for the 1-minute load its own
# adversarial workers left (one per core: harness/measuring/prefetch.py) to fall
# below the core count. The average lags a minute behind work that has ended: a
# cold `make bench` on the 2-core Xeon VM went from its workers straight to its
# first cases at load 2.0, and the fitness rule refused the run for a load that
# was its own. Sleeping, the average falls by e^(-t/60) a minute towards what
# other work holds: from 2.3 to below 2 in ~8 s, from 3 in ~24 s.
SETTLE_LIMIT_S = 60.0


def settle(load_before: float | None, cores: int | None, *, on_wait=None, limit_s: float = SETTLE_LIMIT_S,
           poll_s: float = 1.0, read=None, sleep=time.sleep, clock=time.monotonic) -> float:
    """Waits, at most ``limit_s``, for the 1-minute load to fall below
    ``cores`` again when the run's own work lifted it there: only when
    ``load_before`` (the load before that work) was below (`at_capacity`); a
    load that was already the machine's is no reason to wait, and is judged
    as it stands. ``on_wait()`` once as the wait starts. Returns the seconds
    waited (0.0: none). ``read``, ``sleep`` and ``clock`` are the load, the
    pause and the time (tests pass their own)."""
    read = read or one_minute_load
    if at_capacity(load_before, cores) or not at_capacity(read(), cores):
        return 0.0
    if on_wait:
        on_wait()
    start = clock()
    while clock() - start < limit_s:
        sleep(min(poll_s, max(0.0, limit_s - (clock() - start))))
        if not at_capacity(read(), cores):
            break
    return clock() - start


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpuinfo_field(name: str) -> str | None:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_family_model() -> str | None:
    """The microarchitecture as ``family-model`` (``25-17`` is AMD Zen 4):
    the model name alone does not tell it. This project's VMs report
    "AMD EPYC" for both a Zen 3 (512 KiB L2) and a Zen 4 (1 MiB L2, AVX-512),
    and between those two the ratio of dispersion/numba_fused to the other
    strategies of its case moved 2.2x with nothing changed."""
    family, model = _cpuinfo_field("cpu family"), _cpuinfo_field("model")
    return f"{family}-{model}" if family and model else None


def accelerator() -> str | None:
    """The first device other than the CPU that this machine has (what
    ``gpu_name`` and ``hardware.gpu`` describe), or None."""
    from impls.backends import device_present, devices

    return next((device for device in devices() if device != "cpu" and device_present(device)), None)


def gpu_name() -> str | None:
    details = gpu_details()
    return details.get("name") if details else None


# A copy of the checkout names the commit it was copied from here, and that
# wins: a lent GPU machine's copy holds the working tree with a stale .git
# (seen: HEAD the session's first commit, "-dirty" by everything since).
COMMIT_ENV = "SCATTERBENCH_GIT_COMMIT"


def git_commit(cwd: str | None = None) -> str | None:
    return os.environ.get(COMMIT_ENV) or _git_commit(cwd)


def _git_commit(cwd: str | None) -> str | None:
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


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read().strip()
    except OSError:
        return None


def hardware() -> dict:
    """What the numbers depend on: CPU model, caches and memory; the GPU's
    name, driver and clocks where there is one."""
    import psutil

    caches = {}
    base = "/sys/devices/system/cpu/cpu0/cache"
    for index in range(8):
        level, kind, size = (_read(f"{base}/index{index}/{name}") for name in ("level", "type", "size"))
        if level and size:
            caches[f"L{level}{'d' if kind == 'Data' else 'i' if kind == 'Instruction' else ''}"] = size
    info = {"cpu_model": cpu_model(), "cpu_family_model": cpu_family_model(), "cpu_count": os.cpu_count(),
            "caches": caches,
            "memory_bytes": int(psutil.virtual_memory().total)}
    gpu = gpu_details()
    if gpu:
        info["gpu"] = gpu
    return info


def gpu_details() -> dict | None:
    """The accelerator as its backend describes it (``Backend.device_info``),
    with the driver and clocks nvidia-smi gives where it can."""
    from impls.backends import device_info

    try:
        device = accelerator()
        details = dict(device_info(device) or {}) if device else {}
    except Exception:
        return None
    if not details:
        return None
    try:
        query = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,clocks.max.mem",
                                "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=10)
        driver, sm_clock, mem_clock = (part.strip() for part in query.stdout.splitlines()[0].split(","))
        details.update(driver=driver, max_sm_clock_mhz=sm_clock, max_mem_clock_mhz=mem_clock)
    except (OSError, subprocess.SubprocessError, IndexError, ValueError):
        pass
    return details


def cpu_slug() -> str:
    """This CPU as a directory name (``amd-epyc-25-17-x2``: model name,
    family-model, core count): where ``make baseline`` keeps this machine's
    baseline."""
    words = re.findall(r"[a-z0-9]+", cpu_model().lower())
    family_model = cpu_family_model()
    return "-".join(words + ([family_model] if family_model else []) + [f"x{os.cpu_count()}"])


def machine_name() -> str:
    """Host, CPU and GPU in one label: the ``machine`` a run records."""
    gpu = gpu_name()
    return f"{socket.gethostname()} / {cpu_model()} x{os.cpu_count()}" + (f" / {gpu}" if gpu else "")


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def load_average() -> list[float] | None:
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:
        return None


def one_minute_load() -> float | None:
    """The 1-minute load average now; None where the system gives none."""
    return (load_average() or [None])[0]


def ceiling_history(out_dir, ceilings: dict, meta: dict) -> dict:
    """Each device's ceiling against the median of earlier runs' ceilings on
    the same machine (the result directories beside ``out_dir``): a ceiling
    far below its history says the machine was busy or throttled."""
    import json
    import statistics
    from pathlib import Path

    # The label with the CPU's family-model: every AMD EPYC VM is named "vm / AMD EPYC x2",
    # and a Zen 5's ceiling against a Zen 3's history read as +116 %.
    machine = machine_label(meta)
    history: dict[str, list[float]] = {}
    root = Path(out_dir).resolve().parent
    try:
        siblings = [path for path in root.iterdir() if (path / "meta.json").is_file()]
    except OSError:
        siblings = []
    for path in siblings:
        if path.resolve() == Path(out_dir).resolve():
            continue
        try:
            other = json.loads((path / "meta.json").read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not isinstance(other, dict) or machine_label(other) != machine:
            continue
        for device, gbps in record(other).ceilings_gbps.items():
            history.setdefault(device, []).append(gbps)
    report = {}
    for device, gbps in ceilings.items():
        past = history.get(device, [])
        if past:
            median = statistics.median(past)
            report[device] = {"history_median_gbps": median, "runs": len(past),
                              "deviation_pct": 100.0 * (gbps - median) / median}
    return report


def config_location(config_path: str | None) -> str | None:
    """The config as a path that works from the project root: relative to it
    when the file lies inside the checkout, absolute otherwise (a path relative
    to wherever the author stood would be read against the wrong folder)."""
    if not config_path:
        return config_path
    path = Path(config_path).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return str(path)


def run_metadata(threads_applied: dict, config_path: str | None, command: list[str]) -> dict:
    from impls import backends

    # Every backend's library, then the libraries the harness itself computes with.
    packages = list(dict.fromkeys([b.distribution or b.module for b in backends.BACKENDS.values()]
                                  + ["scipy", "pandas"]))
    machine = hardware()
    gpu = machine.get("gpu") or {}
    return {
        "start_time": now_iso(),
        "load_avg_start": load_average(),
        "git_commit": git_commit(),
        "host": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpu_name": gpu.get("name"),
        "cuda_version": gpu.get("cuda_version"),
        "machine": machine_name(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "versions": {name: version(name) for name in packages},
        # what reports show per backend: every registered one, its own version text
        "backend_versions": backends.versions(),
        "hardware": machine,
        "threads": threads_applied,
        "config_file": config_location(config_path),
        "command": " ".join(command),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
    }
