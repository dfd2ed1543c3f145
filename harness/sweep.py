"""Running a sweep: every case checked against the oracle, then timed, then
recorded; a failing case is a row with its status, and the sweep goes on.

``execute_case`` is the whole life of one case; it runs in-process, or in a
child process per case under ``--isolate`` (a crash or a hang in native code
then costs only that case).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness import memory, stats, timing
from harness.check import Reference, describe_error, reference
from harness.config import Case, Config
from impls.common import Verdict, to_numpy
from impls.registry import NotApplicable, get_operator

ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
# Fraction of the free memory a case may plan to use before it is skipped.
MEMORY_HEADROOM = 0.8


@dataclass
class CaseResult:
    row: dict
    samples_s: list


def estimated_bytes(case: Case) -> int:
    """Inputs + outputs at the case's dtype, the strategy's temporaries, and the
    float64 reference copy the check holds beside them."""
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    traffic = op.bytes_moved(case.params_dict, ITEMSIZE[case.dtype])
    reference_bytes = op.bytes_moved(case.params_dict, 8)
    return int(traffic * (1 + strat.temp_factor) + reference_bytes)


def free_bytes(device: str) -> int:
    if device == "cuda":
        import torch

        free, _total = torch.cuda.mem_get_info()
        return int(free)
    import psutil

    return int(psutil.virtual_memory().available)


def memory_guard(case: Case) -> str | None:
    needed, free = estimated_bytes(case), free_bytes(case.device)
    if needed > MEMORY_HEADROOM * free:
        return (f"needs about {needed / 2**30:.2f} GiB on {case.device}, "
                f"{free / 2**30:.2f} GiB free: skipped before allocating")
    return None


def base_row(case: Case, run_id: str, ceiling_gbps: float) -> dict:
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    nbytes = op.bytes_moved(case.params_dict, ITEMSIZE[case.dtype], strat.returns)
    return {"run_id": run_id, "case_id": case.case_id, "op": case.op, "strategy": case.strategy,
            "backend": strat.backend, "device": case.device, "dtype": case.dtype,
            "params": case.params_json, "bytes": nbytes, "ceiling_gbps": ceiling_gbps,
            "floor_s": stats.floor_s(nbytes, ceiling_gbps), "source": strat.source,
            "status": "", "message": ""}


def execute_case(case: Case, config: Config, run_id: str, ceiling_gbps: float,
                 ref: Reference | None = None, flush=None) -> CaseResult:
    """Checks, then times one case. Never raises for a strategy's fault."""
    row = base_row(case, run_id, ceiling_gbps)
    op = get_operator(case.op)
    strat = op.strategies[case.strategy]
    params = case.params_dict

    def finish(status: str, message: str = "", samples=()) -> CaseResult:
        row.update(status=status, message=message)
        return CaseResult(row, list(samples))

    unavailable = strat.available()
    if unavailable:
        return finish("skipped", unavailable)
    too_big = memory_guard(case)
    if too_big:
        return finish("skipped", too_big)
    try:
        with timing.deadline(config.timing.timeout_s):
            if ref is None:
                ref = reference(case.op, params, case.dtype, "random", config.seed)
            backend_inputs = op.to_backend(ref.inputs, strat.backend, case.device, case.dtype)
            t0 = time.perf_counter()
            run = strat.prepare(backend_inputs, params)
            if case.device == "cuda":
                import torch

                torch.cuda.synchronize()
            row["setup_s"] = time.perf_counter() - t0
            out, row["peak_mem_bytes"] = memory.call_with_peak(run, case.device)
            verdict: Verdict = op.compare(to_numpy(out), ref.expected, ref.inputs, case.dtype, strat)
            del out
            row.update(max_abs_err=verdict.max_abs_err, rel_err=verdict.rel_err)
            if verdict.status == "mismatch":
                return finish("mismatch", verdict.message)
            samples = timing.time_call(run, case.device, config.timing, flush)
    except NotApplicable as reason:
        return finish("skipped", str(reason))
    except timing.CaseTimeout as error:
        return finish("timeout", str(error))
    except MemoryError:
        return finish("error", "out of memory (host)")
    except Exception as error:
        if type(error).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError, without importing torch
            _release_cuda()
            return finish("error", "out of memory: " + str(error).splitlines()[0])
        return finish("error", describe_error(error))
    summary = stats.summarize(samples)
    row.update(median_s=summary.median_s, iqr_s=summary.iqr_s, min_s=summary.min_s,
               mean_s=summary.mean_s, n_samples=summary.n_samples,
               gbps=stats.gbps(row["bytes"], summary.median_s),
               pct_of_ceiling=stats.pct_of_ceiling(row["bytes"], summary.median_s, ceiling_gbps))
    return finish(verdict.status, verdict.message, samples)


