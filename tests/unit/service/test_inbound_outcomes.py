"""Inbound forwarding and delivery outcomes, pure parts and the service on
in-memory fakes (the emulator tests: tests/integration/test_inbound_outcomes.py):
which webhook items are forwarded and with what key; a publish that fails is
a 503 in direct mode and the error queue in queued mode; each end a committed
transaction produced is published once, a redelivered status or timer
publishes nothing, an outcome Pub/Sub does not take is kept and the room
moves on."""

from __future__ import annotations

import dataclasses
import json
from concurrent.futures import Future
from typing import Any

import pytest

from shared import config
from shared.events import DeliveryEvent, EventType
from shared.outcomes import OutcomePublisher, kept_id, outcome_record
from shared.providers import meta_messaging, whatsapp
from shared.room import TimerFired, policy_from_settings
from shared.service import DeliveryService, ServiceCore
from shared.service.inbound import InboundPost, InboundPublisher, InboundPublishFailed, forward_inbound
from tests.fakes import FakePlatform, FakeRoomStore, FakeTimers, RecordingEventLog, SimClock
from tests.unit.service.test_faults import SECRET, status_body


class FakePubSub:
    """A Pub/Sub publisher client: records publishes; topics in `down` fail."""

    def __init__(self, down: frozenset[str] = frozenset()) -> None:
        self.down = set(down)
        self.published: list[tuple[str, bytes, dict[str, str]]] = []
        self.resumed: list[tuple[str, str]] = []

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish(self, topic: str, data: bytes, **attrs: str) -> Future:
        future: Future = Future()
        if topic.rsplit("/", 1)[1] in self.down:
            future.set_exception(RuntimeError(f"{topic} is out"))
        else:
            self.published.append((topic, data, attrs))
            future.set_result("id")
        return future

    def resume_publish(self, topic: str, key: str) -> None:
        self.resumed.append((topic, key))


