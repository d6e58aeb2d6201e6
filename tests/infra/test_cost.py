"""The cost model (tools/bench/cost*.py, docs/cost.md): pure arithmetic on the
committed bench snapshot, so unit tests of its logic, and the check that the
docs quote what it computes."""

from __future__ import annotations

import copy
import importlib
import json
import re
from pathlib import Path

import hcl2
import pytest

from tests.infra.terraform_cli import slice_files

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "docs" / "cost-inputs.json"


@pytest.fixture(scope="module")
def cost():
    """tools/bench/cost.py, which re-exports the names of its parts
    (cost_prices, cost_inputs, cost_model, cost_report)."""
    return importlib.import_module("tools.bench.cost")


@pytest.fixture(scope="module")
def snapshot() -> dict:
    return json.loads(SNAPSHOT.read_text())


@pytest.fixture(scope="module")
def deploy(cost) -> dict:
    return cost.deployment()


def line(result: dict, prefix: str) -> tuple:
    return next(row for row in result["items"] if row[0].startswith(prefix))


def test_the_snapshot_comes_from_a_real_bench_run(snapshot):
    assert snapshot["measured"].startswith("make bench-core, ")
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", snapshot["measured"])
    for mode, inputs in snapshot["modes"].items():
        assert inputs["counts"]["webhook_mode"] == mode
        assert inputs["counts"]["ended_messages"] > 1000
        assert inputs["events"]["per_message"] > 1 and inputs["functions"]


def test_the_deployment_is_read_from_the_terraform_defaults(deploy):
    variables = {}
    for path in slice_files():
        with path.open() as fh:
            variables |= {name: body for block in hcl2.load(fh).get("variable", []) for name, body in block.items()}
    assert deploy["cpu"] == float(variables["function_cpu"]["default"][0])
    assert deploy["threads"] == variables["function_threads"]["default"][0]
    assert deploy["memory_gib"] * 1024 == int(variables["function_memory"]["default"][0].removesuffix("Mi"))
    assert deploy["min_instances"] == variables["min_instances"]["default"][0]
    assert deploy["webhook_mode"] == variables["webhook_mode"]["default"][0]
    assert deploy["keep_request_logs"] is variables["keep_request_logs_in_default_bucket"]["default"][0]
    assert deploy["keep_routine_statuses"] is variables["keep_routine_statuses_in_default_bucket"]["default"][0]


def test_each_line_is_its_count_times_its_list_price(cost, snapshot, deploy):
    inputs = snapshot["modes"]["direct"]
    base = cost.cost(inputs, deploy, 20.0)
    more = copy.deepcopy(inputs)
    more["counts"]["firestore_reads_per_message"] += 1
    more["counts"]["tasks_created_per_message"] += 2
    after = cost.cost(more, deploy, 20.0)
    read_price = cost.PRICES["firestore_read"].usd * cost.MILLION
    task_price = cost.PRICES["tasks_operation"].usd * cost.MILLION
    assert line(after, "Firestore document reads")[3] - line(base, "Firestore document reads")[3] == pytest.approx(read_price)
    assert line(after, "Cloud Tasks")[3] - line(base, "Cloud Tasks")[3] == pytest.approx(2 * task_price)
    assert after["total"] - base["total"] == pytest.approx(read_price + 2 * task_price)
    assert base["total"] == pytest.approx(sum(row[3] for row in base["items"]))


def test_an_unknown_function_is_priced_as_one_more_invocation(cost, snapshot, deploy):
    inputs = copy.deepcopy(snapshot["modes"]["direct"])
    base = cost.cost(inputs, deploy, 20.0)
    inputs["counts"]["inv_newthing_per_message"] = 1.0
    after = cost.cost(inputs, deploy, 20.0)
    assert line(after, "function requests")[1] == pytest.approx(line(base, "function requests")[1] + 1)
    assert line(after, "function CPU")[3] > line(base, "function CPU")[3]
    # sweep runs on a schedule, not per message: a fixed monthly cost instead.
    inputs["counts"]["inv_sweep_per_message"] = 5.0
    assert cost.cost(inputs, deploy, 20.0)["total"] == pytest.approx(after["total"])


