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
