"""Backends: everything the suite knows about one array library, in one record.

A ``Backend`` says which module must import for it to run, on which devices
and in which dtypes, which memory layouts its arrays can take, how a numpy
array becomes one of its arrays and back, how to wait for its queued work
(``synchronize``), whether a device has an event timer, how to read its peak
memory and how to recognise its out-of-memory error. The operators, the
timer, the sweep and the report ask the record; nothing else in the suite
names a backend. Adding a library (CuPy, JAX) is one ``register_backend``
call plus its strategies.

The record's functions import their library lazily: importing this module
imports numpy only.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

DEVICES = ("cpu", "cuda")
DTYPES = ("float16", "bfloat16", "float32", "float64")
LAYOUTS = ("contiguous", "noncontiguous", "channels_last")


class DeviceEvents:
    """A pair of device-side timestamps: ``start``/``stop`` are queued on the
    device's stream, ``elapsed_s`` waits for ``stop`` and returns the device
    time between them. Backends with a device timer return one from
    ``Backend.events``."""

    def start(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def stop(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def elapsed_s(self) -> float:  # pragma: no cover - interface
        raise NotImplementedError


def _no_sync(device: str) -> None:
    return None


def _never_oom(error: BaseException) -> bool:
    return isinstance(error, MemoryError)


@dataclass(frozen=True)
class Backend:
    name: str
    module: str  # must be importable for any strategy of this backend to run
    devices: tuple[str, ...]
    dtypes: tuple[str, ...]
    # Layouts a 4-D input can take on this backend (the check exercises them).
    layouts: tuple[str, ...]
    # (float or int64 numpy array, device, dtype name, layout) -> native array
    to_native: Callable[[np.ndarray, str, str, str], Any]
    # native array -> numpy (bfloat16 widened to float32, which holds it exactly)
    to_numpy: Callable[[Any], np.ndarray]
    # True for this backend's array type (to_numpy is tried on those only)
    owns: Callable[[Any], bool]
    # Waits until every call queued on ``device`` has finished. A timer that
    # reads the host clock calls it after each call, so an asynchronous
    # backend is timed to completion, not to dispatch.
    synchronize: Callable[[str], None] = _no_sync
    # device -> DeviceEvents, or None where only the host clock can time it
    events: Callable[[str], DeviceEvents | None] = lambda device: None
    # device -> a callable that evicts the device's last-level cache, or None
    cache_flush: Callable[[str], Callable[[], None] | None] = lambda device: None
    # (device, seconds) -> queues device work that keeps the device busy for
    # about ``seconds``, so the host can launch the timed call before the
    # device reaches it (see harness/timing.py). None where there is no queue.
    device_delay: Callable[[str, float], None] | None = None
    # (fn, device) -> (fn's output, bytes it needed at peak), or None: the
    # harness then uses the process's resident-set high-water mark.
    peak_memory: Callable[[Callable[[], Any], str], tuple[Any, float]] | None = None
    # device -> free bytes, or None: the harness then asks the OS.
    free_bytes: Callable[[str], int] | None = None
    is_oom: Callable[[BaseException], bool] = _never_oom
    release_memory: Callable[[str], None] = _no_sync
    # Devices this backend reaches only through an interpreter, for
    # correctness checks, never for timing (Triton on the CPU).
    interpreted: Callable[[str], bool] = lambda device: False
    colour: str = "grey"  # one colour per backend in the report's figures
    extra: str = ""  # the pyproject extra that installs it

    def runs_on(self, device: str) -> bool:
        return device in self.devices or self.interpreted(device)

    def unavailable(self) -> str | None:
        """None when the backend's module can be imported, else why not."""
        if importlib.util.find_spec(self.module) is None:
            hint = f" (pip install '.[{self.extra}]')" if self.extra else ""
            return f"backend {self.name!r} is not installed{hint}"
        return None


BACKENDS: dict[str, Backend] = {}


# The module that registered each backend: registering again from the same one
# (a notebook cell re-run, importlib.reload) replaces it; from another, it clashes.
BACKEND_MODULES: dict[str, str] = {}


