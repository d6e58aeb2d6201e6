# Infra (infra/): included by the main Makefile (VENV, PY, PYTHON, venv).
INFRA_VENV := .venv-infra

.PHONY: package test-infra infra-fmt infra-checkov

$(INFRA_VENV)/.installed: requirements-infra.txt
	test -x $(INFRA_VENV)/bin/python || $(PYTHON) -m venv $(INFRA_VENV)
	$(INFRA_VENV)/bin/pip install -q -r requirements-infra.txt
	touch $@

# The functions' source archive that Terraform uploads (dist/baton-functions.zip).
package:
	$(PYTHON) tools/package.py

# terraform fmt runs offline; no provider can be downloaded here, so init and
# validate cannot. Where terraform is missing the check says so and is skipped.
infra-fmt:
	@if command -v terraform >/dev/null 2>&1; then \
		terraform fmt -check -recursive -diff infra && echo "terraform fmt: ok"; \
	else \
		echo "SKIPPED: terraform fmt -check (terraform is not installed on this machine)"; \
	fi

# Every skipped check has its reason inline (checkov:skip=ID:reason).
infra-checkov: $(INFRA_VENV)/.installed
	BC_SKIP_MAPPING=TRUE CHECKOV_RUN_SCA_PACKAGE_SCAN_V2=false \
		$(INFRA_VENV)/bin/checkov -d infra --framework terraform --quiet --compact --skip-download

test-infra: venv infra-fmt infra-checkov
	$(PY) -m pytest tests/infra -q
