"""Every variable's own `validation` blocks, evaluated by Terraform: a plan of
the provider-free slice of infra/ (tests/infra/terraform_cli.py) with good
values must raise no "Invalid value for variable", and one with bad values
must name exactly the variables given a bad value.

Values are checked in rounds: round k gives every variable its k-th value at
once (Terraform reports each failing variable), so a few plans cover the
whole table."""

from __future__ import annotations

import itertools
from typing import Any

import hcl2
import pytest

from shared.config import ENV_VARS, PREPARE_POISON_POLICIES, ZERO_ALLOWED
from tests.infra.terraform_cli import INFRA, VARIABLE_FILES, plan, slice_files
from tests.infra.test_terraform import FUNCTIONS, parse

# name -> (values it must accept, values it must refuse)
TABLE: dict[str, tuple[list[Any], list[Any]]] = {
    "region": (["europe-west1", "us-central1", "asia-northeast3"], ["europe-west1-b", "eu", "EUROPE-WEST1", ""]),
    "firestore_location": (["europe-west1", "eur3", "nam5"], ["europe-west1-b", "EU", ""]),
    "firestore_database": (["(default)", "baton-staging"], ["(other)", "Baton", "ab", "x-", "-x" + "a" * 70]),
    "name_prefix": (["baton", "b2", "chat-prod-eu-001"], ["a", "Baton", "baton-", "1baton", "a" * 17]),
    "function_timeout_seconds": ([15, 60, 1800], [14, 1801, 3600]),
    "function_memory": (["512Mi", "1Gi"], ["512", "0.5Gi", "512MB"]),
    "function_cpu": (["1", "0.5", "2"], ["0", "16", "one"]),
    "function_threads": ([1, 8, 1000], [0, 1001]),
    "push_ack_deadline_seconds": ([10, 60, 600], [9, 601]),
    "dead_letter_max_attempts": ([5, 100], [4, 101]),
    "status_dead_letter_max_attempts": ([5, 100], [4, 101]),
    "tasks_queue_count": ([None, 1, 2, 110], [0, 1.5, -3]),
    "tasks_queues_retired": ([0, 3, 999], [-1, 1000, 0.5]),
    "ack_timeout_ms": ([1, 3000], [0, 2592000001]),
    "max_room_bytes": ([900000, 1048576], [0, 1048577]),
    "webhook_mode": (["direct", "queued"], ["Direct", "async", ""]),
    "webhook_public_access": (["all_users", "invoker_iam_check_disabled"], ["allUsers", ""]),
    "outbound_publishers": ([[], ["serviceAccount:p@x.iam.gserviceaccount.com", "group:producers@example.com"]],
                            [["allUsers"], ["allAuthenticatedUsers"], ["p@x.iam.gserviceaccount.com"]]),
    "whatsapp_phone_number_id": (["123456789012345"], ["+1 555 0100", "abc", ""]),
    "whatsapp_senders": (["", "1000001:75,1000002:75", "1000001, 1000002:950"], ["+1 555", "1000001:fast", "1:2:3"]),
    "whatsapp_sender_rate": ([0, 75, 950], [-1, 7.5]),
    "platforms": ([["whatsapp"], ["whatsapp", "messenger", "instagram"]], [[], ["telegram"], ["WhatsApp"]]),
    "min_instances": ([{f: 0 for f in FUNCTIONS}],
                      [{"enqueue": 1}, {f: -1 for f in FUNCTIONS}, {f: 0 for f in FUNCTIONS - {"prepare"}}]),
    "max_instances": ([None, {f: 1 for f in FUNCTIONS}],
                      [{f: 0 for f in FUNCTIONS}, {f: 1 for f in FUNCTIONS - {"prepare"}}]),
    "target_peak_messages_per_s": ([None, 1, 10000, 50000], [0, 50001, -5]),
    "target_platform_shares": ([{"whatsapp": 1, "messenger": 0, "instagram": 0}],
                               [{"whatsapp": 1.5, "messenger": 0, "instagram": 0},
                                {"whatsapp": 1, "messenger": -0.5, "instagram": 0}]),
    "target_prepared_share": ([0, 0.25, 1], [-0.1, 1.1]),
    "index_shards": ([1, 128, 1024], [0, 1025, 2.5]),
    "prepare_ahead": ([0, 8, 1000], [-1, 1.5]),
    "prepare_timeout_ms": ([1, 30000], [0, 2592000001]),
    "max_prepare_attempts": ([1, 4], [0, 2.5]),
    "prepare_retry_base_ms": ([1, 1000], [0]),
    "prepare_poison": (list(PREPARE_POISON_POLICIES), ["dead-letter", "Park", "drop", ""]),
    "prepare_queue_count": ([None, 1, 2, 50], [0, 1.5]),
    "prepare_queues_retired": ([0, 3], [-1, 1000, 0.5]),
    "media_max_bytes": ([1, 5242880, 104857600], [0, 104857601, 0.5]),
    "media_timeout_ms": ([1, 20000], [0]),
    "sequence_gap_timeout_ms": ([1, 30000], [0, 2592000001]),
    "alert_timed_out_share": ([0.05, 0.5], [0, 1]),
}


