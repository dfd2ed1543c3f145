"""The check in training modes (issue 32, docs/SPEC.md §1.5): a strategy whose forward
is right and whose backward sends a tie's gradient to the last maximum is
``ok`` in forward and ``mismatch`` in backward and forward+backward; a
strategy with no backward is skipped with its reason, never a failure; the
forward's machinery (call 1 against call 4, the inputs' fingerprints, the
incoming gradient's among them) holds a backward too; verdicts are asked,
remembered and cached per mode; gradcheck is printed, never judged."""

import numpy as np
import pytest

from harness.base.config import Case
from harness.measuring import check
from harness.measuring.verdict_cache import VerdictCache
from impls import maxpool2d
from impls.common import Verdict
from impls.registry import get_operator
from tests.helpers import plugin_env, scatterbench

STRATEGY = "first_tie_forward_last_tie_backward"
NO_BACKWARD = "seed_reshape_max"  # values only: no indices for a backward to scatter to


def config(tmp_path, strategies, modes=("forward", "backward", "forward+backward")):
    path = tmp_path / "tiny.yaml"
    path.write_text(f"""seed: 0
devices: [cpu]
dtypes: [float32]
benchmarks:
  - op: maxpool2d
    params: {{N: [1], C: [2], H: [8], W: [8], k: [2]}}
    strategies: [{", ".join(strategies)}]
    modes: [{", ".join(modes)}]
""")
    return path


