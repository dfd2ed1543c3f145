"""Autotuned kernels inside a check launch their first config without
entering their autotuner (impls/tuning.py): nothing is benchmarked, whatever
the Triton version, and the autotuner's cache is untouched, so a timed call
at such a size tunes for real. Run on triton.autotune itself, under the
interpreter, with a toy kernel of two configs."""

import pytest

from impls import tuning

triton = pytest.importorskip("triton")


def test_untimed_nests_and_restores():
    assert tuning.benchmarking()
    with tuning.untimed():
        assert not tuning.benchmarking()
        with tuning.untimed():  # nested: still untimed, and the outer one restores
            assert not tuning.benchmarking()
        assert not tuning.benchmarking()
    assert tuning.benchmarking()
    with pytest.raises(KeyboardInterrupt):
        with tuning.untimed():
            raise KeyboardInterrupt
    assert tuning.benchmarking()  # an interrupted check leaves benchmarking on


@pytest.fixture
def toy(monkeypatch):
    """A two-config autotuned fill, registered, and a spy on the autotuner:
    how often it was entered and how many configs it benchmarked (Triton 3.6
    benchmarks even a single pruned config; the interpreter's benchmarker
    runs on the CPU, so the spy stands in for it)."""
    import torch
    import triton.language as tl
    from triton.runtime.autotuner import Autotuner

    if torch.cuda.is_available():
        pytest.skip("the interpreter's run of triton.autotune (on a GPU, `make gpu` runs the real one)")

    @triton.jit
    def fill(out, n, VALUE: tl.constexpr, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out + offsets, tl.full((BLOCK,), VALUE, tl.float32), mask=offsets < n)

    spied = {"entered": 0, "benchmarked": 0}
    entered = Autotuner.run

    def counting_run(self, *args, **kwargs):
        spied["entered"] += 1
        return entered(self, *args, **kwargs)

    def counting_bench(self, *args, **kwargs):
        spied["benchmarked"] += 1
        return [float(kwargs["config"].kwargs["BLOCK"])] * 3  # the wider config "slower"

    monkeypatch.setattr(Autotuner, "run", counting_run)
    monkeypatch.setattr(Autotuner, "_bench", counting_bench)
    tuned = tuning.register(triton.autotune(
        configs=[triton.Config({"VALUE": 1.0, "BLOCK": 16}), triton.Config({"VALUE": 2.0, "BLOCK": 32})],
        key=["n"])(fill))
    return tuned, spied


def test_inside_untimed_the_first_config_runs_and_the_autotuner_is_never_entered(toy):
    import torch

    tuned, spied = toy
    for n in (40, 41, 40):
        out = torch.zeros(n)
        with tuning.untimed():
            tuned[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out, n)
        assert torch.equal(out, torch.ones(n))  # the first config's kernel ran
    assert spied == {"entered": 0, "benchmarked": 0} and tuned.cache == {}


def test_outside_untimed_the_autotuner_tunes_for_real(toy):
    import torch

    tuned, spied = toy
    out = torch.zeros(40)
    with tuning.untimed():
        tuned[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](out, 40)
    tuned[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](out, 40)  # the timed size: tuned now
    assert spied == {"entered": 1, "benchmarked": 2} and len(tuned.cache) == 1
    tuned[lambda meta: (triton.cdiv(40, meta["BLOCK"]),)](out, 40)  # tuned once per size
    assert spied == {"entered": 2, "benchmarked": 2}
