"""The suite's cases through pytest-benchmark, for people who live in that tool:

    pytest benchmarks/ --benchmark-only                 # configs/quick.yaml
    SCATTERBENCH_CONFIG=configs/default.yaml pytest benchmarks/ --benchmark-only

Every case is checked against the float64 oracle before pytest-benchmark
times it; bytes moved and GB/s go into each benchmark's extra_info.
"""

import os
from pathlib import Path

import pytest

from harness.check import reference
from harness.config import expand, load_config
from harness.sweep import ITEMSIZE
from impls.common import to_numpy
from impls.registry import get_operator

CONFIG = Path(os.environ.get("SCATTERBENCH_CONFIG", Path(__file__).parents[1] / "configs" / "quick.yaml"))
_config = load_config(CONFIG)
CASES = [case for case in expand(_config) if get_operator(case.op).strategies[case.strategy].available() is None]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}-{c.strategy}-{c.device}-{c.dtype}-"
                         + "-".join(f"{k}{v}" for k, v in c.params))
def test_case(benchmark, case):
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    params = case.params_dict
    ref = reference(case.op, params, case.dtype, "random", _config.seed)
    run = strat.prepare(op.to_backend(ref.inputs, strat.backend, case.device, case.dtype), params)
    verdict = op.compare(to_numpy(run()), ref.expected, ref.inputs, case.dtype, strat)
    assert verdict.status in ("ok", "inexact"), verdict.message
    nbytes = op.bytes_moved(params, ITEMSIZE[case.dtype], strat.returns)
    benchmark.extra_info.update(bytes=nbytes, status=verdict.status, source=strat.source)
    benchmark(run)
    if benchmark.stats:
        benchmark.extra_info["gbps"] = nbytes / benchmark.stats.stats.median / 1e9
