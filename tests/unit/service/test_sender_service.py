"""Several WhatsApp numbers through the service over the in-memory fakes:
each room's sends go to its number's client, a number at its rate makes the
room wait without a call, and a status of a number this deployment does not
send from, or of another of its numbers than the message's, changes nothing
(issue 33, item 1 and 2)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from google.api_core import exceptions as gexc

from shared.providers.whatsapp import sign
from shared.room import CancelTimer, Phase, make_delivery_id, policy_from_settings
from shared.sender_window import SlotTaken
from shared.senders import rendezvous_sender
from shared.service import DeliveryService, ServiceCore
from tests.fakes import FakePlatform, FakeTimers, SimClock
from tests.unit.service.test_faults import SECRET, SEND_TIMEOUT_MS, Knobs, World, push_body, seams

NUMBERS = ("1001", "1002", "1003")


class BusyOnce:
    """A sender window whose first take finds no slot (ready 400 ms later)."""

    def __init__(self) -> None:
        self.takes: list[tuple[str, int]] = []

    def take(self, number: str, rate: int, now_us: int) -> SlotTaken | None:
        self.takes.append((number, rate))
        return SlotTaken(now_us + 400_000) if len(self.takes) == 1 else None


class DeletesRecorded(FakeTimers):
    """The fake Cloud Tasks, keeping every DeleteTask asked for."""

    def __init__(self, clock: SimClock) -> None:
        super().__init__(clock)
        self.deletes: list[CancelTimer] = []

    def cancel(self, timer: CancelTimer) -> bool:
        self.deletes.append(timer)
        return super().cancel(timer)


def three_numbers(window: object = None, timers: type[FakeTimers] | None = None,
                  ) -> tuple[World, DeliveryService, dict[str, FakePlatform]]:
    world = World(Knobs())
    if timers is not None:
        world.timers = timers(world.clock)
    world.settings = dataclasses.replace(world.settings, whatsapp_senders="1001:75,1002:75,1003:5")
    world.policy = policy_from_settings(world.settings)  # the rules fix each attempt's number from it
    platforms = {n: FakePlatform(world.clock, SEND_TIMEOUT_MS) for n in NUMBERS}
    clients = {"whatsapp": platforms["1001"], **{f"whatsapp:{n}": p for n, p in platforms.items()}}
    service = DeliveryService(ServiceCore(world.settings, world.policy, world.store, world.timers, clients,  # type: ignore[arg-type]
                                          world.events, sender_window=window, **seams(world)))  # type: ignore[arg-type]
    return world, service, platforms


def test_each_room_is_sent_from_its_number():
    world, service, platforms = three_numbers()
    rooms = [f"room-{i}" for i in range(30)]
    for i, room in enumerate(rooms):
        now = world.clock.now_us()
        assert service.handle_push(push_body(room, f"m{i}", "15550001", "hi", f"p{i}", now)).status == 200
    sent_from = {call.room_id: n for n, p in platforms.items() for call in p.calls}
    assert sent_from == {room: rendezvous_sender(room, NUMBERS) for room in rooms}
    assert len(set(sent_from.values())) == 3


def test_a_number_at_its_rate_makes_the_room_wait_without_a_call():
    window = BusyOnce()
    world, service, platforms = three_numbers(window)
    room = "room-busy"
    now = world.clock.now_us()
    assert service.handle_push(push_body(room, "m1", "15550001", "hi", "p1", now)).status == 200
    number = rendezvous_sender(room, NUMBERS)
    assert window.takes == [(number, 5 if number == "1003" else 75)]
    assert sum(len(p.calls) for p in platforms.values()) == 0
    state = world.store.load_room(room)
    assert state.in_flight.phase is Phase.PACED and state.in_flight.attempt == 1
    assert any(e.event == "paced" and "at its rate" in (e.reason or "") for e in world.events.events)
    # One task: the wake-up at the slot. The attempt's ack timer, armed before this change, would fire
    # only to be ignored (`make scale-model`: 0.19 of 1.38 task creates a message at the users' burst).
    assert [(t.timer.attempt, t.timer.due_at_us) for t in world.timers.tasks] == [(1, now + 400_000)]


class BusyThenTheWriteFails(BusyOnce):
    """A sender window whose first take finds no slot, and the room's
    write that records the wait then fails (Firestore unavailable)."""

    def __init__(self, world: World) -> None:
        super().__init__()
        self.world = world

    def take(self, number: str, rate: int, now_us: int) -> SlotTaken | None:
        self.world.store.fail_next_commit()
        return super().take(number, rate, now_us)


def test_a_wait_for_the_number_whose_write_fails_keeps_the_attempts_timer():
    world, service, platforms = three_numbers()
    window = BusyThenTheWriteFails(world)
    service.core.sender_window = window  # type: ignore[assignment]
    room = "room-busy"
    now = world.clock.now_us()
    with pytest.raises(gexc.ServiceUnavailable):  # the entry point answers 503: Pub/Sub redelivers
        service.handle_push(push_body(room, "m1", "15550001", "hi", "p1", now))
    assert sum(len(p.calls) for p in platforms.values()) == 0
    state = world.store.load_room(room)
    assert state.in_flight.phase is Phase.SENDING  # the wait was not recorded
    # The room's wake-up is the attempt's timer, armed as the decision asked: the redelivery or the timer goes on.
    assert [(t.timer.attempt, t.timer.due_at_us) for t in world.timers.tasks] == [(1, state.in_flight.due_at_us)]


def test_a_send_refused_for_good_arms_no_timer_and_deletes_none():
    """The platform refuses the send for good (131026): the message ends
    `failed` in the write that records it. The attempt's timer is not armed,
    so the end's request to delete it is not sent either (a DeleteTask
    answered NOT_FOUND is still a billed operation)."""
    world, service, platforms = three_numbers(timers=DeletesRecorded)
    room = "room-r"
    platforms[rendezvous_sender(room, NUMBERS)].fail_next_send("permanent")
    assert service.handle_push(push_body(room, "m1", "15550001", "hi", "p1", world.clock.now_us())).status == 200
    assert world.store.load_room(room).counts == {"failed": 1}
    assert world.timers.tasks == [] and world.timers.deletes == []  # type: ignore[attr-defined]


def whatsapp_status(delivery_id: str, number: str) -> bytes:
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "WABA", "changes": [{
        "field": "messages", "value": {"messaging_product": "whatsapp",
                                       "metadata": {"display_phone_number": "15550000000", "phone_number_id": number},
                                       "statuses": [{"id": "wamid.1", "status": "delivered", "timestamp": "1",
                                                     "recipient_id": "15550001",
                                                     "biz_opaque_callback_data": delivery_id}]}}]}]}).encode()


def test_a_status_of_a_number_this_deployment_does_not_send_from_changes_nothing():
    world, service, platforms = three_numbers()
    room = "room-s"
    now = world.clock.now_us()
    service.handle_push(push_body(room, "m1", "15550001", "hi", "p1", now))
    state = world.store.load_room(room)
    delivery_id = make_delivery_id(room, state.incarnation, 1, 1, state.in_flight.started_at_us)
    for number in ("2009", rendezvous_sender(room, NUMBERS)):
        body = whatsapp_status(delivery_id, number)
        assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
        if number == "2009":
            assert world.store.load_room(room).counts == {}
    assert world.store.load_room(room).counts == {"acked": 1}
    assert any(e.event == "status_ignored" and (e.reason or "").startswith("other_sender") for e in world.events.events)


def test_a_status_from_another_of_our_numbers_than_the_messages_changes_nothing():
    world, service, _ = three_numbers()
    room = "room-w"
    own = rendezvous_sender(room, NUMBERS)
    other = next(n for n in NUMBERS if n != own)
    now = world.clock.now_us()
    service.handle_push(push_body(room, "m1", "15550001", "hi", "p1", now))
    state = world.store.load_room(room)
    delivery_id = make_delivery_id(room, state.incarnation, 1, 1, state.in_flight.started_at_us)
    body = whatsapp_status(delivery_id, other)
    assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
    assert world.store.load_room(room).counts == {}
    body = whatsapp_status(delivery_id, own)
    assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
    assert world.store.load_room(room).counts == {"acked": 1}
    assert [e.reason for e in world.events.events if e.event == "status_ignored"] == [f"wrong_sender: {other}"]
