"""The rulebook as data that drives `decide`: every (room phase, event
kind), the function that decides it (`code`) and the phases it may lead to
(`then`), rendered as the table in docs/architecture.md.

Holds the table and how an event finds its row; the rules themselves are
in entry, flight, timers, receipts, preparation, operator_actions and facts
(the facts written outside the transaction, which the store adapter applies
before the event: docs/architecture.md, "Writes outside the transaction").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from shared.room.context import Transition
from shared.room.effects import Decision
from shared.room.entry import enqueue, gap_timer, park
from shared.room.facts import acceptance_recorded, echo_recorded
from shared.room.flight import (
    send_accepted,
    send_refused,
    send_refused_for_good,
    send_unknown,
    sender_at_its_rate,
    stale_send_outcome,
    status_delivered,
    status_failed,
    status_other,
    status_sent,
)
from shared.room.inputs import (
    AcceptanceRecorded,
    EchoRecorded,
    Enqueue,
    Park,
    Pause,
    Prepared,
    PrepareFailed,
    RecipientReceipt,
    Redrive,
    Resume,
    RoomEvent,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
)
from shared.room.operator_actions import pause, redrive, resume, skip
from shared.room.preparation import prepare_failed, prepared
from shared.room.receipts import receipt
from shared.room.state import RoomState, SendOutcome
from shared.room.timers import (
    sweep,
    timer_backoff,
    timer_not_in_flight,
    timer_paced,
    timer_preparing,
    timer_sending,
    timer_sent,
    timer_unknown,
)


class RoomPhase(StrEnum):
    """Where a whole room stands: the in-flight attempt's phase, or why nothing is in flight."""

    IDLE = "idle"  # nothing in flight, nothing sendable queued
    BLOCKED = "blocked"  # nothing in flight; the head of the queue is parked
    PAUSED = "paused"  # nothing in flight; an operator paused the room
    SENDING = "sending"
    SENT = "sent"
    UNKNOWN = "unknown"
    BACKOFF = "backoff"
    PACED = "paced"
    PREPARING = "preparing"

def room_phase(state: RoomState) -> RoomPhase:
    """The room's `RoomPhase`."""
    if state.in_flight is not None:
        return RoomPhase(str(state.in_flight.phase))
    if state.paused is not None:
        return RoomPhase.PAUSED
    return RoomPhase.BLOCKED if state.blocked_reason else RoomPhase.IDLE

def event_kind(event: RoomEvent) -> str:
    """The rulebook's name for an event (a column of `RULES`)."""
    match event:
        case Enqueue():
            return "push"
        case Park():
            return "dead-letter copy"
        case SendReturned(sender_busy_until_us=int()):
            return "sender at its rate"
        case SendReturned(outcome=SendOutcome.REFUSED, permanent=True):
            return "send refused for good"
        case SendReturned():
            return f"send {event.outcome}"
        case StatusUpdate(status="delivered" | "read"):
            return "status delivered/read"
        case StatusUpdate(status="sent" | "failed"):
            return f"status {event.status}"
        case StatusUpdate():
            return "status other"
        case RecipientReceipt():
            return "receipt by recipient"
        case TimerFired(seq=0):
            return "gap timer"
        case TimerFired():
            return "timer"
        case WatchdogSweep():
            return "watchdog"
        case Redrive():
            return "redrive"
        case Skip():
            return "skip"
        case Pause():
            return "pause"
        case Resume():
            return "resume"
        case Prepared():
            return "prepared"
        case PrepareFailed():
            return "prepare failed"
        case AcceptanceRecorded():
            return "acceptance recorded"
        case EchoRecorded():
            return "echo recorded"
    raise TypeError(f"unknown room event {event!r}")

@dataclass(frozen=True)
class Rule:
    """In `phase`, an event of `kind` is decided by `code` (a function of
    shared/room/ taking the transition context and the event), which
    leaves the room in one of `then`; `what` says how."""

    phase: RoomPhase
    kind: str
    then: frozenset[RoomPhase]
    what: str
    code: Callable[[Transition, Any], Decision] = field(compare=False)

_P = RoomPhase

_WAITING = (_P.SENDING, _P.SENT, _P.UNKNOWN, _P.BACKOFF, _P.PACED, _P.PREPARING)

# A message starting: sent, paced (its pair-rate bucket has no token) or
# waiting for its preparation.
_STARTS = frozenset({_P.SENDING, _P.PACED, _P.PREPARING})

