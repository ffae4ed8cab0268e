# Every target runs from a fresh clone: the controller venv is built on demand.
SHELL := /bin/bash
.DEFAULT_GOAL := help
VENV := .venv
BIN := $(VENV)/bin
# Binaries of the venv first, so ansible-runner and ansible-lint find their tools.
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
SIM_HOSTS ?= 2
PLAYBOOKS := benchmark.yml $(wildcard playbooks/*.yml)

.PHONY: help venv system-deps specs lint test-fast test-unit test test-integration demo sim-up sim-down sim-status sim-verify tiny-model tiny-gptoss bench-overhead bench-scale bench-compile bench-cachesim bench-schedsim bench-ttft bench-ttft-accuracy bench-whatif bench-report mutate lock clean

help:  ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

venv: $(BIN)/.ready  ## Build the controller virtualenv (.venv)
$(BIN)/.ready: requirements/controller.lock pyproject.toml scripts/bootstrap
	scripts/bootstrap
	@touch $@

system-deps:  ## Install the Debian packages the simulated fleet needs (root)
	scripts/install-system-deps

specs: venv  ## Regenerate the roles' argument specs and defaults from the settings catalogue
	$(BIN)/python -m prefixbench.config.rolespecs

lint: venv  ## ansible-lint (production), yamllint, syntax-check, ruff, mypy, generated specs
	$(BIN)/python -m prefixbench.config.rolespecs --check
	$(BIN)/yamllint --strict .
	$(BIN)/ansible-lint --profile production --offline -q
	@for p in $(PLAYBOOKS); do \
	  $(BIN)/ansible-playbook -i trn2_fleet --syntax-check $$p >/dev/null || exit 1; \
	  echo "syntax ok: $$p"; done
	$(BIN)/ruff check src tests plugins library scripts module_utils
	$(BIN)/mypy

# Lint and the fast tests are each one process on one core: on 2 cores they run side by
# side (each one's output printed whole when it ends).
test-fast: venv  ## Lint and the fast test tier (no fleet)
	@$(MAKE) --no-print-directory -j2 --output-sync=target lint test-unit

test-unit: venv  ## The fast tests alone (no lint, no fleet)
	$(BIN)/pytest -m "not integration" -q --durations=5

# --durations=0: every integration test's time (the tier's budget is read from it).
test-integration: venv system-deps  ## The integration tier on the simulated fleet (root)
	$(BIN)/pytest -m integration -q --durations=0

test:  ## Every tier: lint, fast tests, simulated-fleet tests; prints each tier's time
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory test-fast; rc=$$?; fast=$$(( $$(date +%s) - start )); \
	if [ $$rc -eq 0 ]; then $(MAKE) --no-print-directory test-integration; rc=$$?; fi; \
	echo "make test: fast tier (with lint) $${fast} s, total $$(( $$(date +%s) - start )) s, exit $$rc"; \
	exit $$rc

demo: venv system-deps  ## The whole experiment on a simulated fleet; prints where the report is
	scripts/demo $(SIM_HOSTS)

sim-up: venv system-deps  ## Bring up the simulated fleet (SIM_HOSTS hosts) and build what its hosts install
	scripts/simfleet up $(SIM_HOSTS)
	$(BIN)/python -m prefixbench_sim.artifacts $${PREFIXBENCH_SIM_STATE:-$(CURDIR)/.simfleet}/www >/dev/null

sim-down: venv  ## Tear the simulated fleet down, leaving nothing behind
	scripts/simfleet down

sim-status: venv  ## Show the simulated hosts and their services
	scripts/simfleet status

sim-verify: venv system-deps  ## Slow check of the simulated fleet's artifacts (apt signatures, wheelhouse, a real vllm serve); ARGS="--no-serve"
	$(BIN)/python -m prefixbench_sim.verify_artifacts $(ARGS)

tiny-model: venv  ## Build the simulated fleet's tiny model into DIR (no torch, no Hub): make tiny-model DIR=/tmp/tiny
	@test -n "$(DIR)" || { echo "tiny-model: give DIR=<directory>"; exit 2; }
	$(BIN)/python -m prefixbench_sim.tinymodel $(DIR)

tiny-gptoss: venv  ## Build a tiny random-weight gpt-oss (hybrid KV cache) into DIR: make tiny-gptoss DIR=/tmp/gptoss
	@test -n "$(DIR)" || { echo "tiny-gptoss: give DIR=<directory>"; exit 2; }
	$(BIN)/python -m prefixbench_sim.tinygptoss $(DIR)

# Benchmarks of the bundle itself: they print figures, they are not tests.
bench-overhead: venv  ## The bundle's own cost: ARGS="run results/<run_id>" or ARGS="plugin HOST -n 3" (simulated fleet)
	$(BIN)/python -m prefixbench_perf.overhead_cli $(ARGS)

bench-scale: venv  ## Controller CPU per host and per bench at several fleet sizes; ARGS="-i inventories/sim --hosts 1,2,4"
	$(BIN)/python -m prefixbench_perf.scale $(ARGS)

bench-compile: venv  ## Compilations per run and time to healthy, cold vs fetched vs warm; ARGS="-i inventories/sim --empty-host-caches"
	$(BIN)/python -m prefixbench_perf.compile_bench $(ARGS)

bench-cachesim: venv  ## The prefix-cache model's speed (prompts/s on one core); ARGS="--prompts 200000"
	$(BIN)/python -m prefixbench_perf.cachesim_speed $(ARGS)

bench-schedsim: venv  ## The scheduler model's speed (requests/s at concurrency 32 on one core); ARGS="--concurrency 4"
	$(BIN)/python -m prefixbench_perf.schedsim_speed $(ARGS)

bench-ttft: venv  ## The timed replay's speed, TTFT predictions (requests/s at concurrency 32 on one core)
	$(BIN)/python -m prefixbench_perf.ttft_speed $(ARGS)

bench-ttft-accuracy: venv  ## TTFT predicted vs measured of a finished run, against the goal, with the machine's load; ARGS="results/<run_id>"
	$(BIN)/python -m prefixbench_perf.ttft_accuracy $(ARGS)

bench-whatif: venv  ## The what-if analyzer's speed and its overhead over the tokenizer; ARGS="--prompts 0 --custom-prompts 5000"
	$(BIN)/python -m prefixbench_perf.whatif_speed $(ARGS)

bench-report: venv  ## report and compare on a synthetic run of 16 hosts x 3 repetitions (target < 10 s each); ARGS="--hosts 4 --repetitions 1"
	$(BIN)/python -m prefixbench_perf.report_speed $(ARGS)

# Mutation testing of the modules that decide, against the fast tier: a benchmark with a
# time budget, not part of test-fast (docs/testing.md, "Mutation testing").
mutate: venv  ## mutmut over the deciding modules, per-module scores; MUTATE_BUDGET=3600 MODULES="prefixbench.report.compare" FRESH=1
	scripts/mutate

lock: venv  ## Re-resolve requirements/controller.lock from controller.in
	rm -rf .lockvenv && python3 -m venv .lockvenv 2>/dev/null || $(BIN)/python -m venv .lockvenv
	.lockvenv/bin/pip install -q -r requirements/controller.in
	{ echo "# Resolved from controller.in (make lock). Do not edit by hand."; .lockvenv/bin/pip freeze | grep -v '^-e'; } > requirements/controller.lock
	rm -rf .lockvenv

clean:  ## Remove caches (not results, not the venv)
	rm -rf .cache .pytest_cache .mypy_cache .ruff_cache
