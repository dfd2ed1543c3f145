"""The adversarial verdicts kept between runs: used only under the same code,
plugins, versions and check parameters; anything else checks again; a
damaged file is a warning, never a crash."""

import json
import os
import sys
import time

import pytest

from harness import cli
from harness.base import plugins
from harness.base.config import Case
from harness.base.errors import CacheWarning
from harness.measuring import ceilings, check, verdict_cache
from harness.measuring.verdict_cache import VerdictCache
from harness.results.store import read_meta, read_rows
from impls import backends
from impls.common import Verdict
from impls.registry import get_operator

THREADS = {"numpy": 1, "torch": 1}
PARAMS = (("C", 1), ("H", 8), ("N", 1), ("W", 8), ("k", 2))


def case(strategy="numpy_sliding_window", dtype="float32"):
    return Case("maxpool2d", strategy, "cpu", dtype, PARAMS)


def strategy(name="numpy_sliding_window"):
    return get_operator("maxpool2d").strategies[name]


def asked(verdicts: dict, seed: int = 0) -> check.AdversarialCheck:
    """An adversarial check that has answered ``verdicts`` (strategy name -> failure or None)."""
    adversarial = check.AdversarialCheck(seed)
    for name, failure in verdicts.items():
        adversarial.remember(strategy(name), "cpu", "float32", failure)
    return adversarial


def kept_then_reopened(tmp_path, verdicts, seed=0, threads=THREADS):
    """Saves ``verdicts`` through one cache; returns a second cache (as the
    next run opens it), the fresh check it preloaded and what preload said."""
    cases = [case(name) for name in verdicts]
    VerdictCache(0, THREADS, folder=tmp_path).save(asked(verdicts), cases)
    reopened, fresh = VerdictCache(seed, threads, folder=tmp_path), check.AdversarialCheck(seed)
    return reopened, fresh, reopened.preload(fresh, cases)


def test_an_unchanged_key_hits_and_the_verdict_comes_back_whole(tmp_path):
    wrong = Verdict("mismatch", "adversarial check random/contiguous N=1: values differ at 3 of 16")
    _, fresh, said = kept_then_reopened(tmp_path, {"numpy_sliding_window": None, "seed_loops": wrong})
    assert said == (2, 2)
    assert fresh.known(strategy(), "cpu", "float32") == (True, None)
    assert fresh.known(strategy("seed_loops"), "cpu", "float32") == (True, wrong)
    assert fresh.failure(strategy("seed_loops"), "cpu", "float32") == wrong and fresh.results == []  # nothing re-run


@pytest.mark.parametrize("change", ["impls", "check", "versions", "plugins", "python", "threads", "seed"])
def test_any_change_of_code_plugins_versions_or_parameters_checks_again(tmp_path, monkeypatch, change):
    cases = [case()]
    VerdictCache(0, THREADS, folder=tmp_path).save(asked({"numpy_sliding_window": None}), cases)
    seed, threads = 0, THREADS
    if change == "impls":
        real = verdict_cache.tree_digest
        monkeypatch.setattr(verdict_cache, "tree_digest", lambda folder: "edited" + real(folder))
    elif change == "check":
        real_sha = plugins.sha256
        monkeypatch.setattr(plugins, "sha256", lambda path: "edited" + real_sha(path))
    elif change == "versions":
        real_versions = backends.versions
        monkeypatch.setattr(backends, "versions", lambda: {**real_versions(), "torch": "99.0"})
    elif change == "plugins":
        real_recorded = plugins.recorded
        monkeypatch.setattr(plugins, "recorded", lambda: real_recorded() + [
            {"module": "my_plugin", "file": None, "sha256": "abc"}])
    elif change == "python":
        monkeypatch.setattr(verdict_cache.sys, "version", "3.99.0 (planted)")
    elif change == "threads":
        threads = {"numpy": 2, "torch": 2}
    elif change == "seed":
        seed = 1
    fresh = check.AdversarialCheck(seed)
    assert VerdictCache(seed, threads, folder=tmp_path).preload(fresh, cases) == (0, 1)
    assert fresh.known(strategy(), "cpu", "float32") == (False, None)


