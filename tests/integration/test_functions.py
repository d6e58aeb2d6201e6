"""The HTTP entry points, served by functions-framework on the local stack:
bad input gets a clear answer and changes nothing; timers reach `timeout`."""

from __future__ import annotations

import base64
import dataclasses
import json
import time

import pytest
import requests
from google.cloud import firestore

from shared.providers.whatsapp import sign
from shared.room import Enqueue, Policy, ScheduleTimer, decide, make_delivery_id
from shared.store import REJECTED, RoomStore
from tests.conftest import room_events, stack_settings, wait_for

SECRET = "local-app-secret"


def push_body(attributes: dict, data: bytes, message_id: str) -> bytes:
    return json.dumps({"message": {"data": base64.b64encode(data).decode(), "attributes": attributes,
                                   "messageId": message_id, "publishTime": "2026-11-22T10:00:00.123456789Z"},
                       "subscription": "projects/baton-local/subscriptions/test"}).encode()


def status_body(callback: str, status: str = "delivered") -> bytes:
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages",
        "value": {"messaging_product": "whatsapp", "statuses": [{"id": "wamid.T", "status": status,
        "timestamp": "1700000000", "recipient_id": "15550001", "biz_opaque_callback_data": callback}]}}]}]}).encode()


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project="baton-local"), retention_hours=1)


def post_push(stack, room: str, mid: str, recipient: str = "15550001") -> requests.Response:
    attrs = {"room_id": room, "provider": "whatsapp", "recipient": recipient, "message_id": mid}
    return requests.post(stack.url("enqueue"), data=push_body(attrs, b'{"type":"text","text":"hi"}', f"{abs(hash(mid))}"),
                         timeout=10)


def test_webhook_handshake(stack):
    ok = requests.get(stack.url("webhook"), params={"hub.mode": "subscribe", "hub.verify_token": "local-verify-token",
                                                    "hub.challenge": "12345"}, timeout=5)
    assert ok.status_code == 200 and ok.text == "12345"
    bad = requests.get(stack.url("webhook"), params={"hub.mode": "subscribe", "hub.verify_token": "nope",
                                                     "hub.challenge": "12345"}, timeout=5)
    assert bad.status_code == 403


def test_bad_signature_is_refused_and_changes_nothing(stack, store, room_id):
    # A room with a message in flight, made through the store alone: no timer
    # and no send, so only the webhooks below can change it.
    now = time.time_ns() // 1000
    enqueue = Enqueue("m1", "whatsapp", "15550001", "hi", now, now)
    store.apply(room_id, lambda s: decide(s, enqueue, Policy(), "test"))
    before = store.room_ref(room_id).get().to_dict()
    body = status_body(make_delivery_id(room_id, before["incarnation"], 1, 1, before["in_flight"]["started_at_us"]))
    for headers in ({}, {"X-Hub-Signature-256": "sha256=" + "0" * 64},
                    {"X-Hub-Signature-256": sign(body, "wrong-secret")},
                    {"X-Hub-Signature-256": sign(body + b" ", SECRET)},
                    {"X-Hub-Signature-256": "sha256=" + "é" * 64}):
        r = requests.post(stack.url("webhook"), data=body, headers=headers, timeout=5)
        assert r.status_code == 401, headers
    assert store.room_ref(room_id).get().to_dict() == before
    # The same body, signed right, acks the message.
    r = requests.post(stack.url("webhook"), data=body, headers={"X-Hub-Signature-256": sign(body, SECRET)}, timeout=5)
    assert r.status_code == 200 and r.json()["applied"] == 1
    assert store.load_room(room_id).counts == {"acked": 1}


def test_bad_signature_is_refused_by_the_queued_webhook_too(stack, store, room_id):
    now = time.time_ns() // 1000
    store.apply(room_id, lambda s: decide(s, Enqueue("m1", "whatsapp", "15550001", "hi", now, now), Policy(), "test"))
    before = store.room_ref(room_id).get().to_dict()
    body = status_body(make_delivery_id(room_id, before["incarnation"], 1, 1, before["in_flight"]["started_at_us"]))
    r = requests.post(stack.url("webhook-queued"), data=body, headers={"X-Hub-Signature-256": sign(body, "wrong")},
                      timeout=5)
    assert r.status_code == 401 and store.room_ref(room_id).get().to_dict() == before
    r = requests.post(stack.url("webhook-queued"), data=body, headers={"X-Hub-Signature-256": sign(body, SECRET)},
                      timeout=5)
    assert r.status_code == 200 and r.json()["queued"] == 1
    wait_for(lambda: store.load_room(room_id).counts, what="the queued ack applied")
    assert store.load_room(room_id).counts == {"acked": 1}


def test_webhook_body_of_the_wrong_shape_is_a_400(stack):
    for body in (b"not json", b'{"entry": "x"}', b'{"entry": [{"changes": [{"value": {"statuses": [{"id": 1}]}}]}]}'):
        r = requests.post(stack.url("webhook"), data=body, headers={"X-Hub-Signature-256": sign(body, SECRET)}, timeout=5)
        assert r.status_code == 400, body


def test_status_for_an_unknown_delivery_is_acknowledged_and_logged(stack, room_id):
    for callback in ("garbage", "1.1.1700000000000.abc.not/a/room", f"4.1.1700000000000.abc.{room_id}"):
        body = status_body(callback)
        r = requests.post(stack.url("webhook"), data=body, headers={"X-Hub-Signature-256": sign(body, SECRET)}, timeout=5)
        assert r.status_code == 200
    events = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "status_unknown"],
                      what="status_unknown event")
    assert events[0]["reason"] == "unknown_delivery"


