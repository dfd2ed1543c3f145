"""The suite's cases through pytest-benchmark, for people who live in that tool:

    pytest benchmarks/ --benchmark-only                 # configs/quick.yaml
    SCATTERBENCH_CONFIG=configs/default.yaml pytest benchmarks/ --benchmark-only

Every case goes through the suite's own judge path (harness/measuring/check.py) before
pytest-benchmark times it; the config's thread settings are applied, each
operator is its own benchmark group, and bytes moved and GB/s go into each
benchmark's extra_info. pytest-benchmark times the suite's ``Clock.call``
(harness/measuring/timing.py): the call and its backend's synchronize, so an
asynchronous backend (CUDA, JAX) is timed to completion, as every host-clock
sample of the suite is.
"""

import os
from pathlib import Path

import pytest

from harness.base.config import expand, load_config
from harness.measuring.check import attempt, judge_again, reference
from harness.measuring.pinning import apply_threads
from harness.measuring.timing import Clock
from impls.backends import get_backend, itemsize
from impls import training
from impls.registry import get_operator
from impls.status import CORRECT

CONFIG = Path(os.environ.get("SCATTERBENCH_CONFIG", Path(__file__).parents[1] / "configs" / "quick.yaml"))
_config = load_config(CONFIG)
CASES = [case for case in expand(_config) if get_operator(case.op).strategies[case.strategy].available() is None]


@pytest.fixture(scope="session", autouse=True)
def config_threads():
    return apply_threads(_config.threads)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.op}-{c.strategy}-{c.device}-{c.dtype}-"
                         + "-".join(f"{k}{v}" for k, v in c.params)
                         + ("" if c.mode == training.FORWARD else f"-{c.mode}"))
def test_case(benchmark, case):
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    params = case.params_dict
    no_backward = training.applies(strat, case.mode, params)
    if no_backward:
        pytest.skip(no_backward)
    ref = reference(case.op, params, case.dtype, "random", _config.seed, case.mode)  # the case's mode (docs/SPEC.md §1.5)
    tried = attempt(strat, ref, case.dtype, case.device)  # calls 1 and 4 judged, the inputs unchanged
    verdict, prepared = tried.verdict, tried.prepared
    assert verdict.status in CORRECT, verdict.message
    if strat.interpreted_on(case.device):
        pytest.skip(f"checked under the {strat.backend} interpreter ({verdict.status}); not timed")
    nbytes = training.bytes_moved(op, params, itemsize(case.dtype), case.mode, strat.returns)
    benchmark.group = f"{case.op} {case.device} {case.dtype}" + ("" if case.mode == training.FORWARD else f" {case.mode}")
    benchmark.extra_info.update(bytes=nbytes, status=verdict.status, source=strat.source,
                                setup_s=prepared.setup_s)
    clock = Clock(get_backend(strat.backend), case.device)
    benchmark(clock.call, prepared.run)
    # The timed calls computed the answer too: the next one is judged, and the inputs.
    again = judge_again(strat, prepared, ref, case.dtype, case.device, "contiguous", verdict, calls=1,
                        which="the call after the benchmark's")
    assert again.status in CORRECT, again.message
    if benchmark.stats:
        benchmark.extra_info["gbps"] = nbytes / benchmark.stats.stats.median / 1e9
