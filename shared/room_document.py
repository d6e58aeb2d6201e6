"""The store adapter's mapping of a room to its Firestore document and
back: the room's fields, and the facts written outside its transaction.

`room_to_doc` and `decode_room` convert only (state <-> fields, plus the
facts the blind writes left in the `accepted` and `echoes` maps, decoded as
room events, not folded). `room_as_read` is the one place those facts are
applied: through `decide`, their own rows of `RULES`, before the event being
decided (docs/architecture.md, "Writes outside the transaction"). Every
reader of a room's state (the store's transaction, its reads, the operators,
the console, the tools) reads it through `room_as_read`. No I/O here; the
rulebook (shared/room/) must not import this module (tests/unit/repo).
"""

from __future__ import annotations

import re
from typing import Any

from shared import docsize
from shared.room import (
    AcceptanceRecorded,
    EchoRecorded,
    Ended,
    InFlight,
    Paused,
    Phase,
    Policy,
    QueuedMessage,
    RoomFact,
    RoomState,
    decide,
)
from shared.room.ids import b36

ROOMS = "rooms"

# Optional fields of a stored message: (stored name, attribute); absent when unset.
_OPTIONAL_MESSAGE_FIELDS = (("parked", "parked"), ("media", "media_kind"), ("link", "media_link"),
                            ("prepare", "prepare"), ("prepared", "prepared"), ("prep_n", "prep_attempt"),
                            ("prep_failed", "prep_failed"), ("pseq", "sequence"), ("att_n", "attempts"),
                            ("att_floor", "attempt_floor"), ("prep_floor", "prep_floor"),
                            ("from", "sender"), ("payload", "payload"))

def message_to_doc(m: QueuedMessage) -> dict[str, Any]:
    """The stored form of one message (in a room document or a dead letter).
    Fields a text message does not use are left out (a room holds up to
    MAX_QUEUED_MESSAGES of them)."""
    doc: dict[str, Any] = {"seq": m.seq, "id": m.message_id, "provider": m.provider, "to": m.recipient,
                           "text": m.text, "pub_us": m.published_at_us, "enq_us": m.enqueued_at_us}
    for stored, attr in _OPTIONAL_MESSAGE_FIELDS:
        value = getattr(m, attr)
        if value is not None and value != 0:
            doc[stored] = value
    return doc

def message_from_doc(d: dict[str, Any]) -> QueuedMessage:
    """Inverse of `message_to_doc`."""
    optional = {attr: d[stored] for stored, attr in _OPTIONAL_MESSAGE_FIELDS if stored in d}
    return QueuedMessage(d["seq"], d["id"], d["provider"], d["to"], d["text"], d["pub_us"], d["enq_us"],
                         **optional)