def register_backend(backend: Backend) -> Backend:
    module = sys._getframe(1).f_globals.get("__name__", "?")
    if backend.name in BACKENDS and BACKEND_MODULES.get(backend.name) != module:
        raise ValueError(f"backend {backend.name!r} registered twice: by {BACKEND_MODULES.get(backend.name, '?')} "
                         f"and by {module}; rename one")
    unknown = [d for d in backend.dtypes if d not in DTYPES]
    if unknown:
        raise ValueError(f"backend {backend.name!r}: unknown dtypes {unknown}")
    BACKENDS[backend.name] = backend
    BACKEND_MODULES[backend.name] = module
    return backend


def get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None


def backend_of(value: Any) -> Backend | None:
    for backend in BACKENDS.values():
        if backend.owns(value):
            return backend
    return None


# ------------------------------------------------------------------ conversion
def convert(inputs: dict, backend: Backend, device: str, dtype: str, layout: str = "contiguous",
            layout_keys: tuple[str, ...] = ()) -> dict:
    """Float arrays to ``dtype`` on the backend's device, integer arrays to
    int64; ``layout`` applies to the arrays named in ``layout_keys`` (the big
    ones), and channels-last only to 4-D arrays of a backend that has it."""
    if dtype not in backend.dtypes:
        raise TypeError(f"{backend.name} has no {dtype}")
    converted: dict[str, Any] = {}
    for key, value in inputs.items():
        if not isinstance(value, np.ndarray):
            converted[key] = value
            continue
        this_layout = layout if key in layout_keys else "contiguous"
        if this_layout == "channels_last" and (value.ndim != 4 or "channels_last" not in backend.layouts):
            this_layout = "contiguous"
        converted[key] = backend.to_native(value, device, dtype, this_layout)
    return converted


FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def float_dtypes(output: Any) -> list[str]:
    """The dtype names of a strategy's floating outputs as the strategy made
    them, before ``to_numpy`` widens bfloat16 to float32 (which would let a
    float32 result pass as bfloat16)."""
    if isinstance(output, (tuple, list)):
        return [name for item in output for name in float_dtypes(item)]
    name = str(getattr(output, "dtype", "")).removeprefix("torch.")
    return [name] if name in FLOAT_DTYPES else []


def to_numpy(output: Any) -> Any:
    """A strategy's output (array, tensor, or tuple of them) as numpy arrays,
    each converted by the backend that owns it."""
    if isinstance(output, (tuple, list)):
        return tuple(to_numpy(item) for item in output)
    backend = backend_of(output)
    if backend is not None:
        return backend.to_numpy(output)
    return np.asarray(output)


def _spread(array: np.ndarray) -> np.ndarray:
    # Same values, every other element of a buffer twice as wide.
    wide = np.zeros(array.shape[:-1] + (2 * array.shape[-1],), array.dtype)
    wide[..., ::2] = array
    return wide[..., ::2]


# ----------------------------------------------------------------------- numpy
def _numpy_to_native(array: np.ndarray, device: str, dtype: str, layout: str) -> np.ndarray:
    converted = array.astype(dtype) if array.dtype.kind == "f" else array.astype(np.int64)
    return _spread(converted) if layout == "noncontiguous" else np.ascontiguousarray(converted)


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray)


# ----------------------------------------------------------------------- torch
def _torch_to_native(array: np.ndarray, device: str, dtype: str, layout: str):
    import torch

    # A copy: torch.from_numpy shares memory, and a float64 input or int64
    # positions would otherwise alias the cached reference's arrays, so a
    # strategy writing into its inputs would corrupt every later check.
    tensor = torch.from_numpy(np.array(array, order="C", copy=True))
    tensor = tensor.to(getattr(torch, dtype)) if array.dtype.kind == "f" else tensor.to(torch.int64)
    if layout == "channels_last":
        tensor = tensor.contiguous(memory_format=torch.channels_last)
    elif layout == "noncontiguous":
        wide = torch.zeros(tensor.shape[:-1] + (2 * tensor.shape[-1],), dtype=tensor.dtype)
        wide[..., ::2] = tensor
        tensor = wide[..., ::2]
    return tensor.to(device)


def _torch_to_numpy(tensor) -> np.ndarray:
    import torch

    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.to(torch.float32)
    return tensor.numpy()


def _is_torch(value: Any) -> bool:
    # Without importing torch: only a process that made a tensor has it loaded.
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _torch_sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


