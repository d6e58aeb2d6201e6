"""The sizing (infra/modules/sizing, called by infra/scale.tf) evaluated by
Terraform: `terraform plan` of the provider-free slice of infra/ for the
defaults, the example tfvars and 1,000 / 10,000 / 30,000 msg/s, which must
plan and leave headroom everywhere, and for inputs that must be refused,
each with its precondition's own message."""

from __future__ import annotations

import ast
import re
from typing import Any

import hcl2
import pytest

from tests.infra.terraform_cli import INFRA, ROOT, plan
from tests.infra.test_terraform import parse
from tools.sim.scale_model import sizing_table
from tools.sim.scale_model.sizing_table import CASES, senders

EXAMPLE = INFRA / "examples" / "terraform.tfvars.example"
QUEUE_DISPATCH_LIMIT = 500  # Cloud Tasks, per queue
QUEUES_PER_REGION = 1000  # Cloud Tasks, per project and region
MAX_INSTANCES_LIMIT = 1000  # Cloud Run, without a quota increase


# Targets that must plan: the configurations docs/scale.md shows (1,000
# msg/s on two upgraded numbers, 10,000 on sixteen, 30,000 on forty-eight
# with the shards and threads it needs).
TARGETS: dict[str, dict[str, Any]] = {
    "1000": CASES["1,000 msg/s"], "10000": CASES["10,000 msg/s"], "30000": CASES["30,000 msg/s"],
}


def sizing_of(result) -> dict[str, Any]:
    assert result.ok, "\n".join(e.text for e in result.errors) or result.log[-3000:]
    return result.outputs["sizing"]


def assert_carries_its_target(sizing: dict[str, Any]) -> None:
    """Every component carries the target within its documented limit."""
    for name, component in sizing["components"].items():
        assert component["capacity"] >= component["at_target"], name
        assert sizing["headroom"][name] >= 1, name
    assert sizing["max_messages_per_s"] >= sizing["target_peak_messages_per_s"]
    target = sizing["target_peak_messages_per_s"]
    assert target * 1.2 / sizing["tasks_queue_count"] <= QUEUE_DISPATCH_LIMIT
    assert sizing["tasks_queue_count"] + sizing["prepare_queue_count"] + 1 <= QUEUES_PER_REGION
    assert all(n <= MAX_INSTANCES_LIMIT for n in sizing["max_instances"].values())
    assert sizing["writes_per_index_shard"] <= 500
    assert sizing["usable_sender_capacity"]["whatsapp"] >= target * sizing["components"]["whatsapp senders"]["per_message"]
    assert sizing["sender_capacity"]["whatsapp"] * 0.7 == pytest.approx(sizing["usable_sender_capacity"]["whatsapp"])


def test_the_defaults_plan_and_are_sized_for_what_one_number_carries(sizing_dir):
    sizing = sizing_of(plan(sizing_dir))
    assert_carries_its_target(sizing)
    # Unset target: what the one configured number carries.
    assert sizing["whatsapp_number_rates"] == [75]
    # 75 msg/s configured, less the send window's guard, at most 70% busy.
    assert sizing["target_peak_messages_per_s"] == sizing["usable_sender_capacity"]["whatsapp"]
    assert sizing["target_peak_messages_per_s"] == pytest.approx(75 / 1.05 * 0.7)


def test_the_example_plans_and_says_the_target_it_is_sized_for(sizing_dir):
    text = EXAMPLE.read_text()
    stated = re.search(r"Sized for ([\d,]+) messages/s", text)
    assert stated, "the example does not say the target it is sized for"
    sizing = sizing_of(plan(sizing_dir, {}, var_file=EXAMPLE.resolve(), required=False))
    assert_carries_its_target(sizing)
    assert sizing["target_peak_messages_per_s"] == int(stated.group(1).replace(",", ""))
    with EXAMPLE.open() as fh:
        assert hcl2.load(fh)["target_peak_messages_per_s"] in ([sizing["target_peak_messages_per_s"]],
                                                               sizing["target_peak_messages_per_s"])


