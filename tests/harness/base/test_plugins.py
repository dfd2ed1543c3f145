"""Plugins as an outside author writes them (issue 24): loaded by module name
or file path, failures naming the plugin and its line, a strategy's error
naming its own line, re-registration from a notebook or importlib.reload,
clashes between two sources, and the record a run keeps of its plugins."""

import importlib
import sys
import textwrap

import pytest

import impls  # noqa: F401  (the built-in strategies)
from harness.base import plugins
from harness.base.errors import UsageError
from harness.measuring.check import check_strategy, reference
from impls.backends import BACKEND_MODULES, BACKENDS
from impls.registry import OPERATORS, get_operator

MAXPOOL_STRATEGY = '''
from impls import maxpool2d
from impls.registry import strategy


@strategy("maxpool2d", backend="numpy", source="test")
def {name}(inputs, params):
    """Correct: the suite's own window view."""
    return maxpool2d.numpy_sliding_window(inputs, params)
'''


@pytest.fixture
def registry(tmp_path):
    """Whatever a test registers, and the plugins it imports, are gone afterwards."""
    operators = {name: (op, dict(op.strategies)) for name, op in OPERATORS.items()}
    backends, backend_modules, modules = dict(BACKENDS), dict(BACKEND_MODULES), set(sys.modules)
    yield
    OPERATORS.clear()
    for name, (op, strategies) in operators.items():
        op.strategies.clear()
        op.strategies.update(strategies)
        OPERATORS[name] = op
    BACKENDS.clear()
    BACKENDS.update(backends)
    BACKEND_MODULES.clear()
    BACKEND_MODULES.update(backend_modules)
    for name in set(sys.modules) - modules:
        if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(tmp_path)):
            del sys.modules[name]


def write(path, text):
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_a_plugin_loads_from_a_file_path_and_is_recorded_with_its_hash(tmp_path, registry, monkeypatch):
    plugin = write(tmp_path / "by_path_plugin.py", MAXPOOL_STRATEGY.format(name="by_path_max"))
    monkeypatch.setenv(plugins.ENV, str(plugin))
    plugins.load_plugins()
    assert "by_path_max" in get_operator("maxpool2d").strategies
    record = next(r for r in plugins.recorded() if r["module"] == "by_path_plugin")
    assert record["file"] == str(plugin.resolve()) and record["sha256"] == plugins.sha256(plugin)
    assert plugins.env_setting({"plugins": [record]}) == f"SCATTERBENCH_PLUGINS={plugin.resolve()}"
    plugins.load_plugins()  # a second load (an isolated child, bench() after the CLI) is a no-op


