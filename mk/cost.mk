# The cost model (docs/cost.md): `make cost` prints what a million delivered
# messages cost and its parts, from `make bench-core`'s counts when out/bench
# has them, else from the committed docs/cost-inputs.json. Standard library
# only, so the system Python does; run as a module (-m), as tools/bench/cost.py
# imports its parts (cost_*.py) as tools.bench.*. Every name here starts with COST_.
COST_PYTHON ?= python3.11
# e.g. COST_ARGS="--mode queued --rate 100"
COST_ARGS ?=

.PHONY: cost cost-snapshot cost-docs

cost:
	$(COST_PYTHON) -m tools.bench.cost $(COST_ARGS)

# After a `make bench-core` worth keeping: commit its counts as the snapshot,
# then regenerate the tables of docs/cost.md from them (tests/infra checks
# that the two agree).
cost-snapshot:
	$(COST_PYTHON) -m tools.bench.cost --snapshot docs/cost-inputs.json

cost-docs:
	$(COST_PYTHON) -m tools.bench.cost --inputs docs/cost-inputs.json --markdown