class _CudaEvents(DeviceEvents):
    def __init__(self):
        import torch

        self._start = torch.cuda.Event(enable_timing=True)
        self._stop = torch.cuda.Event(enable_timing=True)

    def start(self) -> None:
        self._start.record()

    def stop(self) -> None:
        self._stop.record()

    def elapsed_s(self) -> float:
        self._stop.synchronize()
        return self._start.elapsed_time(self._stop) / 1e3


def _torch_events(device: str) -> DeviceEvents | None:
    return _CudaEvents() if device == "cuda" else None


L2_FLUSH_BYTES = 256 << 20


def _torch_cache_flush(device: str):
    if device != "cuda":
        return None
    import torch

    buffer = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    return buffer.zero_


def _torch_device_delay(device: str, seconds: float) -> None:
    """Queues a spin kernel of about ``seconds`` on the current stream."""
    if device != "cuda" or seconds <= 0:
        return
    import torch

    torch.cuda._sleep(int(seconds * _cuda_cycles_per_second()))


_CYCLES: dict[str, float] = {}


def _cuda_cycles_per_second() -> float:
    # torch.cuda._sleep spins for a number of clock cycles; how many make a
    # second is measured once (clocks boost, so the nominal rate is not used).
    if "cuda" not in _CYCLES:
        import torch

        cycles = 10_000_000
        torch.cuda._sleep(cycles)  # warm-up
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        stop.record()
        stop.synchronize()
        _CYCLES["cuda"] = cycles / (start.elapsed_time(stop) / 1e3)
    return _CYCLES["cuda"]


def _torch_peak_memory(fn, device: str):
    if device != "cuda":
        return None
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    return out, float(torch.cuda.max_memory_allocated() - before)


def _torch_free_bytes(device: str) -> int | None:
    if device != "cuda":
        return None
    import torch

    free, _total = torch.cuda.mem_get_info()
    return int(free)


def _torch_is_oom(error: BaseException) -> bool:
    # torch.OutOfMemoryError, named so that torch is not imported to ask
    return isinstance(error, MemoryError) or type(error).__name__ == "OutOfMemoryError"


def _torch_release(device: str) -> None:
    if device == "cuda":
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()


def _triton_interpreted(device: str) -> bool:
    # Triton kernels run on CPU tensors under its interpreter: that is how CI
    # checks their correctness (never how they are timed).
    return device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"


def _with_torch(**fields) -> dict:
    common = dict(to_native=_torch_to_native, to_numpy=_torch_to_numpy, owns=_is_torch,
                  synchronize=_torch_sync, events=_torch_events, cache_flush=_torch_cache_flush,
                  device_delay=_torch_device_delay, peak_memory=_torch_peak_memory,
                  free_bytes=_torch_free_bytes, is_oom=_torch_is_oom, release_memory=_torch_release)
    common.update(fields)
    return common


register_backend(Backend(
    name="numpy", module="numpy", devices=("cpu",), dtypes=("float16", "float32", "float64"),
    layouts=LAYOUTS[:2], to_native=_numpy_to_native, to_numpy=np.asarray, owns=_is_numpy,
    colour="#4c72b0"))
register_backend(Backend(
    name="torch", module="torch", devices=("cpu", "cuda"), dtypes=DTYPES, layouts=LAYOUTS,
    colour="#dd8452", **_with_torch()))
register_backend(Backend(
    name="triton", module="triton", devices=("cuda",), dtypes=("float16", "bfloat16", "float32"),
    layouts=LAYOUTS, interpreted=_triton_interpreted, colour="#55a868", extra="triton", **_with_torch()))
# numba and PyTensor compile for real types on the CPU and take numpy arrays.
register_backend(Backend(
    name="numba", module="numba", devices=("cpu",), dtypes=("float32", "float64"), layouts=LAYOUTS[:2],
    to_native=_numpy_to_native, to_numpy=np.asarray, owns=lambda value: False, colour="#8172b3",
    extra="numba"))
register_backend(Backend(
    name="pytensor", module="pytensor", devices=("cpu",), dtypes=("float32", "float64"), layouts=LAYOUTS[:2],
    to_native=_numpy_to_native, to_numpy=np.asarray, owns=lambda value: False, colour="#937860",
    extra="pytensor"))

__all__ = ["Backend", "BACKENDS", "DEVICES", "DTYPES", "LAYOUTS", "DeviceEvents", "backend_of", "convert",
           "float_dtypes", "get_backend", "register_backend", "to_numpy"]
