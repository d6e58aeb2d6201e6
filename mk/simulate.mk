# The deterministic simulation of the whole deployment (tools/sim/simulation): the
# real service behind every entry point over in-memory Firestore, Cloud Tasks,
# Pub/Sub and platforms, one seeded scheduler, faults by seed, invariants
# judged from the platforms' record. A failing seed prints the one command
# that replays it. SEEDS=N seeds from FIRST_SEED. Each seed now drives more
# paths (scheduled, prepare, TTL, sequence, three platforms: 1.7x the CPU a
# seed took before them), so the default is 1,200 seeds, about the CPU time
# the 2,000 of before took (docs/architecture.md, "The simulation").
SEEDS ?= 1200
FIRST_SEED ?= 1
SIMULATE_ARGS ?=
.PHONY: simulate
simulate: venv
	$(PY) -m tools.sim.simulation --seeds $(SEEDS) --first $(FIRST_SEED) $(SIMULATE_ARGS)
