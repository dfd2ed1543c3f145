"""Two dispersion strategies whose first call is right, for
tests/harness/test_precheck.py (issue 31): `check`, `run`, `bench()` and
`regress` must record each with its own status and never time it.

``kept_accumulator`` zeroes its output once, in prepare, and ``index_add_``s
into it on every call: call 1 is the answer, call 2 twice it (status
``unrepeatable``). ``mask_folded_into_input`` multiplies the mask into its
input ``x`` in place, in prepare, then sums ``x`` alone on every call: each
call's answer is right, on an input the caller no longer has (status
``input-modified``)."""

from impls.dispersion import scatter_indices
from impls.registry import strategy


@strategy("dispersion", backend="torch", dtypes=("float32", "float64"), source="test: keeps its sum between calls")
def kept_accumulator(inputs, params):
    """One accumulator for every call, zeroed only in prepare."""
    import torch

    x, mask, S = inputs["x"], inputs["mask"], params["S"]
    B, C, H, W = x.shape
    out_W = W + (C - 1) * S
    index = scatter_indices(B, C, H, W, S, x.device).reshape(-1)
    y = torch.zeros(B, H * out_W, dtype=x.dtype, device=x.device)

    def run():
        y.index_add_(1, index, (x * mask).reshape(B, C * H * W))
        return y.view(B, 1, H, out_W)

    return run


@strategy("dispersion", backend="torch", dtypes=("float32", "float64"), source="test: overwrites its input")
def mask_folded_into_input(inputs, params):
    """The mask multiplied into x once, in place: one multiply less per call."""
    import torch

    x, mask, S = inputs["x"], inputs["mask"], params["S"]
    B, C, H, W = x.shape
    out_W = W + (C - 1) * S
    index = scatter_indices(B, C, H, W, S, x.device).reshape(-1)
    x.mul_(mask)

    def run():
        y = torch.zeros(B, H * out_W, dtype=x.dtype, device=x.device)
        y.index_add_(1, index, x.reshape(B, C * H * W))
        return y.view(B, 1, H, out_W)

    return run
