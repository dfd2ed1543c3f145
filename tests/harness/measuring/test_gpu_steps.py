"""`scatterbench gpu` (`make gpu`, harness/measuring/gpu_steps.py): the steps
of a config, their records as plan.py reads them, resuming (a finished step
is skipped, one cut by the budget or an interrupt runs again), the exit
statuses 0, 1 and 130, and the stop of a step's whole process group. The
steps are faked by small Python commands where the real ones take minutes;
the last test runs the real ones on a tiny CPU config."""

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from harness import cli
from harness.base import caches
from harness.base.checkout import ROOT
from harness.measuring import facts, gpu_steps
from harness.measuring import plan as window
from harness.results import store
from tests.helpers import benchmark, config_yaml, plugin_env, scatterbench, wait_for

TINY = config_yaml(benchmark("maxpool2d", ["torch_max_pool2d_indices"], N=1, C=2, H=6, W=6, k=2),
                   benchmark("dispersion", ["torch_fold"], B=1, C=3, H=4, W=5, S=1))
RECORD = re.compile(r'\{"step": "[\w-]+", "exit": \d+, "seconds": \d+, "end": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"\}\n')


def python_step(name: str, code: str, finished=(0,)) -> gpu_steps.Step:
    """A step whose command is ``code`` run by this interpreter."""
    return gpu_steps.Step(name, tuple(finished), lambda left: [sys.executable, "-c", code])


@pytest.fixture
def fake_steps(monkeypatch):
    """Replaces the config's steps with ``steps`` (a list, changed in place between calls)."""
    steps: list = []
    monkeypatch.setattr(gpu_steps, "plan_steps", lambda config_path, directory, tests, budgeted: list(steps))
    return steps


def test_a_configs_steps_check_every_operator_in_one_process_then_test_sweep_and_report(tiny_config, tmp_path):
    config = tiny_config(TINY)
    out = tmp_path / "gpu"
    steps = gpu_steps.plan_steps(str(config), out, "-m cuda tests/x.py", budgeted=True)
    # one check of both operators: the libraries imported, the device's workers started and the
    # references drawn once (issue 58), where a step per operator did each of them again
    assert [step.name for step in steps] == ["check", "pytest", "sweep", "report"]
    harness = [sys.executable, "-m", "harness"]
    assert steps[0].command(12.5) == [*harness, "check", str(config), "--no-progress",
                                      "--counts", str(out / "steps" / "check.counts.json")]
    assert steps[0].finished == (0, 1) and steps[1].finished == (0, 1, 5) and steps[2].finished == (0,)
    assert steps[1].command(None) == [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda",
                                      "tests/x.py"] and steps[1].cwd == ROOT
    # the sweep starts the run, or resumes it once its meta.json is there, with what is left of the budget
    assert steps[2].command(12.5) == [*harness, "run", str(config), "--grid", "--no-progress", "-o", str(out),
                                      "--budget", "12.5"]
    out.mkdir()
    (out / store.META).write_text("{}")
    assert steps[2].command(3.0)[-4:] == ["--resume", str(out), "--budget", "3.0"]
    assert "--budget" not in gpu_steps.plan_steps(str(config), out, "", budgeted=False)[2].command(None)
    assert steps[3].command(None) == [*harness, "report", str(out), "-o", str(out / "report")]


def test_each_finished_step_is_recorded_as_plan_reads_it_and_skipped_next_call(fake_steps, tmp_path, capsys):
    out = tmp_path / "gpu"
    ran = tmp_path / "ran.txt"
    mark = f"open({str(ran)!r}, 'a').write('{{}}\\n'); print('said by {{}}')"
    fake_steps += [python_step("check-a", mark.format("check-a", "check-a") + "; raise SystemExit(1)", (0, 1)),
                   python_step("pytest", mark.format("pytest", "pytest") + "; raise SystemExit(5)", (0, 1, 5)),
                   python_step("sweep", mark.format("sweep", "sweep"))]
    assert cli.main(["gpu", "unread.yaml", "-o", str(out)]) == 1  # check-a found failures
    said = capsys.readouterr().out
    assert "make gpu: check-a (no budget)" in said and "said by check-a" in said
    assert f"make gpu: every step finished: {out} (with failures: see its steps/*.log)" in said
    steps = out / store.STEPS
    records = window.read_steps(out)
    assert sorted(records) == ["check-a", "pytest", "sweep"]
    assert {name: (record["step"], record["exit"]) for name, record in records.items()} == {
        "check-a": ("check-a", 1), "pytest": ("pytest", 5), "sweep": ("sweep", 0)}
    for name in records:
        assert RECORD.fullmatch((steps / f"{name}.json").read_text()), name  # the one-line format results/ keep
        assert (steps / f"{name}.log").read_text() == f"said by {name}\n"
    assert (steps / ".gitignore").read_text() == gpu_steps.GITIGNORE and (steps / "cache").is_dir()
    assert "cache" not in gpu_steps.GITIGNORE  # the verdicts, the journal and the compiled code are committed

    assert cli.main(["gpu", "unread.yaml", "-o", str(out)]) == 1  # nothing run, the findings still said
    said = capsys.readouterr().out
    assert said.count("finished before") == 3 and f"make gpu: sweep finished before ({steps}/sweep.json)" in said
    assert ran.read_text().split() == ["check-a", "pytest", "sweep"]


