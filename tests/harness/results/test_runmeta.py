"""Which machine a recorded run was on: the same CPU by every fact both runs
recorded, a label per machine, and a history grouped by hardware."""

from harness.results import runmeta

ZEN3 = {"cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_family_model": "25-1"}
ZEN4 = {"cpu_model": "AMD EPYC", "cpu_count": 2, "cpu_family_model": "25-17"}


def meta(hardware=None, **fields) -> dict:
    return {**({"hardware": hardware} if hardware is not None else {}), **fields}


def test_the_same_cpu_agrees_on_every_fact_both_recorded():
    assert runmeta.same_cpu(ZEN3, dict(ZEN3))
    assert not runmeta.same_cpu(ZEN3, ZEN4)
    assert not runmeta.same_cpu(ZEN3, dict(ZEN3, cpu_count=4))
    older = {"cpu_model": "AMD EPYC", "cpu_count": 2}  # recorded before family-model was
    assert runmeta.same_cpu(older, ZEN3) and runmeta.same_cpu(older, ZEN4)
    assert not runmeta.same_cpu(dict(older, caches={"L3": 32}), dict(older, caches={"L3": 16}))


def test_the_same_machine_needs_the_same_gpu_but_not_the_same_host():
    assert runmeta.same_machine(meta(ZEN3, host="a"), meta(ZEN3, host="b"))
    assert not runmeta.same_machine(meta(ZEN3, gpu_name="H100"), meta(ZEN3))
    assert not runmeta.same_machine(meta(ZEN3), meta(ZEN4))
    # a run that predates `hardware`: model and core count
    assert runmeta.same_machine(meta(cpu_model="X", cpu_count=2), meta(cpu_model="X", cpu_count=2))
    assert not runmeta.same_machine(meta(cpu_model="X", cpu_count=2), meta(cpu_model="X", cpu_count=4))


def test_labels_name_the_family_model_where_recorded():
    assert runmeta.machine_label(meta(ZEN3, machine="vm / AMD EPYC x2")) == "vm / AMD EPYC x2 [25-1]"
    assert runmeta.machine_label({}) == "?"
    assert runmeta.hardware_label(meta(ZEN4, gpu_name="H100")) == "AMD EPYC x2 [25-17] / H100"


def test_a_history_is_grouped_by_hardware_and_a_vague_run_binds_no_two_cpus():
    history = [meta(ZEN3, host="a"), meta(ZEN4, host="b"), meta(ZEN3, host="c")]
    labels = runmeta.machine_groups(history)
    assert labels[0] == labels[2] != labels[1]
    vague = meta({"cpu_model": "AMD EPYC", "cpu_count": 2})
    grouped = runmeta.machine_groups([meta(ZEN3), vague, meta(ZEN4)])
    assert grouped[0] != grouped[2]  # Zen 4 did not join Zen 3 through the vague run


def test_a_partial_record_reads_with_placeholders():
    run = runmeta.record({"machine": "m"})
    assert run.run_id == "?" and run.machine == "m"
    assert runmeta.record(run) is run


def test_the_ceilings_measurement_reads_typed_and_old_runs_read_empty():
    typed = runmeta.record({"ceiling_tries": {"cpu": [{"gbps": 6.1, "load": 3.4}, {"gbps": "?", "load": None}]},
                            "ceiling_busy": {"cpu": "load 3.4 on 2 cores"},
                            "ceiling_reused_from": "2030-01-01T00:00:00+00:00", "adversarial_from_cache": 3})
    assert [(one.gbps, one.load) for one in typed.ceiling_tries["cpu"]] == [(6.1, 3.4), (None, None)]
    assert typed.ceiling_busy == {"cpu": "load 3.4 on 2 cores"} and typed.adversarial_from_cache == 3
    old = runmeta.record({"ceilings_gbps": {"cpu": 20.0}})
    assert old.ceiling_tries == {} and old.ceiling_busy == {} and old.ceiling_reused_from is None
    assert runmeta.record({"ceiling_tries": "junk", "ceiling_busy": [1]}).ceiling_busy == {}