def test_a_plugin_files_own_folder_is_on_the_import_path_for_its_helpers(tmp_path, registry, monkeypatch):
    """As `python folder/plugin.py` has it: a helper beside the plugin imports by name, at the
    plugin's top and later, inside a strategy's prepare (issue 51)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    folder = tmp_path / "a_plugin_folder"
    folder.mkdir()
    write(folder / "beside_top.py", "WINDOW = 'sliding'\n")
    write(folder / "beside_late.py", "def view(inputs, params):\n    from impls import maxpool2d\n\n"
                                     "    return maxpool2d.numpy_sliding_window(inputs, params)\n")
    plugin = write(folder / "helped_plugin.py", """
        from beside_top import WINDOW
        from impls.registry import strategy


        @strategy("maxpool2d", backend="numpy", source="test: " + WINDOW)
        def helped_max(inputs, params):
            from beside_late import view

            return view(inputs, params)
        """)
    plugins.import_plugin(str(plugin))
    strat = get_operator("maxpool2d").strategies["helped_max"]
    params = dict(N=1, C=2, H=4, W=4, k=2)
    assert check_strategy(strat, params, "float32", "cpu",
                          reference("maxpool2d", params, "float32", "random", 0)).status == "ok"
    assert sys.path[-1] == str(folder.resolve())


@pytest.mark.parametrize("body,line,error", [
    ("import numpy\n\nVALUE = undefined_name\n", 3, "NameError: name 'undefined_name' is not defined"),
    ("import numpy\n\ndef broken(:\n    pass\n", 3, "SyntaxError"),
    ("x = {}\ny = x['missing']\n", 2, "KeyError: 'missing'"),
])
def test_a_plugin_that_fails_to_import_is_named_with_its_line(tmp_path, registry, body, line, error):
    plugin = write(tmp_path / "failing_plugin.py", body)
    with pytest.raises(UsageError) as raised:
        plugins.load_plugins(str(plugin))
    message = str(raised.value)
    assert message.startswith(f"SCATTERBENCH_PLUGINS: plugin '{plugin}' failed to import: "), message
    assert error in message and f"(at {plugin.resolve()}:{line})" in message, message
    assert "failing_plugin" not in sys.modules  # a half-imported plugin is not left behind


def test_a_plugin_registering_a_taken_name_is_named_with_its_line(tmp_path, registry):
    plugin = write(tmp_path / "clash_plugin.py", MAXPOOL_STRATEGY.format(name="seed_loops"))
    with pytest.raises(UsageError) as raised:
        plugins.load_plugins(str(plugin))
    message = str(raised.value)
    assert "strategy maxpool2d/seed_loops registered twice: by impls.maxpool2d" in message, message
    assert "and by clash_plugin" in message and f"(at {plugin.resolve()}:5)" in message, message


def test_a_missing_plugin_says_what_would_be_found_and_how(tmp_path, registry):
    with pytest.raises(UsageError, match=r"cannot import 'no_such_module_x': no module named 'no_such_module_x' "
                                         r"on the import path \(add its folder to PYTHONPATH, or name the file"):
        plugins.load_plugins("no_such_module_x")
    with pytest.raises(UsageError, match="cannot import '.*/nowhere.py': no such file"):
        plugins.load_plugins(str(tmp_path / "nowhere.py"))


def test_a_strategys_exception_names_the_strategys_own_file_and_line(tmp_path, registry):
    plugin = write(tmp_path / "raising_plugin.py", '''
        from impls.registry import strategy


        @strategy("maxpool2d", backend="numpy", source="test")
        def raising(inputs, params):
            def run():
                return inputs["x"] / inputs["no such input"]
            return run
        ''')
    plugins.load_plugins(str(plugin))
    params = dict(N=1, C=1, H=4, W=4, k=2)
    verdict = check_strategy(get_operator("maxpool2d").strategies["raising"], params, "float32", "cpu",
                             reference("maxpool2d", params, "float32", "random", 0))
    assert verdict.status == "error"
    assert verdict.message == f"KeyError: 'no such input' (at {plugin.resolve()}:7)", verdict.message


def test_reloading_a_plugin_or_rerunning_a_notebook_cell_replaces_its_strategy(tmp_path, registry, monkeypatch):
    write(tmp_path / "reloaded_plugin.py", MAXPOOL_STRATEGY.format(name="reloaded_max"))
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("reloaded_plugin")
    first = get_operator("maxpool2d").strategies["reloaded_max"].prepare
    importlib.reload(module)
    assert get_operator("maxpool2d").strategies["reloaded_max"].prepare is not first
    # A notebook cell run twice: the same function name in the same module (__main__ there).
    cell = compile(MAXPOOL_STRATEGY.format(name="cell_max"), "<cell 1>", "exec")
    namespace = {"__name__": "notebook_main"}
    exec(cell, namespace)
    exec(cell, namespace)
    assert get_operator("maxpool2d").strategies["cell_max"].prepare is namespace["cell_max"]


def test_the_same_name_from_two_sources_is_still_an_error_naming_both(tmp_path, registry):
    cell = MAXPOOL_STRATEGY.format(name="twice_max")
    exec(compile(cell, "<a>", "exec"), {"__name__": "module_a"})
    with pytest.raises(ValueError, match=r"strategy maxpool2d/twice_max registered twice: by module_a \(<a>:6\) "
                                         r"and by module_b \(<b>:6\); rename one"):
        exec(compile(cell, "<b>", "exec"), {"__name__": "module_b"})


def test_an_operator_registered_again_from_its_module_keeps_its_strategies(registry):
    from impls.registry import Operator, ParamSpec, register_operator, strategy

    def define():
        return Operator(name="toy", doc="", params=(ParamSpec("n"),), generate=None, oracle=None,
                        bytes_moved=None, compare=None, validate=None, check_cases=list, reference="toy_one")

    register_operator(define())
    strategy("toy", backend="numpy")(lambda inputs, params: None)
    register_operator(define())  # the cell defining the operator, run again
    assert list(get_operator("toy").strategies) == ["<lambda>"]
    with pytest.raises(ValueError, match="operator 'toy' registered twice: by .*test_plugins and by elsewhere"):
        exec("register_operator(define())", {"__name__": "elsewhere", "register_operator": register_operator,
                                             "define": define})


def test_a_backend_registered_again_from_its_module_replaces_it(registry):
    from dataclasses import replace

    from impls.backends import register_backend

    copy = replace(BACKENDS["numpy"], name="numpy_again")
    register_backend(copy)
    register_backend(replace(copy, colour="black"))  # the cell run again
    assert BACKENDS["numpy_again"].colour == "black"
    with pytest.raises(ValueError, match="backend 'numpy_again' registered twice: by .*test_plugins and by elsewhere"):
        exec("register_backend(copy)", {"__name__": "elsewhere", "register_backend": register_backend, "copy": copy})


def test_returns_defaults_to_the_whole_output_and_must_name_an_output(registry):
    from impls.registry import strategy

    op = get_operator("maxpool2d")
    strategy("maxpool2d", backend="numpy", name="undeclared")(lambda inputs, params: None)
    assert op.strategies["undeclared"].returns == "values+indices" and not op.partial("undeclared")
    assert op.unranked_reason("torch_max_pool2d") == ("it returns values only, not values+indices "
                                                      "(declared returns='values'), so it does less work")
    with pytest.raises(ValueError, match=r"returns='values,indices' is not one of maxpool2d's outputs "
                                         r"\('values\+indices', 'values'\)"):
        strategy("maxpool2d", backend="numpy", name="typo", returns="values,indices")(lambda inputs, params: None)


# A plugin's operator with a backward: rowmax_plugin's rowmax (x (R, L) -> (R,)) and a Gradient
# whose declaration a test spoils (``{gradient}``: the Gradient's keyword arguments).
GRADIENT_PLUGIN = '''
import numpy as np

from impls import common
from impls.registry import Gradient, Operator, ParamSpec, register_operator

OP = register_operator(Operator(
    name="rowmax_{tag}", doc="rows' maxima", params=(ParamSpec("R"), ParamSpec("L")),
    generate=lambda params, mode, seed: {{"x": np.ones((params["R"], params["L"])), "lengths": np.arange(params["R"])}},
    oracle=lambda inputs, params: inputs["x"].max(axis=-1), bytes_moved=lambda params, itemsize, returns: 0,
    compare=lambda *args: common.Verdict("ok"), validate=lambda params: None,
    check_cases=lambda: [dict(R=3, L=5)], reference="numpy_max"))
OP.gradient = Gradient({gradient}, generate=lambda params, mode, seed: np.ones(params["R"]), oracle=None,
                       bytes_moved=None, compare=None)
'''


@pytest.mark.parametrize("gradient,problem", [
    ('input="y", name="grad_out"', "input='y' is not a float input of rowmax_y (no input has that name); "
                                   "its float inputs: x"),
    ('input="lengths", name="grad_out"', "input='lengths' is not a float input of rowmax_lengths (an input, "
                                         "but not a float one); its float inputs: x"),
    ('input="x", name="x"', "name='x' is the name of one of rowmax_x's inputs (x, lengths); name the incoming "
                            "gradient apart, e.g. 'grad_output'"),
])
def test_a_bad_gradient_is_one_line_naming_the_plugin_file(tmp_path, registry, gradient, problem):
    tag = gradient.split('"')[1]
    plugin = write(tmp_path / f"bad_gradient_{tag}.py", GRADIENT_PLUGIN.format(tag=tag, gradient=gradient))
    line = plugin.read_text().splitlines().index(next(text for text in plugin.read_text().splitlines()
                                                       if text.startswith("OP.gradient"))) + 1
    # Directly (a notebook, a test): a ValueError naming the declaring file and line.
    source = plugin.read_text()
    with pytest.raises(ValueError) as raised:
        exec(compile(source, str(plugin), "exec"), {"__name__": f"bad_gradient_{tag}"})
    assert str(raised.value) == f"rowmax_{tag}'s Gradient (declared at {plugin}:{line}): {problem}", raised.value
    # Through the CLI: one line naming the plugin and its line, exit status 2, no traceback.
    from tests.helpers import plugin_env, scatterbench

    result = scatterbench("list", env=plugin_env(str(plugin)))
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(f"scatterbench: error: SCATTERBENCH_PLUGINS: plugin '{plugin}' failed to import: ValueError: "
                               f"rowmax_{tag}'s Gradient (declared at {plugin.resolve()}:{line}): {problem}"), lines
    assert lines[0].endswith(f"(at {plugin.resolve()}:{line})"), lines


# Issue 51: declarations the training check would stumble on midway, refused when declared.
SHAPED_PLUGIN = '''
import numpy as np

from impls import common
from impls.registry import Gradient, Operator, ParamSpec, register_operator

OP = register_operator(Operator(
    name="rowargmax_{tag}", doc="rows' maxima and where", params=(ParamSpec("R"), ParamSpec("L")),
    generate=lambda params, mode, seed: {{"x": np.ones((params["R"], params["L"]))}},
    oracle=lambda inputs, params: (inputs["x"].max(axis=-1), inputs["x"].argmax(axis=-1)),
    bytes_moved=lambda params, itemsize, returns: 0, compare=lambda *args: common.Verdict("ok"),
    validate=lambda params: None, check_cases=lambda: [dict(R=3, L=5)], reference="numpy_max"))
OP.gradient = Gradient(input="x", name="grad_max", generate={generate}, oracle=None, bytes_moved=None,
                       compare=None{output})
'''


@pytest.mark.parametrize("tag,generate,output,problem", [
    ("tuple", "lambda params, mode, seed: np.ones(params['R'])", "",
     "rowargmax_tuple's oracle returns 2 outputs, so the Gradient must say which one is differentiated: output="),
    ("shape", "lambda params, mode, seed: np.ones((params['R'], 2))", ", output=lambda out: out[0]",
     "generate({'R': 3, 'L': 5}, 'random', 0) gives float64 of shape (3, 2); the incoming gradient is float64 "
     "of the differentiated output's shape, (3,)"),
    ("dtype", "lambda params, mode, seed: np.ones(params['R'], dtype=np.float32)", ", output=lambda out: out[0]",
     "generate({'R': 3, 'L': 5}, 'random', 0) gives float32 of shape (3,)"),
    ("adversarial", "lambda params, mode, seed: np.ones(params['R'] + (mode != 'random'))",
     ", output=lambda out: out[0]", "generate({'R': 3, 'L': 5}, 'adversarial', 0) gives float64 of shape (4,)"),
])
def test_a_gradient_the_training_check_would_stumble_on_is_refused_when_declared(tmp_path, registry, tag, generate,
                                                                                  output, problem):
    """A tuple output without ``output=``, and a ``generate`` of the wrong shape or dtype, are one
    line naming the plugin's file and the declaring line, exit 2: before any check or run starts,
    not a strategy's RuntimeError or an "unexpected ValueError" midway."""
    from tests.helpers import plugin_env, scatterbench

    plugin = write(tmp_path / f"shaped_{tag}.py", SHAPED_PLUGIN.format(tag=tag, generate=generate, output=output))
    line = next(number for number, text in enumerate(plugin.read_text().splitlines(), 1)
                if text.startswith("OP.gradient"))
    result = scatterbench("check", "configs/quick.yaml", "--op", f"rowargmax_{tag}", env=plugin_env(str(plugin)))
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert f"rowargmax_{tag}'s Gradient (declared at {plugin.resolve()}:{line}): {problem}" in lines[0], lines
    assert lines[0].endswith(f"(at {plugin.resolve()}:{line})"), lines


