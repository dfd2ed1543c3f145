"""`scatterbench plan` and `run --budget` (harness/measuring/plan.py): the
per-phase estimate of gpu.yaml on a GPU from the runs measured there, every
case accounted for, the order and the cut of a budget, and the sweep's stop."""

import json
import shutil

import pytest

from harness import cli
from harness.base.config import Case, expand, load_config
from harness.measuring import check, gpu_steps
from harness.measuring import plan as window
from harness.measuring.session import Interrupted, MemoryWriter
from harness.measuring.sweep import run_sweep
from harness.results import store
from impls import maxpool2d, training
from impls.registry import get_operator
from tests.helpers import ROOT

GPU_YAML = str(ROOT / "configs" / "gpu.yaml")
GPU_MORE_YAML = str(ROOT / "configs" / "gpu-more.yaml")
H200 = ROOT / "results" / "20261126T045242-vm-gpu-1067"  # the first GPU run: 52 max-pool cases, no phase_s


def h200_copy(tmp_path, **meta):
    """A copy of the H200 run, its meta.json updated with ``meta``."""
    copy = tmp_path / "runs" / H200.name
    shutil.copytree(H200, copy)
    store.write_json_atomic(copy / store.META, {**json.loads((copy / store.META).read_text()), **meta})
    return copy


def record_step(directory, name: str, seconds: float, exit_status: int = 0) -> None:
    """A step's record as `make gpu` writes it (harness/measuring/gpu_steps.py)."""
    steps = directory / store.STEPS
    steps.mkdir(parents=True, exist_ok=True)
    gpu_steps.write_record(steps, name, exit_status, seconds)


def phases(plan) -> dict:
    return dict(plan.phases)


def test_with_nothing_measured_every_phase_says_so_and_every_case_is_accounted_for(tmp_path):
    plan = window.plan_config(GPU_YAML, "cuda", [tmp_path])
    text = "\n".join(window.lines(plan))
    assert plan.sources == [] and "every figure is a default" in text
    for name, estimate in plan.phases:
        assert "no measurement" in estimate.source, name
    assert phases(plan)["pytest -m cuda"].seconds == window.DEFAULT_PYTEST_S
    # every case of the config: in the order, the ones the sweep records without timing named with why
    assert sorted(case.case_id for case in plan.order()) == sorted(case.case_id for case in expand(load_config(GPU_YAML)))
    skipped = [cost for cost in plan.cases if cost.skipped]
    # jax_reduce_window has no backward; the reshape forms do not pool ResNet's stem (3x3, stride 2, padding 1)
    no_backward = {cost.case.strategy for cost in skipped if "no differentiation rule" in cost.skipped}
    assert no_backward == {"jax_reduce_window"}
    assert {cost.case.mode for cost in skipped if cost.case.strategy == "jax_reduce_window"} == {"backward",
                                                                                                 "forward+backward"}
    outside = [cost for cost in skipped if cost.skipped.startswith("not for this case")]
    assert outside and {maxpool2d.window(cost.case.params_dict) for cost in outside} == {(3, 2, 1)}
    assert len(outside) + sum(cost.case.strategy == "jax_reduce_window" for cost in skipped) == len(skipped)
    assert f"recorded as skipped, not measured ({len(skipped)} cases):" in text
    assert f"{plan.total_s:.0f}" in text and "min of device time" in text


def test_with_no_check_recorded_the_plan_counts_its_items_at_the_h200s_seconds_an_item(tmp_path):
    """The check's default is what it will run (check.check_plan's items, per operator) at the seconds
    an item the H200's check of 2026-12-04 took (498 s for 6,956 items), less the autotune benchmarks
    the check no longer runs, not a guess per strategy key (the plan had said 228 s where the check took
    over 630 s)."""
    plan = window.plan_config(GPU_YAML, "cuda", [tmp_path])
    config = load_config(GPU_YAML)
    items = [item for item in check.check_plan(config, expand(config))
             if not item.skip and not training.applies(item.strategy, item.training, dict(item.params))]
    estimate = phases(plan)["check (make gpu)"]
    assert estimate.seconds == pytest.approx(len(items) * window.DEFAULT_CHECK_S_PER_ITEM)
    # its checks less those skipped before anything ran (128 + 232 + 84), its seconds less the autotune
    # benchmarks counted for that commit's check (one do_bench of 25 + 100 ms per kernel an item entered)
    assert window.H200_CHECK_ITEMS == 1732 + 2560 + 2664 - 444 and window.H200_CHECK_S == 168 + 163 + 167
    assert window.DEFAULT_CHECK_S_PER_ITEM == pytest.approx((498 - (596 + 812 + 496) * 0.125) / 6512)
    assert "less its 1,904 autotune benchmarks (0.125 s each)" in estimate.source and "upper bound" in estimate.source
    per_op = window.planned_checks(config, expand(config))
    assert sum(per_op.values()) == len(items) and list(per_op) == gpu_steps.checked_ops(config)
    assert f"{len(items)} items (" in estimate.source and all(f"{op} {n}" in estimate.source
                                                               for op, n in per_op.items())
    # over the 3 minutes the check must take: no GPU has measured it since its fixes, so the plan never
    # says it meets that without one
    assert estimate.seconds > 3 * 60


