# ringsim: `make demo` sets up .venv/ and runs the main simulation; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ringsim-installed

.PHONY: setup demo test test-thorough lint bench book lab clean

$(STAMP): pyproject.toml requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/ringsim demo --plot results/demo.png

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup lint
	$(BIN)/python -m pytest -q

test-thorough: setup
	HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python benchmarks/bench_numerics.py
	$(BIN)/python benchmarks/bench_timer.py

clean:
	rm -rf $(VENV) book/_build .pytest_cache .hypothesis
