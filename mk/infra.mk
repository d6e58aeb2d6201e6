# Infra (infra/): `make package` and `make test-infra`. Included by the main
# Makefile; every name here starts with INFRA_ (or is a target of its own) so
# nothing clashes with its VENV and PY.

INFRA_PYTHON ?= python3.11
INFRA_VENV ?= .venv-infra
INFRA_PY := $(INFRA_VENV)/bin/python
INFRA_STAMP := $(INFRA_VENV)/.installed
INFRA_DIR := infra
INFRA_TERRAFORM ?= terraform
# checkov offline: no platform mapping or guideline downloads (BC_SKIP_MAPPING,
# --skip-download), no PyPI version check (CKV_SKIP_PACKAGE_UPDATE_CHECK), no
# dependency scan (CHECKOV_RUN_SCA_PACKAGE_SCAN_V2). Checked to pass with no
# network at all.
INFRA_CHECKOV_ENV := BC_SKIP_MAPPING=TRUE CKV_SKIP_PACKAGE_UPDATE_CHECK=true CHECKOV_RUN_SCA_PACKAGE_SCAN_V2=false
INFRA_CHECKOV_ARGS := -d $(INFRA_DIR) --framework terraform --quiet --compact --skip-download

# The pinned providers' schemas (tests/infra/provider_schema.py): the CDKTF
# bindings' wheels, checked against their sha256 and downloaded once (about
# 100 MB) into the infra virtualenv's own directory, then reduced to one
# compact JSON per provider. Redone when the list changes.
INFRA_SCHEMA_DIR := $(INFRA_VENV)/provider-schemas
INFRA_SCHEMA_LIST := tests/infra/provider-schemas.txt
INFRA_SCHEMA_STAMP := $(INFRA_SCHEMA_DIR)/.extracted

.PHONY: package test-infra infra-fmt infra-pytest infra-checkov infra-schemas

# Rebuilt when requirements-infra.txt changes; the venv itself is made once.
$(INFRA_STAMP): requirements-infra.txt
	test -x $(INFRA_PY) || $(INFRA_PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_PY) -m pip install -q --upgrade pip
	$(INFRA_PY) -m pip install -q -r requirements-infra.txt
	touch $@

# The functions' source archive Terraform uploads: dist/baton-functions.zip,
# with its sha256. Standard library only, so the system Python does.
package:
	$(INFRA_PYTHON) tools/cloud/package.py

# terraform fmt runs offline; init, the sizing plans and the variables'
# validations run in infra-pytest (tests/infra/test_terraform_cli.py,
# test_sizing.py). A missing terraform fails: the checks it stands for would
# otherwise pass unseen.
infra-fmt:
	@command -v $(INFRA_TERRAFORM) >/dev/null 2>&1 || { \
		echo "terraform fmt -check: $(INFRA_TERRAFORM) is not installed (https://developer.hashicorp.com/terraform/install)" >&2; exit 1; }
	$(INFRA_TERRAFORM) fmt -check -recursive -diff $(INFRA_DIR) && echo "terraform fmt -check: ok"

$(INFRA_SCHEMA_STAMP): $(INFRA_SCHEMA_LIST) tests/infra/provider_schema.py $(INFRA_STAMP)
	mkdir -p $(INFRA_SCHEMA_DIR)
	$(INFRA_PY) -m pip download -q --no-deps --only-binary=:all: --require-hashes \
		-r $(INFRA_SCHEMA_LIST) -d $(INFRA_SCHEMA_DIR)
	$(INFRA_PY) -m tests.infra.provider_schema extract $(INFRA_SCHEMA_DIR)
	touch $@

infra-schemas: $(INFRA_SCHEMA_STAMP)

infra-pytest: $(INFRA_STAMP) $(INFRA_SCHEMA_STAMP)
	BATON_PROVIDER_SCHEMAS=$(INFRA_SCHEMA_DIR) BATON_TERRAFORM=$(INFRA_TERRAFORM) $(INFRA_PY) -m pytest tests/infra -q

# Every skipped check carries its reason inline (checkov:skip=ID:reason);
# tests/infra checks that none is missing one.
infra-checkov: $(INFRA_STAMP)
	$(INFRA_CHECKOV_ENV) $(INFRA_VENV)/bin/checkov $(INFRA_CHECKOV_ARGS)

# All three, in this order; the first failure fails the target. infra-pytest
# includes the schema check that stands in for `terraform validate`.
test-infra: infra-fmt infra-pytest infra-checkov
