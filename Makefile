# Every target creates .venv when missing and installs the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv demo test faults mutate bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,ray]'
	touch $(STAMP)

venv: $(STAMP)

## make demo: three dynamic-sampling rollout steps on the embedded default (in-process ShopSim, heuristic policy)
demo: $(STAMP)
	$(VENV)/bin/shopsimrl rollout --steps 3 --name demo

## make test: the whole test suite but the fault matrix (real processes, a few minutes: make faults); the ray extra is installed, so the Ray helper's tests run too
test: $(STAMP)
	$(PY) -m pytest -q --ignore=tests/faults

## make faults: the fault matrix (env server killed, stalled, restarted; signals; full disk; ...)
faults: $(STAMP)
	$(PY) -m pytest -q tests/faults

## make mutate: break each dynamic-sampling rule in a temporary copy; tests/sampling must fail every time
mutate: $(STAMP)
	$(PY) scripts/mutate.py

## make bench: performance measurements (results go to benchmarks/results/)
bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