def test_a_plugin_edited_since_checks_again(tmp_path, monkeypatch):
    plugin = tmp_path / "edited_plugin.py"
    plugin.write_text("VALUE = 1\n")
    record = {"module": "edited_plugin", "file": str(plugin), "sha256": plugins.sha256(plugin)}
    real_recorded = plugins.recorded
    monkeypatch.setattr(plugins, "recorded", lambda: real_recorded() + [dict(record, sha256=plugins.sha256(plugin))])
    cases = [case()]
    VerdictCache(0, THREADS, folder=tmp_path / "cache").save(asked({"numpy_sliding_window": None}), cases)
    assert VerdictCache(0, THREADS, folder=tmp_path / "cache").preload(check.AdversarialCheck(0), cases) == (1, 1)
    plugin.write_text("VALUE = 2\n")
    assert VerdictCache(0, THREADS, folder=tmp_path / "cache").preload(check.AdversarialCheck(0), cases) == (0, 1)


def test_the_digest_covers_loaded_modules_outside_the_standard_library_the_packages_and_the_harness(
        tmp_path, monkeypatch):
    import importlib

    import numpy

    from harness.base.loaded_code import loaded_code

    (tmp_path / "beside_a_plugin.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "beside_a_plugin", raising=False)
    importlib.import_module("beside_a_plugin")
    loaded = loaded_code()
    assert f"file:{(tmp_path / 'beside_a_plugin.py').resolve()}" in loaded
    # an installed package stands as its distribution, by its RECORD (the hashes of its files)
    record = next(dependency for dependency in loaded if dependency.startswith("dist:numpy="))
    assert numpy.__name__ in sys.modules and record.endswith("/RECORD") and "numpy-" in record
    assert not [dependency for dependency in loaded  # json: the stdlib; impls and the harness are hashed apart
                if dependency.endswith(("/json/__init__.py", "/harness/measuring/check.py", "/impls/maxpool2d.py"))]
    cases = [case()]
    VerdictCache(0, THREADS, folder=tmp_path / "cache").save(asked({"numpy_sliding_window": None}), cases)
    assert VerdictCache(0, THREADS, folder=tmp_path / "cache").preload(check.AdversarialCheck(0), cases) == (1, 1)
    (tmp_path / "beside_a_plugin.py").write_text("VALUE = 2\n")
    assert VerdictCache(0, THREADS, folder=tmp_path / "cache").preload(check.AdversarialCheck(0), cases) == (0, 1)


def test_a_distribution_off_the_import_path_is_still_read_by_its_record(tmp_path, monkeypatch):
    """A distribution installed in a folder only some processes put on sys.path (setuptools vendors
    backports.tarfile so): the verdicts of a check that loaded it held only in a process that had
    loaded it too, so most of make bench's first warm run checked again. Its dependency names its
    RECORD, which any process reads; an edit of the RECORD (a reinstall) still makes it stale."""
    import importlib

    from harness.base import loaded_code as code

    site = tmp_path / "vendored"
    (site / "vendored_dist").mkdir(parents=True)
    (site / "vendored_dist" / "__init__.py").write_text("VALUE = 1\n")
    info = site / "vendored_dist-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vendored_dist\nVersion: 1.0\n")
    (info / "top_level.txt").write_text("vendored_dist\n")
    (info / "RECORD").write_text("vendored_dist/__init__.py,sha256=abc,10\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delitem(sys.modules, "vendored_dist", raising=False)
    code._distributions_of.cache_clear()
    code._installed.cache_clear()
    importlib.import_module("vendored_dist")
    loaded = code.loaded_code()
    dependency = next(name for name in loaded if name.startswith("dist:vendored_dist"))
    assert dependency == f"dist:vendored_dist={(info / 'RECORD').resolve()}"
    # another process, without the folder on its path
    monkeypatch.delitem(sys.modules, "vendored_dist")
    sys.path.remove(str(site))
    code._distributions_of.cache_clear()
    code._installed.cache_clear()
    assert code.current_digest(dependency) == loaded[dependency]
    (info / "RECORD").write_text("vendored_dist/__init__.py,sha256=def,10\n")
    assert code.current_digest(dependency) not in (None, loaded[dependency])
    code._distributions_of.cache_clear()
    code._installed.cache_clear()


def test_a_verdict_holds_only_for_the_code_its_check_loaded_however_late_it_was_imported(tmp_path, monkeypatch):
    """A module imported after the run began (inside a strategy's prepare, in a worker) is part of
    the verdict it was loaded for: the answer carries it, an edit checks again, and the answer
    reached before the edit is not kept under the code after it."""
    from harness.base.loaded_code import loaded_code

    helper = tmp_path / "lazy_helper.py"
    helper.write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "lazy_helper", raising=False)
    before = loaded_code()
    __import__("lazy_helper")
    after = loaded_code()
    dependency = f"file:{helper.resolve()}"
    assert dependency not in before and dependency in after
    cases = [case()]
    checked = check.AdversarialCheck(0)
    checked.remember(strategy(), "cpu", "float32", None, depends=after)  # as a worker answers
    monkeypatch.delitem(sys.modules, "lazy_helper")  # this process never loaded it: only the worker did
    assert VerdictCache(0, THREADS, folder=tmp_path / "cache").save(checked, cases) == 1
    assert VerdictCache(0, THREADS, folder=tmp_path / "cache").preload(check.AdversarialCheck(0), cases) == (1, 1)
    helper.write_text("VALUE = 2\n")
    assert VerdictCache(0, THREADS, folder=tmp_path / "cache").preload(check.AdversarialCheck(0), cases) == (0, 1)
    # an answer reached with the old code, saved after the edit: not kept
    stale = check.AdversarialCheck(0)
    stale.remember(strategy(), "cpu", "float32", None, depends=after)
    assert VerdictCache(0, THREADS, folder=tmp_path / "other").save(stale, cases) == 0