def test_a_good_gradient_is_accepted_and_the_built_in_ones_pass(tmp_path, registry):
    plugin = write(tmp_path / "good_gradient.py", GRADIENT_PLUGIN.format(tag="good", gradient='input="x", '
                                                                         'name="grad_out"'))
    plugins.import_plugin(str(plugin))
    assert get_operator("rowmax_good").gradient.input == "x"
    for name in ("maxpool2d", "maxunpool", "dispersion", "dispersion_pinv"):  # re-declared: still accepted
        op = get_operator(name)
        op.gradient = op.gradient


def test_recorded_plugins_load_for_a_report_or_say_in_one_line_what_is_missing(tmp_path, registry):
    plugin = write(tmp_path / "recorded_plugin.py", MAXPOOL_STRATEGY.format(name="recorded_max"))
    record = {"module": "recorded_plugin", "file": str(plugin), "sha256": plugins.sha256(plugin)}
    # Same file, same hash: loaded.
    assert plugins.load_recorded({"plugins": [record]}, "run-a") == []
    assert "recorded_max" in get_operator("maxpool2d").strategies
    # A file changed since the run is not run: the result directory names code that did not make it.
    changed = dict(record, module="changed_plugin", sha256="0" * 64)
    [line] = plugins.load_recorded({"plugins": [changed]}, "run-b")
    assert line.startswith(f"run-b: made with plugin changed_plugin ({plugin} changed since the run")
    assert "changed_plugin" not in sys.modules
    gone = {"module": "gone_plugin", "file": str(tmp_path / "gone_plugin.py"), "sha256": "1" * 64}
    [line] = plugins.load_recorded({"plugins": [gone]}, "run-c")
    assert line == (f"run-c: made with plugin gone_plugin ({tmp_path / 'gone_plugin.py'} is not here): without it "
                    f"this lacks {plugins.REPORT_LACKS}")


