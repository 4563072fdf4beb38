# The project's commands. `make demo` and `make test` set up everything they need
# (a local virtualenv in .venv) on a fresh machine with Python 3.11+, make and git.

SHELL := /bin/bash
# Found once, on first use (a search through pyenv shims can take seconds per name). 3.11 first:
# the lock (requirements/dev.txt) is resolved for it, and make venv refuses another minor version.
PYTHON ?= $(eval PYTHON := $(shell echo "==> looking for Python 3.11+ on PATH" >&2; \
	  for p in python3.11 python3.12 python3.13 python3; do echo "    trying $$p" >&2; \
	  if command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then command -v $$p; break; fi; done))$(PYTHON)
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
PROJECTS := python $(patsubst %/,%,$(sort $(dir $(wildcard conformance/pyproject.toml catalog/pyproject.toml envs/*/pyproject.toml))))
STAMP := $(VENV)/.installed
# The development environment's lock (tools/lock.py; docs/testing.md, "One lock"): every package
# pinned with its hashes, resolved from requirements/dev.in by `make lock` and nothing else.
LOCK := requirements/dev.txt
export GRPC_VERBOSITY ?= ERROR
# Codex CLI, OpenCode and Claude Code (npm packages, locked in tools/harness-tools/package-lock.json) in a local
# prefix for the agent-harness tests and runs (docs/harnesses.md): `openenv harness run --agent
# codex|opencode|claude-code` finds them in .harness-tools/node_modules/.bin/.
HARNESS_TOOLS := .harness-tools
HARNESS_STAMP := $(HARNESS_TOOLS)/.installed

.PHONY: venv lock demo test docs-check test-stress test-mutants-full check-core-install openenv-suite generate lint typecheck fmt bench clean

venv: $(STAMP) $(HARNESS_STAMP)

# Every pip and npm step runs under tools/progress.py (stdlib only, the venv's Python): their
# output passes through, and a line every 5 s of silence says the step is still running.
PROGRESS = $(PY) tools/progress.py --
# The installers come from the lock too: pip installs the locked pip, setuptools, wheel and uv
# (hashes checked), then uv installs the rest ~3x faster than pip, reading pip's configuration
# (tools/pip_install.py; where uv cannot follow that configuration, pip installs).
$(VENV)/.created:
	@test -n "$(PYTHON)" || { echo "error: Python 3.11+ is required (python3.11, python3.12 or python3.13 on PATH)"; exit 1; }
	@test -x $(PY) || $(PYTHON) tools/progress.py --label "creating the virtualenv $(VENV)" -- $(PYTHON) -m venv $(VENV)
	$(PROGRESS) $(PY) tools/lock.py bootstrap
	@touch $@

# What `make demo` runs and nothing more: the core with its HTTP side and the reference
# environments (no torch, no trainers, no npm agents). The full install below includes it.
DEMO_PROJECTS := envs/echo_env envs/gridworld envs/math_env
DEMO_STAMP := $(VENV)/.installed-demo
# Their dependencies at the lock's versions, nothing else (refused when the lock is stale).
$(DEMO_STAMP): python/pyproject.toml $(foreach p,$(DEMO_PROJECTS),$(p)/pyproject.toml) $(LOCK) Makefile | $(VENV)/.created
	$(PROGRESS) $(PY) tools/lock.py install --demo \
	  -e 'python[http]' $(foreach p,$(DEMO_PROJECTS),-e $(p))
	@touch $@

# Everything `make test` (and CI) needs, exactly as locked (what is not in the lock is removed):
# every project of requirements/dev.in editable with the extras its tests use, torch's CPU build.
$(STAMP): $(foreach p,$(PROJECTS),$(p)/pyproject.toml) $(LOCK) requirements/dev.in Makefile | $(VENV)/.created
	$(PROGRESS) $(PY) tools/lock.py install
	@touch $@ $(DEMO_STAMP)

# `npm install` from the lock (integrity checked), not `npm ci`: npm never records opencode-ai's
# platform packages for other systems in a lock, and `npm ci` then refuses it as out of sync. The
# tree is fixed all the same: both CLIs are pinned exactly and pin their platform packages exactly.
$(HARNESS_STAMP): tools/harness-tools/package.json tools/harness-tools/package-lock.json Makefile | $(VENV)/.created
	@if command -v npm >/dev/null 2>&1; then \
	  mkdir -p $(HARNESS_TOOLS) && cp tools/harness-tools/package.json tools/harness-tools/package-lock.json $(HARNESS_TOOLS)/ && \
	  $(PROGRESS) npm install --prefix $(HARNESS_TOOLS) --no-audit --no-fund --loglevel=error && touch $@; \
	else echo "npm not found: Codex CLI, OpenCode and Claude Code not installed (their harness tests skip outside CI)"; fi

# Re-resolve the locks against today's releases: requirements/dev.txt, requirements/upstream/*.txt
# and tools/harness-tools/package-lock.json. The diff is reviewed like code and committed on its
# own, with the fixes a newer toolchain needs. UPGRADE=0 keeps every pin the inputs still allow
# (after adding a dependency to a pyproject.toml or requirements/dev.in).
UPGRADE ?= 1
lock: $(VENV)/.created
	$(PY) tools/lock.py compile $(if $(filter 1,$(UPGRADE)),--upgrade)

demo: $(DEMO_STAMP)
	$(PY) tools/demo.py

# Several workers (pytest-xdist; tests that share one resource stay on one worker, conftest.py).
JOBS ?= auto
test: venv
	$(PY) -m pytest -n $(JOBS) --dist loadgroup $(PYTEST_ARGS)

# Every command README.md and docs/*.md tell a reader to run, the long ones too (certification,
# the GRPO example's documented run, Inspect's CLI); `make test` runs the quick ones.
docs-check: venv
	OPENENV_DOCS_CHECK=1 $(PY) -m pytest -n $(JOBS) --dist loadgroup python/tests/test_doc_commands.py \
	  python/tests/training/test_grpo_example.py $(PYTEST_ARGS)

# The suite under induced load (a CPU hog per core), RUNS times in a row, after repeating the
# timing-marked tests REPEAT times; prints how many runs passed (docs/testing.md).
RUNS ?= 1
REPEAT ?= 5
test-stress: venv
	$(PY) tools/stress.py --runs $(RUNS) --repeat $(REPEAT) $(STRESS_ARGS)

# The certifier's mutants, each certified at every level (make test certifies a mutant with the
# check that must catch it): run it when a check or a mutant changes.
test-mutants-full: venv
	OPENENV_MUTANTS_FULL=1 $(PY) -m pytest -n $(JOBS) --dist loadgroup conformance/tests/test_mutants.py $(PYTEST_ARGS)

# OpenEnv's own integration suite (tests/envs/test_websockets.py at a pinned commit, read from its
# git history, never copied here) with its own client, against our server and OpenEnv's, side by
# side (docs/bridge.md). On demand only: not part of `make test`. SUITE_ARGS="--openenv-git PATH"
# reads a local clone or mirror instead of fetching the commit.
openenv-suite: venv
	$(PY) tools/openenv_suite.py $(SUITE_ARGS)

# A fresh venv with the core install only (no extras): serves and plays over gRPC.
check-core-install: venv
	$(PY) tools/check_core_install.py

generate: venv
	$(PY) tools/generate.py

# The contract (buf lint + breaking), style (ruff check + ruff format) and architecture
# (import-linter layers and cycles, python/pyproject.toml; tools/import_cycles.py: no import
# circle among the files of python/, conformance/, catalog/ and envs/). CI runs it before the tests.
LINT_PATHS := python conformance catalog envs tools examples
lint: venv
	$(BIN)/buf lint
	$(PY) tools/buf_breaking.py
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	cd python && ../$(BIN)/lint-imports pyproject.toml
	$(PY) tools/import_cycles.py

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
	$(PY) tools/bench/atari.py

clean:
	rm -rf $(VENV) .pytest_cache

# Environment images (docs/images.md): the debootstrapped base (needs root and debootstrap,
# skipped when it exists), then every envs/* image, built offline from a host wheelhouse.
.PHONY: images
# Images built at once by `make images` (.ci/run: 2; their lines are then prefixed).
IMAGE_JOBS ?= 1
# More arguments of tools/build_images.py (.ci/run: --certify-reports DIR, each image certified once built).
IMAGE_ARGS ?=
images: venv
	$(PY) tools/make_base_image.py
	@# chess_env's image installs Debian's stockfish from a staged .deb (its build stays offline).
	@if [ -d envs/chess_env ] && ! ls envs/chess_env/debs/stockfish_*.deb >/dev/null 2>&1; then \
	  mkdir -p envs/chess_env/debs && cd envs/chess_env/debs && apt-get download stockfish; fi
	@# harbor_env's image installs git and what it needs (envs/harbor_env/debs.txt) from staged .debs.
	@if [ -d envs/harbor_env ] && ! ls envs/harbor_env/debs/*.deb >/dev/null 2>&1; then \
	  mkdir -p envs/harbor_env/debs && cd envs/harbor_env/debs && apt-get download $$(grep -v '^#' ../debs.txt); fi
	@# terminal_env's image installs git the same way (envs/terminal_env/debs.txt), for its git tasks.
	@if [ -d envs/terminal_env ] && ! ls envs/terminal_env/debs/*.deb >/dev/null 2>&1; then \
	  mkdir -p envs/terminal_env/debs && cd envs/terminal_env/debs && apt-get download $$(grep -v '^#' ../debs.txt); fi
	@# browser_env's image installs Debian's Chromium from staged .debs (apt's resolution of chromium
	@# against the base image, downloaded on the host): its build stays offline too.
	@if [ -d envs/browser_env ]; then envs/browser_env/tools/stage_debs.sh; fi
	$(PY) tools/build_images.py --jobs $(IMAGE_JOBS) $(IMAGE_ARGS)
