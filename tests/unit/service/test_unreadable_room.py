"""One room document the code cannot read stops no other room (issue 43,
bug 4): the watchdog rescues the healthy rooms after it, a status webhook
and a receipt still reach the other rooms, and the unreadable one stays
visible (an ERROR line with its room and reason)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from shared.room import InFlight, Phase, QueuedMessage, RecipientReceipt, RoomState, make_delivery_id
from shared.room_document import room_to_doc
from tests.unit.service.test_faults import Knobs, World, build_service, push_body, status_body

# A room document `room_as_read` cannot read: no `incarnation` (KeyError).
UNREADABLE = {"next_seq": 2, "wake_at_us": 1, "in_flight_to": "messenger:PSID-1", "in_flight": {"attempt": 1}}


def test_the_watchdog_rescues_a_healthy_room_behind_an_unreadable_one(capsys):
    world = World(Knobs())
    service = build_service(world)
    world.timers.lose_next_task()  # the healthy room's timer task is lost: only the watchdog wakes it
    assert service.handle_push(push_body("room-ok", "m1", "15550001", "hi", "p1", world.clock.now_us())).status \
        == 200
    world.store.docs["room-bad"] = dict(UNREADABLE)  # the oldest wake-up: first in the sweep's query
    world.clock.advance_ms(world.settings.ack_timeout_ms + world.settings.watchdog_grace_ms + 10_000)
    reply = service.handle_sweep()
    assert reply.status == 200 and (reply.body["failed"], reply.body["rescued"]) == (1, 1), reply.body
    assert any(e.event == "watchdog_rescued" and e.room_id == "room-ok" for e in world.events.events)
    errors = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert any(e["severity"] == "ERROR" and "room-bad" in e["message"] and "KeyError" in e["message"]
               for e in errors), errors


def test_a_status_webhook_applies_the_other_rooms_statuses_then_fails(capsys):
    world = World(Knobs())
    service = build_service(world)
    assert service.handle_push(push_body("room-ok", "m1", "15550001", "hi", "p1", world.clock.now_us())).status \
        == 200
    world.store.docs["room-bad"] = dict(UNREADABLE)
    ok = world.store.load_room("room-ok")
    call = world.platform.calls[0]
    raw, sig = status_body([
        (make_delivery_id("room-bad", 7, 1, 1, call.decided_us), "wamid.x", "delivered"),
        (make_delivery_id("room-ok", ok.incarnation, 1, 1, call.decided_us), call.provider_message_id,
         "delivered"),
    ], world.clock.now_us())
    with pytest.raises(KeyError):
        service.handle_status_webhook(raw, sig)
    assert world.store.load_room("room-ok").counts == {"acked": 1}  # applied although the room before it failed
    assert "room-bad" in capsys.readouterr().out


def messenger_room(room_id: str, now_us: int) -> dict:
    msg = QueuedMessage(1, "m1", "messenger", "PSID-1", "hi", now_us, now_us)
    flight = InFlight(msg, 1, now_us, Phase.SENT, now_us + 3_000_000, "push:m1", deadline_us=now_us + 3_000_000,
                      provider_message_id="mid.1", returned_at_us=now_us)
    return room_to_doc(RoomState(room_id, incarnation=now_us, next_seq=2, in_flight=flight))


def test_a_receipt_reaches_every_readable_room_of_its_recipient(capsys):
    world = World(Knobs())
    world.settings = dataclasses.replace(world.settings, providers="whatsapp,messenger")
    service = build_service(world)
    now = world.clock.now_us()
    world.store.docs["room-a-bad"] = dict(UNREADABLE)  # sorted first by rooms_sending_to
    world.store.docs["room-b-ok"] = messenger_room("room-b-ok", now)
    receipt = RecipientReceipt("messenger", "PSID-1", "delivered", None, ("mid.1",), now + 1000)
    with pytest.raises(KeyError):
        service.statuses.apply_receipt_events([receipt], "webhook")
    assert world.store.load_room("room-b-ok").counts == {"acked": 1}
    assert "room-a-bad" in capsys.readouterr().out


@pytest.mark.parametrize("concurrency", [1, 4])
def test_a_full_batch_of_unreadable_rooms_does_not_hide_the_healthy_room_behind_them(capsys, concurrency):
    """SWEEP_BATCH_SIZE unreadable rooms, the oldest overdue: one sweep pages
    past them (they fail every sweep and stay first in the oldest-first query)
    and rescues the healthy room behind them; each unreadable one is tried
    once and logged."""
    world = World(Knobs(sweep_batch_size=5))
    world.settings = dataclasses.replace(world.settings, sweep_concurrency=concurrency)
    service = build_service(world)
    world.timers.lose_next_task()  # only the watchdog can wake the healthy room
    assert service.handle_push(push_body("room-ok", "m1", "15550001", "hi", "p1", world.clock.now_us())).status \
        == 200
    bad = [f"room-bad-{i}" for i in range(world.settings.sweep_batch_size)]
    for i, room in enumerate(bad):
        world.store.docs[room] = {**UNREADABLE, "wake_at_us": 1 + i}  # older than the healthy room's wake-up
    world.clock.advance_ms(world.settings.ack_timeout_ms + world.settings.watchdog_grace_ms + 10_000)
    reply = service.handle_sweep()
    assert reply.status == 200, reply.body
    assert (reply.body["overdue"], reply.body["failed"], reply.body["rescued"]) == (len(bad) + 1, len(bad), 1)
    assert [e.room_id for e in world.events.events if e.event == "watchdog_rescued"] == ["room-ok"]
    # Its lost timer carried its acceptance (issue 46) and no `sent` status came: the watchdog finds it
    # SENDING past its hold time and resends it as possibly sent.
    assert world.store.load_room("room-ok").in_flight.attempt == 2
    out = capsys.readouterr().out
    assert all(out.count(f"room {room} left overdue") == 1 for room in bad), out
