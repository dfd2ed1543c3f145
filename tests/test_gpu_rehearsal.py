"""benchmarks/gpu_rehearsal.py: gpu.yaml rehearsed on the CPU, whose phase
seconds harness/measuring/plan.py's per-case defaults are drawn from."""

import yaml

from benchmarks import gpu_rehearsal
from harness.base.config import expand, parse_config
from impls.registry import get_operator
from tests.helpers import ROOT


def test_the_rehearsal_is_gpu_yaml_on_the_cpu_with_every_native_cpu_strategy():
    gpu = yaml.safe_load((ROOT / "configs" / "gpu.yaml").read_text())
    for size in gpu_rehearsal.SIZES:
        config = gpu_rehearsal.rehearsal_config(size)
        assert config["devices"] == ["cpu"] and config["dtypes"] == gpu["dtypes"]
        assert config["timing"] == gpu["timing"]
        assert [(b["op"], b["modes"]) for b in config["benchmarks"]] == [
            (b["op"], b.get("modes", ["forward"])) for b in gpu["benchmarks"]]
        cases = expand(parse_config(config, "<test>"))
        for bench in config["benchmarks"]:
            strategies = get_operator(bench["op"]).strategies
            ran = {case.strategy for case in cases if case.op == bench["op"] and dict(case.params) == bench["params"]}
            native = {name for name, strat in strategies.items() if "cpu" in strat.devices
                      and not strat.interpreted_on("cpu") and not strat.quick_check}
            # gpu.yaml's two points of an operator may shrink to one: its cases are then both's
            same = [other for mine, other in zip(config["benchmarks"], gpu["benchmarks"])
                    if mine["op"] == bench["op"] and mine["params"] == bench["params"]]
            expected = set().union(*(native - set(other.get("exclude", [])) for other in same))
            assert ran == expected, bench["op"]
        # every array is small: no size of gpu.yaml's is left
        assert all(max(dict(case.params).get(key, 0) for key in ("H", "W", "L")) <= 512 for case in cases)
