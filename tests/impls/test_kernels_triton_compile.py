"""The Triton kernels compile for the GPUs they are meant for, without one.

The interpreter (TRITON_INTERPRET=1) checks what the kernels compute but not
that they compile: it accepts Python that the compiler rejects (branches whose
two sides differ in type, methods on arguments Triton turns into constants).
Here each wrapper runs with `_launch` captured, and each captured launch is
compiled ahead of time for Hopper (sm_90, the H100/H200 the GPU sweep targets)
and Ampere (sm_80), through PTX to a cubin with the ptxas in Triton's wheel,
with the argument types, int == 1 constants and divisibility-by-16 hints that
Triton's launcher gives a real launch.

A GPU autotunes over every config in `kernels_triton.TUNING_CONFIGS`, so
every one of them is compiled for each kernel, in its int32 and its int64
(WIDE) variant, and none may spill: the cubin's stack frame must be empty.
(Spills happen in ptxas, after the PTX: a `.local` search of the PTX misses
them. cuobjdump, also in Triton's wheel, reads the frame size from the cubin,
cached or not.)

Sizes past 2**31: a launch on such sizes (captured from meta tensors, nothing
allocated) must compute every integer in 64 bits, and a small one in 32.
"""

from __future__ import annotations

import re
import subprocess

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from triton import knobs  # noqa: E402
from triton.backends.compiler import BaseBackend, GPUTarget  # noqa: E402
from triton.backends.nvidia.compiler import CUDABackend  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.autotuner import Autotuner  # noqa: E402
from triton.runtime.interpreter import InterpretedFunction  # noqa: E402
from triton.runtime.jit import JITFunction, native_specialize_impl  # noqa: E402

from impls import kernels_triton  # noqa: E402

pytestmark = pytest.mark.slow  # subprocesses, sweeps or compiles: `make test` runs them, `make test-fast` does not

HOPPER, AMPERE = GPUTarget("cuda", 90, 32), GPUTarget("cuda", 80, 32)
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
INT32_MAX = 2**31 - 1


def _capture(monkeypatch, call):
    launches = []
    monkeypatch.setattr(kernels_triton, "_launch",
                        lambda kernel, grid, *args, **constexprs: launches.append((kernel, grid, args, constexprs)))
    call()
    assert launches, "the wrapper launched nothing"
    return launches


def _jit_function(kernel) -> JITFunction:
    """The JITFunction under the autotuner. Under the interpreter @triton.jit
    gives a wrapper around the Python function, from which one is built."""
    while isinstance(kernel, Autotuner):
        kernel = kernel.fn
    return kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)


def _source(kernel, args, constexprs) -> ASTSource:
    """The ASTSource a launch with these arguments compiles, specialised as
    Triton's launcher does it (pointer and int types, ints equal to 1 made
    constants, 16-divisible pointers and ints marked so)."""
    fn = _jit_function(kernel)
    signature, constants, attrs = {}, dict(constexprs), {}
    for index, (name, value) in enumerate(zip(fn.arg_names, args)):
        if not isinstance(value, (torch.Tensor, int)) or isinstance(value, bool):
            raise TypeError(f"{name}: unexpected argument {value!r}")
        kind, attr = native_specialize_impl(BaseBackend, value, False, True, True)
        if kind == "constexpr":
            constants[name] = attr
            continue
        signature[name] = kind
        if attr:
            attrs[(index,)] = CUDABackend.parse_attr(attr)
    signature.update({name: "constexpr" for name in constants})
    return ASTSource(fn=fn, signature=signature, constexprs=constants, attrs=attrs)


def _configs(kernel, every: bool):
    """The configs to build: all a GPU may tune over, or only the first
    (enough to show a dtype or layout compiles)."""
    configs = getattr(kernel, "tuning_configs", None)
    if configs is None:  # a plain @triton.jit kernel
        return [triton.Config({})]
    return configs if every else configs[:1]


def _grid(grid, meta) -> tuple:
    return tuple(grid(meta) if callable(grid) else grid)


def _within_cuda_limits(grid: tuple) -> bool:
    return 1 <= len(grid) <= 3 and 0 < grid[0] <= INT32_MAX and all(0 < size <= 65535 for size in grid[1:])


