"""Fault paths on the emulators: a timer that cannot be armed, the watchdog,
dead-letter parking and redrive, and stale statuses of an earlier incarnation
of a room. DESIGN.md invariants 3, 4, 8 and 10."""

from __future__ import annotations

import base64
import dataclasses
import json
import time

import pytest
import requests
from google.cloud import firestore, pubsub_v1

from shared.events import EventLog
from shared.providers import make_senders
from shared.providers.whatsapp import sign
from shared.room import Enqueue, decide, make_delivery_id, policy_from_settings
from shared.service import DEAD_LETTER_COUNT_ATTRIBUTE, DeliveryService, ServiceCore, TimerArmFailed
from shared.store import RoomStore
from shared.tasks import TimerScheduler, make_client
from tests.conftest import room_events, stack_settings, wait_for
from tests.integration.test_functions import push_body, status_body
from tools.local.stack import DEAD_LETTER_TOPIC, PROJECT, free_port

SECRET = "local-app-secret"


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project=PROJECT), retention_hours=1)


def service(stack, store: RoomStore, **overrides) -> DeliveryService:
    """An in-process service on the stack's Firestore, Cloud Tasks and fake platform."""
    settings = dataclasses.replace(stack_settings(), whatsapp_api_base=stack.fake_url,
                                   timeout_url=stack.url("timeout"), tasks_queue_count=4, **overrides)
    return DeliveryService(ServiceCore(settings, policy_from_settings(settings), store,
                                       TimerScheduler(make_client(settings), settings), make_senders(settings),
                                       EventLog(keep=True)))


def platform_sends(stack, room: str) -> list[dict]:
    sends = requests.get(f"{stack.fake_url}/_fake/stats", timeout=5).json()["sends"]
    return [s for s in sends if s["callback"].endswith("." + room)]


def test_a_timer_that_cannot_be_armed_fails_the_request_and_the_watchdog_rescues_the_room(stack, store, room_id,
                                                                                           fake_config):
    """Cloud Tasks unreachable after the commit: the send still goes out, the
    push answers 503 (Pub/Sub would redeliver), and the running watchdog finds
    the room once its wake-up is overdue by WATCHDOG_GRACE_MS (5 s here)."""
    silent = "15551110000"
    fake_config({"silent_recipients": [silent]})
    broken = service(stack, store, tasks_emulator_host=f"127.0.0.1:{free_port()}")
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": silent, "message_id": "m1"}
    with pytest.raises(TimerArmFailed):
        broken.handle_push(push_body(attrs, b'{"type":"text","text":"hi"}', "5101"))
    assert [e.event for e in broken.events.events].count("timer_arm_failed") == 1
    assert len(platform_sends(stack, room_id)) == 1  # the message went out
    room = store.load_room(room_id)
    assert room.in_flight.phase == "sent" and room.wake_at_us is not None
    rescued = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "watchdog_rescued"],
                       timeout_s=20, what="the watchdog's rescue")
    assert rescued[0]["seq"] == 1
    ended = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "timed_out"], 10, "timed out")
    assert ended[0]["seq"] == 1 and len(platform_sends(stack, room_id)) == 1
    assert store.load_room(room_id).in_flight is None


def test_the_redelivered_push_rearms_the_timer_it_could_not_arm(stack, store, room_id, fake_config):
    silent = "15551110001"
    fake_config({"silent_recipients": [silent]})
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": silent, "message_id": "m1"}
    body = push_body(attrs, b'{"type":"text","text":"hi"}', "5102")
    with pytest.raises(TimerArmFailed):
        service(stack, store, tasks_emulator_host=f"127.0.0.1:{free_port()}").handle_push(body)
    # Pub/Sub redelivers to a healthy instance: a duplicate that re-arms.
    healthy = service(stack, store)
    assert healthy.handle_push(body).status == 200
    assert [e.event for e in healthy.events.events] == ["duplicate_ignored"]
    ended = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "timed_out"], 10, "timed out")
    assert ended[0]["component"] == "timeout"  # the timer did it, not the watchdog
    assert len(platform_sends(stack, room_id)) == 1