def room_to_doc(state: RoomState) -> dict[str, Any]:
    """The Firestore fields of a room (the store adds `expire_at`).

    `wake_at_us` is top level and indexed: the watchdog's query. The queue,
    the ended list and the counts are exempt from indexing (infra/).
    Ended messages are stored as `"{seq} {outcome} {message_id}"` strings
    (a dead-lettered one adds `" {attempts}"`):
    message ids have no spaces (shared/push.py), and a string costs less than
    a map of three named fields.

    Top-level scalars the operators' queries use (single-field indexes, which
    Firestore keeps automatically): `head_since_us` (lag listing), `parked`
    (how many queued messages are parked), `paused_at_us` (with `paused_by`
    and `paused_reason`; null when not paused).
    """
    flight = state.in_flight
    paused = state.paused
    return {
        "incarnation": state.incarnation,
        "next_seq": state.next_seq,
        "wake_at_us": state.wake_at_us,
        "blocked_reason": state.blocked_reason,
        "head_since_us": state.head_since_us,
        "parked": sum(1 for m in state.pending if m.parked),
        "paused_at_us": None if paused is None else paused.at_us,
        "paused_by": None if paused is None else paused.actor,
        "paused_reason": None if paused is None else paused.reason,
        "in_flight": None if flight is None else {
            "message": message_to_doc(flight.message),
            "attempt": flight.attempt,
            "started_at_us": flight.started_at_us,
            "phase": str(flight.phase),
            "due_at_us": flight.due_at_us,
            "deadline_us": flight.deadline_us,
            "idempotency_key": flight.idempotency_key,
            "acked_early": flight.acked_early,
            "skipped": flight.skipped,
            "pmid": flight.provider_message_id,
            "returned_at_us": flight.returned_at_us,
            "early_mids": list(flight.early_mids),
            "early_mids_status": flight.early_mids_status,
            "pts": flight.platform_ts_us,
            "num": flight.number,
            **({} if flight.early_watermark_us is None else {"early_wm": flight.early_watermark_us,
                                                              "early_wm_status": flight.early_watermark_status}),
        },
        # Indexed: a receipt that names only the recipient finds its rooms by it.
        "in_flight_to": None if flight is None else recipient_key(flight.message.provider, flight.message.recipient),
        # Indexed: the console counts and lists the rooms sending from each WhatsApp number.
        "in_flight_from": None if flight is None else flight.number,
        "pending": [message_to_doc(m) for m in state.pending],
        "ended": [f"{e.seq} {e.outcome} {e.message_id}" + (f" {e.attempts}" if e.attempts else "")
                  for e in state.ended],
        "awaiting": [{"id": mid, "pub_us": pub} for mid, pub in state.awaiting],
        "counts": dict(state.counts),
        "pace": None if state.pace_tokens is None else {"tokens": state.pace_tokens, "at_us": state.pace_at_us},
        "next_sequence": state.expected_sequence,
        "held": [message_to_doc(m) for m in state.sequence_held],
        "gap_due_us": state.gap_due_us,
        "accepted": {},  # every transaction applies the blind-written acceptances and clears them
        "echoes": {},  # and the blind-written echoes (room_as_read)
    }

def recipient_key(provider: str, recipient: str) -> str:
    """The room document's `in_flight_to`: `{provider}:{recipient}`."""
    return f"{provider}:{recipient}"

def acceptance_key(incarnation: int, seq: int, attempt: int) -> str:
    """The key of an attempt in the room document's `accepted` and `echoes`
    maps (a plain Firestore field name: letters, digits, `_`)."""
    return f"a{b36(incarnation)}_{seq}_{attempt}"

_ACCEPTANCE_KEY = re.compile(r"a([0-9a-z]+)_([0-9]+)_([0-9]+)")

def attempt_of_key(key: str) -> tuple[int, int, int] | None:
    """Inverse of `acceptance_key`: (incarnation, seq, attempt), or None for
    a key it does not make (no attempt's: ignored, as before)."""
    found = _ACCEPTANCE_KEY.fullmatch(key)
    if found is None:
        return None
    attempt = int(found[1], 36), int(found[2]), int(found[3])
    return attempt if acceptance_key(*attempt) == key else None

def decode_room(room_id: str, d: dict[str, Any] | None, at_us: int) -> tuple[RoomState, tuple[RoomFact, ...]]:
    """Inverse of `room_to_doc`, without applying anything: the room's state
    as its last transaction wrote it, and the facts blind writes added since
    (`accepted`, then `echoes`), each a room event read at `at_us` (epoch
    us). A missing document is a new, empty room with no facts.

    The `accepted` map holds send acceptances (`RoomStore.record_accepted`),
    `{acceptance_key: deadline_us}`: `AcceptanceRecorded`. The `echoes` map
    holds the platform's own records of our sends (`RoomStore.record_echo`),
    `{acceptance_key: {"ts": platform stamp, epoch us, "mid": its message
    id, "num": the WhatsApp number it names, if any}}`: `EchoRecorded`; an
    entry without an integer `ts` proves nothing and is left out, as is a
    key no attempt has.

    Raises:
        KeyError, ValueError, TypeError: a document this code did not write.
    """
    if not d:
        return RoomState(room_id), ()
    facts: list[RoomFact] = []
    for key, deadline in sorted((d.get("accepted") or {}).items()):
        attempt = attempt_of_key(key)
        if attempt is not None and deadline is not None:
            facts.append(AcceptanceRecorded(*attempt, deadline_us=deadline, at_us=at_us))
    for key, echo in sorted((d.get("echoes") or {}).items()):
        attempt = attempt_of_key(key)
        if attempt is not None and isinstance(echo, dict) and isinstance(echo.get("ts"), int):
            facts.append(EchoRecorded(*attempt, platform_ts_us=echo["ts"], provider_message_id=echo.get("mid"),
                                      number=echo.get("num"), at_us=at_us))
    return _room_from_fields(room_id, d), tuple(facts)