class FakeDb:
    """Enough of a Firestore client for the kept outcomes."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}

    def collection(self, name: str) -> Any:
        docs = self.docs

        class Doc:
            def __init__(self, key: str) -> None:
                self.key = f"{name}/{key}"

            def set(self, value: dict[str, Any]) -> None:
                docs[self.key] = value

        return type("Col", (), {"document": lambda _s, key: Doc(key)})()


# ------------------------------------------------------------------ inbound

WA = {"object": "whatsapp_business_account", "entry": [{"id": "waba-1", "changes": [
    {"field": "messages", "value": {"messaging_product": "whatsapp", "metadata": {"phone_number_id": "1"},
                                    "statuses": [{"id": "w", "status": "delivered"}]}}]}]}


def test_whatsapp_statuses_alone_are_not_forwarded_but_messages_reactions_and_other_fields_are():
    assert whatsapp.inbound_items(WA) == []
    doc = json.loads(json.dumps(WA))
    doc["entry"][0]["changes"][0]["value"]["messages"] = [
        {"from": "155501", "type": "text", "text": {"body": "hi"}},
        {"from": "155501", "type": "reaction", "reaction": {"message_id": "w", "emoji": "x"}}]
    doc["entry"][0]["changes"].append({"field": "account_update", "value": {"event": "X"}})
    items = whatsapp.inbound_items(doc)
    assert [(i.field, i.user_id, i.account_id) for i in items] == [
        ("messages", "155501", "waba-1"), ("messages", "155501", "waba-1"), ("account_update", None, "waba-1")]


def test_messenger_and_instagram_receipts_and_echoes_are_baton_s_and_the_rest_is_forwarded():
    page = {"id": "p"}
    items = [{"sender": {"id": "u1"}, "recipient": page, "delivery": {"watermark": 1}},
             {"sender": {"id": "u1"}, "recipient": page, "read": {"watermark": 1}},
             {"sender": page, "recipient": {"id": "u1"}, "message": {"mid": "m", "is_echo": True}},
             {"sender": {"id": "u1"}, "recipient": page, "message": {"mid": "m2", "text": "hi"}},
             {"sender": {"id": "u1"}, "recipient": page, "reaction": {"mid": "m", "action": "react"}},
             {"sender": {"id": "u1"}, "recipient": page, "postback": {"payload": "P"}}]
    for obj in ("page", "instagram"):
        doc = {"object": obj, "entry": [{"id": "p", "time": 1, "messaging": items},
                                        {"id": "p", "time": 1, "changes": [{"field": "comments",
                                                                            "value": {"from": {"id": "u2"}}}]}]}
        got = meta_messaging.inbound_items(doc)
        assert [(i.field, i.user_id) for i in got] == [("messages", "u1"), ("message_reactions", "u1"),
                                                        ("messaging_postbacks", "u1"), ("comments", "u2")]
        assert {i.provider for i in got} == {"messenger" if obj == "page" else "instagram"}


def test_a_post_is_keyed_by_its_one_person_else_by_its_account():
    one = whatsapp.inbound_items({"entry": [{"id": "a", "changes": [{"field": "messages", "value": {
        "messages": [{"from": "u"}, {"from": "u"}]}}]}]})
    post = InboundPost.of(b"raw", one, "sha256=s", 5)
    assert post.ordering_key == "whatsapp:u" and post.attributes["user_id"] == "u" and post.data == b"raw"
    two = whatsapp.inbound_items({"entry": [{"id": "a", "changes": [{"field": "messages", "value": {
        "messages": [{"from": "u"}, {"from": "v"}]}}]}]})
    post = InboundPost.of(b"raw", two, None, 5)
    assert post.ordering_key == "whatsapp:a" and "user_id" not in post.attributes
    assert post.attributes["items"] == "2" and post.attributes["signature"] == ""


def test_forwarding_fails_loudly_in_direct_mode_and_goes_to_the_error_queue_in_queued_mode():
    doc = {"object": "page", "entry": [{"id": "p", "messaging": [
        {"sender": {"id": "u"}, "recipient": {"id": "p"}, "message": {"mid": "m", "text": "hi"}}]}]}
    raw = json.dumps(doc).encode()
    client = FakePubSub(frozenset({"inbound"}))
    with pytest.raises(InboundPublishFailed):
        forward_inbound(InboundPublisher("p", "inbound", None, client=client), "messenger", doc, raw, "s", 1)
    assert client.resumed == [("projects/p/topics/inbound", "messenger:u")]
    assert forward_inbound(InboundPublisher("p", "inbound", "errors", client=client), "messenger", doc, raw, "s",
                           1) == 1
    ((topic, data, attrs),) = client.published
    assert topic.endswith("/errors") and data == raw and attrs["kind"] == "inbound"
    assert attrs["ordering_key_wanted"] == "messenger:u"
    client.down.add("errors")
    with pytest.raises(InboundPublishFailed):
        forward_inbound(InboundPublisher("p", "inbound", "errors", client=client), "messenger", doc, raw, "s", 1)


# ------------------------------------------------------------------ outcomes


def test_an_end_event_makes_its_outcome_and_a_cancelled_schedule_is_named_so():
    ended = DeliveryEvent(EventType.ACKED, "2026-11-27T00:00:00.000000Z", "webhook", "r", seq=1, attempt=2,
                          message_id="m", provider="whatsapp", status="read", provider_message_id="w")
    o = outcome_record(ended)
    assert o is not None
    assert (o["outcome"], o["attempts"], o["status"], o["outcome_id"]) == ("acked", 2, "read", "r/m")
    cancelled = dataclasses.replace(ended, event=EventType.SKIPPED, reason="scheduled message cancelled before its "
                                                                            "time: x", actor="a")
    assert outcome_record(cancelled)["outcome"] == "cancelled"  # type: ignore[index]
    assert outcome_record(dataclasses.replace(ended, event=EventType.SENT)) is None


class World:
    def __init__(self, down: frozenset[str] = frozenset()) -> None:
        self.clock = SimClock()
        self.settings = dataclasses.replace(config.load(), webhook_mode="direct", whatsapp_app_secret=SECRET,
                                            event_log_path="", metrics_log_path="", whatsapp_sent_proof="off")
        self.policy = policy_from_settings(self.settings)
        self.store = FakeRoomStore(self.clock)
        self.platform = FakePlatform(self.clock, self.settings.send_timeout_ms)
        self.pubsub, self.db = FakePubSub(down), FakeDb()
        self.outcomes = OutcomePublisher("p", "outcomes", self.db, client=self.pubsub, wait_s=0.1)
        self.timers = FakeTimers(self.clock)
        self.service = DeliveryService(ServiceCore(self.settings, self.policy, self.store, self.timers,
                                                   {"whatsapp": self.platform}, RecordingEventLog(self.clock),  # type: ignore[arg-type]
                                                   outcomes=self.outcomes))

    def push(self, room: str, message_id: str) -> None:
        from tests.integration.test_functions import push_body

        body = push_body({"room_id": room, "provider": "whatsapp", "recipient": "15550001",
                          "message_id": message_id}, b'{"type":"text","text":"hi"}', message_id)
        assert self.service.handle_push(body).status == 200

    def delivery_id(self, room: str) -> str:
        from shared.room import make_delivery_id

        state = self.store.load_room(room)
        flight = state.in_flight
        return make_delivery_id(room, state.incarnation, flight.message.seq, flight.attempt, flight.started_at_us)

    def outcomes_of(self, room: str) -> list[str]:
        return [json.loads(d)["outcome"] for _, d, a in self.pubsub.published if a["room_id"] == room]


def test_an_ack_publishes_one_outcome_and_the_same_status_again_publishes_none():
    w = World()
    w.push("r-1", "m1")
    raw, sig = status_body([(w.delivery_id("r-1"), "w1", "delivered")], w.clock.now_us())
    for _ in range(3):
        assert w.service.handle_status_webhook(raw, sig).status == 200
    assert w.outcomes_of("r-1") == ["acked"]
    (_, data, attrs), = w.pubsub.published
    assert attrs["ordering_key"] == "r-1" and json.loads(data)["provider_message_id"]


def test_a_timer_redelivered_after_the_timeout_publishes_none_twice():
    w = World()
    w.push("r-1", "m1")
    state = w.store.load_room("r-1")
    due = state.in_flight.due_at_us
    accepted = next(t.timer.accepted_deadline_us for t in w.timers.tasks if t.timer.seq == 1)  # issue 46
    assert accepted is not None
    at = max(due, accepted) + 1
    w.clock.advance_to_us(at)
    for _ in range(3):
        w.service.apply("r-1", TimerFired(state.incarnation, 1, 1, due, at, accepted), "timeout")
    assert w.outcomes_of("r-1") == ["timed_out"]


def test_an_outcome_pubsub_does_not_take_is_kept_and_the_room_moves_on():
    w = World(frozenset({"outcomes"}))
    w.push("r-1", "m1")
    w.push("r-1", "m2")
    raw, sig = status_body([(w.delivery_id("r-1"), "w1", "delivered")], w.clock.now_us())
    assert w.service.handle_status_webhook(raw, sig).status == 200  # never a 503 for an outcome
    assert w.store.load_room("r-1").in_flight.message.message_id == "m2"  # handed over
    kept = w.db.docs[f"outcomes_kept/{kept_id('r-1/m1')}"]
    assert kept["outcome"]["outcome"] == "acked" and "out" in kept["error"]
    assert ("projects/p/topics/outcomes", "r-1") in w.pubsub.resumed


def test_the_admin_actions_list_and_replay_the_kept_outcomes_with_a_dry_run_first():
    from types import SimpleNamespace

    from shared.admin.actions import ACTIONS, CHANGING, Args
    from shared.outcomes import ReplayReport

    class Kept:
        replayed = 0

        def kept(self, limit):
            return [{"id": "k1", "kept_at": "t", "error": "out", "outcome": {"room_id": "r-1", "outcome": "acked"}},
                    {"id": "k2", "kept_at": "t", "error": "out", "outcome": {"room_id": "r-2", "outcome": "failed"}}]

        def replay_kept(self, limit):
            self.replayed += 1
            return ReplayReport(2, 2, 0, False)

    kept = Kept()
    admin = SimpleNamespace(operators=SimpleNamespace(service=SimpleNamespace(outcomes=kept)), settings=None)
    assert [o["room_id"] for o in ACTIONS["outcomes.list"](admin, Args({}), "me")] == ["r-1", "r-2"]
    assert ACTIONS["outcomes.replay"](admin, Args({"dry_run": True}), "me") == {"dry_run": True, "rooms": 2,
                                                                                "messages": 2}
    assert kept.replayed == 0
    assert ACTIONS["outcomes.replay"](admin, Args({}), "me")["published"] == 2 and kept.replayed == 1
    assert "outcomes.replay" in CHANGING
