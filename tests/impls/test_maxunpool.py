import numpy as np
import pytest

import impls
from impls import maxpool2d, maxunpool
from impls.common import round_to_dtype, to_numpy
from impls.registry import NotApplicable, get_operator

# seed 002: minibatchsize 2, numfilters 3, numsamples 4, upsampfactor 5
SEED_CODE = np.arange(24).reshape(2, 3, 4).astype(np.float64)
SEED_POSITIONS = np.arange(24).reshape(2, 3, 4) % 5 + (np.arange(4) * 5).reshape(1, 1, -1)
SEED_PRINTED = np.array([
    [[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0],
     [0, 0, 0, 0, 4, 5, 0, 0, 0, 0, 0, 6, 0, 0, 0, 0, 0, 7, 0, 0],
     [0, 0, 0, 8, 0, 0, 0, 0, 0, 9, 10, 0, 0, 0, 0, 0, 11, 0, 0, 0]],
    [[0, 0, 12, 0, 0, 0, 0, 0, 13, 0, 0, 0, 0, 0, 14, 15, 0, 0, 0, 0],
     [0, 16, 0, 0, 0, 0, 0, 17, 0, 0, 0, 0, 0, 18, 0, 0, 0, 0, 0, 19],
     [20, 0, 0, 0, 0, 0, 21, 0, 0, 0, 0, 0, 22, 0, 0, 0, 0, 0, 23, 0]]], dtype=np.float64)
TOY = dict(form="1d", B=2, F=3, L=4, f=5)


def test_seed_positions_are_the_printed_ones():
    np.testing.assert_array_equal(SEED_POSITIONS[0, 0], [0, 6, 12, 18])
    np.testing.assert_array_equal(SEED_POSITIONS[1, 2], [0, 6, 12, 18])


def test_oracle_reproduces_the_seed_output():
    out = maxunpool.oracle({"values": SEED_CODE, "positions": SEED_POSITIONS}, TOY)
    np.testing.assert_array_equal(out, SEED_PRINTED)


@pytest.mark.parametrize("strat", [s for s in impls.all_strategies("maxunpool", "cpu")], ids=lambda s: s.name)
def test_every_strategy_reproduces_the_seed_output(strat):
    if strat.available():
        pytest.skip(strat.available())
    op = get_operator("maxunpool")
    inputs = op.to_backend({"values": SEED_CODE, "positions": SEED_POSITIONS}, strat.backend, "cpu", "float32")
    out = to_numpy(strat.prepare(inputs, TOY)())
    np.testing.assert_array_equal(out, SEED_PRINTED.astype(np.float32))


@pytest.mark.parametrize("name", ["pytensor_seed_row_loop", "pytensor_seed_flat_set", "pytensor_seed_broadcast"])
def test_a_kept_pytensor_function_is_never_used_for_another_output_size(name):
    """PyTensor's functions are kept per shape in the process (a sweep's
    rounds prepare a case four times); 9×9 and 8×8 planes both pool to 4×4,
    and each must get its own output size, whichever comes first."""
    strat = get_operator("maxunpool").strategies[name]
    if strat.available():
        pytest.skip(strat.available())
    op = get_operator("maxunpool")
    for H in (9, 8, 9):
        params = dict(form="2d", N=1, C=1, H=H, W=H, k=2)
        inputs = maxunpool.generate(params, "random", 3)
        out = to_numpy(strat.prepare(op.to_backend(inputs, strat.backend, "cpu", "float64"), params)())
        np.testing.assert_array_equal(out, maxunpool.oracle(inputs, params))


def test_generator_positions_are_distinct_and_inside_their_bins():
    for mode in ("random", "adversarial"):
        positions = maxunpool.generate(dict(form="1d", B=3, F=4, L=50, f=5), mode, 1)["positions"]
        bins = positions // 5
        np.testing.assert_array_equal(bins, np.broadcast_to(np.arange(50), positions.shape))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_public_entry_point_rejects_out_of_range_positions(backend):
    values, positions = SEED_CODE.copy(), SEED_POSITIONS.copy()
    positions[1, 2, 3] = 20
    if backend == "torch":
        import torch

        values, positions = torch.from_numpy(values), torch.from_numpy(positions)
    with pytest.raises(ValueError, match=r"positions: index 20 at \(1, 2, 3\) is outside \[0, 20\)"):
        maxunpool.maxunpool(values, positions, 20)
    positions[0, 0, 0] = -1
    with pytest.raises(ValueError, match="index -1"):
        maxunpool.maxunpool(values, positions, 20)


