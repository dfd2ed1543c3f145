"""Backends: everything the suite knows about one array library, in one record.

A ``Backend`` says which module must import for it to run, on which devices
and in which dtypes, whether a device is present, which memory layouts its
arrays can take, how a numpy array becomes one of its arrays and back, how
many threads it computes with (``ThreadKnob``: how to set and read it back,
and its place in the setting order), how to wait for its queued work
(``synchronize``) and whether a device has an event timer (together: the
timer every measurement uses), how to copy a large buffer (the copy
ceiling), its version as reports show it, how to read its peak memory and
how to recognise its out-of-memory error. The operators, the timer, the
sweep, the metadata and the report ask the record; nothing else in the suite
names a backend. Adding a library (CuPy, JAX) is one ``register_backend``
call plus its strategies and its pyproject extra.

The record's functions import their library lazily: importing this module
imports numpy only.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

@dataclass(frozen=True)
class Dtype:
    """Everything the suite knows about one floating dtype, in one record:
    every per-dtype table (itemsizes, bounds, subnormal ranges, accumulators)
    and every branch on a dtype reads a field of it."""

    name: str
    itemsize: int  # bytes per element (bytes-moved formulas take it)
    # docs/SPEC.md §1.3: the relative error up to which a result is ok ...
    rel_tol: float
    # ... and above which it is wrong, not rounded (``inexact`` between). One
    # lost channel of 512 is an error of about 1.5e-2 and one of 56 about
    # 4.6e-2, so one bound for every dtype (5e-2) called those float32 results
    # inexact: correct, timed and compared. The widest honest rounding is a
    # half-type accumulator over hundreds of channels (about 2e-2) and, in
    # float32, cuDNN's TF32 convolutions (about 5e-4).
    wrong_rel_err: float
    # Its subnormals are m * subnormal_unit for 0 < m < subnormal_steps; its
    # smallest normal number is subnormal_unit * subnormal_steps. bfloat16 has
    # float32's exponent range and 7 mantissa bits, so its subnormals are
    # float32 subnormals too (those that are multiples of 2**-133). All are
    # exact float64s.
    subnormal_unit: float
    subnormal_steps: int
    largest: float  # its largest finite value (exact in float64)
    eps: float  # the gap between 1 and the next value
    # The type an added strategy sums it in (docs/SPEC.md §2: a half type in
    # float32, then cast back); the dtype itself otherwise.
    accumulator: str
    # The numpy type that holds its values on the host: itself, or (bfloat16,
    # which numpy lacks) float32, which holds it exactly; such a dtype is
    # rounded through torch (``impls.common.round_to_dtype``).
    host: str
    # The report's order of presentation (float32 first, the type most runs take).
    shown: int

    @property
    def in_numpy(self) -> bool:
        """Whether numpy has the type itself (not only a wider one holding it)."""
        return self.host == self.name

    @property
    def backends(self) -> tuple[str, ...]:
        """The registered backends that compute in it (each ``Backend.dtypes`` says)."""
        return tuple(name for name, backend in BACKENDS.items() if self.name in backend.dtypes)


# The dtypes the suite knows, all floating: the one home of every per-dtype
# fact (impls.registry and the config re-export DTYPES; tests check that no
# other module lists the names or keeps a table of its own).
DTYPE_RECORDS = (
    Dtype("float16", 2, rel_tol=1e-2, wrong_rel_err=5e-2, subnormal_unit=2.0**-24, subnormal_steps=2**10,
          largest=65504.0, eps=2.0**-10, accumulator="float32", host="float16", shown=1),
    Dtype("bfloat16", 2, rel_tol=1e-2, wrong_rel_err=5e-2, subnormal_unit=2.0**-133, subnormal_steps=2**7,
          largest=(2 - 2.0**-7) * 2.0**127, eps=2.0**-7, accumulator="float32", host="float32", shown=2),
    Dtype("float32", 4, rel_tol=1e-5, wrong_rel_err=1e-2, subnormal_unit=2.0**-149, subnormal_steps=2**23,
          largest=(2 - 2.0**-23) * 2.0**127, eps=2.0**-23, accumulator="float32", host="float32", shown=0),
    Dtype("float64", 8, rel_tol=1e-12, wrong_rel_err=1e-4, subnormal_unit=2.0**-1074, subnormal_steps=2**52,
          largest=float(np.finfo(np.float64).max), eps=2.0**-52, accumulator="float64", host="float64", shown=3),
)
DTYPE: dict[str, Dtype] = {record.name: record for record in DTYPE_RECORDS}
DTYPES = tuple(DTYPE)
# The two-byte types, whose sums an added strategy takes in float32 (``Dtype.accumulator``).
HALF_DTYPES = tuple(record.name for record in DTYPE_RECORDS if record.itemsize == 2)
LAYOUTS = ("contiguous", "noncontiguous", "channels_last")  # what the check feeds
# What a timed case may be given (a config's ``layouts:``, docs/SPEC.md §2): how networks hold their
# tensors. Strided views are a check's adversarial input, not a way anyone stores one.
CASE_LAYOUTS = ("contiguous", "channels_last")


def layout_reorders(shape: tuple[int, ...], layout: str) -> bool:
    """Whether ``layout`` puts an array of ``shape`` in another memory order than contiguous, the one
    rule for the check (``applied_layout``), the config and the sweep (``Operator.layout_changes``):
    channels-last reorders a 4-D array with more than one channel and more than one pixel; on any
    other array (one channel, one pixel, not 4-D) it is contiguous under another name. A strided view
    (noncontiguous) always reorders."""
    if layout == "channels_last":
        return len(shape) == 4 and shape[1] > 1 and shape[2] * shape[3] > 1
    return layout != "contiguous"


def itemsize(dtype: str) -> int:
    return dtype_record(dtype).itemsize


def dtype_record(name: str) -> Dtype:
    """The record of the dtype named ``name``; an unknown name is a one-line error."""
    try:
        return DTYPE[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(DTYPES)}") from None


@dataclass(frozen=True)
class ThreadKnob:
    """How many threads a backend computes with.

    ``set(n)`` asks for ``n`` threads from now on; ``get()`` reads back what is
    in force (None where that cannot be known). Knobs are set in ascending
    ``order``, and only then read back, because setting one library's pool can
    reset another's: ``why`` says why this knob sits where it does. A config's
    ``threads`` is keyed by backend name; the run records what ``get`` read."""

    set: Callable[[int], None]
    get: Callable[[], int | None]
    order: int
    why: str = ""


class NotApplicable(Exception):
    """Raised by a strategy's ``prepare`` (or by the conversion of its inputs)
    when it cannot run this case by design: the case is recorded as
    ``skipped`` with the message, not as an error."""


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


def _cpu_only(device: str) -> bool:
    return device == "cpu"


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
    # device -> whether this machine has it (device discovery: "cuda" needs a GPU)
    present: Callable[[str], bool] = _cpu_only
    # device -> what a run records about it (name, memory, ...), or None
    device_info: Callable[[str], dict | None] = lambda device: None
    # The threads it computes with; None where it has no pool of its own.
    threads: ThreadKnob | None = None
    # Waits until every call queued on ``device`` has finished. A timer that
    # reads the host clock calls it after each call, so an asynchronous
    # backend is timed to completion, not to dispatch.
    synchronize: Callable[[str], None] = _no_sync
    # output -> waits until that one call's output is computed, for a library
    # whose device queue cannot be waited on as a whole (JAX's
    # block_until_ready); every timer calls it after the call, before synchronize.
    block_until_ready: Callable[[Any], Any] | None = None
    # device -> DeviceEvents, or None where only the host clock can time it
    events: Callable[[str], DeviceEvents | None] = lambda device: None
    # device -> a callable that evicts the device's last-level cache, or None
    cache_flush: Callable[[str], Callable[[], None] | None] = lambda device: None
    # (device, seconds) -> queues device work that keeps the device busy for
    # about ``seconds``, so the host can launch the timed call before the
    # device reaches it (see harness/measuring/timing.py). None where there is no queue.
    device_delay: Callable[[str, float], None] | None = None
    # (device, nbytes) -> a zero-argument call copying nbytes between two of
    # its buffers on the device, or None: the copy ceiling times it with this
    # backend's own timer. None where it cannot copy (or should not set it).
    copy: Callable[[str, int], Callable[[], Any] | None] | None = None
    # nbytes -> a freshly allocated CPU float32 buffer from this library's own
    # allocator, never touched (a numpy array or a torch tensor): the sweep
    # times writing into it (``fresh_write_gbps``), the first-touch cost an
    # output this library allocates pays. None where it allocates no CPU arrays.
    fresh_buffer: Callable[[int], Any] | None = None
    # (fn, device) -> (fn's output, bytes it needed at peak), or None: the
    # harness then uses the process's resident-set high-water mark.
    peak_memory: Callable[[Callable[[], Any], str], tuple[Any, float]] | None = None
    # device -> free bytes, or None: the harness then asks the OS.
    free_bytes: Callable[[str], int] | None = None
    is_oom: Callable[[BaseException], bool] = _never_oom
    # (destination, source) -> None: copies a native array into another of its shape and dtype,
    # whatever either's layout (numpy's copyto; torch's copy_, out of autograd's sight). The timed
    # call of a strategy handed a layout it takes natively starts with it (``Strategy.native_layouts``).
    copy_into: Callable[[Any, Any], None] = lambda destination, source: np.copyto(destination, source)
    release_memory: Callable[[str], None] = _no_sync
    # Devices this backend reaches only through an interpreter, for
    # correctness checks, never for timing (Triton on the CPU).
    interpreted: Callable[[str], bool] = lambda device: False
    # Whether each new shape costs a compile (numba, Triton, PyTensor, JAX):
    # the test suite marks such strategies' checks slow.
    compiles: bool = False
    # The version reports show (None: the installed distribution's version,
    # read without importing the library).
    version: Callable[[], str | None] | None = None
    distribution: str = ""  # its distribution's name where it is not ``module``
    # Counting (``run --instrument callgrind``): whether counts record this
    # library's version among what they depend on (``count_versions``; a
    # stored counts baseline is taken only with the same set).
    counts_version: bool = False
    # (LLVM's name for a CPU, its features) -> the environment that pins this
    # library's LLVM target to that CPU, or None where it compiles with no
    # LLVM cache. Counting pins it to the CPU valgrind emulates, so kernels
    # cached by the warm-up pass are found under Callgrind, not compiled again.
    llvm_target_env: Callable[[str, str], dict] | None = None
    # How its strategies differentiate with no code of their own (docs/SPEC.md §1.5,
    # impls/training.py): "autograd" (torch), "jax.vjp" (JAX); "" where a
    # strategy must declare an explicit backward or has none.
    differentiates: str = ""
    # directory -> keeps the kernels this library compiles on disk in
    # ``directory`` from now on, for later processes to load instead of
    # compiling again (set before the first compile; a user's own setting
    # wins). None where it keeps none, or keeps them by itself (numba's
    # cache=True kernels beside their source, PyTensor's ~/.pytensor).
    compile_cache: Callable[[str], None] | None = None
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

    def wait(self, device: str, output: Any = None) -> None:
        """Until ``output`` (a call's result) and all work queued on ``device`` are done."""
        if output is not None and self.block_until_ready is not None:
            self.block_until_ready(output)
        self.synchronize(device)

    def version_text(self) -> str | None:
        """What reports show as this backend's version; None when not installed."""
        if self.unavailable():
            return None
        if self.version is not None:
            return self.version()
        from importlib import metadata

        try:
            return metadata.version(self.distribution or self.module)
        except metadata.PackageNotFoundError:
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


def devices() -> tuple[str, ...]:
    """Every device some registered backend runs on, in registration order
    (the CPU first): what a config, ``list --device`` and the report know."""
    return tuple(dict.fromkeys(device for backend in BACKENDS.values() for device in backend.devices))


def device_present(device: str) -> bool:
    """Whether this machine has ``device``: asked of each installed backend
    that runs on it."""
    return any(device in b.devices and not b.unavailable() and b.present(device) for b in BACKENDS.values())


def torch_device(device: str) -> bool:
    """Whether torch has ``device`` as a device type (cpu, cuda, xpu, mps...):
    what the suite's torch-side tools (the device judge, the bandwidth
    curves) can run on; a plugin backend's own device (a toy one) is not."""
    import torch

    try:
        torch.device(device)
    except (RuntimeError, ValueError):
        return False
    return True


def device_info(device: str) -> dict | None:
    """What the first installed backend that can tell says about ``device``."""
    for backend in BACKENDS.values():
        if device in backend.devices and not backend.unavailable() and backend.present(device):
            info = backend.device_info(device)
            if info:
                return info
    return None


def thread_knobs() -> list[Backend]:
    """Backends with a threads knob, in the order their knobs are set."""
    return sorted((b for b in BACKENDS.values() if b.threads is not None), key=lambda b: b.threads.order)


# Config keys of the suite before threads were keyed by backend.
LEGACY_THREAD_KEYS = {"blas": "numpy"}


def threads_text(threads: Mapping | None) -> str:
    """``numba 2, numpy 2, torch 2``: each backend's threads as a run
    recorded them, in setting order (None: the library's default); older
    runs' ``blas`` is numpy's. For reports."""
    if not isinstance(threads, Mapping) or not threads:
        return "–"
    named = {LEGACY_THREAD_KEYS.get(key, key): value for key, value in threads.items()}
    order = [b.name for b in thread_knobs()]
    pools = sorted(named, key=lambda pool: (order.index(pool) if pool in order else len(order), pool))
    return ", ".join(f"{pool} {named[pool] if named[pool] is not None else 'default'}" for pool in pools)


def versions() -> dict[str, str | None]:
    """Each registered backend's version as reports show it (None: not installed)."""
    return {name: backend.version_text() for name, backend in BACKENDS.items()}


# ------------------------------------------------------------------ conversion
def convert(inputs: dict, backend: Backend, device: str, dtype: str, layout: str = "contiguous",
            layout_keys: tuple[str, ...] = ()) -> dict:
    """Float arrays to ``dtype`` on the backend's device, integer arrays to
    int64; ``layout`` applies to the arrays named in ``layout_keys`` (the big
    ones), and channels-last only to 4-D arrays of a backend that has it."""
    if dtype not in backend.dtypes:
        raise TypeError(f"{backend.name} has no {dtype}")
    if not backend.present(device):
        # installed, but not for this device (a CPU-only JAX on a GPU machine)
        raise NotApplicable(f"backend {backend.name!r} finds no {device} device here")
    converted: dict[str, Any] = {}
    for key, value in inputs.items():
        if not isinstance(value, np.ndarray):
            converted[key] = value
            continue
        this_layout = applied_layout(value, layout, backend) if key in layout_keys else "contiguous"
        converted[key] = backend.to_native(value, device, dtype, this_layout)
    return converted


def applied_layout(array: np.ndarray, layout: str, backend: Backend) -> str:
    """The layout ``convert`` gives ``array`` when asked for ``layout``:
    channels-last only where it reorders the array (``layout_reorders``) and
    the backend has it, contiguous otherwise."""
    if layout == "channels_last" and (not layout_reorders(array.shape, layout)
                                      or "channels_last" not in backend.layouts):
        return "contiguous"
    return layout


def float_dtypes(output: Any) -> list[str]:
    """The dtype names of a strategy's floating outputs as the strategy made
    them, before ``to_numpy`` widens bfloat16 to float32 (which would let a
    float32 result pass as bfloat16)."""
    if isinstance(output, (tuple, list)):
        return [name for item in output for name in float_dtypes(item)]
    # "torch.float32", a numpy or JAX dtype's "float32": the name after the module
    name = str(getattr(output, "dtype", "")).rsplit(".", 1)[-1]
    return [name] if name in DTYPES else []  # every dtype the suite knows is a float


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
    if layout == "noncontiguous":
        return _spread(converted)
    if layout == "channels_last" and converted.ndim == 4:  # (N, C, H, W) held N, H, W, C in memory
        return np.ascontiguousarray(converted.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(converted)


def _is_numpy(value: Any) -> bool:
    return isinstance(value, np.ndarray)


def _blas_set(count: int) -> None:
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=count)


def _blas_get() -> int | None:
    from threadpoolctl import threadpool_info

    counts = [pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"]
    return max(counts) if counts else None


# numpy's BLAS and the OpenMP pools loaded in the process (threadpoolctl).
NUMPY_THREADS = ThreadKnob(_blas_set, _blas_get, order=20, why=(
    "after numba's (starting numba's threading layer resets the OpenMP runtime), before torch's "
    "(threadpoolctl limits every OpenMP pool loaded, torch's included)"))


def _numba_set(count: int) -> None:
    import numba

    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))


