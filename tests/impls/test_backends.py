"""A backend is one record: a toy backend built here, with its own device,
threads knob, timer and copy ceiling, registered with one strategy, goes
through ``check``, ``run`` and the report with no other edit to the project.

The toy "device" keeps its own clock: each strategy call costs ``WORK_S`` of
device time and each copy ``2 * nbytes / (CEILING_GBPS * 1e9)``, reported by
its events and never spent on the host. A timer other than the toy's own
would store microseconds, and a ceiling other than the toy's copy would not
come out at ``CEILING_GBPS``.

This module is also the plugin the subprocesses load (SCATTERBENCH_PLUGINS=
test_backends): it registers the toy only there, so the registry of the test
session itself never holds it.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from impls.backends import Backend, DeviceEvents, ThreadKnob, register_backend
from impls.registry import strategy
from tests.helpers import benchmark, config_yaml, plugin_env, report_py, scatterbench

WORK_S = 0.004  # device time of one toy call
CEILING_GBPS = 123.0  # the toy device's copy bandwidth
THREADS = {"count": None}  # the toy's thread pool
DEVICE_CLOCK = {"s": 0.0}  # the toy device's own clock, in seconds


class ToyArray:
    """An array living on the toy device (a numpy array inside)."""

    def __init__(self, data: np.ndarray):
        self.data = data


class ToyEvents(DeviceEvents):
    def start(self) -> None:
        self.begin = DEVICE_CLOCK["s"]

    def stop(self) -> None:
        self.end = DEVICE_CLOCK["s"]

    def elapsed_s(self) -> float:
        return self.end - self.begin


def to_native(array, device, dtype, layout):
    converted = array.astype(dtype) if array.dtype.kind == "f" else array.astype(np.int64)
    return ToyArray(np.ascontiguousarray(converted))


def toy_copy(device, nbytes):
    def copy():
        DEVICE_CLOCK["s"] += 2 * nbytes / (CEILING_GBPS * 1e9)

    return copy


TOY = Backend(
    name="toy", module="numpy", devices=("toy",), dtypes=("float32", "float64"), layouts=("contiguous",),
    to_native=to_native, to_numpy=lambda array: np.asarray(array.data), owns=lambda value: isinstance(value, ToyArray),
    present=lambda device: device == "toy", device_info=lambda device: {"name": "toy accelerator"},
    threads=ThreadKnob(set=lambda count: THREADS.update(count=count), get=lambda: THREADS["count"], order=5,
                       why="the toy's pool is its own"),
    events=lambda device: ToyEvents(), copy=toy_copy, version=lambda: "toy 1.0", colour="#123456")


def toy_max_pool(inputs, params):
    """The values of a k x k max-pool on the toy device (test: a toy backend),
    one reshape and one max over the crop; each call costs WORK_S of the toy
    device's time."""
    x, k = inputs["x"].data, params["k"]

    def run():
        N, C, H, W = x.shape
        h, w = H // k, W // k
        DEVICE_CLOCK["s"] += WORK_S
        windows = x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).transpose(0, 1, 2, 4, 3, 5)
        values = windows.reshape(N, C, h, w, k * k)
        first = np.take_along_axis(values, values.argmax(axis=-1)[..., None], axis=-1)[..., 0]
        return ToyArray(first)

    return run


if __name__ in os.environ.get("SCATTERBENCH_PLUGINS", "").split(","):
    register_backend(TOY)
    strategy("maxpool2d", backend="toy", source="test: toy backend", returns="values")(toy_max_pool)


CONFIG = config_yaml(benchmark("maxpool2d", ["toy_max_pool"], N=2, C=3, H=8, W=8, k=2), name="toy",
                     devices=["toy"], threads={"toy": 3}, timing={"min_samples": 5, "budget_s": 0.02, "warmup_s": 0})


def _env():
    """This file itself is the plugin: its directory on the path, imported by its own name."""
    env = plugin_env("quiet_machine_plugin", "test_backends")  # its ceiling used whatever the load
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env["PYTHONPATH"]])
    return env


def _scatterbench(*args):
    return scatterbench(*args, env=_env())


@pytest.mark.slow  # three subprocesses
def test_a_toy_backend_is_one_record_through_check_run_and_report(tmp_path, tiny_config):
    config = tiny_config(CONFIG, "toy.yaml")
    listed = _scatterbench("list", "--device", "toy")
    assert listed.returncode == 0 and "toy_max_pool" in listed.stdout, listed.stderr

    checked = _scatterbench("check", config, "--no-progress")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert " 0 failed" in checked.stdout

    out = tmp_path / "run"
    ran = _scatterbench("run", config, "-o", out, "--no-progress")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    meta = json.loads((out / "meta.json").read_text())
    assert meta["threads"]["toy"] == 3  # its knob, set and read back
    assert meta["ceilings_gbps"]["toy"] == pytest.approx(CEILING_GBPS)  # its copy, timed by its clock
    assert meta["backend_versions"]["toy"] == "toy 1.0"
    assert meta["gpu_name"] == "toy accelerator"  # its device, discovered and described by the record
    samples = [json.loads(line)["samples_s"] for line in (out / "samples.jsonl").read_text().splitlines()]
    # its own timer: device time only, none of the host's
    assert len(samples) == 1 and len(samples[0]) >= 5 and samples[0] == pytest.approx([WORK_S] * len(samples[0]))
    rows = (out / "rows.csv").read_text()
    assert "toy_max_pool" in rows and ",ok," in rows

    reported = report_py(out, "-o", tmp_path / "report", env=_env())
    assert reported.returncode == 0, reported.stderr
    assert "toy_max_pool" in (tmp_path / "report" / "report.md").read_text()


def test_the_toy_stays_out_of_the_test_sessions_registry():
    from impls.backends import BACKENDS, devices

    assert "toy" not in BACKENDS and "toy" not in devices()


def test_a_backend_installed_without_the_device_skips_its_cases(planted):
    """A backend whose library is installed but finds no such device here (a
    CPU-only JAX on a GPU machine) is skipped with the reason, not an error."""
    import dataclasses

    from harness.measuring.check import cached_reference, check_strategy
    from impls.backends import BACKENDS, get_backend

    BACKENDS["absent"] = dataclasses.replace(get_backend("numpy"), name="absent", present=lambda device: False)
    try:
        strat = planted("maxpool2d", "absent_pool", lambda inputs, params: lambda: None, backend="absent",
                        returns="values")
        params = dict(N=1, C=1, H=4, W=4, k=2)
        verdict = check_strategy(strat, params, "float32", "cpu", cached_reference("maxpool2d", params, "float32",
                                                                                    "random", 0))
    finally:
        BACKENDS.pop("absent")
    assert verdict.status == "skipped" and "finds no cpu device here" in verdict.message
