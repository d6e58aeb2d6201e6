"""Inbound forwarding and delivery outcomes on the emulators (issue 44, item 7).

- An inbound message (WhatsApp, Messenger, Instagram) posted to the stack's
  webhook reaches the `inbound` topic byte for byte, with its attributes;
  when the topic does not take it, direct mode answers 503 before applying
  the post's statuses, and queued mode keeps it in the error queue, from
  which `replay` sends it to the topic unchanged.
- Every outcome kind (acked, failed, timed out, dead-lettered, skipped,
  cancelled) is published once per message end; a redelivered status or
  timer publishes none twice.
- An outage of the outcomes topic keeps the room moving, and the outcome is
  kept in Firestore and published by a replay.
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Any

import pytest
import requests
from google.api_core import exceptions as gexc
from google.cloud import firestore, pubsub_v1

from shared.admin.error_queue import ErrorQueue
from shared.events import EventLog, utc_iso
from shared.operators import Operators
from shared.outcomes import KEPT_OUTCOMES, OutcomePublisher, kept_id
from shared.providers import make_senders
from shared.providers.whatsapp import sign
from shared.room import policy_from_settings
from shared.scheduled import ScheduledHold
from shared.service import DeliveryService, ServiceCore
from shared.service.inbound import InboundPublisher, InboundPublishFailed
from shared.store import RoomStore
from shared.tasks import TimerScheduler, make_client
from tests.conftest import stack_settings, wait_for
from tests.integration.test_functions import push_body, status_body
from tools.local.stack import (
    INBOUND_SUBSCRIPTION,
    INBOUND_TOPIC,
    OUTCOMES_SUBSCRIPTION,
    OUTCOMES_TOPIC,
    PROJECT,
    STATUS_ERROR_TOPIC,
    STATUS_TOPIC,
)

pytestmark = pytest.mark.emulators
SECRETS = {"whatsapp": "local-app-secret", "messenger": "local-messenger-secret",
           "instagram": "local-instagram-secret"}


class Pulled:
    """Everything pulled (and acked) so far from one subscription."""

    def __init__(self, subscription: str) -> None:
        self.client = pubsub_v1.SubscriberClient()
        self.path = self.client.subscription_path(PROJECT, subscription)
        self.messages: list[Any] = []

    def pull(self) -> list[Any]:
        try:
            got = self.client.pull(request={"subscription": self.path, "max_messages": 200}, timeout=2).received_messages
        except (gexc.DeadlineExceeded, gexc.RetryError):
            got = []
        if got:
            self.client.acknowledge(request={"subscription": self.path, "ack_ids": [m.ack_id for m in got]})
            self.messages.extend(m.message for m in got)
        return self.messages

    def outcomes(self, room: str) -> list[dict[str, Any]]:
        self.pull()
        return [json.loads(m.data) for m in self.messages if m.attributes.get("room_id") == room]


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project=PROJECT), retention_hours=1)


@pytest.fixture(scope="module")
def outcomes_sub(stack) -> Pulled:
    return Pulled(OUTCOMES_SUBSCRIPTION)


@pytest.fixture(scope="module")
def inbound_sub(stack) -> Pulled:
    return Pulled(INBOUND_SUBSCRIPTION)


def service(stack, store: RoomStore, outcomes: OutcomePublisher | None = None, inbound: Any = None,
            **overrides: Any) -> DeliveryService:
    """An in-process service on the stack's emulators and fake platform,
    publishing outcomes to the stack's topic unless told otherwise."""
    settings = dataclasses.replace(stack_settings(), whatsapp_api_base=stack.fake_url,
                                   timeout_url=stack.url("timeout"), **overrides)
    tasks = make_client(settings)
    return DeliveryService(ServiceCore(settings, policy_from_settings(settings), store, TimerScheduler(tasks, settings),
                                       make_senders(settings), EventLog(keep=True), scheduled=ScheduledHold(tasks, settings),
                                       outcomes=outcomes or OutcomePublisher(PROJECT, OUTCOMES_TOPIC, store._db),
                                       inbound=inbound))


def push(svc: DeliveryService, room: str, recipient: str, message_id: str, **attrs: str) -> Any:
    body = push_body({"room_id": room, "provider": "whatsapp", "recipient": recipient, "message_id": message_id,
                      **attrs}, b'{"type":"text","text":"hi"}', uuid.uuid4().hex[:10])
    return svc.handle_push(body)


