# Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv test lint typecheck unit django6 docs demo soak bench clean

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

## make test: lint, type check, Django 6, the whole test suite (soak runs excluded), the docs.
test: venv lint typecheck django6 unit docs

lint: venv
	$(BIN)/ruff check mongosched tests bench examples

typecheck: venv
	$(BIN)/mypy

unit: venv
	$(BIN)/python -m pytest -m "not soak" $(PYTEST_ARGS)

## make django6: the Django integration against Django 6's built-in django.tasks. Django 6
## needs Python 3.12: run where one is installed (on PATH or under pyenv), else say so.
django6:
	@py=""; for p in python3.12 $$(pyenv root 2>/dev/null)/versions/3.12*/bin/python3.12; do \
		if $$p -c "import sys" 2>/dev/null; then py=$$p; break; fi; done; \
	if [ -z "$$py" ]; then echo "django6: no Python 3.12 on this machine; Django 6 not tested"; exit 0; fi; \
	if [ ! -f .venv-django6/.installed ]; then \
		$$py -m venv .venv-django6 && \
		.venv-django6/bin/python -m pip install --quiet -e '.[testing]' 'django>=6' pytest pytest-timeout && \
		touch .venv-django6/.installed; fi; \
	.venv-django6/bin/python -m pytest -q -p no:cacheprovider \
		-W "ignore:datetime.datetime.utcnow:DeprecationWarning" tests/test_django.py

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
	rm -rf $(VENV) .venv-django6 docs/_build .pytest_cache .mypy_cache .ruff_cache *.egg-info
