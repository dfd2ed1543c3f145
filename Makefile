# Two commands on a fresh machine: `make bench` and `make test`.
# Both create .venv when it is missing. TORCH_SPEC pins the CPU wheel; with a
# CUDA build of torch already in the venv (or VENV_ARGS=--system-site-packages
# on a machine that has one) nothing is reinstalled.
PYTHON     ?= python3
VENV       ?= .venv
VENV_ARGS  ?=
TORCH_SPEC ?= torch==2.13.0
EXTRAS     ?= test,numba,triton,pytensor,jax,launch
CONFIG     ?= configs/default.yaml
RESULTS    ?= $(lastword $(sort $(wildcard results/*/meta.json)))
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.installed-$(subst $(comma),_,$(EXTRAS))
comma      := ,

.PHONY: venv bench test test-all test-fast check report publish dashboard regress baseline gpu clean-venv clean-cache

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(PY) -m pip install -q --disable-pip-version-check -e ".[$(EXTRAS)]"
	@touch $@

venv: $(STAMP)

bench: $(STAMP)
	$(PY) -m harness run $(CONFIG) --report

# The count gate runs Callgrind (valgrind) and compiles its client requests
# (a C compiler; the header comes with valgrind): installed when this machine
# lets us (root, apt), else the count gate and its tests are skipped, saying why.
VALGRIND_SETUP = { command -v valgrind && command -v cc; } >/dev/null 2>&1 || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind gcc) >/dev/null 2>&1; } || \
	  echo "valgrind not installed: the count gate and its tests will be skipped"

# make test runs the tests in two parts, the second whatever the first says. First, with
# one pytest-xdist worker per core, every test not marked quiet: the strategies' checks
# against the float64 oracle (tests/impls; the Triton kernels under the interpreter) and the
# sweeps, faults and reports, none of which depends on how busy the machine is. Tests sharing
# a module's fixture share a worker (--dist loadgroup; tests/conftest.py groups them), so the
# fixture is built once. Then the tests marked quiet, alone: the gates time things, and the
# floors' tests measure bandwidth curves that a test beside them would drag down.
# Of the compiling strategies' checks (numba, PyTensor, JAX, torch.compile, Triton's
# interpreter: seconds of compiling each), make test runs a sample, the same in every run:
# each test function checks every compile family x operator x dtype and every strategy at
# least once (tests/conftest.py marks the rest exhaustive). make test-all runs the whole
# product; on a GPU, `pytest -m cuda` runs the kernels for real.
QUIET_TESTS = quiet
SAMPLED_OUT = exhaustive

# The dashboard test opens pages in Debian's headless Chromium, and launch's
# end-to-end test starts a one-node Slurm cluster (slurm-wlm, munge); install
# them when this machine lets us (root, apt), else those tests skip with their reason.
test test-all: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; } || \
	  echo "chromium not installed: the browser test of the dashboard will be skipped"
	@PATH="$$PATH:/usr/sbin" command -v slurmctld >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge) >/dev/null 2>&1; } || \
	  echo "slurm-wlm not installed: the Slurm end-to-end test of launch will be skipped"
	@$(VALGRIND_SETUP)
	$(PY) -m ruff check .
	failed=0; $(PY) -m pytest -q -n auto --dist loadgroup -m "not $(QUIET_TESTS)$(sampled)" || failed=1; \
	  $(PY) -m pytest -q -m "$(QUIET_TESTS)$(sampled)" || failed=1; exit $$failed
# make test leaves out what the sample leaves out; make test-all runs everything.
test: sampled = $(if $(SAMPLED_OUT), and not $(SAMPLED_OUT))
test-all: sampled =

# The edit-test loop: everything but the tests marked slow, one pytest-xdist
# worker per core (1,155 tests: 4 min 47 s on the 2-core 23-1 VM).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n auto --dist loadgroup -x

check: $(STAMP)
	$(PY) -m harness check $(CONFIG)

# The report of the newest run (or RESULTS="dir1 dir2"), into REPORT_OUT.
REPORT_OUT ?= report
report: $(STAMP)
	$(PY) report.py $(patsubst %/meta.json,%,$(RESULTS)) -o $(REPORT_OUT)

# docs/REPORT.md from the committed runs of the suite itself.
# docs/figures holds only the published report's figures: old ones would linger unreferenced.
# A run the fitness rule refuses (busy machine, too many unstable cases) stops it;
# ALLOW_UNFIT=1 publishes it anyway, in the report's appendix, judged nowhere.
# docs/RUNS_LEFT_OUT: unfit runs left out, named in the report's first paragraph.
publish: $(STAMP)
	$(PY) report.py $$(cat docs/RUNS) --left-out-list docs/RUNS_LEFT_OUT --pages --png-only \
	  -o docs --name REPORT --fresh-figures $(if $(ALLOW_UNFIT),,--fit-only)

dashboard: $(STAMP)
	$(PY) -m harness dashboard results -o site

# Two gates on the quick sweep. Wall time: compared against the committed
# baseline, normalised to each operator's declared reference strategy (so a
# faster or slower CI machine cancels out), failing only past REGRESS_FACTOR
# and only when the suspect case regresses again when re-measured. Counts:
# the same sweep counted under Callgrind against COUNTS_BASELINE, failing past
# COUNTS_FACTOR (see docs/REGRESSION.md and docs/COUNTING.md).
REGRESS_FACTOR ?= 2.0
COUNTS_FACTOR ?= 1.03
COUNTS_BASELINE ?= results/baseline-counts
regress: $(STAMP)
	@$(VALGRIND_SETUP)
	@rm -rf $(VENV)/regress-new
	$(PY) -m harness regress results/baseline-quick configs/quick.yaml -o $(VENV)/regress-new \
	  --factor $(REGRESS_FACTOR) --counts $(COUNTS_BASELINE) --counts-factor $(COUNTS_FACTOR) --no-progress

# Re-measure this CPU's committed baseline: results/baseline-quick holds one per
# CPU (model name, family-model, cores), and `regress` picks the one measured on
# the CPU it runs on (or measures one from the stored baselines' commit).
# It also re-counts the counts baseline of this tool-and-library version set
# (COUNTS_BASELINE holds one per set; the dumps stay out of git).
baseline: $(STAMP)
	@slug=$$($(PY) -c 'from harness.measuring.facts import cpu_slug; print(cpu_slug())') && \
	  rm -rf results/baseline-quick/$$slug && \
	  $(PY) -m harness run configs/quick.yaml -o results/baseline-quick/$$slug --no-progress
	@$(VALGRIND_SETUP)
	@set=$$($(PY) -c 'from harness.measuring import callgrind; from harness.judging import count_gate; print(count_gate.versions_slug(callgrind.count_versions()))') && \
	  rm -rf $(COUNTS_BASELINE)/$$set && \
	  $(PY) -m harness run configs/quick.yaml --instrument callgrind -o $(COUNTS_BASELINE)/$$set --no-progress && \
	  rm -rf $(COUNTS_BASELINE)/$$set/callgrind

# Everything a GPU machine should do, as steps a later call resumes: the check
# (a step per operator), the CUDA tests, the GPU_CONFIG sweep and its report. Each
# step that finishes is recorded in GPU_RESULTS/steps/<step>.json (exit status,
# seconds; its output in <step>.log), and the same command again on the same
# GPU_RESULTS skips those and resumes the sweep (--resume): nothing measured is
# lost. GPU_BUDGET (seconds, optional): this call's share of a short window; each
# step gets what is left (a check or test step cut by it is run again next call),
# and the sweep takes the plan's order, stopping before a case that would outlast
# it (`scatterbench plan GPU_CONFIG --device cuda --budget S` prints the estimate).
# GPU_RESULTS defaults to one directory per commit and GPU (named by the commit's
# date, so `make report`'s newest run stays the newest). The check's verdicts, which
# the sweep reuses, live in GPU_RESULTS/steps/cache (a few kB, ignored by git; the
# compiled kernels stay in the suite's compile cache): a second call on a bare
# machine finds them when the results directory travels whole. The exit status is
# 1 when a finished step found failures, and the step's own (130: budget or
# interrupt) when one did not finish. A CUDA build of torch must be importable
# (VENV_ARGS=--system-site-packages reuses the machine's; PY=python3 uses the
# machine's Python as it is, without a venv).
GPU_CONFIG  ?= configs/gpu.yaml
GPU_RESULTS ?= results/$(shell git log -1 --format=%cd --date=format:%Y%m%dT%H%M%S 2>/dev/null)-gpu-$(shell \
  git rev-parse --short=10 HEAD 2>/dev/null || echo unknown)-$(shell nvidia-smi --query-gpu=name --format=csv,noheader \
  2>/dev/null | head -n1 | tr -cs 'A-Za-z0-9' '-' | sed 's/-$$//' | grep . || echo nogpu)
GPU_BUDGET  ?=
GPU_TESTS   ?= -m cuda
gpu: SHELL := /bin/bash
gpu: $(if $(filter $(VENV)/bin/python,$(PY)),$(STAMP))
	@dir='$(GPU_RESULTS)'; steps="$$dir/steps"; mkdir -p "$$steps/cache" && printf 'cache/\n' > "$$steps/.gitignore" || exit 2; \
	export SCATTERBENCH_COMPILE_CACHE_DIR="$$($(PY) -c 'from harness.base import caches; print(caches.compile_cache_root())')" \
	  SCATTERBENCH_CACHE_DIR="$${SCATTERBENCH_CACHE_DIR:-$$(cd "$$steps/cache" && pwd)}"; \
	end=$$(( $$(date +%s) + $(or $(GPU_BUDGET),315360000) )); findings=0; \
	step() { name=$$1 finished=$$2 command=$$3; \
	  if [ -f "$$steps/$$name.json" ]; then echo "make gpu: $$name finished before ($$steps/$$name.json)"; \
	    grep -q '"exit": 0,' "$$steps/$$name.json" || findings=1; return 0; fi; \
	  left=$$(( end - $$(date +%s) )); \
	  if [ $$left -le 0 ]; then echo "make gpu: GPU_BUDGET spent before $$name; the same command again goes on"; return 130; fi; \
	  echo "make gpu: $$name ($(if $(GPU_BUDGET),$$left s of the budget left,no budget))"; start=$$(date +%s); export left; \
	  timeout --foreground -s TERM -k 30 $$left bash -c "$$command" 2>&1 | tee "$$steps/$$name.log"; rc=$${PIPESTATUS[0]}; \
	  if [[ " $$finished " != *" $$rc "* ]]; then \
	    echo "make gpu: $$name stopped (exit $$rc) after $$(( $$(date +%s) - start )) s; the same command again goes on: make gpu GPU_RESULTS=$$dir"; return $$rc; fi; \
	  [ $$rc = 0 ] || findings=1; \
	  printf '{"step": "%s", "exit": %d, "seconds": %d, "end": "%s"}\n' "$$name" $$rc $$(( $$(date +%s) - start )) \
	    "$$(date -u +%FT%TZ)" > "$$steps/$$name.json"; }; \
	for op in $$($(PY) -c 'import sys, yaml; print(*dict.fromkeys(b["op"] for b in yaml.safe_load(open(sys.argv[1]))["benchmarks"]))' $(GPU_CONFIG)); do \
	  step check-$$op "0 1" "$(PY) -m harness check $(GPU_CONFIG) --op $$op --no-progress" || exit $$?; done; \
	step pytest "0 1 5" "$(PY) -m pytest -q -p no:cacheprovider $(GPU_TESTS)" || exit $$?; \
	step sweep 0 "$(PY) -m harness run $(GPU_CONFIG) --grid --no-progress \
	  $$([ -f "$$dir/meta.json" ] && echo --resume || echo -o) $$dir $(if $(GPU_BUDGET),--budget \$$left)" || exit $$?; \
	step report 0 "$(PY) report.py $$dir -o $$dir/report" || exit $$?; \
	echo "make gpu: every step finished: $$dir$$([ $$findings = 0 ] || echo ' (with failures: see its steps/*.log)')"; exit $$findings

clean-venv:
	rm -rf $(VENV)

# The suite's cache folder (docs/CACHES.md): adversarial verdicts, bench()'s
# copy ceilings, JAX's and Inductor's compiled kernels. Only time is lost.
clean-cache: $(STAMP)
	@dir=$$($(PY) -c 'from harness.base import caches; print(caches.cache_root())') && \
	  compile=$$($(PY) -c 'from harness.base import caches; print(caches.compile_cache_root())') && \
	  rm -rf "$$dir" "$$compile" && echo "removed $$dir" "$$compile"