def one_case_run(directory, meta=None):
    """A result directory holding one timed maxpool2d case."""
    from harness.results.store import COLUMNS, RunWriter

    writer = RunWriter(directory, {"run_id": directory.name, **(meta or {})})
    row = {column: "" for column in COLUMNS}
    row.update(run_id=directory.name, case_id="c", op="maxpool2d", strategy="torch_max_pool2d_indices",
               backend="torch", device="cpu", dtype="float32", params='{"C": 1, "H": 4, "N": 1, "W": 4, "k": 2}',
               status="ok", median_s=1e-5, n_samples=5)
    writer.append(row, [1e-5] * 5)
    writer.close()
    return directory


def test_compare_says_which_plugins_it_could_not_load(tmp_path, registry):
    from harness.judging import compare

    gone = {"module": "gone_plugin", "file": str(tmp_path / "gone_plugin.py"), "sha256": "1" * 64}
    base = one_case_run(tmp_path / "base", meta={"plugins": [gone]})
    new = one_case_run(tmp_path / "new")
    result = compare.compare_dirs(base, new, normalise=True)
    assert result.warnings == [f"warning: {base}: made with plugin gone_plugin ({tmp_path / 'gone_plugin.py'} is "
                               f"not here): without it this lacks {plugins.COMPARE_LACKS}"]