def test_with_no_check_phase_on_the_device_a_case_costs_the_harness_work_and_its_share_of_its_points_inputs(
        tmp_path):
    """Not a flat 3 s a case (936 s for gpu.yaml, which outweighed the sweep's timing 6 to 1): the
    harness's own work per case, and the host's drawing of the point's inputs, once for all of
    its cases (its training modes share them), at the rates measured on the 2-core VM."""
    from harness.measuring import memory

    plan = window.plan_config(GPU_YAML, "cuda", [tmp_path])
    big = [c for c in plan.cases if c.case.op == "dispersion" and '"C": 512' in c.case.params_json
           and c.case.dtype == "float32"]
    assert len(big) == 9  # the point's strategies, forward only
    drawn = window.INPUT_S_PER_REFERENCE_BYTE["dispersion"] * memory.reference_bytes(
        get_operator("dispersion"), big[0].case.params_dict)
    assert drawn > 5  # 537M float64 inputs: seconds on one core
    assert sum(c.check_s for c in big) == pytest.approx(9 * window.CHECK_HARNESS_S_PER_CASE + drawn)
    # a training point's three modes share one draw
    training = [c for c in plan.cases if c.case.op == "dispersion" and '"C": 28' in c.case.params_json
                and c.case.dtype == "float16"]
    assert {c.case.mode for c in training} == {"forward", "backward", "forward+backward"}
    drawn = window.INPUT_S_PER_REFERENCE_BYTE["dispersion"] * memory.reference_bytes(
        get_operator("dispersion"), training[0].case.params_dict)
    assert sum(c.check_s for c in training) == pytest.approx(len(training) * window.CHECK_HARNESS_S_PER_CASE + drawn)
    estimate = phases(plan)["check per case"]
    measured = sum(1 for cost in plan.cases if not cost.skipped)
    assert estimate.source.startswith("no measurement on the device") and estimate.seconds < measured * 0.5


def test_a_raced_group_costs_one_whole_race_and_the_others_rounds_until_they_leave(tmp_path):
    """SPEC 3's racing: of a group (a point in one mode), one strategy runs all max_rounds rounds
    and the others leave after a few; the plan shares that evenly, not the whole budget each."""
    plan = window.plan_config(GPU_YAML, "cuda", [tmp_path])
    config = load_config(GPU_YAML)
    settings = config.timing
    group = [c for c in plan.cases if c.case.op == "maxunpool" and '"form": "1d"' in c.case.params_json
             and c.case.dtype == "float32"]
    assert len(group) > 3 and not any(c.skipped for c in group)
    extra = sum(timing_extra(c, settings) for c in group)
    whole = settings.warmup_s + settings.budget_s  # nothing measured: each call is taken as within the budget
    expected = whole + (len(group) - 1) * whole * window.ROUNDS_TO_LEAVE / settings.max_rounds
    assert sum(c.time.seconds for c in group) - extra == pytest.approx(expected, rel=1e-6)
    assert sum(c.time.seconds for c in group) - extra < len(group) * whole / 2  # every case running whole


def timing_extra(cost, settings) -> float:
    """What a case's time estimate adds to its rounds: the cross-check's do_bench (CUDA)."""
    return window.XCHECK_S if settings.cross_check else 0.0


