"""Shared fixtures. Triton kernels run under the interpreter when no GPU is
present: TRITON_INTERPRET must be set before triton is first imported."""

import atexit
import os
import shutil
import tempfile

import pytest

from impls.backends import device_present, get_backend  # noqa: E402

HAS_CUDA = device_present("cuda")
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

from impls.registry import Strategy, get_operator  # noqa: E402
from harness.base import caches  # noqa: E402
from tests.helpers import compiled_family, sample_of_the_product  # noqa: E402

# The libraries' compile caches are shared by every test (keyed by the code
# they compile, as torch's own default folder was): a folder per test would
# make each test compile cold. The suite's own caches are each test's own (below).
os.environ.setdefault(caches.COMPILE_ENV, str(caches.compile_cache_root()))
# Tests never use the user's verdicts or ceilings: those whose environment is made
# before a test starts (module constants, module fixtures) share this
# session's folder; every test gets its own (``private_cache``).
SESSION_CACHE = tempfile.mkdtemp(prefix="scatterbench-test-cache-")
os.environ[caches.ENV] = SESSION_CACHE
atexit.register(shutil.rmtree, SESSION_CACHE, ignore_errors=True)

# Under pytest-xdist (make test's first part, make test-fast) the workers share the cores: torch's
# pool in each at its share, or two workers' pools contend for every core.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    import torch  # noqa: E402

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))

# A run in a test measures its bandwidth curves (each test has its own cache) on
# three small sizes, three tries each: the tests need curves, not accurate ones
# (the measuring child is handed these: ceilings.curve_settings). The curves'
# own tests set theirs.
from harness.measuring import ceilings  # noqa: E402

ceilings.CURVE_POINTS, ceilings.CURVE_TRIES, ceilings.CURVE_PASS_BYTES = 3, 3, 1 << 20
ceilings.CURVE_PLACEMENTS = 2
ceilings.CURVE_TOP_MIN_BYTES = ceilings.CURVE_TOP_MAX_BYTES = 1 << 20

# Checking a strategy that compiles (a backend that compiles per shape:
# numba, Triton's interpreter, PyTensor, JAX; or torch.compile, quick_check)
# takes seconds per case: such parametrisations are slow, and `make
# test-fast` (pytest -m "not slow") leaves them to `make test`. Tests
# parametrised by name rather than by Strategy are caught by these prefixes.
COMPILING = ("numba_", "triton_", "pytensor_", "torch_compile_")


def _compiles(item) -> bool:
    parameters = getattr(getattr(item, "callspec", None), "params", {})
    strategies = [value for value in parameters.values() if isinstance(value, Strategy)]
    if any(strat.quick_check or get_backend(strat.backend).compiles for strat in strategies):
        return True
    names = item.nodeid.partition("[")[2]
    return bool(names) and any(prefix in names for prefix in COMPILING)


def _shared_fixture_module(item) -> str | None:
    """The test's module, where the test uses a module- or session-scoped
    fixture defined in that module (a sweep, a launch, a published report
    built once for its tests); else None."""
    module = item.nodeid.partition("::")[0]
    for definitions in item._fixtureinfo.name2fixturedefs.values():
        if any(d.scope in ("module", "session") and d.baseid == module for d in definitions):
            return module
    return None


def pytest_itemcollected(item):
    """Under --dist loadgroup (make test), a module's tests that share its
    fixture run on one worker: each worker would otherwise build the fixture
    again (a minute or more). Marked as each test is collected, before any
    pytest_collection_modifyitems: pytest-xdist reads the marks in its own
    (tests/test_worker_groups.py checks that the group holds)."""
    shared = _shared_fixture_module(item)
    if shared:
        item.add_marker(pytest.mark.xdist_group(shared))


def sampled_case(item):
    """(group, strategy, dtype) of a test parametrised by one compiling
    strategy and a dtype, for ``tests.helpers.sample_of_the_product``: the
    group is the test function, the strategy's compile family and operator,
    and the test's other parameters; None for any other test."""
    parameters = dict(getattr(getattr(item, "callspec", None), "params", {}))
    strategies = [name for name, value in parameters.items() if isinstance(value, Strategy)]
    if len(strategies) != 1 or not isinstance(parameters.get("dtype"), str):
        return None
    strat, dtype = parameters.pop(strategies[0]), parameters.pop("dtype")
    if not (strat.quick_check or get_backend(strat.backend).compiles):
        return None
    others = tuple(sorted((name, repr(value)) for name, value in parameters.items()))
    return (item.nodeid.partition("[")[0], compiled_family(strat), strat.op, others), strat.name, dtype


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "cuda" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)
        if _compiles(item):
            item.add_marker(pytest.mark.slow)
    # make test runs a sample of the compiling strategies' checks (tests.helpers.sample_of_the_product);
    # the rest are marked exhaustive, for make test-all.
    cases = {item: sampled_case(item) for item in items}
    kept = sample_of_the_product(case for case in cases.values() if case)
    for item, case in cases.items():
        if case and case not in kept:
            item.add_marker(pytest.mark.exhaustive)


@pytest.fixture(autouse=True)
def private_cache(tmp_path_factory, monkeypatch):
    """Each test its own cache folder (harness/base/caches.py): no test
    reuses a ceiling or a verdict another test (or the user) left there."""
    monkeypatch.setenv(caches.ENV, str(tmp_path_factory.mktemp("cache")))


@pytest.fixture
def planted():
    """Registers throw-away strategies for one test, then removes them."""
    added = []

    def plant(op: str, name: str, prepare, backend: str = "numpy", **fields):
        operator = get_operator(op)
        # returns: the whole output, and the cases it computes: the operator's default, unless
        # declared, as @strategy does
        defaults = dict(source="test", devices=("cpu",), dtypes=("float32", "float64"), returns=operator.whole_output,
                        outside_when=operator.default_outside_when)
        defaults.update(fields)
        operator.strategies[name] = Strategy(op=op, name=name, backend=backend, prepare=prepare, **defaults)
        added.append((operator, name))
        return operator.strategies[name]

    yield plant
    for operator, name in added:
        operator.strategies.pop(name, None)


@pytest.fixture
def tiny_config(tmp_path):
    """Writes a config's text (``tests.helpers.config_yaml``, or YAML text
    where the text itself is under test) into this test's tmp_path as
    ``name``; returns its path."""
    def write(text: str, name: str = "tiny.yaml"):
        path = tmp_path / name
        path.write_text(text)
        return path

    return write
