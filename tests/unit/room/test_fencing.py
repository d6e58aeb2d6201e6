"""Fencing tokens never repeat, and producer order holds on every way in
(issue 28, items 2, 3 and 5): pure rulebook tests, no I/O.

An attempt number is the fencing token of a send: a status, a timer and a
send outcome name (incarnation, seq, attempt). Reusing one for the same
message lets a late status of an old send act on a new one."""

from __future__ import annotations

from dataclasses import replace

from shared.room import (
    Enqueue,
    Pause,
    Phase,
    Policy,
    Prepare,
    PrepareFailed,
    Redrive,
    Resume,
    RoomState,
    Send,
    SendOutcome,
    SendReturned,
    StatusUpdate,
    TimerFired,
    decide,
)
from shared.room_document import message_from_doc, message_to_doc, room_as_read, room_to_doc

POLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=2000, send_start_deadline_ms=1000, first_timer_slack_ms=250,
                max_send_attempts=2, send_retry_base_ms=1000, dedup_retention=50, max_queued_messages=100,
                watchdog_grace_ms=60_000, prepare_ahead=0, prepare_timeout_ms=10_000, max_prepare_attempts=2,
                prepare_retry_base_ms=1000)
T0 = 1_700_000_000_000_000
S = 1_000_000


class Room:
    """One room driven through `decide`, recording every send it decides."""

    def __init__(self, policy: Policy = POLICY) -> None:
        self.state = RoomState("r1")
        self.policy = policy
        self.sends: list[Send] = []
        self.events: list[str] = []
        self.prepares: list[Prepare] = []

    def __call__(self, event):
        d = decide(self.state, event, self.policy, "test")
        if d.state is not None:
            # Through the stored form, as the store does: nothing may live only in memory.
            self.state = room_as_read("r1", room_to_doc(d.state), 0)
        self.sends += [e for e in d.effects if isinstance(e, Send)]
        self.prepares += [e for e in d.effects if isinstance(e, Prepare)]
        self.events += [str(e.event) for e in d.events]
        return d

    @property
    def flight(self):
        return self.state.in_flight

    def returned(self, outcome: SendOutcome, at: int, **kw) -> None:
        f = self.flight
        self(SendReturned(self.state.incarnation, f.message.seq, f.attempt, outcome, at, "c", **kw))

    def fire(self, at: int | None = None) -> None:
        f = self.flight
        self(TimerFired(self.state.incarnation, f.message.seq, f.attempt, f.due_at_us, at or f.due_at_us))

    def wait_out(self) -> None:
        """Fire the in-flight attempt's timers until it is over (resent, ended or back in the queue)."""
        f = self.flight
        for _ in range(5):
            self.fire()
            if self.flight is None or (self.flight.message.seq, self.flight.attempt) != (f.message.seq, f.attempt):
                return
        raise AssertionError("the attempt never ended")


def push(mid: str, at: int, sequence: int | None = None, provider: str = "whatsapp") -> Enqueue:
    return Enqueue(mid, provider, "15550001", "hi", at - 1000, at, sequence=sequence)


def dead_letter_m1(room: Room) -> int:
    """m1 sent twice with unknown outcomes, then dead-lettered (MAX_SEND_ATTEMPTS=2); returns the time."""
    room(push("m1", T0))
    room.returned(SendOutcome.UNKNOWN, T0 + 100_000)
    room.wait_out()  # past the deadline: resent as attempt 2
    assert [s.attempt for s in room.sends] == [1, 2]
    room.returned(SendOutcome.UNKNOWN, room.flight.started_at_us + 100_000)
    room.wait_out()
    assert room.events[-1] == "dead_lettered" and room.flight is None
    return room.sends[-1].trigger_at_us + 10 * S


def redrive_m1(room: Room, at: int, kept_attempts: int | None = None) -> None:
    kept = room.sends[0].message
    if kept_attempts is not None:
        kept = replace(kept, attempts=kept_attempts)
    room(Redrive(1, "ops", "fixed", at, kept, room.state.incarnation))


def test_a_redriven_dead_letter_is_sent_under_attempt_numbers_it_never_used():
    room = Room()
    at = dead_letter_m1(room)
    redrive_m1(room, at, kept_attempts=0)  # even when the kept copy does not say: the room remembers
    assert [s.attempt for s in room.sends] == [1, 2, 3]
    assert len({s.delivery_id for s in room.sends}) == 3


def test_a_late_failed_of_an_old_attempt_does_not_end_the_redriven_copy():
    room = Room()
    at = dead_letter_m1(room)
    redrive_m1(room, at)
    room(StatusUpdate(room.state.incarnation, 1, 1, "failed", T0, at + 1000, error_code=131026))
    assert room.flight is not None and room.flight.attempt == 3
    assert room.events[-1] == "status_ignored"


def test_a_late_delivered_of_an_old_attempt_waits_for_the_redriven_send_to_be_over():
    """The old copy reached the device, so the message is acked; but the new
    send may still be under way, so m2 must not go before it cannot."""
    room = Room()
    at = dead_letter_m1(room)
    room(push("m2", at - S))  # goes out at once: nothing in flight
    room.returned(SendOutcome.ACCEPTED, at - S + 100_000)
    room(StatusUpdate(room.state.incarnation, 2, 1, "delivered", T0, at - S + 200_000))
    redrive_m1(room, at)
    sends_before = len(room.sends)
    room(StatusUpdate(room.state.incarnation, 1, 1, "delivered", T0, at + 1000))
    assert len(room.sends) == sends_before  # nothing new may start while attempt 3 may be sending
    assert room.flight.acked_early == "delivered"
    room.returned(SendOutcome.ACCEPTED, at + 300_000)
    assert room.events.count("acked") == 2


