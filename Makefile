# energon-arrow developer entry points. Everything installs into .venv so a fresh machine needs only python3.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= /tmp/energon-arrow-demo

.PHONY: venv install install-test demo test lint bench clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first and pinned: anything else could pull a multi-GB CUDA build.
	$(BIN)/pip install -q torch==2.13.0

install: $(BIN)/python
	$(BIN)/pip install -q -e .

install-test: $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'

demo: install
	$(BIN)/python -m energon_arrow demo --workdir $(DEMO_DIR)

test: install-test
	$(BIN)/ruff check energon_arrow tests benchmarks
	$(BIN)/python -m pytest -q tests

lint: install-test
	$(BIN)/ruff check energon_arrow tests benchmarks
	$(BIN)/ruff format --check energon_arrow tests benchmarks

bench: install-test
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks.run all

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