def _release_cuda() -> None:
    try:
        import gc

        import torch

        gc.collect()
        torch.cuda.empty_cache()
    except Exception:
        pass


# ------------------------------------------------------------------ isolation
def execute_isolated(case: Case, config: Config, run_id: str, ceiling_gbps: float) -> CaseResult:
    """Runs ``execute_case`` in a fresh interpreter; a crash or hang costs only this case."""
    request = {"case": [case.op, case.strategy, case.device, case.dtype, case.params_dict],
               "config": config.model_dump(), "run_id": run_id, "ceiling_gbps": ceiling_gbps}
    # The child's own deadline fires first; this one catches a native hang.
    limit = config.timing.timeout_s + 60
    try:
        child = subprocess.run([sys.executable, "-m", "harness", "_case"], input=json.dumps(request),
                               capture_output=True, text=True, timeout=limit,
                               env=dict(os.environ, PYTHONUNBUFFERED="1"))
    except subprocess.TimeoutExpired:
        result = CaseResult(base_row(case, run_id, ceiling_gbps), [])
        result.row.update(status="timeout", message=f"isolated case killed after {limit:g} s")
        return result
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        result = CaseResult(base_row(case, run_id, ceiling_gbps), [])
        reason = (f"killed by signal {-child.returncode}" if child.returncode < 0
                  else f"exited with status {child.returncode}")
        tail = (child.stderr.strip().splitlines() or [""])[-1][:300]
        result.row.update(status="error", message=f"isolated case {reason}" + (f": {tail}" if tail else ""))
        return result
    answer = json.loads(lines[-1])
    return CaseResult(answer["row"], answer["samples_s"])


def child_main(stdin_text: str) -> None:
    """Entry point of ``python -m harness _case``: one case from JSON, row to stdout."""
    from harness.config import parse_config
    from harness.env import apply_threads

    request = json.loads(stdin_text)
    config = parse_config(request["config"], "<isolated case>")
    apply_threads(config.threads)
    op, strategy, device, dtype, params = request["case"]
    case = Case(op, strategy, device, dtype, tuple(sorted(params.items())))
    result = execute_case(case, config, request["run_id"], request["ceiling_gbps"])
    clean = {key: (None if isinstance(value, float) and math.isnan(value) else value)
             for key, value in result.row.items()}
    print(json.dumps({"row": clean, "samples_s": result.samples_s}), flush=True)


# ---------------------------------------------------------------------- sweep
def run_sweep(cases: list[Case], config: Config, writer, run_id: str, ceilings: dict,
              isolate: bool = False, on_case=None) -> list[dict]:
    """Runs ``cases`` in order, appending each finished case to ``writer``."""
    rows = []
    current_group, ref, flush = None, None, None
    for case in cases:
        if on_case:
            on_case(case, "start")
        ceiling = ceilings.get(case.device, math.nan)
        if isolate:
            result = execute_isolated(case, config, run_id, ceiling)
        else:
            if case.group != current_group:
                current_group, ref = case.group, None  # let the previous inputs go first
                try:
                    if memory_guard(case) is None:
                        ref = reference(case.op, case.params_dict, case.dtype, "random", config.seed)
                except MemoryError:
                    ref = None
            if case.device == "cuda" and flush is None:
                flush = timing.CudaFlush()
            result = execute_case(case, config, run_id, ceiling, ref, flush)
        writer.append(result.row, result.samples_s)
        rows.append(result.row)
        if on_case:
            on_case(case, result.row)
    return rows


def measure_ceilings(devices) -> dict:
    return {device: timing.copy_ceiling_gbps(device) for device in sorted(set(devices))}


def measure_fresh_writes(devices) -> dict:
    """Fresh-output write bandwidth per CPU allocator (see timing.fresh_write_gbps);
    empty when no case runs on the CPU."""
    if "cpu" not in set(devices):
        return {}
    return {allocator: timing.fresh_write_gbps(allocator) for allocator in ("numpy", "torch")}


def new_run_id(config_name: str) -> str:
    import secrets
    import socket

    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    host = "".join(ch for ch in socket.gethostname() if ch.isalnum() or ch in "-_")[:20] or "host"
    return f"{stamp}-{host}-{config_name}-{secrets.token_hex(2)}"


def default_out_dir(run_id: str) -> Path:
    return Path("results") / run_id