def test_the_redriven_message_gets_max_send_attempts_sends_of_its_own():
    room = Room()
    at = dead_letter_m1(room)
    redrive_m1(room, at)
    room.returned(SendOutcome.UNKNOWN, at + 100_000)
    room.wait_out()
    assert [s.attempt for s in room.sends] == [1, 2, 3, 4]
    room.returned(SendOutcome.UNKNOWN, room.flight.started_at_us + 100_000)
    room.wait_out()
    assert room.events[-1] == "dead_lettered" and len(room.sends) == 4
    assert room.state.ended[-1].attempts == 4


def test_pause_and_resume_around_a_paced_resend_keep_its_count():
    """A paced resend that meets a pause goes back to the queue; after the
    resume it is the same attempt, and MAX_SEND_ATTEMPTS still bounds the sends."""
    policy = replace(POLICY, pacing=(("whatsapp", 10_000, 1),))
    room = Room(policy)
    room(push("m1", T0))
    room.returned(SendOutcome.UNKNOWN, T0 + 100_000)
    for _ in range(5):
        room(Pause("ops", "look", room.flight.started_at_us + 1000))
        room.wait_out()  # held until its deadline, then resent: no token yet, so paced
        if room.flight is not None:
            assert room.flight.phase is Phase.PACED
            room.fire()  # the token comes: paused, so back to the queue
        assert room.flight is None and room.state.pending
        room(Resume("ops", "go", room.state.pending[0].enqueued_at_us + 20 * S))
        if room.flight.phase is Phase.PACED:
            room.fire()
        if room.flight is None or room.flight.phase is not Phase.SENDING:
            break
        room.returned(SendOutcome.UNKNOWN, room.flight.started_at_us + 100_000)
        room.wait_out()
        if room.flight is None:
            break
    attempts = [s.attempt for s in room.sends]
    assert len(attempts) <= policy.max_send_attempts, attempts
    assert len(set(attempts)) == len(attempts), attempts


def test_a_redriven_dead_letter_is_prepared_again_under_a_new_preparation_attempt():
    policy = replace(POLICY, prepare_poison="dead_letter", max_prepare_attempts=1)
    room = Room(policy)
    room(Enqueue("m1", "whatsapp", "15550001", "cap", T0, T0, media_kind="image",
                 media_link="https://media.test/1.png", prepare="media"))
    assert [(p.seq, p.attempt) for p in room.prepares] == [(1, 1)]
    room(PrepareFailed(room.state.incarnation, 1, 1, "HTTP 404", True, T0 + S))
    assert room.events[-1] == "dead_lettered"
    room(Redrive(1, "ops", "media fixed", T0 + 60 * S, _kept(), room.state.incarnation))
    assert [(p.seq, p.attempt) for p in room.prepares] == [(1, 1), (1, 2)]


def _kept():
    """The dead letter's stored message, as `baton` reads it back."""
    from shared.room import QueuedMessage

    return message_from_doc(message_to_doc(QueuedMessage(
        1, "m1", "whatsapp", "15550001", "cap", T0, T0, media_kind="image", media_link="https://media.test/1.png",
        prepare="media", prep_attempt=1, prep_failed="HTTP 404")))


def test_a_redelivered_push_that_fills_its_placeholder_still_waits_for_its_producer_sequence():
    """m4 (sequence 4) is refused while the room is full and gets a
    placeholder when a later push arrives; its redelivery must not be sent
    while sequences 2 and 3 are missing."""
    policy = replace(POLICY, max_queued_messages=2)
    room = Room(policy)
    room(push("m1", T0, sequence=1))  # in flight
    room(push("mx", T0 + 1000, sequence=None))  # queued: the room is full now
    d = room(push("m4", T0 + 2000, sequence=4))
    assert d.refused
    room.returned(SendOutcome.ACCEPTED, T0 + 100_000)
    room(StatusUpdate(room.state.incarnation, 1, 1, "delivered", T0, T0 + 200_000))  # mx goes
    room(push("m5", T0 + 300_000, sequence=5))  # Pub/Sub gave up on m4: its place is held
    room.returned(SendOutcome.ACCEPTED, T0 + 400_000)
    room(StatusUpdate(room.state.incarnation, 2, 1, "delivered", T0, T0 + 500_000))
    room.policy = POLICY  # room for every message from here on
    room(push("m4", T0 + 600_000, sequence=4))  # the redelivery fills its place
    sent = [s.message.message_id for s in room.sends]
    assert "m4" not in sent and "m5" not in sent, sent
    room(push("m2", T0 + 700_000, sequence=2))
    room.returned(SendOutcome.ACCEPTED, T0 + 800_000)
    room(StatusUpdate(room.state.incarnation, room.flight.message.seq, 1, "delivered", T0, T0 + 900_000))
    room(push("m3", T0 + 1_000_000, sequence=3))
    while room.flight is not None:
        at = room.flight.started_at_us + 100_000
        room.returned(SendOutcome.ACCEPTED, at)
        room(StatusUpdate(room.state.incarnation, room.flight.message.seq, 1, "delivered", T0, at + 1000))
    order = [s.message.sequence for s in room.sends if s.message.sequence is not None]
    assert order == [1, 2, 3, 4, 5], order