def _numba_get() -> int | None:
    import numba

    return numba.get_num_threads()


NUMBA_THREADS = ThreadKnob(_numba_set, _numba_get, order=10, why=(
    "first: starting numba's threading layer resets the OpenMP runtime torch shares; set after torch's, "
    "torch.get_num_threads() went from 1 back to 2 and a 100 µs torch call waited 20-40 ms at OpenMP "
    "barriers on a loaded machine"))


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
    name = str(tensor.dtype).removeprefix("torch.")
    if name in DTYPE and not DTYPE[name].in_numpy:
        tensor = tensor.to(getattr(torch, DTYPE[name].host))
    return tensor.numpy()


def _is_torch(value: Any) -> bool:
    # Without importing torch: only a process that made a tensor has it loaded.
    import sys

    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _torch_present(device: str) -> bool:
    if device == "cpu":
        return True
    import torch

    return device == "cuda" and torch.cuda.is_available()


def _torch_device_info(device: str) -> dict | None:
    if device != "cuda":
        return None
    import torch

    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_bytes": int(props.total_memory), "sm_count": props.multi_processor_count,
            "capability": f"{props.major}.{props.minor}", "cuda_version": torch.version.cuda}


def _torch_threads_set(count: int) -> None:
    import torch

    torch.set_num_threads(count)
    if torch.get_num_threads() != count:
        raise RuntimeError(f"threads.torch: asked for {count}, torch runs {torch.get_num_threads()}")


