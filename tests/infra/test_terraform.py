"""Offline checks of infra/: parse the Terraform and assert what matters.

No provider can be downloaded on these machines, so `terraform validate`
cannot run. These tests parse infra/*.tf with the HCL parser checkov uses
(bc-python-hcl2, in .venv-infra: `make test-infra`) and hold the
configuration to the code: the settings shared/config.py reads, the entry
points of functions/main.py, the collections shared/store.py writes, the
fields of a room document (shared/room_document.py), the log type shared/events.py
routes. They import nothing that needs Google's client libraries
(shared/store.py is read with `ast`), so .venv-infra suffices.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import zipfile
from pathlib import Path
from typing import Any

import hcl2
import pytest

from shared.config import ENV_VARS, LOCAL_ONLY_ENV_VARS, SECRET_ENV_VARS
from shared.events import LOG_TYPE, METRICS_LOG_TYPE
from tests.infra.terraform_cli import slice_files

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
FUNCTIONS = {"enqueue", "deadletter", "webhook", "status", "timeout", "sweep", "prepare"}
# Every function but the webhook is called only by a Google service of this
# project with an OIDC token: function -> the service account that invokes it.
INVOKERS = {
    "enqueue": {"pubsub_push", "tasks_invoker"},  # pushes, and scheduled messages' tasks at their time
    "deadletter": {"pubsub_push"}, "status": {"pubsub_push"},
    "timeout": {"tasks_invoker"},
    "prepare": {"tasks_invoker"},  # the prepare tasks (shared/prepare.py)
    "sweep": {"scheduler"},
}
# Settings of shared/config.py whose Terraform variable (same name, lower
# case) must default to the code's own default.
DELIVERY_SETTINGS = {
    "ACK_TIMEOUT_MS", "SEND_TIMEOUT_MS", "SEND_START_DEADLINE_MS", "MAX_SEND_ATTEMPTS", "SEND_RETRY_BASE_MS",
    "DEDUP_RETENTION", "MAX_QUEUED_MESSAGES", "MAX_ROOM_BYTES", "WATCHDOG_GRACE_MS", "SWEEP_BATCH_SIZE",
    "RETENTION_HOURS", "PREPARE_TIMEOUT_MS", "MAX_PREPARE_ATTEMPTS", "PREPARE_RETRY_BASE_MS",
    "MEDIA_MAX_BYTES", "MEDIA_TIMEOUT_MS", "SEQUENCE_GAP_TIMEOUT_MS",
}
# Firestore's document size limit (bytes).
FIRESTORE_MAX_DOCUMENT_BYTES = 1_048_576
# Set by Terraform but read by the platform, not by baton's code:
# THREADS is read by functions-framework (gunicorn threads per instance).
PLATFORM_ENV_VARS = {"THREADS"}
# Basic roles grant far more than any identity here needs.
BASIC_ROLES = {"roles/owner", "roles/editor", "roles/viewer"}


# ------------------------------------------------------------------ parsing --


def normalize(node: Any) -> Any:
    """bc-python-hcl2 wraps every attribute value in a one-element list and
    keeps line numbers; unwrap and drop them. Repeated blocks stay lists."""
    if isinstance(node, dict):
        return {k: normalize(v) for k, v in node.items() if not k.startswith("__")}
    if isinstance(node, list):
        items = [normalize(v) for v in node]
        return items[0] if len(items) == 1 else items
    return node


def as_list(value: Any) -> list:
    """A list value as a list: normalize() cannot tell a one-element list from
    the parser's wrapper, so it leaves the element alone."""
    return value if isinstance(value, list) else [value]


def blocks(body: dict, key: str) -> list[dict]:
    """Every `key { ... }` block of a body, as a list (possibly empty)."""
    return as_list(body.get(key, []))


def members(expr: str) -> set[str]:
    """The quoted strings of an expression such as toset(["a", "b"])."""
    return set(re.findall(r"""["']([^"']+)["']""", expr))


def parse(directory: Path) -> dict[str, Any]:
    """All .tf files of a directory, merged by block type."""
    merged: dict[str, Any] = {"resource": {}, "data": {}, "locals": {}, "variable": {}, "output": {}, "terraform": []}
    files = sorted(directory.glob("*.tf"))
    assert files, f"{directory} has no Terraform files"
    for path in files:
        with path.open() as fh:
            doc = hcl2.load(fh)
        for kind in ("resource", "data"):
            for block in doc.get(kind, []):
                for rtype, named in block.items():
                    for name, body in named.items():
                        assert name not in merged[kind].get(rtype, {}), f"{kind} {rtype}.{name} defined twice"
                        merged[kind].setdefault(rtype, {})[name] = normalize(body)
        for key in ("locals", "variable", "output"):
            for block in doc.get(key, []):
                merged[key].update(normalize(block))
        merged["terraform"] += [normalize(b) for b in doc.get("terraform", [])]
    return merged


@pytest.fixture(scope="module")
def tf() -> dict[str, Any]:
    return parse(INFRA)


@pytest.fixture(scope="module")
def tf_text() -> dict[str, str]:
    return {path.name: path.read_text() for path in sorted(INFRA.glob("*.tf"))}


def resource(tf: dict, rtype: str, name: str) -> dict:
    assert name in tf["resource"].get(rtype, {}), f"missing resource {rtype}.{name}"
    return tf["resource"][rtype][name]


def iam_grants(tf: dict) -> list[tuple[str, str, dict]]:
    """(type, name, body) of every IAM member/binding/policy resource."""
    return [
        (rtype, name, body)
        for rtype, named in tf["resource"].items()
        if re.search(r"_iam_(member|binding|policy)$", rtype)
        for name, body in named.items()
    ]