def test_error_and_timeout_are_not_kept_they_may_be_the_machines(tmp_path):
    _, _, said = kept_then_reopened(tmp_path, {"numpy_sliding_window": Verdict("error", "out of memory"),
                                               "seed_loops": Verdict("timeout", "over 180 s")})
    assert said == (0, 2)


def test_a_strategy_whose_code_the_key_does_not_cover_is_never_kept(tmp_path, planted):
    namespace = {}
    exec(compile("def prepare(inputs, params):\n    return lambda: None\n", "<notebook cell>", "exec"), namespace)
    planted("maxpool2d", "from_a_cell", namespace["prepare"])
    assert not VerdictCache(0, THREADS, folder=tmp_path).keeps(strategy("from_a_cell"))
    assert VerdictCache(0, THREADS, folder=tmp_path).keeps(strategy())
    _, _, said = kept_then_reopened(tmp_path, {"from_a_cell": None})
    assert said == (0, 1)


@pytest.mark.parametrize("content", ["{cut off", "[]", json.dumps({"fingerprint": {"impls": "other"}, "verdicts": {}}),
                                     "VERDICTS"])
def test_a_damaged_file_is_ignored_with_a_warning_and_replaced(tmp_path, content):
    cases = [case()]
    cache = VerdictCache(0, THREADS, folder=tmp_path)
    if content == "VERDICTS":  # the right fingerprint, verdicts of the wrong shape
        content = json.dumps({"fingerprint": cache.fingerprint,
                              "verdicts": {verdict_cache.entry_key(strategy(), "cpu", "float32", 0): "ok"}})
    cache.path.parent.mkdir(parents=True, exist_ok=True)
    cache.path.write_text(content)
    with pytest.warns(CacheWarning, match=cache.path.name):
        assert cache.preload(check.AdversarialCheck(0), cases) == (0, 1)
    with pytest.warns(CacheWarning):  # save reads it again before adding to it
        assert cache.save(asked({"numpy_sliding_window": None}), cases) == 1
    assert VerdictCache(0, THREADS, folder=tmp_path).preload(check.AdversarialCheck(0), cases) == (1, 1)


