# Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BASE   := $(VENV)/.package
# SecantusDB, the MongoDB-compatible server the tests start (see .venv-server below).
SERVER_VERSION := 0.7.0b3
SERVER_PIN     := SecantusDB==$(SERVER_VERSION)
SERVER_VENV    := .venv-server
SERVER_STAMP   := $(SERVER_VENV)/.installed-$(SERVER_VERSION)

.PHONY: venv test lint typecheck unit django6 py310 docs demo dist soak bench bench-peers bench-processes server $(SERVER_VENV) clean

venv: $(STAMP)

$(STAMP): $(BASE)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# The package alone (what the demo needs): the dev toolchain comes with $(STAMP).
$(BASE): setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e .
	touch $(BASE)

## make .venv-server: SecantusDB, the MongoDB-compatible server the tests start as a
## separate process, in a venv of its own, pinned exactly (every release is a pre-release).
## GPL-2.0-only: never a dependency of the library or of an extra; nothing imports it.
$(SERVER_VENV): $(SERVER_STAMP)

$(SERVER_STAMP):
	rm -rf $(SERVER_VENV)
	$(PYTHON) -m venv $(SERVER_VENV)
	$(SERVER_VENV)/bin/python -m pip install --quiet '$(SERVER_PIN)'
	touch $(SERVER_STAMP)

## make server: SecantusDB in the foreground for development, on 127.0.0.1:$(SERVER_PORT),
## its data kept in $(SERVER_DATA)/ (Ctrl-C stops it). Point apps, `mongosched worker` and
## the dashboard at mongodb://127.0.0.1:$(SERVER_PORT)/DATABASE.
SERVER_PORT ?= 27018
SERVER_DATA ?= .server-data

server: $(SERVER_STAMP)
	$(SERVER_VENV)/bin/secantusd-py --host 127.0.0.1 --port $(SERVER_PORT) --storage-path $(SERVER_DATA)

## make test: lint, type check, Django 6, Python 3.10, the whole test suite (soak runs excluded), the docs.
## The checks and the other Pythons' runs (each in a venv of its own) run side by side,
## each target's output kept together; the main suite runs after them, alone.
test: venv
	$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck docs django6 py310
	$(MAKE) --no-print-directory unit

lint: venv
	$(BIN)/ruff check mongosched tests bench examples
	$(BIN)/ruff format --check mongosched tests bench examples

typecheck: venv
	$(BIN)/mypy

## make unit: the whole suite but the soak runs, in TEST_PROCESSES pytest processes (each with
## its own SecantusDB server; a test file stays in one process). Most tests wait on real
## intervals or on the server rather than compute, so three processes keep 2 cores busy.
TEST_PROCESSES ?= 3
## These run by themselves afterwards: under the parallel run's load the worker processes
## they start were too slow for their timings (3 fresh-clone CI runs of 5).
ALONE := tests/processes

unit: venv $(SERVER_STAMP)
	$(BIN)/python -m pytest -m "not soak" -n $(TEST_PROCESSES) --dist loadfile --ignore=$(ALONE) $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m "not soak" $(ALONE) $(PYTEST_ARGS)

## make django6: the Django integration and the tasks backend's conformance on Django 6's
## built-in django.tasks (Django 6 needs Python 3.12), and a project on MongoDB
## (django-mongodb-backend) whose transactions jobs join (on a server with transactions).
## make py310: on Python 3.10, the oldest supported: every module imported in a fresh
## interpreter (tests/meta), the pure logic and the store contract (memory://, and pymongo
## through the wire stand-in); the rest runs on the main suite's Python (make test stays
## under 12 minutes on 2 cores).
## Each runs where that Python is installed, and says so where it is not.
django6: $(SERVER_STAMP)
	@.ci/other-python 3.12 .venv-django6 "-e .[testing] django>=6 django-mongodb-backend pytest pytest-timeout mockupdb gunicorn" \
		-W "ignore:datetime.datetime.utcnow:DeprecationWarning" tests/contrib/test_django.py tests/contrib/test_django_conformance.py \
		tests/contrib/test_django_mongodb.py

py310:
	@MONGOSCHED_TEST_SUBSTRATES=memory,wire .ci/other-python 3.10 .venv-py310 "-e .[tests]" \
		-m "not soak and not processes and not browser and not server" \
		tests/unit tests/contract tests/meta

docs: venv
	$(BIN)/sphinx-build -q -W --keep-going -b html docs docs/_build/html

## make demo: schedule jobs and watch a runner retry and complete them.
demo: $(BASE)
	$(BIN)/python examples/demo.py

## make dist: the sdist and the wheel in dist/, checked by twine.
dist: venv
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*

## make soak: the long fault-injection and process runs.
soak: venv $(SERVER_STAMP)
	$(BIN)/python -m pytest -m soak -s $(PYTEST_ARGS)

bench: venv $(SERVER_STAMP)
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/wake.py

## make bench-peers: mongosched beside Huey, Dramatiq, Celery, RQ and Procrastinate, 10,000
## no-op jobs each (BENCH_ARGS="--jobs 3000" to change): jobs/s, worker CPU per job, round
## trips per job. Makes .venv-peers; installs Debian's redis-server and postgresql when
## missing and run as root (for the benchmark only: the library needs neither).
bench-peers: venv
	$(BIN)/python bench/peers.py $(BENCH_ARGS)

## make bench-processes: a CPU-bound task with worker --processes 1 and 2.
bench-processes: venv
	$(BIN)/python bench/processes.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(SERVER_VENV) .venv-django6 .venv-py310 .venv-peers docs/_build .pytest_cache .mypy_cache .ruff_cache *.egg-info dist build
