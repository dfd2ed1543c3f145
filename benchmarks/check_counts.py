"""What `check` of a config costs, counted per operator on the CPU, in this
checkout or in another commit's tree:
``python benchmarks/check_counts.py [--tree DIR] [--config configs/gpu.yaml] [--dtypes float32,float16] [-o OUT.json]``.

Issue 58: on an H200 the check of gpu.yaml took 11 minutes (a7e0d31,
../shared/measurements/gpu-h200-2026-12-04) and no GPU has measured it
since its fixes. What a GPU would spend its seconds on can still be
counted here, for the code before and after: the check's items run as its
workers run them (``check.run_one_check``) on the config's strategies that
a GPU runs (torch, Triton, JAX), with ``devices: [cpu]`` and Triton under
its interpreter. Counted:

- the float64 oracle's runs, forward and gradient (a wrapper of each
  operator's oracles: older trees count none themselves);
- torch.compile compilations, JAX traces and XLA compiles, and launches
  through Triton's autotuner (this checkout's ``work_counts`` hooks, loaded
  on their own, so an older tree is counted by the same rules);
- the autotuned kernels each item entered: under the interpreter a kernel
  has one config and Triton 3.9 looks no key up, but a check that forgets
  each item's tuned sizes (before 2026-12-05) made each such entry one
  autotune benchmark on Triton 3.6, the GPU machine's version.

``--tree DIR``: another commit's checkout (``git worktree add DIR a7e0d31``);
its harness and impls are imported instead of this one's. Not a test: the
check's CPU seconds are printed beside the counts, but only the counts carry
over to a GPU (harness/measuring/plan.py reads them so).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
GPU_BACKENDS = {"torch", "triton", "jax"}
LIBRARY_COUNTS = ("torch_compiles", "torch_compiles_s", "jax_traces", "jax_compiles", "jax_compiles_s",
                  "triton_autotuner_runs")


def _work_counts():
    """This checkout's work_counts module (standard library only), loaded on its own."""
    spec = importlib.util.spec_from_file_location("check_counts_work_counts",
                                                  HERE / "harness" / "measuring" / "work_counts.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", default=str(HERE), help="the checkout whose check is counted (default: this one)")
    parser.add_argument("--config", default=str(HERE / "configs" / "gpu.yaml"))
    parser.add_argument("--dtypes", default="float32,float16")
    parser.add_argument("-o", "--out", help="write the counts per operator as JSON")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRITON_INTERPRET", "1")
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))  # before the editable install's finder, which comes last
    os.chdir(tree)
    counter = _work_counts()

    import yaml
    from harness.base.config import expand, load_config
    from harness.measuring import check
    from impls.registry import OPERATORS, get_operator
    from triton.runtime.autotuner import Autotuner

    counts: Counter = Counter()
    now = {"op": None}
    for name in list(OPERATORS):
        op = get_operator(name)

        def oracle(inputs, params, _run=op.oracle, _op=name):
            counts[(_op, "oracle_runs")] += 1
            return _run(inputs, params)
        object.__setattr__(op, "oracle", oracle)
        if op.gradient is not None:
            def gradient(inputs, grad, params, _run=op.gradient.oracle, _op=name):
                counts[(_op, "gradient_oracle_runs")] += 1
                return _run(inputs, grad, params)
            object.__setattr__(op.gradient, "oracle", gradient)
    entered: set = set()
    run = Autotuner.run

    def entering(self, *run_args, **kwargs):
        entered.add(id(self))
        return run(self, *run_args, **kwargs)
    Autotuner.run = entering
    for library in ("torch", "jax", "triton"):
        counter.install(library)

    raw = yaml.safe_load(Path(args.config).read_text())
    raw.update(devices=["cpu"], dtypes=args.dtypes.split(","))
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        yaml.safe_dump(raw, handle)
    config = load_config(handle.name)
    os.unlink(handle.name)
    cases = [case for case in expand(config)
             if get_operator(case.op).strategies[case.strategy].backend in GPU_BACKENDS]
    items = [item for item in check.check_plan(config, cases) if not item.skip and not item.gradcheck]
    print(f"{check.__file__}: {len(items)} items", flush=True)
    result = {}
    for op in dict.fromkeys(item.strategy.op for item in items):
        mine = [item for item in items if item.strategy.op == op]
        now["op"] = op
        before, began, statuses = counter.snapshot(), time.perf_counter(), Counter()
        for item in mine:
            entered.clear()
            statuses[check.run_one_check(item, 0).status] += 1
            counts[(op, "autotuned_kernels_entered")] += len(entered)
        library = counter.since(before)
        result[op] = {"items": len(mine), "triton_items": sum(i.strategy.backend == "triton" for i in mine),
                      "cpu_seconds": round(time.perf_counter() - began, 1), "statuses": dict(statuses),
                      **{key: counts[(op, key)] for key in ("oracle_runs", "gradient_oracle_runs",
                                                            "autotuned_kernels_entered")},
                      **{key: library[key] for key in LIBRARY_COUNTS}}
        print(op, json.dumps(result[op]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
