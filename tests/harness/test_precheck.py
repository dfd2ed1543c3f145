"""What a plugin author and a notebook user get (issue 24): every timed
strategy passed its adversarial check in `run`, `bench()` and `regress`;
bench() pins, records and restores thread settings, and a loaded machine
with unpinned threads is said in one line; a strategy that crashes the
process is run isolated on --resume instead of crashing it again."""

import json
import os
import signal
import sys

import pandas as pd
import pytest

from harness.base.errors import UnpinnedThreadsWarning
from harness.base.plugins import sha256
from harness.measuring import pinning
from harness.results.store import IN_FLIGHT, read_meta, read_rows, read_samples
from tests.helpers import PLUGINS, QUICK_CEILINGS, plugin_env, scatterbench

pytestmark = pytest.mark.slow  # subprocesses and sweeps: `make test` runs them, `make test-fast` does not

LAST_TIE = PLUGINS / "last_tie_plugin.py"
FAULTS = PLUGINS / "fault_plugin.py"
PINNED = {"torch": 1, "numpy": 1, "numba": 1}
TINY_TIMING = {"min_samples": 5, "budget_s": 0.01, "warmup_s": 0}


def cli(*args, plugins=()):
    return scatterbench(*args, env=plugin_env(*plugins))


def by_strategy(directory) -> dict:
    return {row["strategy"]: row for _, row in read_rows(directory).iterrows()}


def assert_wrong_and_untimed(directory):
    rows = by_strategy(directory)
    tie = rows["last_tie_argmax"]
    assert tie["status"] == "mismatch", tie["message"]
    assert tie["message"].startswith("adversarial check adversarial/") and "(first ties)" in tie["message"]
    assert tie["median_s"] != tie["median_s"]  # NaN: never timed
    assert tie["case_id"] not in read_samples(directory)
    assert rows["torch_max_pool2d_indices"]["status"] == "ok" and rows["torch_max_pool2d_indices"]["median_s"] > 0


TIE_CONFIG = """
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0}
threads: {torch: 1, numpy: 1, numba: 1}
benchmarks:
  - op: maxpool2d
    strategies: [last_tie_argmax, torch_max_pool2d_indices]
    params: {N: 1, C: 2, H: 8, W: 8, k: 2}
"""


@pytest.fixture(scope="module")
def tie_runs(tmp_path_factory):
    """One `run` and one `regress` against it, with the last-tie plugin named by its file."""
    root = tmp_path_factory.mktemp("tie")
    config = root / "tie.yaml"
    config.write_text(TIE_CONFIG)
    ran = cli("run", config, "-o", root / "run", "--no-progress", plugins=[LAST_TIE])
    gated = cli("regress", root / "run", config, "-o", root / "gate", "--factor", "5", "--no-progress",
                         plugins=[LAST_TIE])
    return root, ran, gated


def test_run_records_a_last_tie_strategy_wrong_and_never_times_it(tie_runs):
    root, ran, _ = tie_runs
    assert ran.returncode == 0, ran.stderr
    assert_wrong_and_untimed(root / "run")
    meta = read_meta(root / "run")
    assert meta["phase_s"]["adversarial"] > 0
    # named by its file (beside the quick ceilings every test sweep loads: tests.helpers.plugin_env)
    assert [record for record in meta["plugins"] if record["module"] != QUICK_CEILINGS] == [
        {"module": "last_tie_plugin", "file": str(LAST_TIE), "sha256": sha256(LAST_TIE)}]


def test_regress_records_a_last_tie_strategy_wrong_and_never_times_it(tie_runs):
    root, _, gated = tie_runs
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert_wrong_and_untimed(root / "gate" / "run")


@pytest.fixture
def last_tie():
    """The last-tie strategy registered in this process for one test."""
    from harness.base import plugins
    from impls.registry import get_operator

    plugins.load_plugins(str(LAST_TIE))
    yield
    get_operator("maxpool2d").strategies.pop("last_tie_argmax", None)
    sys.modules.pop("last_tie_plugin", None)