def test_billing_follows_cloud_runs_rules(cost):
    billed = cost.billed_seconds_per_second
    # Quiet: every request alone on its instance, at least 100 ms each.
    assert billed(0.01, 0.02, 8) / 0.01 == pytest.approx(0.1, rel=0.01)
    assert billed(0.01, 0.3, 8) / 0.01 == pytest.approx(0.35, rel=0.01)
    # Busy: requests share instances, never below total time / target concurrency.
    assert billed(1000, 0.1, 8) == pytest.approx(1000 * 0.1 / (8 * 0.6))
    assert billed(1000, 0.1, 1) == pytest.approx(1000 * 0.1 / 0.6)
    # More load, less billed time per request.
    per_request = [billed(rate, 0.05, 8) / rate for rate in (0.1, 1, 10, 100)]
    assert per_request == sorted(per_request, reverse=True)


def test_the_timers_deleted_on_ack_are_measured_and_priced_as_cloud_tasks_operations(cost, snapshot, deploy):
    """The local Cloud Tasks stand-in deletes an acked attempt's timer as
    the service does (tools/local/tasks_emulator.py), so the snapshot counts
    the DeleteTask calls, and the `timeout` requests are the timers that
    decided something (or came after their attempt ended: few). The Cloud
    Tasks line is creates + deletes + dispatches, as measured; each delete
    is priced in the invocation that makes it (about 30 ms there)."""
    inputs = snapshot["modes"]["direct"]
    counts = inputs["counts"]
    deleted, timeouts = counts["tasks_deleted_per_message"], counts["inv_timeout_per_message"]
    assert deleted > 0.5 and timeouts < 0.5, (deleted, timeouts)
    assert inputs["events"]["timeout_ignored_per_message"] < 0.2
    priced = cost.cost(inputs, deploy, 20.0)
    assert line(priced, "Cloud Tasks")[1] == pytest.approx(counts["tasks_created_per_message"] + deleted + timeouts)
    assert inputs["functions"]["webhook"]["deletes"] > 0
    without = {**inputs, "functions": {fn: {**ops, "deletes": 0} for fn, ops in inputs["functions"].items()}}
    assert cost.cost(without, deploy, 20.0)["compute_s"] < priced["compute_s"]


def test_log_switches_price_the_default_bucket_only(cost, snapshot, deploy):
    inputs = snapshot["modes"]["direct"]
    kept = cost.cost(inputs, {**deploy, "keep_delivery_events": True, "keep_request_logs": True}, 20.0)
    dropped = cost.cost(inputs, {**deploy, "keep_delivery_events": False, "keep_request_logs": False}, 20.0)
    for name in ("Cloud Logging: delivery events", "Cloud Logging: Cloud Run request logs"):
        assert line(kept, name)[3] > 0 and line(dropped, name)[3] == 0
        assert line(kept, name)[1] == line(dropped, name)[1]  # the volume is still shown


def test_routine_statuses_are_priced_out_of_default_as_infra_excludes_them(cost, snapshot, deploy):
    """The routine status lines (`sent`, after the ack) are measured apart,
    priced out of _Default by default and in it with the lever, and the
    _Default exclusion of infra/analytics.tf names exactly the reasons the
    model counts, on top of the sink's filter (so the sink keeps them)."""
    inputs = snapshot["modes"]["direct"]
    routine = inputs["events"]["routine_statuses_per_message"]
    assert 0.5 < routine <= inputs["events"]["status_ignored_per_message"]  # about one `sent` a message, and more
    default = cost.cost(inputs, {**deploy, "keep_routine_statuses": False}, 20.0)
    kept = cost.cost(inputs, {**deploy, "keep_routine_statuses": True}, 20.0)
    name = "Cloud Logging: routine statuses"
    assert line(default, name)[3] == 0 and line(kept, name)[3] > 0
    assert kept["total"] - default["total"] == pytest.approx(line(kept, name)[3])
    assert line(kept, name)[1] == pytest.approx(routine * line(kept, "Cloud Logging: delivery events")[1]
                                                / (inputs["events"]["per_message"] - routine))
    with (ROOT / "infra" / "analytics.tf").open() as fh:
        resources = {name: body for block in hcl2.load(fh)["resource"] for kind, named in block.items()
                     if kind == "google_logging_project_exclusion" for name, body in named.items()}
    text = resources["routine_statuses_from_default"]["filter"]
    text = text[0] if isinstance(text, list) else text
    assert text.startswith("${local.delivery_events_filter} AND ")
    assert sorted(re.findall(r'\\?"(\w+)\\?"', text.split("jsonPayload.reason=", 1)[1])) == sorted(
        cost.ROUTINE_STATUS_REASONS)