def string_constants(module: str) -> dict[str, str]:
    """Module-level string constants of shared/MODULE.py, without importing it
    (shared/store.py imports google.cloud.firestore, which .venv-infra does
    not have)."""
    tree = ast.parse((ROOT / "shared" / f"{module}.py").read_text())
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def store_collections() -> set[str]:
    """Every collection the Firestore adapters (shared/store.py and
    shared/records.py, and the status queue's failure counts in
    shared/status_queue.py) name in a
    `.collection(X)` or `.collection_group(X)` call, X a string or a constant
    of those modules or shared/room_document.py."""
    constants = {**string_constants("room_document"), **string_constants("store"), **string_constants("records"),
                 **string_constants("status_queue")}
    nodes = [n for module in ("store", "records", "status_queue")
             for n in ast.walk(ast.parse((ROOT / "shared" / f"{module}.py").read_text()))]
    found = set()
    for node in nodes:
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("collection", "collection_group") and node.args):
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                found.add(arg.value)
            elif isinstance(arg, ast.Name):
                assert arg.id in constants, f"shared/store.py: collection name {arg.id} is not a string constant"
                found.add(constants[arg.id])
            else:
                raise AssertionError(f"shared/store.py: a collection name built at run time: {ast.unparse(arg)}")
    assert found, "no collection found in shared/store.py"
    return found


# --------------------------------------------------------- Pub/Sub intake --


def push_subscription(tf: dict, key: str) -> tuple[dict, dict]:
    """The body of google_pubsub_subscription.push (one resource, for_each
    over local.push_subscriptions) and the entry `key` of that local map:
    the settings all push subscriptions share and the ones `key` has."""
    sub = resource(tf, "google_pubsub_subscription", "push")
    assert sub["for_each"] == "${local.push_subscriptions}"
    entries = tf["locals"]["push_subscriptions"]
    assert key in entries, f"no push subscription {key!r} in local.push_subscriptions"
    return sub, entries[key]


def dead_letter_policy(sub: dict) -> dict:
    """The push subscriptions' dead_letter_policy: a dynamic block, present
    exactly for the entries that name a dead_letter_topic."""
    dynamic = sub["dynamic"]["dead_letter_policy"]
    assert dynamic["for_each"].startswith("${each.value.dead_letter_topic == ")
    return dynamic["content"]


def test_push_subscription_is_ordered_authenticated_retried_and_dead_lettered(tf):
    sub, enqueue = push_subscription(tf, "enqueue")
    assert sub["enable_message_ordering"] is True
    assert sub["topic"] == "${each.value.topic}" and enqueue["topic"] == "${google_pubsub_topic.outbound.id}"
    push = sub["push_config"]
    # Each key is the function it pushes to.
    assert push["push_endpoint"] == "${google_cloudfunctions2_function.fn[each.key].service_config[0].uri}"
    assert set(tf["locals"]["push_subscriptions"]) <= set(FUNCTIONS)
    # Default wrapped envelope: enqueue parses {"message": ..., "subscription": ...}.
    assert "no_wrapper" not in push
    oidc = push["oidc_token"]
    assert oidc["service_account_email"] == "${google_service_account.pubsub_push.email}"
    assert oidc["audience"] == push["push_endpoint"]
    assert sub["retry_policy"]["minimum_backoff"] == "${each.value.minimum_backoff}" and enqueue["minimum_backoff"]
    dead = dead_letter_policy(sub)
    assert dead == {"dead_letter_topic": "${dead_letter_policy.value.dead_letter_topic}",
                    "max_delivery_attempts": "${dead_letter_policy.value.max_delivery_attempts}"}
    assert enqueue["dead_letter_topic"] == "${google_pubsub_topic.dead_letter.id}"
    assert enqueue["max_delivery_attempts"] == "${var.dead_letter_max_attempts}"
    assert "var.push_ack_deadline_seconds" in sub["ack_deadline_seconds"]


def test_enqueue_push_backs_off_to_600s_and_dead_letters_after_100_attempts(tf):
    """A room under back-pressure is retried for hours, not dead-lettered in
    minutes: the documented maxima of both settings."""
    sub, _ = push_subscription(tf, "enqueue")
    assert sub["retry_policy"]["maximum_backoff"] == "600s"
    attempts = tf["variable"]["dead_letter_max_attempts"]
    assert attempts["default"] == 100
    condition = attempts["validation"]["condition"]
    assert "var.dead_letter_max_attempts >= 5" in condition and "var.dead_letter_max_attempts <= 100" in condition


def test_dead_letters_are_pushed_in_order_to_deadletter(tf):
    """Every dead-lettered message is parked in its room, never skipped: an
    ordered, authenticated push to `deadletter` that keeps retrying."""
    assert "dead_letter_keep" not in tf["resource"]["google_pubsub_subscription"]
    topics = [b["topic"] for name, b in tf["resource"]["google_pubsub_subscription"].items() if name != "push"]
    topics += [entry["topic"] for entry in tf["locals"]["push_subscriptions"].values()]
    assert topics.count("${google_pubsub_topic.dead_letter.id}") == 1, (
        "the dead-letter topic has exactly one subscription, its consumer")
    sub, deadletter = push_subscription(tf, "deadletter")
    assert deadletter["topic"] == "${google_pubsub_topic.dead_letter.id}"
    assert sub["enable_message_ordering"] is True
    push = sub["push_config"]
    assert push["push_endpoint"] == "${google_cloudfunctions2_function.fn[each.key].service_config[0].uri}"
    assert "no_wrapper" not in push  # deadletter parses the same envelope as enqueue
    oidc = push["oidc_token"]
    assert oidc["service_account_email"] == "${google_service_account.pubsub_push.email}"
    assert oidc["audience"] == push["push_endpoint"]
    assert sub["retry_policy"]["maximum_backoff"] == "600s"
    assert sub["message_retention_duration"] == "${each.value.message_retention_duration}"
    assert deadletter["message_retention_duration"] == "604800s"
    assert sub["expiration_policy"]["ttl"] == ""
    # The end of the line: nothing dead-letters a dead letter (the dynamic
    # block is left out for an entry without a dead_letter_topic).
    dead_letter_policy(sub)
    assert deadletter["dead_letter_topic"] is None and deadletter["max_delivery_attempts"] is None
    assert "var.push_ack_deadline_seconds" in sub["ack_deadline_seconds"]