def test_a_step_cut_by_the_budget_is_run_again_next_call_and_the_sweep_goes_on(fake_steps, tmp_path, capsys):
    out = tmp_path / "gpu"
    fake_steps += [python_step("check-a", "print('quick')", (0, 1)),
                   python_step("pytest", "import time; print('slow', flush=True); time.sleep(60)", (0, 1, 5))]
    started = time.monotonic()
    assert cli.main(["gpu", "unread.yaml", "-o", str(out), "--budget", "3"]) == 130
    assert time.monotonic() - started < 30  # stopped at the budget's end, not at the test's
    said = capsys.readouterr().out
    assert re.search(r"make gpu: pytest \(\d s of the budget left\)", said)
    assert re.search(rf"make gpu: pytest stopped \(the budget ran out, exit -?\d+\) after \d+ s; the same command "
                     rf"again goes on: make gpu GPU_RESULTS={re.escape(str(out))}", said)
    assert sorted(window.read_steps(out)) == ["check-a"] and "slow" in (out / "steps" / "pytest.log").read_text()

    fake_steps[1] = python_step("pytest", "print('fast now')", (0, 1, 5))
    fake_steps.append(python_step("sweep", "import sys; print(sys.argv)"))
    assert cli.main(["gpu", "unread.yaml", "-o", str(out), "--budget", "60"]) == 0
    said = capsys.readouterr().out
    assert "make gpu: check-a finished before" in said and "fast now" in said
    assert f"make gpu: every step finished: {out}" in said and "with failures" not in said
    assert sorted(window.read_steps(out)) == ["check-a", "pytest", "sweep"]


def test_a_budget_spent_before_a_step_stops_there_and_a_step_that_fails_to_finish_gives_its_status(
        fake_steps, tmp_path, capsys):
    clock = iter([0.0, 0.0, 5.0, 10.0, 11.0])  # the start, check-a's left, its start and end, pytest's left
    fake_steps += [python_step("check-a", "pass"), python_step("pytest", "pass")]
    out = tmp_path / "gpu"
    assert gpu_steps.run_gpu("unread.yaml", out, budget_s=10, clock=lambda: next(clock)) == 130
    said = capsys.readouterr().out
    assert "make gpu: GPU_BUDGET spent before pytest; the same command again goes on" in said
    assert sorted(window.read_steps(out)) == ["check-a"]

    fake_steps[1] = python_step("pytest", "raise SystemExit(4)", (0, 1, 5))  # pytest's usage error: not finished
    assert gpu_steps.run_gpu("unread.yaml", out) == 4
    assert "make gpu: pytest stopped (exit 4)" in capsys.readouterr().out
    assert sorted(window.read_steps(out)) == ["check-a"]
    with pytest.raises(cli.UsageError, match="--budget 0: must be a positive number"):
        gpu_steps.run_gpu("unread.yaml", out, budget_s=0)


def test_bad_input_is_one_line_and_makes_nothing(tiny_config, tmp_path, capsys):
    out = tmp_path / "gpu"
    assert cli.main(["gpu", str(tmp_path / "missing.yaml"), "-o", str(out)]) == 2
    assert "missing.yaml: cannot read" in capsys.readouterr().err
    assert cli.main(["gpu", str(tiny_config(TINY)), "-o", str(out), "--tests=-k 'unclosed"]) == 2
    assert "--tests \"-k 'unclosed\": No closing quotation" in capsys.readouterr().err
    assert cli.main(["gpu", str(tiny_config(TINY)), "-o", str(out), "--budget", "-5"]) == 2
    assert "--budget -5: must be a positive number of seconds" in capsys.readouterr().err
    assert not out.exists()


