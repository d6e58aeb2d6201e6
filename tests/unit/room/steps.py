"""The room tests' one `step`: `decide` one event on a room, check that the
phase the room leaves for is among the `then` of the rulebook row the event
went through (`rule_for`), and return the room after it with the decision.

Each test module binds its own default policy once:
`step = stepper(POLICY)`, then `state, d = step(state, event)` or
`step(state, event, other_policy)`. `POLICY` here is the room tests'
common policy; `make_event` builds an event of any kind for a room (the
property tests' random scripts).
"""

from __future__ import annotations

from collections.abc import Callable

from shared.room import (
    Decision,
    Enqueue,
    Park,
    Pause,
    Policy,
    QueuedMessage,
    Redrive,
    Resume,
    RoomEvent,
    RoomState,
    SendOutcome,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
    decide,
    room_phase,
    rule_for,
)

Step = Callable[..., tuple[RoomState, Decision]]

# The room tests' common policy (timeouts in ms); a test that needs another
# one derives it with `dataclasses.replace`.
POLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=2000, send_start_deadline_ms=1000, first_timer_slack_ms=250,
                max_send_attempts=3, send_retry_base_ms=1000, dedup_retention=50, max_queued_messages=100,
                watchdog_grace_ms=60_000)


def step(state: RoomState, event: RoomEvent, policy: Policy) -> tuple[RoomState, Decision]:
    """`decide(state, event, policy)` as the service calls it (the effects'
    idempotency prefix "test"), checked against its row's `then`.

    Returns: the room after the event (the same room when `decide` left it
    unchanged) and the decision (its events, effects and state)."""
    rule = rule_for(state, event)
    d = decide(state, event, policy, "test")
    after = d.state if d.state is not None else state
    assert room_phase(after) in rule.then, (rule, room_phase(after))
    return after, d


def stepper(default: Policy) -> Step:
    """`step` with `default` as the policy when a call names none."""

    def bound(state: RoomState, event: RoomEvent, policy: Policy | None = None) -> tuple[RoomState, Decision]:
        return step(state, event, default if policy is None else policy)

    return bound


def make_event(what: str, state: RoomState, n: int, now: int) -> RoomEvent:
    """An event of kind `what` for `state`: for the in-flight attempt when `n`
    is odd and one is in flight, else for seq `n`, attempt 1."""
    f = state.in_flight
    seq, attempt = (f.message.seq, f.attempt) if f is not None and n % 2 else (n, 1)
    inc_ = state.incarnation
    outcomes = {"accepted": SendOutcome.ACCEPTED, "unknown": SendOutcome.UNKNOWN, "refused": SendOutcome.REFUSED,
                "refused_for_good": SendOutcome.REFUSED}
    statuses = {"ack": "delivered", "failed": "failed", "sent": "sent"}
    if what == "push":
        return Enqueue(f"m{n}", "whatsapp", "15550001", "t", now, now)
    if what == "park":
        return Park(f"m{n}", "whatsapp", "15550001", "t", now, now, "dead-lettered")
    if what in outcomes:
        return SendReturned(inc_, seq, attempt, outcomes[what], now, "c", permanent=what == "refused_for_good")
    if what in statuses:
        return StatusUpdate(inc_, seq, attempt, statuses[what], now, now)
    if what == "timer":
        return TimerFired(inc_, seq, attempt, f.due_at_us if f else now, now)
    if what == "watchdog":
        return WatchdogSweep(now)
    if what == "pause":
        return Pause("ops", "r", now)
    if what == "resume":
        return Resume("ops", "r", now)
    if what == "redrive_dead_letter":
        kept = next((e for e in reversed(state.ended) if e.outcome == "dead_lettered"), None)
        mid, seq_ = (kept.message_id, kept.seq) if kept else (f"m{n}", n)
        return Redrive(seq_, "ops", "r", now, QueuedMessage(seq_, mid, "whatsapp", "15550001", "t", now, now), inc_)
    return (Redrive if what == "redrive" else Skip)(n, "ops", "r", now)
