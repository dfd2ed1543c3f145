"""The CUDA timer counts device time only, whatever the host does (docs/SPEC.md §3):
strategies with a deliberately slow host launch, timed inside a real sweep of
several cases, agree with triton.testing.do_bench of the same kernel without
the slow host (within 5 %). Needs a GPU: `pytest -m cuda` (`make gpu`)."""


import pytest

from harness.results.store import read_rows

pytestmark = pytest.mark.slow  # subprocesses, sweeps or compiles: `make test` runs them, `make test-fast` does not

from tests.helpers import benchmark, config_yaml, plugin_env, scatterbench

SWEEP = config_yaml(benchmark("maxpool2d", ["torch_max_pool2d_indices", "slow_host_triton", "triton_fused",
                                            "slow_host_compiled", "torch_compile_reshape_argmax"],
                              N=64, C=32, H=128, W=128, k=2),
                    benchmark("dispersion", ["triton_fused", "seed_loop"], B=16, C=28, H=256, W=256, S=2),
                    name="slow-host", devices=["cuda"], dtypes=["float32"],
                    timing={"min_samples": 50, "budget_s": 0.3, "warmup_s": 0.1}, threads=None)


@pytest.mark.cuda
def test_slow_host_launches_are_timed_as_their_kernels_in_a_sweep(tmp_path, tiny_config):
    import torch
    import triton.testing

    from impls import kernels_triton
    from impls.maxpool2d import torch_reshape_argmax_fn

    config = tiny_config(SWEEP, "slow.yaml")
    ran = scatterbench("run", config, "-o", tmp_path / "out", "--no-progress", env=plugin_env("slow_host_plugin"),
                       timeout=900)
    assert ran.returncode == 0, ran.stderr[-3000:]
    rows = read_rows(tmp_path / "out").set_index("strategy")
    maxpool = rows[rows["op"] == "maxpool2d"]
    assert set(maxpool["status"]) == {"ok"}
    x = torch.randn(64, 32, 128, 128, device="cuda")
    kernel_s = {
        "slow_host_triton": triton.testing.do_bench(lambda: kernels_triton.maxpool2d(x, 2),
                                                    return_mode="median") / 1e3,
        "slow_host_compiled": triton.testing.do_bench(torch.compile(lambda: torch_reshape_argmax_fn(x, 2)),
                                                      return_mode="median") / 1e3,
    }
    for name, expected in kernel_s.items():
        ours = float(maxpool.loc[name, "median_s"])
        assert abs(ours - expected) / expected < 0.05, (name, ours, expected)
        # the host cost is measured and reported beside it
        assert float(maxpool.loc[name, "host_s"]) > 250e-6
    # the cross-check column is filled on CUDA
    assert maxpool["xcheck_s"].notna().all()