def sends_of(stack, room: str) -> list[dict[str, Any]]:
    sends = requests.get(f"{stack.fake_url}/_fake/stats", timeout=5).json()["sends"]
    return [s for s in sends if s["callback"].endswith("." + room)]


def number() -> str:
    return "1555" + str(uuid.uuid4().int)[:7]


# ------------------------------------------------------------------ inbound


def inbound_bodies(user: str) -> dict[str, bytes]:
    """One message a person wrote, per provider, as Meta posts it (spacing and
    key order of our own choosing: the topic must keep them)."""
    ms = int(time.time() * 1000)
    return {
        "whatsapp": json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "102290129340398",
            "changes": [{"field": "messages", "value": {"messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550000000", "phone_number_id": "100000000000001"},
                "contacts": [{"profile": {"name": "A"}, "wa_id": user}],
                "messages": [{"from": user, "id": f"wamid.in{user}", "timestamp": "1700000000", "type": "text",
                              "text": {"body": "h\u00e9llo \U0001f600"}}]}}]}]}, indent=1).encode(),
        "messenger": json.dumps({"object": "page", "entry": [{"id": "200000000000002", "time": ms, "messaging": [
            {"sender": {"id": user}, "recipient": {"id": "200000000000002"}, "timestamp": ms,
             "reaction": {"mid": "m_x", "action": "react", "reaction": "love", "emoji": "\u2764"}}]}]},
            ensure_ascii=False).encode(),
        "instagram": json.dumps({"object": "instagram", "entry": [{"id": "300000000000003", "time": ms, "messaging": [
            {"sender": {"id": user}, "recipient": {"id": "300000000000003"}, "timestamp": ms,
             "postback": {"mid": "aWdf1", "title": "Yes", "payload": "YES"}}]}]}, separators=(",", ":")).encode(),
    }


def test_an_inbound_message_reaches_the_topic_byte_for_byte_for_each_provider(stack, inbound_sub):
    user = number()
    bodies = inbound_bodies(user)
    for provider, body in bodies.items():
        r = requests.post(stack.url("webhook"), data=body, timeout=15,
                          headers={"X-Hub-Signature-256": sign(body, SECRETS[provider])})
        assert r.status_code == 200, r.text
    fields = {"whatsapp": "messages", "messenger": "message_reactions", "instagram": "messaging_postbacks"}
    for provider, body in bodies.items():
        got = wait_for(lambda b=body: [m for m in inbound_sub.pull() if m.data == b], 20, f"{provider}'s post")
        assert len(got) == 1
        attrs = dict(got[0].attributes)
        assert attrs["provider"] == provider and attrs["field"] == fields[provider]
        assert attrs["user_id"] == user and attrs["signature"] == sign(body, SECRETS[provider])
        assert attrs["account_id"] == json.loads(body)["entry"][0]["id"]
        assert got[0].ordering_key == f"{provider}:{user}"


def test_a_post_of_statuses_only_is_not_forwarded(stack, inbound_sub, store, room_id):
    body = status_body(f"1.1.1700000000000.1.{room_id}", "delivered")
    r = requests.post(stack.url("webhook"), data=body, headers={"X-Hub-Signature-256": sign(body, SECRETS["whatsapp"])},
                      timeout=15)
    assert r.status_code == 200
    time.sleep(1.0)
    assert not [m for m in inbound_sub.pull() if m.data == body]


