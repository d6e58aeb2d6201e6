"""Fact rules: what a fact written outside the room's transaction does to
the room, applied by the store adapter before the event being decided
(docs/architecture.md, "Writes outside the transaction"): a WhatsApp send's
acceptance (`AcceptanceRecorded`: what older code wrote; today it rides on
the attempt's timer, `accepted`), the platform's own record of a send
(`EchoRecorded`: an echo, a WhatsApp `sent` status).

A fact changes the in-flight attempt it names, or nothing: it logs no
event and asks for no effect (its write was logged, and its send's timer
armed, by the request that made it). A stale fact (another attempt's, an
ended room's, one already applied) is dropped silently; the room's next
write clears it. Must not hold any rule of an event the room is sent.
"""

from __future__ import annotations

from dataclasses import replace

from shared.room.context import Transition, current
from shared.room.effects import Decision
from shared.room.inputs import AcceptanceRecorded, EchoRecorded
from shared.room.state import Phase, RoomState


def accepted(t: Transition, incarnation: int, seq: int, attempt: int, deadline_us: int) -> RoomState | None:
    """The room with attempt (incarnation, seq, attempt), in flight and
    SENDING, made SENT and held to `deadline_us` (epoch us: ACK_TIMEOUT_MS
    after its send returned), or None if that attempt is not in flight or
    its outcome is recorded already. The acceptance's one rule, whether it
    came as a fact (`acceptance_recorded`) or carried by the attempt's
    timer (timers.py, `TimerFired.accepted_deadline_us`)."""
    flight = current(t, incarnation, seq, attempt)
    if flight is None or flight.phase is not Phase.SENDING:
        return None
    return replace(t.state, in_flight=replace(flight, phase=Phase.SENT, deadline_us=deadline_us))


def acceptance_recorded(t: Transition, fact: AcceptanceRecorded) -> Decision:
    """The in-flight attempt, while SENDING, is SENT, held to the recorded
    deadline (`accepted`): the rule of `send accepted` for its common case
    (the write is made only at an ack level other than `accepted`, so
    nothing acks at once). Any other attempt's acceptance, or this one's
    once its outcome is recorded, is stale: no change. Written by code
    before the acceptance rode on the attempt's timer (a rolling deploy),
    and by today's service only for a send with no timer of its attempt in
    its decision (none so far: shared/service/core.py)."""
    return Decision(accepted(t, fact.incarnation, fact.seq, fact.attempt, fact.deadline_us))


def echo_recorded(t: Transition, fact: EchoRecorded) -> Decision:
    """The in-flight attempt's first platform record gives it the
    platform's stamp (`platform_ts_us`, what a watermark is judged against)
    and, if it has none, the platform's message id; it also proves the
    platform took the attempt, so one whose send outcome was unknown is SENT
    (held to the same deadline, then timed out rather than resent). A record
    naming another WhatsApp number than the attempt went out from proves
    nothing; another attempt's, or a second one, is stale: no change."""
    flight = current(t, fact.incarnation, fact.seq, fact.attempt)
    if flight is None or flight.platform_ts_us is not None:
        return Decision(None)
    if fact.number is not None and flight.number not in (None, fact.number):
        return Decision(None)
    flight = replace(flight, platform_ts_us=fact.platform_ts_us,
                     provider_message_id=flight.provider_message_id or fact.provider_message_id)
    if flight.phase is Phase.UNKNOWN:
        flight = replace(flight, phase=Phase.SENT)
    return Decision(replace(t.state, in_flight=flight))
