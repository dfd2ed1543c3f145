"""The machine a run measures: thread settings applied, and metadata recorded."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import re
import socket
import subprocess
import sys
from importlib import metadata as importlib_metadata
from typing import Mapping


def apply_threads(threads: Mapping[str, int | None]) -> dict:
    """Sets each backend's threads knob (``threads`` is keyed by backend
    name; None or absent leaves it alone) in the knobs' setting order, then
    reads every installed knob back: what is in force once all are set, which
    the run records. The order and why are each knob's (impls/backends.py):
    starting numba's threading layer resets the OpenMP runtime torch shares,
    so torch set first ran with every core again."""
    from impls.backends import thread_knobs

    knobs = [backend for backend in thread_knobs() if not backend.unavailable()]
    for backend in knobs:
        if threads.get(backend.name):
            backend.threads.set(threads[backend.name])
        # Read at its turn too: reading can start a library's threading layer
        # (numba's resets the OpenMP runtime), which must not happen after the
        # knobs set later in the order (torch's went from 1 back to 2).
        backend.threads.get()
    return {backend.name: backend.threads.get() for backend in knobs}


def threads_in_force() -> dict:
    """What each installed backend's thread pool runs now (its knob read
    back), enough for ``restore_threads`` to put it back."""
    from impls.backends import thread_knobs

    return {backend.name: backend.threads.get() for backend in thread_knobs() if not backend.unavailable()}


def restore_threads(saved: dict) -> None:
    """Puts back what ``threads_in_force`` saw, in the knobs' setting order."""
    apply_threads({name: count for name, count in saved.items() if count})


@contextlib.contextmanager
def threads_applied(threads):
    """``apply_threads(threads)`` for the block (yields what is in force),
    and the caller's own settings back afterwards: how ``bench()`` pins a
    notebook's thread pools without leaving them pinned."""
    saved = threads_in_force()
    try:
        yield apply_threads(threads)
    finally:
        restore_threads(saved)


def unpinned_threads(threads, backends=None) -> list[str]:
    """The installed backends whose threads a config (keyed by backend) left
    to the library's default (every core); only those among ``backends``
    (the ones a sweep's strategies run on) where given."""
    from impls.backends import thread_knobs

    return [backend.name for backend in thread_knobs()
            if not backend.unavailable() and not (threads or {}).get(backend.name)
            and (backends is None or backend.name in backends)]


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


def oversubscription_warning(threads, load: float | None = None, cores: int | None = None,
                             backends=None) -> str | None:
    """One line when some thread pools are unpinned and the machine is at or
    above its core count at the start: a pool sized to every core then waits
    for cores the other work holds (on the 2-core VM with a CPU hog per core,
    a 5.5 µs max_pool2d call measured 34 ms that way unpinned, 5.5-6.0 µs
    with every pool at one thread). ``backends``: those the timed strategies
    run on (a torch-only sweep does not wait on JAX's pool). None otherwise."""
    unpinned = unpinned_threads(threads, backends)
    if not unpinned:
        return None
    cores = cores or os.cpu_count() or 1
    load = competing_load() if load is None else load
    if not at_capacity(load, cores):
        return None
    names = ", ".join(f"threads.{name}" for name in unpinned)
    return (f"the machine is loaded ({load:.1f} runnable against {cores} cores) and {names} "
            f"{'is' if len(unpinned) == 1 else 'are'} unpinned, so each pool starts one thread per core and "
            f"waits for cores the other work holds: timings may be many times too slow; pin them, e.g. "
            f"threads: 1 in the config (every backend's pool at one thread), or bench(..., threads=1)")


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


def same_cpu(hardware_a: dict, hardware_b: dict) -> bool:
    """Whether two runs' ``hardware`` records describe the same CPU: model
    name and core count, and every finer fact both recorded (family-model;
    L2 and L3 sizes, which older runs recorded before family-model was)."""
    for key in ("cpu_model", "cpu_count"):
        if hardware_a.get(key) != hardware_b.get(key):
            return False
    if None not in (hardware_a.get("cpu_family_model"), hardware_b.get("cpu_family_model")) \
            and hardware_a["cpu_family_model"] != hardware_b["cpu_family_model"]:
        return False
    caches_a, caches_b = hardware_a.get("caches") or {}, hardware_b.get("caches") or {}
    return all(caches_a[level] == caches_b[level] for level in ("L2", "L3") if level in caches_a and level in caches_b)


