"""The adversarial check asked of worker processes (harness/measuring/prefetch.py):
the same verdicts as in-process, and what a worker cannot see left to the run."""

import numpy as np
import pytest

from harness.measuring import check, prefetch
from impls.registry import get_operator


def test_how_many_workers():
    assert prefetch.workers_for(52, cores=2) == 2
    assert prefetch.workers_for(3, cores=16) == 0  # starting workers costs more than checking three
    assert prefetch.workers_for(52, cores=1) == 0
    assert prefetch.workers_for(5, cores=16) == 5


def test_the_keys_that_compile_most_go_to_the_workers_first():
    unpool, pool = get_operator("maxunpool").strategies, get_operator("maxpool2d").strategies
    keys = [(strat, "cpu", "float32", "forward") for strat in
            (unpool["numpy_seed_row_loop"], unpool["torch_compile_scatter"], pool["seed_loops"],
             unpool["pytensor_seed_broadcast"], unpool["numba_fused"], unpool["torch_scatter"])]
    keys += [(pool["torch_compile_reshape_argmax"], "cpu", "float32", "forward"),
             (get_operator("dispersion").strategies["torch_compile_seed_loop"], "cpu", "float32", "forward")]
    order = [(strat.op, strat.name) for strat, *_ in prefetch.compiles_first(keys)]
    # the compiling ones first, the backends in turn (torch.compile's three keys, then numba's and
    # PyTensor's one each), each backend's most shapes first (5, 4, 4); the eager ones last, in their order
    assert order == [("maxunpool", "torch_compile_scatter"), ("maxunpool", "numba_fused"),
                     ("maxunpool", "pytensor_seed_broadcast"), ("maxpool2d", "torch_compile_reshape_argmax"),
                     ("dispersion", "torch_compile_seed_loop"),
                     ("maxunpool", "numpy_seed_row_loop"), ("maxpool2d", "seed_loops"), ("maxunpool", "torch_scatter")]


@pytest.mark.slow
def test_workers_give_the_in_process_verdicts_and_leave_what_they_cannot_see(planted):
    """Four real strategies, one of them failing in a training mode, and one
    registered only in this process, wrong on ties: the workers answer the
    four as this process would, and leave the planted one unasked."""

    def last_max(inputs, params):  # the last maximum of each window, not the first
        x, k = inputs["x"], params["k"]
        N, C, H, W = x.shape
        h, w = H // k, W // k
        windows = x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).transpose(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, -1)

        def run():
            last = k * k - 1 - np.argmax(windows[..., ::-1], axis=-1)
            values = np.take_along_axis(windows, last[..., None], axis=-1)[..., 0]
            rows = np.arange(h)[:, None] * k + last // k
            cols = np.arange(w)[None, :] * k + last % k
            return values, (rows * W + cols).astype(np.int64)
        return run

    wrong = planted("maxpool2d", "planted_last_max", last_max, returns="values+indices", ties="first")
    strategies = get_operator("maxpool2d").strategies
    keys = [(strategies[name], "cpu", "float32", mode) for name, mode in
            (("torch_max_pool2d_indices", "forward"), ("seed_reshape_argmax", "forward"),
             ("torch_max_pool2d_indices", "backward"), ("seed_loop_max", "backward"))]
    keys.append((wrong, "cpu", "float32", "forward"))

    pooled = check.AdversarialCheck(seed=0, timeout_s=120)
    answered = prefetch.prefetch(pooled, keys, threads={"torch": 1, "numba": 1, "numpy": 1}, workers=2)
    assert answered == 4
    assert pooled.known(wrong, "cpu", "float32", "forward") == (False, None)

    here = check.AdversarialCheck(seed=0, timeout_s=120)
    for strat, device, dtype, mode in keys[:4]:
        asked, failure = pooled.known(strat, device, dtype, mode)
        assert asked and failure == here.failure(strat, device, dtype, mode=mode), strat.name
    # the planted strategy is the sweep's to check, in-process, and fails there
    assert here.failure(wrong, "cpu", "float32").status == "mismatch"


@pytest.mark.slow
def test_checks_items_in_workers_give_the_in_process_verdicts(planted):
    """``scatterbench check``'s adversarial items run key by key in workers:
    every item of each key the workers can load, with the verdict this
    process reaches; a strategy only this process has is left to it."""
    wrong = planted("maxpool2d", "planted_copy", lambda inputs, params: lambda: inputs["x"],
                    returns="values", ties="first")
    strategies = get_operator("maxpool2d").strategies
    keys = [(strategies[name], "cpu", "float32", mode) for name, mode in
            (("torch_max_pool2d_indices", "forward"), ("seed_reshape_argmax", "forward"),
             ("seed_loop_max", "backward"))]
    keys.append((wrong, "cpu", "float32", "forward"))
    seen = []
    results = prefetch.check_items(keys, seed=0, timeout_s=120, threads={"torch": 1, "numba": 1, "numpy": 1},
                                   workers=2, on_item=seen.append)
    expected = [item for strat, device, dtype, mode in keys[:3]
                for item in check.adversarial_items(strat, device, dtype, mode)]
    assert set(results) == set(expected) == set(seen)
    assert not any(item.strategy is wrong for item in results)
    for item in expected[::7]:  # a sample, run here: the same verdicts
        assert results[item].verdict == check.run_one_check(item, 0, 120), item.label
    assert {result.verdict.status for result in results.values()} <= {"ok", "skipped", "upstream-defect"}


def _deaf_to_sigterm() -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _sleep(seconds: float, started: str) -> float:
    import pathlib
    import time

    pathlib.Path(started).touch()  # deaf to SIGTERM by now (the initializer ran)
    time.sleep(seconds)
    return seconds


@pytest.mark.slow
def test_a_stopped_worker_that_ignores_sigterm_is_killed(monkeypatch, tmp_path):
    """Stopping the pool ends every worker, even one that does not end on
    SIGTERM (busy in native code): none is left for the interpreter's exit to
    wait on for ever."""
    import concurrent.futures
    import multiprocessing
    import time

    monkeypatch.setattr(prefetch, "STOP_GRACE_S", 1.0)
    pool = concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_deaf_to_sigterm)
    for index in range(2):
        pool.submit(_sleep, 600, str(tmp_path / f"started{index}"))
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("started*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    processes = list(pool._processes.values())
    manager = pool._executor_manager_thread
    started = time.monotonic()
    prefetch._stop(pool)
    assert not any(_running(process.pid) for process in processes)
    # and the executor's own thread is over: none is left to race the interpreter's exit for its pipe
    assert not manager.is_alive()
    assert time.monotonic() - started < 10


def _running(pid: int) -> bool:
    """Whether the process runs (not a zombie), read from /proc: ``is_alive``
    can say True of a process the executor's own thread has reaped."""
    from pathlib import Path

    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False
