"""The cases issue 43 suspected from reading, each proven on the room's rules:
a room sending from two WhatsApp numbers after a number is added, the
watchdog leaving an overdue in-flight wake-up behind an overdue sequence gap,
and a parked dead-letter copy not advancing the producer sequence."""

from __future__ import annotations

from dataclasses import replace

from shared.room import (
    Enqueue,
    InFlight,
    Park,
    Phase,
    Policy,
    QueuedMessage,
    RoomState,
    Send,
    SendOutcome,
    SendReturned,
    StatusUpdate,
    WatchdogSweep,
    decide,
)

T0 = 1_700_000_000_000_000
MS = 1000
ONE = Policy(whatsapp_numbers=("1001",))
TWO = Policy(whatsapp_numbers=("1001", "1002"))  # a number added


def push(state: RoomState, mid: str, policy: Policy, default_sender: str | None, sequence: int | None = None,
         at: int = T0) -> tuple[RoomState, list[Send]]:
    d = decide(state, Enqueue(mid, "whatsapp", "15550001", "hi", at, at, sequence=sequence,
                              default_sender=default_sender), policy, "enqueue")
    return (d.state or state), [e for e in d.effects if isinstance(e, Send)]


def ack(state: RoomState, policy: Policy, at: int) -> tuple[RoomState, list[Send]]:
    flight = state.in_flight
    assert flight is not None
    d = decide(state, SendReturned(state.incarnation, flight.message.seq, flight.attempt, SendOutcome.ACCEPTED, at,
                                   "c"), policy, "t")
    state = d.state or state
    d = decide(state, StatusUpdate(state.incarnation, flight.message.seq, flight.attempt, "delivered",
                                   flight.started_at_us, at + MS), policy, "webhook")
    return (d.state or state), [e for e in d.effects if isinstance(e, Send)]


def test_a_message_after_a_number_is_added_goes_from_the_number_of_the_one_before():
    """m1 was stored with no sender (one number then); a number is added and
    the room's rendezvous number is now the new one: m2 must still go from
    the number m1 goes from, or the recipient gets two conversations."""
    state, sends = push(RoomState("r"), "m1", ONE, None)
    assert sends[0].number == "1001" and state.in_flight.message.sender is None
    state, _ = push(state, "m2", TWO, "1002")
    state, sends = ack(state, TWO, T0 + 100 * MS)
    assert [s.number for s in sends] == ["1001"]


def test_a_message_entering_before_sequence_held_ones_goes_from_their_number():
    """m2 (sequence 2) waits for sequence 1, kept with number 1001; m1 comes
    with the room's rendezvous number now 1002: both must go from one number."""
    state, _ = push(RoomState("r"), "m2", TWO, "1001", sequence=2)
    assert state.sequence_held and state.sequence_held[0].sender == "1001"
    state, sends = push(state, "m1", TWO, "1002", sequence=1)
    numbers = [s.number for s in sends]
    state, more = ack(state, TWO, T0 + 100 * MS)
    numbers += [s.number for s in more]
    assert numbers == ["1001", "1001"], numbers


def test_the_watchdog_wakes_an_overdue_in_flight_message_behind_an_overdue_gap():
    """One sweep finds both the sequence gap and the in-flight wake-up
    overdue (both timer tasks lost): it must act on both, not leave the
    in-flight message for the next sweep."""
    policy = Policy(watchdog_grace_ms=1000, sequence_gap_timeout_ms=1000, ack_timeout_ms=3000)
    msg = QueuedMessage(1, "m1", "whatsapp", "15550001", "hi", T0, T0, sequence=1)
    flight = InFlight(msg, 1, T0, Phase.SENT, T0 + 3000 * MS, "push:m1", deadline_us=T0 + 3000 * MS)
    held = QueuedMessage(0, "m3", "whatsapp", "15550001", "later", T0, T0, sequence=3)
    state = RoomState("r", incarnation=T0, next_seq=2, in_flight=flight, expected_sequence=2, sequence_held=(held,),
                      gap_due_us=T0 + 1000 * MS)
    d = decide(state, WatchdogSweep(T0 + 60_000 * MS), policy, "sweep")
    kinds = [str(e.event) for e in d.events]
    assert kinds.count("watchdog_rescued") == 2, kinds
    assert "timed_out" in kinds and d.state is not None and d.state.in_flight.message.message_id == "m3"


def test_a_parked_copy_filling_a_placeholder_advances_the_producer_sequence():
    """m2 (sequence 2) was refused while the room was full and got a
    placeholder; its dead-letter copy parks it there. Sequence 2 has come:
    m3 (sequence 3) must enter the queue, not wait for a gap that is not one."""
    policy = Policy(max_queued_messages=1, sequence_gap_timeout_ms=30_000)
    state, _ = push(RoomState("r"), "m1", policy, None, sequence=1)
    state, _ = push(state, "m2", policy, None, sequence=2, at=T0 + MS)  # full: refused, awaited
    assert state.awaiting
    state, _ = ack(state, policy, T0 + 2 * MS)
    d = decide(state, Park("m2", "whatsapp", "15550001", "hi", T0 + MS, T0 + 5 * MS, "dead-lettered by Pub/Sub",
                           sequence=2), policy, "deadletter")
    state = d.state or state
    assert [m.message_id for m in state.pending] == ["m2"] and state.pending[0].parked
    assert state.expected_sequence == 3
    state, _ = push(state, "m3", replace(policy, max_queued_messages=10), None, sequence=3, at=T0 + 6 * MS)
    assert not state.sequence_held and state.gap_due_us is None
    assert [m.message_id for m in state.pending] == ["m2", "m3"]


def test_a_parked_copy_of_a_message_never_seen_advances_the_producer_sequence():
    policy = Policy()
    state, _ = push(RoomState("r"), "m1", policy, None, sequence=1)
    d = decide(state, Park("m2", "whatsapp", "15550001", "hi", T0, T0 + 5 * MS, "dead-lettered by Pub/Sub",
                           sequence=2), policy, "deadletter")
    assert d.state is not None and d.state.expected_sequence == 3


def test_media_is_uploaded_by_the_number_it_is_sent_from_within_one_configuration():
    """Suspected: media uploaded with `msg.sender`'s number but sent from
    `sent_from(...)`'s. Within one configuration they are the same number
    for every `sender` a stored message can have (a configured number, none,
    a number since removed): the preparation's fallback client (`whatsapp`)
    is the first number, which is `sent_from`'s default too."""
    import dataclasses

    from shared import config
    from shared.providers import make_preparers, make_senders
    from shared.senders import sent_from

    settings = dataclasses.replace(config.load(), whatsapp_senders="1001:75,1002:75")
    numbers = tuple(s.phone_number_id for s in settings.whatsapp_sender_specs)
    preparers, senders = make_preparers(settings), make_senders(settings)
    for sender in ("1002", "1001", None, "1003"):
        # shared/service/preparation.py's choice, and shared/service/core.py's for the Send's number
        preparer = preparers.get(f"whatsapp:{sender}") or preparers["whatsapp"]
        number = sent_from(sender, numbers)
        client = senders.get(f"whatsapp:{number}") or senders["whatsapp"]
        assert preparer._node_url == client._node_url, sender  # the same /{phone-number-id} node