@pytest.mark.parametrize("name", list(TARGETS))
def test_each_target_plans_with_headroom_everywhere(sizing_dir, name):
    sizing = sizing_of(plan(sizing_dir, TARGETS[name]))
    assert sizing["target_peak_messages_per_s"] == TARGETS[name]["target_peak_messages_per_s"]
    assert_carries_its_target(sizing)


def test_counts_grow_with_the_target_and_a_derived_count_passes_the_hand_set_rules(sizing_dir):
    sized = [sizing_of(plan(sizing_dir, TARGETS[name])) for name in ("1000", "10000")]
    assert sized[0]["tasks_queue_count"] < sized[1]["tasks_queue_count"]
    assert sized[0]["max_instances"]["webhook"] < sized[1]["max_instances"]["webhook"]
    # The derived counts at 30,000 msg/s, set by hand, plan the same: one cap
    # (Cloud Tasks' 1,000 queues per region) for both.
    derived = sizing_of(plan(sizing_dir, TARGETS["30000"]))
    by_hand = sizing_of(plan(sizing_dir, {**TARGETS["30000"], "tasks_queue_count": derived["tasks_queue_count"],
                                          "prepare_queue_count": derived["prepare_queue_count"],
                                          "max_instances": derived["max_instances"]}))
    assert by_hand["components"] == derived["components"]


# Inputs that must be refused: (name, variables, a phrase of the refusing
# precondition's message).
REFUSED = [
    ("one number for 10,000 msg/s", {"target_peak_messages_per_s": 10000},
     "carry 71 msg/s (their rates in whatsapp_senders, less the send window's 50 ms guard), 50 at the 70% busy "
     "they are sized for (docs/scale.md): short by 9950 msg/s of the target's WhatsApp share (10000 msg/s). It "
     "needs 200 numbers at 75 msg/s (Meta's default tier) or 16 at 950 msg/s"),
    ("fifteen numbers for 10,000 msg/s", {"target_peak_messages_per_s": 10000, "whatsapp_senders": senders(15, 950)},
     "carry 13571 msg/s (their rates in whatsapp_senders, less the send window's 50 ms guard), 9500 at the 70% busy "
     "they are sized for (docs/scale.md): short by 500 msg/s of the target's WhatsApp share (10000 msg/s). It needs "
     "200 numbers at 75 msg/s (Meta's default tier) or 16 at 950 msg/s"),
    ("a number above Meta's highest tier", {"whatsapp_senders": "1000001:1200"},
     "passes Meta's highest throughput tier, 1,000 msg/s per number"),
    ("shares that do not add up to 1", {"platforms": ["whatsapp", "messenger"],
                                        "target_platform_shares": {"whatsapp": 0.5, "messenger": 0.2, "instagram": 0}},
     "target_platform_shares must add up to 1"),
    ("a share for a platform not enabled", {"target_platform_shares": {"whatsapp": 0.5, "messenger": 0.5, "instagram": 0}},
     "gives a share to a platform not in platforms (whatsapp)"),
    ("Messenger above one Page's 300 calls/s", {"platforms": ["whatsapp", "messenger"],
                                                "target_platform_shares": {"whatsapp": 0.5, "messenger": 0.5, "instagram": 0},
                                                **TARGETS["1000"]},
     "passes one Page's or account's 300 Send API calls/s"),
    ("too few timer queues", {**TARGETS["10000"], "tasks_queue_count": 10},
     "timer queues would create 1200 tasks/s each, above Cloud Tasks' 500 per queue: raise tasks_queue_count to at least 24"),
    ("too few prepare queues", {**TARGETS["10000"], "prepare_queue_count": 1},
     "prepare queues would dispatch 2750 tasks/s each"),
    ("too few index shards", {**TARGETS["10000"], "index_shards": 16},
     "each index shard would take 1875 writes/s, above Firestore's 500 writes/s to a sequential index: raise index_shards to at least 60"),
    ("30,000 msg/s at 8 threads", {**TARGETS["30000"], "function_threads": 8},
     "max_instances passes Cloud Run's 1000 (enqueue 1875, prepare 1719, webhook 2813)"),
    ("max_instances by hand below the load", {**TARGETS["1000"], "max_instances": dict.fromkeys(
        ["enqueue", "deadletter", "webhook", "status", "timeout", "sweep", "prepare"], 5)},
     "max_instances x function_threads is below the requests in flight at the target (enqueue 300, prepare 275, timeout 110, webhook 45"),
    ("more queues than a region has", {"tasks_queue_count": 990, "prepare_queue_count": 20},
     "baton would need 1011 Cloud Tasks queues, above the 1,000 a project has per region"),
]


