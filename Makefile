# Two commands on a fresh machine: `make bench` and `make test`.
# Both create .venv when it is missing. TORCH_SPEC pins the CPU wheel; with a
# CUDA build of torch already in the venv (or VENV_ARGS=--system-site-packages
# on a machine that has one) nothing is reinstalled.
PYTHON     ?= python3
VENV       ?= .venv
VENV_ARGS  ?=
TORCH_SPEC ?= torch==2.13.0
EXTRAS     ?= test,numba,triton,pytensor
CONFIG     ?= configs/default.yaml
RESULTS    ?= $(lastword $(sort $(wildcard results/*/meta.json)))
PY         := $(VENV)/bin/python
STAMP      := $(VENV)/.installed-$(subst $(comma),_,$(EXTRAS))
comma      := ,

.PHONY: venv bench test check report publish dashboard regress clean-venv

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV_ARGS) $(VENV)
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q --disable-pip-version-check "$(TORCH_SPEC)"
	$(PY) -m pip install -q --disable-pip-version-check -e ".[$(EXTRAS)]"
	@touch $@

venv: $(STAMP)

bench: $(STAMP)
	$(PY) -m harness run $(CONFIG) --report

test: $(STAMP)
	$(PY) -m pytest -q

check: $(STAMP)
	$(PY) -m harness check $(CONFIG)

# The report of the newest run (or RESULTS="dir1 dir2"), into REPORT_OUT.
REPORT_OUT ?= report
report: $(STAMP)
	$(PY) report.py $(patsubst %/meta.json,%,$(RESULTS)) -o $(REPORT_OUT)

# docs/REPORT.md from the committed runs of the suite itself.
publish: $(STAMP)
	$(PY) report.py $$(cat docs/RUNS) -o docs --name REPORT

dashboard: $(STAMP)
	$(PY) -m harness dashboard results -o site

# A quick sweep compared, in normalised mode, against the committed baseline.
regress: $(STAMP)
	$(PY) -m harness run configs/quick.yaml -o $(VENV)/regress-new --no-progress
	$(PY) -m harness compare results/baseline-quick $(VENV)/regress-new --relative-to-baseline --factor 2.0; \
	  status=$$?; rm -rf $(VENV)/regress-new; exit $$status

clean-venv:
	rm -rf $(VENV)
