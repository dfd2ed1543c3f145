"""Known upstream defects (docs/SPEC.md §2, "Upstream defects").

Where a library's own code breaks the contract, the suite keeps reporting it:
the check's verdict becomes ``upstream-defect`` instead of ``mismatch``, with
the defect named in its message, and it does not fail the run's exit status.
A defect excuses a mismatch only when everything about it fits the record:
the strategy, the installed library version, the device, dtype, layout and
mode, and *every* kind of difference the comparison found (``Verdict.
differences``). Any other difference in the same output, or a mismatch of the
same strategy elsewhere, still fails.

Add a record here only with a reproduction that shows the library itself
(not our call of it) breaking the contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

from impls import common
from impls.dispersion_pinv import subnormal_mask_mode
from impls.status import MISMATCH


@dataclass(frozen=True)
class Condition:
    """Where a defect shows. Empty tuples mean any."""

    differences: frozenset  # every difference of the mismatch is one of these kinds (impls.common)
    devices: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ()
    layouts: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()  # the input generator's modes
    training_modes: tuple[str, ...] = ()  # SPEC 1.5's: forward, backward, forward+backward

    def holds(self, differences, *, device: str, dtype: str, layout: str, mode: str,
              training_mode: str = "forward") -> bool:
        return (bool(differences) and set(differences) <= set(self.differences)
                and all(not allowed or value in allowed
                        for allowed, value in ((self.devices, device), (self.dtypes, dtype),
                                               (self.layouts, layout), (self.modes, mode),
                                               (self.training_modes, training_mode))))

    def __str__(self) -> str:
        parts = [f"{name} in {', '.join(allowed)}" for name, allowed in
                 (("device", self.devices), ("dtype", self.dtypes), ("layout", self.layouts),
                  ("mode", self.modes), ("training mode", self.training_modes)) if allowed]
        parts.append("every difference is " + " or ".join(sorted(self.differences)))
        return "; ".join(parts)


DEFECT, DOCUMENTED = "defect", "documented behaviour"


@dataclass(frozen=True)
class KnownDefect:
    id: str
    strategy: str  # "op/name"
    library: str  # distribution name, as importlib.metadata knows it
    versions: str  # PEP 440 specifier set of the affected versions ("" = every version)
    condition: Condition
    description: str  # one line
    reproduction: str  # a minimal snippet that shows it
    reference: str = ""  # upstream issue or source line, where known
    # DEFECT, or DOCUMENTED where the library documents the behaviour (or its
    # maintainers closed the report as intended): listed apart in the report.
    kind: str = DEFECT
    seen: str = ""  # the versions it was measured with ("numpy 2.4.6"): the report prints these, not ``versions``


    def affects(self, version: str | None) -> bool:
        if version is None:
            return False
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            return SpecifierSet(self.versions).contains(Version(version), prereleases=True)
        except InvalidVersion:
            return False

    def summary(self, version: str | None = None) -> str:
        installed = f" {version}" if version else ""
        return f"known upstream defect {self.id} ({self.library}{installed}): {self.description}"


_NUMPY_MAX_ZERO_SIGN = """\
import numpy as np
window = np.array([[-0.0, 0.0], [-1.0, -1.0]], dtype=np.float32)
print(window.max())                       # 0.0: the later zero's sign
print(window.flat[window.argmax()])       # -0.0: the first maximum, as docs/SPEC.md §1.1 asks
"""

_TORCH_CUDA_NHWC_NEG_INF = """\
import torch, torch.nn.functional as F
x = torch.zeros(1, 1, 4, 4, device="cuda")
x[..., 2:, 2:] = float("-inf")           # the window at (1, 1) is all -inf
for fmt in (torch.contiguous_format, torch.channels_last):
    v, i = F.max_pool2d(x.contiguous(memory_format=fmt), 2, return_indices=True)
    print(fmt, i[0, 0, 1, 1].item())     # contiguous: 10; channels_last: 0 (outside the window)
