"""Offline checks of infra/: parse the Terraform with python-hcl2 and assert
the properties that matter (no provider can be downloaded here, so
`terraform validate` cannot run)."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import hcl2
import pytest

from shared.config import ENV_VARS, LOCAL_ONLY_ENV_VARS, SECRET_ENV_VARS
from shared.events import LOG_TYPE
from shared.store import DEAD_LETTERS, REJECTED, ROOMS, SENDS

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
# Read by functions-framework, not by baton's code: request threads per instance.
PLATFORM_ENV_VARS = {"THREADS"}


def unquote(value: Any) -> Any:
    """python-hcl2 keeps the quotes of string literals and labels."""
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def clean(node: Any) -> Any:
    if isinstance(node, dict):
        return {unquote(k): clean(v) for k, v in node.items() if k != "__is_block__"}
    if isinstance(node, list):
        return [clean(v) for v in node]
    return unquote(node)


@pytest.fixture(scope="module")
def tf() -> dict[str, Any]:
    """All .tf files of infra/, merged: {"resource": {type: {name: body}}, "locals": {...}, ...}."""
    merged: dict[str, Any] = {"resource": {}, "locals": {}, "variable": {}, "output": {}, "terraform": [], "data": {}}
    files = sorted(INFRA.glob("*.tf"))
    assert files, "infra/ has no Terraform files"
    for path in files:
        with path.open() as fh:
            doc = clean(hcl2.load(fh))
        for block in doc.get("resource", []):
            for rtype, named in block.items():
                merged["resource"].setdefault(rtype, {}).update(named)
        for block in doc.get("locals", []):
            merged["locals"].update(block)
        for block in doc.get("variable", []):
            merged["variable"].update(block)
        for block in doc.get("output", []):
            merged["output"].update(block)
        merged["terraform"] += doc.get("terraform", [])
    return merged


def resource(tf: dict, rtype: str, name: str) -> dict:
    assert name in tf["resource"].get(rtype, {}), f"missing {rtype}.{name}"
    return tf["resource"][rtype][name]


def block(body: dict, key: str) -> dict:
    value = body[key]
    return value[0] if isinstance(value, list) else value


def hcl_set(expr: str) -> set[str]:
    """The string members of a `toset([...])` expression."""
    return set(re.findall(r'"([^"]+)"', expr))


def test_push_subscription_is_ordered_authenticated_and_dead_lettered(tf):
    sub = resource(tf, "google_pubsub_subscription", "enqueue_push")
    assert sub["enable_message_ordering"] is True
    push = block(sub, "push_config")
    assert 'fn["enqueue"]' in push["push_endpoint"]
    oidc = block(push, "oidc_token")
    assert "google_service_account.pubsub_push.email" in oidc["service_account_email"]
    assert 'fn["enqueue"]' in oidc["audience"]
    dead = block(sub, "dead_letter_policy")
    assert "google_pubsub_topic.dead_letter" in dead["dead_letter_topic"]
    assert "var.dead_letter_max_attempts" in str(dead["max_delivery_attempts"])
    assert block(sub, "retry_policy")["minimum_backoff"]
    keep = resource(tf, "google_pubsub_subscription", "dead_letter_keep")
    assert "google_pubsub_topic.dead_letter" in keep["topic"]


def test_pubsub_agent_may_forward_dead_letters(tf):
    pub = resource(tf, "google_pubsub_topic_iam_member", "agent_publishes_dead_letters")
    sub = resource(tf, "google_pubsub_subscription_iam_member", "agent_acks_source")
    assert pub["role"] == "roles/pubsub.publisher" and sub["role"] == "roles/pubsub.subscriber"
    assert "gcp-sa-pubsub" in tf["locals"]["pubsub_service_agent"]


def test_only_the_webhook_is_public(tf):
    public = []
    for rtype, named in tf["resource"].items():
        if not rtype.endswith(("_iam_member", "_iam_binding", "_iam_policy")):
            continue
        for name, body in named.items():
            members = str(body.get("member", "")) + str(body.get("members", ""))
            if "allUsers" in members or "allAuthenticatedUsers" in members:
                public.append((rtype, name, body.get("service", "")))
    assert len(public) == 1, public
    assert 'fn["webhook"]' in public[0][2]


def test_enqueue_and_timeout_are_invoked_only_by_their_callers(tf):
    enqueue = resource(tf, "google_cloud_run_service_iam_member", "pubsub_invokes_enqueue")
    timeout = resource(tf, "google_cloud_run_service_iam_member", "tasks_invoke_timeout")
    assert 'fn["enqueue"]' in enqueue["service"] and "pubsub_push" in enqueue["member"]
    assert 'fn["timeout"]' in timeout["service"] and "tasks_invoker" in timeout["member"]
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    ingress = block(fn, "service_config")["ingress_settings"]
    assert "ALLOW_INTERNAL_ONLY" in ingress and '"webhook"' in ingress


def test_secrets_are_never_plain_environment_variables(tf):
    env = tf["locals"]["function_env"]
    assert not set(env) & SECRET_ENV_VARS
    assert set(tf["locals"]["secrets"]) == set(SECRET_ENV_VARS)
    per_function = tf["locals"]["function_secrets"]
    assert set(per_function["webhook"]) == set(SECRET_ENV_VARS)
    assert all(set(names) <= SECRET_ENV_VARS for names in per_function.values())
    config = block(resource(tf, "google_cloudfunctions2_function", "fn"), "service_config")
    dynamic = block(config, "dynamic")["secret_environment_variables"]
    assert "local.function_secrets" in dynamic["for_each"]
    # No secret value anywhere in the Terraform: no secret version resource.
    assert "google_secret_manager_secret_version" not in tf["resource"]


def test_every_setting_the_code_reads_is_set_and_nothing_else(tf):
    env = set(tf["locals"]["function_env"])
    wanted = set(ENV_VARS) - LOCAL_ONLY_ENV_VARS - SECRET_ENV_VARS
    assert wanted - env == set(), "read by the code, not set by Terraform"
    assert env - wanted - PLATFORM_ENV_VARS == set(), "set by Terraform, read by nobody"
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    assert "local.function_env" in block(fn, "service_config")["environment_variables"]


def test_every_entry_point_exists_in_functions_main(tf):
    tree = ast.parse((ROOT / "functions" / "main.py").read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    functions = hcl_set(tf["locals"]["functions"])
    assert functions == {"enqueue", "webhook", "timeout"}
    assert functions <= defined
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    build = block(fn, "build_config")
    assert build["entry_point"] == "${each.key}" and build["runtime"] == "python311"
    assert "local.functions" in fn["for_each"]


def test_timeout_url_and_queues_match_what_the_code_expects(tf):
    assert "${var.name_prefix}-timeout-" in tf["locals"]["timeout_url"]
    assert ".run.app" in tf["locals"]["timeout_url"]
    queue = resource(tf, "google_cloud_tasks_queue", "ack_timeouts")
    assert queue["name"] == "${local.tasks_queue_prefix}-${count.index}"
    assert "var.tasks_queue_count" in str(queue["count"])
    assert tf["locals"]["function_env"]["TASKS_QUEUE_COUNT"] == "${tostring(var.tasks_queue_count)}"
    assert block(queue, "rate_limits")["max_dispatches_per_second"] == 500


def test_ttl_covers_every_collection_the_store_writes(tf):
    ttl = resource(tf, "google_firestore_field", "ttl")
    assert hcl_set(ttl["for_each"]) == {ROOMS, SENDS, REJECTED, DEAD_LETTERS}
    assert ttl["field"] == "expire_at"
    assert "ttl_config" in ttl


def test_security_rules_deny_every_client(tf):
    ruleset = resource(tf, "google_firebaserules_ruleset", "deny_all")
    content = block(block(ruleset, "source"), "files")["content"]
    assert "allow read, write: if false" in content
    assert "if true" not in content
    release = resource(tf, "google_firebaserules_release", "firestore")
    assert release["name"] == "cloud.firestore"


def test_the_sink_routes_only_delivery_events(tf):
    sink = resource(tf, "google_logging_project_sink", "delivery_events")
    assert f'jsonPayload.log_type=\\"{LOG_TYPE}\\"' in sink["filter"] or f'jsonPayload.log_type="{LOG_TYPE}"' in sink["filter"]
    assert sink["unique_writer_identity"] is True
    grant = resource(tf, "google_storage_bucket_iam_member", "sink_writes_log")
    assert grant["role"] == "roles/storage.objectCreator" and "writer_identity" in grant["member"]


def test_variables_are_typed_and_described(tf):
    assert tf["variable"]
    for name, body in tf["variable"].items():
        assert body.get("type"), f"variable {name} has no type"
        assert body.get("description"), f"variable {name} has no description"
    for name, body in tf["output"].items():
        assert body.get("description"), f"output {name} has no description"


def test_provider_versions_are_bounded(tf):
    required = block(tf["terraform"][0], "required_providers")
    google = required["google"]
    assert ">=" in google["version"] and "<" in google["version"].replace(">=", "")


def test_package_is_reproducible_and_holds_what_is_deployed(tmp_path):
    import importlib.util
    import zipfile

    spec = importlib.util.spec_from_file_location("package", ROOT / "tools" / "package.py")
    package = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(package)
    first = package.build(tmp_path / "a.zip")
    second = package.build(tmp_path / "b.zip")
    assert first == second
    names = zipfile.ZipFile(tmp_path / "a.zip").namelist()
    assert names == sorted(names)
    assert {"main.py", "requirements.txt", "shared/room.py", "shared/providers/whatsapp.py"} <= set(names)
    assert not any("__pycache__" in n or n.startswith(("tools/", "tests/")) for n in names)