# After a message ends: the head starts, or there is none, or it is parked,
# or the room is paused.
_NEXT = _STARTS | {_P.IDLE, _P.BLOCKED, _P.PAUSED}

_SEND_OUTCOMES = {"send accepted": send_accepted, "send unknown": send_unknown, "send refused": send_refused,
                  "send refused for good": send_refused_for_good, "sender at its rate": sender_at_its_rate}

_TIMERS = {_P.SENDING: timer_sending, _P.SENT: timer_sent, _P.UNKNOWN: timer_unknown, _P.BACKOFF: timer_backoff,
           _P.PACED: timer_paced, _P.PREPARING: timer_preparing}


def _rules() -> tuple[Rule, ...]:
    rules = [
        Rule(_P.IDLE, "push", _STARTS | {_P.IDLE, _P.BLOCKED},
             "a new message takes the baton at once (timer armed, then sent; paced, or waiting for its "
             "preparation); a known id is a duplicate; awaited pushes get placeholders ahead of it", enqueue),
        Rule(_P.BLOCKED, "push", _STARTS | {_P.BLOCKED, _P.IDLE},
             "queued behind the parked head (or refused when full); the head's own push releases it (and "
             "leaves the queue, idle if it was alone, when its producer sequence is ahead)", enqueue),
        Rule(_P.IDLE, "dead-letter copy", frozenset({_P.BLOCKED, _P.IDLE}),
             "parked at its place: the room blocks on it; a known id is a duplicate", park),
        Rule(_P.BLOCKED, "dead-letter copy", frozenset({_P.BLOCKED}), "fills its placeholder or parks at the tail",
             park),
        Rule(_P.BLOCKED, "redrive", _STARTS | {_P.BLOCKED},
             "the parked head is released and sent (without its body yet: refused); a dead letter goes back "
             "ahead of the parked head and is sent", redrive),
        Rule(_P.BLOCKED, "skip", _STARTS | {_P.IDLE, _P.BLOCKED},
             "the message ends as skipped; the next head starts", skip),
        Rule(_P.IDLE, "redrive", _STARTS | {_P.IDLE},
             "a dead letter whose last end in this room is `dead_lettered` goes back to the head and is sent; "
             "anything else: ignored", redrive),
        Rule(_P.IDLE, "skip", frozenset({_P.IDLE}), "nothing to act on: ignored", skip),
        Rule(_P.PAUSED, "push", frozenset({_P.PAUSED}), "queued; nothing starts while paused; refused (503) when full",
             enqueue),
        Rule(_P.PAUSED, "dead-letter copy", frozenset({_P.PAUSED}), "parked at its place in the queue", park),
        Rule(_P.PAUSED, "redrive", frozenset({_P.PAUSED}),
             "a parked message is released, a dead letter goes back to the head; sent after the resume", redrive),
        Rule(_P.PAUSED, "skip", frozenset({_P.PAUSED}), "a queued message ends as skipped; nothing starts", skip),
        Rule(_P.PAUSED, "pause", frozenset({_P.PAUSED}), "already paused: ignored", pause),
        Rule(_P.PAUSED, "resume", _STARTS | {_P.IDLE, _P.BLOCKED},
             "the pause is lifted: the head starts (or the room is idle, or blocked on a parked head)", resume),
        Rule(_P.IDLE, "pause", frozenset({_P.PAUSED}), "paused: messages are accepted, nothing starts", pause),
        Rule(_P.BLOCKED, "pause", frozenset({_P.PAUSED}), "paused (the parked head stays parked)", pause),
        Rule(_P.SENDING, "send accepted", _NEXT | {_P.SENT},
             "held until an ack or ack timeout after the send returned (an older attempt's outcome: ignored); "
             "the room moves on at once if an earlier attempt was acked meanwhile, if a receipt named this id "
             "before the return, or if the provider's ack level is `accepted`", send_accepted),
        Rule(_P.SENDING, "send unknown", _NEXT | {_P.UNKNOWN, _P.SENT},
             "possibly sent: held until an ack or ack timeout after the call returned, then resent; "
             "held as sent (timed out, not resent) once the platform's own record of it came (an echo; a "
             "WhatsApp `sent` with WHATSAPP_SENT_PROOF=on); if an earlier attempt was acked meanwhile, the room "
             "moves on", send_unknown),
        Rule(_P.SENDING, "send refused", _NEXT | {_P.BACKOFF},
             "provably not sent: retry timer (x4 per attempt; 4^n s for a pair rate limit); "
             "dead-lettered after MAX_SEND_ATTEMPTS, and the room moves on", send_refused),
        Rule(_P.SENDING, "send refused for good", _NEXT, "ends as failed with the platform's error; the room moves on",
             send_refused_for_good),
        Rule(_P.SENDING, "sender at its rate", _NEXT | {_P.PACED},
             "no call made: its WhatsApp number had no free slot this second (WHATSAPP_SENDER_RATE); waits "
             "for the slot as this same attempt (paced), its pair-rate token given back", sender_at_its_rate),
        Rule(_P.SENDING, "timer", _NEXT | {_P.SENT},
             "no outcome recorded: wait until the send window (start deadline + send timeout) plus the ack "
             "timeout has passed, then resend as the next attempt (dead-letter after MAX_SEND_ATTEMPTS); "
             "ends as timed out instead if the platform's own record of the attempt came (like every SENDING "
             "rule, this counts on the send window bounding the call); a timer carrying the attempt's "
             "acceptance (a WhatsApp send the service saw accepted) makes it sent, held to its deadline, and "
             "wakes it as sent (an earlier, superseded timer of the attempt: the acceptance is kept, nothing "
             "else)", timer_sending),
        Rule(_P.SENT, "timer", _NEXT | {_P.SENT},
             "before the ack deadline: a new timer for the rest; after it: ends as timed out, the room moves on",
             timer_sent),
        Rule(_P.UNKNOWN, "timer", _NEXT | {_P.UNKNOWN},
             "before the deadline: a new timer for the rest; after it: resent as the next attempt", timer_unknown),
        Rule(_P.BACKOFF, "timer", _NEXT | {_P.BACKOFF},
             "before the retry time: a new timer for the rest; after it: resent as the next attempt", timer_backoff),
        Rule(_P.PREPARING, "timer", _NEXT,
             "before PREPARE_TIMEOUT_MS: a new timer for the rest; after it, no result came: the preparation is "
             "asked for again as its next attempt, or, after MAX_PREPARE_ATTEMPTS, given up: PREPARE_POISON "
             "(`dead_letter`: the message ends, the room moves on; `park`: the room blocks on it)",
             timer_preparing),
        Rule(_P.PREPARING, "prepared", frozenset({_P.PREPARING, _P.SENDING, _P.PACED, _P.PAUSED}),
             "the head's media id is stored and it is sent at once (paced if its bucket is empty; paused "
             "meanwhile: it goes back to the head of the queue); a second result, or one for a queued "
             "message, is stored or ignored", prepared),
        Rule(_P.PREPARING, "prepare failed", _NEXT,
             "the head's preparation is asked for again after PREPARE_RETRY_BASE_MS x4 per attempt; a permanent "
             "failure or MAX_PREPARE_ATTEMPTS gives it up: PREPARE_POISON; a queued message's: retried, or "
             "marked given up (parked at once under `park`)", prepare_failed),
        Rule(_P.PACED, "timer", frozenset({_P.PACED, _P.SENDING, _P.PAUSED}),
             "the room's pair-rate bucket has a token again: the attempt is sent (paused meanwhile: the message "
             "goes back to the head of the queue); early: a new timer for the rest", timer_paced),
    ]
    for phase in _WAITING:
        # What waking the in-flight attempt may lead to (its timer's row).
        # (SENDING's timer leads to SENT only by the acceptance it carries; the watchdog carries none.)
        woken = next(r.then for r in rules if (r.phase, r.kind) == (phase, "timer")) \
            - ({_P.SENT} if phase is _P.SENDING else set())
        rules += [
            Rule(phase, "push", frozenset({phase}), "queued behind the in-flight message; refused (503) when full",
                 enqueue),
            Rule(phase, "dead-letter copy", frozenset({phase}), "parked at its place in the queue", park),
            Rule(phase, "status delivered/read", _NEXT | {phase},
                 "any attempt of the in-flight message acks it if the status meets the provider's ack level "
                 "(ACK_LEVEL_*): the room moves on (an earlier attempt's ack while a resend is being sent: once "
                 "that send can no longer go out); other seqs, below the ack level, or from another WhatsApp "
                 "number than the attempt's: ignored", status_delivered),
            Rule(phase, "receipt by recipient", _RECEIPT_THEN.get(phase, frozenset({phase})),
                 _RECEIPT_WHAT.get(phase, "nothing sent is provably covered (no accepted send, no echo): ignored"),
                 receipt),
            Rule(phase, "status failed", _NEXT | {phase},
                 "the in-flight attempt failed: ends as failed, the room moves on; other attempts, or from "
                 "another WhatsApp number than the attempt's: ignored", status_failed),
            Rule(phase, "watchdog", woken | {phase},
                 "wake-up overdue by WATCHDOG_GRACE_MS: acts as its timer would (a sequence gap overdue too: "
                 "given up first, in the same sweep); otherwise nothing", sweep),
            Rule(phase, "redrive", frozenset({phase}),
                 "releases a parked queued message, or puts a dead letter back at the head of the queue: "
                 "it is sent when the in-flight message ends", redrive),
            Rule(phase, "skip", _NEXT | {phase},
                 "the in-flight message ends as skipped and the room moves on, or a queued one is removed"
                 + (" (inside the send window, the baton passes only once the send can no longer go out)"
                    if phase is _P.SENDING else ""), skip),
            Rule(phase, "pause", frozenset({phase}),
                 "paused: the in-flight message ends by its own rules; then nothing starts until the resume", pause),
            Rule(phase, "resume", frozenset({phase}), "the pause is lifted (if any); the in-flight message goes on",
                 resume),
        ]
        if phase is not _P.PREPARING:
            rules += [
                Rule(phase, "prepared", frozenset({phase}),
                     "a queued message's media id is stored (the first result wins): it is sent in its turn",
                     prepared),
                Rule(phase, "prepare failed", frozenset({phase}),
                     "a queued message's preparation is asked for again after a backoff, or given up (parked at "
                     "once under PREPARE_POISON=park; ended when it reaches the head under `dead_letter`)",
                     prepare_failed),
            ]
        if phase is not _P.SENDING:
            rules += [Rule(phase, kind, frozenset({phase}), "stale (the attempt's outcome is recorded): ignored",
                           stale_send_outcome) for kind in _SEND_OUTCOMES]
    for phase in (_P.IDLE, _P.BLOCKED, _P.PAUSED):
        late = "nothing in flight: ignored (late or duplicate)"
        rules += [Rule(phase, kind, frozenset({phase}), late, stale_send_outcome) for kind in _SEND_OUTCOMES]
        rules += [Rule(phase, "status delivered/read", frozenset({phase}), late, status_delivered),
                  Rule(phase, "status failed", frozenset({phase}), late, status_failed),
                  Rule(phase, "receipt by recipient", frozenset({phase}), late, receipt),
                  Rule(phase, "timer", frozenset({phase}), late, timer_not_in_flight)]
        rules.append(Rule(phase, "watchdog", frozenset({phase}) | (_STARTS if phase is _P.IDLE else frozenset()),
                          "a sequence gap overdue by WATCHDOG_GRACE_MS: acts as its gap timer would; "
                          "otherwise nothing in flight: ignored", sweep))
    rules += [Rule(phase, "resume", frozenset({phase}), "not paused: ignored", resume)
              for phase in (_P.IDLE, _P.BLOCKED)]
    gap = ("past SEQUENCE_GAP_TIMEOUT_MS: the missing producer sequence numbers are given up (`sequence_gap`) and "
           "the held messages enter the queue in sequence order")
    rules += [Rule(phase, "gap timer", frozenset({phase}), gap + "; the in-flight message goes on", gap_timer)
              for phase in _WAITING]
    rules += [
        Rule(_P.IDLE, "gap timer", _STARTS | {_P.IDLE}, gap + ": the first of them starts", gap_timer),
        Rule(_P.BLOCKED, "gap timer", frozenset({_P.BLOCKED}), gap + " behind the parked head", gap_timer),
        Rule(_P.PAUSED, "gap timer", frozenset({_P.PAUSED}), gap + "; nothing starts until the resume", gap_timer),
        Rule(_P.IDLE, "prepared", frozenset({_P.IDLE}), "no message waits for it: ignored", prepared),
        Rule(_P.IDLE, "prepare failed", frozenset({_P.IDLE}), "no message waits for it: ignored", prepare_failed),
        Rule(_P.BLOCKED, "prepared", frozenset({_P.BLOCKED, _P.SENDING, _P.PACED}),
             "stored with its message; a head parked for want of it is released and sent", prepared),
        Rule(_P.BLOCKED, "prepare failed", frozenset({_P.BLOCKED}),
             "a queued message's preparation is retried or given up, as in any phase", prepare_failed),
        Rule(_P.PAUSED, "prepared", frozenset({_P.PAUSED}), "stored with its message; sent after the resume",
             prepared),
        Rule(_P.PAUSED, "prepare failed", frozenset({_P.PAUSED}),
             "retried, or given up (PREPARE_POISON applies after the resume)", prepare_failed),
    ]
    rules += _fact_rules()
    rules += [Rule(phase, "status sent", frozenset({phase}), "the platform took it; only delivered/read ack: ignored",
                   status_sent) for phase in _P]
    rules += [Rule(phase, "status other", frozenset({phase}), "a status baton does not know proves nothing: ignored",
                   status_other) for phase in _P]
    return tuple(rules)