@pytest.mark.parametrize("name, variables, message", REFUSED, ids=[r[0] for r in REFUSED])
def test_a_configuration_that_cannot_carry_its_target_is_refused(sizing_dir, name, variables, message):
    result = plan(sizing_dir, variables)
    assert not result.ok
    texts = [e.text for e in result.errors]
    assert len(texts) == 1, texts
    assert "precondition failed" in texts[0] and message in texts[0], texts[0]


def test_the_send_window_guard_is_the_codes():
    """The sizing counts a number at rate x WINDOW / (WINDOW + GUARD), the
    send window's own figures (shared/sender_window.py)."""
    tree = ast.parse((ROOT / "shared" / "sender_window.py").read_text())
    code = {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name) and t.id in ("WINDOW_US", "GUARD_US")}
    module = parse(INFRA / "modules" / "sizing")["locals"]
    assert float(module["sender_window_s"]) == code["WINDOW_US"] / 1e6
    assert float(module["sender_window_guard_s"]) == code["GUARD_US"] / 1e6


def test_the_scale_page_shows_what_the_module_derives(sizing_dir):
    """docs/scale.md's sizing table is the module's output, as `make
    scale-table` renders it: a changed module or a hand-edited page fails."""
    sized = {name: sizing_of(plan(sizing_dir, variables)) for name, variables in CASES.items()}
    page = (ROOT / "docs" / "scale.md").read_text()
    assert sizing_table.current_block(page) == sizing_table.render(sized), "run `make scale-table`"
    # At the users' 10,000 msg/s the page states the headroom of the default threads and shards.
    assert sized["10,000 msg/s"]["sizable_up_to_messages_per_s"] >= 10_000


def test_the_scale_model_sizes_as_the_module_does():
    """tools/sim/scale_model judges instances and queues with the module's own
    seconds per request, utilisation and queue share."""
    tree = ast.parse((ROOT / "tools" / "sim" / "scale_model" / "__main__.py").read_text())
    model = {t.id: ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)
             and t.id in ("SECONDS_PER_REQUEST", "INSTANCE_UTILISATION", "QUEUE_LIMIT_SHARE", "SENDER_LIMIT_SHARE",
                          "TIMER_TASKS_PER_MESSAGE")}
    module = parse(INFRA / "modules" / "sizing")["locals"]
    seconds = module["seconds_per_request"]
    assert {f: float(seconds[f]) for f in model["SECONDS_PER_REQUEST"]} == model["SECONDS_PER_REQUEST"]
    assert float(module["instance_util"]) == model["INSTANCE_UTILISATION"]
    assert float(module["limit_share"]) == model["QUEUE_LIMIT_SHARE"]
    assert float(module["timer_tasks_per_message"]) == model["TIMER_TASKS_PER_MESSAGE"]
    plan_py = ast.parse((ROOT / "tools" / "cloud" / "loadtest" / "plan.py").read_text())
    loadtest = {t.id: ast.literal_eval(node.value) for node in plan_py.body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name) and t.id == "SENDER_LIMIT_SHARE"}
    assert float(module["sender_limit_share"]) == model["SENDER_LIMIT_SHARE"] == loadtest["SENDER_LIMIT_SHARE"]
