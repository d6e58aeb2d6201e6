"""The queued webhook's pure parts and the service's handling of it, on
in-memory fakes: what the webhook publishes (one message per room per
payload, in payload order, nothing for `sent`, unroutable statuses to the
error queue) without touching the store; a publish failure is a 503; the
`status` function's failure counting and move to the error queue."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared import config
from shared.room import (
    Decision,
    Enqueue,
    Policy,
    RoomEvent,
    RoomState,
    decide,
    make_delivery_id,
    policy_from_settings,
)
from shared.service import TRANSIENT_ERRORS, DeliveryService, ServiceCore
from shared.status_queue import QueuedStatus, RoomStatuses, StatusPublishFailed
from tests.fakes import FakePlatform, FakeRoomStore, FakeStatusQueue, FakeTimers, RecordingEventLog, SimClock
from tests.unit.service.test_faults import SECRET, status_body

text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30)
statuses = st.builds(QueuedStatus, text, text, text, st.none() | text, st.none() | st.integers(-2**40, 2**40),
                     st.none() | text, st.none() | text)


@given(st.builds(RoomStatuses, text, st.integers(0, 2**62), st.tuples(statuses) | st.tuples(statuses, statuses)))
def test_a_room_batch_survives_its_wire_format(batch):
    assert RoomStatuses.decode(batch.encode()) == batch


def test_a_batch_queued_before_statuses_named_their_number_reads_as_not_said():
    data = (b'{"room_id": "r", "received_at_us": 1, "statuses": [{"delivery_id": "d", "status": "read", '
            b'"provider": "whatsapp", "provider_message_id": null, "error_code": null, "error_title": null}]}')
    assert RoomStatuses.decode(data).statuses == (QueuedStatus("d", "read"),)


@pytest.mark.parametrize("data", [b"", b"[]", b"not json", b'{"room_id": 1, "received_at_us": 1, "statuses": []}',
                                  b'{"room_id": "r", "received_at_us": "1", "statuses": []}',
                                  b'{"room_id": "r", "received_at_us": 1, "statuses": [{"status": "read"}]}',
                                  b"\xff\xfe"])
def test_a_batch_of_the_wrong_shape_is_a_value_error(data):
    with pytest.raises(ValueError):
        RoomStatuses.decode(data)


def test_webhook_mode_must_be_queued_or_direct(monkeypatch):
    monkeypatch.setenv("WEBHOOK_MODE", "direct")
    assert config.load().webhook_mode == "direct"
    monkeypatch.setenv("WEBHOOK_MODE", "sideways")
    with pytest.raises(ValueError, match="WEBHOOK_MODE"):
        config.load()


class World:
    """A service on fakes and a simulated clock; `bug`, when set, is what
    the room's rules raise (a bug in `decide`: the service is given this
    world's `decide`)."""

    def __init__(self, mode: str = "queued", max_attempts: int = 3) -> None:
        self.bug: Exception | None = None
        self.clock = SimClock()
        self.settings = dataclasses.replace(config.load(), webhook_mode=mode, status_max_attempts=max_attempts,
                                            whatsapp_app_secret=SECRET, event_log_path="", metrics_log_path="")
        self.policy = policy_from_settings(self.settings)
        self.store = FakeRoomStore(self.clock)
        self.queue = FakeStatusQueue()
        self.platform = FakePlatform(self.clock, self.settings.send_timeout_ms)
        self.events = RecordingEventLog(self.clock)
        self.service = DeliveryService(ServiceCore(self.settings, self.policy, self.store, FakeTimers(self.clock),
                                                   {"whatsapp": self.platform}, self.events,  # type: ignore[arg-type]
                                                   status_queue=lambda: self.queue, clock=self.clock, decide=self.decide))

    def decide(self, state: RoomState, event: RoomEvent, policy: Policy, component: str) -> Decision:
        if self.bug is not None:
            raise self.bug
        return decide(state, event, policy, component)

    def room_in_flight(self, room_id: str) -> str:
        """A room with one message in flight (made through the store only);
        its delivery id."""
        now = self.clock.now_us()
        self.store.apply(room_id, lambda s: decide(s, Enqueue("m1", "whatsapp", "15550001", "hi", now, now),
                                                   self.policy, "test"))
        flight = self.store.load_room(room_id).in_flight
        return make_delivery_id(room_id, self.store.load_room(room_id).incarnation, 1, 1, flight.started_at_us)

    def push_of(self, batch: RoomStatuses, pubsub_id: str = "p1") -> bytes:
        return json.dumps({"message": {"data": base64.b64encode(batch.encode()).decode(),
                                       "attributes": {"room_id": batch.room_id, "kind": "room_statuses"},
                                       "messageId": pubsub_id}, "subscription": "s"}).encode()


def test_the_queued_webhook_publishes_one_message_per_room_in_payload_order_and_touches_no_room():
    w = World()
    a, b = w.room_in_flight("room-a"), w.room_in_flight("room-b")
    commits = w.store.commits
    raw, sig = status_body([(a, "w1", "sent"), (a, "w1", "read"), (b, "w2", "delivered"), (a, "w1", "delivered"),
                            ("not-a-delivery-id", "w9", "delivered")], w.clock.now_us())
    reply = w.service.handle_status_webhook(raw, sig)
    assert reply.status == 200
    assert reply.body == {"statuses": 5, "queued": 3, "rooms": 2, "logged": 1, "unroutable": 1}
    assert [(p.room_id, [s.status for s in p.statuses]) for p in w.queue.published] == [
        ("room-a", ["read", "delivered"]), ("room-b", ["delivered"])]
    assert w.queue.error_queue == [("unroutable", None, "no baton delivery id", None)]
    assert w.store.commits == commits  # no room transaction on the webhook's path
    assert w.store.load_room("room-a").counts == {}