def test_compare_relative_to_keeps_the_plugin_warnings(tmp_path, registry):
    from harness.judging import compare

    gone = {"module": "gone_plugin", "file": str(tmp_path / "gone_plugin.py"), "sha256": "1" * 64}
    base = one_case_run(tmp_path / "base", meta={"plugins": [gone]})
    new = one_case_run(tmp_path / "new")
    result = compare.compare_dirs(base, new, relative_to=["torch_max_pool2d_indices"])
    assert len(result.warnings) == 1 and "made with plugin gone_plugin" in result.warnings[0]


def test_the_dashboard_loads_the_runs_plugins_before_judging(tmp_path, registry, capsys):
    """A plugin operator's reference is asked of the registry when the
    dashboard judges: its recorded plugin is loaded first; one that cannot
    be is said once per set of runs, not once per run."""
    from harness.presenting import dashboard

    plugin = write(tmp_path / "dash_plugin.py", MAXPOOL_STRATEGY.format(name="dash_max"))
    record = {"module": "dash_plugin", "file": str(plugin), "sha256": plugins.sha256(plugin)}
    gone = {"module": "gone_plugin", "file": str(tmp_path / "gone_plugin.py"), "sha256": "1" * 64}
    for name, start, recorded in (("a", "2026-11-01", [record]), ("b", "2026-11-02", [gone]),
                                  ("c", "2026-11-03", [gone])):
        one_case_run(tmp_path / "results" / name, meta={"plugins": recorded, "start_time": start})
    assert "dash_max" not in get_operator("maxpool2d").strategies
    dashboard.build_dashboard(tmp_path / "results", tmp_path / "site", with_reports=False)
    assert "dash_max" in get_operator("maxpool2d").strategies
    lines = [line for line in capsys.readouterr().err.splitlines() if "gone_plugin" in line]
    assert lines == [f"warning: 2 runs (the newest {tmp_path / 'results' / 'c'}): made with plugin gone_plugin "
                     f"({tmp_path / 'gone_plugin.py'} is not here): without it this lacks "
                     f"{plugins.DASHBOARD_LACKS}"]


