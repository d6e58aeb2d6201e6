"""WhatsApp senders (issue 33, item 1): parsing WHATSAPP_SENDERS, the room's
number by rendezvous hash, a room keeping its number while it holds
messages, and a send whose number is at its rate waiting as a paced one.
Pure: `decide` and the push parser, no I/O."""

from __future__ import annotations

import base64
import dataclasses
import json
from dataclasses import replace

import pytest

from shared.push import Accepted, Rejected, parse_push
from shared.room import (
    Enqueue,
    Phase,
    Policy,
    RoomState,
    ScheduleTimer,
    Send,
    SendOutcome,
    SendReturned,
    StatusUpdate,
    TimerFired,
    decide,
)
from shared.room_document import room_as_read, room_to_doc
from shared.senders import SenderSpec, parse_senders, rendezvous_sender
from shared.tasks import task_id
from tests.unit.room.steps import stepper

T0 = 1_700_000_000_000_000
POLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=1000, send_start_deadline_ms=1000, max_queued_messages=100)


def test_senders_parse_with_their_rates_and_default():
    assert parse_senders("1001:75, 1002 ,1003:950", "9", 80) == (
        SenderSpec("1001", 75), SenderSpec("1002", 80), SenderSpec("1003", 950))
    assert parse_senders("", "100000000000001", 75) == (SenderSpec("100000000000001", 75),)
    for bad in ("abc", "1001:x", "1001,1001", "1001:-1"):
        with pytest.raises(ValueError):
            parse_senders(bad, "9", 80)


def test_adding_a_number_moves_only_the_rooms_it_wins():
    rooms = [f"room-{i}" for i in range(4000)]
    three = ("1001", "1002", "1003")
    before = {r: rendezvous_sender(r, three) for r in rooms}
    after = {r: rendezvous_sender(r, (*three, "1004")) for r in rooms}
    moved = [r for r in rooms if before[r] != after[r]]
    assert all(after[r] == "1004" for r in moved)  # nobody moves between the old numbers
    assert 0.2 < len(moved) / len(rooms) < 0.3  # about 1/4 go to the new one
    per_number = {n: sum(v == n for v in before.values()) for n in three}
    assert min(per_number.values()) > 1200  # spread evenly (4000 / 3 = 1333)


def enqueue(mid: str, default_sender: str, sender: str | None = None, at: int = T0) -> Enqueue:
    return Enqueue(mid, "whatsapp", "15550001", "hi", at, at, sender=sender, default_sender=default_sender)


step = stepper(POLICY)


def test_a_room_keeps_its_number_while_it_holds_messages_and_a_named_sender_wins():
    state, d = step(RoomState("r1"), enqueue("m1", default_sender="1001"))
    effects = d.effects
    send1 = next(e for e in effects if isinstance(e, Send))
    assert send1.message.sender == "1001"
    # A number was added meanwhile: the room's hash now picks 1002, but it holds m1.
    state, _ = step(state, enqueue("m2", default_sender="1002"))
    state, _ = step(state, enqueue("m3", default_sender="1002", sender="1003"))
    assert [m.sender for m in state.pending] == ["1001", "1003"]
    # The sender survives the document codec.
    assert [m.sender for m in room_as_read("r1", room_to_doc(state), 0).pending] == ["1001", "1003"]
    # Once empty, the room follows its hash again.
    for seq in (1, 2, 3):
        state, _ = step(state, SendReturned(state.incarnation, seq, 1, SendOutcome.ACCEPTED, T0 + seq * 10, "c"))
        state, _ = step(state, StatusUpdate(state.incarnation, seq, 1, "delivered", T0, T0 + seq * 10 + 5))
    assert state.in_flight is None and not state.pending
    state, d = step(state, enqueue("m4", default_sender="1002", at=T0 + 100))
    effects = d.effects
    assert next(e for e in effects if isinstance(e, Send)).message.sender == "1002"


NUMBERED = dataclasses.replace(POLICY, whatsapp_numbers=("1001", "1002", "1003"))


@pytest.mark.parametrize(("held", "status_from", "acked"), [
    ("1002", "1002", True),  # the room's own number
    ("1002", "1001", False),  # another of the deployment's numbers
    ("1002", None, True),  # the status does not say (no `metadata`)
    (None, "1001", True),  # no `sender` held: the first number
    (None, "1002", False),
    ("1009", "1001", True),  # a number taken out of WHATSAPP_SENDERS: sent from the first
    ("1009", "1009", False),
])
def test_a_status_acks_only_from_the_number_its_attempt_went_out_from(held, status_from, acked):
    d = decide(RoomState("r1"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0, default_sender=held),
               NUMBERED, "test")
    state = d.state
    assert state.in_flight.number == (held if held in NUMBERED.whatsapp_numbers else "1001")
    state = decide(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, T0 + 10, "c"),
                   NUMBERED, "test").state
    d = decide(state, StatusUpdate(state.incarnation, 1, 1, "delivered", T0, T0 + 20, sender=status_from),
               NUMBERED, "test")
    assert (d.state is not None and d.state.in_flight is None) is acked
    if not acked:
        assert [(e.event, e.reason) for e in d.events] == [("status_ignored", f"wrong_sender: {status_from}")]


