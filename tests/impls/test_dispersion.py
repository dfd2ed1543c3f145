import numpy as np
import pytest
import torch

import impls
from harness.measuring.check import reference
from impls import dispersion, dispersion_pinv
from impls.common import compare_relative, to_numpy
from impls.registry import get_operator

TOY_X = np.array([[1, 1, 1], [2, 2, 2], [3, 3, 3]], dtype=np.float64).reshape(1, 3, 1, 3)
TOY_MASK = np.ones((1, 3))
TOY = dict(B=1, C=3, H=1, W=3, S=1)


def test_oracle_reproduces_the_seed_toy_example():
    y = dispersion.oracle({"x": TOY_X, "mask": TOY_MASK}, TOY)
    np.testing.assert_array_equal(y.ravel(), [1, 3, 6, 5, 3])


@pytest.mark.parametrize("strat", impls.all_strategies("dispersion", "cpu"), ids=lambda s: s.name)
def test_every_strategy_reproduces_the_seed_toy_example(strat):
    if strat.available():
        pytest.skip(strat.available())
    inputs = get_operator("dispersion").to_backend({"x": TOY_X, "mask": TOY_MASK}, strat.backend, "cpu", "float32")
    out = to_numpy(strat.prepare(inputs, TOY)())
    np.testing.assert_array_equal(out.ravel(), [1, 3, 6, 5, 3])


def test_alpha_counts_covering_channels():
    np.testing.assert_array_equal(dispersion.alpha(3, 3, 1), [1, 2, 3, 2, 1])
    np.testing.assert_array_equal(dispersion.alpha(2, 2, 3), [1, 1, 0, 1, 1])


FORWARD = impls.all_strategies("dispersion", "cpu")
INVERSE = impls.all_strategies("dispersion_pinv", "cpu")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_identity_for_every_pairing(dtype):
    """dispersion(dispersion_pinv(y)) == y for y in the range of dispersion (the seed's MAE test)."""
    params = dict(B=2, C=6, H=5, W=9, S=2)
    forward_op, inverse_op = get_operator("dispersion"), get_operator("dispersion_pinv")
    ref = reference("dispersion", params, dtype, "random", 11)
    y = dispersion.oracle(ref.inputs, params)  # in the range of the forward operator
    mask = ref.inputs["mask"]
    tol = {"float32": 1e-5, "float64": 1e-12}[dtype]
    for inverse in INVERSE:
        if inverse.available() or dtype not in inverse.dtypes:
            continue
        x = to_numpy(inverse.prepare(inverse_op.to_backend({"y": y, "mask": mask}, inverse.backend, "cpu", dtype),
                                     params)())
        for forward in FORWARD:
            if forward.available() or dtype not in forward.dtypes:
                continue
            inputs = forward_op.to_backend({"x": x.astype(np.float64), "mask": mask}, forward.backend, "cpu", dtype)
            y_again = to_numpy(forward.prepare(inputs, params)()).astype(np.float64)
            rel = np.linalg.norm(y_again - y) / np.linalg.norm(y)
            assert rel <= 4 * tol, f"{inverse.name} then {forward.name}: relative error {rel:.3g}"


def test_public_entry_points_validate():
    x = np.ones((1, 3, 4, 5))
    with pytest.raises(ValueError, match="S=-1"):
        dispersion.dispersion(x, np.ones((4, 5)), -1)
    with pytest.raises(ValueError, match=r"mask shape \(4, 6\) does not match x's plane \(4, 5\)"):
        dispersion.dispersion(x, np.ones((4, 6)), 1)
    y = dispersion.dispersion(x, np.ones((4, 5)), 1)
    assert y.shape == (1, 1, 4, 7)
    with pytest.raises(ValueError, match="mask has zeros"):
        dispersion_pinv.dispersion_pinv(y, np.zeros((4, 5)), 1, 3)
    with pytest.raises(ValueError, match=r"y shape \(1, 1, 4, 7\): expected \(B, 1, 4, 9\)"):
        dispersion_pinv.dispersion_pinv(y, np.ones((4, 5)), 2, 3)
    with pytest.raises(ValueError, match="C=0"):
        dispersion_pinv.dispersion_pinv(y, np.ones((4, 5)), 1, 0)
    x_back = dispersion_pinv.dispersion_pinv(torch.from_numpy(y), torch.ones(4, 5, dtype=torch.float64), 1, 3)
    np.testing.assert_allclose(dispersion.dispersion(x_back.numpy(), np.ones((4, 5)), 1), y)


def test_negative_step_is_a_config_error():
    with pytest.raises(ValueError, match="S=-2"):
        get_operator("dispersion").validate(dict(B=1, C=2, H=2, W=2, S=-2))


def test_a_lossy_strategy_is_reported_inexact(planted):
    """Rounds its inputs to bfloat16 first: over the float32 bound, under the wrong-answer bound."""
    def bf16_loop(inputs, params):
        x, mask = inputs["x"], inputs["mask"]
        inner = dispersion.seed_loop({"x": x.to(torch.bfloat16).float(), "mask": mask}, params)
        return inner

    strat = planted("dispersion", "lossy_bf16", bf16_loop, backend="torch")
    from harness.measuring.check import check_strategy

    params = dict(B=2, C=8, H=8, W=8, S=1)
    verdict = check_strategy(strat, params, "float32", "cpu", reference("dispersion", params, "float32", "random", 0))
    assert verdict.status == "inexact"
    assert 1e-5 < verdict.rel_err < 5e-2
    assert "over the float32 bound" in verdict.message