def test_a_publish_failure_is_a_transient_failure_so_the_platform_sends_it_again():
    w = World()
    delivery = w.room_in_flight("room-a")
    raw, sig = status_body([(delivery, "w1", "delivered")], w.clock.now_us())
    w.queue.fail_next_publish()
    with pytest.raises(TRANSIENT_ERRORS) as caught:  # functions/main.py answers these 503
        w.service.handle_status_webhook(raw, sig)
    assert isinstance(caught.value, StatusPublishFailed) and w.queue.published == []
    assert w.service.handle_status_webhook(raw, sig).status == 200
    assert len(w.queue.published) == 1


def test_the_status_function_applies_a_batch_and_a_duplicate_changes_nothing():
    w = World()
    delivery = w.room_in_flight("room-a")
    batch = RoomStatuses("room-a", w.clock.now_us(), (QueuedStatus(delivery, "delivered"),))
    assert w.service.handle_status_push(w.push_of(batch)).body["applied"] == 1
    assert w.service.handle_status_push(w.push_of(batch)).status == 200
    assert w.store.load_room("room-a").counts == {"acked": 1}


def test_a_queued_status_from_another_number_than_its_attempts_changes_nothing():
    # Two numbers; the room's attempt goes out from the first. The number a
    # status came from travels through the status queue to the rule.
    w = World()
    w.settings = dataclasses.replace(w.settings, whatsapp_senders=f"{w.settings.whatsapp_phone_number_id},2002")
    w.policy = policy_from_settings(w.settings)
    delivery = w.room_in_flight("room-a")
    own = w.store.load_room("room-a").in_flight.number
    assert own == w.settings.whatsapp_phone_number_id
    other = RoomStatuses("room-a", w.clock.now_us(), (QueuedStatus(delivery, "delivered", sender="2002"),))
    assert RoomStatuses.decode(other.encode()).statuses[0].sender == "2002"
    assert w.service.handle_status_push(w.push_of(other)).status == 200
    assert w.store.load_room("room-a").counts == {}
    assert any(e.reason == "wrong_sender: 2002" for e in w.events.events)
    right = RoomStatuses("room-a", w.clock.now_us(), (QueuedStatus(delivery, "delivered", sender=own),))
    assert w.service.handle_status_push(w.push_of(right, "p2")).status == 200
    assert w.store.load_room("room-a").counts == {"acked": 1}


def test_a_status_naming_another_room_is_not_applied_to_either():
    w = World()
    delivery = w.room_in_flight("room-a")
    w.room_in_flight("room-b")
    batch = RoomStatuses("room-b", w.clock.now_us(), (QueuedStatus(delivery, "delivered"),))
    assert w.service.handle_status_push(w.push_of(batch)).body["applied"] == 0
    assert w.store.load_room("room-a").counts == {} and w.store.load_room("room-b").counts == {}


def test_a_failing_status_is_retried_then_moved_to_the_error_queue_after_max_attempts():
    w = World(max_attempts=3)
    delivery = w.room_in_flight("room-a")
    batch = RoomStatuses("room-a", w.clock.now_us(), (QueuedStatus(delivery, "delivered"),))
    w.bug = KeyError("in_flight")
    for _ in range(2):
        with pytest.raises(KeyError):  # 500: Pub/Sub redelivers
            w.service.handle_status_push(w.push_of(batch))
    reply = w.service.handle_status_push(w.push_of(batch))
    assert reply.status == 200 and reply.body["result"] == "dead_lettered"
    assert w.queue.error_queue == [("room_statuses", "room-a", "KeyError: 'in_flight'", 3)]
    assert [str(e.event) for e in w.events.events][-1] == "status_dead_lettered"


def test_a_transient_failure_is_retried_without_limit_and_never_moved_aside(monkeypatch):
    from google.api_core import exceptions as gexc

    w = World(max_attempts=2)
    delivery = w.room_in_flight("room-a")
    batch = RoomStatuses("room-a", w.clock.now_us(), (QueuedStatus(delivery, "delivered"),))
    real_apply = w.store.apply

    def down(*_args, **_kwargs):
        raise gexc.ServiceUnavailable("Firestore down")

    monkeypatch.setattr(w.store, "apply", down)  # the fake Firestore is down
    for _ in range(5):
        with pytest.raises(gexc.ServiceUnavailable):
            w.service.handle_status_push(w.push_of(batch))
    assert w.queue.failures == {} and w.queue.error_queue == []
    monkeypatch.setattr(w.store, "apply", real_apply)
    assert w.service.handle_status_push(w.push_of(batch)).body["applied"] == 1


def test_a_push_that_does_not_parse_is_kept_in_the_error_queue_and_acked():
    w = World()
    body = json.dumps({"message": {"data": base64.b64encode(b"{}").decode(), "messageId": "9"}}).encode()
    reply = w.service.handle_status_push(body)
    assert reply.status == 200 and reply.body["result"] == "kept"
    assert w.queue.error_queue[0][0] == "unroutable" and "not a status-queue message" in w.queue.error_queue[0][2]


def test_the_direct_mode_applies_statuses_in_the_webhook_and_publishes_nothing():
    w = World(mode="direct")
    delivery = w.room_in_flight("room-a")
    raw, sig = status_body([(delivery, "w1", "delivered")], w.clock.now_us())
    assert w.service.handle_status_webhook(raw, sig).body == {"statuses": 1, "applied": 1}
    assert w.queue.published == [] and w.store.load_room("room-a").counts == {"acked": 1}
