"""Every registered CPU strategy against the float64 oracle: each operator's
adversarial set, both input modes, every layout its backend has, every dtype
it declares, and the operator's extra checks (other modes, the half-type
sums) minus those breaking a precondition the strategy declares. Triton
strategies run here under TRITON_INTERPRET=1."""

import pytest

import impls
from harness.measuring.check import (
    MODES,
    UPSTREAM_DEFECT,
    adversarial_set,
    cached_reference,
    check_strategy,
    extra_set,
)
from impls.registry import get_operator
from tests.helpers import strategy_dtype_params

HALF = ("float16", "bfloat16")


def acceptable(strat, dtype, status):
    """ok; a listed upstream defect; or, for a seed's own code in a half type,
    inexact (docs/SPEC.md §2: it may sum in that type, and is reported for it)."""
    return status == "ok" or status == UPSTREAM_DEFECT or (status == "inexact" and strat.seed and dtype in HALF)


CASES = strategy_dtype_params(impls.all_strategies(device="cpu"))


@pytest.mark.parametrize("strat,dtype", CASES)
def test_strategy_matches_oracle(strat, dtype):
    if strat.available():
        pytest.skip(strat.available())
    op = get_operator(strat.op)
    failures, ran = [], 0
    check_cases, layouts = adversarial_set(op, strat)
    work = [(params, dtype, mode, layout) for params in check_cases for mode in MODES for layout in layouts]
    # Each extra check in this test's dtype (the half-type sums come with the half-type tests).
    work += [extra for extra in extra_set(op, strat, dtype) if extra[1] == dtype]
    for params, this_dtype, mode, layout in work:
        ref = cached_reference(strat.op, params, this_dtype, mode, 0)
        verdict = check_strategy(strat, params, this_dtype, "cpu", ref, layout)
        if verdict.status == "skipped":
            continue
        ran += 1
        if not acceptable(strat, this_dtype, verdict.status):
            failures.append(f"{params} {this_dtype} {mode}/{layout}: {verdict.status}: {verdict.message}")
    assert ran, "every check case was skipped"
    assert not failures, "\n".join(failures[:5])


def test_registry_lists_every_seed_strategy():
    names = {s.key for s in impls.all_strategies()}
    seeds = {
        "maxpool2d/seed_loops", "maxpool2d/seed_reshape_max", "maxpool2d/seed_reshape_argmax",
        "maxunpool/numpy_seed_row_loop", "maxunpool/numpy_seed_flat_set", "maxunpool/numpy_seed_broadcast",
        "maxunpool/torch_seed_row_loop", "maxunpool/torch_seed_flat_set", "maxunpool/torch_seed_broadcast",
        "maxunpool/pytensor_seed_row_loop", "maxunpool/pytensor_seed_flat_set",
        "maxunpool/pytensor_seed_broadcast", "dispersion/seed_loop", "dispersion/seed_conv2d",
        "dispersion/seed_scatter_add", "dispersion_pinv/seed_loop_cat", "dispersion_pinv/seed_conv_transpose2d",
    }
    assert seeds <= names
    for key in seeds:
        op, name = key.split("/")
        assert get_operator(op).strategies[name].source.startswith("seed"), key


def test_every_strategy_documents_its_origin_and_cost():
    # The suite's own: test plugins that other tests of this session loaded stay registered.
    built_in = [strat for strat in impls.all_strategies() if strat.prepare.__module__.startswith("impls.")]
    assert len(built_in) > 40
    for strat in built_in:
        assert len(strat.doc) > 40, f"{strat.key} lacks a docstring saying where it comes from and what it costs"


def test_importing_the_registry_does_not_import_optional_backends():
    import subprocess
    import sys

    code = ("import sys, impls; bad = [m for m in ('triton', 'numba', 'pytensor') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
