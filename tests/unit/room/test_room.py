"""Unit tests of the pure room rulebook (no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import docsize
from shared.events import TERMINAL_EVENTS
from shared.room import (
    CancelTimer,
    Enqueue,
    Park,
    Pause,
    Phase,
    Policy,
    Redrive,
    Resume,
    RoomState,
    ScheduleTimer,
    Send,
    SendOutcome,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
    decide,
    make_delivery_id,
    parse_delivery_id,
    room_phase,
    rule_for,
)
from shared.room_document import room_as_read, room_doc_bytes, room_to_doc
from tests.unit.room.steps import POLICY, make_event, stepper

T0 = 1_700_000_000_000_000
S = 1_000_000  # one second in us


def enqueue(mid: str, at: int = T0, text: str = "hi") -> Enqueue:
    return Enqueue(mid, "whatsapp", "15550001", text, at - 5_000, at)


step = stepper(POLICY)


def sends(d) -> list[tuple[int, int]]:
    return [(e.message.seq, e.attempt) for e in d.effects if isinstance(e, Send)]


def timers(d) -> list[tuple[int, int, int]]:
    return [(e.seq, e.attempt, e.due_at_us) for e in d.effects if isinstance(e, ScheduleTimer)]


def kinds(d) -> list[str]:
    return [str(e.event) for e in d.events]


def inc(state: RoomState) -> int:
    return state.incarnation


def ack(state: RoomState, seq: int, attempt: int = 1, status: str = "delivered", at: int = T0 + 80_000):
    return StatusUpdate(inc(state), seq, attempt, status, T0, at, f"wamid.{seq}.{attempt}")


def returned(state: RoomState, outcome: SendOutcome, at: int, seq: int = 1, attempt: int = 1, **kw) -> SendReturned:
    return SendReturned(inc(state), seq, attempt, outcome, at, "push:m1", **kw)


def fire(state: RoomState, at: int, seq: int | None = None, attempt: int | None = None, due: int | None = None):
    f = state.in_flight
    return TimerFired(inc(state), seq or f.message.seq, attempt or f.attempt, due or f.due_at_us, at)


def sent_room(*mids: str, accepted_at: int = T0 + 50_000) -> RoomState:
    """A room whose first message was sent and accepted, the others queued."""
    state, _ = step(RoomState("r1"), enqueue(mids[0]))
    for m in mids[1:]:
        state, _ = step(state, enqueue(m))
    state, _ = step(state, returned(state, SendOutcome.ACCEPTED, accepted_at))
    return state


# ------------------------------------------------------------------ the baton


def test_idle_room_sends_the_first_message_at_once_and_arms_its_timer_first():
    state, d = step(RoomState("r1"), enqueue("m1"))
    assert sends(d) == [(1, 1)]
    assert isinstance(d.effects[0], ScheduleTimer) and isinstance(d.effects[1], Send)
    assert d.effects[0].due_at_us == T0 + 3_250_000  # ack timeout + slack after the decision
    assert d.effects[1].start_by_us == T0 + 1_000_000
    assert kinds(d) == ["enqueued"]
    assert state.in_flight.phase is Phase.SENDING and state.wake_at_us == T0 + 3_250_000
    assert state.incarnation == T0  # the document's creation


def test_busy_room_queues_and_the_ack_passes_the_baton_in_publish_order():
    state = sent_room("m1", "m2", "m3")
    assert [m.seq for m in state.pending] == [2, 3]
    state, d = step(state, ack(state, 1))
    assert kinds(d) == ["acked"] and sends(d) == [(2, 1)]
    assert next(e for e in d.effects if isinstance(e, Send)).trigger == "ack"
    state, d = step(state, ack(state, 2, status="read"))
    assert sends(d) == [(3, 1)]
    state, d = step(state, ack(state, 3))
    assert sends(d) == [] and state.in_flight is None and state.pending == ()
    assert state.counts == {"acked": 3} and state.wake_at_us is None and not state.holds_messages


def cancels(d) -> list[tuple[int, int, int]]:
    return [(e.seq, e.attempt, e.due_at_us) for e in d.effects if isinstance(e, CancelTimer)]


def test_an_ack_before_the_wake_up_cancels_the_pending_timer_and_a_timeout_does_not():
    state = sent_room("m1", "m2")
    due = state.in_flight.due_at_us
    acked, d = step(state, ack(state, 1))
    assert cancels(d) == [(1, 1, due)]  # the task armed for the acked attempt, by its name's fields
    assert CancelTimer("r1", inc(state), 1, 1, due) in d.effects
    assert sends(d) == [(2, 1)] and timers(d) == [(2, 1, acked.in_flight.due_at_us)]
    # The timer that fires at its due time after the ack deadline is the one running: nothing to cancel.
    timed_out, d = step(state, fire(state, due))
    assert kinds(d)[0] == "timed_out" and cancels(d) == []
    # A failure status before the wake-up ends the message too: its timer goes.
    _, d = step(state, ack(state, 1, status="failed"))
    assert kinds(d)[0] == "failed" and cancels(d) == [(1, 1, due)]


def test_enqueue_while_the_last_ack_is_applied_is_not_lost():
    start = sent_room("m1")
    s, _ = step(start, ack(start, 1))
    s, d = step(s, enqueue("m2"))
    assert sends(d) == [(2, 1)]
    s, _ = step(start, enqueue("m2"))
    s, d = step(s, ack(s, 1))
    assert sends(d) == [(2, 1)]


# ------------------------------------------------------------------ held from the send's return (bug 1)


def test_a_slow_send_is_held_the_whole_ack_timeout_after_it_returned():
    """The send call returned 1.1 s after the decision: the first timer (due
    3.25 s after the decision) comes early and arms one for the rest."""
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, _ = step(state, returned(state, SendOutcome.ACCEPTED, T0 + 1_100_000))
    assert state.in_flight.phase is Phase.SENT and state.in_flight.deadline_us == T0 + 4_100_000
    state, d = step(state, fire(state, T0 + 3_250_000))
    assert sends(d) == [] and kinds(d) == ["timer_rearmed"]
    assert timers(d) == [(1, 1, T0 + 4_100_000)] and state.wake_at_us == T0 + 4_100_000
    state, d = step(state, fire(state, T0 + 4_100_000))
    assert kinds(d) == ["timed_out"] and sends(d) == [(2, 1)]


def test_a_fast_send_needs_one_timer():
    state = sent_room("m1", "m2", accepted_at=T0 + 100_000)
    _, d = step(state, fire(state, T0 + 3_250_000))
    assert kinds(d) == ["timed_out"] and sends(d) == [(2, 1)]


def test_an_earlier_timer_of_the_attempt_is_superseded():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, returned(state, SendOutcome.ACCEPTED, T0 + 1_100_000))
    first_due = state.in_flight.due_at_us
    state, _ = step(state, fire(state, first_due))
    # Cloud Tasks runs the first task again: it is older than the armed one.
    _, d = step(state, fire(state, T0 + 5 * S, due=first_due))
    assert d.state is None and d.events[0].reason == "superseded_timer"


def test_ack_before_the_send_returned_still_acks():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, d = step(state, ack(state, 1))
    assert kinds(d) == ["acked"] and sends(d) == [(2, 1)]
    # The first send's outcome comes after: stale, changes nothing.
    _, d = step(state, returned(state, SendOutcome.ACCEPTED, T0 + 200_000))
    assert d.state is None and d.events[0].reason == "stale_send_outcome"


# ------------------------------------------------------------------ unknown outcomes and crashes


def test_an_unknown_outcome_is_held_as_possibly_sent_then_resent():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, returned(state, SendOutcome.UNKNOWN, T0 + 1_900_000))
    assert state.in_flight.phase is Phase.UNKNOWN and state.in_flight.deadline_us == T0 + 4_900_000
    state, d = step(state, fire(state, T0 + 3_250_000))
    assert sends(d) == [] and timers(d) == [(1, 1, T0 + 4_900_000)]
    state, d = step(state, fire(state, T0 + 4_900_000))
    assert sends(d) == [(1, 2)] and "resent" in kinds(d)


def test_an_unknown_outcome_acked_in_time_is_not_resent():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, returned(state, SendOutcome.UNKNOWN, T0 + 1_900_000))
    state, d = step(state, ack(state, 1, at=T0 + 2 * S))
    assert kinds(d) == ["acked"] and sends(d) == []


def test_no_outcome_recorded_is_held_past_the_send_window_then_resent():
    """The sender died between the commit and the outcome: a send may have
    started up to 1 s after the decision and lasted 2 s; held 3 s more."""
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, d = step(state, fire(state, T0 + 3_250_000))
    assert sends(d) == [] and timers(d) == [(1, 1, T0 + 6 * S)]
    state, d = step(state, fire(state, T0 + 6 * S))
    assert sends(d) == [(1, 2)] and kinds(d)[:2] == ["send_unknown", "resent"]


def test_resends_stop_at_max_attempts_with_a_dead_letter_and_the_room_moves_on():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    now = T0
    for attempt in (1, 2, 3):
        now += 10 * S
        state, _ = step(state, returned(state, SendOutcome.UNKNOWN, now, attempt=attempt))
        state, d = step(state, fire(state, now + 5 * S))
    assert kinds(d)[0] == "dead_lettered"
    kept = list(d.dead_letters)
    assert kept[0].message.message_id == "m1" and kept[0].attempts == 3
    assert sends(d) == [(2, 1)]


def test_an_ack_of_an_earlier_attempt_acks_the_message():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, returned(state, SendOutcome.UNKNOWN, T0 + S))
    state, _ = step(state, fire(state, T0 + 5 * S))
    state, _ = step(state, returned(state, SendOutcome.UNKNOWN, T0 + 5 * S + 10_000, attempt=2))
    assert state.in_flight.attempt == 2 and state.in_flight.phase is Phase.UNKNOWN
    state, d = step(state, ack(state, 1, attempt=1))
    assert kinds(d) == ["acked"] and state.in_flight is None


def test_an_earlier_attempts_ack_during_a_resend_passes_the_baton_only_after_that_send():
    """Found by the fault harness: attempt 1's late ack came while attempt 2
    was being sent; starting m2 at once let attempt 2's copy of m1 reach the
    platform after m2."""
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, _ = step(state, returned(state, SendOutcome.UNKNOWN, T0 + S))
    state, _ = step(state, fire(state, T0 + 5 * S))
    assert state.in_flight.attempt == 2 and state.in_flight.phase is Phase.SENDING
    resend_started = state.in_flight.started_at_us
    state, d = step(state, ack(state, 1, attempt=1, at=T0 + 5 * S + 20_000))
    assert sends(d) == [] and d.events[0].reason == "acked_while_resending"
    assert timers(d) == [(1, 2, resend_started + POLICY.send_window_ms * 1000)]
    # The resend's call returns: m1 ends acked and m2 goes.
    after_send, d = step(state, returned(state, SendOutcome.ACCEPTED, T0 + 5 * S + 50_000, attempt=2))
    assert kinds(d)[0] == "acked" and d.events[0].status == "delivered" and sends(d) == [(2, 1)]
    # Or its outcome is never recorded: the send window's end passes the baton.
    _, d = step(state, fire(state, resend_started + POLICY.send_window_ms * 1000))
    assert kinds(d)[0] == "acked" and sends(d) == [(2, 1)]


# ------------------------------------------------------------------ refused sends


def test_transient_refusal_backs_off_then_retries_with_the_next_attempt():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, d = step(state, returned(state, SendOutcome.REFUSED, T0 + 1000, error_code=130429))
    assert state.in_flight.phase is Phase.BACKOFF
    assert timers(d) == [(1, 1, T0 + 1000 + S)]
    # The first timer of the attempt is superseded by the retry timer.
    _, d = step(state, fire(state, T0 + 3_250_000, due=T0 + 3_250_000))
    state, d = step(state, fire(state, T0 + 1000 + S))
    assert sends(d) == [(1, 2)] and state.in_flight.phase is Phase.SENDING


def test_pair_rate_limit_waits_four_to_the_attempt_seconds():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    _, d = step(state, returned(state, SendOutcome.REFUSED, T0, error_code=131056, rate_limited=True))
    assert timers(d) == [(1, 1, T0 + 4 * S)]


def test_permanent_refusal_ends_as_failed_and_advances():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, d = step(state, returned(state, SendOutcome.REFUSED, T0, permanent=True, error_code=131047))
    assert kinds(d) == ["failed"] and sends(d) == [(2, 1)] and d.events[0].error_code == 131047


def test_failed_status_ends_the_message_with_the_platform_error_and_advances():
    state = sent_room("m1", "m2")
    failed = StatusUpdate(inc(state), 1, 1, "failed", T0, T0 + 50_000, "wamid.1", 131026, "Message undeliverable")
    state, d = step(state, failed)
    assert kinds(d) == ["failed"] and d.events[0].error_code == 131026
    assert sends(d) == [(2, 1)]


# ------------------------------------------------------------------ duplicates, late and stale events


def test_duplicate_push_of_the_in_flight_message_rearms_its_timer_but_does_not_resend():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    _, d = step(state, enqueue("m1", at=T0 + 10))
    assert sends(d) == [] and kinds(d) == ["duplicate_ignored"]
    assert timers(d) == [(1, 1, T0 + 3_250_000)]  # the same timer: same task name


def test_redelivery_of_any_message_the_room_holds_is_recognised_bug3():
    """The queue is longer than the ended-message retention (50): every
    redelivered push of a held message is still a duplicate."""
    state, _ = step(RoomState("r1"), enqueue("m0"))
    for i in range(1, 90):
        state, _ = step(state, enqueue(f"m{i}"))
    for i in range(90):
        _, d = step(state, enqueue(f"m{i}", at=T0 + S))
        assert kinds(d) == ["duplicate_ignored"] and d.state is None, i


def test_redelivery_of_an_ended_message_is_recognised_within_the_retention():
    state = sent_room("m0")
    for i in range(1, 60):
        state, _ = step(state, ack(state, i))
        state, _ = step(state, enqueue(f"m{i}"))
    state, _ = step(state, ack(state, 60))
    assert len(state.ended) == POLICY.dedup_retention
    _, d = step(state, enqueue("m59"))
    assert kinds(d) == ["duplicate_ignored"]
    # Beyond the stated retention the id is forgotten (the documented bound).
    _, d = step(state, enqueue("m0"))
    assert kinds(d) == ["enqueued"]


def test_duplicate_and_reordered_statuses_never_advance_twice():
    state = sent_room("m1", "m2", "m3")
    state, d = step(state, ack(state, 1, status="read"))
    assert sends(d) == [(2, 1)]
    state, d = step(state, ack(state, 1, status="delivered"))
    assert sends(d) == [] and d.events[0].reason == "after_acked"
    assert state.in_flight.message.seq == 2


def test_sent_status_changes_nothing():
    state = sent_room("m1")
    _, d = step(state, ack(state, 1, status="sent"))
    assert d.state is None and sends(d) == [] and d.events[0].reason == "sent_status"


def test_late_ack_after_timeout_is_logged_with_its_latency_and_skips_nothing():
    state = sent_room("m1", "m2")
    state, d = step(state, fire(state, T0 + 3_250_000))
    assert kinds(d) == ["timed_out"] and sends(d) == [(2, 1)]
    state, d = step(state, ack(state, 1, at=T0 + 4_500_000))
    assert d.state is None and sends(d) == []
    assert d.events[0].reason == "late_ack" and d.events[0].send_to_ack_ms == pytest.approx(4500.0)


def test_timer_applies_only_to_its_exact_attempt():
    state = sent_room("m1", "m2")
    state, _ = step(state, ack(state, 1))
    _, d = step(state, TimerFired(inc(state), 1, 1, T0 + 3_250_000, T0 + 3_250_000))
    assert d.state is None and kinds(d) == ["timeout_ignored"]
    _, d = step(state, TimerFired(inc(state), 2, 7, T0 + 3_250_000, T0 + 3_250_000))
    assert d.state is None


def test_duplicated_timer_task_does_not_advance_twice():
    state = sent_room("m1", "m2", "m3")
    fired = fire(state, T0 + 3_250_000)
    state, d1 = step(state, fired)
    state, d2 = step(state, fired)
    assert sends(d1) == [(2, 1)] and sends(d2) == []


def test_status_and_timer_of_an_earlier_incarnation_are_ignored_bug6():
    """TTL deleted the room and a new one with the same id started over at seq 1."""
    old = sent_room("m1")
    new, _ = step(RoomState("r1"), enqueue("x1", at=T0 + 3600 * S))
    assert new.incarnation != old.incarnation
    _, d = step(new, StatusUpdate(old.incarnation, 1, 1, "delivered", T0, T0 + 3601 * S))
    assert d.state is None and d.events[0].reason == "stale_incarnation"
    _, d = step(new, TimerFired(old.incarnation, 1, 1, new.in_flight.due_at_us, T0 + 3604 * S))
    assert d.state is None and kinds(d) == ["timeout_ignored"]


def test_status_for_a_seq_the_room_never_had_is_unknown():
    state = sent_room("m1")
    _, d = step(state, ack(state, 9))
    assert kinds(d) == ["status_unknown"] and d.state is None


def test_delivery_id_round_trip_and_rejects():
    did = make_delivery_id("room:a.b", T0, 12, 3, T0 + 123_456)
    assert parse_delivery_id(did) == ("room:a.b", T0, 12, 3, (T0 + 123_456) // 1000 * 1000)
    for bad in ("", "1.2", "x.1.2.a.r", "0.1.2.a.r", "1.1.5.a.", "1.1.5.0.r", "1.1.5.r"):
        with pytest.raises(ValueError):
            parse_delivery_id(bad)


# ------------------------------------------------------------------ full rooms, parking, operators


def full_policy(n: int = 2) -> Policy:
    return replace(POLICY, max_queued_messages=n)


def test_a_full_room_refuses_and_remembers_the_message_once():
    policy = full_policy()
    state, _ = step(RoomState("r1"), enqueue("m1"), policy)
    state, _ = step(state, enqueue("m2"), policy)
    state, d = step(state, enqueue("m3"), policy)
    assert d.refused and kinds(d) == ["backpressure"] and state.awaiting == (("m3", T0 - 5_000),)
    _, d = step(state, enqueue("m3"), policy)
    assert d.refused and d.state is None  # the marker is written once


def test_the_room_document_size_limit_refuses_by_the_real_encoded_size():
    policy = replace(POLICY, max_room_bytes=2_000, room_bytes=room_doc_bytes)
    state, _ = step(RoomState("r1"), enqueue("m1", text="é" * 400), policy)  # 800 UTF-8 bytes
    state, d = step(state, enqueue("m2", text="é" * 400), policy)
    assert d.refused and room_doc_bytes(state) <= 2_000
    assert room_doc_bytes(replace(state, pending=(*state.pending, state.in_flight.message))) > 2_000


def test_a_refused_message_keeps_its_place_when_a_later_one_arrives_then_its_dead_letter_fills_it():
    policy = full_policy()
    state, _ = step(RoomState("r1"), enqueue("m1"), policy)
    state, _ = step(state, enqueue("m2"), policy)
    state, _ = step(state, enqueue("m3"), policy)  # refused, awaited
    state, _ = step(state, returned(state, SendOutcome.ACCEPTED, T0 + 10_000), policy)
    state, _ = step(state, ack(state, 1), policy)  # m2 in flight, room has room again
    # Pub/Sub dead-lettered m3 and delivered m4: m3's place comes first.
    state, d = step(state, enqueue("m4"), policy)
    assert kinds(d) == ["parked", "enqueued"]
    assert [(m.seq, m.message_id, m.text is None, bool(m.parked)) for m in state.pending] == [
        (3, "m3", True, True), (4, "m4", False, False)]
    state, d = step(state, ack(state, 2), policy)
    assert sends(d) == [] and kinds(d) == ["acked", "blocked"]
    assert "seq 3" in state.blocked_reason
    # Redrive needs the body: refused until the dead-letter copy arrives.
    _, d = step(state, Redrive(3, "ops@x", "fixed", T0 + 5 * S), policy)
    assert d.state is None and d.events[0].reason == "no_body_yet"
    state, d = step(state, Park("m3", "whatsapp", "15550001", "three", T0, T0 + 6 * S, "dead-lettered"), policy)
    assert kinds(d) == ["parked"] and state.pending[0].text == "three" and state.blocked_reason
    state, d = step(state, Redrive(3, "ops@x", "fixed", T0 + 7 * S), policy)
    assert kinds(d) == ["redriven"] and sends(d) == [(3, 1)] and d.events[0].actor == "ops@x"
    _, d = step(state, Redrive(3, "ops@x", "fixed", T0 + 8 * S), policy)
    assert d.state is None  # a second identical action is a no-op


def test_a_dead_letter_copy_before_any_later_message_is_parked_at_the_tail():
    policy = full_policy()
    state, _ = step(RoomState("r1"), enqueue("m1"), policy)
    state, _ = step(state, enqueue("m2"), policy)
    state, _ = step(state, enqueue("m3"), policy)  # refused, awaited
    state, d = step(state, Park("m3", "whatsapp", "15550001", "three", T0, T0 + 6 * S, "dead-lettered"), policy)
    assert kinds(d) == ["parked"] and state.awaiting == () and [m.seq for m in state.pending] == [2, 3]
    _, d = step(state, Park("m3", "whatsapp", "15550001", "three", T0, T0 + 7 * S, "again"), policy)
    assert kinds(d) == ["duplicate_ignored"]  # Pub/Sub may dead-letter twice


def test_the_push_itself_arriving_releases_its_placeholder():
    policy = full_policy()
    state, _ = step(RoomState("r1"), enqueue("m1"), policy)
    state, _ = step(state, enqueue("m2"), policy)
    state, _ = step(state, enqueue("m3"), policy)
    state, _ = step(state, ack(state, 1), policy)
    state, _ = step(state, enqueue("m4"), policy)
    state, d = step(state, enqueue("m3", text="three"), policy)
    assert kinds(d) == ["enqueued"] and state.pending[0].text == "three" and not state.pending[0].parked


def test_skip_ends_a_queued_or_in_flight_message_once():
    state = sent_room("m1", "m2", "m3")
    state, d = step(state, Skip(2, "ops", "customer asked", T0 + S))
    assert kinds(d) == ["skipped"] and [m.seq for m in state.pending] == [3]
    _, d = step(state, Skip(2, "ops", "customer asked", T0 + S))
    assert d.state is None and kinds(d) == ["operator_ignored"]
    state, d = step(state, Skip(1, "ops", "stuck", T0 + 2 * S))
    assert kinds(d) == ["skipped"] and sends(d) == [(3, 1)]
    assert state.counts == {"skipped": 2}


def test_skip_while_the_send_may_still_go_out_passes_the_baton_only_after_the_send_window():
    """An operator skip of the in-flight message while its send call may be
    under way: starting m2 at once would let m1's copy reach the platform
    after m2. The message ends now; the baton waits as for `acked_early`."""
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    assert state.in_flight.phase is Phase.SENDING
    window_end = state.in_flight.started_at_us + POLICY.send_window_ms * 1000
    state, d = step(state, Skip(1, "alice", "wrong text", T0 + 100_000))
    assert kinds(d) == ["skipped"] and d.events[0].actor == "alice" and sends(d) == []
    assert timers(d) == [(1, 1, window_end)] and state.counts == {"skipped": 1}
    _, d = step(state, Skip(1, "alice", "wrong text", T0 + 200_000))
    assert d.state is None and d.events[0].reason == "already_ended"  # not a double skip
    _, d = step(state, ack(state, 1, at=T0 + 300_000))
    assert d.state is None and d.events[0].reason == "after_skipped"  # ended once
    # The send returns: m2 goes.
    _, d = step(state, returned(state, SendOutcome.ACCEPTED, T0 + 400_000))
    assert sends(d) == [(2, 1)] and kinds(d) == []
    # Or no outcome is recorded: the timer at the window's end passes the baton, not before.
    _, d = step(state, fire(state, window_end - 1000, due=window_end - 1000))
    assert sends(d) == []
    _, d = step(state, fire(state, window_end))
    assert sends(d) == [(2, 1)]


def test_skip_of_a_sent_message_passes_the_baton_at_once():
    state = sent_room("m1", "m2")
    state, d = step(state, Skip(1, "alice", "stuck", T0 + 100_000))
    assert kinds(d) == ["skipped"] and sends(d) == [(2, 1)]


def test_a_paused_room_accepts_messages_sends_nothing_and_lets_the_in_flight_one_end():
    state = sent_room("m1", "m2")
    state, d = step(state, Pause("alice", "customer complaint", T0 + S))
    assert kinds(d) == ["paused"] and d.events[0].actor == "alice" and room_phase(state) == "sent"
    _, d = step(state, Pause("alice", "again", T0 + S + 1))
    assert d.state is None and d.events[0].reason == "already_paused"
    state, d = step(state, enqueue("m3", at=T0 + 2 * S))
    assert kinds(d) == ["enqueued"] and sends(d) == []
    state, d = step(state, ack(state, 1, at=T0 + 3 * S))  # the in-flight message ends normally
    assert kinds(d) == ["acked"] and sends(d) == [] and state.in_flight is None
    assert room_phase(state) == "paused" and state.blocked_reason == "paused by alice: customer complaint"
    assert [m.message_id for m in state.pending] == ["m2", "m3"] and state.wake_at_us is None
    restored = room_as_read("r1", room_to_doc(state), 0)
    assert restored == state
    state, d = step(state, Resume("bob", "fixed", T0 + 4 * S))
    assert kinds(d) == ["resumed"] and sends(d) == [(2, 1)] and state.paused is None
    _, d = step(state, Resume("bob", "fixed", T0 + 5 * S))
    assert d.state is None and d.events[0].reason == "not_paused"


def test_an_empty_room_can_be_paused_before_its_first_message():
    state, d = step(RoomState("r1"), Pause("alice", "hold", T0))
    assert state.incarnation == T0 and room_phase(state) == "paused"
    state, d = step(state, enqueue("m1", at=T0 + S))
    assert sends(d) == [] and state.head_since_us == T0 + S
    state, d = step(state, Resume("alice", "go", T0 + 2 * S))
    assert sends(d) == [(1, 1)]


def dead_lettered_room():
    """m1 dead-lettered after 3 unknown outcomes; m2 now in flight, m3 queued."""
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, _ = step(state, enqueue("m3"))
    now = T0
    for attempt in (1, 2, 3):
        now += 10 * S
        state, _ = step(state, returned(state, SendOutcome.UNKNOWN, now, attempt=attempt))
        state, d = step(state, fire(state, now + 5 * S))
    kept = d.dead_letters[0]
    return state, kept


def test_a_redriven_dead_letter_goes_back_to_the_head_ahead_of_later_messages_once():
    state, kept = dead_lettered_room()
    assert state.in_flight.message.seq == 2 and state.outcome_of(1) == "dead_lettered"
    now = T0 + 60 * S
    redrive = Redrive(1, "alice", "platform back", now, kept.message, kept.incarnation)
    state, d = step(state, redrive)
    assert kinds(d) == ["redriven"] and sends(d) == []  # m2 is in flight: m1 goes next, before m3
    assert [m.message_id for m in state.pending] == ["m1", "m3"] and state.pending[0].text == "hi"
    _, d = step(state, replace(redrive, at_us=now + 1))
    assert d.state is None and d.events[0].reason == "already_held"
    state, _ = step(state, returned(state, SendOutcome.ACCEPTED, now + S, seq=2))
    state, d = step(state, ack(state, 2, at=now + 2 * S))
    assert sends(d) == [(1, 4)]  # attempts 1-3 were used before: fencing tokens never repeat
    state, d = step(state, ack(state, 1, attempt=4, at=now + 3 * S))
    assert kinds(d)[0] == "acked" and sends(d) == [(3, 1)]
    _, d = step(state, replace(redrive, at_us=now + 4 * S))
    assert d.state is None and d.events[0].reason == "not_dead_lettered"  # acked since: never sent twice
    _, d = step(state, replace(redrive, incarnation=state.incarnation + 1))
    assert d.state is None and d.events[0].reason == "stale_incarnation"


def test_a_dead_letter_redriven_into_an_idle_room_is_sent_at_once():
    state, kept = dead_lettered_room()
    for seq in (2, 3):  # each past its send window: the baton passes at once
        state, _ = step(state, Skip(seq, "ops", "clear", T0 + (100 + 10 * seq) * S))
    assert state.in_flight is None and room_phase(state) == "idle"
    state, d = step(state, Redrive(1, "alice", "retry", T0 + 200 * S, kept.message, kept.incarnation))
    assert kinds(d) == ["redriven"] and sends(d) == [(1, 4)]  # above the attempts it used before


# ------------------------------------------------------------------ the watchdog


def test_watchdog_rescues_only_an_overdue_room_and_acts_like_its_timer():
    state = sent_room("m1", "m2")
    _, d = step(state, WatchdogSweep(T0 + 3_250_000 + 59 * S))
    assert d.state is None and d.events[0].reason == "not_overdue"
    state, d = step(state, WatchdogSweep(T0 + 3_250_000 + 61 * S))
    assert kinds(d)[:2] == ["watchdog_rescued", "timed_out"] and sends(d) == [(2, 1)]
    assert d.events[0].reason == "sent, overdue 61000 ms"  # its wake-up was due at T0 + 3.25 s


# ------------------------------------------------------------------ stored form


def test_docsize_follows_the_documented_example():
    """https://cloud.google.com/firestore/docs/storage-size: 147 bytes."""
    fields = {"type": "Personal", "done": False, "priority": 1, "description": "Learn Cloud Firestore"}
    assert docsize.document_size("users/jeff/tasks/my_task_id", fields) == 147