def _stack_bytes(cubin: bytes, tmp_path) -> int:
    """The kernel's stack frame in bytes: non-zero when ptxas spilled registers."""
    path = tmp_path / "kernel.cubin"
    path.write_bytes(cubin)
    usage = subprocess.run([knobs.nvidia.cuobjdump.path, "-res-usage", str(path)],
                           capture_output=True, text=True, check=True).stdout
    frames = [int(size) for size in re.findall(r"\bSTACK:(\d+)", usage)]
    assert frames, f"no resource usage in cuobjdump's output:\n{usage}"
    return max(frames)


def _compile(kernel, args, constexprs, config, target):
    options = dict(num_warps=config.num_warps, num_stages=config.num_stages)
    # The kernels call the module's @triton.jit helpers (kernels_triton._tile);
    # under the interpreter those are InterpretedFunctions, which the compiler
    # cannot call: it compiles JITFunctions of them, put back afterwards.
    helpers = {name: value for name, value in vars(kernels_triton).items() if isinstance(value, InterpretedFunction)}
    try:
        for name, helper in helpers.items():
            setattr(kernels_triton, name, JITFunction(helper.fn))
        return triton.compile(_source(kernel, args, {**constexprs, **config.kwargs}), target=target, options=options)
    finally:
        for name, helper in helpers.items():
            setattr(kernels_triton, name, helper)


def _compile_all(launches, tmp_path, targets=(HOPPER, AMPERE), every_config=False):
    for kernel, grid, args, constexprs in launches:
        for config in _configs(kernel, every_config):
            meta = {**constexprs, **config.kwargs}
            assert _within_cuda_limits(_grid(grid, meta)), (_jit_function(kernel).__name__, config, _grid(grid, meta))
            for target in targets:
                compiled = _compile(kernel, args, constexprs, config, target)
                where = f"{_jit_function(kernel).__name__} {config} WIDE={constexprs.get('WIDE')} sm_{target.arch}"
                assert compiled.asm["cubin"], f"{where}: no cubin"
                # A kernel at the bandwidth floor keeps everything in registers.
                assert ".local" not in compiled.asm["ptx"], f"{where}: local memory in the PTX"
                assert _stack_bytes(compiled.asm["cubin"], tmp_path) == 0, f"{where}: spills to local memory"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_maxpool2d_compiles(monkeypatch, tmp_path, dtype, layout):
    x = torch.randn(2, 3, 8, 300).to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.maxpool2d(x, 2)), tmp_path)
    # ResNet's stem: overlapping windows, padded (the padding masked), and their backward's gather
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.maxpool2d(x, 3, 2, 1)), tmp_path)
    grad, indices = torch.randn(2, 3, 4, 150).to(dtype), torch.zeros(2, 3, 4, 150, dtype=torch.int64)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.maxpool2d_backward(grad, indices, x.shape, 3, 2, 1)),
                 tmp_path)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", ["1d", "2d"])
def test_maxunpool_kernels_compile(monkeypatch, tmp_path, dtype, form):
    if form == "2d":
        values, positions = torch.randn(2, 3, 4, 4).to(dtype), torch.zeros(2, 3, 4, 4, dtype=torch.int64)
        out_shape, window = (2, 3, 8, 8), (2, 2)
    else:
        values, positions = torch.randn(2, 3, 40).to(dtype), torch.zeros(2, 3, 40, dtype=torch.int64)
        out_shape, window = (2, 3, 200), (1, 5)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.unpool_gather(values, positions, out_shape, window)),
                 tmp_path)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.unpool_scatter(values, positions, out_shape)), tmp_path)
    grad_out = torch.randn(out_shape).to(dtype)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.unpool_backward(grad_out, positions, values.shape)),
                 tmp_path)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("S", [0, 1, 2])
def test_dispersion_kernels_compile(monkeypatch, tmp_path, dtype, S):
    x, mask = torch.randn(2, 5, 4, 300).to(dtype), torch.rand(4, 300).to(dtype)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.dispersion(x, mask, S)), tmp_path)
    y = torch.randn(2, 1, 4, 300 + 4 * S).to(dtype)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.dispersion_pinv(y, mask, S, 5)), tmp_path)


