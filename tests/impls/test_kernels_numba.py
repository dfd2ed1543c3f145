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


# Run with numba's bounds checks on, in a process of its own (the flag is read when numba starts)
# with a cache of its own (a kernel loaded from the shared cache was compiled without them).
_PADDED_COLUMNS = """
import numpy as np
from impls import maxpool2d
from impls.registry import get_operator

op = get_operator("maxpool2d")
rng = np.random.default_rng(0)
for N, C, H, W, k in ((1, 1, 4, 28, 2), (2, 3, 7, 9, 2), (1, 2, 6, 30, 3), (3, 1, 2, 14, 2), (1, 1, 3, 3, 3)):
    x = rng.standard_normal((N, C, H, W)).astype(np.float32)
    x[..., (W // k) * k:] = np.nan  # columns past the last window: never an output's
    x[..., 1:, :1] = np.inf  # each row's first column: what a band's padded columns read next
    params = {"N": N, "C": C, "H": H, "W": W, "k": k}
    values, indices = op.strategies["numba_fused"].prepare({"x": x}, params)()
    expected = maxpool2d.oracle({"x": x.astype(np.float64)}, params)
    assert np.array_equal(values, expected[0].astype(np.float32), equal_nan=True), (N, C, H, W, k)
    assert np.array_equal(indices, expected[1]), (N, C, H, W, k)
print("within bounds")
"""


def test_the_pools_padded_vertical_pass_reads_nothing_past_x_and_never_reaches_an_output(tmp_path):
    """``maxpool2d_kernel`` runs its vertical pass on whole vector steps of 16 columns, past a
    band's last window into the next row: those columns must never reach an output, and the last
    band must stop at x's end (numba's bounds checks raise IndexError there)."""
    import os
    import subprocess
    import sys

    from harness.base.checkout import ROOT

    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path), NUMBA_NUM_THREADS="2")
    done = subprocess.run([sys.executable, "-c", _PADDED_COLUMNS], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)
    assert done.returncode == 0 and "within bounds" in done.stdout, done.stdout[-2000:] + done.stderr[-4000:]
