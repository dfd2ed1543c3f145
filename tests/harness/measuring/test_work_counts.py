"""The check's work, counted (harness/measuring/work_counts.py) and held at
tiny sizes on the CPU for gpu.yaml's operators. On an H200 the check of
gpu.yaml took 11 minutes before anything was timed: autotune benchmarks at
every check size, references computed again for every strategy, a fresh
``jax.jit`` per training item, a cut check started over. None of that shows
in seconds on a CPU; all of it shows in these counts. Triton runs under the
interpreter (tests/conftest.py)."""

import itertools
import json
import os
import subprocess
import sys

import pytest

from harness.base import caches
from harness.base.checkout import ROOT
from harness.base.config import load_config
from harness.measuring import check, gpu_steps, work_counts
from impls import training
from impls.registry import get_operator
from impls.status import SKIPPED
from tests.helpers import benchmark, config_yaml

GPU_OPS = gpu_steps.checked_ops(load_config(str(ROOT / "configs" / "gpu.yaml")))


def counted(items):
    """Each item run as a check worker runs it, and what they cost."""
    before = work_counts.snapshot()
    verdicts = [check.run_one_check(item, 0) for item in items]
    return verdicts, work_counts.since(before)


def strategies(op: str, backend: str, compiled: bool | None = None):
    found = [strat for strat in get_operator(op).strategies.values() if strat.backend == backend
             and not strat.name.startswith("seed") and (compiled is None or bool(strat.quick_check) == compiled)]
    return found


def test_fields_are_one_list_driving_the_counts_and_their_seconds():
    counts = work_counts.snapshot()
    assert [key for key in counts if not key.endswith("_s")] == list(work_counts.NAMES)
    assert {key[:-2] for key in counts if key.endswith("_s")} == {f.name for f in work_counts.FIELDS if f.timed}
    with pytest.raises(KeyError, match="not one of work_counts.FIELDS"):
        work_counts.add("graphs")
    before = work_counts.snapshot()
    work_counts.add(work_counts.CALLS, 0.25)
    assert work_counts.since(before)[work_counts.CALLS] == 1
    assert work_counts.since(before)[work_counts.CALLS + "_s"] == pytest.approx(0.25)
    assert work_counts.total([{"calls": 2, "calls_s": 1.0}, {"calls": 3}])["calls"] == 5
    assert work_counts.line({"calls": 3, "calls_s": 1.5, "oracle_runs": 0}) == "calls 3 (1.5 s)"


def test_a_library_without_the_hook_read_is_not_counted_and_the_check_goes_on(monkeypatch):
    def missing():
        raise AttributeError("module 'triton.knobs' has no attribute 'runtime'")  # another version's layout

    monkeypatch.setitem(work_counts._HOOKS, "a_library", missing)
    work_counts.install("a_library")  # no exception: the counts are a measurement of the check, never its judge
    work_counts.install("numpy")  # nothing to count there


@pytest.mark.parametrize("op", GPU_OPS)
def test_a_check_never_enters_the_triton_autotuner(op):
    """Triton before 3.9 benchmarks even the one config a prune leaves
    (about 0.1 s): the check launches the first config past the autotuner,
    forward and backward, and still judges every call."""
    found = strategies(op, "triton")
    assert found, f"{op}: no Triton strategy"
    for strat in found:
        items = [item for mode in (training.FORWARD, training.BACKWARD)
                 for item in check.adversarial_items(strat, "cpu", "float32", mode)[:1]]
        verdicts, counts = counted(items)
        assert {v.status for v in verdicts} == {"ok"}, [v.message for v in verdicts]
        assert counts[work_counts.TRITON_AUTOTUNER_RUNS] == 0, (strat.key, counts)
        assert counts[work_counts.TRITON_BENCHMARKS] == 0, (strat.key, counts)
        assert counts[work_counts.CALLS] == check.REPEAT_CALL * len(items), counts  # every call judged


@pytest.mark.parametrize("op", GPU_OPS)
def test_the_oracle_runs_once_per_case_for_the_whole_check(op):
    """Every strategy, layout and training mode of a case shares its float64
    reference: the forward oracle once per case, the gradient oracle once per
    case of a training mode, however many keys ask (they used to be kept 8 at
    a time, so each key computed them all again)."""
    check.clear_references()
    chosen = strategies(op, "numpy", compiled=False)[:1] + strategies(op, "torch", compiled=False)[:1]
    assert len(chosen) == 2, chosen
    items = [item for strat in chosen for mode in training.TRAINING_MODES
             for item in check.adversarial_items(strat, "cpu", "float32", mode)]
    verdicts, counts = counted(items)
    judged = [item for item, verdict in zip(items, verdicts) if verdict.status != SKIPPED]
    cases = {(item.params, item.dtype, item.mode) for item in judged}
    gradients = {(item.params, item.dtype, item.mode) for item in judged if item.training != training.FORWARD}
    assert gradients and len(judged) > 2 * len(cases)  # the same cases asked again and again
    assert counts[work_counts.ORACLE_RUNS] == len(cases) + len(gradients), counts