def test_the_docs_quote_the_model_and_nothing_else(cost, snapshot, deploy):
    mode = snapshot["default_mode"]
    inputs = snapshot["modes"][mode]
    result = cost.report(inputs, f"{SNAPSHOT.relative_to(ROOT)} ({snapshot['measured']})", deploy,
                         cost.REFERENCE_RATE, mode)
    total = cost.money(result["base"]["total"])
    doc = (ROOT / "docs" / "cost.md").read_text()
    block = re.search(r"<!-- make cost-docs: begin -->\n(.*)\n<!-- make cost-docs: end -->", doc, re.S).group(1)
    assert block == cost.render_markdown(result), "docs/cost.md is stale: run `make cost-docs` and paste it"
    assert doc.startswith(f"# What one million delivered messages cost\n\n**{total} per million delivered messages**")
    queued = cost.report(snapshot["modes"]["queued"], "", deploy, cost.REFERENCE_RATE, "queued")
    assert f"In queued mode: {cost.money(queued['base']['total'])}." in doc
    deploy_guide = (ROOT / "docs" / "deploy.md").read_text()
    assert f"**{total} per million delivered messages**" in deploy_guide
    quoted = set(re.findall(r"\$\d+\.\d\d", deploy_guide))
    assert quoted == {total}, f"docs/deploy.md quotes other figures: {quoted - {total}}"
    readme = (ROOT / "README.md").read_text()
    # The delivery cost is the model's; the only other figures are the scheduled-delivery add-on
    # (architecture.md) and the preparation add-on (checked below).
    quoted = {m for line in readme.splitlines() if "scheduled" not in line and "prepared" not in line
              for m in re.findall(r"\$\d+\.\d\d", line)}
    assert quoted == {total}, "README.md quotes another cost"


# ------------------------------------------------------------ preparation --


def test_preparation_is_a_line_of_its_own_and_leaves_the_delivery_figure_alone(cost, snapshot, deploy):
    mode = snapshot["default_mode"]
    inputs = snapshot["modes"][mode]
    result = cost.report(inputs, "", deploy, cost.REFERENCE_RATE, mode)
    assert result["base"]["total"] == pytest.approx(cost.cost(inputs, deploy, cost.REFERENCE_RATE)["total"])
    prepared = cost.money(result["prepare"]["total"])
    assert result["prepare"]["total"] > 0 and prepared != cost.money(result["base"]["total"])
    doc = (ROOT / "docs" / "cost.md").read_text()
    assert f"**{prepared} per million prepared messages** at {cost.REFERENCE_RATE:g} a second" in doc
    # ... and its worked arithmetic ends in the same total.
    section = doc.split("## Preparation: what a million prepared messages add", 1)[1].split("\n## ", 1)[0]
    assert f"| **total** | | **{prepared}** |" in section
    assert prepared not in (ROOT / "docs" / "deploy.md").read_text()
    # The README may quote it on a line about preparation, and then only the model's figure.
    readme = (ROOT / "README.md").read_text().split("\n\n")
    quoted = {m for para in readme if "prepare=media" in para
              for line in para.splitlines() if "prepared" in line for m in re.findall(r"\$\d+\.\d\d", line)}
    assert quoted <= {prepared}, f"README.md quotes another preparation cost: {quoted - {prepared}}"


def test_a_prepared_message_is_one_task_one_call_and_one_room_transaction(cost, snapshot, deploy):
    rows = cost.prepare_cost(snapshot["modes"]["direct"], deploy, 20.0)["items"]
    assert line({"items": rows}, "Cloud Tasks")[1] == 2  # create and dispatch
    assert line({"items": rows}, "function requests")[1] == 1
    assert line({"items": rows}, "Firestore document reads")[1] == 2  # the room, then in the transaction
    assert line({"items": rows}, "Firestore document writes")[1] == 1
    for name, qty, unit, usd in rows:
        price = next(p for p in cost.PRICES.values() if p.unit == unit)
        assert usd in (0.0, pytest.approx(qty * price.usd * cost.MILLION)), name