def same_machine(meta_a: dict, meta_b: dict) -> bool:
    """Whether two runs' metadata describe the same hardware: the same CPU
    (``same_cpu``, or model and core count where a run predates ``hardware``)
    and the same GPU. Host names are not compared: the shards of one sweep
    may run on identical nodes."""
    a, b = _typed(meta_a), _typed(meta_b)
    if a.gpu_name != b.gpu_name:
        return False
    if "hardware" in a.model_fields_set and "hardware" in b.model_fields_set:
        return same_cpu(a.hardware.model_dump(), b.hardware.model_dump())
    return (a.cpu_model, a.cpu_count) == (b.cpu_model, b.cpu_count)


def _typed(meta):
    """A run's metadata (a dict as read, or already a ``RunMeta``) as a ``RunMeta``."""
    from harness.runmeta import record

    return record(meta)


def machine_label(meta: dict) -> str:
    """A run's machine as messages and the report name it: its recorded name,
    with the CPU's family-model where the run recorded one (two VMs named
    "vm / AMD EPYC x2" may be a Zen 3 and a Zen 4). History is grouped by
    hardware instead (`machine_groups`)."""
    meta = _typed(meta)
    label = str(meta.machine or meta.host or "?")
    family_model = meta.hardware.cpu_family_model
    return f"{label} [{family_model}]" if family_model else label


def hardware_label(meta) -> str:
    """A run's hardware without its host name: CPU model, cores and
    family-model, and GPU (what `same_machine` compares)."""
    meta = _typed(meta)
    cpu = meta.hardware.cpu_model or meta.cpu_model or "?"
    count = meta.hardware.cpu_count or meta.cpu_count
    family_model = meta.hardware.cpu_family_model
    label = (f"{cpu} x{count}" if count else cpu) + (f" [{family_model}]" if family_model else "")
    return label + (f" / {meta.gpu_name}" if meta.gpu_name else "")


def machine_groups(metas) -> list[str]:
    """Each run's machine in a history, oldest first: runs that `same_machine`
    finds alike share one label (the hardware of the first of them), so a
    fleet's nightly runs form one series per machine however they interleave,
    and CI runners whose host names change every run stay one machine. A run
    joins a group only when it is alike with every kind of record already in
    it: `same_machine` passes facts one run did not record, so a run that
    recorded only "AMD EPYC x2" must not bind a Zen 4 and a Zen 5 together."""
    groups: list[tuple[list, str]] = []  # (the group's distinct typed records, its label)
    by_identity: dict[str, str] = {}  # identical records: decided once, not once per run
    labels = []
    for meta in metas:
        identity = json.dumps([meta.get(key) for key in ("gpu_name", "cpu_model", "cpu_count", "hardware")],
                              sort_keys=True, default=str)
        if identity not in by_identity:
            typed = _typed(meta)
            group = next((group for group in groups if all(same_machine(other, typed) for other in group[0])), None)
            if group is None:
                label = hardware_label(typed)
                while label in {other for _, other in groups}:  # alike labels, different hardware (caches)
                    label += "'"
                group = ([], label)
                groups.append(group)
            group[0].append(typed)
            by_identity[identity] = group[1]
        labels.append(by_identity[identity])
    return labels


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
        for device, gbps in _typed(other).ceilings_gbps.items():
            history.setdefault(device, []).append(gbps)
    report = {}
    for device, gbps in ceilings.items():
        past = history.get(device, [])
        if past:
            median = statistics.median(past)
            report[device] = {"history_median_gbps": median, "runs": len(past),
                              "deviation_pct": 100.0 * (gbps - median) / median}
    return report


def run_metadata(threads_applied: dict, config_path: str | None, command: list[str]) -> dict:
    from impls import backends

    packages = ["numpy", "torch", "triton", "numba", "pytensor", "scipy", "pandas"]
    packages += [b.distribution or b.module for b in backends.BACKENDS.values()
                 if (b.distribution or b.module) not in packages]
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
        "config_file": config_path,
        "command": " ".join(command),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
    }