def test_merged_runs_keep_every_runs_plugins(tmp_path):
    from harness.results.merge import merge_runs
    from harness.results.store import read_meta

    first = {"module": "first_plugin", "file": "/x/first_plugin.py", "sha256": "1" * 64}
    second = {"module": "second_plugin", "file": "/x/second_plugin.py", "sha256": "2" * 64}
    a = one_case_run(tmp_path / "a", meta={"plugins": [first], "start_time": "1"})
    b = one_case_run(tmp_path / "b", meta={"plugins": [first, second], "start_time": "2"})
    merged = merge_runs([a, b], tmp_path / "merged")
    assert read_meta(merged)["plugins"] == [first, second]


# Issue 51: hostile incoming gradients are the harness's, not an opt-in of the operator's generator.
OVERWRITING_PLUGIN = '''
import numpy as np

from impls import common
from impls.registry import Gradient, Operator, ParamSpec, register_operator, strategy


def generate(params, mode="random", seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.permutation(params["R"] * params["L"]).reshape(params["R"], params["L"]).astype(np.float64)}


def grad_oracle(inputs, grad, params):
    x = inputs["x"]
    out = np.zeros_like(x)
    np.put_along_axis(out, x.argmax(axis=-1)[:, None], grad[:, None], axis=-1)
    return out


OP = register_operator(Operator(
    name="rowmax_overwritten", doc="rows' maxima", params=(ParamSpec("R"), ParamSpec("L")), generate=generate,
    oracle=lambda inputs, params: inputs["x"].max(axis=-1), bytes_moved=lambda params, itemsize, returns="output": 8,
    compare=lambda out, ref, inputs, dtype, strat, params=None: common.compare_bitwise("output", out, ref, dtype),
    validate=lambda params: None, check_cases=lambda: [dict(R=40, L=5)], reference="numpy_max",
    check_layouts=("contiguous",)))
# As PLUGINS.md's table gives it: normal values only, nothing asked for.
OP.gradient = Gradient(
    input="x", name="grad_out",
    generate=lambda params, mode, seed: common.gradient_values(np.random.default_rng((seed, 1)), (params["R"],), mode),
    oracle=grad_oracle, bytes_moved=lambda params, itemsize: 8,
    compare=lambda out, ref, inputs, grad, dtype, strat, params: common.compare_gradient_bitwise("grad_x", out, ref,
                                                                                                dtype))


def scatter_backward(inputs, params):
    def backward(saved, grad):
        {cleaning}
        out = np.zeros(inputs["x"].shape, dtype=grad.dtype)
        np.put_along_axis(out, inputs["x"].argmax(axis=-1)[:, None], grad[:, None], axis=-1)
        return out
    return backward


@strategy("rowmax_overwritten", backend="numpy", baseline=True, backward=scatter_backward)
def numpy_max(inputs, params):
    x = inputs["x"]
    return lambda: x.max(axis=-1)
'''


