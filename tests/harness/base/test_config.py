import re

import pytest

from harness.base.config import ConfigError, expand, load_config, parse_config, shard
from tests.helpers import ROOT, scatterbench

GOOD = """
name: tiny
timing: {min_samples: 5, budget_s: 0.01}
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d_indices, numpy_sliding_window]
    params: {N: 1, C: 2, H: [4, 6], W: 4, k: 2}
"""


def test_good_config_expands_to_the_cross_product(tiny_config):
    config = load_config(tiny_config(GOOD))
    cases = expand(config)
    assert len(cases) == 4
    assert {c.params_dict["H"] for c in cases} == {4, 6}
    assert config.name == "tiny"


@pytest.mark.parametrize("text,expected", [
    ("benchmarks: [", "malformed YAML"),
    ("- a\n- b", "expected a mapping at the top level"),
    ("benchmarks: []", "benchmarks: List should have at least 1 item"),
    ("bogus: 1\nbenchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]", "bogus: unknown key"),
    ("benchmarks: [{op: maxpool3d, params: {}}]", "benchmarks[0].op: unknown operator 'maxpool3d'"),
    ("benchmarks: [{op: maxpool2d, strategies: [fast], params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]",
     "benchmarks[0].strategies: unknown strategy 'fast'"),
    ("benchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4}}]", "benchmarks[0].params.k: missing"),
    ("benchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2, q: 1}}]", "params.q: unknown parameter"),
    ("benchmarks: [{op: maxpool2d, params: {N: 0, C: 1, H: 4, W: 4, k: 2}}]", "params.N: 0 is below the minimum 1"),
    ("benchmarks: [{op: maxpool2d, params: {N: -3, C: 1, H: 4, W: 4, k: 2}}]", "params.N: -3 is below"),
    ("benchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 9}}]", "k=9 is larger than the plane"),
    ("benchmarks: [{op: maxpool2d, params: {N: [], C: 1, H: 4, W: 4, k: 2}}]", "empty list"),
    ("benchmarks: [{op: maxpool2d, params: {N: two, C: 1, H: 4, W: 4, k: 2}}]", "params.N: expected an integer"),
    ("dtypes: [float8]\nbenchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]", "unknown dtype 'float8'"),
    ("devices: [tpu]\nbenchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]", "devices[0]"),
    ("timing: {budget_s: -1}\nbenchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]",
     "timing.budget_s"),
    ("benchmarks: [{op: dispersion, params: {B: 1, C: 2, H: 4, W: 4, S: -1}}]", "params.S: -1 is below the minimum 0"),
    ("benchmarks: [{op: maxunpool, params: {form: 3d, B: 1}}]", "params.form: '3d' is not one of 1d, 2d"),
    ("benchmarks: [{op: maxunpool, params: {form: 1d, B: 1, F: 1, L: 2}}]", "missing f"),
    ("benchmarks: [{op: maxpool2d, parms: {N: 1, C: 1, H: 4, W: 4, k: 2}}]",
     "benchmarks[0].parms: unknown key (did you mean 'params'?)"),
    ("benchmarks: [{op: maxpool2d, strategies: [torch_max_pool2d_indice], params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]",
     "unknown strategy 'torch_max_pool2d_indice' for maxpool2d (did you mean 'torch_max_pool2d_indices'?)"),
    ("timing: {min_samples: 2}\nbenchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]",
     "timing.min_samples"),
    ("timing: {min_samples: 50, max_samples: 10}\nbenchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]",
     "max_samples 10 is below min_samples 50"),
    # SPEC 3: at least 3 rounds, as analysis.clearly_faster judges them (with fewer it falls back to the quartiles)
    ("timing: {rounds: 2}\nbenchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]", "timing.rounds"),
])
def test_bad_configs_are_one_line_errors_naming_the_key(tiny_config, text, expected):
    with pytest.raises(ConfigError) as error:
        load_config(tiny_config(text, "bad.yaml"))
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith(str(tiny_config(text, "bad.yaml")))
    assert expected in message, message