# The push subscriptions' addresses before they became one for_each resource
# (issue 45), the key each now has, and the name (after name_prefix) and
# topic it must keep: Pub/Sub
# cannot rename a subscription or move it to another topic, so a changed
# name (or no `moved` block) would destroy it, and its backlog, on the next
# apply.
MOVED_SUBSCRIPTIONS = {
    "enqueue_push": ("enqueue", "enqueue-push", "${google_pubsub_topic.outbound.id}"),
    "dead_letter_push": ("deadletter", "outbound-dead-letter-push", "${google_pubsub_topic.dead_letter.id}"),
    "status_push": ("status", "status-push", "${google_pubsub_topic.statuses.id}"),
}


def moved_blocks() -> set[tuple[str, str]]:
    """(from, to) of every `moved` block in infra/*.tf, as written."""
    found = set()
    for path in INFRA.glob("*.tf"):
        with path.open() as fh:
            for block in hcl2.load(fh).get("moved", []):
                block = normalize(block)
                found.add((block["from"], block["to"]))
    return found


def test_each_old_subscription_address_has_its_moved_block(tf):
    """An existing deployment's subscriptions are moved in the state, not
    destroyed and recreated: each old address has its `moved` block to the
    key with the same name and topic, and no old address is declared again."""
    moved = moved_blocks()
    subscriptions = tf["resource"]["google_pubsub_subscription"]
    for old, (key, name, topic) in MOVED_SUBSCRIPTIONS.items():
        assert (f"${{google_pubsub_subscription.{old}}}", f'${{google_pubsub_subscription.push["{key}"]}}') in moved, (
            f"google_pubsub_subscription.{old} has no moved block to push[\"{key}\"]")
        sub, entry = push_subscription(tf, key)
        assert sub["name"] == "${var.name_prefix}-${each.value.name_suffix}"
        assert (entry["name_suffix"], entry["topic"]) == (name, topic), (
            f"{key}: a new name or topic replaces the subscription")
        assert old not in subscriptions


def test_pubsub_agent_may_forward_dead_letters(tf):
    publish = resource(tf, "google_pubsub_topic_iam_member", "agent_publishes_dead_letters")
    ack = resource(tf, "google_pubsub_subscription_iam_member", "agent_acks_source")
    assert publish["role"] == "roles/pubsub.publisher" and "topic.dead_letter" in publish["topic"]
    assert ack["role"] == "roles/pubsub.subscriber"
    assert ack["subscription"] == '${google_pubsub_subscription.push["enqueue"].id}'
    assert publish["member"] == ack["member"] == "${local.pubsub_service_agent}"
    # The agent is created up front (it may not exist right after the API is
    # enabled), and the grants name it through that resource.
    agent = tf["locals"]["pubsub_service_agent"]
    assert agent == '${google_project_service_identity.agent["pubsub.googleapis.com"].member}'


# ---------------------------------------------------------------- access --


def test_only_the_webhook_is_public(tf):
    public = []
    for rtype, name, body in iam_grants(tf):
        who = str(body.get("member", "")) + str(body.get("members", "")) + str(body.get("policy_data", ""))
        if "allUsers" in who or "allAuthenticatedUsers" in who:
            public.append((rtype, name, body))
    assert len(public) == 1, [(t, n) for t, n, _ in public]
    rtype, _, body = public[0]
    assert rtype == "google_cloud_run_service_iam_member"
    assert body["service"] == '${google_cloudfunctions2_function.fn["webhook"].name}'
    assert body["role"] == "roles/run.invoker"
    # Only when allUsers is allowed; otherwise the webhook's invoker check is off.
    assert body["count"] == '${var.webhook_public_access == "all_users" ? 1 : 0}'


def test_internal_functions_are_internal_only_and_invoked_only_by_their_callers(tf):
    invokers = [
        (body["service"], body["member"])
        for rtype, _, body in iam_grants(tf)
        if body.get("role") == "roles/run.invoker"
    ]
    by_service: dict[str, set[str]] = {}
    for service, member in invokers:
        by_service.setdefault(service, set()).add(member)
    for function, accounts in INVOKERS.items():
        assert by_service[f'${{google_cloudfunctions2_function.fn["{function}"].name}}'] == {
            f"serviceAccount:${{google_service_account.{account}.email}}" for account in accounts}, function
    assert set(FUNCTIONS) - set(INVOKERS) == {"webhook"}
    # The admin function: the operators (var.operators) alone (infra/admin.tf).
    assert by_service.pop("${google_cloudfunctions2_function.admin.name}") == {"${each.value}"}
    assert len(by_service) == len(FUNCTIONS)  # and the public webhook, nothing else
    # No invoker role granted anywhere but on one function (none project-wide).
    assert all(rtype == "google_cloud_run_service_iam_member" for rtype, _, body in iam_grants(tf)
               if "invoker" in str(body.get("role", "")))
    # Only the webhook takes traffic from outside Google: enqueue, deadletter,
    # timeout and sweep are internal-only.
    ingress = resource(tf, "google_cloudfunctions2_function", "fn")["service_config"]["ingress_settings"]
    assert ingress == '${each.key == "webhook" ? "ALLOW_ALL" : "ALLOW_INTERNAL_ONLY"}'


def test_the_tasks_identity_is_usable_by_the_functions_that_create_tasks(tf):
    act_as = resource(tf, "google_service_account_iam_member", "function_acts_as_tasks_invoker")
    assert act_as["role"] == "roles/iam.serviceAccountUser"
    assert act_as["service_account_id"] == "${google_service_account.tasks_invoker.name}"
    assert act_as["for_each"] == "${local.stateful_functions}"
    enqueuer = resource(tf, "google_cloud_tasks_queue_iam_member", "function_enqueuer")
    assert enqueuer["role"] == "roles/cloudtasks.enqueuer"
    # Granted on the active queues (not the retired ones), for every function
    # that applies room events.
    assert "google_cloud_tasks_queue.ack_timeouts" in enqueuer["name"]
    assert "local.stateful_functions" in enqueuer["for_each"]
    assert "range(local.tasks_queue_count)" in enqueuer["for_each"]
    # The same functions on the active prepare queues: the prepare tasks come
    # out of the same room rules.
    prepare = resource(tf, "google_cloud_tasks_queue_iam_member", "function_prepare_enqueuer")
    assert prepare["role"] == "roles/cloudtasks.enqueuer"
    assert prepare["name"] == "${google_cloud_tasks_queue.prepare[each.value[1]].name}"
    assert prepare["for_each"] == enqueuer["for_each"].replace("range(local.tasks_queue_count)", "range(local.prepare_queue_count)")
    assert prepare["member"] == enqueuer["member"] and prepare["location"] == enqueuer["location"]