@pytest.mark.parametrize("op", GPU_OPS)
def test_a_jax_training_mode_traces_once_per_shape(op):
    """jax.jit keeps its traces per jit: the training modes' jits are made
    once per function, mode and shape, so an item whose shape and dtype an
    earlier item had (the adversarial inputs after the random ones, a key
    checked again) traces and compiles nothing. They used to be made again
    at every item's prepare."""
    pytest.importorskip("jax")
    strat = next(strat for strat in strategies(op, "jax")
                 if not training.applies(strat, training.BACKWARD, dict(check.adversarial_items(strat, "cpu",
                                                                                               "float32")[0].params)))
    for mode in (training.BACKWARD, training.FORWARD_BACKWARD):
        items = check.adversarial_items(strat, "cpu", "float32", mode)
        seen, traced = set(), []
        for item in items * 2:
            _, counts = counted([item])
            if (item.params, item.dtype) in seen:
                traced.append((item.label, counts[work_counts.JAX_TRACES], counts[work_counts.JAX_COMPILES]))
            seen.add((item.params, item.dtype))
        assert len(traced) > len(items) and all(t == c == 0 for _, t, c in traced), (mode, traced)


@pytest.mark.parametrize("op", ["maxpool2d"])
def test_torch_compile_compiles_once_per_signature(op):
    """A torch.compile strategy's key checked again compiles nothing: its
    graphs (one per shape, layout and dtype) are kept for the whole key."""
    strat = strategies(op, "torch", compiled=True)[0]
    items = check.adversarial_items(strat, "cpu", "float32", training.FORWARD)
    _, first = counted(items)
    _, again = counted(items)
    signatures = {(item.params, item.layout) for item in items}
    assert 0 < first[work_counts.TORCH_COMPILES] <= len(signatures), first
    assert again[work_counts.TORCH_COMPILES] == 0, again


# ------------------------------------------------------------- a cut check
TINY = config_yaml(dict(benchmark("maxpool2d", ["numpy_sliding_window", "torch_reshape_argmax"], N=1, C=2, H=6, W=6,
                                  k=2), modes=["forward", "backward"]))


