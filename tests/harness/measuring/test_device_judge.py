"""The check judged on the device (SCATTERBENCH_JUDGE=device: the one
oracle and compare of each operator run on torch float64 CPU tensors,
standing in for a GPU) against the host's numpy judge: the same verdicts,
bit for bit, over configs/quick.yaml's cases, the oracle made once per case,
and the memory guard counting it."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from harness.base.config import expand, load_config
from harness.measuring import check, memory
from impls import status
from impls.backends import get_backend
from impls.registry import get_operator

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def fresh_references():
    check.clear_references()
    yield
    check.clear_references()


def quick_items() -> list:
    """configs/quick.yaml's check plan: every config point (both input modes,
    every training mode it asks for) and each operator's reference strategy's
    adversarial items, for the strategies that do not compile (each compile
    would be paid twice here for no more coverage of the judge)."""
    config = load_config(ROOT / "configs" / "quick.yaml")
    points = {case.params for case in expand(config)}
    keep, adversarial = [], 0
    for item in check.check_plan(config, expand(config)):
        strat = item.strategy
        if item.gradcheck or strat.quick_check or get_backend(strat.backend).compiles or strat.available():
            continue
        if item.params in points:
            keep.append(item)
        elif strat.name == get_operator(strat.op).reference:
            adversarial += 1
            if adversarial % 3 == 1:  # a third of them, every layout and input mode among them
                keep.append(item)
    return keep


def verdicts(items, monkeypatch, judge: str) -> list:
    monkeypatch.setenv(check.JUDGE_ENV, judge)
    check.clear_references()
    return [check.run_one_check(item, seed=0) for item in items]


@pytest.mark.slow  # 100 s on the loaded 2-core VM: 151 items judged twice
def test_the_device_judge_gives_the_host_judges_verdicts_over_quick_yaml(monkeypatch):
    items = quick_items()
    assert len({item.strategy.op for item in items}) == 4 and len({item.training for item in items}) >= 2
    host, device = verdicts(items, monkeypatch, "numpy"), verdicts(items, monkeypatch, "device")
    for item, on_host, on_device in zip(items, host, device):
        assert (on_host.status, on_host.message, on_host.differences) == \
            (on_device.status, on_device.message, on_device.differences), item.label
        for a, b in ((on_host.max_abs_err, on_device.max_abs_err), (on_host.rel_err, on_device.rel_err)):
            assert (math.isnan(a) and math.isnan(b)) or a == b, item.label
    assert {v.status for v in host} >= {status.OK}


def test_the_device_judge_finds_what_the_host_finds_in_a_wrong_strategy(monkeypatch, planted):
    """A strategy taking the last maximum on ties: the same failure both ways."""
    import numpy as np

    from impls import maxpool2d

    def last_max(inputs, params):
        x = inputs["x"]

        def run():
            values, _ = maxpool2d.oracle({"x": x.astype(np.float64)}, params)
            windows = maxpool2d._windows(x.astype(np.float64), params["k"])[..., ::-1]
            last = windows.shape[-1] - 1 - np.argmax(windows == values[..., None], axis=-1)
            k, W = params["k"], x.shape[3]
            rows = np.arange(values.shape[2])[:, None] * k + last // k
            cols = np.arange(values.shape[3])[None, :] * k + last % k
            return values.astype(x.dtype), (rows * W + cols).astype(np.int64)

        return run

    strat = planted("maxpool2d", "last_max_device_judge", last_max, ties="first")
    items = check.adversarial_items(strat, "cpu", "float32")
    host, device = verdicts(items, monkeypatch, "numpy"), verdicts(items, monkeypatch, "device")
    assert [(v.status, v.message) for v in host] == [(v.status, v.message) for v in device]
    assert any(v.status == status.MISMATCH and "indices (first ties)" in v.message for v in device)


def test_a_case_oracle_is_made_once_for_all_its_strategies_and_modes(monkeypatch):
    op = get_operator("dispersion")
    calls = {"forward": 0, "backward": 0}
    forward, backward = op.oracle, op.gradient.oracle

    def count(kind, fn):
        def counted(*args):
            calls[kind] += 1
            return fn(*args)
        return counted

    # the Gradient first: declaring one runs the forward oracle once to check it (registry.check_gradient)
    monkeypatch.setattr(op, "gradient", replace(op.gradient, oracle=count("backward", backward)))
    monkeypatch.setattr(op, "oracle", count("forward", forward))
    monkeypatch.setenv(check.JUDGE_ENV, "device")
    params = dict(B=2, C=3, H=4, W=5, S=1)
    strategies = [op.strategies[name] for name in ("seed_loop", "numpy_loop", "torch_index_add")]
    for mode in ("forward", "backward", "forward+backward"):
        for strat in strategies:
            for layout in ("contiguous", "noncontiguous"):
                item = check.CheckItem(strat, tuple(sorted(params.items())), "float32", "cpu", "random", layout,
                                       training=mode)
                assert check.run_one_check(item, seed=0).status == status.OK
    assert calls == {"forward": 1, "backward": 1}


def test_the_sweep_reference_is_made_on_the_device_once_for_its_training_modes(monkeypatch):
    import torch

    monkeypatch.setenv(check.JUDGE_ENV, "device")
    op = get_operator("maxpool2d")
    calls = []
    monkeypatch.setattr(op, "oracle", lambda inputs, params, real=op.oracle: calls.append(1)
                        or real(inputs, params))
    params = dict(N=1, C=2, H=6, W=6, k=2)
    forward = check.reference("maxpool2d", params, "float32", "random", 0, device="cpu")
    backward = check.reference("maxpool2d", params, "float32", "random", 0, "backward", reuse=forward, device="cpu")
    assert forward.judged_on == "cpu" and torch.is_tensor(forward.expected[0])
    assert torch.is_tensor(backward.expected_grad) and torch.is_tensor(backward.device_grad)
    assert backward.expected is forward.expected and len(calls) == 1
    with pytest.raises(ValueError, match="judged on"):
        monkeypatch.setenv(check.JUDGE_ENV, "numpy")
        check.reference("maxpool2d", params, "float32", "random", 0, "backward", reuse=forward, device="cpu")


def test_cpu_cases_are_judged_by_numpy_and_device_cases_on_their_device(monkeypatch):
    op = get_operator("maxunpool")
    monkeypatch.delenv(check.JUDGE_ENV, raising=False)
    assert check.judge_device("cpu", op) is None and check.judge_device("cuda", op) == "cuda"
    monkeypatch.setenv(check.JUDGE_ENV, "numpy")
    assert check.judge_device("cuda", op) is None
    monkeypatch.setenv(check.JUDGE_ENV, "gpu")
    with pytest.raises(ValueError, match="SCATTERBENCH_JUDGE='gpu': expected one of auto, numpy, device"):
        check.judge_device("cuda", op)


def test_the_device_keeps_few_references(monkeypatch):
    """Past DEVICE_REFERENCE_BYTES the oldest device reference is freed before the next is made."""
    monkeypatch.setenv(check.JUDGE_ENV, "device")
    op = get_operator("dispersion")
    sizes = [dict(B=1, C=2, H=4, W=n, S=1) for n in (5, 6, 7)]
    monkeypatch.setattr(check, "DEVICE_REFERENCE_BYTES",
                        memory.reference_bytes(op, sizes[1]) + memory.reference_bytes(op, sizes[2]))
    for params in sizes:
        check.cached_reference("dispersion", params, "float32", "random", 0, device="cpu")
    kept = [dict(key[1]) for key in check._REFERENCES]
    assert kept == sizes[1:]


def test_the_memory_guard_counts_the_reference_where_it_is_judged(monkeypatch):
    """Judged on a device, the device must hold the reference and the host its inputs."""
    op = get_operator("dispersion")
    strat = op.strategies["seed_loop"]
    params = dict(B=2, C=3, H=4, W=5, S=1)
    item = check.CheckItem(strat, tuple(sorted(params.items())), "float32", "cpu", "random", "contiguous",
                           training="backward")
    need = memory.needed_bytes(op, strat, params, "float32", "backward")
    assert need > memory.needed_bytes(op, strat, params, "float32")  # the gradients are counted
    monkeypatch.setenv(check.JUDGE_ENV, "device")
    monkeypatch.setattr(memory, "free_bytes", lambda backend, device: need)  # under the headroom
    monkeypatch.setattr(memory, "host_free_bytes", lambda: 1 << 40)
    assert "on cpu" in check.check_memory_guard(item)
    monkeypatch.setattr(memory, "free_bytes", lambda backend, device: 1 << 40)
    monkeypatch.setattr(memory, "host_free_bytes", lambda: memory.reference_bytes(op, params, "backward"))
    assert "on the host" in check.check_memory_guard(item)
    monkeypatch.setattr(memory, "host_free_bytes", lambda: 1 << 40)
    assert check.check_memory_guard(item) is None


def test_a_compiled_strategy_compiles_once_per_shape_dtype_and_layout_not_per_item(monkeypatch):
    """The check prepares a torch.compile strategy once per adversarial item;
    the random and adversarial inputs of one shape, dtype and layout share
    one graph (counted with a stand-in for torch.compile)."""
    import torch

    from impls import registry

    compiles, resets = [], []
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic: compiles.append(fn) or fn)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: resets.append(1))
    monkeypatch.setattr(registry, "_COMPILED", {})
    monkeypatch.setattr(registry, "COMPILED_KEPT", 2)  # two shapes per check case: a reset between cases
    strat = get_operator("maxpool2d").strategies["torch_compile_reshape_argmax"]
    items = check.adversarial_items(strat, "cpu", "float32")
    assert all(check.run_one_check(item, seed=0).status == status.OK for item in items)
    shapes = {(item.params, item.dtype, item.layout) for item in items}
    assert len(items) > len(shapes) and len(compiles) == len(shapes)
    assert len(shapes) == 4 and len(resets) == 1  # reset before Dynamo's recompile limit


def test_compiled_reuses_a_graph_only_for_the_same_function_and_specialisation(monkeypatch):
    import torch

    from impls import registry

    compiles = []
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic: compiles.append(fn) or fn)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    monkeypatch.setattr(registry, "_COMPILED", {})

    def double(x, k):
        return x * k

    def triple(x, k):
        return x * 3 * k

    a, b = torch.ones(4), torch.full((4,), 2.0)
    assert registry.compiled(double, a, 1)().tolist() == [1.0] * 4
    assert registry.compiled(double, b, 1)().tolist() == [2.0] * 4  # same graph, new inputs
    assert len(compiles) == 1
    registry.compiled(double, b, 2)  # another constant
    registry.compiled(double, torch.ones(5), 1)  # another shape
    registry.compiled(double, torch.ones(8)[::2], 1)  # other strides
    registry.compiled(double, torch.ones(4, requires_grad=True), 1)  # a leaf for autograd
    registry.compiled(triple, a, 1)  # another function
    assert len(compiles) == 6

    def scaled(x, ks):
        return x * ks[0]

    registry.compiled(scaled, a, [1])
    registry.compiled(scaled, a, [1])  # an argument that cannot be keyed: compiled afresh each time
    assert len(compiles) == 8


def test_device_checks_get_a_worker_per_four_cores_up_to_four_unless_told(monkeypatch):
    from harness.measuring import prefetch

    strat = get_operator("maxpool2d").strategies["torch_max_pool2d"]
    on_gpu = [(strat, "cuda", dtype, "forward") for dtype in ("float16", "float32", "bfloat16", "float64")] * 3
    monkeypatch.delenv(prefetch.DEVICE_WORKERS_ENV, raising=False)
    assert prefetch.workers_for(on_gpu, cores=16) == 4  # the GPU machines lent so far: 16 cores
    assert prefetch.workers_for(on_gpu, cores=64) == 4 and prefetch.workers_for(on_gpu, cores=8) == 2
    assert prefetch.workers_for(on_gpu, cores=2) == 1
    assert prefetch.workers_for(on_gpu + [(strat, "cpu", "float32", "forward")], cores=16) == 13  # the cores'
    monkeypatch.setenv(prefetch.DEVICE_WORKERS_ENV, "4")
    assert prefetch.workers_for(on_gpu, cores=16) == 4
    assert prefetch.workers_for(on_gpu, cores=2) == 2
    monkeypatch.setenv(prefetch.DEVICE_WORKERS_ENV, "none")
    with pytest.raises(ValueError, match="SCATTERBENCH_DEVICE_CHECK_WORKERS='none': expected a whole number"):
        prefetch.workers_for(on_gpu, cores=16)


@pytest.mark.parametrize("spoil", ("none", "value", "sign of zero"))
def test_inputs_of_a_case_judged_on_its_device_are_watched_there(monkeypatch, planted, spoil):
    """A torch strategy changing its input (one value, or a zero's sign
    only) is input-modified, its inputs' snapshots copied on the device."""
    import torch

    from impls import maxpool2d

    def scribbler(inputs, params):
        x = inputs["x"]
        answer = maxpool2d.torch_max_pool2d_indices(inputs, params)
        zero = int(torch.nonzero(x.reshape(-1) == 0)[0])
        flipped = -x.reshape(-1)[zero]  # the same every call (4 flips would undo themselves)

        def run():
            out = tuple(a.clone() for a in answer())
            if spoil == "value":
                x.view(-1)[5] = 7.0
            elif spoil == "sign of zero":
                x.view(-1)[zero] = flipped
            return out
        return run

    monkeypatch.setenv(check.JUDGE_ENV, "device")
    strat = planted("maxpool2d", f"scribbler_{spoil.replace(' ', '_')}", scribbler, backend="torch",
                    returns="values+indices", ties="first")
    params = dict(N=2, C=3, H=8, W=8, k=2)
    ref = check.reference("maxpool2d", params, "float32", "adversarial", 0, device="cpu")
    tried = check.attempt(strat, ref, "float32", "cpu")
    assert all(shot.on_device is not None for shot in tried.prepared.input_snapshots.values())
    if spoil == "none":
        assert tried.verdict.status == status.OK
    else:
        assert tried.verdict.status == status.INPUT_MODIFIED and "overwrote its input 'x'" in tried.verdict.message
