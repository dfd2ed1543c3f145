"""A run's ``meta.json`` as a typed record.

``RunMeta.of(meta)`` takes the dict ``store.read_meta`` returns (already
migrated to this schema) and gives each field a type, so that readers never
probe with ``isinstance``: a field a damaged or hand-edited file holds in the
wrong shape reads as its empty value (an unknown machine, no threads, no
ceilings), as an absent one does; keys this version does not know are kept
(``model_extra``). What each field means is said where it is written
(harness/env.py ``run_metadata``, harness/sweep.py ``execute_run``).
"""

from __future__ import annotations

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
    load_avg_start: _lenient(list[float] | None) = None
    load_avg_end: _lenient(list[float] | None) = None
    case_load_max: Number = None
    phase_s: _lenient(dict[str, float], dict) = Field(default_factory=dict)
    config: _lenient(dict | None) = None
    n_cases: Count = None
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