"""

_JAX_CPU_FLUSHES_SUBNORMALS = """\
import numpy as np, jax
y, mask = np.float32(1.0), np.float32(2.0**-127)  # a subnormal mask entry: not zero
print(y / mask)                                   # 1.7014118e+38
print(jax.jit(lambda y, m: y / m)(y, mask))        # inf: XLA's CPU backend reads the mask as 0
"""

_JAX_CPU_MAXPOOL_BACKWARD_FLUSHES = """\
import numpy as np, jax, jax.numpy as jnp
x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
g = np.full((1, 1, 2, 2), 2.0**-130, dtype=np.float32)  # float32 subnormals
def pool(x):  # 2x2 max-pool as the seed's reshape-argmax: a gather at each window's argmax
    w = x.reshape(1, 1, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(1, 1, 2, 2, 4)
    return jnp.take_along_axis(w, jnp.argmax(w, axis=-1)[..., None], axis=-1)[..., 0]
print(jax.vjp(pool, x)[1](g)[0][0, 0])  # all zeros: 2**-130 expected at each window's maximum
"""

_TRITON_INTERPRETER_BF16_SUBNORMALS = """\
import os; os.environ["TRITON_INTERPRET"] = "1"
import torch, triton, triton.language as tl

@triton.jit
def widen(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    tl.store(out_ptr + i, tl.load(x_ptr + i, mask=i < n).to(tl.float32), mask=i < n)

x = torch.tensor([1.0e-39, -2.8e-40, 9.2e-41, 1.0], dtype=torch.bfloat16)
out = torch.empty(4, dtype=torch.float32)
widen[(1,)](x, out, 4, BLOCK=4)
print(x.float().tolist())  # [1.0102e-39, -2.7551e-40, 9.1835e-41, 1.0]: exact
print(out.tolist())        # [4.4081e-39, -5.8775e-39, 0.0, 1.0]: the interpreter's
"""

_TORCH_CUDA_ATOMIC_ADD_FLUSHES = """\
import torch
grad = torch.tensor([2.0**-130, -(2.0**-126 - 2.0**-149), 1.0], device="cuda")  # two float32 subnormals
out = torch.zeros(3, device="cuda").scatter_add_(0, torch.arange(3, device="cuda"), grad)  # gather's backward
print(grad.tolist())  # [7.3e-40, -1.1754942e-38, 1.0]
print(out.tolist())   # [0.0, -0.0, 1.0]: atom.add.f32 flushes subnormal inputs and results
"""

_JAX_CUDA_ATOMIC_ADD_FLUSHES = """\
import jax, jax.numpy as jnp
grad = jnp.array([2.0**-130, -(2.0**-126 - 2.0**-149), 1.0], dtype=jnp.float32)  # on the GPU: two subnormals
print(jax.jit(lambda g: jnp.zeros(3, jnp.float32).at[jnp.arange(3)].add(g))(grad))  # [0. -0. 1.]: a scatter-add
"""

# The modes whose inputs hold a subnormal mask in the dtypes JAX divides in
# (dispersion_pinv's jax strategies divide the half types in float32, where a
# float16 subnormal is a normal number).
_JAX_FLUSHED_DTYPES = ("float32", "bfloat16", "float64")

# The max-pools whose backward is a scatter-add at each window's argmax (autograd's
# scatter_add, Inductor's atomic_add, XLA's scatter), which CUDA runs as float32 atomic adds.
_SCATTER_ADD_BACKWARDS = (
    ("torch-cuda-float32-atomic-add-flushes-subnormals", "torch", "torch 2.11.0+cu130", _TORCH_CUDA_ATOMIC_ADD_FLUSHES,
     ("maxpool2d/torch_reshape_argmax", "maxpool2d/torch_compile_reshape_argmax")),
    ("jax-cuda-float32-atomic-add-flushes-subnormals", "jaxlib", "jax 0.11.2", _JAX_CUDA_ATOMIC_ADD_FLUSHES,
     ("maxpool2d/jax_reshape_argmax",)))

DEFECTS: tuple[KnownDefect, ...] = tuple(
    KnownDefect(
        id="numpy-max-zero-sign", strategy=key, library="numpy", versions=">=1.0",
        condition=Condition(differences=frozenset({common.ZERO_SIGN})),
        description="ndarray.max keeps no particular one of equal elements: over -0.0 and +0.0 "
                    "(SIMD float32/float64 loops) it returns the later zero's sign, not the first maximum's",
        reproduction=_NUMPY_MAX_ZERO_SIGN,
        reference="numpy documents NaN propagation for max, no rule for which of equal elements it returns "
                  "(numpy.maximum, numpy.amax reference pages)",
        kind=DOCUMENTED, seen="numpy 2.4.6")
    for key in ("maxpool2d/seed_loops", "maxpool2d/seed_loop_max", "maxpool2d/seed_reshape_max")
) + tuple(
    KnownDefect(
        id="torch-cuda-nhwc-maxpool-neg-inf-index", strategy=key, library="torch", versions=">=1.0",
        condition=Condition(differences=frozenset({common.NEG_INF_WINDOW_INDEX_0, common.NEG_INF_WINDOW_GRAD_0}),
                            devices=("cuda",), layouts=("channels_last",)),
        description="on CUDA, max_pool2d(return_indices=True) on a channels-last tensor returns index 0 "
                    "for a window of all -inf (outside the window), and its backward sends that window's "
                    "gradient there; contiguous tensors and the CPU are right",
        reproduction=_TORCH_CUDA_NHWC_NEG_INF,
        reference="aten/src/ATen/native/cuda/DilatedMaxPool2d.cu, the NHWC forward kernel; the backward "
                  "seen on an H200 (results/20261126T045242-vm-gpu-1067)", seen="torch 2.11.0+cu130")
    # torch_max_pool2d returns the values only, but autograd saves the same indices
    for key in ("maxpool2d/torch_max_pool2d_indices", "maxpool2d/torch_max_pool2d")
) + tuple(
    KnownDefect(
        id=defect_id, strategy=key, library=library, versions=">=0",
        condition=Condition(differences=frozenset({common.FLUSHED_SUBNORMAL}), devices=("cuda",),
                            dtypes=("float32",), training_modes=("backward", "forward+backward")),
        description="the backward is a scatter-add, which CUDA runs as float32 atomic adds, and atom.add.f32 "
                    "flushes subnormal inputs and results to zero: a subnormal incoming gradient comes back "
                    "0.0; normal gradients, float16 and the CPU are exact",
        reproduction=reproduction,
        reference="PTX ISA, atom: 'atom.add.f32 rounds to nearest even and flushes subnormal inputs and "
                  "results to sign-preserving zero'; seen on an H200 by make gpu's check (2026-12-04: "
                  "9.18e-41 and -1.1754942e-38 came back 0.0 in float32, float16 passed)",
        kind=DOCUMENTED, seen=seen)
    for defect_id, library, seen, reproduction, keys in _SCATTER_ADD_BACKWARDS for key in keys
) + tuple(
    KnownDefect(
        id="jax-cpu-flushes-subnormals", strategy=key, library="jax", versions=">=0.4",
        condition=Condition(differences=frozenset({common.NON_FINITE}), devices=("cpu",),
                            dtypes=_JAX_FLUSHED_DTYPES,
                            modes=tuple(subnormal_mask_mode(dtype) for dtype in _JAX_FLUSHED_DTYPES)),
        description="XLA's CPU backend flushes subnormal inputs and results of float arithmetic to zero, "
                    "by design: dividing by a subnormal (non-zero) mask entry gives inf, or NaN for 0/0",
        reproduction=_JAX_CPU_FLUSHES_SUBNORMALS,
        reference="https://github.com/jax-ml/jax/issues/16200 (closed as intended behaviour; JAX's "
                  "\"sharp bits\" page says the CPU backend flushes denormals)", kind=DOCUMENTED, seen="jax 0.10.2")
    for key in ("dispersion_pinv/jax_gather", "dispersion_pinv/jax_conv_adjoint")
) + (
    KnownDefect(
        id="jax-cpu-maxpool-backward-flushes-subnormal-gradients", strategy="maxpool2d/jax_reshape_argmax",
        library="jaxlib", versions="==0.10.2",
        condition=Condition(differences=frozenset({common.FLUSHED_SUBNORMAL}), devices=("cpu",),
                            dtypes=_JAX_FLUSHED_DTYPES, training_modes=("backward", "forward+backward")),
        description="jax.vjp of a max-pool written as a gather at each window's argmax (take_along_axis) "
                    "returns 0 where the incoming gradient is subnormal: XLA's CPU backend flushes "
                    "subnormals in the scatter-add of the gather's transpose; normal gradients are exact",
        reproduction=_JAX_CPU_MAXPOOL_BACKWARD_FLUSHES,
        reference="measured with jax and jaxlib 0.10.2 on the CPU (float32, bfloat16 and float64; float16 "
                  "computes in float32, where its subnormals are normal); the same flush as "
                  "jax-cpu-flushes-subnormals, https://github.com/jax-ml/jax/issues/16200"),
) + (
    # Triton strategies reach the CPU only through the interpreter (CI's
    # check): compiled for a GPU, the same kernel converts exactly.
    KnownDefect(
        id="triton-interpreter-bf16-subnormal", strategy="maxpool2d/triton_fused", library="triton",
        versions=">=3.9",
        condition=Condition(differences=frozenset({common.SUBNORMAL, common.FLUSHED_SUBNORMAL,
                                                  common.SUBNORMAL_WINDOW_INDEX}),
                            devices=("cpu",), dtypes=("bfloat16",)),
        description="the interpreter (TRITON_INTERPRET=1) converts a bfloat16 subnormal to float32 wrongly "
                    "(renormalised, then clamped: 1.0e-39 becomes 4.4e-39, 9.2e-41 becomes 0), so the kernel, "
                    "which compares in float32, returns changed subnormals and picks wrong elements among them",
        reproduction=_TRITON_INTERPRETER_BF16_SUBNORMALS,
        reference="triton/runtime/interpreter.py, _convert_float", seen="triton 3.9.0 (the interpreter, CI)"),
)


@lru_cache(maxsize=None)
def installed_version(library: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(library)
    except metadata.PackageNotFoundError:
        return None


def installed_versions() -> dict[str, str | None]:
    """The installed version of every library a listed defect names."""
    return {defect.library: installed_version(defect.library) for defect in DEFECTS}


def match(strategy, verdict, *, device: str, dtype: str, layout: str, mode: str,
          versions: Mapping[str, str | None], training_mode: str = "forward") -> KnownDefect | None:
    """The listed defect that explains this mismatch, or None.

    ``strategy``: a Strategy or its key "op/name". Only a ``mismatch`` whose
    every kind of difference the defect lists can be explained, and only for
    the strategy, device, dtype, layout, input and training modes and library
    versions it names.
    """
    if verdict.status != MISMATCH or not verdict.differences:
        return None
    key = getattr(strategy, "key", strategy)
    for defect in DEFECTS:
        if (defect.strategy == key and defect.affects(versions.get(defect.library))
                and defect.condition.holds(verdict.differences, device=device, dtype=dtype,
                                           layout=layout, mode=mode, training_mode=training_mode)):
            return defect
    return None


def for_operators(ops, records=DEFECTS) -> list:
    """The defects among ``records`` of strategies of ``ops`` (what a report
    covering only those operators lists)."""
    wanted = set(ops)
    return [defect for defect in records if str(getattr(defect, "strategy", "")).split("/", 1)[0] in wanted]