def test_the_h200_runs_measured_costs_are_used_and_named(tmp_path):
    plan = window.plan_config(GPU_YAML, "cuda", [ROOT / "results"])
    assert [run.path.name for run in plan.sources] == [H200.name]
    text = "\n".join(window.lines(plan))
    assert f"estimated from: {plan.sources[0].path} (NVIDIA H200), 52 rows, no phase_s" in text
    rows = store.read_rows(H200)
    measured = rows[(rows["strategy"] == "triton_fused") & (rows["mode"] == "forward")].iloc[0]
    cost = next(c for c in plan.cases if c.case.case_id == measured["case_id"])
    assert cost.prepare.seconds == pytest.approx(measured["setup_s"])
    assert cost.prepare.source == f"this case in {H200.name}"
    assert f"this case's median in {H200.name}" in cost.time.source
    # a case the H200 never reached: its strategy's median where it ran elsewhere, else its kind's
    unpool = next(c for c in plan.cases if c.case.op == "maxunpool" and c.case.strategy == "triton_scatter")
    assert unpool.prepare.source.startswith("median of") and "triton" in unpool.prepare.source
    # 30 of its 40 timed cases are gpu.yaml's; the other 10 (16×64×512²) are gpu-more.yaml's
    assert "prepare/compile" in phases(plan) and "30 cases: this case measured" in phases(plan)["prepare/compile"].source
    more = window.plan_config(GPU_MORE_YAML, "cuda", [ROOT / "results"])
    assert "10 cases: this case measured" in phases(more)["prepare/compile"].source


def test_gpu_yaml_fits_one_lease_and_gpu_more_yaml_times_nothing_it_leaves_out():
    """Issue 58: gpu.yaml's plan, every phase of `make gpu` from the check to the report, fits 12 minutes
    of device time (a 15-minute lease less its start-up). Every operator, CUDA strategy, dtype and mode
    stays in it; gpu-more.yaml holds larger points only, of strategies gpu.yaml times too."""
    plan = window.plan_config(GPU_YAML, "cuda", [ROOT / "results"])
    assert plan.total_s <= 12 * 60, window.lines(plan)[:14]
    timed = {(c.case.op, c.case.strategy, c.case.dtype) for c in plan.cases if not c.skipped}
    more = load_config(GPU_MORE_YAML)
    assert {b.op for b in more.benchmarks} <= {b.op for b in load_config(GPU_YAML).benchmarks}
    more_cases = expand(more)
    assert more_cases and {(c.op, c.strategy, c.dtype) for c in more_cases} <= timed
    for op in {c.case.op for c in plan.cases}:  # every strategy that runs on CUDA
        cuda = {name for name, strat in get_operator(op).strategies.items() if "cuda" in strat.devices}
        assert cuda <= {s for o, s, _ in timed if o == op}, op
    assert {c.case.mode for c in plan.cases} == {"forward", "backward", "forward+backward"}
    assert {c.case.dtype for c in plan.cases} == {"float32", "float16"}


def test_phase_s_and_make_gpus_step_records_replace_the_defaults(tmp_path):
    run = h200_copy(tmp_path, phase_s={"ceilings": 4.5, "adversarial": 30.0, "load settling": 2.0, "check": 100.0,
                                        "prepare/compile": 50.0, "time": 40.0})
    for name, seconds in (("check-maxpool2d", 20), ("check-maxunpool", 25), ("check-dispersion", 5),
                          ("check-dispersion_pinv", 10), ("pytest", 70), ("report", 33)):
        record_step(run, name, seconds)
    plan = window.plan_config(GPU_YAML, "cuda", [run.parent])
    found = phases(plan)
    assert found["ceilings"].seconds == 4.5 and "phase_s['ceilings']" in found["ceilings"].source
    assert found["check (make gpu)"].seconds == 60 and "(4 records)" in found["check (make gpu)"].source
    # make gpu since 2026-12-05: one check step for every operator, its record the whole of it
    record_step(run, "check", 45)
    found = phases(window.plan_config(GPU_YAML, "cuda", [run.parent]))
    assert found["check (make gpu)"].seconds == 45 and found["check (make gpu)"].source.endswith("steps/check.json")
    assert found["pytest -m cuda"].seconds == 70 and found["report"].seconds == 33
    # the adversarial check (and the load settling after it): seconds per key the run checked itself,
    # not those its meta says came from the verdict cache
    rows = store.read_rows(run)
    checked = len(rows.groupby(["op", "strategy", "dtype", "mode"])) - store.read_meta(run)["adversarial_from_cache"]
    assert checked == 27
    assert f"{32 / checked:.2f} s a key over its {checked} keys" in found["adversarial (sweep)"].source
    assert f"the sweep alone: {32 / checked * 228:.0f} s" in found["adversarial (sweep)"].source
    assert found["adversarial (sweep)"].seconds == 0  # make gpu's check did it, its verdicts kept
    # the oracles and judging: the run's check phase per byte its rows moved, so a bigger point costs more
    per_byte = 100.0 / rows["bytes"].sum()
    big = next(c for c in plan.cases if "512" in c.case.params_json and c.case.op == "dispersion")
    assert big.check_s == pytest.approx(per_byte * window._case_bytes(big.case))
    assert "phase_s['check'] per byte moved" in found["check per case"].source