def test_a_room_round_trips_through_its_document():
    policy = full_policy()
    state, _ = step(RoomState("r1"), enqueue("m1"), policy)
    state, _ = step(state, enqueue("m2"), policy)
    state, _ = step(state, enqueue("m3"), policy)
    state, _ = step(state, ack(state, 1), policy)
    state, _ = step(state, enqueue("m4"), policy)
    assert room_as_read("r1", room_to_doc(state), 0) == state


# ------------------------------------------------------------------ property


@dataclass
class World:
    """One room with an adversarial network: every request may be duplicated,
    delayed and reordered; sends may fail, be unknown, or the sender may crash
    before reporting. Time moves forward 1 ms per event; timers fire in any
    order, possibly early."""

    rng: random.Random
    n_messages: int
    state: RoomState = field(default_factory=lambda: RoomState("r"))
    inbox: list = field(default_factory=list)
    next_publish: int = 1
    send_log: list[tuple[int, int]] = field(default_factory=list)
    ended: dict[int, str] = field(default_factory=dict)
    clock: int = T0

    def apply(self, event) -> None:
        self.clock += 1000
        event = replace(event, at_us=self.clock)
        rule = rule_for(self.state, event)
        d = decide(self.state, event, POLICY, "sim")
        after = d.state if d.state is not None else self.state
        assert room_phase(after) in rule.then, (rule, room_phase(after))
        if d.state is not None:
            self.state = d.state
        for ev in d.events:
            if ev.event in TERMINAL_EVENTS:
                assert ev.seq not in self.ended, f"seq {ev.seq} ended twice"
                self.ended[ev.seq] = str(ev.event)
        for eff in d.effects:
            if isinstance(eff, ScheduleTimer):
                self.inbox.append(TimerFired(eff.incarnation, eff.seq, eff.attempt, eff.due_at_us, 0))
            elif isinstance(eff, Send):
                self.on_send(eff)

    def on_send(self, send: Send) -> None:
        seq, attempt = send.message.seq, send.attempt
        assert all(s <= seq for s, _ in self.send_log), "send of an earlier seq after a later one"
        assert all(s in self.ended for s in range(1, seq)), f"seq {seq} sent before an earlier seq ended"
        self.send_log.append((seq, attempt))
        fate = self.rng.random()
        if fate < 0.1:
            return  # the sender crashed: no outcome, no status
        inc_ = send.incarnation
        if fate < 0.2:
            outcome = self.rng.choice([SendOutcome.REFUSED, SendOutcome.UNKNOWN])
            self.inbox.append(SendReturned(inc_, seq, attempt, outcome, 0, send.cause,
                                           permanent=self.rng.random() < 0.3))
            return
        self.inbox.append(SendReturned(inc_, seq, attempt, SendOutcome.ACCEPTED, 0, send.cause))
        for status in self.rng.sample(["sent", "delivered", "read", "failed"], k=self.rng.randint(0, 3)):
            for _ in range(self.rng.randint(1, 2)):  # duplicated webhooks
                self.inbox.append(StatusUpdate(inc_, seq, attempt, status, T0, 0))

    def run(self) -> None:
        for _ in range(20_000):
            can_publish = self.next_publish <= self.n_messages
            if not self.inbox and not can_publish:
                return
            if can_publish and (not self.inbox or self.rng.random() < 0.3):
                self.apply(enqueue(f"m{self.next_publish}"))
                self.next_publish += 1
                continue
            event = self.inbox.pop(self.rng.randrange(len(self.inbox)))
            if isinstance(event, TimerFired) and event.due_at_us > self.clock:
                self.clock = event.due_at_us - 1000  # the timer comes at its due time
            if self.rng.random() < 0.1:
                self.inbox.append(event)  # delivered again later
            if self.rng.random() < 0.05 and self.next_publish > 1:
                self.inbox.append(enqueue(f"m{self.rng.randint(1, self.next_publish - 1)}"))
            self.apply(event)
        raise AssertionError("simulation did not settle")


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8))
def test_any_interleaving_keeps_order_and_ends_every_message_once(seed, n):
    world = World(random.Random(seed), n)
    world.run()
    # Invariant 1: sends in publish order; repeats only of the same message.
    firsts = [seq for i, (seq, _) in enumerate(world.send_log) if seq not in {s for s, _ in world.send_log[:i]}]
    assert firsts == sorted(firsts) == list(range(1, len(firsts) + 1))
    # Invariant 3: every accepted message ended exactly once; nothing left.
    assert sorted(world.ended) == list(range(1, n + 1))
    assert world.state.in_flight is None and world.state.pending == ()
    assert sum(world.state.counts.values()) == n


