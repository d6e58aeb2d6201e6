"""Messenger receipts without mids (issue 34): a watermark is judged against
the platform's own stamp of the message, from its echo, not baton's clock;
with no echo the old rule (after the send's return plus the margin) stands.
And an echo proves the platform took an attempt whose send outcome was
unknown (issue 31, item 2): it times out instead of being resent."""

from __future__ import annotations

from shared.room import (
    Enqueue,
    Policy,
    RecipientReceipt,
    RoomState,
    SendOutcome,
    SendReturned,
    TimerFired,
    awaits_platform_proof,
    decide,
)
from shared.room_document import acceptance_key, room_as_read, room_to_doc

T0 = 1_700_000_000_000_000
MS = 1000
POLICY = Policy(ack_timeout_ms=3000, watermark_margin_ms=0)
STAMP = T0 + 20 * MS  # the platform stamped the message 20 ms after our decision
RETURNED = T0 + 60 * MS  # and our send call returned 40 ms later


def messenger_room(echo: bool, outcome: SendOutcome = SendOutcome.ACCEPTED) -> RoomState:
    state = decide(RoomState("r"), Enqueue("m1", "messenger", "2400000001", "hi", T0, T0), POLICY, "t").state
    state = decide(state, SendReturned(state.incarnation, 1, 1, outcome, RETURNED, "c",
                                       provider_message_id="mid.1" if outcome is SendOutcome.ACCEPTED else None),
                   POLICY, "t").state
    doc = room_to_doc(state)
    if echo:  # RoomStore.record_echo's blind write, folded by the next read
        doc["echoes"] = {acceptance_key(state.incarnation, 1, 1): {"ts": STAMP, "mid": "mid.1"}}
    return room_as_read("r", doc, 0)


def receipt(watermark_us: int, status: str = "delivered") -> RecipientReceipt:
    return RecipientReceipt("messenger", "2400000001", status, watermark_us, (), RETURNED + 500 * MS)


def outcome_of(state: RoomState, event) -> list[str]:
    return [str(e.event) for e in decide(state, event, POLICY, "t").events]


def test_a_watermark_one_ms_before_the_echo_stamp_acks_nothing():
    assert outcome_of(messenger_room(echo=True), receipt(STAMP - MS)) == ["status_ignored"]


def test_a_delivery_watermark_acks_only_strictly_after_the_echo_stamp_a_read_one_at_it():
    """Meta: a delivery watermark covers the messages sent before it, a read
    watermark those at or before it (issue 43, bug 5)."""
    room = messenger_room(echo=True)
    assert outcome_of(room, receipt(STAMP)) == ["status_ignored"]
    assert outcome_of(room, receipt(STAMP + 1)) == ["acked"]
    assert outcome_of(room, receipt(STAMP, "read")) == ["acked"]
    assert outcome_of(room, receipt(STAMP - 1, "read")) == ["status_ignored"]


def test_with_no_echo_a_watermark_before_the_send_returned_acks_nothing_and_one_after_does():
    state = messenger_room(echo=False)
    assert outcome_of(state, receipt(STAMP)) == ["status_ignored"]
    assert outcome_of(state, receipt(RETURNED)) == ["status_ignored"]  # at the return: strictly after is needed
    assert outcome_of(state, receipt(RETURNED + 1)) == ["acked"]
    assert outcome_of(state, receipt(RETURNED, "read")) == ["acked"]


def test_an_echo_turns_an_unknown_send_outcome_into_a_timeout_not_a_resend():
    state = messenger_room(echo=True, outcome=SendOutcome.UNKNOWN)
    flight = state.in_flight
    assert str(flight.phase) == "sent"
    late = flight.deadline_us + MS
    assert outcome_of(state, TimerFired(state.incarnation, 1, 1, flight.due_at_us, late)) == ["timed_out"]
    unproven = messenger_room(echo=False, outcome=SendOutcome.UNKNOWN)
    assert outcome_of(unproven, TimerFired(unproven.incarnation, 1, 1, flight.due_at_us, late)) == ["resent"]


def whatsapp_room(outcome: SendOutcome | None, proof_number: str | None, number: str = "100000000000001"
                  ) -> RoomState:
    """A WhatsApp room whose attempt went out from `number`; `outcome` None:
    no send outcome recorded (a crash). With the blind-written proof of a
    `sent` status naming `proof_number` (WHATSAPP_SENT_PROOF=on)."""
    policy = Policy(ack_timeout_ms=3000, whatsapp_numbers=(number, "100000000000002"))
    state = decide(RoomState("w"), Enqueue("m1", "whatsapp", "15550001", "hi", T0, T0, sender=number),
                   policy, "t").state
    if outcome is not None:
        state = decide(state, SendReturned(state.incarnation, 1, 1, outcome, RETURNED, "c"), policy, "t").state
    doc = room_to_doc(state)
    doc["echoes"] = {acceptance_key(state.incarnation, 1, 1): {"ts": STAMP, "mid": "wamid.1", "num": proof_number}}
    return room_as_read("w", doc, 0)


