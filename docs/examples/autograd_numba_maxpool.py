"""maxpool2d's CPU training winner, numba_fused with its explicit numba
backward, used from PyTorch as a ``torch.autograd.Function``.

docs/TRAINING.md walks through it; tests/test_autograd_example.py checks it
with ``torch.autograd.gradcheck`` and against the suite's own strategy.

The forward runs the kernel ``numba_fused`` runs (``impls.kernels_numba.
maxpool2d_kernel``), the backward is the strategy's own declared backward
(``impls.maxpool2d.numba_scatter_backward``), given the forward's indices as
the suite's training modes give them. numba works on numpy arrays: the
tensors are CPU tensors, and ``.numpy()`` / ``torch.from_numpy`` share their
memory, so nothing is copied on the way in or out (a strided input is made
contiguous first, as the strategy does inside its timed call).

    import torch
    from docs.examples.autograd_numba_maxpool import numba_max_pool2d

    x = torch.randn(8, 16, 64, 64, requires_grad=True)
    values, indices = numba_max_pool2d(x, 2)    # as F.max_pool2d(x, 2, return_indices=True)
    values.sum().backward()                     # x.grad: the numba scatter
"""

from __future__ import annotations

import numba
import numpy as np
import torch

from impls import kernels_numba
from impls.maxpool2d import numba_scatter_backward


def _forward(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """numba_fused's timed call: values and int64 flat indices (first maximum
    on ties, a NaN window's first NaN) of a C-contiguous (N, C, H, W) array.
    The scratch is the strategy's (``kernels_numba.maxpool2d_scratch``): ~16 KiB
    of bands per chunk, one padded row per numba thread."""
    N, C, H, W = x.shape
    index_dtype = np.int32 if H * W < 2**31 else np.int64
    scratch = kernels_numba.maxpool2d_scratch(x.dtype, index_dtype, W, k, numba.config.NUMBA_NUM_THREADS)
    values = np.empty((N, C, H // k, W // k), dtype=x.dtype)
    indices = np.empty((N, C, H // k, W // k), dtype=np.int64)
    kernels_numba.maxpool2d_kernel(k)(x.reshape(-1), H, W, values.reshape(-1), indices.reshape(-1), *scratch)
    return values, indices


class NumbaMaxPool2d(torch.autograd.Function):
    """Max-pooling (window = stride = k, no padding) with argmax indices, the
    gradient scattered to the forward's own indices (docs/SPEC.md §1.5):
    what ``F.max_pool2d(x, k, return_indices=True)`` computes,
    by the numba kernels that won the CPU measurements."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, k: int):
        if x.device.type != "cpu" or x.dim() != 4:
            raise ValueError(f"numba_max_pool2d: a 4-D CPU tensor is needed, got {x.dim()}-D on {x.device}")
        values, indices = _forward(np.ascontiguousarray(x.detach().numpy()), k)
        values, indices = torch.from_numpy(values), torch.from_numpy(indices)
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        ctx.k, ctx.x_shape = k, tuple(x.shape)
        return values, indices

    @staticmethod
    def backward(ctx, grad_values: torch.Tensor, grad_indices: torch.Tensor | None):
        (indices,) = ctx.saved_tensors
        # The strategy's backward reads only x's shape from its inputs: a
        # zero-stride view of that shape holds no memory.
        backward = numba_scatter_backward({"x": np.broadcast_to(np.float64(0), ctx.x_shape)}, {"k": ctx.k})
        grad_x = backward((None, indices.numpy()), grad_values.detach().numpy())
        return torch.from_numpy(grad_x), None  # no gradient for k


def numba_max_pool2d(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, indices)`` of k×k max-pooling, differentiable in ``x``."""
    return NumbaMaxPool2d.apply(x, k)
