# pev: the two commands of the Quickstart are `make demo` and `make test`.
# Both create .venv on first use; nothing needs installing by hand but Python 3.11+ and make.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
# `make test` installs every extra; `make demo` and `make bench` only what they need.
TEST_EXTRAS  := dev,sim,llm,bench,postgres,ray,mcp,web,otel
DEMO_EXTRAS  := sim
BENCH_EXTRAS := bench,sim,postgres,ray,web
TEST_STAMP   := $(VENV)/.installed-test
DEMO_STAMP   := $(VENV)/.installed-demo
BENCH_STAMP  := $(VENV)/.installed-bench

.PHONY: demo test lint typecheck pytest soak bench bench-check llm-smoke clean help

help:  ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

$(BIN)/python:
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "pev needs Python 3.11 or newer")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(TEST_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[$(TEST_EXTRAS)]"
	@# The viewer's browser tests drive Debian's chromium (Playwright's own download is not used).
	@test -x /usr/bin/chromium || { [ "$$(id -u)" = 0 ] && export DEBIAN_FRONTEND=noninteractive \
		&& { apt-get install -y -q --no-install-recommends chromium \
		|| { apt-get update -q && apt-get install -y -q --no-install-recommends chromium; }; }; } \
		|| echo "no /usr/bin/chromium: the viewer's browser tests are skipped; sudo apt-get install -y chromium"
	touch $@ $(DEMO_STAMP) $(BENCH_STAMP)

$(DEMO_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[$(DEMO_EXTRAS)]"
	touch $@

$(BENCH_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[$(BENCH_EXTRAS)]"
	touch $@

demo: $(DEMO_STAMP)  ## Run the embedded demo (written to the default ledger; PEV_DB overrides).
	$(BIN)/pev demo

test: $(TEST_STAMP) lint typecheck pytest  ## ruff, mypy --strict and the whole pytest suite.

lint: $(TEST_STAMP)
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/ruff check src tests bench examples

typecheck: $(TEST_STAMP)
	$(BIN)/mypy --strict src

pytest: $(TEST_STAMP)
	$(BIN)/pytest --cov --cov-report=term --cov-report=xml -p no:cacheprovider --durations=15

# Longer fault sweeps than `make test` runs: the fleet under random SIGKILLs on five more seeds,
# the effects properties at many more examples, the whole fault suite with its safety check, a
# private PostgreSQL server restarted, crashed and cut under a fleet, a frozen Ray driver whose
# node is removed, and many processes opening one new SQLite ledger at once.
soak: $(TEST_STAMP)  ## Longer fault sweeps (minutes; not part of `make test`): run before resolving an issue.
	for seed in 12 13 14 15 16; do \
		PEV_FLEET_SEED=$$seed $(BIN)/pytest -p no:cacheprovider -q tests/engine/test_fleet.py || exit 1; \
	done
	PEV_SOAK_FACTOR=10 $(BIN)/pytest -p no:cacheprovider -q tests/ledger/test_properties_effects.py \
		tests/engine/test_effects_once.py tests/engine/test_effects_processes.py
	$(BIN)/python bench/bench_faults.py --check
	PEV_SOAK_FACTOR=4 $(BIN)/pytest -p no:cacheprovider -q tests/stores/test_postgres_restarts.py
	PEV_SOAK_FACTOR=5 $(BIN)/pytest -p no:cacheprovider -q tests/cluster/test_driver_faults.py -k frozen
	PEV_SOAK_FACTOR=10 $(BIN)/pytest -p no:cacheprovider -q tests/stores/test_sqlite_opening.py

bench: $(BENCH_STAMP)  ## Kernel, ledger, engine, LangGraph, fault-suite and scale benchmarks; writes docs/benchmarks.md and README.md.
	$(BIN)/python bench/bench_foundation.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_stores.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_engine.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_langgraph.py --write docs/benchmarks.md --readme README.md
	$(BIN)/python bench/bench_agents.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_faults.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_scale.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_scale.py --sweep --write docs/benchmarks.md
	$(BIN)/python bench/bench_workers.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_store_faults.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_ray.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_watch.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_tools.py --write docs/benchmarks.md
	$(BIN)/python bench/bench_viewer.py --write docs/benchmarks.md

bench-check: $(BENCH_STAMP)  ## A short run of the agents bench: fails if a ratio regressed >20% from docs/benchmarks.md.
	$(BIN)/python bench/bench_agents.py --check docs/benchmarks.md

llm-smoke: $(TEST_STAMP)  ## SmolLM2-135M served by llama-cpp-python on 127.0.0.1: the LLM adapter and planner against a real server (builds llama-cpp-python: minutes; not part of `make test`).
	bash scripts/llm_smoke.sh

clean:  ## Remove the virtual environment and caches.
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis .coverage coverage.xml