def test_a_step_ended_by_a_signal_exits_as_a_shell_says(fake_steps, tmp_path, capsys):
    fake_steps.append(python_step("check-a", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert gpu_steps.run_gpu("unread.yaml", tmp_path / "gpu") == 128 + signal.SIGKILL
    assert f"make gpu: check-a stopped (exit {-signal.SIGKILL})" in capsys.readouterr().out


def test_a_record_that_does_not_read_is_run_again(fake_steps, tmp_path, capsys):
    out = tmp_path / "gpu"
    (out / "steps").mkdir(parents=True)
    (out / "steps" / "check-a.json").write_text('{"step": "check-a", "exit": 0, "seco')
    fake_steps.append(python_step("check-a", "print('checked')"))
    assert gpu_steps.run_gpu("unread.yaml", out) == 0
    assert "cannot be read as a step's record: check-a runs again" in capsys.readouterr().out
    assert window.read_steps(out)["check-a"]["exit"] == 0


def test_the_steps_keep_the_verdicts_and_compiled_code_beside_the_run_unless_named_elsewhere(fake_steps, tmp_path, monkeypatch,
                                                                                   capsys):
    code = (f"import os; print(os.environ[{caches.ENV!r}]); print(os.environ[{caches.COMPILE_ENV!r}])")
    fake_steps.append(python_step("check-a", code))
    monkeypatch.setenv(caches.ENV, str(tmp_path / "user-cache"))
    monkeypatch.delenv(caches.COMPILE_ENV, raising=False)
    assert gpu_steps.run_gpu("unread.yaml", tmp_path / "one") == 0
    assert (tmp_path / "one" / "steps" / "check-a.log").read_text().split() == [
        str(tmp_path / "user-cache"), str(tmp_path / "user-cache" / "compile")]
    monkeypatch.delenv(caches.ENV)
    assert gpu_steps.run_gpu("unread.yaml", tmp_path / "two") == 0
    kept = (tmp_path / "two" / "steps" / "cache").resolve()  # the compiled code travels with the run too
    assert (tmp_path / "two" / "steps" / "check-a.log").read_text().split() == [str(kept), str(kept / "compile")]
    monkeypatch.setenv(caches.COMPILE_ENV, str(tmp_path / "compiled"))  # a compile cache named: it is used
    assert gpu_steps.run_gpu("unread.yaml", tmp_path / "three") == 0
    assert (tmp_path / "three" / "steps" / "check-a.log").read_text().split() == [
        str((tmp_path / "three" / "steps" / "cache").resolve()), str(tmp_path / "compiled")]
    capsys.readouterr()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stopped_step_gets_term_then_kill_and_its_whole_process_group_goes(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_steps, "KILL_AFTER_S", 1)
    pids = tmp_path / "pids"
    # a step that ignores TERM, with a child of its own that would outlive it
    code = ("import os, signal, subprocess, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
            f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}'); print('up', flush=True); "
            "time.sleep(120)")
    said = []
    started = time.monotonic()
    status, stopped = gpu_steps.run_step([sys.executable, "-c", code], tmp_path / "step.log", timeout_s=2,
                                         echo=said.append)
    assert stopped == "the budget ran out" and status == -signal.SIGKILL
    assert time.monotonic() - started < 60
    step, child = map(int, pids.read_text().split())
    wait_for(lambda: not alive(child), "the step's child to go with its group", timeout=30)
    assert not alive(step) and b"up\n" in b"".join(said) and (tmp_path / "step.log").read_bytes() == b"up\n"


STEPS_SCRIPT = """
import sys
from harness import cli
from harness.measuring import gpu_steps

def step(name, code):
    return gpu_steps.Step(name, (0,), lambda left: [sys.executable, "-c", code])

steps = [step("check-a", "print('checked')"),
         step("pytest", "import signal, sys, time; "
                        "signal.signal(signal.SIGTERM, lambda *a: (print('pytest got TERM', flush=True), sys.exit(3))); "
                        "print('testing', flush=True); time.sleep(120)")]
gpu_steps.plan_steps = lambda *args: steps
sys.exit(cli.main(["gpu", "unread.yaml", "-o", sys.argv[1]]))
"""


def test_sigterm_to_make_gpu_stops_the_step_and_exits_130(tmp_path):
    """A lease's end signals the command; the step, in its own process group, is stopped by it."""
    script = tmp_path / "gpu_steps_faked.py"
    script.write_text(STEPS_SCRIPT)
    out = tmp_path / "gpu"
    env = plugin_env()
    env.pop("PYTHONUNBUFFERED", None)  # its stdout buffered, as a pipe's is by default
    process = subprocess.Popen([sys.executable, str(script), str(out)], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    log = out / "steps" / "pytest.log"
    wait_for(lambda: log.exists() and "testing" in log.read_text(), "the pytest step to start", process=process)
    process.send_signal(signal.SIGTERM)
    said = process.communicate(timeout=60)[0]
    assert process.returncode == 130, said
    assert "make gpu: pytest stopped (interrupted by SIGTERM, exit 3)" in said and "pytest got TERM" in said
    # each step's line before its output, through a pipe too
    assert said.index("make gpu: check-a (no budget)") < said.index("checked") \
        < said.index("make gpu: pytest (no budget)") < said.index("testing")
    assert sorted(window.read_steps(out)) == ["check-a"]


def test_the_default_directory_is_named_by_commit_date_commit_and_gpu(monkeypatch):
    answers = {("log", "-1", "--format=%cd", "--date=format:%Y%m%dT%H%M%S"): "20261201T101010"}
    monkeypatch.setattr(gpu_steps, "_git", lambda *args: answers[args])
    # The commit the run records: a copy's, where the copy names it (a lent machine's stale .git).
    monkeypatch.setenv(facts.COMMIT_ENV, "0123456789abcdef0123456789abcdef01234567")

    def nvidia_smi(command, **kwargs):
        return subprocess.CompletedProcess(command, 0, stdout="NVIDIA H200 (SXM)\nNVIDIA H200\n", stderr="")

    monkeypatch.setattr(gpu_steps.subprocess, "run", nvidia_smi)
    assert gpu_steps.default_directory() == gpu_steps.shown(ROOT / "results" /
                                                            "20261201T101010-gpu-0123456789-NVIDIA-H200-SXM")
    def no_nvidia_smi(command, **kwargs):
        raise FileNotFoundError(command[0])

    monkeypatch.setattr(gpu_steps.subprocess, "run", no_nvidia_smi)
    monkeypatch.setattr(facts, "gpu_name", lambda: None)  # nor a GPU torch sees
    assert gpu_steps.default_directory().name == "20261201T101010-gpu-0123456789-nogpu"
    # gpu-more.yaml's run has a directory of its own: it never resumes gpu.yaml's, nor stops as "finished"
    assert gpu_steps.default_directory(ROOT / "configs" / "gpu-more.yaml").name == "20261201T101010-gpu-more-0123456789-nogpu"


@pytest.mark.slow
def test_the_real_steps_on_a_tiny_cpu_config_then_a_plan_of_what_is_left(tiny_config, tmp_path):
    config = tiny_config(TINY)
    out = tmp_path / "gpu"
    env = plugin_env()
    del env[caches.ENV]  # the verdicts go to the run's steps/cache
    first = scatterbench("gpu", config, "-o", out, "--tests=-m cuda tests/harness/measuring/test_timing_cuda.py",
                         env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    steps = out / "steps"
    assert sorted(window.read_steps(out)) == ["check", "pytest", "report", "sweep"]
    # one check step, its counts per operator
    assert sorted(gpu_steps.read_counts(out)) == ["dispersion", "maxpool2d"]
    assert all(counts["calls"] > 0 for counts in gpu_steps.read_counts(out).values())
    assert "1 skipped" in (steps / "pytest.log").read_text()
    assert re.search(r"adversarial check: (\d+) of \1 verdicts from the cache", (steps / "sweep.log").read_text())
    assert list((steps / "cache" / "verdicts").glob("*.json")) and (out / "report" / "report.md").exists()
    assert store.read_meta(out)["status"] == "complete"
    # plan reads the records: the steps done cost nothing more
    planned = window.plan_config(str(config), "cpu", [tmp_path / "none"], resume=str(out))
    assert dict(planned.phases)["check (make gpu)"].source == "finished already"
    again = scatterbench("gpu", config, "-o", out, env=env)
    assert again.returncode == 0 and again.stdout.count("finished before") == 4
    assert json.loads((steps / "sweep.json").read_text())["exit"] == 0
