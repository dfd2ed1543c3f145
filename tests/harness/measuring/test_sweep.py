"""Faults, interruptions and bad configs: the sweep goes on, nothing measured is lost."""

import math
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import cli
from harness.base.config import ConfigError, parse_config
from harness.results.store import read_meta, read_rows
from tests.harness.terminal import sigint_as_at_a_terminal
from tests.helpers import benchmark, config_yaml, plugin_env, scatterbench

pytestmark = pytest.mark.slow  # subprocesses, sweeps or compiles: `make test` runs them, `make test-fast` does not



def statuses(out):
    rows = read_rows(out)
    return {r["strategy"]: (r["status"], r["message"]) for _, r in rows.iterrows()}


def test_raise_hang_and_out_of_memory_are_recorded_and_the_sweep_finishes(tiny_config, tmp_path):
    config = tiny_config("""
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0, timeout_s: 2}
benchmarks:
  - op: maxpool2d
    strategies: [fault_raises, fault_sleeps, fault_allocates, torch_max_pool2d_indices]
    params: {N: 1, C: 1, H: 4, W: 4, k: 2}
""")
    result = scatterbench("run", config, "-o", tmp_path / "out", "--no-progress", env=plugin_env("fault_plugin"))
    assert result.returncode == 0, result.stderr
    found = statuses(tmp_path / "out")
    assert found["fault_raises"][0] == "error" and "deliberate failure" in found["fault_raises"][1]
    assert found["fault_sleeps"][0] == "timeout" and "2 s" in found["fault_sleeps"][1]
    assert found["fault_allocates"][0] == "error" and "out of memory" in found["fault_allocates"][1]
    assert found["torch_max_pool2d_indices"][0] == "ok"


def test_isolate_survives_a_segfault(tiny_config, tmp_path):
    config = tiny_config("""
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0, timeout_s: 30}
benchmarks:
  - op: maxpool2d
    strategies: [fault_segfaults, torch_max_pool2d_indices]
    params: {N: 1, C: 1, H: 4, W: 4, k: 2}
""")
    result = scatterbench("run", config, "-o", tmp_path / "out", "--isolate", "--no-progress",
                          env=plugin_env("fault_plugin"))
    assert result.returncode == 0, result.stderr
    found = statuses(tmp_path / "out")
    assert found["fault_segfaults"][0] == "error"
    assert f"killed by signal {int(signal.SIGSEGV)}" in found["fault_segfaults"][1]
    assert found["torch_max_pool2d_indices"][0] == "ok"


def test_memory_guard_skips_a_case_that_cannot_fit(tiny_config, tmp_path):
    config = tiny_config("""
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d_indices]
    params: {N: 4096, C: 4096, H: 4096, W: 4096, k: 2}
""")
    started = time.perf_counter()
    result = scatterbench("run", config, "-o", tmp_path / "out", "--no-progress")
    assert result.returncode == 0, result.stderr
    status, message = statuses(tmp_path / "out")["torch_max_pool2d_indices"]
    assert status == "skipped" and "GiB free" in message and "skipped before allocating" in message
    assert time.perf_counter() - started < 60


SLOW_SWEEP = """
timing: {min_samples: 5, budget_s: 0.3, warmup_s: 0}
benchmarks:
  - op: maxpool2d
    strategies: [spin_steady]
    params: {N: 1, C: 1, H: [4, 6, 8, 10, 12, 14, 16, 18], W: 4, k: 2}
"""


