"""A maxpool2d strategy whose forward is right and whose explicit backward
is not, for tests/harness/measuring/test_check_modes.py (issue 32): the
forward takes the first maximum of a tie, as the contract says; the backward
ignores the forward's indices and sends each window's gradient to the window's
*last* maximum. Right on random inputs (no ties), wrong on the adversarial
set's ties: ``check`` must call it ``ok`` in forward and ``mismatch`` in
backward and forward+backward."""

import numpy as np

from impls.registry import strategy


def _windows(x, k):
    N, C, H, W = x.shape
    h, w = H // k, W // k
    return (x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k)
            .transpose(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, k * k))


def _flat_indices(position, k, W):
    h, w = position.shape[-2:]
    rows = np.arange(h)[:, None] * k + position // k
    cols = np.arange(w)[None, :] * k + position % k
    return (rows * W + cols).astype(np.int64)


def last_tie_scatter(inputs, params):
    """Scatters to the argmax over the reversed window: the last maximum."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    windows = _windows(x, k)

    def backward(saved, grad):
        last = k * k - 1 - windows[..., ::-1].argmax(axis=-1)
        grad_x = np.zeros((N, C, H * W), dtype=grad.dtype)
        np.put_along_axis(grad_x, _flat_indices(last, k, W).reshape(N, C, -1), grad.reshape(N, C, -1), axis=-1)
        return grad_x.reshape(N, C, H, W)

    return backward


@strategy("maxpool2d", backend="numpy", dtypes=("float32", "float64"), returns="values+indices", ties="first",
          source="test: its backward takes the last tie", backward=last_tie_scatter)
def first_tie_forward_last_tie_backward(inputs, params):
    """Window-as-row ``np.argmax``: the first maximum (the first NaN of a NaN window)."""
    x, k = inputs["x"], params["k"]
    W = x.shape[3]
    windows = _windows(x, k)

    def run():
        first = windows.argmax(axis=-1)
        values = np.take_along_axis(windows, first[..., None], axis=-1)[..., 0]
        return values, _flat_indices(first, k, W)

    return run
