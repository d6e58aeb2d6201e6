"""What a first `terraform apply` on a new project needs, least privilege, and
the reliability settings (issue 16), and the status queue's wiring (issue 11),
checked offline on the parsed infra/ (tests/infra/test_terraform.py has the
parser and the checks that predate these)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2
import pytest

from shared.config import ENV_VARS
from tests.infra.test_terraform import (
    FUNCTIONS,
    INFRA,
    ROOT,
    as_list,
    blocks,
    dead_letter_policy,
    iam_grants,
    members,
    parse,
    push_subscription,
    resource,
)


@pytest.fixture(scope="module")
def tf() -> dict[str, Any]:
    return parse(INFRA)


def depends_on(body: dict) -> list[str]:
    return [d.removeprefix("${").removesuffix("}") for d in as_list(body.get("depends_on", []))]


# Each variable's validation blocks are evaluated by Terraform itself:
# tests/infra/test_variable_validations.py.


def test_cross_variable_limits_are_preconditions(tf):
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    conditions = [p["condition"] for p in blocks(fn["lifecycle"], "precondition")]
    assert any("var.send_timeout_ms < var.ack_timeout_ms" in c for c in conditions)
    assert any("var.send_timeout_ms < var.function_timeout_seconds * 1000" in c for c in conditions)
    assert any("var.media_timeout_ms + 10000 <= var.function_timeout_seconds * 1000" in c for c in conditions)
    assert any("var.media_timeout_ms < var.prepare_timeout_ms" in c for c in conditions)
    assert any("var.media_max_bytes * var.function_threads <=" in c and "var.function_memory" in c for c in conditions)
    sub = resource(tf, "google_pubsub_subscription", "push")  # every push subscription (for_each)
    assert "var.push_ack_deadline_seconds >= var.function_timeout_seconds" in sub["lifecycle"]["precondition"]["condition"]


# ------------------------------------------------- a new project, in order --


def test_service_agents_are_created_before_anything_names_them(tf):
    agents = resource(tf, "google_project_service_identity", "agent")
    assert agents["provider"] == "${google-beta}"
    assert members(agents["for_each"]) == {"pubsub.googleapis.com", "cloudtasks.googleapis.com",
                                           "cloudscheduler.googleapis.com", "run.googleapis.com",
                                           "dataproc.googleapis.com"}
    apis = members(resource(tf, "google_project_service", "apis")["for_each"])
    assert members(agents["for_each"]) <= apis
    assert "google_project_service.apis" in depends_on(agents)
    # No function is event-triggered, so no Eventarc API and no agent for it.
    assert "eventarc.googleapis.com" not in apis
    assert "event_trigger" not in resource(tf, "google_cloudfunctions2_function", "fn")
    # The grants name the agents through the resource, never by a guessed email.
    for local in ("pubsub_service_agent", "tasks_service_agent", "scheduler_service_agent"):
        assert tf["locals"][local].startswith("${google_project_service_identity.agent[")
    text = "\n".join(p.read_text() for p in INFRA.glob("*.tf"))
    assert not re.search(r"@gcp-sa-[a-z]+\.iam\.gserviceaccount\.com", text)


def test_every_grant_waits_for_new_identities_to_propagate(tf):
    sleep = resource(tf, "time_sleep", "identities_propagate")
    assert int(sleep["create_duration"].rstrip("s")) >= 30
    waited = set(depends_on(sleep))
    assert "google_project_service_identity.agent" in waited
    assert {f"google_service_account.{n}" for n in tf["resource"]["google_service_account"]} <= waited
    assert "google_logging_project_sink.delivery_events" in waited  # its writer identity is new too
    for rtype, name, body in iam_grants(tf):
        assert "time_sleep.identities_propagate" in depends_on(body), f"{rtype}.{name} does not wait"


def test_the_functions_wait_for_the_grants_they_use(tf):
    sleep = resource(tf, "time_sleep", "grants_propagate")
    assert int(sleep["create_duration"].rstrip("s")) >= 60
    waited = set(depends_on(sleep))
    for grant in ("google_project_iam_member.build_builds_functions", "google_project_iam_member.function_firestore",
                  "google_cloud_tasks_queue_iam_member.function_enqueuer",
                  "google_cloud_tasks_queue_iam_member.function_prepare_enqueuer",
                  "google_service_account_iam_member.function_acts_as_tasks_invoker",
                  "google_secret_manager_secret_iam_member.function_reads",
                  "google_pubsub_topic_iam_member.webhook_publishes_statuses",
                  "google_service_account_iam_member.tasks_agent_mints_timer_tokens"):
        assert grant in waited, grant
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    assert "time_sleep.grants_propagate" in depends_on(fn)
    assert "google_cloud_tasks_queue.ack_timeouts" in depends_on(fn)
    assert "google_cloud_tasks_queue.prepare" in depends_on(fn)
    # The scheduler calls sweep only once its invoker grant exists.
    assert "google_cloud_run_service_iam_member.scheduler_invokes_sweep" in depends_on(
        resource(tf, "google_cloud_scheduler_job", "sweep"))


def test_the_webhook_is_public_without_allusers_where_domain_restricted_sharing_applies(tf):
    check_off = resource(tf, "terraform_data", "webhook_invoker_iam_check_disabled")
    assert check_off["count"] == '${var.webhook_public_access == "invoker_iam_check_disabled" ? 1 : 0}'
    command = check_off["provisioner"]["local-exec"]["command"]
    assert 'gcloud run services update ${google_cloudfunctions2_function.fn["webhook"].name} ' in command
    assert "--no-invoker-iam-check" in command and "--region=${var.region}" in command
    # Run again after each deployment of the webhook, which may rewrite its service.
    assert as_list(check_off["triggers_replace"]) == ['${google_cloudfunctions2_function.fn["webhook"].update_time}']
    public = resource(tf, "google_cloud_run_service_iam_member", "public_webhook")
    assert public["count"] == '${var.webhook_public_access == "all_users" ? 1 : 0}'
    guide = (ROOT / "docs" / "deploy.md").read_text()
    assert "Domain Restricted Sharing" in guide and 'webhook_public_access = "invoker_iam_check_disabled"' in guide


def test_a_committed_lock_file_and_a_gcs_backend_example():
    assert (INFRA / ".terraform.lock.hcl").is_file()
    with (INFRA / "examples" / "backend.tf.example").open() as fh:
        backend = hcl2.load(fh)["terraform"][0]["backend"][0]["gcs"]
    assert backend["bucket"] and backend["prefix"]
    assert not list(INFRA.glob("backend.tf")), "the backend stays an example: a local first apply needs no bucket"


# ------------------------------------------------------------- name_prefix --

# Arguments that name a resource in the project, and the ones whose value need
# not carry the prefix because it is scoped by something that does.
NAMING_ARGS = ("name", "account_id", "secret_id", "role_id")
SCOPED = {
    ("google_firestore_database", "main"): "var.firestore_database",
    ("google_firebaserules_release", "firestore"): "google_firestore_database.main.name",
    ("google_storage_bucket_object", "source"): "filesha256",  # inside the prefixed source bucket
    ("google_cloud_tasks_queue_iam_member", "function_enqueuer"): "google_cloud_tasks_queue.ack_timeouts",
    ("google_cloud_tasks_queue_iam_member", "function_task_deleter"): "google_cloud_tasks_queue.ack_timeouts",
    ("google_cloud_tasks_queue_iam_member", "function_prepare_enqueuer"): "google_cloud_tasks_queue.prepare",
}
# Locals that name queues; each must carry the prefix itself.
QUEUE_PREFIXES = ("local.tasks_queue_prefix", "local.prepare_queue_prefix")


def test_two_deployments_in_one_project_keep_apart(tf):
    """Everything a deployment names carries name_prefix; its own database,
    rules, TTL policies and sink; grants to its own database only."""
    for rtype, named in tf["resource"].items():
        for name, body in named.items():
            for arg in NAMING_ARGS:
                if arg not in body or not isinstance(body[arg], str):
                    continue
                if re.fullmatch(r"\$\{google_[a-z0-9_]+\.[a-z0-9_]+(\[[^\]]+\])?\.[a-z_]+\}", body[arg]):
                    continue  # names a resource of this module, itself checked here
                if (rtype, name) in SCOPED:
                    assert SCOPED[(rtype, name)] in body[arg], (rtype, name, body[arg])
                elif rtype.startswith("google_cloud_run_service_iam"):
                    continue  # `name` is not an argument there; `service` is the prefixed function
                else:
                    assert "var.name_prefix" in body[arg] or any(p in body[arg] for p in QUEUE_PREFIXES), (
                        f"{rtype}.{name}.{arg} = {body[arg]!r} would clash with a second deployment")
    for local in QUEUE_PREFIXES:
        assert tf["locals"][local.removeprefix("local.")].startswith("${var.name_prefix}-"), local
    db = resource(tf, "google_firestore_database", "main")
    assert db["name"] == "${var.firestore_database}"
    for name in ("ttl", "room_unindexed"):
        assert resource(tf, "google_firestore_field", name)["database"] == "${google_firestore_database.main.name}"
    firestore = resource(tf, "google_project_iam_member", "function_firestore")
    assert firestore["condition"]["expression"] == (
        'resource.name == \\"projects/${var.project_id}/databases/${google_firestore_database.main.name}\\"')
    exclusion = resource(tf, "google_logging_project_exclusion", "delivery_events_from_default")
    assert exclusion["filter"] == resource(tf, "google_logging_project_sink", "delivery_events")["filter"]
    assert "firestore_database" in tf["variable"]["name_prefix"]["description"]


# -------------------------------------------------------------- timer queues --


@pytest.mark.parametrize("queue_name, count, retired, enqueuer", [
    ("ack_timeouts", "tasks_queue_count", "tasks_queues_retired", "function_enqueuer"),
    ("prepare", "prepare_queue_count", "prepare_queues_retired", "function_prepare_enqueuer"),
])
def test_fewer_queues_never_drops_their_tasks(tf, queue_name, count, retired, enqueuer):
    queue = resource(tf, "google_cloud_tasks_queue", queue_name)
    env = tf["locals"]["function_env"]
    # The retired queues exist, but nobody writes to them or may.
    assert queue["count"] == f"${{local.{count} + var.{retired}}}"  # local: var.{count} or derived (scale.tf)
    assert env[count.upper()] == f"${{tostring(local.{count})}}"
    assert f"range(local.{count})" in resource(tf, "google_cloud_tasks_queue_iam_member", enqueuer)["for_each"]
    assert tf["variable"][retired]["default"] == 0
    # A queue that still holds a task is not deleted: the destroy fails.
    check = queue["provisioner"]["local-exec"]
    assert check["when"] == "${destroy}"
    command = check["command"]
    assert "gcloud tasks list --queue=${self.name}" in command and "--limit=1" in command
    assert "|| exit 1" in command and "exit 1; }" in command
    assert retired in command
    guide = (ROOT / "docs" / "deploy.md").read_text()
    assert "Fewer timer queues" in guide and retired in guide


def queue_grants(tf: dict, queue: str) -> dict[str, dict]:
    """Every IAM grant on the Cloud Tasks queues of resource `queue`."""
    return {name: body for rtype, name, body in iam_grants(tf)
            if rtype == "google_cloud_tasks_queue_iam_member" and f"google_cloud_tasks_queue.{queue}[" in body["name"]}


def stateful(tf: dict, mode: str) -> set[str]:
    """local.stateful_functions in webhook_mode `mode`, evaluated."""
    return FUNCTIONS - set(as_list(tf["locals"]["stateless_functions"][mode]))


def test_the_prepare_queues_take_tasks_from_exactly_the_functions_that_apply_room_transitions(tf):
    """Who may create prepare tasks: every function that applies room events
    (they hold Firestore; `prepare` and `timeout` among them), in both
    webhook modes, and nobody else; enqueuer only: no prepare task is ever
    deleted, listed or run by hand."""
    grants = queue_grants(tf, "prepare")
    assert set(grants) == {"function_prepare_enqueuer", "admin_prepare_enqueuer"}
    # The admin function applies room events too (resume, skip, redrive: infra/admin.tf).
    assert grants["admin_prepare_enqueuer"]["member"] == "serviceAccount:${google_service_account.admin.email}"
    body = grants["function_prepare_enqueuer"]
    assert body["role"] == "roles/cloudtasks.enqueuer"
    assert "local.stateful_functions" in body["for_each"]
    assert body["member"] == "serviceAccount:${google_service_account.function[each.value[0]].email}"
    firestore = resource(tf, "google_project_iam_member", "function_firestore")
    assert firestore["for_each"] == "${local.stateful_functions}"
    for mode in ("direct", "queued"):
        granted = stateful(tf, mode)
        assert {"prepare", "timeout", "enqueue", "sweep", "deadletter", "status"} <= granted, mode
        assert ("webhook" in granted) == (mode == "direct")
    # The timer queues: the same functions (prepare arms the timer of a send
    # it starts), and a taskDeleter for cancelled timers besides.
    assert set(queue_grants(tf, "ack_timeouts")) == {"function_enqueuer", "function_task_deleter", "admin_enqueuer"}


def test_prepare_is_called_only_by_cloud_tasks_and_may_send(tf):
    invokers = [body for _, _, body in iam_grants(tf) if body.get("role") == "roles/run.invoker"
                and body.get("service") == '${google_cloudfunctions2_function.fn["prepare"].name}']
    assert [b["member"] for b in invokers] == ["serviceAccount:${google_service_account.tasks_invoker.email}"]
    # The OIDC token the tasks carry is minted as the tasks identity.
    assert tf["locals"]["function_env"]["TASKS_SERVICE_ACCOUNT"] == "${google_service_account.tasks_invoker.email}"
    # The upload and the send it may start need the access tokens, like timeout.
    assert tf["locals"]["function_secrets"]["prepare"] == tf["locals"]["function_secrets"]["timeout"] == "${local.sending_secrets}"
    # Internal only: the one public function is the webhook.
    ingress = resource(tf, "google_cloudfunctions2_function", "fn")["service_config"]["ingress_settings"]
    assert ingress == '${each.key == "webhook" ? "ALLOW_ALL" : "ALLOW_INTERNAL_ONLY"}'


def memory_bytes(value: str) -> int:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", value).groups()
    return int(number) * (1024 if unit == "Gi" else 1) * 2**20


def test_the_defaults_pass_the_preparation_preconditions(tf):
    """The default deployment is not refused by its own preconditions
    (function timeout, prepare timeout, memory per media file)."""
    var = {name: body.get("default") for name, body in tf["variable"].items()}
    assert var["media_timeout_ms"] + 10_000 <= var["function_timeout_seconds"] * 1000
    assert var["media_timeout_ms"] < var["prepare_timeout_ms"]
    assert var["media_max_bytes"] * var["function_threads"] <= memory_bytes(var["function_memory"]) / 2
    assert memory_bytes("1Gi") == 2 * memory_bytes("512Mi")


# ----------------------------------------------------------- least privilege --


def grants_to(tf: dict, account: str) -> list[tuple[str, str, dict]]:
    return [(t, n, b) for t, n, b in iam_grants(tf) if f"google_service_account.{account}." in str(b.get("member", ""))]


def test_the_analytics_identity_cannot_write_the_source_or_the_event_log(tf):
    worker = resource(tf, "google_project_iam_member", "dataproc_worker")
    assert worker["role"] == "roles/dataproc.worker"
    expression = worker["condition"]["expression"]
    assert 'resource.service != \\\\"storage.googleapis.com\\\\"' in expression
    assert 'format("!(%s)"' in expression
    assert 'bucket["source"]' in expression and 'bucket["delivery-log"]' in expression
    writable = {"roles/storage.objectAdmin", "roles/storage.objectCreator", "roles/storage.objectUser", "roles/storage.admin"}
    for _rtype, name, body in grants_to(tf, "dataproc"):
        if body["role"] in writable:
            assert body.get("bucket") == '${google_storage_bucket.bucket["analytics"].name}', name
        assert body["role"] not in {"roles/editor", "roles/storage.admin"}


def test_the_build_identity_reads_only_the_function_sources_and_no_logs(tf):
    builder = grants_to(tf, "build")
    assert [(t, n) for t, n, _ in builder] == [("google_project_iam_member", "build_builds_functions")]
    body = builder[0][2]
    assert body["role"] == "roles/run.builder"  # artifacts and logEntries.create; no log reading
    expression = body["condition"]["expression"]
    assert 'resource.service != \\\\"storage.googleapis.com\\\\"' in expression
    assert 'bucket["source"]' in expression and "gcf-v2-sources-${data.google_project.this.number}-${var.region}" in expression
    assert not any("logging" in b["role"] and "logWriter" not in b["role"] for _, _, b in builder)


def test_queued_mode_gives_the_webhook_no_room_state_and_no_send_token(tf):
    stateless = tf["locals"]["stateless_functions"]
    assert stateless["direct"] == [] and as_list(stateless["queued"]) == ["webhook"]
    assert tf["locals"]["stateful_functions"].replace(" ", "") == (
        "${setsubtract(local.functions,local.stateless_functions[var.webhook_mode])}")
    for rtype, name in (("google_project_iam_member", "function_firestore"),
                        ("google_service_account_iam_member", "function_acts_as_tasks_invoker")):
        assert resource(tf, rtype, name)["for_each"] == "${local.stateful_functions}"
    publish = resource(tf, "google_pubsub_topic_iam_member", "webhook_publishes_statuses")
    assert publish["for_each"].startswith('${merge(var.webhook_mode == "queued" ? {')
    # Publisher on the statuses topic and its error queue only, never a project role.
    assert not any(b.get("role") == "roles/pubsub.publisher" for t, _, b in iam_grants(tf) if t == "google_project_iam_member")


def test_producers_may_publish_to_the_outbound_topic_only(tf):
    producers = resource(tf, "google_pubsub_topic_iam_member", "producers_publish")
    assert producers["for_each"] == "${toset(var.outbound_publishers)}"
    assert producers["topic"] == "${google_pubsub_topic.outbound.id}"
    assert producers["role"] == "roles/pubsub.publisher"
    assert producers["member"] == "${each.value}"
    assert tf["variable"]["outbound_publishers"]["default"] == []


def test_no_project_wide_storage_or_firestore_grant_without_a_condition(tf):
    for rtype, name, body in iam_grants(tf):
        if rtype == "google_project_iam_member" and re.search(r"storage|datastore|run\.builder|dataproc", body["role"]):
            assert "condition" in body, f"{name}: {body['role']} project-wide with no condition"


# ------------------------------------------------------------- reliability --


def test_every_push_subscription_backs_off_to_600s_and_never_expires(tf):
    for name, sub in tf["resource"]["google_pubsub_subscription"].items():
        assert sub["expiration_policy"]["ttl"] == "", name
        if "push_config" in sub:
            assert sub["retry_policy"]["maximum_backoff"] == "600s", name
            assert sub["enable_message_ordering"] is True, name


def test_dead_letter_topics_have_consumers_and_the_agent_may_forward(tf):
    topics = {"dead_letter": push_subscription(tf, "deadletter")[1]["topic"],
              "statuses_dead_letter": resource(tf, "google_pubsub_subscription", "statuses_error_queue")["topic"]}
    for topic, consumer_topic in topics.items():
        assert consumer_topic == f"${{google_pubsub_topic.{topic}.id}}"
    publishes = {b["topic"] for b in tf["resource"]["google_pubsub_topic_iam_member"].values()
                 if b["member"] == "${local.pubsub_service_agent}"}
    assert publishes == {f"${{google_pubsub_topic.{t}.id}}" for t in topics}
    acks = {b["subscription"] for b in tf["resource"]["google_pubsub_subscription_iam_member"].values()}
    assert acks == {'${google_pubsub_subscription.push["enqueue"].id}', '${google_pubsub_subscription.push["status"].id}',
                    "${google_pubsub_subscription.statuses_error_queue.id}"}  # the last: the admin function's pulls


# ------------------------------------------------ the status queue (issue 11) --


def test_the_status_queue_is_wired_like_the_enqueue_path(tf):
    sub, status = push_subscription(tf, "status")
    assert status["topic"] == "${google_pubsub_topic.statuses.id}"
    assert resource(tf, "google_pubsub_topic", "statuses")["name"] == "${var.name_prefix}-statuses"
    assert sub["enable_message_ordering"] is True
    push = sub["push_config"]
    assert push["push_endpoint"] == "${google_cloudfunctions2_function.fn[each.key].service_config[0].uri}"
    assert push["oidc_token"]["service_account_email"] == "${google_service_account.pubsub_push.email}"
    assert push["oidc_token"]["audience"] == push["push_endpoint"]
    assert sub["retry_policy"] == {"minimum_backoff": "${each.value.minimum_backoff}", "maximum_backoff": "600s"}
    assert status["minimum_backoff"] == "10s"
    assert dead_letter_policy(sub)["dead_letter_topic"] == "${dead_letter_policy.value.dead_letter_topic}"
    assert (status["dead_letter_topic"], status["max_delivery_attempts"]) == (
        "${google_pubsub_topic.statuses_dead_letter.id}", "${var.status_dead_letter_max_attempts}")
    error_topic = resource(tf, "google_pubsub_topic", "statuses_dead_letter")
    assert error_topic["name"] == "${var.name_prefix}-statuses-dead-letter"
    queue = resource(tf, "google_pubsub_subscription", "statuses_error_queue")
    assert queue["name"] == "${var.name_prefix}-statuses-error-queue"
    assert "push_config" not in queue  # pulled by `baton statuses list|replay`
    assert queue["message_retention_duration"] == "604800s"
    assert queue["retain_acked_messages"] is True
    assert queue["expiration_policy"]["ttl"] == ""


def test_both_modes_share_their_settings_with_the_code(tf):
    env = tf["locals"]["function_env"]
    assert env["WEBHOOK_MODE"] == "${var.webhook_mode}"
    assert env["STATUS_TOPIC"] == "${google_pubsub_topic.statuses.name}"
    # The error queue is the topic the code derives from STATUS_TOPIC.
    assert resource(tf, "google_pubsub_topic", "statuses_dead_letter")["name"] == (
        resource(tf, "google_pubsub_topic", "statuses")["name"] + "-dead-letter")
    assert tf["variable"]["webhook_mode"]["default"] == ENV_VARS["WEBHOOK_MODE"][0]
    assert tf["variable"]["status_max_attempts"]["default"] == int(ENV_VARS["STATUS_MAX_ATTEMPTS"][0])


def test_no_file_in_infra_names_a_path_outside_the_repository():
    for path in Path(INFRA).rglob("*.tf"):
        assert "/home/" not in path.read_text() and "/tmp/" not in path.read_text(), path
