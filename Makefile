# The project's commands. `make demo` and `make test` set up everything they need
# (a local virtualenv in .venv) on a fresh machine with Python 3.11+, make and git.

SHELL := /bin/bash
PYTHON ?= $(shell for p in python3.13 python3.12 python3.11 python3; do \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then command -v $$p; break; fi; done)
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PROJECTS := python $(patsubst %/,%,$(sort $(dir $(wildcard conformance/pyproject.toml catalog/pyproject.toml envs/*/pyproject.toml))))
STAMP := $(VENV)/.installed
export GRPC_VERBOSITY ?= ERROR
# Codex CLI and OpenCode (npm packages, pinned) in a local prefix for the agent-harness tests
# and runs (docs/harnesses.md): `openenv harness run --agent codex|opencode` finds them in
# .harness-tools/node_modules/.bin/.
HARNESS_TOOLS := .harness-tools
HARNESS_STAMP := $(HARNESS_TOOLS)/.installed
CODEX_VERSION := 0.169.0
OPENCODE_VERSION := 1.18.33

.PHONY: venv demo test test-stress check-core-install generate lint typecheck fmt bench clean

venv: $(STAMP) $(HARNESS_STAMP)

$(STAMP): $(foreach p,$(PROJECTS),$(p)/pyproject.toml) Makefile
	@test -n "$(PYTHON)" || { echo "error: Python 3.11+ is required (python3.11, python3.12 or python3.13 on PATH)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -U pip
	# A CPU-only torch for the training integrations' tests (protoenv[trl,rl]); pinned, since a
	# plain resolve of torch may pull a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e 'python[dev]' $(foreach p,$(filter-out python catalog,$(PROJECTS)),-e $(p)) -e 'catalog[all]'
	@touch $@

$(HARNESS_STAMP): Makefile
	@if command -v npm >/dev/null 2>&1; then \
	  npm install --prefix $(HARNESS_TOOLS) --no-audit --no-fund --loglevel=error \
	    @openai/codex@$(CODEX_VERSION) opencode-ai@$(OPENCODE_VERSION) && touch $@; \
	else echo "npm not found: Codex CLI and OpenCode not installed (their harness tests skip outside CI)"; fi

demo: venv
	$(PY) tools/demo.py

# Several workers (pytest-xdist; tests that share one resource stay on one worker, conftest.py).
JOBS ?= auto
test: venv
	$(PY) -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS)

# The suite under induced load (a CPU hog per core), RUNS times in a row, after repeating the
# timing-marked tests REPEAT times; prints how many runs passed (docs/testing.md).
RUNS ?= 1
REPEAT ?= 5
test-stress: venv
	$(PY) tools/stress.py --runs $(RUNS) --repeat $(REPEAT) $(STRESS_ARGS)

# A fresh venv with the core install only (no extras): serves and plays over gRPC.
check-core-install: venv
	$(PY) tools/check_core_install.py

generate: venv
	$(PY) tools/generate.py

# The contract (buf lint + breaking), style (ruff check + ruff format) and architecture
# (import-linter layers and cycles, python/pyproject.toml). CI runs it before the tests.
LINT_PATHS := python conformance catalog envs tools examples
lint: venv
	$(BIN)/buf lint
	$(PY) tools/buf_breaking.py
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	cd python && ../$(BIN)/lint-imports pyproject.toml

# mypy: strict for the runtime package, defaults for the certifier, zero errors.
typecheck: venv
	cd python && ../$(BIN)/mypy --config-file pyproject.toml
	cd conformance && ../$(BIN)/mypy --config-file pyproject.toml
	cd catalog && ../$(BIN)/mypy --config-file pyproject.toml

fmt: venv
	$(BIN)/ruff check --fix $(LINT_PATHS)
	$(BIN)/ruff format $(LINT_PATHS)

bench: venv
	$(PY) tools/bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache

# Environment images (docs/images.md): the debootstrapped base (needs root and debootstrap,
# skipped when it exists), then every envs/* image, built offline from a host wheelhouse.
.PHONY: images
images: venv
	$(PY) tools/make_base_image.py
	@# chess_env's image installs Debian's stockfish from a staged .deb (its build stays offline).
	@if [ -d envs/chess_env ] && ! ls envs/chess_env/debs/stockfish_*.deb >/dev/null 2>&1; then \
	  mkdir -p envs/chess_env/debs && cd envs/chess_env/debs && apt-get download stockfish; fi
	@# browser_env's image installs Debian's Chromium from staged .debs (apt's resolution of chromium
	@# against the base image, downloaded on the host): its build stays offline too.
	@if [ -d envs/browser_env ]; then envs/browser_env/tools/stage_debs.sh; fi
	@set -e; for d in $(sort $(dir $(wildcard envs/*/pyproject.toml))); do \
	  if grep -q '^\[tool\.openenv\]' $$d/pyproject.toml; then $(BIN)/openenv build $$d --offline --debootstrap-base; fi; \
	done
