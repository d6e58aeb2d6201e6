"""The rulebook as data: every (room phase, event kind) and the phases it
may lead to, rendered as the table in docs/architecture.md.

Describes the rules; must not decide anything (decide.py does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

from shared.room.inputs import (
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
from shared.room.state import RoomState, SendOutcome


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
        case StatusUpdate():
            return f"status {event.status}"
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
    raise TypeError(f"unknown room event {event!r}")

@dataclass(frozen=True)
class Rule:
    """In `phase`, an event of `kind` leaves the room in one of `then`; `what` says how."""

    phase: RoomPhase
    kind: str
    then: frozenset[RoomPhase]
    what: str

_P = RoomPhase

_WAITING = (_P.SENDING, _P.SENT, _P.UNKNOWN, _P.BACKOFF, _P.PACED, _P.PREPARING)

# After a message ends: the head starts (or waits for its preparation), or
# there is none, or it is parked, or the room is paused.
_NEXT = frozenset({_P.SENDING, _P.PREPARING, _P.IDLE, _P.BLOCKED, _P.PAUSED})

def _rules() -> tuple[Rule, ...]:
    rules = [
        Rule(_P.IDLE, "push", frozenset({_P.SENDING, _P.IDLE, _P.BLOCKED}),
             "a new message takes the baton at once (timer armed, then sent); a known id is a duplicate; "
             "awaited pushes get placeholders ahead of it"),
        Rule(_P.BLOCKED, "push", frozenset({_P.BLOCKED, _P.SENDING}),
             "queued behind the parked head (or refused when full); the head's own push releases it"),
        Rule(_P.IDLE, "dead-letter copy", frozenset({_P.BLOCKED, _P.IDLE}),
             "parked at its place: the room blocks on it; a known id is a duplicate"),
        Rule(_P.BLOCKED, "dead-letter copy", frozenset({_P.BLOCKED}), "fills its placeholder or parks at the tail"),
        Rule(_P.BLOCKED, "redrive", frozenset({_P.SENDING, _P.BLOCKED}),
             "the parked head is released and sent (without its body yet: refused); a dead letter goes back "
             "ahead of the parked head and is sent"),
        Rule(_P.BLOCKED, "skip", frozenset({_P.SENDING, _P.IDLE, _P.BLOCKED}),
             "the message ends as skipped; the next head starts"),
        Rule(_P.IDLE, "redrive", frozenset({_P.SENDING, _P.IDLE}),
             "a dead letter whose last end in this room is `dead_lettered` goes back to the head and is sent; "
             "anything else: ignored"),
        Rule(_P.IDLE, "skip", frozenset({_P.IDLE}), "nothing to act on: ignored"),
        Rule(_P.PAUSED, "push", frozenset({_P.PAUSED}), "queued; nothing starts while paused; refused (503) when full"),
        Rule(_P.PAUSED, "dead-letter copy", frozenset({_P.PAUSED}), "parked at its place in the queue"),
        Rule(_P.PAUSED, "redrive", frozenset({_P.PAUSED}),
             "a parked message is released, a dead letter goes back to the head; sent after the resume"),
        Rule(_P.PAUSED, "skip", frozenset({_P.PAUSED}), "a queued message ends as skipped; nothing starts"),
        Rule(_P.PAUSED, "pause", frozenset({_P.PAUSED}), "already paused: ignored"),
        Rule(_P.PAUSED, "resume", frozenset({_P.SENDING, _P.IDLE, _P.BLOCKED}),
             "the pause is lifted: the head starts (or the room is idle, or blocked on a parked head)"),
        Rule(_P.IDLE, "pause", frozenset({_P.PAUSED}), "paused: messages are accepted, nothing starts"),
        Rule(_P.BLOCKED, "pause", frozenset({_P.PAUSED}), "paused (the parked head stays parked)"),
        Rule(_P.SENDING, "send accepted", frozenset({_P.SENT, _P.SENDING}) | _NEXT,
             "held until an ack or ack timeout after the send returned (an older attempt's outcome: ignored); "
             "the room moves on at once if an earlier attempt was acked meanwhile, if a receipt named this id "
             "before the return, or if the provider's ack level is `accepted`"),
        Rule(_P.SENDING, "send unknown", frozenset({_P.UNKNOWN, _P.SENDING}) | _NEXT,
             "possibly sent: held until an ack or ack timeout after the call returned, then resent; "
             "held as sent (timed out, not resent) once the platform's own record of it came (an echo; a "
             "WhatsApp `sent` with WHATSAPP_SENT_PROOF=on); if an earlier attempt was acked meanwhile, the room "
             "moves on"),
        Rule(_P.SENDING, "send refused", frozenset({_P.BACKOFF}) | _NEXT,
             "provably not sent: retry timer (x4 per attempt; 4^n s for a pair rate limit); "
             "dead-lettered after MAX_SEND_ATTEMPTS, and the room moves on"),
        Rule(_P.SENDING, "send refused for good", _NEXT, "ends as failed with the platform's error; the room moves on"),
        Rule(_P.SENDING, "sender at its rate", frozenset({_P.PACED}) | _NEXT,
             "no call made: its WhatsApp number had no free slot this second (WHATSAPP_SENDER_RATE); waits "
             "for the slot as this same attempt (paced), its pair-rate token given back"),
        Rule(_P.SENDING, "timer", frozenset({_P.SENDING}) | _NEXT,
             "no outcome recorded: wait until the send window (start deadline + send timeout) plus the ack "
             "timeout has passed, then resend as the next attempt (dead-letter after MAX_SEND_ATTEMPTS); "
             "ends as timed out instead if the platform's own record of the attempt came (like every SENDING "
             "rule, this counts on the send window bounding the call)"),
        Rule(_P.SENT, "timer", frozenset({_P.SENT}) | _NEXT,
             "before the ack deadline: a new timer for the rest; after it: ends as timed out, the room moves on"),
        Rule(_P.UNKNOWN, "timer", frozenset({_P.UNKNOWN}) | _NEXT,
             "before the deadline: a new timer for the rest; after it: resent as the next attempt"),
        Rule(_P.BACKOFF, "timer", frozenset({_P.BACKOFF}) | _NEXT,
             "before the retry time: a new timer for the rest; after it: resent as the next attempt"),
        Rule(_P.PREPARING, "timer", frozenset({_P.PREPARING}) | _NEXT,
             "before PREPARE_TIMEOUT_MS: a new timer for the rest; after it, no result came: the preparation is "
             "asked for again as its next attempt, or, after MAX_PREPARE_ATTEMPTS, given up: PREPARE_POISON "
             "(`dead_letter`: the message ends, the room moves on; `park`: the room blocks on it)"),
        Rule(_P.PREPARING, "prepared", frozenset({_P.SENDING, _P.PACED, _P.PAUSED}),
             "the head's media id is stored and it is sent at once (paced if its bucket is empty; paused "
             "meanwhile: it goes back to the head of the queue); a second result, or one for a queued "
             "message, is stored or ignored"),
        Rule(_P.PREPARING, "prepare failed", frozenset({_P.PREPARING}) | _NEXT,
             "the head's preparation is asked for again after PREPARE_RETRY_BASE_MS x4 per attempt; a permanent "
             "failure or MAX_PREPARE_ATTEMPTS gives it up: PREPARE_POISON; a queued message's: retried, or "
             "marked given up (parked at once under `park`)"),
        Rule(_P.PACED, "timer", frozenset({_P.PACED, _P.SENDING, _P.PAUSED}),
             "the room's pair-rate bucket has a token again: the attempt is sent (paused meanwhile: the message "
             "goes back to the head of the queue); early: a new timer for the rest"),
    ]
    for phase in _WAITING:
        rules += [
            Rule(phase, "push", frozenset({phase}), "queued behind the in-flight message; refused (503) when full"),
            Rule(phase, "dead-letter copy", frozenset({phase}), "parked at its place in the queue"),
            Rule(phase, "status delivered/read", _NEXT | {phase},
                 "any attempt of the in-flight message acks it if the status meets the provider's ack level "
                 "(ACK_LEVEL_*): the room moves on (an earlier attempt's ack while a resend is being sent: once "
                 "that send can no longer go out); other seqs, below the ack level, or from another WhatsApp "
                 "number than the attempt's: ignored"),
            Rule(phase, "receipt by recipient", (_NEXT | {phase}) if phase in (_P.SENT,) else frozenset({phase}),
                 {_P.SENDING: "its mids are remembered: the send's return acks the message if its id is one of "
                              "them; a watermark alone is kept and judged once the echo's stamp is known (at the "
                              "return, or when the echo comes)",
                  _P.SENT: "acks the message if a mid is its id, or the watermark covers the echo's stamp, or, no "
                           "echo yet, WATERMARK_MARGIN_MS past the send's return (a delivery watermark strictly "
                           "after, a read one at or after; and the status meets the provider's ack level); a "
                           "watermark before the echo is kept until it comes; otherwise ignored",
                  }.get(phase, "nothing sent is provably covered (no accepted send): ignored")),
            Rule(phase, "status failed", _NEXT | {phase},
                 "the in-flight attempt failed: ends as failed, the room moves on; other attempts, or from "
                 "another WhatsApp number than the attempt's: ignored"),
            Rule(phase, "watchdog", frozenset({phase}) | _NEXT,
                 "wake-up overdue by WATCHDOG_GRACE_MS: acts as its timer would (a sequence gap overdue too: "
                 "given up first, in the same sweep); otherwise nothing"),
            Rule(phase, "redrive", frozenset({phase}),
                 "releases a parked queued message, or puts a dead letter back at the head of the queue: "
                 "it is sent when the in-flight message ends"),
            Rule(phase, "skip", frozenset({phase}) | _NEXT,
                 "the in-flight message ends as skipped and the room moves on, or a queued one is removed"
                 + (" (inside the send window, the baton passes only once the send can no longer go out)"
                    if phase is _P.SENDING else "")),
            Rule(phase, "pause", frozenset({phase}),
                 "paused: the in-flight message ends by its own rules; then nothing starts until the resume"),
            Rule(phase, "resume", frozenset({phase}), "the pause is lifted (if any); the in-flight message goes on"),
        ]
        if phase is not _P.PREPARING:
            rules += [
                Rule(phase, "prepared", frozenset({phase}),
                     "a queued message's media id is stored (the first result wins): it is sent in its turn"),
                Rule(phase, "prepare failed", frozenset({phase}),
                     "a queued message's preparation is asked for again after a backoff, or given up (parked at "
                     "once under PREPARE_POISON=park; ended when it reaches the head under `dead_letter`)"),
            ]
        if phase is not _P.SENDING:
            rules += [Rule(phase, kind, frozenset({phase}), "stale (the attempt's outcome is recorded): ignored")
                      for kind in ("send accepted", "send unknown", "send refused", "send refused for good",
                                   "sender at its rate")]
    for phase in (_P.IDLE, _P.BLOCKED, _P.PAUSED):
        rules += [Rule(phase, kind, frozenset({phase}), "nothing in flight: ignored (late or duplicate)")
                  for kind in ("send accepted", "send unknown", "send refused", "send refused for good",
                               "sender at its rate", "status delivered/read", "status failed", "receipt by recipient", "timer")]
        rules.append(Rule(phase, "watchdog", frozenset({phase}) | (_NEXT if phase is _P.IDLE else frozenset()),
                          "a sequence gap overdue by WATCHDOG_GRACE_MS: acts as its gap timer would; "
                          "otherwise nothing in flight: ignored"))
    rules += [Rule(phase, "resume", frozenset({phase}), "not paused: ignored") for phase in (_P.IDLE, _P.BLOCKED)]
    gap = ("past SEQUENCE_GAP_TIMEOUT_MS: the missing producer sequence numbers are given up (`sequence_gap`) and "
           "the held messages enter the queue in sequence order")
    rules += [Rule(phase, "gap timer", frozenset({phase}), gap + "; the in-flight message goes on")
              for phase in _WAITING]
    rules += [
        Rule(_P.IDLE, "gap timer", frozenset({_P.IDLE}) | _NEXT, gap + ": the first of them starts"),
        Rule(_P.BLOCKED, "gap timer", frozenset({_P.BLOCKED}), gap + " behind the parked head"),
        Rule(_P.PAUSED, "gap timer", frozenset({_P.PAUSED}), gap + "; nothing starts until the resume"),
    ]
    rules += [
        Rule(_P.IDLE, "prepared", frozenset({_P.IDLE}), "no message waits for it: ignored"),
        Rule(_P.IDLE, "prepare failed", frozenset({_P.IDLE}), "no message waits for it: ignored"),
        Rule(_P.BLOCKED, "prepared", frozenset({_P.BLOCKED}) | _NEXT | {_P.PACED},
             "stored with its message; a head parked for want of it is released and sent"),
        Rule(_P.BLOCKED, "prepare failed", frozenset({_P.BLOCKED}),
             "a queued message's preparation is retried or given up, as in any phase"),
        Rule(_P.PAUSED, "prepared", frozenset({_P.PAUSED}), "stored with its message; sent after the resume"),
        Rule(_P.PAUSED, "prepare failed", frozenset({_P.PAUSED}),
             "retried, or given up (PREPARE_POISON applies after the resume)"),
    ]
    rules += [Rule(phase, "status sent", frozenset({phase}), "the platform took it; only delivered/read ack: ignored")
              for phase in _P]
    # Wherever a message may start, it may start by waiting for its preparation.
    return tuple(replace(r, then=r.then | {_P.PREPARING}) if _P.SENDING in r.then else r for r in rules)

RULES: tuple[Rule, ...] = _rules()

_RULE_INDEX = {(r.phase, r.kind): r for r in RULES}

# The event class of each kind (a column of `RULES`), to name the code of a row.
EVENT_OF_KIND: dict[str, type] = {
    "push": Enqueue, "dead-letter copy": Park, "send accepted": SendReturned, "send unknown": SendReturned,
    "send refused": SendReturned, "send refused for good": SendReturned, "sender at its rate": SendReturned,
    "status delivered/read": StatusUpdate,
    "status failed": StatusUpdate, "status sent": StatusUpdate, "receipt by recipient": RecipientReceipt,
    "gap timer": TimerFired, "timer": TimerFired, "watchdog": WatchdogSweep, "redrive": Redrive, "skip": Skip,
    "pause": Pause, "resume": Resume, "prepared": Prepared, "prepare failed": PrepareFailed,
}


def rule_code(kind: str) -> str:
    """Where the rule for events of `kind` is implemented: `module.py:function`
    inside shared/room/ (the `code` column of the table in docs/architecture.md).

    Raises:
        KeyError: an unknown kind.
    """
    from shared.room.decide import _HANDLERS  # decide imports the rules; the table names them
    from shared.room.entry import gap_timer

    handler = gap_timer if kind == "gap timer" else _HANDLERS[EVENT_OF_KIND[kind]]
    module = handler.__module__.rsplit(".", 1)[-1]
    return f"{module}.py:{handler.__name__}"


def rule_for(before: RoomState, event: RoomEvent) -> Rule:
    """The rule of `RULES` that covers `event` in the room's phase.

    Raises:
        KeyError: no rule covers it (the table and `decide` disagree).
    """
    return _RULE_INDEX[(room_phase(before), event_kind(event))]
