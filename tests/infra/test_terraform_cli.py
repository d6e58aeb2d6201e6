"""Terraform itself loads the whole of infra/ (`terraform init
-backend=false` on a copy): a configuration error of any file or module
(a reserved variable name, a duplicate block, a bad reference in a module
call) fails here. The registry is out of reach on these machines, so the
provider download is the one failure accepted, recognised by its message;
where the registry is reachable, init simply succeeds."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.infra import terraform_cli
from tests.infra.terraform_cli import INFRA, diagnostics, run

# The only errors of an offline init: Terraform could not reach the registry
# for a provider (the configuration was loaded before it tried).
PROVIDER_DOWNLOAD_ERRORS = ("Failed to query available provider packages", "Failed to install provider")
OFFLINE_MARKERS = ("could not connect to registry.terraform.io", "no such host", "connection refused",
                   "i/o timeout", "network is unreachable", "registry.terraform.io")


def configuration_errors(directory: Path) -> list[str]:
    """Every error of `terraform init -backend=false` in `directory` other
    than an offline provider download, as text (empty: the configuration
    loads)."""
    done = run(directory, "init", "-backend=false", "-input=false", "-no-color", "-json")
    if done.returncode == 0:
        return []
    errors = diagnostics(done.stdout)
    if not errors:  # no JSON diagnostics: report the whole output
        return [done.stdout + done.stderr]
    return [e.text for e in errors
            if not (e.summary in PROVIDER_DOWNLOAD_ERRORS and any(m in e.detail for m in OFFLINE_MARKERS))]


def copy_of_infra(tmp_path: Path) -> Path:
    target = tmp_path / "infra"
    shutil.copytree(INFRA, target, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*", "terraform.tfvars"))
    return target


def test_terraform_is_installed():
    assert Path(terraform_cli.binary()).exists()


def test_init_loads_the_whole_configuration(tmp_path):
    errors = configuration_errors(copy_of_infra(tmp_path))
    assert errors == [], "terraform init -backend=false reports configuration errors:\n" + "\n".join(errors)


def test_init_catches_a_configuration_error(tmp_path):
    """The check above is not blind: the error main had on 2026-11-23 (a
    variable named `providers`, reserved by Terraform) is reported."""
    infra = copy_of_infra(tmp_path)
    (infra / "reserved.tf").write_text('variable "providers" {\n  type = list(string)\n}\n')
    errors = configuration_errors(infra)
    assert any("Invalid variable name" in e and "reserved" in e for e in errors), errors


def test_init_catches_an_error_inside_the_sizing_module(tmp_path):
    infra = copy_of_infra(tmp_path)
    (infra / "modules" / "sizing" / "broken.tf").write_text('locals {\n  tasks_queue_count = 1\n}\n')
    errors = configuration_errors(infra)
    assert any("Duplicate local value definition" in e for e in errors), errors