def test_a_preparation_is_billed_for_its_whole_upload_unless_uploads_share_instances(cost, snapshot, deploy, monkeypatch):
    inputs = snapshot["modes"]["direct"]
    seconds = cost.invocation_seconds(cost.PREPARE_OPS)
    assert 0.75 <= seconds <= 1.0  # mostly the upload's wait
    alone = cost.prepare_cost(inputs, deploy, 0.001)
    shared = cost.prepare_cost(inputs, deploy, 100.0)
    assert alone["compute_s"] >= seconds  # an instance of its own for the whole call
    assert shared["compute_s"] == pytest.approx(seconds / (deploy["threads"] * cost.LOAD["target_utilization"]))
    assert alone["total"] > shared["total"]
    # A slower upload costs more compute, nothing else.
    monkeypatch.setitem(cost.ASSUMED, "upload_ms", (1500.0, "slower"))
    slower = cost.prepare_cost(inputs, deploy, 100.0)
    assert slower["compute_s"] > shared["compute_s"]
    assert line(slower, "Cloud Tasks")[3] == line(shared, "Cloud Tasks")[3]
    # The `prepared` event is billed only where the delivery events are kept.
    dropped = cost.prepare_cost(inputs, {**deploy, "keep_delivery_events": False}, 100.0)
    assert line(dropped, "Cloud Logging: the `prepared`")[3] == 0 < line(shared, "Cloud Logging: the `prepared`")[3]


def test_the_window_and_proof_levers_remove_their_measured_counts(cost, snapshot, deploy):
    # Priced from the counts bench-core measured for each (issue 46), not from
    # an assumed read per message.
    inputs = copy.deepcopy(snapshot["modes"]["direct"])
    counts = inputs["counts"]
    counts.update(window_reads_per_message=0.03, window_writes_per_message=0.07,
                  proof_reads_per_message=0.2, proof_writes_per_message=0.01)
    base = cost.cost(inputs, deploy, 20.0)
    window = cost.cost(inputs, deploy, 20.0, frozenset({"sender_window_off"}))
    proof = cost.cost(inputs, deploy, 20.0, frozenset({"sent_proof_off"}))
    for result, gone in ((window, (0.03, 0.07)), (proof, (0.2, 0.01))):
        assert line(base, "Firestore document reads")[1] - line(result, "Firestore document reads")[1] \
            == pytest.approx(gone[0])
        assert line(base, "Firestore document writes")[1] - line(result, "Firestore document writes")[1] \
            == pytest.approx(gone[1])


def test_relogged_lines_are_kept_out_of_default_by_their_marker_and_priced_so(cost, snapshot, deploy):
    """The outbox's re-logged lines (`"relogged": true`, shared/outbox.py)
    stay out of _Default by default: an exclusion on top of the sink's
    filter (so the sink's bucket keeps them), on while the delivery events
    are kept there and keep_relogged_events_in_default_bucket is false, and
    the model prices them in _Default only with that variable."""
    assert deploy["keep_relogged_events"] is False
    with (ROOT / "infra" / "analytics.tf").open() as fh:
        resources = {name: body for block in hcl2.load(fh)["resource"] for kind, named in block.items()
                     if kind == "google_logging_project_exclusion" for name, body in named.items()}
    exclusion = resources["relogged_events_from_default"]
    text = exclusion["filter"][0] if isinstance(exclusion["filter"], list) else exclusion["filter"]
    assert text == "${local.delivery_events_filter} AND jsonPayload.relogged=true"
    count = exclusion["count"][0] if isinstance(exclusion["count"], list) else exclusion["count"]
    assert "var.keep_delivery_events_in_default_bucket" in count and "!var.keep_relogged_events_in_default_bucket" in count
    from shared.events import EVENT_FIELDS, DeliveryEvent, EventType

    assert EVENT_FIELDS["relogged"] == "boolean"
    assert DeliveryEvent(EventType.ACKED, "t", "webhook", "r", relogged=True).to_record()["relogged"] is True
    inputs = copy.deepcopy(snapshot["modes"]["direct"])
    inputs["events"].update(relogged_per_message=1.3, relogged_mean_bytes=380.0)
    name = "Cloud Logging: re-logged outbox lines"
    out = cost.cost(inputs, deploy, 20.0)
    kept = cost.cost(inputs, {**deploy, "keep_relogged_events": True}, 20.0)
    gone = cost.cost(inputs, {**deploy, "keep_relogged_events": True, "keep_delivery_events": False}, 20.0)
    assert line(out, name)[3] == 0 == line(gone, name)[3] < line(kept, name)[3]
    assert line(kept, name)[1] == pytest.approx(1.3 * (380.0 + cost.ASSUMED["log_overhead_bytes"][0]))