def test_bench_records_a_last_tie_strategy_wrong_and_never_times_it(last_tie):
    import scatterbench

    result = scatterbench.bench("maxpool2d", ["last_tie_argmax", "torch_max_pool2d_indices"], N=1, C=2, H=8,
                                W=8, k=2, timing=TINY_TIMING, threads=PINNED, plot=False)
    rows = {row["strategy"]: row for _, row in result.rows.iterrows()}
    assert rows["last_tie_argmax"]["status"] == "mismatch"
    assert rows["last_tie_argmax"]["message"].startswith("adversarial check")
    assert rows["last_tie_argmax"]["median_s"] != rows["last_tie_argmax"]["median_s"]
    assert rows["torch_max_pool2d_indices"]["median_s"] > 0
    checked = result.checks[result.checks["strategy"] == "last_tie_argmax"]
    assert "mismatch" in set(checked["status"])  # where it failed, with the rest of what ran
    assert result.phase_s["adversarial"] > 0


def test_bench_applies_records_and_restores_thread_settings(planted):
    import torch
    from threadpoolctl import threadpool_info

    import scatterbench
    from impls import maxpool2d

    seen = {}

    def recording(inputs, params):
        seen.update(torch=torch.get_num_threads(), blas={pool["num_threads"] for pool in threadpool_info()})
        return maxpool2d.numpy_sliding_window(inputs, params)

    planted("maxpool2d", "thread_recorder", recording)
    torch.set_num_threads(2)
    blas_before = [pool["num_threads"] for pool in threadpool_info()]
    result = scatterbench.bench("maxpool2d", ["thread_recorder"], N=1, C=1, H=8, W=8, k=2, timing=TINY_TIMING,
                                threads=PINNED, plot=False)
    assert seen == {"torch": 1, "blas": {1}}
    assert {name: result.threads[name] for name in PINNED} == PINNED
    # No seed's original among the strategies: speedup is NaN, and the result says why.
    assert result.rows["speedup"].isna().all()
    # (a ceiling measured busy on a loaded machine is a note too: harness/measuring/ceilings.py,
    # so are the bandwidth curves measured or reused, and a measurement the fitness rule does not stand behind)
    assert [note for note in result.notes if "copy ceiling" not in note and "fitness rule" not in note
            and "bandwidth curves" not in note] == [
        "speedup is blank for maxpool2d: the seed's original, seed_loops, was not among the strategies run"]
    assert "<p>speedup is blank for maxpool2d: the seed&#x27;s original" in result._repr_html_()
    assert torch.get_num_threads() == 2
    assert [pool["num_threads"] for pool in threadpool_info()][:len(blas_before)] == blas_before
    with pytest.raises(Exception, match=r"bench\(\): threads.torch"):
        scatterbench.bench("maxpool2d", ["thread_recorder"], N=1, C=1, H=8, W=8, k=2, threads={"torch": 0})


UNPINNED_CONFIG = """
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0}
threads: {torch: null}  # the library's default (every core); unset is every core but one
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d_indices]
    params: {N: 1, C: 1, H: 4, W: 4, k: 2}
"""


BUSY = "busy_machine_plugin"  # the machine read as loaded (a task per core), in this process and in a run's


