"""infra/ against the pinned providers' own schemas: the offline stand-in for
`terraform validate` (tests/infra/provider_schema.py).

`make test-infra` downloads and extracts the schemas first; run directly,
these tests fail and say so rather than skip, since they are the only check
that every resource type, argument and block exists."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.infra.provider_schema import PROVIDERS, SCHEMA_DIR, check_module, load_schemas

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict]:
    try:
        return load_schemas(SCHEMA_DIR)
    except FileNotFoundError as exc:
        pytest.fail(str(exc))


@pytest.fixture
def copy_of_infra(tmp_path: Path) -> Path:
    target = tmp_path / "infra"
    shutil.copytree(INFRA, target, ignore=shutil.ignore_patterns(".terraform", "*.tfstate*"))
    return target


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer contains {old!r}: update this test"
    path.write_text(text.replace(old, new, 1))


def test_the_schemas_are_the_pinned_provider_versions(schemas):
    for name, (source, version, _, _) in PROVIDERS.items():
        assert (schemas[name]["source"], schemas[name]["version"]) == (source, version)
        assert schemas[name]["resources"], name
    # A sample the rest of the checks lean on: blocks, attributes, required.
    sub = schemas["google"]["resources"]["google_pubsub_subscription"]
    assert sub["attributes"]["topic"]["required"] and sub["attributes"]["name"]["required"]
    assert not sub["blocks"]["push_config"]["many"]
    assert "oidc_token" in sub["blocks"]["push_config"]["block"]["blocks"]
    assert "google_project_service_identity" not in schemas["google"]["resources"]
    assert "google_project_service_identity" in schemas["google-beta"]["resources"]


def test_every_resource_argument_and_block_exists_in_the_pinned_providers(schemas):
    """Every resource and data source type (for the provider it names), every
    argument and nested block, every required argument, and every
    `type.name.attribute` reference of infra/*.tf (operations.tf included)."""
    assert check_module(INFRA, schemas) == []


def test_the_check_catches_a_misspelt_argument(schemas, copy_of_infra):
    edit(copy_of_infra / "pubsub.tf", "enable_message_ordering    = true", "enable_message_orderin     = true")
    errors = check_module(copy_of_infra, schemas)
    assert any("google_pubsub_subscription.push" in e and "'enable_message_orderin'" in e for e in errors), errors


def test_the_check_catches_a_misspelt_nested_block_and_a_missing_required_argument(schemas, copy_of_infra):
    edit(copy_of_infra / "scheduler.tf", "    oidc_token {", "    oidc_tokn {")
    edit(copy_of_infra / "pubsub.tf", "  topic                      = each.value.topic\n", "")
    errors = check_module(copy_of_infra, schemas)
    assert any("google_cloud_scheduler_job.sweep.http_target" in e and "'oidc_tokn'" in e for e in errors), errors
    assert any("google_pubsub_subscription.push" in e and "required argument 'topic'" in e for e in errors), errors


def test_the_check_catches_a_beta_resource_on_the_ga_provider(schemas, copy_of_infra):
    edit(copy_of_infra / "iam.tf", "  provider   = google-beta\n", "")
    errors = check_module(copy_of_infra, schemas)
    assert any("google_project_service_identity.agent" in e and "has no resource" in e for e in errors), errors


def test_the_check_catches_a_reference_to_a_missing_attribute(schemas, copy_of_infra):
    edit(copy_of_infra / "scheduler.tf", 'fn["sweep"].service_config[0].uri', 'fn["sweep"].service_configs[0].uri')
    errors = check_module(copy_of_infra, schemas)
    assert any("has no attribute 'service_configs'" in e for e in errors), errors


def test_the_gcs_backend_example_is_checked_too(schemas, copy_of_infra):
    example = INFRA / "examples" / "backend.tf.example"
    (copy_of_infra / "backend.tf").write_text(example.read_text())
    assert check_module(copy_of_infra, schemas) == []
    edit(copy_of_infra / "backend.tf", "    bucket =", "    buckett =")
    errors = check_module(copy_of_infra, schemas)
    assert any("backend gcs" in e and "buckett" in e for e in errors), errors
    assert any("required setting 'bucket'" in e for e in errors), errors
