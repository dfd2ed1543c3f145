"""Facts about this machine a run records: load, CPU, commit, versions."""

import math
import os
import subprocess
import sys
import time

from harness.measuring import facts
from tests.helpers import ROOT


def test_at_capacity_is_a_load_of_the_core_count_or_more():
    assert facts.at_capacity(2.0, 2) and facts.at_capacity(3.5, 2)
    assert not facts.at_capacity(1.99, 2)
    assert not facts.at_capacity(None, 2) and not facts.at_capacity(5.0, None)


def test_competing_load_counts_no_negative_work_and_at_least_the_average():
    load = facts.competing_load(samples=2, interval_s=0.0)
    assert load >= 0 and load >= (facts.load_average() or [0.0])[0]


def test_competing_load_reads_a_busy_process_per_core_as_at_capacity():
    """A machine loaded for real (one spinning process per core) reads at
    capacity within seconds: the runnable count sees them before the
    1-minute average does. (The warning this load raises is tested on a
    load taken as given, test_precheck.py's busy_machine_plugin.)"""
    cores = os.cpu_count() or 1
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        deadline, load = time.monotonic() + 30, 0.0
        while not facts.at_capacity(load, cores) and time.monotonic() < deadline:
            load = facts.competing_load()
        assert facts.at_capacity(load, cores), f"{cores} busy processes read as a load of {load}"
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_the_hardware_record_names_this_cpu():
    hardware = facts.hardware()
    assert hardware["cpu_model"] == facts.cpu_model() and hardware["cpu_count"] == os.cpu_count()
    assert facts.cpu_slug().endswith(f"-x{os.cpu_count()}") and facts.cpu_slug() == facts.cpu_slug().lower()


def test_the_commit_of_this_checkout_and_none_outside_one(tmp_path, monkeypatch):
    monkeypatch.delenv(facts.COMMIT_ENV, raising=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    commit = facts.git_commit(str(ROOT))
    assert commit in (head, f"{head}-dirty")
    assert facts.git_commit(str(tmp_path)) is None


def test_a_copy_takes_the_commit_it_is_given_over_its_own_git(tmp_path, monkeypatch):
    monkeypatch.setenv(facts.COMMIT_ENV, "0123abcd")
    assert facts.git_commit(str(tmp_path)) == "0123abcd"
    assert facts.git_commit(str(ROOT)) == "0123abcd"


def test_versions_of_installed_packages_and_none_for_missing_ones():
    assert facts.version("numpy") == __import__("numpy").__version__
    assert facts.version("no-such-package-xyz") is None


class Machine:
    """A 1-minute load average as the kernel keeps it (towards the runnable
    count, by e^(-t/60)), on a clock that advances only when slept."""

    def __init__(self, load: float, runnable: float):
        self.load, self.runnable, self.now, self.slept = load, runnable, 0.0, []

    def read(self) -> float:
        return self.load

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        self.load = self.runnable + (self.load - self.runnable) * math.exp(-seconds / 60)

    def clock(self) -> float:
        return self.now


def test_a_run_waits_until_the_load_its_own_work_left_falls_below_the_cores():
    machine, waits = Machine(load=2.3, runnable=0.1), []
    waited = facts.settle(0.4, 2, on_wait=lambda: waits.append(machine.load), read=machine.read,
                          sleep=machine.sleep, clock=machine.clock)
    assert waits == [2.3]  # said once, as the wait starts
    assert 8 <= waited <= 10 and machine.load < 2  # 60 ln(2.2 / 1.9) = 8.8 s, polled each second
    assert max(machine.slept) <= 1.0


def test_no_wait_when_the_load_is_below_the_cores_or_was_the_machines_before():
    for before, now in ((0.4, 1.9), (2.5, 3.0), (None, 1.0)):
        machine = Machine(load=now, runnable=now)
        assert facts.settle(before, 2, read=machine.read, sleep=machine.sleep, clock=machine.clock) == 0.0
        assert machine.slept == []


def test_a_load_that_does_not_fall_is_waited_for_no_longer_than_the_limit():
    machine = Machine(load=3.0, runnable=2.5)  # other work came while the workers ran
    waited = facts.settle(0.4, 2, limit_s=12.5, read=machine.read, sleep=machine.sleep, clock=machine.clock)
    assert waited == 12.5 and machine.load >= 2 and machine.slept[-1] == 0.5