def _fact_rules() -> list[Rule]:
    """The rows of the facts written outside the transaction (facts.py): in
    every phase, since a stale one may meet any; none logs anything."""
    stale = "; nothing logged"
    rules = []
    for phase in _P:
        idle = phase in (_P.IDLE, _P.BLOCKED, _P.PAUSED)
        rules += [
            Rule(phase, "acceptance recorded", frozenset({phase, _P.SENT}) if phase is _P.SENDING else frozenset({phase}),
                 "a WhatsApp send's acceptance written blind: the in-flight attempt's is sent, held to the recorded "
                 "deadline (as `send accepted`); another attempt's: stale, dropped" + stale if phase is _P.SENDING
                 else ("nothing in flight" if idle else "no send of the attempt under way, or another attempt's"
                       if phase in (_P.PACED, _P.PREPARING) else "the attempt's outcome is recorded, or another "
                       "attempt's") + ": stale, dropped" + stale, acceptance_recorded),
            Rule(phase, "echo recorded", frozenset({phase, _P.SENT}) if phase is _P.UNKNOWN else frozenset({phase}),
                 "nothing in flight: stale, dropped" + stale if idle
                 else "the platform's record of the in-flight attempt (an echo; a WhatsApp `sent`), written blind: "
                 "its stamp (what a watermark is judged against) and message id are kept"
                 + (", and it is sent (timed out at its deadline, not resent)" if phase is _P.UNKNOWN else "")
                 + "; another attempt's, a second one, or one naming another WhatsApp number: dropped" + stale,
                 echo_recorded),
        ]
    return rules