def test_public_entry_point_rejects_bad_shapes_and_dtypes():
    with pytest.raises(ValueError, match="differs from positions shape"):
        maxunpool.maxunpool(SEED_CODE, SEED_POSITIONS[..., :3], 20)
    with pytest.raises(ValueError, match="positions dtype float64"):
        maxunpool.maxunpool(SEED_CODE, SEED_POSITIONS.astype(float), 20)
    np.testing.assert_array_equal(maxunpool.maxunpool(SEED_CODE, SEED_POSITIONS, 20), SEED_PRINTED)


def test_form_parameters_are_validated():
    op = get_operator("maxunpool")
    with pytest.raises(ValueError, match="missing f"):
        op.validate(dict(form="1d", B=1, F=1, L=3))
    with pytest.raises(ValueError, match="belongs to the other form"):
        op.validate(dict(form="1d", B=1, F=1, L=3, f=2, k=2))


POOL_WITH_INDICES = [s for s in impls.all_strategies("maxpool2d", "cpu") if s.returns == "values+indices"]
UNPOOL = impls.all_strategies("maxunpool", "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["random", "adversarial"])
def test_round_trip_every_pool_unpool_pairing(mode):
    """unpool(pool(x)) keeps exactly the window maxima at their positions, zeros elsewhere."""
    params = dict(N=2, C=3, H=7, W=9, k=2)
    x = round_to_dtype(maxpool2d.generate(params, mode, 5)["x"], "float32")
    ref_values, _ = maxpool2d.oracle({"x": x}, params)
    pool_op, unpool_op = get_operator("maxpool2d"), get_operator("maxunpool")
    unpool_params = dict(form="2d", **params)
    for pool in POOL_WITH_INDICES:
        values, indices = to_numpy(pool.prepare(pool_op.to_backend({"x": x}, pool.backend, "cpu", "float32"), params)())
        expected = np.zeros(x.shape, dtype=np.float32)
        flat = expected.reshape(2, 3, -1)
        np.put_along_axis(flat, indices.reshape(2, 3, -1), values.reshape(2, 3, -1), axis=-1)
        # the kept values are the window maxima, placed on an element that holds them
        kept = np.take_along_axis(x.reshape(2, 3, -1), indices.reshape(2, 3, -1), -1).reshape(values.shape)
        assert np.array_equal(kept, ref_values, equal_nan=True), pool.name
        for unpool in UNPOOL:
            if unpool.available():
                continue
            inputs = unpool_op.to_backend({"values": values.astype(np.float64), "positions": indices},
                                          unpool.backend, "cpu", "float32")
            try:
                out = to_numpy(unpool.prepare(inputs, unpool_params)())
            except NotApplicable:
                continue
            assert out.shape == x.shape, (pool.name, unpool.name)
            assert np.array_equal(out, expected, equal_nan=True), (pool.name, unpool.name)
            assert np.count_nonzero(out != 0) <= values.size


# ------------------------------------- the unpool precondition (issue 13, class 6)
def scattered_cases():
    extras = get_operator("maxunpool").extra_checks()
    return [extra for extra in extras if "scattered" in extra["modes"]]


def test_scattered_positions_are_distinct_in_range_and_mostly_outside_their_windows():
    assert scattered_cases(), "maxunpool has no check case with positions outside their windows"
    for extra in scattered_cases():
        params = extra["params"]
        inputs = maxunpool.generate(params, "scattered", 0)
        pooled, out_shape = maxunpool.shapes(params)
        positions = inputs["positions"].reshape(pooled[0] * pooled[1], -1)
        P = int(np.prod(out_shape[2:]))
        assert inputs["values"].shape == pooled and inputs["positions"].shape == pooled
        assert ((positions >= 0) & (positions < P)).all()
        assert all(len(set(row)) == len(row) for row in positions.tolist())
        # in its own window/bin: what maxpool2d could have produced
        if params["form"] == "1d":
            own = positions // params["f"] == np.arange(params["L"])
        else:
            k, W, w = params["k"], params["W"], params["W"] // params["k"]
            slot = np.arange(positions.shape[1])
            own = ((positions // W) // k == slot // w) & ((positions % W) // k == slot % w) & (positions % W < w * k)
        assert (~own).mean() > 0.5
        assert np.signbit(inputs["values"][inputs["values"] == 0]).any()  # -0.0 among the values


def test_gather_formulation_declares_the_precondition_and_list_shows_it():
    from rich.console import Console

    from harness.presenting.tables import strategies_table

    strategies = get_operator("maxunpool").strategies
    assert strategies["triton_gather"].requires == (maxunpool.POSITIONS_IN_WINDOW,)
    # every scatter formulation handles any distinct positions: it declares nothing
    assert [s.name for s in strategies.values() if s.requires] == ["triton_gather"]
    console = Console(width=250, record=True)
    console.print(strategies_table(strategies.values(), width=250))
    text = console.export_text()
    assert "requires" in text and "positions-in-window" in text


def test_the_gather_formulation_really_misses_scattered_positions():
    """Why it declares the precondition: a position outside its own window is
    silently not written."""
    strat = get_operator("maxunpool").strategies["triton_gather"]
    if strat.available() or not strat.runs_on("cpu"):
        pytest.skip("triton under the interpreter is not available")
    from harness.measuring.check import check_strategy, reference

    params = scattered_cases()[0]["params"]
    verdict = check_strategy(strat, params, "float32", "cpu", reference("maxunpool", params, "float32", "scattered", 0))
    assert verdict.status == "mismatch"


def test_check_plan_keeps_declared_strategies_out_of_scattered_cases_only():
    from harness.base.config import Case
    from harness.measuring.check import check_plan

    class Config:
        class check:
            max_bytes = 0

    cases = [Case(op="maxunpool", strategy=name, device="cpu", dtype="float32",
                  params=tuple(sorted(dict(form="1d", B=2, F=3, L=4, f=5).items())))
             for name in ("triton_gather", "triton_scatter", "numpy_put_along_axis")]
    items = check_plan(Config, cases)
    modes = {name: {i.mode for i in items if i.strategy.name == name} for name in
             ("triton_gather", "triton_scatter", "numpy_put_along_axis")}
    assert modes["triton_gather"] == {"random", "adversarial"}
    assert modes["triton_scatter"] == modes["numpy_put_along_axis"] == {"random", "adversarial", "scattered"}


# ------------------------------------ CUDA's 32-bit unpool indexing (issue 13, class 1)
class FakeCudaTensor:
    """Stands in for a CUDA tensor (none is needed): prepare must refuse the
    case from its parameters and device alone, before touching the data."""

    @property
    def device(self):
        import torch

        return torch.device("cuda")

    def __getattr__(self, name):
        raise AssertionError(f"prepare touched the tensor ({name}) before refusing the case")


@pytest.mark.parametrize("name", ["torch_max_unpool2d", "torch_max_unpool1d"])
@pytest.mark.parametrize("params", [dict(form="1d", B=64, F=64, L=2**17, f=5),  # 2**32.3 outputs
                                    dict(form="1d", B=1, F=1, L=2**29, f=4),  # one row of 2**31
                                    dict(form="2d", N=8, C=64, H=2048, W=2048, k=2)],
                         ids=["1d-many-rows", "1d-one-row", "2d"])
def test_torch_unpool_builtins_refuse_2_31_elements_on_cuda_before_launching(name, params):
    strat = get_operator("maxunpool").strategies[name]
    if name == "torch_max_unpool1d" and params["form"] == "2d":
        pytest.skip("max_unpool1d takes the 1-D form only")
    with pytest.raises(NotApplicable, match="2\\*\\*31"):
        strat.prepare({"values": FakeCudaTensor(), "positions": FakeCudaTensor()}, params)


@pytest.mark.parametrize("name", ["torch_max_unpool2d", "torch_max_unpool1d"])
def test_torch_unpool_builtins_accept_large_cases_off_cuda_and_small_ones_on_it(name):
    import torch

    strat = get_operator("maxunpool").strategies[name]
    big = dict(form="1d", B=64, F=64, L=2**17, f=5)
    meta = {"values": torch.empty(64, 64, 2**17, device="meta"),
            "positions": torch.empty(64, 64, 2**17, dtype=torch.int64, device="meta")}
    assert callable(strat.prepare(meta, big))  # prepared, not run: no memory is touched
    small = dict(form="1d", B=2, F=3, L=4, f=5)
    assert maxunpool.refuse_cuda_int32_overflow(torch.device("cuda"), small, name) is None
    edge = dict(form="1d", B=1, F=1, L=2**31 - 1, f=1)
    assert maxunpool.refuse_cuda_int32_overflow(torch.device("cuda"), edge, name) is None
