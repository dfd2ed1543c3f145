"""Strategies built to fool the harness: each one must be caught."""

import numpy as np
import pytest

from harness.measuring.check import cached_reference, check_strategy, reference
from impls import maxpool2d
from impls.registry import every_case
from tests.helpers import scatterbench

PARAMS = dict(N=2, C=3, H=7, W=9, k=2)


def verdict_of(strat, mode="adversarial", dtype="float32", layout="contiguous", params=PARAMS):
    ref = reference(strat.op, params, dtype, mode, 0)
    return check_strategy(strat, params, dtype, "cpu", ref, layout)


def oracle_based(transform):
    """A strategy that computes the right answer in float64, then spoils it."""
    def prepare(inputs, params):
        x = inputs["x"]
        return lambda: transform(*maxpool2d.oracle({"x": x.astype(np.float64)}, params), x)
    return prepare


def test_the_honest_oracle_strategy_passes(planted):
    strat = planted("maxpool2d", "honest", oracle_based(lambda v, i, x: (v.astype(x.dtype), i)),
                    returns="values+indices", ties="first")
    for mode in ("random", "adversarial"):
        assert verdict_of(strat, mode).status == "ok"


def test_last_maximum_on_ties_is_caught(planted):
    def last_max(inputs, params):
        x, k = inputs["x"], params["k"]
        N, C, H, W = x.shape
        h, w = H // k, W // k
        win = x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).transpose(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, k * k)
        rev = win[..., ::-1].argmax(-1)
        arg = k * k - 1 - rev
        values = np.take_along_axis(win, arg[..., None], -1)[..., 0]
        idx = (np.arange(h)[:, None] * k + arg // k) * W + np.arange(w)[None] * k + arg % k
        return lambda: (values, idx)

    strat = planted("maxpool2d", "last_max", last_max, returns="values+indices", ties="first")
    verdict = verdict_of(strat)
    assert verdict.status == "mismatch" and "indices (first ties)" in verdict.message
    # Declared honestly as ties="any", the same strategy is fine.
    strat_any = planted("maxpool2d", "last_max_any", last_max, returns="values+indices", ties="any")
    assert verdict_of(strat_any).status == "ok"


def test_index_pointing_outside_its_window_is_caught_even_with_any_ties(planted):
    def shifted(values, indices, x):
        # an equal value elsewhere in the plane is not good enough
        wrong = indices.copy()
        wrong[0, 0, 0, 0] = indices[0, 0, 0, 1]
        return values.astype(x.dtype), wrong
    x_params = dict(N=1, C=1, H=2, W=4, k=2)
    strat = planted("maxpool2d", "wrong_window", oracle_based(shifted), returns="values+indices", ties="any")
    planted_x = {"x": np.array([[[[5, 0, 5, 0], [0, 0, 0, 0]]]], dtype=np.float64)}
    from harness.measuring.check import Reference
    ref = Reference(planted_x, maxpool2d.oracle(planted_x, x_params), params=x_params)
    assert check_strategy(strat, x_params, "float32", "cpu", ref).status == "mismatch"


def test_an_index_in_the_next_window_is_caught_where_k_does_not_divide_the_plane(planted):
    """H=8, k=3: two windows of rows 0-2 and 3-5 (rows 6-7 are dropped). An
    index on row 3 belongs to the second window even though H // h is 4."""
    def next_window(values, indices, x):
        wrong = indices.copy()
        wrong[0, 0, 0, 0] = 3 * 8  # row 3, column 0: equal to window (0, 0)'s maximum, but outside it
        return values.astype(x.dtype), wrong
    x_params = dict(N=1, C=1, H=8, W=8, k=3)
    plane = np.zeros((1, 1, 8, 8))
    plane[0, 0, 0, 0] = plane[0, 0, 3, 0] = 5.0
    planted_x = {"x": plane}
    from harness.measuring.check import Reference
    strat = planted("maxpool2d", "next_window", oracle_based(next_window), returns="values+indices", ties="any")
    ref = Reference(planted_x, maxpool2d.oracle(planted_x, x_params), params=x_params)
    verdict = check_strategy(strat, x_params, "float32", "cpu", ref)
    assert verdict.status == "mismatch" and "1 wrong" in verdict.message
    # And right answers pass: H // h (4 here, 6 for H=6, k=5) put correct indices in the wrong window.
    honest = planted("maxpool2d", "honest_any", oracle_based(lambda v, i, x: (v.astype(x.dtype), i)),
                     returns="values+indices", ties="any")
    for params in (x_params, dict(N=1, C=2, H=6, W=13, k=5)):
        for mode in ("random", "adversarial"):
            assert verdict_of(honest, mode, params=params).status == "ok", (params, mode)


def test_cropped_width_in_indices_is_caught(planted):
    def cropped_width(values, indices, x):
        W = x.shape[-1]
        w_crop = (W // 2) * 2
        return values.astype(x.dtype), (indices // W) * w_crop + indices % W
    strat = planted("maxpool2d", "cropped_w", oracle_based(cropped_width), returns="values+indices", ties="first")
    assert verdict_of(strat, "random").status == "mismatch"


@pytest.mark.parametrize("spoil,expected", [
    (lambda v, i, x: (v.astype(x.dtype), i.astype(np.int32)), "dtype int32, expected int64"),
    (lambda v, i, x: (v, i), "dtype float64, expected float32"),
    (lambda v, i, x: (v.astype(x.dtype)[..., :-1], i[..., :-1]), "shape"),
    (lambda v, i, x: (np.nextafter(v.astype(x.dtype), np.float32(np.inf)), i), "values"),
    (lambda v, i, x: (np.zeros_like(v, dtype=x.dtype), i), "values"),
    (lambda v, i, x: v.astype(x.dtype), "expected (values, indices)"),
])
def test_spoiled_outputs_are_caught(planted, spoil, expected):
    strat = planted("maxpool2d", "spoiled", oracle_based(spoil), returns="values+indices", ties="first")
    verdict = verdict_of(strat, "random")
    assert verdict.status == "mismatch"
    assert expected in verdict.message


def test_nan_must_be_reported_as_nan(planted):
    def nan_as_max_finite(values, indices, x):
        return np.nan_to_num(values.astype(x.dtype), nan=3.0), indices
    strat = planted("maxpool2d", "nan_dropper", oracle_based(nan_as_max_finite), returns="values+indices", ties="first")
    assert verdict_of(strat, "adversarial").status == "mismatch"


def test_a_strategy_that_memoises_its_first_answer_is_caught(planted):
    cache = {}

    def memo(inputs, params):
        x = inputs["x"]
        if "out" not in cache:
            cache["out"] = tuple(np.copy(a) for a in maxpool2d.oracle({"x": x.astype(np.float64)}, params))
        return lambda: (cache["out"][0].astype(x.dtype), cache["out"][1])

    strat = planted("maxpool2d", "memo", memo, returns="values+indices", ties="first")
    assert verdict_of(strat, "random").status == "ok"
    assert verdict_of(strat, "adversarial").status == "mismatch"


def test_a_strategy_that_raises_is_an_error_with_its_message(planted):
    def broken(inputs, params):
        def run():
            raise RuntimeError("kernel exploded")
        return run
    strat = planted("maxpool2d", "broken", broken)
    verdict = verdict_of(strat)
    assert verdict.status == "error" and "RuntimeError: kernel exploded" in verdict.message


def test_non_contiguous_inputs_are_really_non_contiguous():
    from impls.backends import convert, get_backend

    x = np.arange(24, dtype=np.float64).reshape(1, 2, 3, 4)
    numpy_x = convert({"x": x}, get_backend("numpy"), "cpu", "float32", "noncontiguous", ("x",))["x"]
    torch_x = convert({"x": x}, get_backend("torch"), "cpu", "float32", "noncontiguous", ("x",))["x"]
    last = convert({"x": x}, get_backend("torch"), "cpu", "float32", "channels_last", ("x",))["x"]
    import torch

    assert not numpy_x.flags.c_contiguous and not torch_x.is_contiguous()
    assert last.is_contiguous(memory_format=torch.channels_last) and not last.is_contiguous()
    np.testing.assert_array_equal(numpy_x, x.astype(np.float32))
    np.testing.assert_array_equal(torch_x.numpy(), x.astype(np.float32))


def test_cached_reference_is_deterministic():
    a = cached_reference("maxpool2d", PARAMS, "float32", "random", 0)
    b = reference("maxpool2d", PARAMS, "float32", "random", 0)
    np.testing.assert_array_equal(a.inputs["x"], b.inputs["x"])


# ------------------------------------------------------------------ issue 13
@pytest.mark.parametrize("layout", ["contiguous", "noncontiguous", "channels_last"])
def test_index_zero_for_every_all_neg_inf_window_is_caught_in_every_layout(planted, layout):
    """What PyTorch's CUDA channels-last kernel does: index 0 for an all -inf
    window. The check must catch it (it is right only at the origin), in every
    check case and layout, and no listed defect excuses it on the CPU."""
    import torch

    def index_zero(inputs, params):
        def run():
            x = inputs["x"]
            x = x.contiguous().numpy() if hasattr(x, "numpy") else x
            values, indices = maxpool2d.oracle({"x": x.astype(np.float64)}, params)
            indices[np.isneginf(values)] = 0
            return torch.from_numpy(values.astype(np.float32)), torch.from_numpy(indices)
        return run

    strat = planted("maxpool2d", "neg_inf_index_zero", index_zero, backend="torch",
                    returns="values+indices", ties="first", outside_when=every_case)  # the oracle's: any window
    caught = 0
    for params in maxpool2d.check_cases():
        h, w = maxpool2d.pooled_size(params)
        if h * w == 1:
            continue  # one window per plane: index 0 is its first element
        verdict = verdict_of(strat, "adversarial", layout=layout, params=params)
        assert verdict.status == "mismatch", (params, verdict)
        assert verdict.differences == {"neg-inf-window-index-0"}
        assert "index 0 for an all -inf window" in verdict.message
        caught += 1
    assert caught >= 5


def test_signed_zero_loss_is_caught_with_a_clear_message(planted):
    def plus_zero(values, indices, x):
        values = values.astype(x.dtype)
        return np.where(values == 0, np.float32(0.0), values), indices
    strat = planted("maxpool2d", "plus_zero", oracle_based(plus_zero), returns="values+indices", ties="first")
    verdict = verdict_of(strat, "adversarial")
    assert verdict.status == "mismatch"  # no defect is listed for this strategy
    assert "values: sign of zero differs at" in verdict.message and "(got +0.0, expected -0.0)" in verdict.message


def _plan(ops_strategies, dtype="float32"):
    from harness.base.config import Case
    from harness.measuring.check import check_plan

    class Config:
        class check:
            max_bytes = 0

    params = {"dispersion": dict(B=1, C=3, H=4, W=5, S=1), "maxunpool": dict(form="1d", B=2, F=3, L=4, f=5),
              "dispersion_pinv": dict(B=1, C=3, H=4, W=5, S=1), "maxpool2d": dict(N=1, C=1, H=4, W=4, k=2)}
    return check_plan(Config, [Case(op=op, strategy=name, device="cpu", dtype=dtype,
                                     params=tuple(sorted(params[op].items()))) for op, name in ops_strategies])


def test_plan_checks_many_channel_half_sums_even_for_a_float32_config():
    items = _plan([("dispersion", "seed_loop"), ("dispersion", "numba_fused"), ("dispersion", "torch_compile_seed_loop")])
    by_name = {}
    for item in items:
        by_name.setdefault(item.strategy.name, set()).add((item.dtype, dict(item.params)["C"]))
    assert {("bfloat16", 300), ("float16", 300), ("float32", 3)} <= by_name["seed_loop"]
    assert {d for d, _ in by_name["numba_fused"]} == {"float32"}  # numba has no half types
    assert all(c < 300 for _, c in by_name["torch_compile_seed_loop"])  # a 300-step compile is minutes


def test_plan_lists_each_half_case_once_whatever_the_config_dtypes():
    from harness.base.config import Case
    from harness.measuring.check import check_plan

    class Config:
        class check:
            max_bytes = 0

    params = tuple(sorted(dict(B=1, C=3, H=4, W=5, S=1).items()))
    items = check_plan(Config, [Case("dispersion", "seed_loop", "cpu", dtype, params)
                                for dtype in ("float32", "bfloat16", "float16")])
    half = [i for i in items if dict(i.params)["C"] == 300]
    assert len(half) == len(set(half)) > 0


@pytest.mark.slow
def test_check_cli_reports_upstream_defects_without_failing(tiny_config):
    config = tiny_config("""
name: defects
benchmarks:
  - op: maxpool2d
    strategies: [seed_reshape_max]
    params: {N: 1, C: 2, H: 6, W: 6, k: 2}
""")
    result = scatterbench("check", config, "--no-progress")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "upstream-defect" in result.stdout and "0 failed" in result.stdout


def test_a_float32_result_does_not_pass_as_bfloat16(planted):
    """to_numpy widens bfloat16 to float32, so the dtype must be read from the
    tensor the strategy returned, before that conversion."""
    import torch

    def wider(inputs, params):
        x = inputs["x"].float()
        return lambda: torch.nn.functional.max_pool2d(x, params["k"], return_indices=True)

    strat = planted("maxpool2d", "float32_for_bf16", wider, backend="torch", returns="values+indices", ties="any",
                    dtypes=("bfloat16",))
    verdict = verdict_of(strat, dtype="bfloat16")
    assert verdict.status == "mismatch" and "dtype float32, expected bfloat16" in verdict.message


def test_a_strategy_writing_into_its_inputs_cannot_corrupt_the_cached_reference(planted):
    """torch.from_numpy shares memory: a float64 input or int64 positions
    would alias the cached reference's arrays."""
    import torch

    def vandal(inputs, params):
        x = inputs["x"]

        def run():
            values, indices = torch.nn.functional.max_pool2d(x, params["k"], return_indices=True)
            x.fill_(7.0)  # after computing the right answer: its own check passes
            return values, indices
        return run

    strat = planted("maxpool2d", "vandal", vandal, backend="torch", returns="values+indices", ties="any")
    ref = reference("maxpool2d", PARAMS, "float64", "adversarial", 0)
    before = ref.inputs["x"].copy()
    check_strategy(strat, PARAMS, "float64", "cpu", ref)
    np.testing.assert_array_equal(ref.inputs["x"], before)


@pytest.mark.parametrize("ties", ["first", "any"])
def test_an_index_to_a_nan_of_another_window_is_caught(planted, ties):
    """A NaN window may point at any NaN of its own (docs/SPEC.md §1.1), not at a NaN
    elsewhere in the plane."""
    def other_nan(values, indices, x):
        wrong = indices.copy()
        wrong[0, 0, 0, 0] = 15  # window (1, 1)'s NaN, for window (0, 0)
        return values.astype(x.dtype), wrong
    x_params = dict(N=1, C=1, H=4, W=4, k=2)
    plane = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    plane[0, 0, 0, 0] = plane[0, 0, 3, 3] = np.nan
    from harness.measuring.check import Reference
    strat = planted("maxpool2d", f"other_nan_{ties}", oracle_based(other_nan), returns="values+indices", ties=ties)
    ref = Reference({"x": plane}, maxpool2d.oracle({"x": plane}, x_params), params=x_params)
    assert check_strategy(strat, x_params, "float32", "cpu", ref).status == "mismatch"


def test_check_says_how_many_failures_it_did_not_print(planted, tiny_config, capsys, monkeypatch):
    """At most 20 FAIL lines, then how many more and how to see them (21 of 41 were hidden without a word)."""
    from harness import cli

    def broken(inputs, params):
        def run():
            raise RuntimeError("kernel exploded")
        return run

    planted("maxpool2d", "broken_everywhere", broken)
    monkeypatch.setattr(cli, "_terminate_like_interrupt", lambda: None)  # leave pytest's SIGTERM alone
    config = tiny_config("""
benchmarks:
  - op: maxpool2d
    strategies: [broken_everywhere]
    params: {N: 1, C: 1, H: 4, W: 4, k: 2}
""")
    assert cli.main(["check", str(config), "--no-progress"]) == 1
    out = capsys.readouterr().out
    failed = int(out.split(" checks, ")[1].split(" failed")[0])
    assert failed > 20 and out.count("\nFAIL maxpool2d/broken_everywhere") == 20
    assert f"…and {failed - 20} more failures (see --all)" in out
    assert cli.main(["check", str(config), "--no-progress", "--all"]) == 1
    out = capsys.readouterr().out
    assert out.count("\nFAIL maxpool2d/broken_everywhere") == failed and "more failures" not in out


# ------------------------------------------------------------------ issue 31
def test_a_strategy_that_keeps_state_between_calls_is_unrepeatable(planted):
    """Right on its first call, twice the answer on its second: the check
    judges a later call on the same inputs too (it passed every check before)."""
    def accumulating(inputs, params):
        x = inputs["x"]
        values, indices = maxpool2d.oracle({"x": x.astype(np.float64)}, params)
        total = np.zeros(values.shape, dtype=x.dtype)

        def run():
            total[...] += values.astype(x.dtype)  # zeroed once, in prepare
            return total, indices
        return run

    strat = planted("maxpool2d", "accumulating", accumulating, returns="values+indices", ties="first")
    verdict = verdict_of(strat, "random")
    assert verdict.status == "unrepeatable", verdict
    assert verdict.message.startswith("call 1 matched the oracle, call 4 on the same inputs did not: values:")


def test_a_strategy_that_overwrites_its_input_is_input_modified_naming_it(planted):
    """Right on every call, from an input it changed: only the fingerprint
    sees it. Also when the change is made in prepare."""
    def vandal(inputs, params):
        x = inputs["x"]
        answer = maxpool2d.numpy_sliding_window(inputs, params)

        def run():
            out = tuple(np.copy(a) for a in answer())
            x[...] = 7.0  # after computing the right answer from it
            return out
        return run

    def folds_in_prepare(inputs, params):
        inputs["x"] += 0  # a no-op: the same bytes, not a change
        answer = maxpool2d.numpy_sliding_window(inputs, params)()
        np.negative(inputs["x"], out=inputs["x"])
        return lambda: answer

    for name, prepare in (("vandal_numpy", vandal), ("folds_in_prepare", folds_in_prepare)):
        strat = planted("maxpool2d", name, prepare, returns="values+indices", ties="first")
        verdict = verdict_of(strat, "random")
        assert verdict.status == "input-modified", (name, verdict)
        assert verdict.message.startswith("overwrote its input 'x' (inputs differ after call 4 from before prepare")


def test_a_strided_input_read_in_place_still_shows_one_bit_changed(planted):
    """The inputs are compared with their copy where they lie, without copying them again: a
    channels-last or strided input changed in its last bit (one element moved by one ulp) after the
    right answer is still caught, in every layout, and one left alone still passes."""
    def one_ulp(inputs, params):
        x = inputs["x"]
        answer = maxpool2d.numpy_sliding_window(inputs, params)

        def run():
            out = tuple(np.copy(a) for a in answer())
            corner = (0,) * (x.ndim - 1) + (1,)
            x[corner] = np.nextafter(x[corner], x.dtype.type(np.inf))
            return out
        return run

    strat = planted("maxpool2d", "one_ulp", one_ulp, returns="values+indices", ties="first")
    honest = planted("maxpool2d", "reads_only", lambda inputs, params: maxpool2d.numpy_sliding_window(inputs, params),
                     returns="values+indices", ties="first")
    for layout in ("contiguous", "channels_last", "noncontiguous"):
        verdict = verdict_of(strat, "random", layout=layout)
        assert verdict.status == "input-modified", (layout, verdict)
        assert verdict.message.startswith("overwrote its input 'x'"), (layout, verdict)
        assert verdict_of(honest, "random", layout=layout).status == "ok", layout


def test_a_wrong_answer_from_an_overwritten_input_is_named_for_its_cause(planted):
    def zeroes_first(inputs, params):
        x = inputs["x"]

        def run():
            x[...] = 0.0  # scratch space: the answer is then wrong on call 1 already
            return maxpool2d.oracle({"x": x.astype(np.float64)}, params)[0].astype(x.dtype), \
                maxpool2d.oracle({"x": x.astype(np.float64)}, params)[1]
        return run

    strat = planted("maxpool2d", "zeroes_first", zeroes_first, returns="values+indices", ties="first")
    verdict = verdict_of(strat, "random")
    assert verdict.status == "input-modified", verdict
    assert verdict.message.startswith("overwrote its input 'x' (inputs differ after call 1 from before prepare")


def test_a_strategy_that_reads_its_inputs_only_passes_every_call(planted):
    honest = planted("maxpool2d", "honest_again", oracle_based(lambda v, i, x: (v.astype(x.dtype), i)),
                     returns="values+indices", ties="first")
    calls = []

    def counted(inputs, params):
        run = honest.prepare(inputs, params)
        return lambda: calls.append(1) or run()

    strat = planted("maxpool2d", "counted", counted, returns="values+indices", ties="first")
    assert verdict_of(strat, "adversarial").status == "ok"
    assert len(calls) == 4


def test_a_later_call_that_raises_is_an_error_saying_which_call(planted):
    def once(inputs, params):
        answer = maxpool2d.numpy_sliding_window(inputs, params)
        used = []

        def run():
            if used:
                raise RuntimeError("buffer already consumed")
            used.append(1)
            return answer()
        return run

    strat = planted("maxpool2d", "once_only", once, returns="values+indices", ties="first")
    verdict = verdict_of(strat, "random")
    assert verdict.status == "error"
    assert verdict.message.startswith("call 4 on the same inputs: RuntimeError: buffer already consumed")


def test_a_nan_in_a_message_reads_nan_and_numbers_are_whole(planted):
    def nan_first(values, indices, x):
        values = values.astype(x.dtype)
        values[0, 0, 0, 0] = np.nan
        return values, indices

    strat = planted("maxpool2d", "nan_first", oracle_based(nan_first), returns="values+indices", ties="first")
    message = verdict_of(strat, "random").message
    assert "got nan, expected " in message and "np.float" not in message, message
    from impls.common import plain

    assert [plain(v) for v in (np.float64(np.nan), np.float32(0.1), np.float16(65504), np.int64(3))] == \
        ["nan", "0.1", "65504.0", "3"]


class _SmallCheck:
    class check:
        max_bytes = 1000


def test_a_config_point_over_the_check_limit_is_named_as_skipped(tiny_config, capsys, monkeypatch):
    """A point too big for `check` is one item, skipped, saying why and
    counted: never left out without a word. The limit is the point's bytes
    read and written in float64, as docs/PLUGINS.md says."""
    from harness import cli
    from harness.base.config import Case
    from harness.measuring.check import check_plan, float64_bytes, run_checks, summarize_checks
    from impls.registry import get_operator

    small, big = dict(N=1, C=1, H=4, W=4, k=2), dict(N=1, C=2, H=10, W=10, k=2)
    op = get_operator("maxpool2d")
    # 16 + 4 float64 values and 4 int64 indices: 192 bytes; 200 + 50 values and 50 indices: 2400
    assert float64_bytes(op, small) == 192 and float64_bytes(op, big) == 2400
    cases = [Case("maxpool2d", "numpy_sliding_window", "cpu", "float32", tuple(sorted(p.items())))
             for p in (small, big)]
    items = check_plan(_SmallCheck, cases)
    points = [i for i in items if dict(i.params) in (small, big)]
    assert [(dict(i.params), i.mode, bool(i.skip)) for i in points] == \
        [(small, "random", False), (small, "adversarial", False), (big, "random", True)]
    results = run_checks(points, 0)
    assert [r.verdict.status for r in results] == ["ok", "ok", "skipped"]
    summary = summarize_checks(results)
    assert summary.skip_lines == [
        "SKIPPED maxpool2d [cpu float32 config point N=1 C=2 H=10 W=10 k=2] for numpy_sliding_window: not "
        "checked: it reads and writes 2400 bytes in float64, over check.max_bytes = 1000 (raise it to check this "
        "point)"]
    assert summary.text == "3 checks, 0 failed (2 ok, 1 skipped)"
    # Through the command: named, and counted.
    monkeypatch.setattr(cli, "_terminate_like_interrupt", lambda: None)
    config = tiny_config("""
check: {max_bytes: 1000}
benchmarks:
  - op: maxpool2d
    strategies: [numpy_sliding_window, seed_reshape_argmax]
    params: {N: 1, C: 2, H: [4, 10], W: 10, k: 2}
""")
    assert cli.main(["check", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "SKIPPED maxpool2d [cpu float32 config point N=1 C=2 H=10 W=10 k=2] for 2 strategies: not checked: " \
           "it reads and writes 2400 bytes in float64" in out
    assert "config point N=1 C=2 H=4" not in out
    # Counted with the rest: the 2 config points, and the overlapping and padded windows the
    # plain-window seed_reshape_argmax does not compute (one SKIPPED line, "N items");
    # numpy_sliding_window pools every window.
    import re
    windows = re.findall(r"SKIPPED maxpool2d/(\w+) \[cpu float32 (\d+) items\]: not for this case: written for k×k",
                         out)
    per_strategy = len(maxpool2d.window_cases()) * 2 * len(op.layouts("numpy"))  # both generator modes
    assert windows == [("seed_reshape_argmax", str(per_strategy))], windows
    last = out.splitlines()[-1]
    assert last.endswith(f" ok, {2 + per_strategy} skipped)") and " 0 failed " in last, last


def test_the_old_check_limit_name_is_one_line_naming_the_new_one(tiny_config):
    from harness.base.config import ConfigError, load_config

    config = tiny_config("""
check: {max_elements: 100}
benchmarks:
  - op: maxpool2d
    params: {N: 1, C: 1, H: 4, W: 4, k: 2}
""")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    assert str(caught.value) == (f"{config}: check: max_elements is now max_bytes: the bytes a config point reads "
                                 f"and writes with float64 values (8 times the old number for float values)")


def test_a_layout_is_an_item_only_where_it_applies(monkeypatch):
    """channels_last on a 2-D input would be the contiguous case under another
    name: no such item, while a 4-D input keeps it."""
    from harness.measuring import check
    from impls import registry
    from impls.registry import Operator, ParamSpec, Strategy, get_operator

    rows = Operator(name="rowmax_2d", doc="", params=(ParamSpec("R"), ParamSpec("L")),
                    generate=lambda params, mode="random", seed=0: {"x": np.ones((params["R"], params["L"]))},
                    oracle=lambda inputs, params: inputs["x"].max(-1), bytes_moved=lambda p, i, r="output": 0,
                    compare=None, validate=lambda p: None, check_cases=lambda: [dict(R=2, L=3)],
                    reference="torch_rows", layout_keys=("x",))
    rows.strategies["torch_rows"] = Strategy(op="rowmax_2d", name="torch_rows", backend="torch",
                                             prepare=None, source="test", devices=("cpu",), dtypes=("float32",))
    monkeypatch.setitem(registry.OPERATORS, "rowmax_2d", rows)
    check._layout_arrays.cache_clear()
    layouts = {item.layout for item in check.adversarial_items(rows.strategies["torch_rows"], "cpu", "float32")}
    assert layouts == {"contiguous", "noncontiguous"}
    pool = get_operator("maxpool2d").strategies["torch_max_pool2d_indices"]
    assert "channels_last" in {item.layout for item in check.adversarial_items(pool, "cpu", "float32")}