# A receipt by recipient acks the in-flight message only where a send of it
# may be provably covered: once the platform's own record (echo) of the
# attempt came (SENDING, SENT; BACKOFF keeps the record of a refused call
# that came anyway), or by its id or the return's watermark (SENT).
_RECEIPT_THEN = {phase: _NEXT | {phase} for phase in (_P.SENDING, _P.SENT, _P.BACKOFF)}
_RECEIPT_WHAT = {
    _P.SENDING: "acks the message if its watermark covers the echo's stamp (the echo came before the return); "
                "otherwise its mids are remembered: the send's return acks the message if its id is one of "
                "them; a watermark alone is kept and judged once the echo's stamp is known (at the return, or "
                "when the echo comes)",
    _P.SENT: "acks the message if a mid is its id, or the watermark covers the echo's stamp, or, no echo yet, "
             "WATERMARK_MARGIN_MS past the send's return (a delivery watermark strictly after, a read one at or "
             "after; and the status meets the provider's ack level); a watermark before the echo is kept until "
             "it comes; otherwise ignored",
    _P.BACKOFF: "acks the message only if the platform's own record of the refused attempt came anyway (its "
                "echo's stamp or id covered); otherwise ignored",
}

RULES: tuple[Rule, ...] = _rules()
"""Every (room phase, event kind) of the room: `decide` applies the row's
`code` and checks that the room ends in one of its `then`."""

RULE_INDEX: Mapping[tuple[RoomPhase, str], Rule] = {(r.phase, r.kind): r for r in RULES}
"""`RULES` by (room phase, event kind): what `decide` dispatches on."""


def code_name(rule: Rule) -> str:
    """Where `rule` is implemented: `module.py:function` inside shared/room/
    (the `code` column of the table in docs/architecture.md)."""
    return f"{rule.code.__module__.rsplit('.', 1)[-1]}.py:{rule.code.__name__}"


def rule_for(before: RoomState, event: RoomEvent) -> Rule:
    """The rule of `RULES` that covers `event` in the room's phase.

    Raises:
        KeyError: no rule covers it (the table and `decide` disagree).
    """
    return RULE_INDEX[(room_phase(before), event_kind(event))]