def test_the_functions_that_arm_timers_may_delete_them_on_the_same_queues(tf):
    """An ack deletes its attempt's pending timer (TimerScheduler.cancel)."""
    enqueuer = resource(tf, "google_cloud_tasks_queue_iam_member", "function_enqueuer")
    deleter = resource(tf, "google_cloud_tasks_queue_iam_member", "function_task_deleter")
    assert deleter["role"] == "roles/cloudtasks.taskDeleter"
    for key in ("for_each", "name", "member", "location"):
        assert deleter[key] == enqueuer[key], key


def test_no_basic_roles_and_every_role_is_explained_in_a_comment(tf, tf_text):
    roles = {body["role"] for _, _, body in iam_grants(tf)}
    assert roles, "no IAM grants found"
    assert not roles & BASIC_ROLES
    comments = "\n".join(
        line for text in tf_text.values() for line in text.splitlines() if line.lstrip().startswith("#")
    )
    unexplained = {role for role in roles if role not in comments}
    assert not unexplained, f"roles granted without a comment naming them: {unexplained}"


def test_every_caller_has_its_own_service_account(tf):
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    assert fn["service_config"]["service_account_email"] == "${google_service_account.function[each.key].email}"
    assert resource(tf, "google_service_account", "function")["for_each"] == "${local.functions}"
    for name in ("pubsub_push", "tasks_invoker", "scheduler", "build", "dataproc"):
        resource(tf, "google_service_account", name)
    assert fn["build_config"]["service_account"] == "${google_service_account.build.id}"


def test_service_account_ids_fit_with_the_longest_prefix(tf):
    """Account ids are 6..30 characters; name_prefix's validation must keep
    every id within that."""
    validation = tf["variable"]["name_prefix"]["validation"]["condition"]
    pattern = re.search(r'regex\("(.+?)",', validation).group(1).replace("\\\\", "\\")
    longest_prefix = next(
        "a" * n for n in range(40, 0, -1) if re.fullmatch(pattern, "a" * n)
    )
    longest_function = max(FUNCTIONS, key=len)
    for name, body in tf["resource"]["google_service_account"].items():
        account_id = body["account_id"].replace("${var.name_prefix}", longest_prefix)
        account_id = account_id.replace("${each.key}", longest_function)
        assert "${" not in account_id, account_id
        assert 6 <= len(account_id) <= 30, f"{name}: {account_id} ({len(account_id)} characters)"


# --------------------------------------------------------------- secrets --


def test_secrets_are_never_plain_environment_variables(tf, tf_text):
    env = tf["locals"]["function_env"]
    assert not set(env) & SECRET_ENV_VARS
    assert not any("secret" in str(value).lower() for value in env.values())
    assert set(tf["locals"]["all_secrets"]) == SECRET_ENV_VARS
    # Only the enabled platforms' secrets exist (and the handshake token, which every app uses).
    assert "contains(concat(var.platforms,['any']),s.provider)" in tf["locals"]["secrets"]
    per_function = tf["locals"]["function_secrets"]
    assert set(per_function) == FUNCTIONS
    # The webhook: all of them in direct mode; in queued mode it sends nothing,
    # so only what checks signatures and answers the handshake.
    assert per_function["webhook"] == "${local.webhook_secrets[var.webhook_mode]}"
    by_mode = tf["locals"]["webhook_secrets"]
    assert set(by_mode) == {"direct", "queued"}
    assert set(as_list(by_mode["direct"])) == SECRET_ENV_VARS
    tokens = {n for n in SECRET_ENV_VARS if n.endswith("_ACCESS_TOKEN")}
    assert set(as_list(by_mode["queued"])) == SECRET_ENV_VARS - tokens
    # Every other function may send: sweep re-drives rooms, deadletter runs the room rules.
    assert set(as_list(tf["locals"]["sending_secrets"])) == tokens
    assert all(per_function[fn] == "${local.sending_secrets}" for fn in FUNCTIONS - {"webhook"})
    assert "contains(keys(local.secrets),n)" in tf["locals"]["mounted_secrets"].replace(", ", ",")
    config = resource(tf, "google_cloudfunctions2_function", "fn")["service_config"]
    mounted = config["dynamic"]["secret_environment_variables"]
    assert mounted["for_each"] == "${toset(local.mounted_secrets[each.key])}"
    assert mounted["content"]["key"] == "${secret_environment_variables.value}"
    assert "google_secret_manager_secret.platform" in mounted["content"]["secret"]
    # No secret value anywhere in the Terraform, nor in its state.
    assert "google_secret_manager_secret_version" not in tf["resource"]
    assert not any(re.search(r"\bsecret_data\b", text) for text in tf_text.values())


def test_each_function_reads_only_its_own_secrets(tf):
    grants = resource(tf, "google_secret_manager_secret_iam_member", "function_reads")
    assert grants["role"] == "roles/secretmanager.secretAccessor"
    assert grants["for_each"] == "${local.secret_grants}"
    assert "function[each.value.fn]" in grants["member"]
    assert "platform[each.value.env]" in grants["secret_id"]


# ----------------------------------------------------- config and code --