def test_unpinned_threads_on_a_loaded_machine_are_said_in_one_line(monkeypatch, tmp_path, tiny_config):
    import scatterbench

    monkeypatch.setattr(pinning, "competing_load", lambda *args, **kwargs: float(os.cpu_count() or 1))

    small = dict(N=1, C=1, H=4, W=4, k=2, timing=TINY_TIMING, plot=False)
    # Only the pools the timed strategies run on: a torch strategy does not wait on JAX's or numba's.
    with pytest.warns(UnpinnedThreadsWarning, match=r"and threads\.torch is unpinned.*threads: 1 in the config") \
            as caught:
        scatterbench.bench("maxpool2d", ["torch_max_pool2d_indices"], threads={"torch": None}, **small)
    assert len(caught) == 1 and "\n" not in str(caught[0].message)
    # Pinned, the same load says nothing; unpinned on a quiet machine neither.
    from impls.backends import thread_knobs

    every = {backend.name: 1 for backend in thread_knobs() if not backend.unavailable()}
    assert pinning.oversubscription_warning(every, load=10.0, cores=2) is None
    assert pinning.oversubscription_warning({}, load=1.0, cores=2) is None
    assert "threads.numba, threads.numpy are unpinned" in pinning.oversubscription_warning(dict(every, numba=None, numpy=None), 2.0, 2)
    assert "and threads.numpy is unpinned" in pinning.oversubscription_warning({}, 2.0, 2, backends={"numpy", "cupy"})
    assert pinning.oversubscription_warning({"torch": 1}, 2.0, 2, backends={"torch"}) is None
    config = tiny_config(UNPINNED_CONFIG)
    ran = cli("run", config, "-o", tmp_path / "out", "--no-progress", plugins=[BUSY])
    assert ran.returncode == 0, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.startswith("warning: the machine is loaded")]
    assert len(lines) == 1 and "threads.torch" in lines[0] and "threads: 1 in the config" in lines[0], ran.stderr
    assert "threads.jax" not in lines[0] and "threads.numba" not in lines[0], lines[0]


CRASH_CONFIG = """
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0, timeout_s: 30}
threads: {torch: 1, numpy: 1, numba: 1}
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d_indices, fault_segfaults, numpy_sliding_window]
    params: {N: 1, C: 1, H: [4, 8], W: 4, k: 2}
"""


def test_a_segfault_without_isolate_is_run_isolated_on_resume(tmp_path, tiny_config):
    config = tiny_config(CRASH_CONFIG)
    out = tmp_path / "out"
    crashed = cli("run", config, "-o", out, "--no-progress", plugins=[FAULTS])
    assert crashed.returncode == -signal.SIGSEGV, crashed.stderr
    in_flight = json.loads((out / IN_FLIGHT).read_text())
    assert in_flight["strategy_key"] == ["maxpool2d", "fault_segfaults", "cpu", "float32"]
    resumed = cli("run", config, "--resume", out, "--no-progress", plugins=[FAULTS])
    assert resumed.returncode == 0, resumed.stderr
    assert "maxpool2d/fault_segfaults (cpu, float32) was running when an earlier attempt" in resumed.stderr
    rows = read_rows(out)
    assert len(rows) == 6 and rows["case_id"].is_unique
    for _, row in rows.iterrows():
        if row["strategy"] == "fault_segfaults":
            assert row["status"] == "error" and f"killed by signal {int(signal.SIGSEGV)}" in row["message"], row
        else:
            assert row["status"] == "ok", row
    assert read_meta(out)["crashed"] == [["maxpool2d", "fault_segfaults", "cpu", "float32"]]
    assert not (out / IN_FLIGHT).exists()


# ------------------------------------------------------------------ issue 31
UNREPEATABLE = PLUGINS / "unrepeatable_plugin.py"
# Each is right on its first call: a sum kept between calls, and a mask folded into its input.
DISHONEST = {"kept_accumulator": "unrepeatable", "mask_folded_into_input": "input-modified"}
DISHONEST_CONFIG = """
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0}
threads: {torch: 1, numpy: 1, numba: 1}
benchmarks:
  - op: dispersion
    strategies: [kept_accumulator, mask_folded_into_input, torch_index_add, seed_loop]
    params: {B: 1, C: 4, H: 8, W: 8, S: 1}
"""


