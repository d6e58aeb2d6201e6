"""The stored form of a room and its messages, and baton's delivery ids.

Converts only (state <-> Firestore fields, attempt <-> delivery id); decides
nothing and does no I/O.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shared import docsize
from shared.room.state import Ended, InFlight, Paused, Phase, QueuedMessage, RoomState

ROOMS = "rooms"

def _b36(n: int) -> str:
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = digits[r] + out
        if n == 0:
            return out

def make_delivery_id(room_id: str, incarnation: int, seq: int, attempt: int, started_at_us: int) -> str:
    """Our id of one attempt: `"{seq}.{attempt}.{started_ms}.{incarnation_b36}.{room_id}"`.

    It travels as WhatsApp's `biz_opaque_callback_data` (at most 512 characters,
    https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages)
    and comes back in every status webhook, so a status names its room,
    incarnation and attempt without a lookup, and a late ack still knows its
    send time.
    """
    return f"{seq}.{attempt}.{started_at_us // 1000}.{_b36(incarnation)}.{room_id}"

def parse_delivery_id(delivery_id: object) -> tuple[str, int, int, int, int]:
    """Inverse of `make_delivery_id`: (room_id, incarnation, seq, attempt, started_at_us).

    Raises:
        ValueError: not a delivery id baton made (or not a string at all).
    """
    if not isinstance(delivery_id, str):
        raise ValueError(f"not a baton delivery id: {delivery_id!r:.80}")
    parts = delivery_id.split(".", 4)
    if len(parts) != 5 or not parts[4]:
        raise ValueError(f"not a baton delivery id: {delivery_id!r}")
    seq, attempt, started_ms = (int(p) for p in parts[:3])
    incarnation = int(parts[3], 36)
    if seq < 1 or attempt < 1 or incarnation < 1:
        raise ValueError(f"not a baton delivery id: {delivery_id!r}")
    return parts[4], incarnation, seq, attempt, started_ms * 1000

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
        "accepted": {},  # every transaction folds and clears the blind-written acceptances
        "echoes": {},  # and the blind-written echoes
    }

def recipient_key(provider: str, recipient: str) -> str:
    """The room document's `in_flight_to`: `{provider}:{recipient}`."""
    return f"{provider}:{recipient}"

def acceptance_key(incarnation: int, seq: int, attempt: int) -> str:
    """The key of an attempt in the room document's `accepted` map (a plain
    Firestore field name: letters, digits, `_`)."""
    return f"a{_b36(incarnation)}_{seq}_{attempt}"

def room_from_doc(room_id: str, d: dict[str, Any] | None) -> RoomState:
    """Inverse of `room_to_doc`; a missing document is a new, empty room.

    The `accepted` map holds send acceptances written blind (no read, no
    transaction: `RoomStore.record_accepted`), `{acceptance_key: deadline_us}`.
    An entry for the in-flight attempt while it is SENDING is the same as the
    rule for `SendReturned(ACCEPTED)`: the attempt is SENT with that deadline.
    Entries of other attempts are stale and dropped at the next write.

    The `echoes` map holds the platform's own records of our sends, written
    blind the same way (`RoomStore.record_echo`): Messenger and Instagram
    echoes, and WhatsApp `sent` statuses when WHATSAPP_SENT_PROOF is on,
    `{acceptance_key: {"ts": platform stamp, epoch us, "mid": its message
    id, "num": the WhatsApp number it names, if any}}`. An entry for the
    in-flight attempt gives it its platform stamp (what a watermark is judged
    against) and message id; it also proves the platform took the attempt,
    so an attempt whose send outcome was unknown is SENT (held to the same
    deadline, then timed out rather than resent). An entry naming another
    number than the attempt went out from proves nothing and is dropped.
    """
    if not d:
        return RoomState(room_id)
    state = _room_from_fields(room_id, d)
    flight = state.in_flight
    if flight is None:
        return state
    key = acceptance_key(state.incarnation, flight.message.seq, flight.attempt)
    if flight.phase is Phase.SENDING:
        deadline = (d.get("accepted") or {}).get(key)
        if deadline is not None:
            flight = replace(flight, phase=Phase.SENT, deadline_us=deadline)
    echo = (d.get("echoes") or {}).get(key)
    if isinstance(echo, dict) and echo.get("num") is not None and flight.number not in (None, echo["num"]):
        echo = None  # a status from another number than this attempt's: not its proof
    if isinstance(echo, dict) and isinstance(echo.get("ts"), int) and flight.platform_ts_us is None:
        flight = replace(flight, platform_ts_us=echo["ts"],
                         provider_message_id=flight.provider_message_id or echo.get("mid"))
        if flight.phase is Phase.UNKNOWN:
            flight = replace(flight, phase=Phase.SENT)
    return replace(state, in_flight=flight)

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
