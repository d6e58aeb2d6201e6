"""baton's ids of one attempt: the delivery id a platform carries back in
its statuses, and the base-36 form of an incarnation both it and the room
document's keys use.

Not storage: a delivery id travels with the send (WhatsApp's
`biz_opaque_callback_data`, Messenger's `metadata`) and every rule that
starts a send makes one. Converts only; decides nothing, no I/O.
"""

from __future__ import annotations


def b36(n: int) -> str:
    """`n` (>= 0) in base 36, lower case: an incarnation (epoch us) in 10 characters."""
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
    return f"{seq}.{attempt}.{started_at_us // 1000}.{b36(incarnation)}.{room_id}"

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
