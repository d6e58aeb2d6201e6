"""What the README and docs/deploy.md tell a new user to type exists: every
`make` target they name is a target of the Makefile (or mk/*.mk), every
Terraform variable they name is declared in infra/, every output they read
is an output, and every other snake_case name in docs/deploy.md is one of
the kinds listed here (a field, a collection, a resource, an event)."""

from __future__ import annotations

import re

import hcl2

from tests.infra.terraform_cli import INFRA, ROOT

PAGES = [ROOT / "README.md", ROOT / "docs" / "deploy.md"]
# snake_case names in docs/deploy.md that are not Terraform variables or
# outputs, by kind; a new one must be added here on purpose.
OTHER_NAMES = {
    # room document fields and kept records (shared/room_document.py, shared/store.py)
    "blocked_reason", "head_since_us", "in_flight", "paused_at_us", "paused_reason", "recent_ids", "wake_at_us",
    "expire_at", "dead_letters", "rejected_messages", "room_id", "message_id", "deliver_at", "delay_s",
    # prepare_poison's value, Terraform meta-arguments and resource names
    "dead_letter", "depends_on", "for_each", "dead_letter_push", "enqueue_push", "status_push", "tasks_invoke_prepare",
    # delivery events and their reasons (docs/event-log.md)
    "status_ignored", "sent_status", "after_acked",
    # Meta: webhook fields, permissions, the Graph edge
    "message_deliveries", "message_reads", "messaging_seen", "subscribed_apps",
    "whatsapp_business_management", "whatsapp_business_messaging",
}


def declared(kind: str) -> set[str]:
    names: set[str] = set()
    for path in list(INFRA.glob("*.tf")):
        with path.open() as fh:
            for block in hcl2.load(fh).get(kind, []):
                names |= set(block)
    return names


def make_targets() -> set[str]:
    targets: set[str] = set()
    for path in [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]:
        for line in path.read_text().splitlines():
            match = re.match(r"^([a-z][a-z0-9-]*(?:\s+[a-z][a-z0-9-]*)*)\s*:(?!=)", line)
            if match:
                targets |= set(match.group(1).split())
    return targets


def test_every_make_target_the_pages_name_exists():
    targets = make_targets()
    assert {"package", "test-infra", "scale-model", "scale-table", "loadtest-cloud"} <= targets
    for page in PAGES:
        named = set(re.findall(r"\bmake ([a-z][a-z0-9-]+)", page.read_text()))
        assert named - targets == set(), f"{page.name} names make targets that do not exist"


def test_make_help_names_existing_targets_the_sizing_ones_among_them():
    """`make help` (the Makefile's help recipe) lists only targets that
    exist, and lists the sizing's two: the model and the table."""
    recipe = re.search(r"^help:\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe, "the Makefile has no help target"
    named = set(re.findall(r"\bmake ([a-z][a-z0-9-]+)", recipe.group(1)))
    assert named - make_targets() == set(), "make help names targets that do not exist"
    assert {"scale-model", "scale-table", "loadtest-cloud"} <= named


def test_every_variable_and_output_the_deploy_guide_names_exists():
    variables, outputs = declared("variable"), declared("output")
    text = (ROOT / "docs" / "deploy.md").read_text()
    named = set(re.findall(r"`([a-z][a-z0-9_]*_[a-z0-9_]+)(?:\s*=[^`]*)?`", text))
    # `name = value` inside a code span or a block is always a variable.
    blocks = "\n".join(re.findall(r"```[a-z]*\n(.*?)```", text, re.S))
    assigned = set(re.findall(r"^\s*([a-z][a-z0-9_]+)\s*=\s", blocks, re.M)) | set(
        re.findall(r"`([a-z][a-z0-9_]+) = [^`]+`", text)) - OTHER_NAMES
    assert assigned - variables == set(), "docs/deploy.md assigns variables that do not exist"
    read = set(re.findall(r"output -raw ([a-z_]+)", text))
    assert read - outputs == set(), "docs/deploy.md reads outputs that do not exist"
    unknown = named - variables - outputs - OTHER_NAMES
    assert unknown == set(), f"docs/deploy.md names what is not a variable, an output or a known name: {unknown}"
    # The steps a new project needs name these.
    for needed in ("alert_notification_channels", "target_peak_messages_per_s", "whatsapp_senders", "platforms"):
        assert re.search(rf"`{needed}\b", text) and needed in variables, needed


def test_the_readme_names_only_existing_variables():
    text = (ROOT / "README.md").read_text()
    variables = declared("variable")
    assigned = set(re.findall(r"`([a-z][a-z0-9_]+) = [^`]+`", text))
    assert assigned - variables == set()
