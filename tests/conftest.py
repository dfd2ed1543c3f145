"""Shared fixtures. Triton kernels run under the interpreter when no GPU is
present: TRITON_INTERPRET must be set before triton is first imported."""

import os

import pytest

try:
    import torch

    HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    HAS_CUDA = False
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

from impls.registry import Strategy, get_operator  # noqa: E402


# Checking a strategy that compiles (numba, Triton's interpreter, PyTensor,
# torch.compile) takes seconds per case: such parametrisations are slow, and
# `make test-fast` (pytest -m "not slow") leaves them to `make test`.
COMPILING = ("numba_", "triton_", "pytensor_", "torch_compile_")


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)
        parameters = item.nodeid.partition("[")[2]
        if parameters and any(prefix in parameters for prefix in COMPILING):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def planted():
    """Registers throw-away strategies for one test, then removes them."""
    added = []

    def plant(op: str, name: str, prepare, backend: str = "numpy", **fields):
        operator = get_operator(op)
        # returns: the whole output unless declared, as @strategy does
        defaults = dict(source="test", devices=("cpu",), dtypes=("float32", "float64"), returns=operator.whole_output)
        defaults.update(fields)
        operator.strategies[name] = Strategy(op=op, name=name, backend=backend, prepare=prepare, **defaults)
        added.append((operator, name))
        return operator.strategies[name]

    yield plant
    for operator, name in added:
        operator.strategies.pop(name, None)


@pytest.fixture
def tiny_config(tmp_path):
    def write(text: str, name: str = "tiny.yaml"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