def test_direct_mode_answers_503_when_the_topic_does_not_take_the_post_and_applies_its_statuses_once_after(
        stack, store, room_id, outcomes_sub, fake_config):
    """The post carries a person's message and the ack of our message: the
    status waits for the forward (Meta sends the post again)."""
    silent = number()
    fake_config({"silent_recipients": [silent]})
    svc = service(stack, store, ack_timeout_ms=60_000)
    push(svc, room_id, silent, "m1")
    (sent,) = wait_for(lambda: sends_of(stack, room_id), 10, "the send")
    doc = json.loads(inbound_bodies(number())["whatsapp"])
    doc["entry"][0]["changes"].append(json.loads(status_body(sent["callback"]))["entry"][0]["changes"][0])
    body = json.dumps(doc).encode()
    broken = service(stack, store, inbound=InboundPublisher(PROJECT, f"missing-{uuid.uuid4().hex[:8]}", None,
                                                            timeout_s=2.0))
    with pytest.raises(InboundPublishFailed):
        broken.handle_status_webhook(body, sign(body, SECRETS["whatsapp"]))
    assert "acked" not in [str(e.event) for e in broken.events.events]
    assert store.load_room(room_id).in_flight is not None  # nothing applied
    working = service(stack, store, inbound=InboundPublisher(PROJECT, INBOUND_TOPIC, None))
    for _ in range(2):  # Meta's retry, and a duplicate of it
        assert working.handle_status_webhook(body, sign(body, SECRETS["whatsapp"])).status == 200
    wait_for(lambda: outcomes_sub.outcomes(room_id), 15, "the outcome")
    time.sleep(1.5)
    assert [o["outcome"] for o in outcomes_sub.outcomes(room_id)] == ["acked"]


def test_queued_mode_keeps_a_post_the_topic_does_not_take_in_the_error_queue_and_replay_forwards_it_unchanged(
        stack, inbound_sub):
    user = number()
    body = inbound_bodies(user)["messenger"]
    publisher = InboundPublisher(PROJECT, f"missing-{uuid.uuid4().hex[:8]}", STATUS_ERROR_TOPIC, timeout_s=2.0)
    from shared.providers.meta_messaging import inbound_items
    from shared.service.inbound import InboundPost

    assert publisher.forward(InboundPost.of(body, inbound_items(json.loads(body)), "sha256=x", 1)) == "error_queue"
    queue = ErrorQueue(PROJECT, STATUS_TOPIC, pull_timeout_s=2.0, inbound_topic=INBOUND_TOPIC)
    target = f"messenger:{user}"
    wait_for(lambda: [r for r in queue.list(target) if r.kind == "inbound"], 15, "the kept post")
    assert queue.replay(target)["replayed"] == 1
    got = wait_for(lambda: [m for m in inbound_sub.pull() if m.data == body], 20, "the replayed post")
    assert got[0].attributes["user_id"] == user and got[0].ordering_key == target
    assert "reason" not in got[0].attributes


# ------------------------------------------------------------------ outcomes


