"""A maxpool2d strategy that takes the *last* maximum of a tie (the contract
is the first): right on random inputs, where ties never happen, wrong on the
adversarial set. `run`, `bench()` and `regress` must record it `mismatch`
and never time it (issue 24). It declares neither ``returns=`` nor ``ties=``:
it is held to the whole output and to first-maximum ties."""

import numpy as np

from impls.registry import strategy


@strategy("maxpool2d", backend="numpy", source="test: takes the last tie")
def last_tie_argmax(inputs, params):
    """Window-as-row argmax over the reversed rows: the last maximum."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    windows = (x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k)
               .transpose(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, k * k))

    def run():
        last = k * k - 1 - windows[..., ::-1].argmax(axis=-1)
        values = np.take_along_axis(windows, last[..., None], axis=-1)[..., 0]
        rows = np.arange(h)[:, None] * k + last // k
        cols = np.arange(w)[None, :] * k + last % k
        return values, (rows * W + cols).astype(np.int64)

    return run