def test_yaml_is_never_evaluated(tiny_config):
    text = "benchmarks: !!python/object/apply:os.system ['echo pwned']"
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_config(tiny_config(text))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def test_shards_partition_the_sweep_by_input_group(tiny_config):
    config = load_config(tiny_config(GOOD.replace("H: [4, 6]", "H: [4, 6, 8]")))
    cases = expand(config)
    parts = [shard(cases, i, 2) for i in range(2)]
    assert sorted(c.case_id for part in parts for c in part) == sorted(c.case_id for c in cases)
    assert all(parts)
    for part in parts:  # a group is never split across shards
        groups = {c.group for c in part}
        assert all(c.group in groups for c in cases if c in part)


def test_every_shipped_config_is_valid():
    for path in sorted((ROOT / "configs").glob("*.yaml")):
        config = load_config(path)
        assert expand(config), path


@pytest.mark.slow
def test_cli_config_error_exits_2_without_traceback(tiny_config):
    path = tiny_config("benchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 0}}]")
    result = scatterbench("run", path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().count("\n") == 0
    assert "params.k: 0 is below the minimum 1" in result.stderr


def test_parse_config_accepts_a_dict():
    config = parse_config({"benchmarks": [{"op": "dispersion", "params": {"B": 1, "C": 2, "H": 3, "W": 4, "S": 0}}]})
    assert config.benchmarks[0].op == "dispersion"


def test_every_benchmark_of_a_shipped_config_expands():
    """A config of several benchmarks yields cases for each one (a mis-indented
    loop once kept only the last)."""
    config = load_config(ROOT / "configs" / "quick.yaml")
    cases = expand(config)
    assert {case.op for case in cases} == {bench.op for bench in config.benchmarks}
    assert len(cases) == 28  # 19 forward, 9 backward


def test_threads_default_to_every_core_but_one(tiny_config, monkeypatch):
    """Issue 40: a pool at every core waits for a neighbour's core. Unset or
    ``auto`` (for all, or one backend), every core but one, at least one."""
    from impls.backends import thread_knobs

    grid = "benchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]"
    for cores, expected in ((8, 7), (2, 1), (1, 1)):
        monkeypatch.setattr("os.cpu_count", lambda: cores)
        every = {backend.name: expected for backend in thread_knobs()}
        assert load_config(tiny_config(grid)).threads == every
        assert load_config(tiny_config(f"threads: auto\n{grid}")).threads == every
        assert load_config(tiny_config(f"threads: {{torch: auto, numba: 1}}\n{grid}")).threads == \
            {"torch": expected, "numba": 1}
    with pytest.raises(ConfigError, match="threads"):
        load_config(tiny_config(f"threads: all\n{grid}", "bad.yaml"))


def test_threads_are_keyed_by_backend_and_older_keys_still_read(tiny_config):
    from impls.backends import thread_knobs

    grid = "benchmarks: [{op: maxpool2d, params: {N: 1, C: 1, H: 4, W: 4, k: 2}}]"
    every = load_config(tiny_config(f"threads: 3\n{grid}"))
    assert every.threads == {backend.name: 3 for backend in thread_knobs()}
    older = load_config(tiny_config(f"threads: {{torch: 2, blas: 1, numba: null}}\n{grid}"))
    assert older.threads == {"torch": 2, "numpy": 1, "numba": None}
    for text, expected in (("threads: {tpu: 2}", "threads.tpu: 'tpu' is not a backend"),
                           ("threads: {triton: 2}", "threads.triton: 'triton' has no threads setting"),
                           ("threads: {blas: 1, numpy: 2}", "'blas' and 'numpy' both set numpy's threads"),
                           ("threads: {torch: 0}", "threads.torch")):
        with pytest.raises(ConfigError, match=re.escape(expected)):
            load_config(tiny_config(f"{text}\n{grid}", "bad.yaml"))