def assert_dishonest_recorded_and_untimed(rows, samples=None):
    """Each dishonest strategy with its own status, a message saying what it
    did, and no time; the honest ones timed."""
    by_name = {row["strategy"]: row for _, row in rows.iterrows()}
    for name, status in DISHONEST.items():
        row = by_name[name]
        assert row["status"] == status, (name, row["message"])
        assert row["message"].startswith("adversarial check ")
        what = "call 1 matched the oracle, call 4 on the same inputs did not" if status == "unrepeatable" \
            else "overwrote its input 'x'"
        assert what in row["message"], row["message"]
        assert pd.isna(row.get("median_s")), row.get("median_s")  # never timed
        if samples is not None:
            assert row["case_id"] not in samples
    for name in ("torch_index_add", "seed_loop"):
        assert by_name[name]["status"] == "ok" and by_name[name]["median_s"] > 0, by_name[name]["message"]


@pytest.fixture(scope="module")
def dishonest_runs(tmp_path_factory):
    """`check`, `run` and `regress` against that run, with the plugin named by its file."""
    root = tmp_path_factory.mktemp("dishonest")
    config = root / "dishonest.yaml"
    config.write_text(DISHONEST_CONFIG)
    checked = cli("check", config, "--no-progress", "--all", plugins=[UNREPEATABLE])
    ran = cli("run", config, "-o", root / "run", "--no-progress", plugins=[UNREPEATABLE])
    gated = cli("regress", root / "run", config, "-o", root / "gate", "--factor", "5", "--no-progress",
                plugins=[UNREPEATABLE])
    return root, checked, ran, gated


def test_check_fails_a_strategy_that_keeps_state_or_overwrites_its_input(dishonest_runs):
    _, checked, _, _ = dishonest_runs
    assert checked.returncode == 1, checked.stdout + checked.stderr
    fails = [line for line in checked.stdout.splitlines() if line.startswith("FAIL ")]
    kept = [line for line in fails if line.startswith("FAIL dispersion/kept_accumulator ")]
    folded = [line for line in fails if line.startswith("FAIL dispersion/mask_folded_into_input ")]
    assert kept and all("call 1 matched the oracle, call 4 on the same inputs did not: y: " in line for line in kept)
    assert folded and all("]: overwrote its input 'x' (inputs differ after call 4" in line for line in folded)
    assert len(fails) == len(kept) + len(folded)  # the honest strategies pass every item
    summary = checked.stdout.splitlines()[-1]
    assert f" {len(kept)} unrepeatable" in summary and f"({len(folded)} input-modified" in summary, summary


def test_run_records_dishonest_strategies_with_their_status_and_never_times_them(dishonest_runs):
    root, _, ran, _ = dishonest_runs
    assert ran.returncode == 0, ran.stderr
    assert_dishonest_recorded_and_untimed(read_rows(root / "run"), read_samples(root / "run"))
    # The run's summary names them, with their status.
    assert "dispersion/kept_accumulator cpu float32 B=1 C=4 H=8 W=8 S=1: unrepeatable: adversarial check" \
        in " ".join(ran.stdout.split())


def test_regress_records_dishonest_strategies_with_their_status_and_never_times_them(dishonest_runs):
    root, _, _, gated = dishonest_runs
    assert gated.returncode == 0, gated.stdout + gated.stderr
    assert_dishonest_recorded_and_untimed(read_rows(root / "gate" / "run"), read_samples(root / "gate" / "run"))


@pytest.fixture
def dishonest():
    from harness.base import plugins
    from impls.registry import get_operator

    plugins.load_plugins(str(UNREPEATABLE))
    yield
    for name in DISHONEST:
        get_operator("dispersion").strategies.pop(name, None)
    sys.modules.pop("unrepeatable_plugin", None)


def test_bench_records_dishonest_strategies_with_their_status_and_never_times_them(dishonest):
    import scatterbench

    result = scatterbench.bench("dispersion", [*DISHONEST, "torch_index_add", "seed_loop"], B=1, C=4, H=8, W=8,
                                S=1, timing=TINY_TIMING, threads=PINNED, plot=False)
    assert_dishonest_recorded_and_untimed(result.rows)
    for name, status in DISHONEST.items():
        assert status in set(result.checks[result.checks["strategy"] == name]["status"])
