"""docs/examples/autograd_numba_maxpool.py, the page docs/TRAINING.md shows:
maxpool2d's numba_fused forward and its explicit numba backward inside a
torch.autograd.Function. torch.autograd.gradcheck accepts it (float64, small
shapes, no ties) and rejects a planted wrong backward, and its outputs are the
suite's own: the strategy's values and indices, the float64 oracle's gradient."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from docs.examples.autograd_numba_maxpool import NumbaMaxPool2d, numba_max_pool2d
from impls import maxpool2d


def tie_free(shape, seed: int = 0) -> torch.Tensor:
    """Distinct values (a permutation, scaled), so no window has a tie and the
    finite differences never cross a change of argmax."""
    rng = np.random.default_rng(seed)
    values = rng.permutation(int(np.prod(shape))).reshape(shape) / 7.0 - 3.0
    return torch.from_numpy(values)


@pytest.mark.parametrize("shape, k", [((2, 3, 8, 8), 2), ((2, 3, 7, 9), 2), ((1, 2, 10, 11), 3)])
def test_gradcheck_accepts_it(shape, k):
    x = tie_free(shape).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda value: numba_max_pool2d(value, k)[0], (x,), eps=1e-6, atol=1e-7)


def test_gradcheck_accepts_it_on_a_strided_input():
    x = tie_free((2, 3, 9, 8)).transpose(2, 3).requires_grad_(True)  # (2, 3, 8, 9), not contiguous
    assert not x.is_contiguous()
    assert torch.autograd.gradcheck(lambda value: numba_max_pool2d(value, 2)[0], (x,), eps=1e-6, atol=1e-7)


class LastElementBackward(NumbaMaxPool2d):
    """A planted wrong backward: each window's gradient on its last element,
    not on the forward's index."""

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        k = ctx.k
        grad_x = torch.zeros(ctx.x_shape, dtype=grad_values.dtype)
        h, w = grad_values.shape[2], grad_values.shape[3]
        grad_x[:, :, k - 1:h * k:k, k - 1:w * k:k] = grad_values
        return grad_x, None


def test_gradcheck_rejects_a_wrong_backward():
    x = tie_free((2, 3, 8, 8)).requires_grad_(True)
    assert not torch.autograd.gradcheck(lambda value: LastElementBackward.apply(value, 2)[0], (x,), eps=1e-6,
                                        atol=1e-7, raise_exception=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_it_computes_what_the_suite_measured(dtype):
    """The forward is numba_fused's output bit for bit (ties included: the
    first maximum), the backward the float64 oracle's gradient bit for bit
    (a scatter computes nothing)."""
    rng = np.random.default_rng(1)
    x64 = rng.integers(-3, 4, size=(2, 4, 13, 10)).astype(np.float64)  # ties everywhere
    x = torch.from_numpy(x64).to(dtype).requires_grad_(True)
    values, indices = numba_max_pool2d(x, 3)
    suite_values, suite_indices = maxpool2d.numba_fused({"x": x.detach().numpy()}, {"k": 3})()
    assert np.array_equal(values.detach().numpy(), suite_values)
    assert np.array_equal(indices.numpy(), suite_indices)
    torch_values, torch_indices = F.max_pool2d(x.detach(), 3, return_indices=True)
    assert torch.equal(values.detach(), torch_values) and torch.equal(indices, torch_indices)
    assert not indices.requires_grad

    grad = torch.from_numpy(rng.standard_normal(values.shape)).to(dtype)
    (grad_x,) = torch.autograd.grad(values, x, grad)
    expected = maxpool2d.grad_oracle({"x": x64}, grad.double().numpy(), {"k": 3})
    assert grad_x.dtype == dtype
    assert np.array_equal(grad_x.double().numpy(), expected)


def test_it_refuses_what_its_kernel_cannot_take():
    with pytest.raises(ValueError, match="4-D CPU tensor"):
        numba_max_pool2d(torch.zeros(3, 8, 8), 2)


def test_every_python_block_of_its_page_is_an_excerpt_of_the_example():
    root = Path(__file__).parents[1]
    page = (root / "docs" / "TRAINING.md").read_text()
    source = (root / "docs" / "examples" / "autograd_numba_maxpool.py").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.DOTALL)
    assert len(blocks) >= 3
    for block in blocks:
        assert block in source, block[:200]
