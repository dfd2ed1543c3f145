"""The Triton kernels compile for the GPUs they are meant for, without one.

The interpreter (TRITON_INTERPRET=1) checks what the kernels compute but not
that they compile: it accepts Python that the compiler rejects (branches whose
two sides differ in type, methods on arguments Triton turns into constants).
Here each wrapper runs with `_launch` captured, and each captured launch is
compiled ahead of time for Hopper (sm_90, the H100/H200 the GPU sweep targets)
and Ampere (sm_80), through PTX to a cubin with the ptxas in Triton's wheel,
with the argument types and the int == 1 specialisation a real launch uses.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

from impls import kernels_triton  # noqa: E402

TARGETS = [GPUTarget("cuda", 90, 32), GPUTarget("cuda", 80, 32)]
POINTER_TYPES = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16",
                 torch.int64: "*i64", torch.int32: "*i32"}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _capture(monkeypatch, call):
    launches = []
    monkeypatch.setattr(kernels_triton, "_launch",
                        lambda kernel, grid, *args, **constexprs: launches.append((kernel, grid, args, constexprs)))
    call()
    assert launches, "the wrapper launched nothing"
    return launches


def _source(kernel, args, constexprs) -> ASTSource:
    """The ASTSource a launch with these arguments compiles: tensors become typed
    pointers, ints i32 or i64 by size, and ints equal to 1 constants, as
    Triton's launcher specialises them."""
    # Under the interpreter @triton.jit returns a wrapper around the Python function.
    fn = kernel if isinstance(kernel, JITFunction) else JITFunction(kernel.fn)
    signature, constants = {}, dict(constexprs)
    for name, value in zip(fn.arg_names, args):
        if isinstance(value, torch.Tensor):
            signature[name] = POINTER_TYPES[value.dtype]
        elif isinstance(value, int) and value == 1:
            constants[name] = 1
        elif isinstance(value, int):
            signature[name] = "i64" if abs(value) >= 2**31 else "i32"
        else:
            raise TypeError(f"{name}: unexpected argument {value!r}")
    signature.update({name: "constexpr" for name in constants})
    return ASTSource(fn=fn, signature=signature, constexprs=constants)


def _compile_all(launches):
    for kernel, grid, args, constexprs in launches:
        assert all(0 < size < 2**31 for size in grid[:1]) and all(0 < size < 2**16 for size in grid[1:]), grid
        for target in TARGETS:
            compiled = triton.compile(_source(kernel, args, constexprs), target=target)
            assert compiled.asm["cubin"], f"{kernel}: no cubin for sm_{target.arch}"
            # Local memory in the PTX means register spills: a kernel at the bandwidth floor has none.
            assert ".local" not in compiled.asm["ptx"], f"{kernel}: spills to local memory on sm_{target.arch}"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_maxpool2d_compiles(monkeypatch, dtype, layout):
    x = torch.randn(2, 3, 8, 300).to(dtype)
    if layout == "channels_last":
        x = x.to(memory_format=torch.channels_last)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.maxpool2d(x, 2)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("form", ["1d", "2d"])
def test_maxunpool_kernels_compile(monkeypatch, dtype, form):
    if form == "2d":
        values, positions = torch.randn(2, 3, 4, 4).to(dtype), torch.zeros(2, 3, 4, 4, dtype=torch.int64)
        out_shape, window = (2, 3, 8, 8), (2, 2)
    else:
        values, positions = torch.randn(2, 3, 40).to(dtype), torch.zeros(2, 3, 40, dtype=torch.int64)
        out_shape, window = (2, 3, 200), (1, 5)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.unpool_gather(values, positions, out_shape, window)))
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.unpool_scatter(values, positions, out_shape)))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("S", [0, 1, 2])
def test_dispersion_kernels_compile(monkeypatch, dtype, S):
    x, mask = torch.randn(2, 5, 4, 300).to(dtype), torch.rand(4, 300).to(dtype)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.dispersion(x, mask, S)))
    y = torch.randn(2, 1, 4, 300 + 4 * S).to(dtype)
    _compile_all(_capture(monkeypatch, lambda: kernels_triton.dispersion_pinv(y, mask, S, 5)))


def test_the_capture_compiles_what_the_launch_would(monkeypatch):
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
        _compile_all(launches)