def _calls(size: str, dtype=torch.float16):
    """One call per kernel, on meta tensors (nothing allocated): `small`
    sizes, or `large` ones where some offset or flat index passes 2**31 (a
    maxpool/unpool plane of 2**16 x (2**15 + 2) elements, dispersion outputs
    of more than 2**31 elements)."""
    meta = dict(dtype=dtype, device="meta")
    H, W = (2**16, 2**15 + 2) if size == "large" else (64, 302)
    B, C, Hd, Wd, S = (1, 3, 2**15, 2**16, 2) if size == "large" else (2, 5, 4, 300, 2)
    x, mask = torch.empty(B, C, Hd, Wd, **meta), torch.empty(Hd, Wd, **meta)
    y = torch.empty(B, 1, Hd, Wd + (C - 1) * S, **meta)
    values = torch.empty(1, 2, H // 2, W // 2, **meta)
    positions = torch.empty(1, 2, H // 2, W // 2, dtype=torch.int64, device="meta")
    return {
        "maxpool2d": lambda: kernels_triton.maxpool2d(torch.empty(1, 2, H, W, **meta), 3),
        "maxpool2d_stem": lambda: kernels_triton.maxpool2d(torch.empty(1, 2, H, W, **meta), 3, 2, 1),
        "maxpool2d_backward": lambda: kernels_triton.maxpool2d_backward(
            torch.empty(1, 2, H // 2, W // 2, **meta), positions, (1, 2, H, W), 3, 2, 1),
        "unpool_gather": lambda: kernels_triton.unpool_gather(values, positions, (1, 2, H, W), (2, 2)),
        "unpool_scatter": lambda: kernels_triton.unpool_scatter(values, positions, (1, 2, H, W)),
        "unpool_backward": lambda: kernels_triton.unpool_backward(torch.empty(1, 2, H, W, **meta), positions,
                                                                  values.shape),
        "dispersion": lambda: kernels_triton.dispersion(x, mask, S),
        "dispersion_pinv": lambda: kernels_triton.dispersion_pinv(y, mask, S, C),
    }


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("name", list(_calls("small")))
def test_every_tuning_config_compiles_without_spills(monkeypatch, tmp_path, name, size):
    """float16, maxpool with k=3: the most registers per thread in the H100
    counters. A large launch builds the int64 variant."""
    launches = _capture(monkeypatch, _calls(size)[name])
    assert all(constexprs["WIDE"] == (size == "large") for _, _, _, constexprs in launches)
    _compile_all(launches, tmp_path, targets=(HOPPER,), every_config=True)


# An integer operation of TTIR and the integer width it works in.
INTEGER_OP = re.compile(r"= arith\.(?:addi|subi|muli|divsi|remsi|floordivsi|ceildivsi)\s.*:\s*"
                        r"(?:tensor<(?:\d+x)*)?i(32|64)\b")


def _integer_widths(kernel, args, constexprs) -> set[str]:
    ttir = _compile(kernel, args, constexprs, _configs(kernel, every=False)[0], HOPPER).asm["ttir"]
    return {match.group(1) for match in INTEGER_OP.finditer(ttir)}


@pytest.mark.parametrize("name", list(_calls("small")))
def test_large_launches_compute_indices_in_64_bits_small_ones_in_32(monkeypatch, name):
    """On sizes past 2**31 every integer addition, multiplication and division
    in the kernel is 64-bit (an int32 one could wrap: maxpool2d's flat indices
    came back negative, unpool_gather never matched positions past 2**31);
    on small sizes every one is 32-bit (no int64 arithmetic per element on
    the fast path)."""
    for size, width in (("large", "64"), ("small", "32")):
        [(kernel, _, args, constexprs)] = _capture(monkeypatch, _calls(size)[name])
        assert _integer_widths(kernel, args, constexprs) == {width}, f"{size} launch"


KERNELS = [kernels_triton._maxpool2d_kernel, kernels_triton._maxpool2d_backward_kernel,
           kernels_triton._unpool_gather_kernel, kernels_triton._unpool_scatter_kernel,
           kernels_triton._unpool_backward_kernel, kernels_triton._dispersion_kernel,
           kernels_triton._dispersion_pinv_kernel]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda kernel: _jit_function(kernel).__name__)
def test_kernels_tune_on_a_gpu_and_run_one_config_interpreted(kernel):
    """A GPU chooses among TUNING_CONFIGS; the interpreter gets the one fixed
    config (the autotuner benchmarks only when it has several), and that is
    one a GPU may choose too, so CI checks code a GPU runs."""
    assert kernel.tuning_configs == kernels_triton.TUNING_CONFIGS
    if kernels_triton.INTERPRETED:
        assert kernel.configs == [kernels_triton.INTERPRETER_CONFIG]
    else:
        assert kernel.configs == kernels_triton.TUNING_CONFIGS
    assert kernels_triton.INTERPRETER_CONFIG in kernels_triton.TUNING_CONFIGS


def test_the_capture_compiles_what_the_launch_would(monkeypatch, tmp_path):
    """The harness of this file can fail: a kernel the compiler rejects (a
    branch whose two sides differ in type) is reported."""
    import triton.language as tl

    @triton.jit
    def mistyped(out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        if n > 0:
            value = offsets.to(tl.float32)
        else:
            value = 0
        tl.store(out_ptr + offsets, value, mask=offsets < n)

    out = torch.empty(16)
    launches = _capture(monkeypatch, lambda: kernels_triton._launch(mistyped, (1,), out, 16, BLOCK=16))
    with pytest.raises(Exception):
        _compile_all(launches, tmp_path)


def test_the_spill_check_sees_a_spill(monkeypatch, tmp_path):
    """A kernel that holds more values than a thread has registers (a
    256 x 256 float32 tile and its transpose, 512 elements a thread) is
    reported as spilling, though its PTX has no `.local`."""
    import triton.language as tl

    @triton.jit
    def hoarding(x_ptr, out_ptr, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
        tile = tl.load(x_ptr + offsets)
        tl.store(out_ptr + offsets, tile + tl.trans(tile))

    x = torch.empty(256, 256)
    launches = _capture(monkeypatch, lambda: kernels_triton._launch(hoarding, (1,), x, x, BLOCK=256))
    with pytest.raises(AssertionError, match="spills to local memory"):
        _compile_all(launches, tmp_path, targets=(HOPPER,))


# --------------------------------------------- what the GPU sizes compile to
# Instructions of the PTX, predicated or not.
PTX_OP = re.compile(r"^\s+(?:@!?%p\d+\s+)?([a-z][\w.]*)", re.M)


def _ptx_ops(kernel, args, constexprs, config) -> list[str]:
    return PTX_OP.findall(_compile(kernel, args, constexprs, config, HOPPER).asm["ptx"])


def _gpu_launch(monkeypatch, call):
    [launch] = _capture(monkeypatch, call)
    return launch


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_maxpool2d_can_be_tuned_to_skip_shared_memory(monkeypatch, dtype):
    """At k=2 with 4 or more outputs a thread, Triton stages every output in
    shared memory between the strided loads and the vector stores (H100
    counters: 48-56 registers and 48 % of DRAM peak in float16, against 24-25
    and 80 % for the compiled kernel). The autotuner must have a config that
    does not: 2 outputs a thread, as torch.compile's kernel has."""
    x = torch.empty(64, 32, 128, 128, dtype=dtype, device="meta")
    kernel, _, args, constexprs = _gpu_launch(monkeypatch, lambda: kernels_triton.maxpool2d(x, 2))
    staged = {str(config): any(op.startswith(("bar.sync", "st.shared")) for op in
                               _ptx_ops(kernel, args, constexprs, config))
              for config in kernel.tuning_configs}
    assert not all(staged.values()), staged


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_dispersion_pinv_divides_nothing_per_element(monkeypatch, dtype):
    """Every x element is y times two table entries: no float division, and
    integer divisions only per row of the tile. (Coverage computed in the
    kernel cost 20 divisions a thread for 8 elements in float16, and made the
    kernel instruction-bound: 16 % of DRAM peak on an H100.)"""
    y = torch.empty(16, 1, 256, 310, dtype=dtype, device="meta")
    mask = torch.empty(256, 256, dtype=dtype, device="meta")
    kernel, _, args, constexprs = _gpu_launch(monkeypatch, lambda: kernels_triton.dispersion_pinv(y, mask, 2, 28))
    config = kernels_triton._config(1024, 128, 4)  # 8 elements a thread
    ops = _ptx_ops(kernel, args, constexprs, config)
    assert not [op for op in ops if op.startswith(("div", "rcp")) and re.search(r"\.f(16|32|64)\b", op)]
    assert sum(op.startswith(("div", "rem")) for op in ops) < 8, sorted(ops)