@pytest.mark.parametrize("cleaning,caught", [("np.nan_to_num(grad, copy=False)", True), ("pass", False)])
def test_a_backward_that_overwrites_its_incoming_gradient_is_caught_with_normal_values_drawn(
        tmp_path, registry, cleaning, caught):
    """The operator's generator draws normal values only (``gradient_values`` without a flag): the
    harness still gives the adversarial check NaN, ±inf, -0.0, subnormals and the largest values,
    so a backward that cleans its incoming gradient in place is caught before anything is timed."""
    from harness.measuring.check import AdversarialCheck

    plugin = write(tmp_path / f"overwriting_{caught}.py", OVERWRITING_PLUGIN.replace("{cleaning}", cleaning))
    plugins.import_plugin(str(plugin))
    strat = get_operator("rowmax_overwritten").strategies["numpy_max"]
    failure = AdversarialCheck(0).failure(strat, "cpu", "float32", mode="backward")
    if caught:
        assert failure is not None and failure.status in ("mismatch", "input-modified"), failure
    else:
        assert failure is None


def test_the_checks_kept_references_outlive_an_operator_taken_out_or_registered_again(tmp_path, registry):
    """The check keeps references across checks: an operator taken out of the registry (a test's
    cleanup) must not break the next reference's bookkeeping (CI of 38785c8), and one registered
    again under its name draws anew, not from the old one's reference."""
    from harness.measuring.check import cached_reference

    plugin = write(tmp_path / "kept_refs.py", OVERWRITING_PLUGIN.replace("{cleaning}", "pass"))
    plugins.import_plugin(str(plugin))
    first = cached_reference("rowmax_overwritten", dict(R=40, L=5), "float32", "adversarial", 0)
    again = write(tmp_path / "kept_refs_again.py", OVERWRITING_PLUGIN.replace("{cleaning}", "pass").replace(
        'rng.permutation(params["R"] * params["L"])', '-rng.permutation(params["R"] * params["L"])'))
    OPERATORS.pop("rowmax_overwritten")
    plugins.import_plugin(str(again))
    second = cached_reference("rowmax_overwritten", dict(R=40, L=5), "float32", "adversarial", 0)
    assert (second.inputs["x"] == -first.inputs["x"]).all()  # the new operator's draw
    OPERATORS.pop("rowmax_overwritten")
    assert cached_reference("maxpool2d", dict(N=1, C=2, H=4, W=4, k=2), "float32", "random", 0).inputs["x"].shape \
        == (1, 2, 4, 4)