# The fact rules read no policy (shared/room/facts.py); `decide` takes one.
_FACTS_POLICY = Policy()

def room_as_read(room_id: str, d: dict[str, Any] | None, at_us: int, policy: Policy | None = None) -> RoomState:
    """The room as every reader sees it: its stored state with the facts
    written outside its transaction applied, each through `decide` (its row
    of `RULES`: acceptances, then echoes), before any event is decided on
    it. Applying a fact logs nothing and asks for no effect; a stale one
    changes nothing (docs/architecture.md, "Writes outside the transaction").
    `at_us`: the read's time (epoch us). A missing document is a new room.

    Raises:
        KeyError, ValueError, TypeError: a document this code did not write.
    """
    state, facts = decode_room(room_id, d, at_us)
    for fact in facts:
        applied = decide(state, fact, policy or _FACTS_POLICY, "store").state
        state = state if applied is None else applied
    return state

def _room_from_fields(room_id: str, d: dict[str, Any]) -> RoomState:
    f = d.get("in_flight")
    ended = []
    for line in d.get("ended", []):
        seq, outcome, mid, *attempts = line.split(" ")
        ended.append(Ended(int(seq), mid, outcome, int(attempts[0]) if attempts else 0))
    return RoomState(
        room_id=room_id,
        incarnation=d["incarnation"],
        next_seq=d["next_seq"],
        in_flight=None if f is None else InFlight(
            message=message_from_doc(f["message"]),
            attempt=f["attempt"],
            started_at_us=f["started_at_us"],
            phase=Phase(f["phase"]),
            due_at_us=f["due_at_us"],
            idempotency_key=f["idempotency_key"],
            deadline_us=f.get("deadline_us"),
            acked_early=f.get("acked_early"),
            skipped=bool(f.get("skipped")),
            provider_message_id=f.get("pmid"),
            returned_at_us=f.get("returned_at_us"),
            early_mids=tuple(f.get("early_mids") or ()),
            early_mids_status=f.get("early_mids_status"),
            platform_ts_us=f.get("pts"),
            number=f.get("num"),
            early_watermark_us=f.get("early_wm"),
            early_watermark_status=f.get("early_wm_status"),
        ),
        pending=tuple(message_from_doc(m) for m in d.get("pending", [])),
        ended=tuple(ended),
        awaiting=tuple((a["id"], a["pub_us"]) for a in d.get("awaiting", [])),
        counts=dict(d.get("counts", {})),
        pace_tokens=None if not d.get("pace") else float(d["pace"]["tokens"]),
        pace_at_us=0 if not d.get("pace") else int(d["pace"]["at_us"]),
        expected_sequence=d.get("next_sequence", 1),
        sequence_held=tuple(message_from_doc(m) for m in d.get("held", [])),
        gap_due_us=d.get("gap_due_us"),
        paused=None if d.get("paused_at_us") is None else Paused(d.get("paused_by") or "", d.get("paused_reason") or "",
                                                                 d["paused_at_us"]),
    )

# Room documents also carry `expire_at` (a timestamp or null), set by the store.
_EXPIRE_AT_BYTES = docsize.string_size("expire_at") + 8

def room_doc_bytes(state: RoomState) -> int:
    """Firestore storage size of the room's document, in bytes (shared/docsize.py)."""
    return docsize.document_size(f"{ROOMS}/{state.room_id}", room_to_doc(state)) + _EXPIRE_AT_BYTES
