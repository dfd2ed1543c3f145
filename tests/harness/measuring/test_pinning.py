"""Thread pools: set by backend in the knobs' order, read back, put back
after bench(); a loaded machine with unpinned pools is said in one line."""

from harness.measuring import pinning


def test_threads_applied_pins_for_the_block_and_puts_the_callers_settings_back():
    import torch

    before = torch.get_num_threads()
    target = 1 if before != 1 else 2
    with pinning.threads_applied({"torch": target}) as applied:
        assert applied["torch"] == target == torch.get_num_threads()
    assert torch.get_num_threads() == before


def test_only_the_named_backends_pools_left_unpinned_are_listed():
    every = pinning.unpinned_threads({})
    assert "torch" in every and "numpy" in every
    assert "torch" not in pinning.unpinned_threads({"torch": 1})
    assert pinning.unpinned_threads({}, backends={"torch"}) == ["torch"]


def test_the_warning_needs_an_unpinned_pool_and_a_machine_at_capacity():
    line = pinning.oversubscription_warning({}, load=2.0, cores=2, backends={"torch"})
    assert line and "threads.torch is unpinned" in line and "\n" not in line
    assert pinning.oversubscription_warning({}, load=1.5, cores=2, backends={"torch"}) is None
    assert pinning.oversubscription_warning({"torch": 1}, load=8.0, cores=2, backends={"torch"}) is None