def start_slow_sweep(tmp_path, out):
    config = tmp_path / "slow.yaml"
    config.write_text(SLOW_SWEEP)
    process = subprocess.Popen([sys.executable, "-m", "harness", "run", str(config), "-o", str(out),
                                "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=plugin_env("spin_plugin"),
                               preexec_fn=sigint_as_at_a_terminal)
    deadline = time.time() + 120
    rows = out / "rows.csv"
    while time.time() < deadline:
        if rows.exists() and rows.read_text().count("\n") >= 3:  # header + 2 finished cases
            return config, process
        time.sleep(0.05)
    process.kill()
    pytest.fail("the sweep never got going")


def test_ctrl_c_stops_cleanly_and_says_where_results_are(tmp_path):
    out = tmp_path / "out"
    config, process = start_slow_sweep(tmp_path, out)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert f"every finished case is in {out}" in stderr and "--resume" in stderr
    assert "Traceback" not in stderr
    assert read_meta(out)["status"] == "interrupted"
    assert 2 <= len(read_rows(out)) < 8


def test_kill_9_mid_run_then_resume_has_every_case_exactly_once(tmp_path):
    out = tmp_path / "out"
    config, process = start_slow_sweep(tmp_path, out)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    done_before = len(read_rows(out))
    assert 2 <= done_before < 8
    resumed = scatterbench("run", config, "--resume", out, "--no-progress", env=plugin_env("spin_plugin"))
    assert resumed.returncode == 0, resumed.stderr
    rows = read_rows(out)
    assert len(rows) == 8 and rows["case_id"].is_unique
    assert set(rows["status"]) == {"ok"}
    assert read_meta(out)["resumed"]


def test_a_run_is_not_resumed_from_another_commit(tiny_config, tmp_path):
    """A run names one commit: rows measured from other code would be published as its."""
    config = tiny_config(config_yaml(benchmark("maxpool2d", ["torch_max_pool2d_indices"], N=1, C=2, H=8, W=8, k=2)))
    out = tmp_path / "out"
    first = scatterbench("run", config, "-o", out, "--no-progress", env=plugin_env(SCATTERBENCH_GIT_COMMIT="a" * 40))
    assert first.returncode == 0, first.stderr
    later = scatterbench("run", config, "--resume", out, "--no-progress", env=plugin_env(SCATTERBENCH_GIT_COMMIT="b" * 40))
    assert later.returncode == 2
    assert (f"--resume {out}: the run was measured at commit aaaaaaaaaaaa and this checkout is at bbbbbbbbbbbb"
            in later.stderr) and "Traceback" not in later.stderr
    assert read_meta(out)["git_commit"] == "a" * 40 and "resumed" not in read_meta(out)


def test_a_run_stopped_before_its_first_write_resumes_and_a_damaged_one_does_not(tiny_config, tmp_path):
    """A signal between meta.json and the writer's first line leaves a run with
    neither rows nor samples: none of its cases is done, and --resume runs them
    all. A run that has samples but lost its rows is damaged and refused."""
    config = tiny_config(config_yaml(benchmark("maxpool2d", ["torch_max_pool2d_indices"], N=1, C=2, H=8, W=8, k=2)))
    out, env = tmp_path / "out", plugin_env(SCATTERBENCH_GIT_COMMIT="a" * 40)
    first = scatterbench("run", config, "-o", out, "--no-progress", env=env)
    assert first.returncode == 0, first.stderr
    cases = len(read_rows(out))
    (out / "rows.csv").unlink()
    damaged = scatterbench("run", config, "--resume", out, "--no-progress", env=env)
    assert damaged.returncode == 2 and f"{out / 'rows.csv'}: missing" in damaged.stderr, damaged.stderr
    (out / "samples.jsonl").unlink()
    resumed = scatterbench("run", config, "--resume", out, "--no-progress", env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert len(read_rows(out)) == cases and read_rows(out)["case_id"].is_unique


def test_bad_plugin_is_a_usage_error(tmp_path):
    result = scatterbench("list", env=plugin_env("no_such_plugin_module"))
    assert result.returncode == 2 and "SCATTERBENCH_PLUGINS: cannot import 'no_such_plugin_module'" in result.stderr


def test_unsupported_dtype_for_a_named_strategy(tiny_config):
    path = tiny_config("""
dtypes: [bfloat16]
benchmarks:
  - op: maxpool2d
    strategies: [numpy_sliding_window]
    params: {N: 1, C: 1, H: 4, W: 4, k: 2}
""")
    with pytest.raises(ConfigError, match=r"benchmarks\[0\].dtypes: bfloat16 is not supported by numpy_sliding_window"):
        from harness.base.config import load_config
        load_config(path)


# ------------------------------------------------------------------ fuzzing
VALID = {
    "timing": {"min_samples": 5, "budget_s": 0.01},
    "benchmarks": [{"op": "maxpool2d", "strategies": ["torch_max_pool2d_indices"],
                    "params": {"N": 1, "C": 1, "H": 4, "W": 4, "k": 2}}],
}
GARBAGE = st.one_of(st.text(max_size=8), st.integers(-5, 0), st.floats(allow_nan=True), st.none(),
                    st.lists(st.integers(), max_size=0), st.booleans(), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
PATHS = [("benchmarks", 0, "op"), ("benchmarks", 0, "params", "k"), ("benchmarks", 0, "params", "N"),
         ("benchmarks", 0, "strategies"), ("timing", "min_samples"), ("timing", "budget_s"), ("devices",),
         ("dtypes",), ("benchmarks",), ("benchmarks", 0, "params")]


def _mutate(config, path, value):
    target = config
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return config


def _is_valid(data) -> bool:
    try:
        parse_config(data)
        return True
    except ConfigError:
        return False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(PATHS), value=GARBAGE, extra_key=st.text(min_size=1, max_size=6))
def test_fuzzed_bad_configs_end_in_a_clean_exit_2(tmp_path, capsys, path, value, extra_key):
    import copy

    data = _mutate(copy.deepcopy(VALID), path, value)
    if extra_key not in data:
        data = dict(data, **{extra_key: 1}) if len(extra_key) % 2 else data
    if _is_valid(data):
        return  # the mutation happened to produce a valid config; nothing to test
    path_file = tmp_path / "fuzz.yaml"
    path_file.write_text(yaml.safe_dump(data))
    code = cli.main(["run", str(path_file), "-o", str(tmp_path / "never"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("scatterbench: error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert not (tmp_path / "never").exists()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=60))
def test_fuzzed_yaml_text_never_crashes_the_loader(tmp_path, text):
    from harness.base.config import load_config

    path = tmp_path / "raw.yaml"
    path.write_text(text)
    try:
        load_config(path)
    except ConfigError as error:
        assert "\n" not in str(error)


# ------------------------------------------------------------------ issue 31
# Timing that counts calls, not seconds: thirty samples in three rounds of ten each.
COUNTED = {"min_samples": 30, "max_samples": 30, "budget_s": 1e-9, "warmup_s": 0, "max_rounds": 3}


def _goes_wrong_after(calls: int, how: str):
    """A maxpool2d strategy right for its first ``calls`` calls (more than the
    check makes), then wrong (``how="answer"``) or writing into its input
    (``how="input"``)."""
    from impls import maxpool2d

    def prepare(inputs, params):
        answer = maxpool2d.numpy_sliding_window(inputs, params)
        made = []

        def run():
            made.append(1)
            values, indices = answer()
            if len(made) > calls:
                if how == "answer":
                    values = values + 1
                else:
                    inputs["x"][0, 0, 0, 0] = 99.0
            return values, indices
        return run
    return prepare


@pytest.mark.parametrize("how,status", [("answer", "unrepeatable"), ("input", "input-modified")])
def test_the_call_after_timing_is_judged_and_a_wrong_one_publishes_no_time(planted, how, status):
    from harness.base.config import Case
    from harness.measuring.check import REPEAT_CALL
    from harness.measuring.sweep import execute_case

    name = f"wrong_after_timing_{how}"
    planted("maxpool2d", name, _goes_wrong_after(REPEAT_CALL + 2, how), returns="values+indices", ties="first")
    planted("maxpool2d", "right_every_time", _goes_wrong_after(10**9, how), returns="values+indices", ties="first")
    # Ten timed calls a round, whatever the machine's speed (a budget spent at once, thirty samples over
    # three rounds): every round's judged call comes after the plant has gone wrong.
    config = parse_config({"timing": COUNTED,
                           "benchmarks": [{"op": "maxpool2d", "strategies": [name, "right_every_time"],
                                           "params": {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}}]})
    params = (("C", 2), ("H", 8), ("N", 1), ("W", 8), ("k", 2))
    wrong = execute_case(Case("maxpool2d", name, "cpu", "float32", params), config, "r", 30.0)
    assert wrong.row["status"] == status, wrong.row["message"]
    assert wrong.samples_s == [] and "median_s" not in wrong.row
    assert re.search(r"the last of its \d+ timed samples.*; its timing is not published$", wrong.row["message"]), \
        wrong.row["message"]
    if how == "input":
        assert wrong.row["message"].startswith("overwrote its input 'x'")
    else:
        assert wrong.row["message"].startswith("call 1 matched the oracle, the last of its ")
    right = execute_case(Case("maxpool2d", "right_every_time", "cpu", "float32", params), config, "r", 30.0)
    assert right.row["status"] == "ok" and right.row["median_s"] > 0 and len(right.samples_s) == 30


def test_a_case_wrong_from_its_second_call_publishes_no_time(planted):
    """The sweep judges call 1 and the call after the timed samples (the
    judgement of a big case costs seconds, and the timed calls come between):
    a strategy right only once is timed, then caught, and its time dropped."""
    from harness.base.config import Case
    from harness.measuring.sweep import execute_case

    planted("maxpool2d", "wrong_from_call_2", _goes_wrong_after(1, "answer"), returns="values+indices", ties="first")
    config = parse_config({"timing": COUNTED,
                           "benchmarks": [{"op": "maxpool2d", "strategies": ["wrong_from_call_2"],
                                           "params": {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}}]})
    params = (("C", 2), ("H", 8), ("N", 1), ("W", 8), ("k", 2))
    clock = []
    result = execute_case(Case("maxpool2d", "wrong_from_call_2", "cpu", "float32", params), config, "r", 30.0,
                          on_phase=clock.append)
    assert result.row["status"] == "unrepeatable" and result.samples_s == [] and "median_s" not in result.row
    assert result.row["message"].startswith("call 1 matched the oracle, the last of its "), result.row["message"]
    assert result.row["message"].endswith("; its timing is not published")
    assert clock.index("time") < len(clock) - 1 and clock[-1] == "check"  # timed, then judged again


@pytest.mark.parametrize("load_before", ["quiet", "busy"])
def test_a_run_waits_for_the_load_its_own_workers_left_and_not_for_the_machines(tiny_config, tmp_path,
                                                                               monkeypatch, load_before):
    """A cold `make bench` on 2 cores went from its adversarial workers to
    its first cases with the load they left (2.0) still in the 1-minute
    average, and the fitness rule refused it for a load that was its own.
    Here the workers leave the load half a core above the core count,
    falling fast: a run that started quiet waits (phase "load settling")
    and every case records a load below the cores; a machine that was
    already busy is not waited for, and its run is still called unfit."""
    from harness.judging import analysis
    from harness.measuring import ceilings, prefetch
    from tests.harness.measuring.test_verdict_cache import TWO_STRATEGIES, quiet_machine

    cores = os.cpu_count()
    machine = {"base": 0.25 * cores if load_before == "quiet" else cores + 0.5, "workers_ended": None}

    def getloadavg():
        load, ended = machine["base"], machine["workers_ended"]
        if ended is not None:  # their load decays towards the base, here in a fraction of a second
            load += (cores + 0.5 - load) * math.exp(-(time.monotonic() - ended) / 0.3)
        return (load, load, load)

    def workers(adversarial, keys, threads, count):  # they answer nothing: the sweep asks in-process
        machine["workers_ended"] = time.monotonic()
        return 0

    monkeypatch.setattr(os, "getloadavg", getloadavg)
    monkeypatch.setattr(ceilings, "measure", quiet_machine)
    monkeypatch.setattr(prefetch, "workers_for", lambda keys, cores=None: 2)
    monkeypatch.setattr(prefetch, "prefetch", workers)
    out = tmp_path / "run"
    assert cli.main(["run", str(tiny_config(TWO_STRATEGIES)), "-o", str(out), "--no-progress"]) == 0
    meta, rows = read_meta(out), read_rows(out)
    load_reasons = [reason for reason in analysis.run_unfit_reasons(meta, rows) if reason.startswith("load")]
    if load_before == "quiet":
        assert meta["phase_s"]["load settling"] > 0
        assert (rows["load_avg"] < cores).all(), rows["load_avg"].tolist()
        assert load_reasons == []
    else:
        assert "load settling" not in meta["phase_s"]
        assert load_reasons == [f"load {cores + 0.5:.2g} on {cores} cores"]


# A round's warm-up is warmup_s / max_rounds (24): 0.02 s gives under 1 ms, which a 30 ms call
# passes; 1.5 s gives 62 ms, which a call that sleeps 0 s on an 8×8 input does not, even on a
# loaded machine (0.02 s did not: a 1 ms first call there made it its own warm-up).
@pytest.mark.parametrize("call_s,warmup_s,warm_up_calls", [(0.03, 0.02, 0), (0.0, 1.5, 1)])
def test_the_checks_first_call_is_the_warm_up_of_a_call_slower_than_it(planted, call_s, warmup_s, warm_up_calls):
    """A case is called: once by the check, then warmed up and sampled; the
    last timed call's own output is judged again, with no call made for it.
    A call taking longer than the warm-up's time (a 1.2 s seed) is not made
    again to warm up: the check's call just made was that; a quicker one
    still warms up by time."""
    from harness.base.config import Case
    from harness.measuring.sweep import execute_case

    from impls import maxpool2d

    calls = []

    def prepare(inputs, params):
        answer = maxpool2d.numpy_sliding_window(inputs, params)

        def run():
            calls.append(time.sleep(call_s))
            return answer()
        return run

    planted("maxpool2d", "counted", prepare, returns="values+indices", ties="first")
    config = parse_config({"timing": {"min_samples": 5, "budget_s": 0.001, "warmup_s": warmup_s},
                           "benchmarks": [{"op": "maxpool2d", "strategies": ["counted"],
                                           "params": {"N": 1, "C": 2, "H": 8, "W": 8, "k": 2}}]})
    params = (("C", 2), ("H", 8), ("N", 1), ("W", 8), ("k", 2))
    result = execute_case(Case("maxpool2d", "counted", "cpu", "float32", params), config, "r", 30.0)
    assert result.row["status"] == "ok", result.row["message"]
    timed_calls = result.row["n_samples"] + result.row["slow_start"]
    if warm_up_calls:
        assert len(calls) >= 1 + warm_up_calls + timed_calls
    else:
        assert len(calls) == 1 + timed_calls