def run_check(config, cache, counts):
    env = dict(os.environ, **{caches.ENV: str(cache)})
    done = subprocess.run([sys.executable, "-m", "harness", "check", str(config), "--no-progress", "--counts",
                           str(counts)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, json.loads(counts.read_text())["total"]


def test_a_cut_check_resumes_without_judging_again(tmp_path):
    """The check's journal (verdict_cache.ItemJournal) holds each key's items
    as they come back: the same command after a cut (here, the journal cut
    after its first key's lines, the last one torn as a KILL leaves it) runs
    only the keys not written whole, and prints the same verdicts."""
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY)
    cache = tmp_path / "cache"
    whole_out, whole = run_check(config, cache, tmp_path / "whole.json")
    per_operator = json.loads((tmp_path / "whole.json").read_text())["per_operator"]
    assert list(per_operator) == ["maxpool2d"] and per_operator["maxpool2d"] == whole  # the workers' and its own
    [journal] = (cache / "verdicts").glob("*.items.jsonl")
    lines = journal.read_text().splitlines(keepends=True)

    def key(line):  # (strategy, dtype, device, training mode) of a line's item; None: a line of dependencies
        entry = json.loads(line)
        if "item" not in entry:
            return None
        item = json.loads(entry["item"])
        return item[0], item[2], item[3], item[6]

    first = next(key(line) for line in lines if key(line) is not None)
    kept = list(itertools.takewhile(lambda line: key(line) in (None, first), lines))  # the first key's lines
    items_kept = sum(key(line) is not None for line in kept)
    assert 0 < items_kept and len(kept) < len(lines)
    journal.write_text("".join(kept) + lines[len(kept)][:20])  # the next line torn midway
    resumed_out, resumed = run_check(config, cache, tmp_path / "resumed.json")
    assert f"{items_kept} of" in resumed_out and "judged before by the same code" in resumed_out
    assert 0 < resumed[work_counts.CALLS] < whole[work_counts.CALLS]
    table = [line for line in whole_out.splitlines() if line.startswith(("│", "FAIL", "KNOWN", "SKIPPED"))]
    assert table == [line for line in resumed_out.splitlines() if line.startswith(("│", "FAIL", "KNOWN", "SKIPPED"))]
    again_out, again = run_check(config, cache, tmp_path / "again.json")
    assert again[work_counts.CALLS] == 0 and again[work_counts.ORACLE_RUNS] == 0, again


# gpu-more.yaml's shape: TINY's strategies at a larger point (over check.max_bytes: not checked there),
# forward only
MORE = config_yaml(dict(benchmark("maxpool2d", ["numpy_sliding_window", "torch_reshape_argmax"], N=4, C=8, H=512,
                                  W=512, k=2)))


def test_a_second_config_given_the_first_runs_cache_judges_nothing_again(tmp_path):
    """docs/GPU.md's second lease: gpu-more.yaml's check, given gpu.yaml's run's cache
    (SCATTERBENCH_CACHE_DIR), reads every item it shares with it from that run's journal: no
    strategy called, no oracle run, and the same verdicts printed."""
    first, more = tmp_path / "tiny.yaml", tmp_path / "more.yaml"
    first.write_text(TINY)
    more.write_text(MORE)
    cache = tmp_path / "cache"
    _, alone = run_check(more, tmp_path / "bare", tmp_path / "alone.json")
    assert alone[work_counts.CALLS] > 0 and alone[work_counts.ORACLE_RUNS] > 0  # without that cache: judged
    run_check(first, cache, tmp_path / "first.json")
    more_out, counts = run_check(more, cache, tmp_path / "more.json")
    assert counts[work_counts.CALLS] == 0 and counts[work_counts.ORACLE_RUNS] == 0, counts
    assert "judged before by the same code" in more_out


def test_the_journal_keeps_nothing_the_machine_may_have_caused(tmp_path):
    from harness.measuring import verdict_cache
    from impls.common import Verdict

    cache = verdict_cache.VerdictCache(0, folder=tmp_path)
    journal = verdict_cache.ItemJournal(cache)
    strat = get_operator("maxpool2d").strategies["numpy_sliding_window"]
    items = check.adversarial_items(strat, "cpu", "float32")[:3]
    results = [check.CheckResult(items[0], Verdict("ok"), 0.1),
               check.CheckResult(items[1], Verdict("timeout", "past 1 s"), 1.0),
               check.CheckResult(items[2], Verdict("mismatch", "wrong", differences=frozenset({"value"})), 0.2)]
    assert journal.write(results) == 2
    found = journal.read(items)
    assert set(found) == {items[0], items[2]}
    assert found[items[2]].verdict == results[2].verdict
    assert verdict_cache.ItemJournal(verdict_cache.VerdictCache(1, folder=tmp_path)).read(items) == {}  # another seed


def test_a_cut_check_resumes_only_what_its_code_still_holds(tmp_path):
    """A journal's items carry the code their check loaded: a helper edited between the cut and the
    resume checks those items again, and the items of a worker that never loaded it are kept."""
    from harness.base.loaded_code import current_digest, loaded_code
    from harness.measuring import verdict_cache
    from impls.common import Verdict

    helper = tmp_path / "helper.py"
    helper.write_text("VALUE = 1\n")
    depends = {**loaded_code(), f"file:{helper}": current_digest(f"file:{helper}")}
    journal = verdict_cache.ItemJournal(verdict_cache.VerdictCache(0, folder=tmp_path / "cache"))
    strat = get_operator("maxpool2d").strategies["numpy_sliding_window"]
    items = check.adversarial_items(strat, "cpu", "float32")[:2]
    assert journal.write([check.CheckResult(items[0], Verdict("ok"), 0.1, depends=depends),
                          check.CheckResult(items[1], Verdict("ok"), 0.1, depends=loaded_code())]) == 2
    assert set(journal.read(items)) == set(items)
    helper.write_text("VALUE = 2\n")
    assert set(verdict_cache.ItemJournal(journal.cache).read(items)) == {items[1]}


# ---------------------------------------------------------- caches in DIR
def test_the_gpu_steps_compile_into_the_run_directory(tmp_path):
    """Under ``scatterbench gpu`` every library's compile cache (Inductor's,
    AOTAutograd's, Triton's, JAX's) is in DIR/steps/cache/compile, and what a
    step compiles lands there."""
    pytest.importorskip("jax")
    steps = tmp_path / "run" / "steps"
    env = {key: value for key, value in os.environ.items()
           if key not in (caches.ENV, caches.COMPILE_ENV, "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
                          "JAX_COMPILATION_CACHE_DIR")}
    code = ("import json, os, jax, jax.numpy as jnp\n"
            "from harness.base import caches\n"
            "caches.enable_compile_caches()\n"
            "jax.jit(lambda x: x * 2 + 1)(jnp.ones(3)).block_until_ready()\n"
            "print(json.dumps({k: os.environ.get(k) for k in ('TORCHINDUCTOR_CACHE_DIR', "
            "'TORCHINDUCTOR_AUTOGRAD_CACHE', 'TRITON_CACHE_DIR', 'JAX_COMPILATION_CACHE_DIR')}))\n")
    with pytest.MonkeyPatch.context() as patch:
        for key in (caches.ENV, caches.COMPILE_ENV):
            patch.delenv(key, raising=False)
        step_env = gpu_steps.step_environment(steps)
    env.update({key: step_env[key] for key in (caches.ENV, caches.COMPILE_ENV)})
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    folders = json.loads(done.stdout.splitlines()[-1])
    compiled = (steps / "cache" / "compile").resolve()
    assert folders["TORCHINDUCTOR_AUTOGRAD_CACHE"] == "1"
    for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "JAX_COMPILATION_CACHE_DIR"):
        assert folders[key] and os.path.realpath(folders[key]).startswith(str(compiled)), (key, folders)
    assert any(path.is_file() for path in (compiled / "jax").rglob("*")), "JAX's program kept in the run"