def test_an_attempt_keeps_its_number_when_the_numbers_change_while_it_is_in_flight():
    one = dataclasses.replace(POLICY, whatsapp_numbers=("1001",))
    state = decide(RoomState("r1"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0), one, "test").state
    # Stored and read back (the next request reads the room), then a number is put first.
    state = room_as_read("r1", room_to_doc(state), 0)
    assert state.in_flight.number == "1001"
    moved = dataclasses.replace(POLICY, whatsapp_numbers=("1002", "1001"))
    d = decide(state, StatusUpdate(state.incarnation, 1, 1, "failed", T0, T0 + 20, error_code=131026,
                                   sender="1001"), moved, "test")
    assert d.state is not None and d.state.in_flight is None and d.state.counts == {"failed": 1}


def test_a_send_whose_number_is_at_its_rate_waits_as_this_same_attempt():
    state, d = step(RoomState("r1"), enqueue("m1", default_sender="1001"))
    effects = d.effects
    send = next(e for e in effects if isinstance(e, Send))
    busy_until = T0 + 400_000
    d = decide(state, SendReturned(state.incarnation, 1, send.attempt, SendOutcome.REFUSED, T0 + 1000, "c",
                                   sender_busy_until_us=busy_until), POLICY, "test")
    state = d.state
    assert state.in_flight.phase is Phase.PACED and state.in_flight.due_at_us == busy_until
    assert [str(e.event) for e in d.events] == ["paced"] and "sender 1001 at its rate" in d.events[0].reason
    assert [e.due_at_us for e in d.effects if isinstance(e, ScheduleTimer)] == [busy_until]
    # Its slot comes: sent as attempt 1 again (that number never reached the platform).
    state, d = step(state, TimerFired(state.incarnation, 1, send.attempt, busy_until, busy_until))
    effects = d.effects
    again = [e for e in effects if isinstance(e, Send)]
    assert [(e.message.seq, e.attempt) for e in again] == [(1, send.attempt)]
    assert again[0].delivery_id != send.delivery_id  # a new start time in the delivery id


def test_a_wait_for_a_slot_free_within_the_ms_of_the_timer_that_woke_it_is_due_in_a_later_ms():
    """A timer's task name holds its due ms (shared/tasks.py): a wait due
    in the same ms as the timer that woke the attempt would reuse that
    running task's name, which Cloud Tasks refuses, and the room would wait
    for the watchdog (`make scale-model`: 9 rooms stuck PACED)."""
    state, d = step(RoomState("r1"), enqueue("m1", default_sender="1001"))
    send = next(e for e in d.effects if isinstance(e, Send))
    paced_at = T0 + 400_000_250  # the first wait, due 250 us into a millisecond
    d = decide(state, SendReturned(state.incarnation, 1, send.attempt, SendOutcome.REFUSED, T0 + 1000, "c",
                                   sender_busy_until_us=paced_at), POLICY, "test")
    state, d = step(d.state, TimerFired(d.state.incarnation, 1, send.attempt, paced_at, paced_at))
    again = next(e for e in d.effects if isinstance(e, Send))
    # At its slot the number is busy again, its next slot 102 us later: within the same ms.
    d = decide(state, SendReturned(state.incarnation, 1, again.attempt, SendOutcome.REFUSED, paced_at, "c",
                                   sender_busy_until_us=paced_at + 102), POLICY, "test")
    [timer] = [e for e in d.effects if isinstance(e, ScheduleTimer)]
    assert timer.due_at_us == (paced_at // 1000 + 1) * 1000
    assert task_id(timer) != task_id(replace(timer, due_at_us=paced_at))


def test_a_busy_number_gives_back_the_pair_rate_token_it_did_not_use():
    policy = Policy(ack_timeout_ms=3000, send_timeout_ms=1000, send_start_deadline_ms=1000, max_queued_messages=100,
                    pacing=(("whatsapp", 6000, 2),))
    d = decide(RoomState("r1"), enqueue("m1", default_sender="1001"), policy, "test")
    assert d.state.pace_tokens == 1.0
    d = decide(d.state, SendReturned(d.state.incarnation, 1, 1, SendOutcome.REFUSED, T0, "c",
                                     sender_busy_until_us=T0 + 1000), policy, "test")
    assert d.state.pace_tokens == 2.0


def push(attrs: dict) -> bytes:
    data = base64.b64encode(json.dumps({"type": "text", "text": "hi"}).encode()).decode()
    return json.dumps({"message": {"messageId": "123", "attributes": {
        "room_id": "r1", "provider": "whatsapp", "recipient": "15550001", "message_id": "m1", **attrs},
        "data": data}}).encode()


def test_a_push_names_a_configured_number_or_is_kept_as_rejected():
    numbers = ("1001", "1002", "1003")
    accepted = parse_push(push({}), T0, senders=numbers)
    assert isinstance(accepted, Accepted) and accepted.event.sender is None
    assert accepted.event.default_sender == rendezvous_sender("r1", numbers)
    named = parse_push(push({"sender": "1003"}), T0, senders=numbers)
    assert isinstance(named, Accepted) and named.event.sender == "1003"
    unknown = parse_push(push({"sender": "1009"}), T0, senders=numbers)
    assert isinstance(unknown, Rejected) and "not one of this deployment's WhatsApp numbers" in unknown.reason
    messenger = parse_push(push({"sender": "1001", "provider": "messenger"}), T0, senders=numbers)
    assert isinstance(messenger, Rejected) and "has one sender" in messenger.reason