def test_only_the_newest_files_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(verdict_cache, "KEEP_FILES", 2)
    for index in range(4):
        old = tmp_path / f"old{index}.json"
        old.write_text("{}")
        stamp = time.time() - 100 + index
        os.utime(old, (stamp, stamp))
    VerdictCache(0, THREADS, folder=tmp_path).save(asked({"numpy_sliding_window": None}), [case()])
    assert sorted(path.name for path in tmp_path.glob("*.json")) == sorted(
        ["old3.json", VerdictCache(0, THREADS, folder=tmp_path).path.name])


# Two quick strategies, one thread each: what the run-and-check tests below sweep.
TWO_STRATEGIES = """
timing: {min_samples: 5, budget_s: 0.01, warmup_s: 0}
threads: {torch: 1, numpy: 1}
benchmarks:
  - op: maxpool2d
    strategies: [numpy_sliding_window, torch_max_pool2d_indices]
    params: {N: 1, C: 1, H: 8, W: 8, k: 2}
"""


def quiet_machine(devices, threads=None, fresh=True):
    return ceilings.Measured({device: 20.0 for device in devices},
                             {device: [{"gbps": 20.0, "load": 0.1}] for device in devices},
                             measured_at="2030-01-01T00:00:00+00:00", measured_epoch=time.time())


def test_a_second_run_of_unchanged_code_takes_its_verdicts_from_the_cache_and_says_so(tiny_config, tmp_path,
                                                                                       monkeypatch, capsys):
    monkeypatch.setattr(ceilings, "measure", quiet_machine)
    config = tiny_config(TWO_STRATEGIES)
    assert cli.main(["run", str(config), "-o", str(tmp_path / "first"), "--no-progress"]) == 0
    assert "0 of 2 verdicts from the cache" in capsys.readouterr().err
    assert cli.main(["run", str(config), "-o", str(tmp_path / "second"), "--no-progress"]) == 0
    assert "2 of 2 verdicts from the cache" in capsys.readouterr().err
    first, second = read_meta(tmp_path / "first"), read_meta(tmp_path / "second")
    assert first["adversarial_from_cache"] == 0 and second["adversarial_from_cache"] == 2
    assert first["phase_s"]["adversarial"] > second["phase_s"].get("adversarial", 0.0)
    assert set(read_rows(tmp_path / "second")["status"]) == {"ok"}