def test_every_outcome_kind_is_published_once_per_message_end(stack, store, outcomes_sub, fake_config):
    """Each kind once, duplicates of what ended it publishing nothing, but a
    cancelled scheduled message: each later copy publishes its outcome again
    under the same `outcome_id` (the call that ended it may have died before
    its publish: shared/service/scheduled_entry.py)."""
    rooms = {kind: f"t-{kind[:4]}-{uuid.uuid4().hex[:8]}" for kind in
             ("acked", "failed", "timed_out", "dead_lettered", "skipped", "cancelled")}
    silent, refused, busy = number(), number(), number()
    fake_config({"silent_recipients": [silent], "send_errors": {refused: [131026], busy: [130429]}})
    svc = service(stack, store)
    # acked: the fake platform's `delivered` reaches the stack's webhook; then the same status again.
    push(svc, rooms["acked"], number(), "m1")
    (sent,) = wait_for(lambda: sends_of(stack, rooms["acked"]), 10, "the send")
    wait_for(lambda: outcomes_sub.outcomes(rooms["acked"]), 15, "acked")
    again = status_body(sent["callback"], "delivered")
    assert requests.post(stack.url("webhook"), data=again, timeout=15,
                         headers={"X-Hub-Signature-256": sign(again, SECRETS["whatsapp"])}).status_code == 200
    # failed: a permanent refusal of the send call.
    push(svc, rooms["failed"], refused, "m1")
    # timed_out: no ack; the stack's timer ends it, and the same timer comes twice more.
    push(svc, rooms["timed_out"], silent, "m1")
    doc = store.room_ref(rooms["timed_out"]).get().to_dict()
    timer = json.dumps({"room_id": rooms["timed_out"], "incarnation": doc["incarnation"], "seq": 1, "attempt": 1,
                        "due_at_us": doc["in_flight"]["due_at_us"]}).encode()
    wait_for(lambda: outcomes_sub.outcomes(rooms["timed_out"]), 20, "timed_out")
    for _ in range(2):
        assert svc.handle_timer(timer).status == 200
    # dead_lettered: one attempt allowed, refused transiently.
    service(stack, store, max_send_attempts=1).handle_push(push_body(
        {"room_id": rooms["dead_lettered"], "provider": "whatsapp", "recipient": busy, "message_id": "m1"},
        b'{"type":"text","text":"hi"}', "dl-1"))
    # skipped: an operator ends a message in flight.
    push(svc, rooms["skipped"], silent, "m1")
    Operators(svc, store=store).skip(rooms["skipped"], 1, "tester@example.com", "wrong text")
    # cancelled: a scheduled message cancelled before its time, its push then delivered twice.
    store.cancel_scheduled(rooms["cancelled"], "m1", "tester@example.com", "wrong price")
    soon = utc_iso(time.time_ns() // 1000 + 300_000)
    for _ in range(2):
        push(svc, rooms["cancelled"], number(), "m1", deliver_at=soon)
    for kind, room in rooms.items():
        wait_for(lambda r=room: outcomes_sub.outcomes(r), 20, f"the {kind} outcome")
    wait_for(lambda: len(outcomes_sub.outcomes(rooms["cancelled"])) >= 2, 20, "the cancelled copy's outcome")
    time.sleep(2.0)  # time for a second copy to show
    for kind, room in rooms.items():
        got = outcomes_sub.outcomes(room)
        assert [o["outcome"] for o in got] == [kind] * (2 if kind == "cancelled" else 1), (kind, got)
        assert {o["outcome_id"] for o in got} == {f"{room}/m1"}
        o = got[0]
        assert o["message_id"] == "m1" and o["room_id"] == room and o["provider"] == "whatsapp"
        assert o["outcome_id"] == f"{room}/m1"
    by_kind = {kind: outcomes_sub.outcomes(room)[0] for kind, room in rooms.items()}
    assert by_kind["acked"]["status"] in ("delivered", "read") and by_kind["acked"]["provider_message_id"]
    assert by_kind["acked"]["attempts"] == 1 and by_kind["acked"]["send_to_ack_ms"] is not None
    assert by_kind["failed"]["error_code"] == 131026 and by_kind["failed"]["error_title"]
    assert by_kind["skipped"]["actor"] == "tester@example.com"
    assert by_kind["cancelled"]["actor"] == "tester@example.com" and "wrong price" in by_kind["cancelled"]["reason"]
    assert "refused" in by_kind["dead_lettered"]["reason"]


def test_an_outage_of_the_outcomes_topic_keeps_the_room_moving_and_the_outcome_is_replayed(
        stack, store, room_id, fake_config):
    refused, fine = number(), number()
    fake_config({"send_errors": {refused: [131026]}})
    topic = f"outcomes-{uuid.uuid4().hex[:8]}"
    out = OutcomePublisher(PROJECT, topic, store._db, wait_s=1.0)
    svc = service(stack, store, outcomes=out)
    started = time.monotonic()
    assert push(svc, room_id, refused, "m1").status == 200  # ends `failed`: its outcome cannot be published
    assert push(svc, room_id, fine, "m2").status == 200  # the next one goes out at once
    assert time.monotonic() - started < 5
    wait_for(lambda: [s for s in sends_of(stack, room_id) if s["recipient"] == fine], 10, "m2's send")
    kept = store._db.collection(KEPT_OUTCOMES).document(kept_id(f"{room_id}/m1")).get()
    assert kept.exists and kept.to_dict()["outcome"]["outcome"] == "failed"
    # The topic comes back: the replay publishes what was kept, and forgets it.
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    publisher.create_topic(name=publisher.topic_path(PROJECT, topic))
    sub = subscriber.subscription_path(PROJECT, f"{topic}-sub")
    subscriber.create_subscription(request={"name": sub, "topic": publisher.topic_path(PROJECT, topic)})
    report = out.replay_kept()
    assert report.published >= 1 and report.failed == 0
    pulled = Pulled(f"{topic}-sub")
    got = wait_for(lambda: [json.loads(m.data) for m in pulled.pull() if m.attributes.get("room_id") == room_id],
                   15, "the replayed outcome")
    assert [o["message_id"] for o in got] == ["m1"] and got[0]["outcome"] == "failed"
    assert not store._db.collection(KEPT_OUTCOMES).document(kept_id(f"{room_id}/m1")).get().exists
