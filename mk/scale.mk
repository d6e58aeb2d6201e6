# The users' load on the real rules in virtual time (tools/sim/scale_model):
# 25,000 rooms, a 10,000 msg/s burst of 60 s over 1,000 msg/s; prints every
# component's peak and p99 rate against its documented limit and fails if one
# is over (docs/scale.md). E.g. SCALE_ARGS="--sample 0.01" for a quick run.
SCALE_ARGS ?=
scale-model: venv
	$(PY) -m tools.sim.scale_model $(SCALE_ARGS)

# docs/scale.md's sizing table, from the outputs of infra/modules/sizing as
# `terraform plan` derives them (tools/sim/scale_model/sizing_table.py); no
# provider needed. tests/infra/test_sizing.py fails when page and module
# disagree.
scale-table:
	python3 -m tools.sim.scale_model.sizing_table --write docs/scale.md