def _torch_threads_get() -> int:
    import torch

    return torch.get_num_threads()


TORCH_THREADS = ThreadKnob(_torch_threads_set, _torch_threads_get, order=30, why=(
    "last: numba's and threadpoolctl's settings reset or limit the OpenMP pool torch computes with"))


def _torch_copy(device: str, nbytes: int):
    import torch

    src = torch.ones(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # the pages of dst are touched once
    # torch's copy_ uses every thread torch may use, like the strategies
    return lambda: dst.copy_(src)


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
    # What torch's caching allocator holds but no tensor uses (a freed float64
    # reference, a previous case's outputs) is free to this process too.
    return int(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())


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
    common = dict(to_native=_torch_to_native, to_numpy=_torch_to_numpy, owns=_is_torch, present=_torch_present,
                  synchronize=_torch_sync, events=_torch_events, cache_flush=_torch_cache_flush,
                  device_delay=_torch_device_delay, peak_memory=_torch_peak_memory,
                  free_bytes=_torch_free_bytes, is_oom=_torch_is_oom, release_memory=_torch_release,
                  copy_into=_torch_copy_into)
    common.update(fields)
    return common


def _torch_copy_into(destination, source) -> None:
    import torch

    with torch.no_grad():  # a leaf autograd differentiates may share the destination's storage
        destination.copy_(source)


def _torch_fresh_buffer(nbytes: int):
    import torch

    return torch.empty(nbytes // 4, dtype=torch.float32)


def _torch_compile_cache(directory: str) -> None:
    # torch 2.13's Inductor keeps compiled graphs by default (fx_graph_cache),
    # under /tmp/torchinductor_<user>: here under the suite's cache, kept and
    # cleared with it. Read when Inductor first needs it: may follow the import.
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", directory)
    os.environ.setdefault("TORCHINDUCTOR_FX_GRAPH_CACHE", "1")
    os.environ.setdefault("TORCHINDUCTOR_AUTOGRAD_CACHE", "1")  # AOTAutograd's: the compiled backwards


def _triton_compile_cache(directory: str) -> None:
    # Triton keeps its compiled kernels under ~/.triton/cache unless told;
    # TRITON_CACHE_DIR is read at each compile (triton.knobs), so setting it
    # after the import holds too.
    os.environ.setdefault("TRITON_CACHE_DIR", directory)


def fresh_allocators() -> tuple[str, ...]:
    """The installed backends with an allocator of their own for CPU outputs
    (``Backend.fresh_buffer``): each one's first-touch cost is measured."""
    return tuple(b.name for b in BACKENDS.values() if b.fresh_buffer is not None and not b.unavailable())


register_backend(Backend(
    name="numpy", module="numpy", devices=("cpu",), dtypes=("float16", "float32", "float64"),
    layouts=LAYOUTS, to_native=_numpy_to_native, to_numpy=np.asarray, owns=_is_numpy,
    threads=NUMPY_THREADS, counts_version=True, colour="#4c72b0",
    # np.empty asks for transparent huge pages; torch.empty does not by default.
    fresh_buffer=lambda nbytes: np.empty(nbytes // 4, dtype=np.float32)))
# torch's copy_ sets the copy ceiling on the CPU and on CUDA (timed by its events there).
register_backend(Backend(
    name="torch", module="torch", devices=("cpu", "cuda"), dtypes=DTYPES, layouts=LAYOUTS,
    device_info=_torch_device_info, threads=TORCH_THREADS, copy=_torch_copy, counts_version=True, colour="#dd8452",
    fresh_buffer=_torch_fresh_buffer, differentiates="autograd", compile_cache=_torch_compile_cache,
    **_with_torch()))
# Triton's kernels take torch tensors and run in torch's streams: torch's timer, no threads of its own.
register_backend(Backend(
    name="triton", module="triton", devices=("cuda",), dtypes=("float16", "bfloat16", "float32"),
    layouts=LAYOUTS, interpreted=_triton_interpreted, compiles=True, colour="#55a868", extra="triton",
    compile_cache=_triton_compile_cache, **_with_torch()))
def _numba_llvm_target_env(cpu_name: str, cpu_features: str) -> dict:
    return {"NUMBA_CPU_NAME": cpu_name, "NUMBA_CPU_FEATURES": cpu_features}


# numba and PyTensor compile for real types on the CPU and take numpy arrays
# (PyTensor's C code calls numpy's BLAS: numpy's knob covers it).
register_backend(Backend(
    name="numba", module="numba", devices=("cpu",), dtypes=("float32", "float64"), layouts=LAYOUTS,
    to_native=_numpy_to_native, to_numpy=np.asarray, owns=lambda value: False, threads=NUMBA_THREADS,
    compiles=True, counts_version=True, llvm_target_env=_numba_llvm_target_env, colour="#8172b3", extra="numba"))
register_backend(Backend(
    name="pytensor", module="pytensor", devices=("cpu",), dtypes=("float32", "float64"), layouts=LAYOUTS[:2],
    to_native=_numpy_to_native, to_numpy=np.asarray, owns=lambda value: False, compiles=True, colour="#937860",
    extra="pytensor"))

# ------------------------------------------------------------------------- jax
# JAX sizes its CPU thread pool once, when it first creates its XLA clients
# (on first use, not on import), from the NPROC environment variable or else
# the CPUs this process may run on (XLA's DefaultThreadPoolSize): measured
# here, NPROC=1 ran a jitted elementwise call in 0.97 s wall / 0.96 s CPU,
# NPROC=2 in 0.51 s wall / 0.96 s CPU. So the knob sets NPROC while the
# clients do not exist yet; afterwards it cannot change the pool, leaves
# NPROC as it was, and reads back the count the pool was made with.
JAX_PLATFORMS = {"cpu": "cpu", "cuda": "gpu"}  # the suite's device -> JAX's platform
_JAX_POOL: dict[str, int] = {}


def _jax():
    """jax, with the suite's settings made before its first use: float64 on
    (x64: the float64 cases need it; every conversion names its dtype, so
    float32 stays float32), and no GPU memory preallocation (torch shares the
    device). Records the CPU pool size the clients are made with."""
    import sys

    if "jax" not in sys.modules:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    jax.config.update("jax_enable_x64", True)
    if not _jax_started():
        _JAX_POOL["threads"] = _jax_pool_size()
    return jax


def _jax_started() -> bool:
    import sys

    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(bridge is not None and getattr(bridge, "_backends", None))


def _jax_pool_size() -> int:
    nproc = os.environ.get("NPROC", "")
    return int(nproc) if nproc.isdigit() else len(os.sched_getaffinity(0))


def _jax_threads_set(count: int) -> None:
    if not _jax_started():
        os.environ["NPROC"] = str(count)


def _jax_threads_get() -> int:
    return _JAX_POOL["threads"] if _jax_started() and "threads" in _JAX_POOL else _jax_pool_size()


JAX_THREADS = ThreadKnob(_jax_threads_set, _jax_threads_get, order=0, why=(
    "first, and before JAX's first use: its pool is sized once, from NPROC, when its clients are made"))


def _jax_device(device: str):
    jax = _jax()
    return jax.devices(JAX_PLATFORMS[device])[0]


def _jax_present(device: str) -> bool:
    if device == "cpu":
        return True
    # Asking JAX would start its clients (and fix its thread pool): only where a CUDA plugin is installed.
    if not any(importlib.util.find_spec(name) for name in ("jax_cuda12_plugin", "jax_cuda13_plugin")):
        return False
    try:
        return bool(_jax().devices(JAX_PLATFORMS[device]))
    except RuntimeError:
        return False


def _jax_to_native(array: np.ndarray, device: str, dtype: str, layout: str):
    jax = _jax()
    import jax.numpy as jnp

    # JAX arrays have no strides: every layout arrives contiguous (the record offers no other).
    target = getattr(jnp, dtype) if array.dtype.kind == "f" else jnp.int64
    return jax.device_put(jnp.asarray(np.ascontiguousarray(array), dtype=target), _jax_device(device))


def _jax_to_numpy(array) -> np.ndarray:
    out = np.asarray(array)
    name = out.dtype.name
    return out.astype(DTYPE[name].host) if name in DTYPE and not DTYPE[name].in_numpy else out


def _is_jax(value: Any) -> bool:
    import sys

    jax = sys.modules.get("jax")
    return jax is not None and isinstance(value, jax.Array)


def _jax_block(output) -> None:
    _jax().block_until_ready(output)


def _jax_is_oom(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or "RESOURCE_EXHAUSTED" in str(error)


def _jax_version() -> str | None:
    from importlib import metadata

    try:
        return f"{metadata.version('jax')} (jaxlib {metadata.version('jaxlib')})"
    except metadata.PackageNotFoundError:
        return None


class JaxCall:
    """A jitted function with its arguments: calling it runs ``jitted(*args)``.
    It keeps ``fn``, ``args`` and ``static_argnums`` so that the training
    modes can differentiate the same function by ``jax.vjp`` (impls/training.py)
    with no code in the strategy: with respect to its first argument, which
    is therefore the operator's differentiated input (reshaped at most)."""

    __slots__ = ("jitted", "fn", "args", "static_argnums")

    def __init__(self, jitted, fn, args: tuple, static_argnums: tuple):
        self.jitted, self.fn, self.args, self.static_argnums = jitted, fn, args, static_argnums

    def __call__(self):
        return self.jitted(*self.args)


def jax_compiled(fn, *args, static_argnums=()):
    """``jax.jit(fn)`` compiled (once per shape) and run once for these arguments now (setup,
    outside the timed region), and a zero-argument call of it (a ``JaxCall``).
    The call returns as soon as XLA has queued the work; the timer waits for
    its output (``block_until_ready``). ``fn`` takes the operator's
    differentiated input first (see ``JaxCall``)."""
    jax = _jax()
    static = tuple(static_argnums) if isinstance(static_argnums, (tuple, list)) else (static_argnums,)
    jitted = _jax_jit(fn, static)
    jax.block_until_ready(jitted(*args))
    return JaxCall(jitted, fn, args, static)


@functools.lru_cache(maxsize=None)
def _jax_jit(fn, static_argnums: tuple):
    # One jit per function: XLA's cache then compiles a shape once (the check
    # draws random and adversarial inputs of the same shapes).
    return _jax().jit(fn, static_argnums=static_argnums)


# JAX keeps no compiled program unless given a folder; its thresholds (1 s of
# compiling) would leave out every kernel of this suite's sizes.
JAX_COMPILE_CACHE = {"JAX_COMPILATION_CACHE_DIR": None, "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": 0,
                     "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": -1}


def _jax_compile_cache(directory: str) -> None:
    if os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return  # the user's own cache, with the user's thresholds
    settings = {**JAX_COMPILE_CACHE, "JAX_COMPILATION_CACHE_DIR": directory}
    os.environ.update({name: str(value) for name, value in settings.items()})  # read when jax is imported
    jax = sys.modules.get("jax")
    if jax is not None and jax.config.jax_compilation_cache_dir is None:  # imported already: its config
        for name, value in settings.items():
            jax.config.update(name.lower(), value)


# No copy of its own: torch's copy_ sets the ceiling on the devices JAX shares
# with it (a jitted jnp.copy of 64 MiB reached 3.8 GB/s here against torch's
# 8.4), and every run's ceiling child would import JAX for nothing.
register_backend(Backend(
    name="jax", module="jax", devices=("cpu", "cuda"), dtypes=DTYPES, layouts=("contiguous",),
    to_native=_jax_to_native, to_numpy=_jax_to_numpy, owns=_is_jax, present=_jax_present, threads=JAX_THREADS,
    block_until_ready=_jax_block, is_oom=_jax_is_oom, compiles=True, version=_jax_version,
    differentiates="jax.vjp", compile_cache=_jax_compile_cache, colour="#c44e52", extra="jax"))

__all__ = ["Backend", "BACKENDS", "DTYPE", "DTYPE_RECORDS", "DTYPES", "Dtype", "HALF_DTYPES", "LAYOUTS", "DeviceEvents", "JaxCall", "NotApplicable", "ThreadKnob",
           "backend_of", "convert", "device_info", "device_present", "devices", "float_dtypes", "dtype_record", "get_backend", "itemsize",
           "register_backend", "thread_knobs", "threads_text", "to_numpy", "versions"]
