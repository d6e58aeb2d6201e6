# baton: ordered per-room delivery. `make demo` and `make test` do all the set-up.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
TASKS_VENV := .venv-tasks
ROOMS ?= 1000
MESSAGES ?= 5
PROVIDERS ?= whatsapp
RUN_DIR ?= run/local

.PHONY: help venv up down demo test test-unit test-integration test-e2e lint bench-core bench-hot-room bench-prepare bench-sweep chaos clean \
	statuses-list statuses-replay operator-day
.DEFAULT_GOAL := help

help:
	@echo "make demo     run the delivery path end to end on the local emulator stack (ROOMS=$(ROOMS) MESSAGES=$(MESSAGES))"
	@echo "make test     unit, integration (emulators), end-to-end, infra and pipeline tests"
	@echo "make up/down  start/stop the local stack in $(RUN_DIR) (up prints the operators' console address)"
	@echo "make bench-console  every console page's p95 on the local stack with 10,000 rooms"
	@echo "make operator-day  pause, skip, redrive, pacing and an image on the emulators, then the report's audit of them"
	@echo "make bench-core, make bench-pipeline, make report, make package"
	@echo "make bench-prepare  one room of 200 image messages: preparation in parallel vs one after another"
	@echo "make simulate       the deterministic simulation of the whole deployment (SEEDS=2000 seeds, faults by seed; tools/sim/simulation)"
	@echo "make scale-model    25,000 rooms and a 10,000 msg/s burst on the real rules in virtual time, against the documented limits"
	@echo "make scale-table    docs/scale.md's sizing table rewritten from infra/modules/sizing's outputs (terraform plan, no provider)"
	@echo "make loadtest-cloud PROJECT=p   the same proof on your own project (LOADTEST_ARGS=--dry-run: the plan only)"

# The main virtualenv: runtime, dev and pipeline requirements. The Cloud Tasks
# emulator gets its own (it pins protobuf<5).
$(VENV)/.installed: requirements.txt requirements-dev.txt $(wildcard requirements-pipeline.txt) client/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt $(if $(wildcard requirements-pipeline.txt),-r requirements-pipeline.txt)
	$(PY) -m pip install -q --no-deps -e .
	$(PY) -m pip install -q --no-deps -e ./client
	touch $@

$(TASKS_VENV)/.installed: requirements-tasks-emulator.txt
	test -x $(TASKS_VENV)/bin/python || $(PYTHON) -m venv $(TASKS_VENV)
	$(TASKS_VENV)/bin/pip install -q -r requirements-tasks-emulator.txt
	touch $@

venv: $(VENV)/.installed $(TASKS_VENV)/.installed

up: venv
	$(PY) -m tools.local.stack up --run-dir $(RUN_DIR)

down:
	$(PY) -m tools.local.stack down --run-dir $(RUN_DIR)

# The fake platform's settings as JSON, e.g. FAKE='{"messenger_mids_prob": 0}' (tools/sim/fake_platform/config.py).
FAKE ?= {}
# DEMO_ARGS=--no-operator-day: the workload only, without the operator day and its report.
# KEEP=1: leave the demo's stack (run/demo) up; the summary ends with its console address.
DEMO_ARGS ?=
# PROVIDERS picks the demo's providers and is also the functions' own setting
# (shared/config.py): make would export `make demo PROVIDERS=messenger` into
# the stack's functions, which would then refuse WhatsApp. `env -u` keeps it an argument.
demo: venv
	env -u PROVIDERS $(PY) -m tools.local.demo --rooms $(ROOMS) --messages $(MESSAGES) --providers $(PROVIDERS) --fake '$(FAKE)' \
		$(if $(filter 1,$(KEEP)),--keep) $(DEMO_ARGS)

# The operator day alone (tools/local/operator_day.py): its own stack, then the report in out/operator-day.
operator-day: venv
	$(PY) -m tools.local.operator_day

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test-unit: venv
	$(PY) -m pytest tests/unit -q

test-integration: venv
	$(PY) -m pytest tests/integration -q

test-e2e: venv console-browser
	$(PY) -m pytest tests/e2e -q

# Everything: lint, the delivery path's tests, then the infra and pipeline checks.
test: venv lint console-browser
	$(PY) -m pytest tests/unit tests/integration tests/e2e client/tests -q
	$(MAKE) --no-print-directory test-infra
	$(MAKE) --no-print-directory test-pipeline

bench-core: venv
	$(PY) -m tools.bench.core

# Preparation in parallel, sending in order (issue 14): PREPARE_AHEAD=8 against 0
# on one room (tools/bench/prepare.py; e.g. PREPARE_ARGS="--messages 50").
PREPARE_ARGS ?=
bench-prepare: venv
	$(PY) -m tools.bench.prepare $(PREPARE_ARGS)

# Faults injected during a run, invariants checked from outside (tools/local/chaos.py).
CHAOS_ROOMS ?= 1000
CHAOS_MESSAGES ?= 10
CHAOS_SEED ?= 7
CHAOS_FAULT_RATE ?= 1.0
CHAOS_KILL_EVERY_S ?= 3
CHAOS_SECONDS ?= 0
# empty: the configured default (shared/config.py); or direct / queued
CHAOS_WEBHOOK_MODE ?=
chaos: venv
	$(PY) -m tools.local.chaos --rooms $(CHAOS_ROOMS) --messages $(CHAOS_MESSAGES) --seed $(CHAOS_SEED) \
		--fault-rate $(CHAOS_FAULT_RATE) --kill-every-s $(CHAOS_KILL_EVERY_S) --fault-seconds $(CHAOS_SECONDS) \
		$(if $(CHAOS_WEBHOOK_MODE),--webhook-mode $(CHAOS_WEBHOOK_MODE))

# The status error queue of the local stack (`make up`): list it; replay it after a fix.
statuses-list: venv
	$(VENV)/bin/baton --stack $(RUN_DIR) statuses list

statuses-replay: venv
	$(VENV)/bin/baton --stack $(RUN_DIR) statuses replay --yes

# The watchdog's rescue rate: 5,000 rooms made overdue at once (tools/bench/sweep.py;
# e.g. SWEEP_ARGS="--rooms 1000 --concurrency 8").
SWEEP_ARGS ?=
bench-sweep: venv
	$(PY) -m tools.bench.sweep $(SWEEP_ARGS)

# One full room refusing pushes beside 300 cold rooms: does it slow them?
bench-hot-room: venv
	$(PY) -m tools.bench.hot_room

clean:
	rm -rf run out dist .pytest_cache

include mk/*.mk
