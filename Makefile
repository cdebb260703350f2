# ringsim: `make demo` sets up .venv/ and runs the main simulation; `make test` runs every test.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ringsim-installed
# Tests run in parallel, one pytest-xdist worker per core (at most 4); tests/conftest.py keeps
# the tests that start rank processes in one group, run one at a time (--dist loadgroup).
JOBS   ?= $(shell $(PYTHON) -c "import os; print(max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count() or 1)))")
PYTEST := $(BIN)/python -m pytest -q -n $(JOBS) --dist loadgroup
RUNS   ?= 2

.PHONY: setup browser demo test test-fast test-busy test-thorough lint bench book lab clean

$(STAMP): pyproject.toml requirements-dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(STAMP)

setup: $(STAMP)

# The book's test opens the pages in headless Chromium (Debian's package).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "make test needs Chromium for the book test: sudo apt-get install chromium" >&2; exit 1; fi; }

demo: setup
	$(BIN)/ringsim demo --plot results/demo.png

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

test: setup lint browser
	$(PYTEST)

# the developer's loop: everything but the slow tests (ranks, the book, the Triton compile)
test-fast: setup
	$(PYTEST) -m "not slow"

# the whole suite RUNS times beside two CPU-bound processes: pass/fail, times, load average
test-busy: setup browser
	$(BIN)/python benchmarks/busy_suite.py --runs $(RUNS) -- -n $(JOBS) --dist loadgroup

test-thorough: setup browser
	HYPOTHESIS_PROFILE=thorough $(PYTEST)

book: setup
	$(BIN)/python book/build.py

# JupyterLab is only for reading the lessons interactively; tests and the book don't need it.
# jupytext (installed with the book's tools) is made the default viewer of .py files, so the
# lessons open as notebooks; the setting lives in the venv (overrides.json), not your home.
LAB_SETTINGS := $(VENV)/share/jupyter/lab/settings
lab: setup
	$(BIN)/python -m pip install --quiet jupyterlab==4.6.6 jupytext
	mkdir -p $(LAB_SETTINGS)
	printf '%s\n' '{"@jupyterlab/docmanager-extension:plugin": {"defaultViewers": {"python": "Jupytext Notebook"}}}' > $(LAB_SETTINGS)/overrides.json
	$(BIN)/jupyter lab lessons/

bench: setup
	$(BIN)/python benchmarks/bench_numerics.py
	$(BIN)/python benchmarks/bench_timer.py

clean:
	rm -rf $(VENV) book/_build .pytest_cache .hypothesis
