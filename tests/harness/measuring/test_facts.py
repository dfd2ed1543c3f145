"""Facts about this machine a run records: load, CPU, commit, versions."""

import os
import subprocess

from harness.measuring import facts
from tests.helpers import ROOT


def test_at_capacity_is_a_load_of_the_core_count_or_more():
    assert facts.at_capacity(2.0, 2) and facts.at_capacity(3.5, 2)
    assert not facts.at_capacity(1.99, 2)
    assert not facts.at_capacity(None, 2) and not facts.at_capacity(5.0, None)


def test_competing_load_counts_no_negative_work_and_at_least_the_average():
    load = facts.competing_load(samples=2, interval_s=0.0)
    assert load >= 0 and load >= (facts.load_average() or [0.0])[0]


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
