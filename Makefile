# Every target creates .venv when missing and installs the project into it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: venv demo test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,ray]'
	touch $(STAMP)

venv: $(STAMP)

## make demo: three dynamic-sampling rollout steps on the embedded default (in-process ShopSim, heuristic policy)
demo: $(STAMP)
	$(VENV)/bin/shopsimrl rollout --steps 3 --name demo

## make test: the whole test suite (the ray extra is installed, so the Ray helper's tests run too)
test: $(STAMP)
	$(PY) -m pytest -q

## make bench: performance measurements (results go to benchmarks/results/)
bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
