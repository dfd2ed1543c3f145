"""A throw-away backend: numpy wrapped so that it "runs asynchronously".

A call returns at once with a ``Pending`` handle; the work (and a fixed
``WORK_S`` of device time) happens only when the backend synchronises or the
result is read. A timer that forgot the backend's synchronize would time the
dispatch only (microseconds); the suite must time it to completion.
"""

import time

import numpy as np

from impls.backends import Backend, register_backend
from impls.registry import strategy

WORK_S = 0.03
_queue = []


class Pending:
    def __init__(self, compute):
        self.compute = compute
        self.value = None
        _queue.append(self)

    def resolve(self):
        if self.value is None:
            time.sleep(WORK_S)  # the "device" working
            self.value = self.compute()
        return self.value


def synchronize(device):
    while _queue:
        _queue.pop().resolve()


def to_native(array, device, dtype, layout):
    converted = array.astype(dtype) if array.dtype.kind == "f" else array.astype(np.int64)
    return np.ascontiguousarray(converted)


register_backend(Backend(
    name="lazy", module="numpy", devices=("cpu",), dtypes=("float32", "float64"), layouts=("contiguous",),
    to_native=to_native, to_numpy=lambda pending: np.asarray(pending.resolve()),
    owns=lambda value: isinstance(value, Pending), synchronize=synchronize))


@strategy("maxpool2d", backend="lazy", returns="values", source="test: asynchronous backend")
def lazy_max_pool(inputs, params):
    """The values of a 2x2 max-pool, computed when the lazy backend syncs."""
    x, k = inputs["x"], params["k"]

    def compute():
        N, C, H, W = x.shape
        h, w = H // k, W // k
        return x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).max(axis=(3, 5))

    return lambda: Pending(compute)
