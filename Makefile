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
# worker per core (about 1,200 tests).
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
# A run the fitness rule refuses (busy machine, or a ceiling or curve measured busy) stops it;
# ALLOW_UNFIT=1 publishes it anyway, in the report's appendix, judged nowhere.
# docs/RUNS_LEFT_OUT: unfit runs left out, named in the report's first paragraph.
publish: $(STAMP)
	$(PY) report.py $$(cat docs/RUNS) --left-out-list docs/RUNS_LEFT_OUT --pages --png-only \
	  -o docs --name REPORT --fresh-figures $(if $(ALLOW_UNFIT),,--fit-only)

dashboard: $(STAMP)
	$(PY) -m harness dashboard results -o site

# Two gates on the quick sweep. Wall time: compared against the committed
# baseline, normalised to each operator's declared reference strategy (so a
# faster or slower CI machine cancels out), failing only past the gate's factor
# and only when the suspect case regresses again when re-measured. Counts:
# the same sweep counted under Callgrind against COUNTS_BASELINE, failing past
# the count gate's factor (see docs/REGRESSION.md and docs/COUNTING.md). The
# factors are the code's (`scatterbench regress --help` quotes them);
# REGRESS_FACTOR and COUNTS_FACTOR, when set, replace them for one call.
COUNTS_BASELINE ?= results/baseline-counts
regress: $(STAMP)
	@$(VALGRIND_SETUP)
	@rm -rf $(VENV)/regress-new
	$(PY) -m harness regress results/baseline-quick configs/quick.yaml -o $(VENV)/regress-new \
	  $(if $(REGRESS_FACTOR),--factor $(REGRESS_FACTOR)) --counts $(COUNTS_BASELINE) \
	  $(if $(COUNTS_FACTOR),--counts-factor $(COUNTS_FACTOR)) --no-progress

# Re-measure this machine's committed baselines (`scatterbench baseline`): this
# CPU's in results/baseline-quick (one per CPU: model name, family-model, cores;
# `regress` picks the one measured on the CPU it runs on, or measures one from
# the stored baselines' commit), and this tool-and-library version set's in
# COUNTS_BASELINE (one per set; the Callgrind dumps stay out of git).
baseline: $(STAMP)
	@$(VALGRIND_SETUP)
	$(PY) -m harness baseline --counts $(COUNTS_BASELINE)

# Everything a GPU machine should do, as steps a later call resumes
# (`scatterbench gpu`, docs/GPU.md): the check (every operator), the CUDA
# tests, the sweep and its report, each recorded in GPU_RESULTS/steps when it
# finishes. GPU_CONFIG (the config), GPU_RESULTS (-o: the directory),
# GPU_BUDGET (--budget: this call's seconds) and GPU_TESTS (--tests: pytest's
# arguments) are passed on when set; unset, the command's defaults hold
# (`scatterbench gpu --help`). Exit 1 when a finished step found failures,
# 130 when the budget or an interrupt stopped a step: the same command again
# goes on. A lease that ends first: commit GPU_RESULTS whole (its steps/,
# with the check's journal and the compiled kernels in steps/cache, and the
# sweep's rows), and `make gpu GPU_RESULTS=<it>` on the next lease resumes
# where this one stopped. A CUDA build of torch must be importable
# (VENV_ARGS=--system-site-packages reuses the machine's; PY=python3 uses the
# machine's Python as it is, without a venv). configs/gpu.yaml is planned to fit
# one 15-minute lease; GPU_CONFIG=configs/gpu-more.yaml is its larger points, a
# second lease, with SCATTERBENCH_CACHE_DIR=<gpu.yaml's run>/steps/cache so its
# check reads that run's verdicts (docs/GPU.md, the GPU plan).
gpu: $(if $(filter $(VENV)/bin/python,$(PY)),$(STAMP))
	$(PY) -m harness gpu $(GPU_CONFIG) $(if $(GPU_RESULTS),-o $(GPU_RESULTS)) $(if $(GPU_BUDGET),--budget $(GPU_BUDGET)) $(if $(GPU_TESTS),--tests='$(GPU_TESTS)')

clean-venv:
	rm -rf $(VENV)

# The suite's cache folder (docs/CACHES.md): adversarial verdicts, bench()'s
# copy ceilings, JAX's and Inductor's compiled kernels. Only time is lost.
clean-cache: $(STAMP)
	$(PY) -m harness cache clear