def test_malformed_push_is_kept_with_its_reason_and_acked(stack, store, room_id):
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": "15550001", "message_id": "bad-1"}
    cases = [
        (push_body(attrs, b"not json at all", "9001"), "`data` is not base64-encoded JSON"),
        (push_body({**attrs, "room_id": "a/b"}, b'{"text":"x"}', "9002"), "attributes.room_id: must be"),
        (push_body({**attrs, "provider": "carrier-pigeon"}, b'{"text":"x"}', "9003"),
         "attributes.provider: is 'carrier-pigeon'"),
    ]
    for body, reason in cases:
        r = requests.post(stack.url("enqueue"), data=body, timeout=10)
        assert r.status_code == 200 and reason in r.json()["reason"]
    kept = store._db.collection(REJECTED).document("pubsub-9001").get().to_dict()
    assert "base64" in kept["reason"] and kept["attributes"]["room_id"] == room_id
    assert store.load_room(room_id) is None  # nothing was queued for the room
    r = requests.post(stack.url("enqueue"), data=b"{{{", timeout=10)
    assert r.status_code == 200 and r.json()["result"] == "rejected"


def test_transient_firestore_failure_answers_503(stack, monkeypatch):
    """Firestore unreachable: the push is answered 5xx so Pub/Sub redelivers."""
    from shared.events import EventLog
    from shared.providers import make_senders
    from shared.room import policy_from_settings
    from shared.service import DeliveryService, ServiceCore
    from shared.tasks import TimerScheduler, make_client
    from tools.local.stack import free_port

    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", f"127.0.0.1:{free_port()}")  # nobody listens there
    settings = stack_settings()
    dead = RoomStore(firestore.Client(project="baton-local"), 1, deadline_s=1.0)
    app = DeliveryService(ServiceCore(settings, policy_from_settings(settings), dead, TimerScheduler(make_client(settings), settings),
                make_senders(settings), EventLog(keep=True)))
    import functions.main as entry

    attrs = {"room_id": "r-down", "provider": "whatsapp", "recipient": "15550001", "message_id": "m1"}
    response = entry.respond(app, "enqueue", app.handle_push, push_body(attrs, b'{"text":"hi"}', "77"))
    assert response.status_code == 503
    assert app.events.events == []


def test_a_timer_reaches_the_timeout_function(stack, room_id):
    from shared.tasks import TimerScheduler, make_client

    settings = dataclasses.replace(stack_settings(), timeout_url=stack.url("timeout"), tasks_queue_count=4)
    scheduler = TimerScheduler(make_client(settings), settings)
    due = time.time_ns() // 1000 + 300_000
    timer = ScheduleTimer(room_id, 12345, 3, 2, due)
    scheduler.schedule(timer)
    events = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "timeout_ignored"],
                      what="the timer's call of `timeout`")
    assert (events[0]["seq"], events[0]["attempt"]) == (3, 2)


def test_a_cancelled_timer_is_deleted_and_never_fires_and_the_others_still_do(stack, room_id, monkeypatch):
    """The local Cloud Tasks stand-in answers DeleteTask as the real service
    does (tools/local/tasks_emulator.py): a cancelled timer's task is
    deleted and never calls `timeout`; a second delete of it, or of a task
    that ran, is NOT_FOUND (`cancel` says False); the timers beside it,
    cancelled meanwhile or not, fire as before."""
    from shared.room import CancelTimer
    from shared.tasks import TimerScheduler, make_client

    monkeypatch.setattr(TimerScheduler, "_delete_unimplemented", False)
    settings = dataclasses.replace(stack_settings(), timeout_url=stack.url("timeout"), tasks_queue_count=4)
    scheduler = TimerScheduler(make_client(settings), settings)
    due = time.time_ns() // 1000 + 1_500_000
    for seq in range(1, 9):
        scheduler.schedule(ScheduleTimer(room_id, 12345, seq, 1, due))
    cancelled = {seq for seq in range(1, 9) if seq % 2}
    assert all(scheduler.cancel(CancelTimer(room_id, 12345, seq, 1, due)) for seq in sorted(cancelled))
    assert scheduler.cancel(CancelTimer(room_id, 12345, 1, 1, due)) is False  # deleted already: NOT_FOUND
    assert not TimerScheduler._delete_unimplemented
    def fired() -> set[int]:
        return {e["seq"] for e in room_events(stack, room_id) if e["event"] == "timeout_ignored"}

    wait_for(lambda: len(fired()) >= 4, what="the timers not cancelled")
    time.sleep(1.0)  # the emulator's loop runs every 0.1 s: a deleted task would have come by now
    assert fired() == {2, 4, 6, 8}
    assert scheduler.cancel(CancelTimer(room_id, 12345, 2, 1, due)) is False  # it ran: NOT_FOUND


def test_a_task_that_is_not_a_timer_is_dropped_with_its_reason_not_retried_forever(stack):
    """The timer queues retry without limit, so only a 2xx ends a task; one
    that can never be a timer is answered 200 with the reason, and logged."""
    for body in (b"junk", b"{}", b'{"room_id": "a/b", "incarnation": 1, "seq": 1, "attempt": 1, "due_at_us": 1}'):
        r = requests.post(stack.url("timeout"), data=body, timeout=10)
        assert r.status_code == 200 and r.json()["result"] == "dropped" and "not a baton timer" in r.json()["error"]
    assert "dropped a task" in (stack.run_dir / "timeout.log").read_text()