KINDS = ["push", "park", "accepted", "unknown", "refused", "refused_for_good", "ack", "failed", "sent", "timer",
         "watchdog", "redrive", "skip", "pause", "resume", "redrive_dead_letter"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(KINDS), st.integers(1, 6), st.integers(0, 70)), max_size=60))
def test_every_transition_is_one_the_rulebook_lists(script):
    """Random events in any phase: `decide` never raises and the room's next
    phase is always one that `RULES` (the table docs/architecture.md shows)
    allows for that phase and event."""
    policy = replace(POLICY, max_queued_messages=4)
    state, now = RoomState("r"), T0
    for what, n, dt_s in script:
        now += dt_s * S
        event = make_event(what, state, n, now)
        rule = rule_for(state, event)
        d = decide(state, event, policy, "walk")
        state = d.state if d.state is not None else state
        assert room_phase(state) in rule.then, (what, rule, room_phase(state))


def test_a_blind_written_acceptance_reads_as_the_accepted_rule_would_decide():
    from shared.room_document import acceptance_key

    state, _ = step(RoomState("r1"), enqueue("m1"))
    doc = room_to_doc(state)
    by_rule, _ = step(state, returned(state, SendOutcome.ACCEPTED, T0 + 1_100_000))
    doc["accepted"] = {acceptance_key(state.incarnation, 1, 1): by_rule.in_flight.deadline_us,
                       acceptance_key(state.incarnation, 1, 2): 1}  # another attempt's: stale
    assert room_as_read("r1", doc, 0) == by_rule
    doc["accepted"] = {acceptance_key(state.incarnation + 1, 1, 1): 1}  # another incarnation's
    assert room_as_read("r1", doc, 0) == state


def test_a_never_seen_dead_letter_copy_is_parked_behind_the_awaited_earlier_message():
    """Found by the fault harness: m3 was refused (awaited); m4 was refused
    without its room ever seeing it; m4's dead-letter copy must not jump m3."""
    policy = full_policy()
    state, _ = step(RoomState("r1"), enqueue("m1"), policy)
    state, _ = step(state, enqueue("m2"), policy)
    state, _ = step(state, enqueue("m3"), policy)  # refused, awaited
    state, d = step(state, Park("m4", "whatsapp", "15550001", "four", T0, T0 + 6 * S, "dead-lettered"), policy)
    assert kinds(d) == ["parked", "parked"] and state.awaiting == ()
    assert [(m.message_id, m.text) for m in state.pending] == [("m2", "hi"), ("m3", None), ("m4", "four")]