def test_a_wrong_shift_is_a_mismatch_not_inexact(planted):
    def wrong(inputs, params):
        inner = dispersion.seed_loop(inputs, params)
        return lambda: torch.roll(inner(), 1, dims=-1)

    strat = planted("dispersion", "rolled", wrong, backend="torch")
    from harness.measuring.check import check_strategy

    params = dict(B=2, C=4, H=6, W=8, S=2)
    verdict = check_strategy(strat, params, "float32", "cpu", reference("dispersion", params, "float32", "random", 0))
    assert verdict.status == "mismatch"


@pytest.mark.parametrize("C", [56, 512])
def test_a_lost_channel_is_a_mismatch_in_float32(planted, C):
    """One channel of C dropped is an error of 1.5e-2 (C=512) to 4.6e-2
    (C=56): rounding never does that in float32, so it is wrong, not inexact."""
    def drops_last_channel(inputs, params):
        x = inputs["x"].clone()
        x[:, -1] = 0
        return dispersion.seed_loop({"x": x, "mask": inputs["mask"]}, params)

    strat = planted("dispersion", "lost_channel", drops_last_channel, backend="torch")
    from harness.measuring.check import check_strategy

    params = dict(B=1, C=C, H=4, W=16, S=1)
    verdict = check_strategy(strat, params, "float32", "cpu", reference("dispersion", params, "float32", "random", 0))
    assert verdict.status == "mismatch", (verdict.status, verdict.rel_err)


def test_relative_error_rule_by_dtype():
    ref = np.ones(100)
    assert compare_relative("y", (ref * (1 + 1e-6)).astype(np.float32), ref, "float32").status == "ok"
    assert compare_relative("y", (ref * (1 + 1e-3)).astype(np.float32), ref, "float32").status == "inexact"
    assert compare_relative("y", (ref * 1.5).astype(np.float32), ref, "float32").status == "mismatch"
    assert compare_relative("y", ref.astype(np.float16), ref, "float16").status == "ok"
    assert compare_relative("y", ref[:50].astype(np.float32), ref, "float32").status == "mismatch"


# --------------------------------- half-type sums of many channels (issue 13, class 5)
def test_check_sums_hundreds_of_channels_in_both_half_types():
    extras = get_operator("dispersion").extra_checks()
    dtypes = {d for e in extras for d in e["dtypes"]}
    assert dtypes == {"float16", "bfloat16"}
    terms = []
    for extra in extras:
        p = extra["params"]
        # how many channels land on the busiest output column
        terms.append(max(dispersion.alpha(p["C"], p["W"], p["S"])))
    assert max(terms) >= 256, terms
    assert {e["params"]["S"] for e in extras} >= {0, 1}


MANY = dict(B=1, C=300, H=2, W=300, S=1)  # 300 channels over 300 columns: up to 300 terms per output


def _verdict(name, dtype, op="dispersion", params=MANY):
    from harness.measuring.check import check_strategy

    strat = get_operator(op).strategies[name]
    return check_strategy(strat, params, dtype, "cpu", reference(op, params, dtype, "random", 0))


def test_a_bfloat16_accumulator_over_300_channels_is_reported_inexact_with_its_error(planted):
    """The class the half-type check cases exist for: the seed's loop with y
    in x's dtype (what this port did before it followed the seed's float32
    zeros) sums 300 terms in bfloat16."""
    def bf16_sum(inputs, params):
        x, mask, S = inputs["x"], inputs["mask"], params["S"]

        def run():
            B, C, H, W = x.shape
            z = x * mask
            y = torch.zeros(B, 1, H, W + (C - 1) * S, dtype=x.dtype)
            for i in range(C):
                y[..., i * S:i * S + W] += z[:, i:i + 1]
            return y
        return run

    planted("dispersion", "bf16_accumulator", bf16_sum, backend="torch", dtypes=("bfloat16",))
    verdict = _verdict("bf16_accumulator", "bfloat16")
    assert verdict.status == "inexact"
    assert 1e-2 < verdict.rel_err < 5e-2
    assert "over the bfloat16 bound" in verdict.message


def test_the_seed_loop_sums_in_float32_as_the_seeds_default_dtype_zeros_do():
    """The seed's ``torch.zeros(...)`` is float32: half-type slice-adds promote into it."""
    verdict = _verdict("seed_loop", "bfloat16")
    assert verdict.status == "ok", verdict.message
    assert get_operator("dispersion").strategies["seed_loop"].prepare(
        {"x": torch.ones(1, 2, 1, 3, dtype=torch.bfloat16), "mask": torch.ones(1, 3, dtype=torch.bfloat16)},
        dict(B=1, C=2, H=1, W=3, S=1))().dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["torch_fold", "torch_index_add", "torch_shift_then_sum"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_added_torch_strategies_sum_half_types_wider(name, dtype):
    verdict = _verdict(name, dtype)
    assert verdict.status == "ok", verdict.message
    assert verdict.rel_err < 5e-3


def test_torch_fold_keeps_its_dtype_and_float32_path():
    strat = get_operator("dispersion").strategies["torch_fold"]
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.ones(1, 3, 2, 4, dtype=dtype)
        out = strat.prepare({"x": x, "mask": torch.ones(2, 4, dtype=dtype)}, dict(B=1, C=3, H=2, W=4, S=1))()
        assert out.dtype == dtype and out.shape == (1, 1, 2, 6)
