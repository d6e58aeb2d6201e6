# The cloud load test (tools/cloud/loadtest, docs/loadtest.md): deploys the
# fake platform and a `baton-lt` deployment in PROJECT, publishes ROOMS x
# MESSAGES at RATE messages/s, prints the chaos verdict and Cloud
# Monitoring's figures, tears down. LOADTEST_ARGS="--dry-run" prints the
# plan and runs nothing (all that can run without a project).
PROJECT ?=
REGION ?= europe-west1
RATE ?= 100
LOADTEST_ROOMS ?= 1000
LOADTEST_MESSAGES ?= 10
LOADTEST_ARGS ?=
loadtest-cloud: venv
	@test -n "$(PROJECT)" || { echo "make loadtest-cloud PROJECT=<gcp project id> [REGION= RATE= LOADTEST_ARGS=--dry-run]" >&2; exit 2; }
	$(PY) -m tools.cloud.loadtest --project $(PROJECT) --region $(REGION) --rate $(RATE) \
		--rooms $(LOADTEST_ROOMS) --messages $(LOADTEST_MESSAGES) $(LOADTEST_ARGS)
