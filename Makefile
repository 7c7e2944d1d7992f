# Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv test lint typecheck unit docs demo soak bench clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make test: lint, type check, the whole test suite (soak runs excluded), the docs.
test: venv lint typecheck unit docs

lint: venv
	$(BIN)/ruff check mongosched tests bench examples

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/python -m pytest -m "not soak" $(PYTEST_ARGS)

docs: venv
	$(BIN)/sphinx-build -q -W --keep-going -b html docs docs/_build/html

## make demo: schedule jobs and watch a runner retry and complete them.
demo: venv
	$(BIN)/python examples/demo.py

## make soak: the long fault-injection and process runs.
soak: venv
	$(BIN)/python -m pytest -m soak -s $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/throughput.py

clean:
	rm -rf $(VENV) docs/_build .pytest_cache .mypy_cache .ruff_cache *.egg-info