def test_a_sent_status_from_the_attempts_own_number_proves_it_and_one_from_another_does_not():
    assert str(whatsapp_room(SendOutcome.UNKNOWN, "100000000000001").in_flight.phase) == "sent"
    assert str(whatsapp_room(SendOutcome.UNKNOWN, "100000000000002").in_flight.phase) == "unknown"
    assert str(whatsapp_room(SendOutcome.UNKNOWN, None).in_flight.phase) == "sent"  # no metadata: not checked


def test_an_attempt_with_no_recorded_outcome_but_the_platforms_record_times_out_instead_of_being_resent():
    proven = whatsapp_room(None, "100000000000001")
    flight = proven.in_flight
    assert str(flight.phase) == "sending" and flight.platform_ts_us == STAMP
    late = T0 + (POLICY.send_window_ms + POLICY.ack_timeout_ms) * MS + MS
    assert outcome_of(proven, TimerFired(proven.incarnation, 1, 1, flight.due_at_us, late)) == ["timed_out"]
    unproven = whatsapp_room(None, "100000000000002")
    assert unproven.in_flight.platform_ts_us is None
    assert outcome_of(unproven, TimerFired(unproven.incarnation, 1, 1, flight.due_at_us, late)) == \
        ["send_unknown", "resent"]


def test_only_an_attempt_sending_or_unknown_without_the_platforms_record_awaits_a_sent_proof():
    # The webhook writes a `sent` status into the room only when this says so
    # (WHATSAPP_SENT_PROOF=on): the normal path, an accepted send, costs a read.
    def waits(outcome, proof_number=None, inc_delta=0, seq=1, attempt=1, number="100000000000001"):
        state = whatsapp_room(outcome, proof_number)
        return awaits_platform_proof(state, state.incarnation + inc_delta, seq, attempt, number)
    assert waits(None, proof_number="100000000000002")  # sending: the foreign proof was dropped
    assert not waits(None, proof_number="100000000000001")  # sending, proven already
    assert waits(SendOutcome.UNKNOWN, proof_number="100000000000002")
    assert not waits(SendOutcome.UNKNOWN, proof_number="100000000000001")  # proven already
    assert not waits(SendOutcome.ACCEPTED, proof_number="100000000000002")
    assert not waits(SendOutcome.REFUSED, proof_number="100000000000002")
    assert not waits(SendOutcome.UNKNOWN, proof_number="100000000000002", number="100000000000002")
    assert waits(SendOutcome.UNKNOWN, proof_number="100000000000002", number=None)
    assert not waits(SendOutcome.UNKNOWN, proof_number="100000000000002", attempt=2)
    assert not waits(SendOutcome.UNKNOWN, proof_number="100000000000002", seq=2)
    assert not waits(SendOutcome.UNKNOWN, proof_number="100000000000002", inc_delta=1)
    assert not awaits_platform_proof(RoomState("w"), 0, 1, 1, None)  # nothing in flight


def kept_then_returned(watermark_us: int, status: str = "delivered") -> list[str]:
    """A watermark-only receipt while the send is under way and before the
    echo is kept; the echo lands (blind write), then the send returns: the
    kept receipt is judged against the echo's stamp (issue 43)."""
    state = decide(RoomState("r"), Enqueue("m1", "messenger", "2400000001", "hi", T0, T0), POLICY, "t").state
    d = decide(state, RecipientReceipt("messenger", "2400000001", status, watermark_us, (), T0 + 30 * MS), POLICY,
               "t")
    assert [str(e.event) for e in d.events] == ["status_ignored"] and d.state is not None
    doc = room_to_doc(d.state)
    doc["echoes"] = {acceptance_key(state.incarnation, 1, 1): {"ts": STAMP, "mid": "mid.1"}}
    state = room_as_read("r", doc, 0)
    return outcome_of(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, RETURNED, "c",
                                          provider_message_id="mid.1"))


def test_a_kept_receipt_is_judged_at_the_return_once_the_echo_is_known():
    assert kept_then_returned(STAMP + 1) == ["acked"]
    assert kept_then_returned(STAMP) == []  # a delivery watermark equal to the stamp: held, not acked
    assert kept_then_returned(STAMP, "read") == ["acked"]
    assert kept_then_returned(STAMP - 1, "read") == []
