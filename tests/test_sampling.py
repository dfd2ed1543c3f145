"""make test's sample of the compiling strategies' checks (tests/conftest.py,
tests.helpers.sample_of_the_product): every test function still checks every
compile family x operator x dtype and every strategy, the sample is the same
in every run, and make test-all runs the whole product."""

import random
import subprocess
import sys

import pytest

from impls.backends import get_backend
from impls.registry import get_operator
from tests.helpers import ROOT, compiled_family, missing_from_sample, sample_of_the_product

# The test modules holding the products of strategies x dtypes.
PRODUCTS = ["tests/impls/test_strategies.py", "tests/impls/test_training.py"]


def make_selection(target: str) -> str:
    """The -m expression of make ``target``'s first (parallel) part, as make would run it."""
    recipe = subprocess.run(["make", "-n", "-s", target], capture_output=True, text=True, cwd=ROOT, check=True).stdout
    [line] = [line for line in recipe.splitlines() if "--dist loadgroup" in line]
    return line.split('-m "', 1)[1].split('"', 1)[0]


def collected(selection: str | None) -> list[str]:
    """The node ids of PRODUCTS that pytest collects under ``-m selection`` (all where None)."""
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *PRODUCTS]
    if selection is not None:
        args += ["-m", selection]
    result = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return [line for line in result.stdout.splitlines() if "::" in line]


def compiled_cases(node_ids: list[str]) -> set:
    """(group, strategy, dtype) of each node id parametrised by a compiling
    strategy and a dtype (``[op/name-dtype]``), grouped as the sample promises:
    test function, compile family, operator."""
    cases = set()
    for node_id in node_ids:
        function, _, ids = node_id.partition("[")
        key, _, dtype = ids.rstrip("]").rpartition("-")
        if "/" not in key:
            continue
        op, name = key.split("/")
        strat = get_operator(op).strategies[name]
        if strat.quick_check or get_backend(strat.backend).compiles:
            cases.add(((function, compiled_family(strat), op), name, dtype))
    return cases


@pytest.mark.slow  # three collections in subprocesses
def test_make_test_checks_every_family_operator_dtype_and_strategy_and_test_all_everything():
    everything = collected(None)
    sampled = collected(make_selection("test"))
    cases, kept = compiled_cases(everything), compiled_cases(sampled)
    families = {family for (_, family, _), _, _ in cases}
    assert {"numba", "pytensor", "jax", "triton", "torch.compile"} <= families, families
    assert not missing_from_sample(cases, kept)
    assert len(kept) < len(cases), "make test runs the whole product"
    # only the compiling strategies' checks are left out
    assert set(sampled) < set(everything)
    assert all(compiled_cases([node_id]) for node_id in set(everything) - set(sampled))
    assert collected(make_selection("test-all")) == everything


def test_the_sample_covers_each_groups_dtypes_and_strategies_with_no_more_than_it_needs():
    groups = {("test_a", "triton", "maxunpool"): (["triton_gather", "triton_scatter"], ["bfloat16", "float16", "float32"]),
              ("test_a", "jax", "maxpool2d"): (["jax_reduce_window", "jax_reshape_argmax"], ["float32", "float64"]),
              ("test_a", "pytensor", "maxunpool"): (["p1", "p2", "p3"], ["float32", "float64"]),
              ("test_b", "triton", "maxunpool"): (["triton_gather", "triton_scatter"], ["bfloat16", "float16", "float32"])}
    cases = [(group, name, dtype) for group, (names, dtypes) in groups.items() for name in names for dtype in dtypes]
    kept = sample_of_the_product(cases)
    assert not missing_from_sample(cases, kept)
    assert {group: sum(case[0] == group for case in kept) for group in groups} == {
        group: max(len(names), len(dtypes)) for group, (names, dtypes) in groups.items()}
    # the same whatever order the cases come in
    shuffled = list(cases)
    random.Random(0).shuffle(shuffled)
    assert sample_of_the_product(shuffled) == kept
    # each case kept is the only one of its dtype or its strategy: leaving any out is named
    for case in kept:
        assert missing_from_sample(cases, kept - {case}), case
