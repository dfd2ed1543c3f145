"""A run's ``meta.json`` as a typed record.

``RunMeta.of(meta)`` takes the dict ``store.read_meta`` returns (already
migrated to this schema) and gives each field a type, so that readers never
probe with ``isinstance``: a field a damaged or hand-edited file holds in the
wrong shape reads as its empty value (an unknown machine, no threads, no
ceilings), as an absent one does; keys this version does not know are kept
(``model_extra``). What each field means is said where it is written
(harness/measuring/facts.py ``run_metadata``, harness/measuring/sweep.py ``execute_run``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WrapValidator


def _lenient(kind, default=None):
    """``kind``, or ``default`` (a factory where callable) when the file holds
    something of another shape."""

    def validate(value: Any, handler):
        try:
            return handler(value)
        except ValidationError:
            return default() if callable(default) else default

    return Annotated[kind, WrapValidator(validate)]


Number = _lenient(float | None)
Count = _lenient(int | None)
Text = _lenient(str | None)


class Lenient(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    @classmethod
    def of(cls, value):
        """The record of a dict (or the record itself); a non-dict reads as empty."""
        if isinstance(value, cls):
            return value
        return cls.model_validate(value if isinstance(value, dict) else {})


class Gpu(Lenient):
    name: Text = None
    memory_bytes: Number = None
    sm_count: Count = None
    capability: Text = None
    driver: Text = None
    max_sm_clock_mhz: Text = None
    max_mem_clock_mhz: Text = None
    cuda_version: Text = None


class Hardware(Lenient):
    cpu_model: Text = None
    cpu_family_model: Text = None
    cpu_count: Count = None
    caches: _lenient(dict[str, str], dict) = Field(default_factory=dict)
    memory_bytes: Number = None
    gpu: _lenient(Gpu | None) = None


class CeilingTry(Lenient):
    gbps: Number = None  # the try's copy bandwidth (the best of its copies)
    load: Number = None  # the 1-minute load average when it started (None: not known)


class RunMeta(Lenient):
    run_id: str
    schema_version: int
    status: Text = None
    start_time: Text = None
    end_time: Text = None
    git_commit: Text = None
    host: Text = None
    machine: Text = None
    cpu_model: Text = None
    cpu_count: Count = None
    gpu_name: Text = None
    cuda_version: Text = None
    platform: Text = None
    python: Text = None
    config_file: Text = None
    command: Text = None
    # package -> version (importlib.metadata); backend -> its version text for reports
    versions: _lenient(dict[str, str | None], dict) = Field(default_factory=dict)
    backend_versions: _lenient(dict[str, str | None], dict) = Field(default_factory=dict)
    hardware: _lenient(Hardware, Hardware) = Field(default_factory=Hardware)
    # backend -> threads its knob read back once all were set (None: not known)
    threads: _lenient(dict[str, int | None], dict) = Field(default_factory=dict)
    ceilings_gbps: _lenient(dict[str, float], dict) = Field(default_factory=dict)
    fresh_write_gbps: _lenient(dict[str, float], dict) = Field(default_factory=dict)
    ceiling_history: _lenient(dict[str, dict[str, float]], dict) = Field(default_factory=dict)
    # The copy ceiling's measurement (harness/measuring/ceilings.py): device -> its tries in order;
    # device -> why its ceiling was left out of ceilings_gbps ("load 3.4 on 2 cores": every try at
    # capacity, so no row has its floor or % of ceiling); when the ceilings reused were measured
    # (bench(); None: measured by this run).
    ceiling_tries: _lenient(dict[str, list[CeilingTry]], dict) = Field(default_factory=dict)
    ceiling_busy: _lenient(dict[str, str], dict) = Field(default_factory=dict)
    ceiling_reused_from: Text = None
    # strategy keys whose adversarial verdict came from the cache (harness/measuring/verdict_cache.py)
    adversarial_from_cache: Count = None
    load_avg_start: _lenient(list[float] | None) = None
    load_avg_end: _lenient(list[float] | None) = None
    case_load_max: Number = None
    phase_s: _lenient(dict[str, float], dict) = Field(default_factory=dict)
    config: _lenient(dict | None) = None
    n_cases: Count = None
    # Why the run stopped before its end: the signal (status interrupted), the full disk, or the
    # error that ended it (status failed).
    interrupted_by: Text = None

    def cpu(self) -> dict:
        """What ``env.same_cpu`` compares: the recorded hardware, or for a run
        from before ``hardware`` was recorded, its CPU model and count."""
        return {"cpu_model": self.cpu_model, "cpu_count": self.cpu_count,
                **self.hardware.model_dump(exclude_none=True, exclude={"gpu"})}


def record(meta) -> RunMeta:
    """A run's metadata as its record: a dict as read (a partial one too, as
    tests and old summaries hold: no run id or schema reads as "?" and 0), or
    the record itself."""
    if isinstance(meta, RunMeta):
        return meta
    return RunMeta.of({"run_id": "?", "schema_version": 0, **(meta if isinstance(meta, dict) else {})})


# Reading recorded metadata: which machine a run was measured on.

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
    a, b = record(meta_a), record(meta_b)
    if a.gpu_name != b.gpu_name:
        return False
    if "hardware" in a.model_fields_set and "hardware" in b.model_fields_set:
        return same_cpu(a.hardware.model_dump(), b.hardware.model_dump())
    return (a.cpu_model, a.cpu_count) == (b.cpu_model, b.cpu_count)


def machine_label(meta: dict) -> str:
    """A run's machine as messages and the report name it: its recorded name,
    with the CPU's family-model where the run recorded one (two VMs named
    "vm / AMD EPYC x2" may be a Zen 3 and a Zen 4). History is grouped by
    hardware instead (`machine_groups`)."""
    meta = record(meta)
    label = str(meta.machine or meta.host or "?")
    family_model = meta.hardware.cpu_family_model
    return f"{label} [{family_model}]" if family_model else label


def hardware_label(meta) -> str:
    """A run's hardware without its host name: CPU model, cores and
    family-model, and GPU (what `same_machine` compares)."""
    meta = record(meta)
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
            typed = record(meta)
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


def version_changes(before, after) -> list[str]:
    """``name before → after`` for each tool or library whose version
    differs between two version records (``count_versions`` of two runs'
    meta.json; None or a non-mapping: none recorded), in name order: how
    every message that names differing versions says it."""
    before = before if isinstance(before, dict) else {}
    after = after if isinstance(after, dict) else {}
    return [f"{name} {before.get(name)} → {after.get(name)}" for name in sorted(set(before) | set(after))
            if before.get(name) != after.get(name)]


# The timing protocols a run may have been written under (SPEC 3): before rounds (one stretch of
# samples per case, result schema before 7), rounds (schema 7 to 9), raced rounds (schema 10 on).
# Rounds and raced rounds time every sample alike; a run before rounds saw no round-to-round drift.
ROUNDS_SCHEMA = 7
BEFORE_ROUNDS, ROUNDS = "one stretch of samples (before rounds)", "rounds"


def timing_protocol(meta: dict) -> str | None:
    """The timing protocol a run was measured under (None: not known), by the schema it was written as."""
    written = meta.get("schema_written", meta.get("schema_version")) if isinstance(meta, dict) else None
    if not isinstance(written, int):
        return None
    return ROUNDS if written >= ROUNDS_SCHEMA else BEFORE_ROUNDS


def thread_setting(meta: dict) -> dict[str, int | None]:
    """Each library's threads as the run recorded them, by today's pool names (``blas`` is numpy's)."""
    from impls.backends import LEGACY_THREAD_KEYS

    threads = record(meta).threads
    return {LEGACY_THREAD_KEYS.get(pool, pool): count for pool, count in threads.items()}


def unlike_settings(base_meta: dict, new_meta: dict) -> list[str]:
    """Why two runs' times measure different things, though on one machine: another thread setting
    (a library both recorded, at another count) or another timing protocol. Empty where alike, or
    where a run did not record it. A change of either is a change of what is measured, not a
    regression: no gate and no dashboard judges across it (docs/GUARANTEES.md)."""
    from impls.backends import threads_text

    reasons = []
    base, new = thread_setting(base_meta), thread_setting(new_meta)
    if any(base[pool] != new[pool] for pool in set(base) & set(new)):
        reasons.append(f"different thread settings ({threads_text(base)} → {threads_text(new)})")
    protocols = timing_protocol(base_meta), timing_protocol(new_meta)
    if None not in protocols and protocols[0] != protocols[1]:
        reasons.append(f"different timing protocol ({protocols[0]} → {protocols[1]})")
    return reasons