def test_a_last_tie_backward_is_mismatch_in_the_backward_modes_only(tmp_path):
    done = scatterbench("check", config(tmp_path, [STRATEGY, NO_BACKWARD]), "--no-progress", "--all",
                        env=plugin_env("last_tie_backward_plugin"), timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    fails = [line for line in done.stdout.splitlines() if line.startswith(f"FAIL maxpool2d/{STRATEGY} ")]
    where = [line.split("[cpu float32 ", 1)[1].split(" ", 1)[0] for line in fails]
    # Every failure names its training mode; forward items carry none and none failed.
    assert set(where) == {"backward", "forward+backward"}, fails
    assert all("mismatch" not in line or "grad_x" in line for line in fails)
    assert all("adversarial/" in line for line in fails)  # random inputs have no ties: right there
    assert not [line for line in done.stdout.splitlines() if line.startswith("FAIL") and STRATEGY not in line]
    # The values-only strategy: skipped in both training modes with its reason, never failed.
    skipped = [line for line in done.stdout.splitlines() if line.startswith(f"SKIPPED maxpool2d/{NO_BACKWARD} ")
               and "not for this case" not in line]  # the overlapping and padded windows it does not pool
    assert {line.split(" ")[2] for line in skipped} == {"backward", "forward+backward"}, skipped
    assert all(maxpool2d.VALUES_ONLY in line for line in skipped)


def test_no_backward_is_skipped_and_the_exit_status_stays_0_with_gradcheck_printed(tmp_path):
    done = scatterbench("check", config(tmp_path, [NO_BACKWARD, "torch_max_pool2d_indices"],
                                        modes=("backward",)), "--no-progress", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SKIPPED maxpool2d/{NO_BACKWARD} backward [cpu float32" in done.stdout
    assert "no backward: " + maxpool2d.VALUES_ONLY in done.stdout
    # Informational, not a check: printed, not counted.
    assert (f"GRADCHECK maxpool2d/torch_max_pool2d_indices [cpu float64 N=1 C=1 H=4 W=4 k=4]: gradcheck: "
            f"{check.GRADCHECK_AGREES}") in done.stdout
    assert " 0 failed" in done.stdout


# ------------------------------------------------------------------ in process
def last_tie_backward(inputs, params):
    """The gradient at each window's last maximum (its own argmax, not the forward's indices)."""
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    windows = x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).transpose(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, -1)

    def backward(saved, grad):
        last = k * k - 1 - windows[..., ::-1].argmax(axis=-1)
        rows, cols = np.arange(h)[:, None] * k + last // k, np.arange(w)[None, :] * k + last % k
        grad_x = np.zeros((N, C, H * W), dtype=grad.dtype)
        np.put_along_axis(grad_x, (rows * W + cols).reshape(N, C, -1), grad.reshape(N, C, -1), axis=-1)
        return grad_x.reshape(N, C, H, W)

    return backward


def honest(**fields):
    """The registered numpy_sliding_window forward with another backward."""
    strat = get_operator("maxpool2d").strategies["numpy_sliding_window"]
    return strat.prepare, dict(returns="values+indices", ties="first", **fields)


def test_adversarial_check_asks_each_mode_apart(planted):
    prepare, fields = honest(backward=last_tie_backward)
    strat = planted("maxpool2d", "tie_backward", prepare, **fields)
    adversarial = check.AdversarialCheck(0)
    assert adversarial.failure(strat, "cpu", "float32") is None
    assert adversarial.known(strat, "cpu", "float32", mode="backward") == (False, None)
    failed = adversarial.failure(strat, "cpu", "float32", mode="backward")
    assert failed.status == "mismatch" and failed.message.startswith("adversarial check backward adversarial/")
    assert adversarial.known(strat, "cpu", "float32", mode="backward") == (True, failed)
    assert adversarial.known(strat, "cpu", "float32") == (True, None)
    with pytest.raises(ValueError, match="unknown mode"):
        adversarial.failure(strat, "cpu", "float32", mode="sideways")


def test_a_strategy_with_no_backward_has_no_failure_in_a_training_mode(planted):
    prepare, fields = honest(no_backward="test: declared none")
    strat = planted("maxpool2d", "no_backward", prepare, **fields)
    adversarial = check.AdversarialCheck(0)
    assert adversarial.failure(strat, "cpu", "float32", mode="forward+backward") is None
    assert {r.verdict.status for r in adversarial.results} == {"skipped"}
    plain = [r for r in adversarial.results if maxpool2d.plain_windows_only(dict(r.item.params)) is None]
    assert plain and {r.verdict.message for r in plain} == {"no backward: test: declared none"}


def scribbling_backward(inputs, params):
    """Right, but writes into the incoming gradient (its scratch, it thinks)."""
    apply = maxpool2d.numpy_scatter_backward(inputs, params)

    def backward(saved, grad):
        out = apply(saved, grad)
        grad *= 0
        return out

    return backward


def accumulating_backward(inputs, params):
    """One grad_x for every call, added into: call 1 right, call 4 four times it."""
    apply = maxpool2d.numpy_scatter_backward(inputs, params)
    kept = {}

    def backward(saved, grad):
        out = apply(saved, grad)
        kept["sum"] = kept["sum"] + out if "sum" in kept else out
        return kept["sum"]

    return backward


@pytest.mark.parametrize("backward,status", [(scribbling_backward, "input-modified"),
                                             (accumulating_backward, "unrepeatable")])
def test_a_backward_is_held_to_repeatability_and_its_inputs_as_the_forward_is(planted, backward, status):
    prepare, fields = honest(backward=backward)
    strat = planted("maxpool2d", f"bad_{status}", prepare, **fields)
    params = dict(N=1, C=2, H=6, W=6, k=2)
    for mode in ("backward", "forward+backward"):
        ref = check.reference("maxpool2d", params, "float32", "random", 0, mode)
        verdict = check.check_strategy(strat, params, "float32", "cpu", ref)
        assert verdict.status == status, (mode, verdict)
    ref = check.reference("maxpool2d", params, "float32", "random", 0)
    assert check.check_strategy(strat, params, "float32", "cpu", ref).status == "ok"


def test_verdicts_are_cached_per_mode(tmp_path):
    strat = get_operator("maxpool2d").strategies["numpy_sliding_window"]
    wrong = Verdict("mismatch", "adversarial check backward adversarial/contiguous: grad_x differs")
    params = (("C", 1), ("H", 8), ("N", 1), ("W", 8), ("k", 2))
    cases = [Case("maxpool2d", strat.name, "cpu", "float32", params, mode)
             for mode in ("forward", "backward", "forward+backward")]
    asked = check.AdversarialCheck(0)
    asked.remember(strat, "cpu", "float32", None)
    asked.remember(strat, "cpu", "float32", wrong, mode="backward")
    assert VerdictCache(0, folder=tmp_path).save(asked, cases) == 2
    fresh = check.AdversarialCheck(0)
    assert VerdictCache(0, folder=tmp_path).preload(fresh, cases) == (2, 3)
    assert fresh.known(strat, "cpu", "float32") == (True, None)
    assert fresh.known(strat, "cpu", "float32", mode="backward") == (True, wrong)
    assert fresh.known(strat, "cpu", "float32", mode="forward+backward") == (False, None)


def test_gradcheck_disagreeing_is_printed_never_counted(planted):
    """A torch strategy whose hand-written autograd backward is wrong:
    gradcheck says so in its line; only the oracle's checks count."""
    import torch

    class DoubledBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, grad):
            return 2 * grad

    def prepare(inputs, params):
        x, k = inputs["x"], params["k"]
        return lambda: torch.nn.functional.max_pool2d(DoubledBackward.apply(x), k, return_indices=True)

    strat = planted("maxpool2d", "doubled_backward", prepare, backend="torch", returns="values+indices",
                    ties="first")
    assert check.gradcheck_applies(strat)
    item = check.gradcheck_item(strat, "cpu", "backward")
    verdict = check.run_one_check(item, 0)
    assert verdict.status == "ok" and "DISAGREES" in verdict.message
    summary = check.summarize_checks([check.CheckResult(item, verdict, 0.0)])
    assert summary.failed == 0 and summary.gradcheck_lines[0].startswith("GRADCHECK maxpool2d/doubled_backward ")
    assert summary.text.splitlines() == [summary.gradcheck_lines[0], "0 checks, 0 failed"]


def test_checks_table_and_summary_count_each_training_mode_apart():
    """Issue 51: the table had no mode column and its count summed the three modes."""
    from rich.console import Console

    from harness.measuring.check import CheckItem, CheckResult, summarize_checks
    from harness.presenting.tables import check_table
    from impls.common import Verdict

    strat = get_operator("maxpool2d").strategies["numba_fused"]

    def result(mode, status="ok"):
        return CheckResult(CheckItem(strat, (("C", 3),), "float32", "cpu", "adversarial", "contiguous",
                                     training=mode), Verdict(status, "planted"), 0.1)

    results = [result("forward"), result("backward", "mismatch"), result("backward"), result("forward+backward")]
    console = Console(width=200, record=True, color_system=None)
    console.print(check_table(results, width=200))
    body = [line.split("│")[5:7] for line in console.export_text().splitlines() if line.startswith("│")]
    assert [[cell.strip() for cell in row] for row in body] == [["forward", "1"], ["backward", "2"],
                                                               ["forward+backward", "1"]]
    assert summarize_checks(results).text.splitlines()[-1] == (
        "by mode: forward 1 checks, 0 failed; backward 2 checks, 1 failed; forward+backward 1 checks, 0 failed")
    assert "by mode" not in summarize_checks(results[:1]).text  # one mode: its count is the total