def publish_dead_letter(room: str, mid: str, text: str) -> None:
    """What Pub/Sub forwards to the dead-letter topic: the message, its
    attributes and the delivery count attribute."""
    client = pubsub_v1.PublisherClient()
    attrs = {"room_id": room, "provider": "whatsapp", "recipient": "15552220000", "message_id": mid,
             DEAD_LETTER_COUNT_ATTRIBUTE: "100"}
    client.publish(client.topic_path(PROJECT, DEAD_LETTER_TOPIC), json.dumps({"type": "text", "text": text}).encode(),
                   **attrs).result()


def test_a_dead_lettered_message_is_parked_in_its_room_and_a_redrive_sends_it_first(stack, store, room_id):
    publish_dead_letter(room_id, "m1", "first")
    wait_for(lambda: any(e["event"] == "blocked" for e in room_events(stack, room_id)), 15, "the room blocked")
    room = store.load_room(room_id)
    assert room.pending[0].text == "first" and "dead-lettered by Pub/Sub after 100" in room.blocked_reason
    assert store.room_ref(room_id).get().to_dict()["blocked_reason"] == room.blocked_reason  # visible
    # A later message queues behind the parked one: nothing is sent.
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": "15552220000", "message_id": "m2"}
    r = requests.post(stack.url("enqueue"), data=push_body(attrs, b'{"type":"text","text":"second"}', "5201"),
                      timeout=10)
    assert r.status_code == 200
    time.sleep(0.5)
    assert platform_sends(stack, room_id) == []
    ops = service(stack, store)
    ops.redrive(room_id, 1, actor="oncall@example.com", reason="checked")
    wait_for(lambda: len([e for e in room_events(stack, room_id) if e["event"] == "acked"]) == 2, 15, "both acked")
    assert [int(s["callback"].split(".")[0]) for s in platform_sends(stack, room_id)] == [1, 2]
    redriven = [e for e in ops.events.events if e.event == "redriven"]
    assert redriven[0].actor == "oncall@example.com"


def test_a_status_of_an_earlier_incarnation_of_the_room_is_ignored(stack, store, room_id):
    now = time.time_ns() // 1000
    first = store.apply(room_id, lambda s: decide(s, Enqueue("m1", "whatsapp", "15550001", "a", now, now),
                                                  policy_from_settings(stack_settings()), "test"))
    old_id = make_delivery_id(room_id, first.state.incarnation, 1, 1, first.state.in_flight.started_at_us)
    store.room_ref(room_id).delete()  # TTL deleted the room
    later = time.time_ns() // 1000
    second = store.apply(room_id, lambda s: decide(s, Enqueue("x1", "whatsapp", "15550001", "b", later, later),
                                                   policy_from_settings(stack_settings()), "test"))
    assert second.state.incarnation != first.state.incarnation
    body = status_body(old_id)
    r = requests.post(stack.url("webhook"), data=body, headers={"X-Hub-Signature-256": sign(body, SECRET)}, timeout=5)
    assert r.status_code == 200
    events = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "status_unknown"], 10, "event")
    assert events[0]["reason"] == "stale_incarnation"
    room = store.load_room(room_id)
    assert room.in_flight.message.message_id == "x1" and room.counts == {}


def test_sweep_answers_with_its_counts(stack):
    r = requests.post(stack.url("sweep"), timeout=30)
    assert r.status_code == 200 and {"overdue", "rescued", "failed", "left"} <= set(r.json())


def test_an_invalid_dead_letter_push_is_kept_and_acknowledged(stack, store):
    r = requests.post(stack.url("deadletter"), data=base64.b64encode(b"junk"), timeout=10)
    assert r.status_code == 200 and r.json()["result"] == "rejected"