def test_a_budget_cuts_the_order_at_a_case_and_names_what_is_left(tmp_path):
    full = window.plan_config(GPU_YAML, "cuda", [ROOT / "results"])
    budget = full.before_cases_s + full.sweep_s / 3
    plan = window.plan_config(GPU_YAML, "cuda", [ROOT / "results"], budget_s=budget)
    costs = [cost.seconds for cost in plan.cases]
    assert sum(costs[:plan.fitting]) <= budget - plan.before_cases_s < sum(costs[:plan.fitting + 1])
    text = "\n".join(window.lines(plan))
    assert f"---- the budget of {budget:g} s ends here" in text
    within = sum(1 for cost in plan.cases[:plan.fitting] if not cost.skipped)
    later = sum(1 for cost in plan.cases[plan.fitting:] if not cost.skipped)
    assert f"within the budget: {within} cases measured" in text and f"left for the next call: {later} cases" in text
    assert within + later + sum(1 for cost in plan.cases if cost.skipped) == len(expand(load_config(GPU_YAML)))


def test_coverage_first_each_operators_cheapest_point_then_the_cheapest_per_case():
    plan = window.plan_config(GPU_YAML, "cuda", [ROOT / "results"])
    head = plan.points[:4]
    assert sorted(point.op for point in head) == ["dispersion", "dispersion_pinv", "maxpool2d", "maxunpool"]
    for point in head:
        assert point.seconds == min(p.seconds for p in plan.points if p.op == point.op)
    assert [p.seconds for p in head] == sorted(p.seconds for p in head)
    rest = [p.seconds / len(p.measured) for p in plan.points[4:]]
    assert rest == sorted(rest)
    # a point's cases stay together, in the config's order: they share inputs and oracles
    order = plan.order()
    for point in plan.points:
        ids = [cost.case.case_id for cost in point.costs]
        start = order.index(point.costs[0].case)
        assert [case.case_id for case in order[start:start + len(ids)]] == ids


def test_a_resumed_plan_leaves_out_the_cases_and_steps_done(tmp_path):
    run = h200_copy(tmp_path)
    record_step(run, "pytest", 70)
    for op in ("maxpool2d", "maxunpool", "dispersion"):  # an older make gpu's check, an operator a step
        record_step(run, f"check-{op}", 10)
    plan = window.plan_config(GPU_YAML, "cuda", [tmp_path / "nothing"], resume=str(run))
    # the run's 52 rows, less the 10 of its 16×64×512² max-pool, now gpu-more.yaml's
    in_config = {case.case_id for case in expand(load_config(GPU_YAML))}
    assert len(set(store.read_rows(run)["case_id"]) & in_config) == 42
    assert plan.done == 42 and len(plan.order()) == len(in_config) - 42
    assert not {case.case_id for case in plan.order()} & set(store.read_rows(run)["case_id"])
    found = phases(plan)
    assert found["pytest -m cuda"].seconds == 0 and found["pytest -m cuda"].source == "finished already"
    # today's one check step is not among them: it runs whole, at the rate of the run's own records
    check = found["check (make gpu)"]
    assert "3 of 4 steps/check-*.json, 10 s each" in check.source and check.seconds == pytest.approx(40)
    assert "(42 done already)" in window.lines(plan)[0]
    record_step(run, "check", 35)
    check = phases(window.plan_config(GPU_YAML, "cuda", [tmp_path / "nothing"], resume=str(run)))["check (make gpu)"]
    assert check.seconds == 0 and check.source == "finished already"