def test_every_setting_the_code_reads_is_set_and_nothing_else(tf):
    plain = set(tf["locals"]["function_env"])
    secret = set().union(as_list(tf["locals"]["sending_secrets"]),
                         *(as_list(names) for names in tf["locals"]["webhook_secrets"].values()))
    wanted = set(ENV_VARS) - LOCAL_ONLY_ENV_VARS
    assert wanted - plain - secret == set(), "read by the code, not set by Terraform"
    assert plain - wanted - PLATFORM_ENV_VARS == set(), "set by Terraform, read by nobody"
    assert not LOCAL_ONLY_ENV_VARS & (plain | secret), "local-only settings must stay unset in the cloud"
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    assert fn["service_config"]["environment_variables"] == "${local.function_env}"


def test_threads_match_the_instance_concurrency(tf):
    env = tf["locals"]["function_env"]
    config = resource(tf, "google_cloudfunctions2_function", "fn")["service_config"]
    assert env["THREADS"] == "${tostring(var.function_threads)}"
    assert config["max_instance_request_concurrency"] == "${var.function_threads}"
    assert config["min_instance_count"] == "${var.min_instances[each.key]}"
    assert config["max_instance_count"] == "${local.max_instances[each.key]}"


def test_every_entry_point_exists_in_functions_main(tf):
    tree = ast.parse((ROOT / "functions" / "main.py").read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    functions = members(tf["locals"]["functions"])
    assert functions == FUNCTIONS
    assert functions <= defined, f"entry points missing from functions/main.py: {functions - defined}"
    fn = resource(tf, "google_cloudfunctions2_function", "fn")
    assert fn["for_each"] == "${local.functions}"
    assert fn["build_config"]["entry_point"] == "${each.key}"
    assert fn["build_config"]["runtime"] == "python311"
    source = fn["build_config"]["source"]["storage_source"]
    assert source["object"] == "${google_storage_bucket_object.source.name}"
    # The archive's object name carries its hash: a new build redeploys.
    obj = resource(tf, "google_storage_bucket_object", "source")
    assert "filesha256(local.source_archive)" in obj["name"]


@pytest.mark.parametrize("function", ["timeout", "enqueue", "prepare"])
def test_task_target_urls_are_deterministic_and_create_no_cycle(tf, function):
    """Cloud Tasks calls timeout, enqueue (scheduled messages) and prepare;
    every function needs those URLs, so they cannot come from the functions."""
    url = tf["locals"][f"{function}_url"]
    service = resource(tf, "google_cloudfunctions2_function", "fn")["name"].replace("${each.key}", function)
    assert url == f"https://{service}-${{data.google_project.this.number}}.${{var.region}}.run.app"
    env = tf["locals"]["function_env"]
    assert env[f"{function.upper()}_URL"] == f"${{local.{function}_url}}"
    assert f"{function.upper()}_URL" in ENV_VARS
    # The functions' own settings may not refer to the functions: a cycle.
    assert not any("google_cloudfunctions2_function" in str(value) for value in env.values())


def test_queues_match_what_the_code_expects(tf):
    queue = resource(tf, "google_cloud_tasks_queue", "ack_timeouts")
    env = tf["locals"]["function_env"]
    assert queue["count"] == "${local.tasks_queue_count + var.tasks_queues_retired}"
    assert queue["name"] == "${local.tasks_queue_prefix}-${count.index}"
    assert env["TASKS_QUEUE_PREFIX"] == "${local.tasks_queue_prefix}"
    assert env["TASKS_QUEUE_COUNT"] == "${tostring(local.tasks_queue_count)}"
    assert env["TASKS_LOCATION"] == queue["location"] == "${var.region}"
    assert env["TASKS_SERVICE_ACCOUNT"] == "${google_service_account.tasks_invoker.email}"
    assert queue["rate_limits"]["max_dispatches_per_second"] <= 500


def test_timer_tasks_are_retried_without_limit(tf):
    """A dropped timer would leave its room with nothing to wake it but the
    watchdog: -1 attempts and 0s duration both mean unlimited."""
    retry = resource(tf, "google_cloud_tasks_queue", "ack_timeouts")["retry_config"]
    assert retry["max_attempts"] in (-1, "${-1}")  # the parser keeps a negative number as an expression
    assert retry["max_retry_duration"] == "0s"
    assert retry["max_backoff"] == "60s"
    assert float(retry["min_backoff"].rstrip("s")) <= 1


# Cloud Tasks' limits per queue (https://cloud.google.com/tasks/docs/quotas,
# RateLimits in https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues).
MAX_DISPATCHES_PER_SECOND = 500
MAX_CONCURRENT_DISPATCHES = 5000


def test_prepare_queues_match_what_the_code_expects(tf):
    queue = resource(tf, "google_cloud_tasks_queue", "prepare")
    env = tf["locals"]["function_env"]
    assert queue["count"] == "${local.prepare_queue_count + var.prepare_queues_retired}"
    assert queue["name"] == "${local.prepare_queue_prefix}-${count.index}"
    assert env["PREPARE_QUEUE_PREFIX"] == "${local.prepare_queue_prefix}"
    assert env["PREPARE_QUEUE_COUNT"] == "${tostring(local.prepare_queue_count)}"
    # shared/prepare.py looks the prepare queues up in TASKS_LOCATION.
    assert queue["location"] == env["TASKS_LOCATION"] == "${var.region}"
    # With the default prefix, the names the code defaults to.
    prefix = tf["locals"]["prepare_queue_prefix"].replace("${var.name_prefix}", tf["variable"]["name_prefix"]["default"])
    assert prefix == ENV_VARS["PREPARE_QUEUE_PREFIX"][0]
    # Unset: derived from target_peak_messages_per_s (scale.tf), at least 1 queue.
    assert tf["variable"]["prepare_queue_count"]["default"] is None
    assert tf["locals"]["prepare_queue_count"] == "${module.sizing.prepare_queue_count}"
    # Not a prefix of the timer queues' names or the reverse: each queue is
    # listed, granted and drained as one kind only.
    timers = tf["locals"]["tasks_queue_prefix"].replace("${var.name_prefix}", tf["variable"]["name_prefix"]["default"])
    assert not prefix.startswith(timers) and not timers.startswith(prefix)


def test_prepare_queues_dispatch_as_fast_and_as_wide_as_the_service_allows(tf):
    """A preparation is mostly waiting on its upload (~1 s), so a queue at
    full rate has about rate x 1 s tasks in flight; thousands of rooms each
    preparing several messages must not be held back by the concurrency."""
    limits = resource(tf, "google_cloud_tasks_queue", "prepare")["rate_limits"]
    assert limits["max_dispatches_per_second"] == MAX_DISPATCHES_PER_SECOND
    assert limits["max_dispatches_per_second"] * 1 <= limits["max_concurrent_dispatches"] <= MAX_CONCURRENT_DISPATCHES
    # ... and `prepare` may scale to what its queues keep in flight at the
    # target peak: the sizing module refuses max_instances x threads below that.
    check = resource(parse(INFRA / "modules" / "sizing"), "terraform_data", "checks")
    conditions = [p["condition"] for p in blocks(check["lifecycle"], "precondition")]
    assert any("local.max_instances[f] * var.function_threads >= load" in c for c in conditions)


def test_prepare_tasks_are_retried_with_backoff_without_limit(tf):
    """A 5xx from `prepare` means Firestore or the platform was unreachable:
    retried from 1 s, doubling to 60 s, for as long as it takes."""
    retry = resource(tf, "google_cloud_tasks_queue", "prepare")["retry_config"]
    assert retry["max_attempts"] in (-1, "${-1}")
    assert retry["max_retry_duration"] == "0s"
    low, high = float(retry["min_backoff"].rstrip("s")), float(retry["max_backoff"].rstrip("s"))
    assert (low, high) == (1, 60)
    # Enough doublings to reach the maximum back-off.
    assert low * 2 ** retry["max_doublings"] >= high


def test_the_watchdog_runs_every_minute_with_oidc(tf):
    job = resource(tf, "google_cloud_scheduler_job", "sweep")
    assert job["schedule"] == "* * * * *"
    assert job["region"] == "${var.region}"
    target = job["http_target"]
    assert target["http_method"] == "POST"
    assert target["uri"] == '${google_cloudfunctions2_function.fn["sweep"].service_config[0].uri}'
    oidc = target["oidc_token"]
    assert oidc["service_account_email"] == "${google_service_account.scheduler.email}"
    assert oidc["audience"] == target["uri"]
    assert "oauth_token" not in target
    retry = job["retry_config"]
    assert 1 <= retry["retry_count"] <= 5  # Cloud Scheduler allows 0..5
    assert re.fullmatch(r"\$\{var\.function_timeout_seconds\}s", job["attempt_deadline"])
    apis = tf["resource"]["google_project_service"]["apis"]["for_each"]
    assert "cloudscheduler.googleapis.com" in members(apis)
    # The only scheduler job, and the scheduler identity invokes nothing else.
    assert list(tf["resource"]["google_cloud_scheduler_job"]) == ["sweep"]
    scheduler_grants = [name for _, name, body in iam_grants(tf)
                        if "google_service_account.scheduler." in str(body.get("member", ""))]
    assert scheduler_grants == ["scheduler_invokes_sweep"]


def test_ttl_covers_every_collection_the_store_writes(tf):
    ttl = resource(tf, "google_firestore_field", "ttl")
    collections = members(ttl["for_each"])
    assert store_collections() <= collections, f"no TTL policy: {store_collections() - collections}"
    # ... and nothing else: parked messages live in their room's queue, and the
    # receipts subcollection `rooms/*/sends` is gone (outcomes live in the room).
    assert collections == store_collections(), collections - store_collections()
    assert ttl["field"] == "expire_at"
    assert "ttl_config" in ttl
    assert tf["locals"]["function_env"]["RETENTION_HOURS"] == "${tostring(var.retention_hours)}"


def test_the_room_documents_large_fields_are_not_indexed(tf):
    """Single-field index exemptions on every list and map of a room (and the
    fields the brief names)."""
    exempt = resource(tf, "google_firestore_field", "room_unindexed")
    assert exempt["collection"] == "rooms"
    assert exempt["field"] == "${each.value}"
    assert exempt["index_config"] == {}, "an empty index_config turns every single-field index off"
    assert "ttl_config" not in exempt
    fields = members(exempt["for_each"])
    assert {"pending", "recent_ids", "ended", "counts", "in_flight", "awaiting"} <= fields
    from shared.room import RoomState  # pure Python; imported here so no other test depends on it
    from shared.room_document import room_to_doc

    doc = room_to_doc(RoomState(room_id="r"))
    big = {name for name, value in doc.items() if isinstance(value, (list, dict))}
    assert big <= fields, f"lists and maps of a room document left indexed: {big - fields}"
    # The watchdog's field is indexed behind the shard only (tests/infra/test_sequential_indexes.py).
    assert "wake_at_us" in doc and "wake_at_us" in fields
    assert "wake_at_us" in members(resource(tf, "google_firestore_index", "room_sharded")["for_each"])


def test_firestore_is_native_and_rules_deny_every_client(tf):
    db = resource(tf, "google_firestore_database", "main")
    assert db["type"] == "FIRESTORE_NATIVE"
    assert tf["locals"]["function_env"]["FIRESTORE_DATABASE"] == "${google_firestore_database.main.name}"
    ruleset = resource(tf, "google_firebaserules_ruleset", "deny_all")
    content = ruleset["source"]["files"]["content"]
    assert re.search(r"match /\{document=\*\*\}\s*\{\s*allow read, write: if false;\s*\}", content)
    assert "if true" not in content and content.count("allow") == 1
    release = resource(tf, "google_firebaserules_release", "firestore")
    # (default) enforces the release `cloud.firestore`; a named database
    # (a second deployment's) enforces `cloud.firestore/DATABASE`.
    assert release["name"] == ('${google_firestore_database.main.name == "(default)" ? "cloud.firestore" : '
                               '"cloud.firestore/${google_firestore_database.main.name}"}')
    assert db["name"] == "${var.firestore_database}"
    # The API wants the ruleset's full resource name, not its bare id.
    assert release["ruleset_name"] == "projects/${var.project_id}/rulesets/${google_firebaserules_ruleset.deny_all.name}"


def test_the_sink_routes_only_delivery_events(tf):
    sink = resource(tf, "google_logging_project_sink", "delivery_events")
    assert sink["filter"] == "${local.delivery_events_filter}"
    log_filter = tf["locals"]["delivery_events_filter"]
    assert re.search(rf'jsonPayload\.log_type\s*=\s*\\*"{re.escape(LOG_TYPE)}\\*"', log_filter)
    assert METRICS_LOG_TYPE not in log_filter
    # This deployment's services by exact name, not by prefix: "baton-"
    # would also match a second deployment "baton-2-...".
    assert "${local.services_filter}" in log_filter
    services = tf["locals"]["services_filter"]
    assert 'resource.type=\\"cloud_run_revision\\"' in services
    assert "resource.labels.service_name=(" in services and "local.service_names" in services
    assert "starts_with" not in services
    # The admin function's operator events (pause, skip, redrive) are delivery events too.
    assert tf["locals"]["service_names"] == \
        '${[for f in sort(concat(tolist(local.functions),[\'admin\'])) : "${var.name_prefix}-${f}"]}'
    assert 'bucket["delivery-log"]' in sink["destination"]
    assert sink["unique_writer_identity"] is True
    grant = resource(tf, "google_storage_bucket_iam_member", "sink_writes_log")
    assert grant["role"] == "roles/storage.objectCreator"
    assert grant["member"] == "${google_logging_project_sink.delivery_events.writer_identity}"


def test_buckets_are_private_and_versioned(tf):
    bucket = resource(tf, "google_storage_bucket", "bucket")
    assert members(str(list(tf["locals"]["bucket_expiry_days"]))) >= {"source", "delivery-log", "analytics"}
    assert bucket["uniform_bucket_level_access"] is True
    assert bucket["public_access_prevention"] == "enforced"
    assert bucket["versioning"]["enabled"] is True
    # Noncurrent versions expire, or a versioned bucket keeps every object forever.
    states = [rule["condition"].get("with_state") for rule in blocks(bucket, "lifecycle_rule")]
    assert "ARCHIVED" in states


# ------------------------------------------------- variables and layout --


def test_delivery_settings_default_to_the_codes_defaults_and_are_validated(tf):
    env = tf["locals"]["function_env"]
    for name in DELIVERY_SETTINGS:
        variable = name.lower()
        assert env[name] == f"${{tostring(var.{variable})}}", name
        body = tf["variable"][variable]
        assert body["type"] == "${number}", name
        assert body["default"] == int(ENV_VARS[name][0]), f"{variable}: default differs from shared/config.py"
        assert f"var.{variable} >= 1" in body["validation"]["condition"], name
    room_bytes = tf["variable"]["max_room_bytes"]["validation"]["condition"]
    assert f"var.max_room_bytes <= {FIRESTORE_MAX_DOCUMENT_BYTES}" in room_bytes
    assert not {"dedup_window", "max_pending_bytes"} & set(tf["variable"]), "settings the code no longer reads"


def test_every_function_has_instance_limits(tf):
    # max_instances unset: derived per function from the target peak (modules/sizing).
    assert tf["variable"]["max_instances"]["default"] is None
    sizing = parse(INFRA / "modules" / "sizing")
    assert set(members(str(list(sizing["locals"]["seconds_per_request"])))) == FUNCTIONS
    assert set(sizing["locals"]["per_message"]) == FUNCTIONS
    assert tf["locals"]["max_instances"] == "${module.sizing.max_instances}"
    for limit in ("min_instances", "max_instances"):
        body = tf["variable"][limit]
        assert limit == "max_instances" or set(body["default"]) == FUNCTIONS, limit
        conditions = [v["condition"] for v in blocks(body, "validation")]
        assert any(members(c) == FUNCTIONS for c in conditions), limit
        # and every value is a whole number of instances
        assert any("alltrue" in c and "floor" in c for c in conditions), limit


def test_variables_are_typed_and_described_and_outputs_described(tf):
    assert tf["variable"]
    for name, body in tf["variable"].items():
        assert body.get("type"), f"variable {name} has no type"
        assert body.get("description"), f"variable {name} has no description"
    for name, body in tf["output"].items():
        assert body.get("description"), f"output {name} has no description"
    for wanted in ("webhook_url", "topic", "dead_letter_subscription", "sweep_job", "delivery_log_bucket",
                   "analytics_bucket", "source_bucket"):
        assert wanted in tf["output"], f"missing output {wanted}"


def test_every_variable_is_used_and_every_used_variable_declared(tf_text):
    text = "\n".join(tf_text.values())
    declared = set(re.findall(r'^variable "([^"]+)"', text, re.M))
    used = set(re.findall(r"\bvar\.([a-z0-9_]+)", text))
    assert used - declared == set(), "used but not declared"
    assert declared - used == set(), "declared but never used"


def test_providers_are_pinned_to_the_checked_schemas_and_locked():
    """versions.tf, .terraform.lock.hcl, the schema check's PROVIDERS and the
    wheels it downloads (provider-schemas.txt) name the same versions: the
    schema that `make test-infra` checks is the one `terraform init` installs."""
    from tests.infra.provider_schema import PROVIDERS

    with (INFRA / "versions.tf").open() as fh:
        terraform = hcl2.load(fh)["terraform"][0]
    required = {name: spec[0] for name, spec in terraform["required_providers"][0].items() if not name.startswith("__")}
    assert re.fullmatch(r">= [0-9.]+, < [0-9.]+", terraform["required_version"][0])
    assert set(required) == set(PROVIDERS)
    lock = (INFRA / ".terraform.lock.hcl").read_text()
    locked = dict(re.findall(r'provider "registry\.terraform\.io/([\w/-]+)" \{\s*version\s*=\s*"([0-9.]+)"', lock))
    wheels = dict(re.findall(r"^([a-z-]+)==([0-9.]+) --hash=sha256:[0-9a-f]{64}$",
                             (ROOT / "tests" / "infra" / "provider-schemas.txt").read_text(), re.M))
    for name, (source, version, package, package_version) in PROVIDERS.items():
        assert required[name] == {"source": source, "version": version}, name
        assert locked.get(source) == version, f"{source}: .terraform.lock.hcl says {locked.get(source)}"
        assert wheels.get(package) == package_version, package
    assert set(locked) == {source for source, *_ in PROVIDERS.values()}
    # Every locked provider carries checksums for several platforms (zh:
    # hashes of the registry's zip files), so `terraform init` verifies what
    # it downloads.
    for block in re.findall(r'provider "[^"]+" \{(.*?)\n\}', lock, re.S):
        assert len(re.findall(r'"zh:[0-9a-f]{64}"', block)) >= 10


def test_layout_follows_terraform_google_modules():
    names = {path.name for path in INFRA.glob("*.tf")}
    assert {"versions.tf", "variables.tf", "outputs.tf", "main.tf"} <= names
    assert list((INFRA / "examples").glob("*.tfvars*")), "no example tfvars"
    example = next((INFRA / "examples").glob("*.tfvars*")).read_text()
    declared = {name for path in slice_files()
                for name in re.findall(r'^variable "([^"]+)"', path.read_text(), re.M)}
    assigned = set(re.findall(r"^([a-z0-9_]+)\s*=", example, re.M))
    assert assigned <= declared, f"example sets unknown variables: {assigned - declared}"


def test_the_deploy_guide_lists_every_resource_and_no_other(tf):
    """docs/deploy.md's "What it creates" names every resource, and names no
    resource that is gone (such as the old dead-letter pull subscription)."""
    guide = (ROOT / "docs" / "deploy.md").read_text()
    declared = {f"{rtype}.{name}" for rtype, named in tf["resource"].items() for name in named}
    sizing = parse(INFRA / "modules" / "sizing")["resource"]
    declared |= {f"{rtype}.{name}" for rtype, named in sizing.items() for name in named}
    named = set(re.findall(r"\b((?:google|time|terraform)_[a-z0-9_]+\.[a-z0-9_]+)", guide))
    assert declared - named == set(), "resources missing from docs/deploy.md"
    assert named - declared == set(), "docs/deploy.md names resources that do not exist"


def test_every_checkov_skip_gives_a_reason(tf_text):
    skips = [(name, line) for name, text in tf_text.items() for line in text.splitlines() if "checkov:skip" in line]
    assert skips, "expected the documented skips (e.g. the public webhook)"
    for name, line in skips:
        assert re.search(r"checkov:skip=CKV2?_[A-Z]+_\d+:\S.{10,}", line), f"{name}: skip without a reason: {line.strip()}"


# ------------------------------------------------------------- package --


def load_package_tool():
    spec = importlib.util.spec_from_file_location("package", ROOT / "tools" / "cloud" / "package.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_repo(root: Path, module_source: str) -> Path:
    (root / "functions").mkdir(parents=True)
    (root / "functions" / "main.py").write_text("def enqueue(request): ...\n")
    (root / "requirements.txt").write_text("functions-framework==3.10.2\n")
    (root / "shared" / "providers").mkdir(parents=True)
    (root / "shared" / "__init__.py").write_text("")
    (root / "shared" / "config.py").write_text(module_source)
    (root / "shared" / "providers" / "__init__.py").write_text("")
    (root / "shared" / "__pycache__").mkdir()
    (root / "shared" / "__pycache__" / "config.cpython-311.pyc").write_bytes(b"\0compiled")
    return root


def test_package_is_reproducible_and_holds_what_is_deployed(tmp_path):
    package = load_package_tool()
    first = package.build(tmp_path / "a.zip")
    second = package.build(tmp_path / "b.zip")
    assert first == second
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        infos = archive.infolist()
    names = [info.filename for info in infos]
    assert names == sorted(names)
    assert {"main.py", "requirements.txt", "shared/__init__.py", "shared/config.py",
            "shared/room/__init__.py"} <= set(names)
    assert not any("__pycache__" in n or n.endswith(".pyc") or n.startswith(("tools/", "tests/", "functions/")) for n in names)
    assert {info.date_time for info in infos} == {(1980, 1, 1, 0, 0, 0)}
    assert (tmp_path / "a.zip").read_bytes() != b"" and not (tmp_path / "a.zip.partial").exists()


def test_package_hash_follows_the_sources_not_the_clock(tmp_path):
    package = load_package_tool()
    repo = fake_repo(tmp_path / "repo", "STATE = 1\n")
    first = package.build(tmp_path / "1.zip", root=repo)
    (repo / "shared" / "config.py").touch()  # new mtime, same bytes
    assert package.build(tmp_path / "2.zip", root=repo) == first
    (repo / "shared" / "config.py").write_text("STATE = 2\n")
    assert package.build(tmp_path / "3.zip", root=repo) != first
    with zipfile.ZipFile(tmp_path / "3.zip") as archive:
        assert archive.namelist() == [
            "main.py", "requirements.txt", "shared/__init__.py", "shared/config.py", "shared/providers/__init__.py",
        ]


def test_log_based_metrics_count_each_delivery_line_once(tf):
    """The outbox logs a room's earlier lines again (`"relogged": true`,
    shared/outbox.py): most `acked` lines twice in bench-core. Log-based
    metrics count lines whatever the exclusions, so each metric's filter
    leaves the re-logged copies out (docs/event-log.md)."""
    delivery_log = tf["locals"]["delivery_log"]
    assert delivery_log.endswith(" AND NOT jsonPayload.relogged=true"), delivery_log
    metrics = tf["resource"]["google_logging_metric"]
    assert set(metrics) >= {"messages_ended", "delivery_counter", "delivery_latency"}
    for name, body in metrics.items():
        assert body["filter"].startswith("${local.delivery_log} AND "), (name, body["filter"])
