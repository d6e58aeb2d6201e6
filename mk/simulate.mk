# The deterministic simulation of the whole deployment (tools/simulation): the
# real service behind every entry point over in-memory Firestore, Cloud Tasks,
# Pub/Sub and platforms, one seeded scheduler, faults by seed, invariants
# judged from the platforms' record. A failing seed prints the one command
# that replays it. SEEDS=N seeds from FIRST_SEED; the default budget takes
# about 5 minutes on a shared 2-core machine (docs/architecture.md).
SEEDS ?= 2000
FIRST_SEED ?= 1
SIMULATE_ARGS ?=
.PHONY: simulate
simulate: venv
	$(PY) -m tools.simulation --seeds $(SEEDS) --first $(FIRST_SEED) $(SIMULATE_ARGS)