def test_a_run_after_a_check_of_the_same_config_takes_the_checks_adversarial_verdicts(tiny_config, tmp_path,
                                                                                        monkeypatch, capsys):
    """make gpu checks, then runs: the run asks none of the adversarial items
    the check ran (on a GPU that is every strategy compiled at every
    adversarial shape), and a strategy the check failed is still not timed."""
    monkeypatch.setattr(ceilings, "measure", quiet_machine)
    config = tiny_config(TWO_STRATEGIES)
    monkeypatch.setattr(check, "run_one_check", _failing_for("numpy_sliding_window", check.run_one_check))
    assert cli.main(["check", str(config), "--no-progress"]) != 0  # the planted failure is found
    capsys.readouterr()
    assert cli.main(["run", str(config), "-o", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "2 of 2 verdicts from the cache" in capsys.readouterr().err
    rows = read_rows(tmp_path / "run").set_index("strategy")
    assert rows.loc["numpy_sliding_window", "status"] == "mismatch"
    assert "adversarial check" in rows.loc["numpy_sliding_window", "message"]
    assert rows.loc["torch_max_pool2d_indices", "status"] == "ok"


def _failing_for(name, run_one_check):
    """run_one_check, but a mismatch for every adversarial item of strategy ``name``."""
    def planted(item, seed, timeout_s=None):
        if item.strategy.name == name and item.mode != "random":
            return Verdict("mismatch", "planted: wrong on adversarial inputs")
        return run_one_check(item, seed, timeout_s)
    return planted


def test_a_check_stopped_midway_keeps_the_keys_it_checked_whole(tiny_config, tmp_path, monkeypatch, capsys):
    """A check cut by a lease's limit (SIGTERM ends every command as Ctrl-C
    does) keeps the verdicts of the strategy keys its workers finished: the
    run that follows asks only the rest."""
    from harness.measuring import prefetch

    monkeypatch.setattr(ceilings, "measure", quiet_machine)
    config = tiny_config(TWO_STRATEGIES)

    def first_key_then_stopped(keys, seed, timeout_s, threads, workers, on_item=None, results=None, counts=None,
                               on_key=None):
        strat, device, dtype, mode = keys[0]
        for item in check.adversarial_items(strat, device, dtype, mode):  # as a worker would
            results[item] = check.CheckResult(item, check.run_one_check(item, seed, timeout_s), 0.0)
        raise KeyboardInterrupt  # the stop, while the second key was being checked

    monkeypatch.setattr(prefetch, "check_items", first_key_then_stopped)
    assert cli.main(["check", str(config), "--no-progress"]) == 130
    capsys.readouterr()
    assert cli.main(["run", str(config), "-o", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "1 of 2 verdicts from the cache" in capsys.readouterr().err
    assert set(read_rows(tmp_path / "run")["status"]) == {"ok"}


def test_a_checks_verdicts_are_kept_under_the_code_it_started_with(tmp_path, monkeypatch):
    """A checkout changed while a long check runs: its verdicts go to the file
    of the code it checked, never under the new code's digest."""
    cache = VerdictCache(0, THREADS, folder=tmp_path)
    results = [check.CheckResult(item, check.run_one_check(item, 0), 0.0)
               for item in check.adversarial_items(strategy(), "cpu", "float32")]
    monkeypatch.setattr(verdict_cache, "tree_digest", lambda folder: "the code after a git pull")
    assert verdict_cache.keep_from_check(cache, results, [case()]) == 1
    assert [path.name for path in tmp_path.glob("*.json")] == [cache.path.name]
    assert VerdictCache(0, THREADS, folder=tmp_path).path != cache.path


# ------------------------------------------------- a helper module a plugin imports
# A plugin whose backward lives in a module beside it (issue 40): the digest
# covers that module too, so editing it alone checks the strategy again.
HELPER_PLUGIN = """
from impls.registry import get_operator, strategy
from tie_helper import tie_backward  # the helper beside this file

SLIDING = get_operator("maxpool2d").strategies["numpy_sliding_window"]


@strategy("maxpool2d", backend="numpy", dtypes=("float32",), returns="values+indices", ties="first",
          source="test: its backward in a helper module", backward=tie_backward)
def helper_backward_max_pool(inputs, params):
    return SLIDING.prepare(inputs, params)
"""
TIE_HELPER = """
import numpy as np


def tie_backward(inputs, params):
    x, k = inputs["x"], params["k"]
    N, C, H, W = x.shape
    h, w = H // k, W // k
    windows = x[:, :, :h * k, :w * k].reshape(N, C, h, k, w, k).transpose(0, 1, 2, 4, 3, 5).reshape(N, C, h, w, -1)

    def backward(saved, grad):
        chosen = {chosen}
        rows, cols = np.arange(h)[:, None] * k + chosen // k, np.arange(w)[None, :] * k + chosen % k
        grad_x = np.zeros((N, C, H * W), dtype=grad.dtype)
        np.put_along_axis(grad_x, (rows * W + cols).reshape(N, C, -1), grad.reshape(N, C, -1), axis=-1)
        return grad_x.reshape(N, C, H, W)

    return backward
"""
FIRST_TIE = "windows.argmax(axis=-1)"
LAST_TIE = "k * k - 1 - windows[..., ::-1].argmax(axis=-1)"  # the planted mistake
FIXED = "windows.argmax(axis=-1)  # fixed: the forward's tie, the first maximum"


def test_editing_a_helper_module_a_plugin_imports_checks_again_both_ways(tmp_path):
    """Each run a process of its own, as an author's runs are: the first
    checks, an unchanged second takes every verdict from the cache, the
    helper edited to send ties to the last maximum is checked again and
    found wrong, and the fix is checked again and found right (the cached
    mismatch does not stay)."""
    from tests.helpers import benchmark, config_yaml, plugin_env, scatterbench

    (tmp_path / "helper_plugin.py").write_text(HELPER_PLUGIN)
    helper = tmp_path / "tie_helper.py"
    config = tmp_path / "tiny.yaml"
    config.write_text(config_yaml({**benchmark("maxpool2d", ["helper_backward_max_pool"], N=1, C=2, H=8, W=8, k=2),
                                   "modes": ["forward", "backward"]}))
    env = plugin_env("quiet_machine_plugin", str(tmp_path / "helper_plugin.py"))
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])  # the helper's folder, as its author's

    def run(chosen, name):
        helper.write_text(TIE_HELPER.format(chosen=chosen))
        done = scatterbench("run", config, "-o", tmp_path / name, "--no-progress", env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        said = [line for line in done.stderr.splitlines() if "verdicts from the cache" in line]
        statuses = read_rows(tmp_path / name).set_index("mode")["status"].to_dict()
        return said, statuses

    said, statuses = run(FIRST_TIE, "first")
    assert "0 of 2 verdicts from the cache" in said[0] and statuses == {"forward": "ok", "backward": "ok"}
    said, statuses = run(FIRST_TIE, "unchanged")
    assert "2 of 2 verdicts from the cache" in said[0] and statuses == {"forward": "ok", "backward": "ok"}
    said, statuses = run(LAST_TIE, "edited")
    assert "0 of 2 verdicts from the cache" in said[0], said
    assert statuses == {"forward": "ok", "backward": "mismatch"}
    message = read_rows(tmp_path / "edited").set_index("mode").loc["backward", "message"]
    assert "adversarial check backward" in message
    said, statuses = run(FIXED, "fixed")
    assert "0 of 2 verdicts from the cache" in said[0], said
    assert statuses == {"forward": "ok", "backward": "ok"}


# ------------------------------------ a helper imported late, or installed by pip
# Issue 51: the digest once hashed only what was loaded when the run began, and
# nothing installed but the libraries' versions; a verdict now carries the code
# its check loaded, read after the check, in the process that ran it.
LAZY_PLUGIN = """
from impls.registry import get_operator, strategy

SLIDING = get_operator("maxpool2d").strategies["numpy_sliding_window"]


def lazy_backward(inputs, params):
    from tie_helper import tie_backward  # imported only when the backward is prepared, in the checking process

    return tie_backward(inputs, params)


@strategy("maxpool2d", backend="numpy", dtypes=("float32",), returns="values+indices", ties="first",
          source="test: its backward in a helper imported late", backward=lazy_backward)
def helper_backward_max_pool(inputs, params):
    return SLIDING.prepare(inputs, params)
"""


def _helper_runs(tmp_path, plugin_text, install, **variables):
    """``run(chosen, name)``: the helper written (``install``) with the tie ``chosen``, then a run of
    the plugin's strategy in forward and backward, each run a process of its own; returns what the
    run said of the cache and the statuses by mode."""
    from tests.helpers import benchmark, config_yaml, plugin_env, scatterbench

    (tmp_path / "helper_plugin.py").write_text(plugin_text)
    config = tmp_path / "tiny.yaml"
    config.write_text(config_yaml({**benchmark("maxpool2d", ["helper_backward_max_pool"], N=1, C=2, H=8, W=8, k=2),
                                   "modes": ["forward", "backward"]}))
    env = plugin_env("quiet_machine_plugin", str(tmp_path / "helper_plugin.py"), **variables)

    def run(chosen, name):
        env["PYTHONPATH"] = os.pathsep.join([install(TIE_HELPER.format(chosen=chosen)), plugin_env()["PYTHONPATH"]])
        done = scatterbench("run", config, "-o", tmp_path / name, "--no-progress", env=env, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        said = [line for line in done.stderr.splitlines() if "verdicts from the cache" in line]
        return said[0], read_rows(tmp_path / name).set_index("mode")["status"].to_dict()

    return run


def test_a_helper_imported_inside_prepare_edited_is_checked_again_both_ways(tmp_path):
    """The helper is imported only when the backward is prepared, after the run began (in the
    worker that checks it): edited to a wrong tie, the backward is checked again and found wrong;
    fixed, it is checked again and found right."""
    folder = tmp_path / "beside"
    folder.mkdir()

    def beside(text):
        (folder / "tie_helper.py").write_text(text)
        return str(folder)

    run = _helper_runs(tmp_path, LAZY_PLUGIN, beside)
    said, statuses = run(FIRST_TIE, "first")
    assert "0 of 2 verdicts from the cache" in said and statuses == {"forward": "ok", "backward": "ok"}
    said, statuses = run(LAST_TIE, "edited")
    # the backward's check loaded the helper; the forward's, in the same worker, may have too
    assert "0 of 2" in said or "1 of 2" in said, said
    assert statuses == {"forward": "ok", "backward": "mismatch"}
    said, statuses = run(FIXED, "fixed")
    assert "0 of 2" in said or "1 of 2" in said, said
    assert statuses == {"forward": "ok", "backward": "ok"}


def test_a_helper_installed_by_pip_and_reinstalled_at_the_same_version_is_checked_again(tmp_path):
    """The helper as a distribution (a wheel pip installs into a site folder, not editable):
    reinstalled at the same version after an edit, its RECORD (the hashes of its files) changes,
    so the verdicts that loaded it are checked again; the version alone would not say so."""
    import subprocess
    import zipfile

    wheel = tmp_path / "tie_helper-1.0-py3-none-any.whl"
    # a user site folder: where pip puts what it installs for a user, and what "installed" meant before
    userbase = tmp_path / "userbase"
    site = userbase / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"

    def installed(text):
        info = "tie_helper-1.0.dist-info"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr("tie_helper.py", text)
            archive.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tie-helper\nVersion: 1.0\n")
            archive.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              "Tag: py3-none-any\n")
            archive.writestr(f"{info}/top_level.txt", "tie_helper\n")
            archive.writestr(f"{info}/RECORD", f"tie_helper.py,,\n{info}/METADATA,,\n{info}/WHEEL,,\n"
                                               f"{info}/top_level.txt,,\n{info}/RECORD,,\n")
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                               "--no-index", "--no-deps", "--upgrade", "--force-reinstall", "--target", str(site),
                               str(wheel)], capture_output=True, text=True, timeout=120,
                              env=dict(os.environ, PYTHONUSERBASE=str(userbase)))
        assert done.returncode == 0, done.stdout + done.stderr
        assert "sha256=" in (site / "tie_helper-1.0.dist-info" / "RECORD").read_text()  # pip hashed the files
        return str(site)

    run = _helper_runs(tmp_path, HELPER_PLUGIN, installed, PYTHONUSERBASE=str(userbase))
    assert subprocess.run([sys.executable, "-c", "import site; print(site.getusersitepackages())"], text=True,
                          capture_output=True, env=dict(os.environ, PYTHONUSERBASE=str(userbase))
                          ).stdout.strip() == str(site)
    said, statuses = run(FIRST_TIE, "first")
    assert "0 of 2 verdicts from the cache" in said and statuses == {"forward": "ok", "backward": "ok"}
    said, statuses = run(LAST_TIE, "reinstalled")
    assert "0 of 2 verdicts from the cache" in said, said  # the plugin imports it at its top: both keys
    assert statuses == {"forward": "ok", "backward": "mismatch"}


def test_code_the_libraries_generate_into_their_compile_caches_is_no_dependency(tmp_path, monkeypatch):
    """Inductor writes and imports modules of its own (the compile cache): made from code the
    digest covers, rewritten by any run. As dependencies they kept 33 of make bench's 52 verdicts
    from the cache of the run after (2026-12-05); they are left out."""
    from harness.base import caches
    from harness.base.loaded_code import loaded_code

    monkeypatch.setenv(caches.COMPILE_ENV, str(tmp_path / "compile"))
    generated = tmp_path / "compile" / "torch" / "ab" / "cabgenerated.py"
    generated.parent.mkdir(parents=True)
    generated.write_text("VALUE = 1\n")
    beside = tmp_path / "own_helper.py"
    beside.write_text("VALUE = 2\n")
    monkeypatch.syspath_prepend(str(generated.parent))
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("cabgenerated", "own_helper"):
        monkeypatch.delitem(sys.modules, name, raising=False)
        __import__(name)
    loaded = loaded_code()
    assert f"file:{beside.resolve()}" in loaded and f"file:{generated.resolve()}" not in loaded
