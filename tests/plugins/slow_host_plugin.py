"""Strategies whose host launch is made deliberately slow (SLOW_HOST_S of
Python before the kernel launches), for the CUDA timer tests: the device
timer must count the kernel's time, not the host's."""

import time

from impls.registry import compiled, strategy

SLOW_HOST_S = 300e-6


def _spin(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


@strategy("maxpool2d", backend="triton", returns="values+indices", ties="first", source="test: slow host")
def slow_host_triton(inputs, params):
    """triton_fused behind 300 µs of Python."""
    from impls import kernels_triton

    x, k = inputs["x"], params["k"]

    def run():
        _spin(SLOW_HOST_S)
        return kernels_triton.maxpool2d(x, k)

    run()
    return run


@strategy("maxpool2d", backend="torch", devices=("cuda",), returns="values+indices", ties="first",
          source="test: slow host", quick_check=True)
def slow_host_compiled(inputs, params):
    """torch.compile of the reshape-argmax behind 300 µs of Python."""
    from impls.maxpool2d import torch_reshape_argmax_fn

    fast = compiled(torch_reshape_argmax_fn, inputs["x"], params["k"])

    def run():
        _spin(SLOW_HOST_S)
        return fast()

    return run
