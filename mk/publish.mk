# Producers (client/, shared/contract/): the client's tests and its benchmark.
# Included by the main Makefile.
.PHONY: bench-publish test-client

# baton-client against the raw google-cloud-pubsub publisher with ordering keys, side by
# side on the Pub/Sub emulator, and the median cost of the contract check (tools/bench/publish.py).
# A smaller run: make bench-publish PUBLISH_MESSAGES=20000 PUBLISH_ROOMS=5000
PUBLISH_MESSAGES ?= 100000
PUBLISH_ROOMS ?= 25000
PUBLISH_ROUNDS ?= 2
bench-publish: venv
	$(PY) -m tools.bench.publish --messages $(PUBLISH_MESSAGES) --rooms $(PUBLISH_ROOMS) --rounds $(PUBLISH_ROUNDS)

# The client's own tests (no emulator): client/tests.
test-client: venv
	$(PY) -m pytest -q -p no:cacheprovider client/tests