def refused_variables(result) -> set[str]:
    return {e.variable for e in result.errors if e.variable}


def rounds(column: int) -> list[dict[str, Any]]:
    """Round k: every variable with a k-th value in `column` gets it."""
    lists = {name: values[column] for name, values in TABLE.items()}
    return [{name: vs[k] for name, vs in lists.items() if k < len(vs)}
            for k in range(max(len(vs) for vs in lists.values()))]


def test_every_variable_in_the_table_has_a_validation():
    tf = parse(INFRA)
    for name in TABLE:
        assert name in tf["variable"], name
        assert tf["variable"][name].get("validation"), f"{name} has no validation block"


@pytest.mark.parametrize("round_values", rounds(0), ids=lambda r: f"{len(r)}-variables")
def test_terraform_accepts_the_good_values(sizing_dir, round_values):
    result = plan(sizing_dir, round_values)
    invalid = [e.text for e in result.errors if e.summary == "Invalid value for variable"]
    assert invalid == [], invalid


@pytest.mark.parametrize("round_values", rounds(1), ids=lambda r: f"{len(r)}-variables")
def test_terraform_refuses_each_bad_value(sizing_dir, round_values):
    result = plan(sizing_dir, round_values)
    assert not result.ok
    # Each refusal is the variable's own message, not an evaluation error.
    unclear = [e.text for e in result.errors if e.summary != "Invalid value for variable"]
    assert unclear == [], unclear
    assert refused_variables(result) == set(round_values), (
        f"accepted: {set(round_values) - refused_variables(result)}, "
        f"refused though good: {refused_variables(result) - set(round_values)}")


def test_whole_number_settings_refuse_what_the_code_refuses(sizing_dir):
    """A whole-number setting Terraform passes as tostring(var.x) is
    validated as shared/config.py reads it: 0 allowed exactly for
    ZERO_ALLOWED, 1 always allowed, -1 never."""
    env = parse(INFRA)["locals"]["function_env"]
    names = sorted(name.lower() for name, value in env.items()
                   if name in ENV_VARS and value == f"${{tostring(var.{name.lower()})}}")
    assert {"prepare_ahead", "media_max_bytes", "sequence_gap_timeout_ms"} <= set(names)
    assert refused_variables(plan(sizing_dir, dict.fromkeys(names, 1))) == set()
    assert refused_variables(plan(sizing_dir, dict.fromkeys(names, 0))) == set(names) - set(ZERO_ALLOWED)
    assert refused_variables(plan(sizing_dir, dict.fromkeys(names, -1))) == set(names)


def test_every_variable_is_in_the_planned_slice():
    """The slice the tests plan (terraform_cli.slice_files: the variables
    files and scale.tf) holds every variable of infra/, so no validation goes
    unevaluated; a variable declared in any other file fails here."""
    planned = {path.name for path in slice_files()}
    for path in INFRA.glob("*.tf"):
        if path.name not in planned:
            with path.open() as fh:
                assert "variable" not in hcl2.load(fh), (
                    f"{path.name} declares variables: move them to the variables file of their concern "
                    f"({VARIABLE_FILES})")


def test_the_variables_are_split_by_concern():
    """variables.tf and each variables_<concern>.tf declare variables, each
    under 400 lines (the project's module size), and no variable twice."""
    files = [path for path in slice_files() if path.name != "scale.tf"]
    assert {"variables.tf", "variables_delivery.tf", "variables_platforms.tf"} <= {p.name for p in files}
    names: list[str] = []
    for path in files:
        with path.open() as fh:
            declared = [name for block in hcl2.load(fh).get("variable", []) for name in block]
        assert declared, f"{path.name} declares no variable"
        assert len(path.read_text().splitlines()) < 400, f"{path.name} is 400 lines or more: split it by concern"
        names += declared
    assert len(names) == len(set(names)), "a variable declared twice"


def test_the_example_tfvars_names_only_declared_variables():
    with (INFRA / "examples" / "terraform.tfvars.example").open() as fh:
        example = hcl2.load(fh)
    declared = parse(INFRA)["variable"]
    assert set(example) - set(declared) == set()


def test_rounds_cover_every_value():
    for column in (0, 1):
        given = [(n, repr(v)) for r in rounds(column) for n, v in r.items()]
        assert len(given) == sum(len(values[column]) for values in TABLE.values())
    assert list(itertools.chain.from_iterable(TABLE[n][1] for n in ["dead_letter_max_attempts"])) == [4, 101]
