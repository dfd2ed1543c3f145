"""The numba kernels (impls/kernels_numba.py) as compiled: what their machine
code must do, which their results alone cannot show."""

import platform

import numba
import numpy as np
import pytest

from impls import kernels_numba


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="reads x86-64 machine code")
def test_the_channels_last_pool_backward_adds_float32_gradients_in_float32():
    """``x if cond else 0`` with an integer literal made numba type the select float64: every
    gradient was widened, added in double and narrowed again (vcvtps2pd, vaddpd, vcvtpd2ps), half
    the lanes per vector; the stem's backward at batch 32 took 34.5 ms, 30.1 ms in float32 (the
    Xeon 6-167 VM, 1 thread). The sums are the same either way (a float32 sum rounded from double
    is the float32 sum), so only the machine code shows it."""
    # Compiled afresh: numba will not show the machine code of a kernel loaded from its cache.
    backward = numba.njit(**{**kernels_numba._JIT, "cache": False})(kernels_numba.maxpool2d_nhwc_backward(3, 2, 1).py_func)
    grad = np.zeros((1, 4, 4, 64), np.float32)
    indices = np.zeros((1, 4, 4, 64), np.int64)
    grad_x = np.empty((1, 8, 8, 64), np.float32)
    backward(grad, indices, grad_x)
    machine_code = backward.inspect_asm(backward.signatures[0])
    assert "cvtps2pd" not in machine_code and "addpd" not in machine_code
    assert "vaddps" in machine_code  # the channels' adds, vectorised
