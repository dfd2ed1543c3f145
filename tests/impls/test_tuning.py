"""Autotuned kernels inside a check take their first config unbenchmarked, and
the sizes first met there are forgotten on leaving (impls/tuning.py), so a
timed call at such a size tunes for real. Run on triton.autotune itself,
under the interpreter, with a toy kernel of two configs."""

import pytest

from impls import tuning

triton = pytest.importorskip("triton")


def test_prune_keeps_every_config_unless_untimed():
    configs = ["first", "second", "third"]
    assert tuning.prune(configs, {}) == configs
    with tuning.untimed():
        assert tuning.prune(configs, {}) == ["first"]
        with tuning.untimed():  # nested: still untimed, and the outer one restores
            assert not tuning.benchmarking()
        assert not tuning.benchmarking()
    assert tuning.benchmarking()


class ToyKernel:
    """What untimed() touches of a triton autotuner: its cache of tuned sizes."""

    def __init__(self, cache):
        self.cache = dict(cache)


def test_sizes_first_met_while_untimed_are_forgotten(monkeypatch):
    kernel = ToyKernel({(64, "torch.float32"): "tuned for real"})
    monkeypatch.setattr(tuning, "_KERNELS", [kernel])
    with tuning.untimed():
        kernel.cache[(8, "torch.float32")] = "first config, unbenchmarked"
        kernel.cache[(64, "torch.float32")] = "tuned for real"  # a size tuned before is kept
    assert kernel.cache == {(64, "torch.float32"): "tuned for real"}


def test_triton_autotune_takes_the_first_config_inside_untimed(monkeypatch):
    """With two configs and the pruning hook, triton.autotune runs the first
    config without benchmarking (benchmarking would need a GPU here), and its
    cache forgets the size afterwards."""
    import torch
    import triton.language as tl

    if torch.cuda.is_available():
        pytest.skip("the interpreter's run of triton.autotune (on a GPU, `make gpu` runs the real one)")
    monkeypatch.setattr(tuning, "_KERNELS", [])

    @triton.jit
    def fill(out, n, VALUE: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offsets, tl.full((BLOCK,), VALUE, tl.float32), mask=offsets < n)

    tuned = tuning.register(triton.autotune(
        configs=[triton.Config({"VALUE": 1.0, "BLOCK": 16}), triton.Config({"VALUE": 2.0, "BLOCK": 32})],
        key=["n"], prune_configs_by={"early_config_prune": tuning.prune})(fill))
    out = torch.zeros(40)
    with tuning.untimed():
        tuned[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](out, 40)
        assert len(tuned.cache) == 1
    assert torch.equal(out, torch.ones(40))  # the first config's kernel ran
    assert tuned.cache == {}


def test_an_interrupted_check_still_forgets_its_sizes_and_benchmarks_again(monkeypatch):
    kernel = ToyKernel({})
    monkeypatch.setattr(tuning, "_KERNELS", [kernel])
    with pytest.raises(KeyboardInterrupt):
        with tuning.untimed():
            kernel.cache[(8,)] = "first config, unbenchmarked"
            raise KeyboardInterrupt
    assert kernel.cache == {} and tuning.benchmarking()
