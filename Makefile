# Two commands on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-sqlite lint bench simulate browser install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install --quiet -e ".[test]"
	touch $(STAMP)

install: $(STAMP)

# The test suite's JavaScript (package.json: the official Node client, axe-core), from the lockfile.
NODE_STAMP := node_modules/.installed
$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

run: $(STAMP)
	$(BIN)/largesse serve --host $(HOST) --port $(PORT)

# Debian's chromium for the browser tests (Playwright drives it through executablePath;
# no browser is ever downloaded). Installed when missing and when we may use apt, unless
# LARGESSE_CHROMIUM names one. Without a browser the tests skip, or fail under CI=true or
# LARGESSE_REQUIRE_BROWSER=1 (tests/redemption/conftest.py).
browser:
	@[ -n "$$LARGESSE_CHROMIUM" ] || command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing Debian's chromium for the browser tests"; \
	    (apt-get install -y -q chromium >/dev/null 2>&1 || \
	     (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) || \
	    echo "warning: could not install chromium; browser tests will skip (fail under CI)"; \
	  else echo "note: chromium not installed; browser tests will skip (fail under CI)"; fi; }

# The suite runs in TEST_PROCS pytest-xdist processes (each with its own databases, servers and
# browser): most of a test's time is waiting on processes, leases and the browser, not CPU.
# On an idle machine 2 took 5.9 min, 3 took 5.4 (19 min in one process); on a VM half as fast,
# 2 took 17.7 min and 3 15.7 (docs/benchmarks.md, fifteenth pass). TEST_PROCS=0 runs it in
# this process.
TEST_PROCS ?= 3

test: $(STAMP) $(NODE_STAMP) browser
	$(BIN)/ruff check src tests bench simulation
	$(BIN)/pytest -n $(TEST_PROCS) $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench simulation

bench: $(STAMP)
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.lists --db sqlite --quick
	$(BIN)/python -m bench.lists --db postgresql --quick

# The fault simulation (docs/simulation.md): `make simulate SEED=42 STEPS=10000 DB=sqlite`.
# Without SEED a random one is drawn and printed; DB is sqlite, postgresql or both.
SEED ?=
STEPS ?= 2000
DB ?= both
simulate: $(STAMP)
	$(BIN)/python -m simulation.run $(if $(SEED),--seed $(SEED)) --steps $(STEPS) --db $(DB)

clean:
	rm -rf $(VENV) var build *.egg-info node_modules
