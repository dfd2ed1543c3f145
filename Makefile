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

.PHONY: venv bench test test-fast check report publish dashboard regress baseline gpu clean-venv clean-cache

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

# The dashboard test opens pages in Debian's headless Chromium, and launch's
# end-to-end test starts a one-node Slurm cluster (slurm-wlm, munge); install
# them when this machine lets us (root, apt), else those tests skip with their reason.
test: $(STAMP)
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1; } || \
	  echo "chromium not installed: the browser test of the dashboard will be skipped"
	@PATH="$$PATH:/usr/sbin" command -v slurmctld >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurm-wlm munge) >/dev/null 2>&1; } || \
	  echo "slurm-wlm not installed: the Slurm end-to-end test of launch will be skipped"
	@$(VALGRIND_SETUP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q

# The edit-test loop: everything but the tests marked slow, one pytest-xdist
# worker per core (on the 2-core VM: 59 s against 94 s in one process). CI's
# `make test` stays in one process: its gate tests time things.
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" -n auto -x

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
	$(PY) report.py $$(cat docs/RUNS) --left-out-list docs/RUNS_LEFT_OUT --pages \
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

# Everything a GPU machine should do, in one command: the check on the device,
# the CUDA tests, the gpu.yaml sweep and its report, all under results/.
# A CUDA build of torch must be importable (VENV_ARGS=--system-site-packages
# reuses the machine's).
gpu: $(STAMP)
	$(PY) -m harness check configs/gpu.yaml --no-progress
	$(PY) -m pytest -q -m cuda
	$(PY) -m harness run configs/gpu.yaml --report --grid

clean-venv:
	rm -rf $(VENV)

# The suite's cache folder (docs/CACHES.md): adversarial verdicts, bench()'s
# copy ceilings, JAX's and Inductor's compiled kernels. Only time is lost.
clean-cache: $(STAMP)
	@dir=$$($(PY) -c 'from harness.base import caches; print(caches.cache_root())') && \
	  compile=$$($(PY) -c 'from harness.base import caches; print(caches.compile_cache_root())') && \
	  rm -rf "$$dir" "$$compile" && echo "removed $$dir" "$$compile"