def test_budget_stops_before_a_case_that_would_outlast_it():
    now = [100.0]
    budget = window.Budget(10, {"a": 4.0, "b": 7.0}, clock=lambda: now[0])
    assert budget.stop_before([Case("maxpool2d", "x", "cpu", "float32", ())]) is None  # unknown: costs nothing
    case = Case("maxpool2d", "torch_max_pool2d", "cpu", "float32", (("C", 1),))
    budget.costs = {case.case_id: 4.0}
    now[0] = 105.0
    assert budget.stop_before([case]) is None  # 5 s left, 4 needed
    other = Case("maxpool2d", "torch_max_pool2d_indices", "cpu", "float32", (("C", 1),))
    budget.costs[other.case_id] = 2.0
    assert budget.stop_before([case, other]) == ("budget of 10 s: the next point (2 cases) needs about 6 s and "
                                                 "5 s are left")  # a point's cases are timed together
    now[0] = 107.0
    reason = budget.stop_before([case])
    assert reason == "budget of 10 s: the next case needs about 4 s and 3 s are left"


def test_the_sweep_stops_before_the_case_its_hook_names():
    config = load_config_text("""
timing: {min_samples: 5, budget_s: 0.001, warmup_s: 0}
threads: 1
benchmarks:
  - op: maxpool2d
    strategies: [torch_max_pool2d, torch_max_pool2d_indices, torch_reshape_argmax]
    params: {N: 1, C: [1, 2, 3], H: 4, W: 4, k: 2}
""")
    cases = expand(config)
    writer = MemoryWriter()
    asked = []

    def stop_before(point):
        asked.append([case.strategy for case in point])
        return "enough" if len(asked) == 2 else None

    # their adversarial checks passed already (the check's own tests test them): this test is the stop's
    passed = check.AdversarialCheck(config.seed, config.timing.timeout_s)
    for case in cases:
        passed.remember(get_operator(case.op).strategies[case.strategy], case.device, case.dtype, None)
    with pytest.raises(Interrupted) as stopped:
        run_sweep(cases, config, writer, "run", {}, stop_before=stop_before, adversarial=passed)
    assert stopped.value.signal_name == "enough"
    # asked once per point (its strategies are timed together in rounds); the first point was written whole
    assert asked == [["torch_max_pool2d", "torch_max_pool2d_indices", "torch_reshape_argmax"]] * 2
    assert sorted(row["strategy"] for row in writer.rows) == ["torch_max_pool2d", "torch_max_pool2d_indices",
                                                             "torch_reshape_argmax"]
    assert {json.loads(row["params"])["C"] for row in writer.rows} == {1}
    assert {row["status"] for row in writer.rows} == {"ok"}


def load_config_text(text: str):
    from harness.base.config import parse_config
    import yaml

    return parse_config(yaml.safe_load(text), "<test>")


def test_plan_on_the_command_line(tmp_path, capsys):
    assert cli.main(["plan", GPU_YAML, "--device", "cuda", "--results", str(tmp_path), "--budget", "540"]) == 0
    out = capsys.readouterr().out
    cases = expand(load_config(GPU_YAML))
    plan = window.plan_config(GPU_YAML, "cuda", [tmp_path])  # which cases are skipped depends on no measurement
    skipped = sum(1 for cost in plan.cases if cost.skipped)
    assert out.startswith(f"plan of {GPU_YAML} on cuda: {len(cases)} cases to run, {len(cases) - skipped} measured "
                          f"and {skipped} recorded as skipped")
    assert "check (make gpu)" in out and "---- the budget of 540 s ends here" in out


@pytest.mark.parametrize("arguments, message", [
    (["--device", "cpu"], f"--device cpu: {GPU_YAML} measures on cuda only"),
    (["--budget", "0"], "--budget 0: must be a positive number of seconds"),
    (["--resume", "/nonexistent/run"], "--resume /nonexistent/run: no such directory"),
])
def test_plan_refuses_bad_input_in_one_line(arguments, message, capsys):
    assert cli.main(["plan", GPU_YAML, *arguments]) == 2
    err = capsys.readouterr().err
    assert err == f"scatterbench: error: {message}\n"


def test_run_budget_refuses_a_counting_run(capsys):
    assert cli.main(["run", GPU_YAML, "--budget", "60", "--instrument", "callgrind"]) == 2
    assert "--budget: a counting run (--instrument callgrind) has no budget" in capsys.readouterr().err
