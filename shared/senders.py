"""WhatsApp senders: the business phone numbers a deployment sends from, and
which one a room uses. Pure: no I/O (the shared rate window is
shared/sender_window.py).

WhatsApp allows a business phone number 80 messages/s by default, up to
1,000/s after an upgrade, and answers 130429 above it
(https://developers.facebook.com/docs/whatsapp/throughput). A deployment that
must carry more configures several numbers (`WHATSAPP_SENDERS`).

A room is mapped to a number by rendezvous (highest random weight) hashing:
adding a number moves only the rooms the new number wins (about 1/n of
them), and no room moves when nothing changes. A room keeps the number of the
messages it holds (shared/room/entry.py), so a recipient sees one
conversation, in order, from one number. A producer may name the number on a
message (`sender` attribute).

Messenger Pages and Instagram accounts are not spread this way: their
recipient ids (PSID, IGSID) are scoped to one Page or account
(https://developers.facebook.com/docs/messenger-platform/identity/id-matching),
so another Page could not reach the same person. A deployment has one of each.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class SenderSpec:
    """One WhatsApp business phone number: its `phone_number_id` (the id in the
    send path `/{phone_number_id}/messages`) and `rate_per_s`, the messages
    per second baton lets it send (0: not limited by baton)."""

    phone_number_id: str
    rate_per_s: int


def parse_senders(text: str, default_id: str, default_rate: int) -> tuple[SenderSpec, ...]:
    """`WHATSAPP_SENDERS` as specs: comma-separated `phone_number_id[:rate]`
    (rate in messages/s, default `default_rate`); empty: the one number
    `default_id` at `default_rate`.

    Raises:
        ValueError: an id that is not 1 to 20 digits, a rate that is not a
            whole number of at least 0, or an id named twice.
    """
    specs: list[SenderSpec] = []
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        number, _, rate = item.partition(":")
        if not (number.isascii() and number.isdigit() and 1 <= len(number) <= 20):
            raise ValueError(f"WHATSAPP_SENDERS: {number!r} is not a phone-number id (1 to 20 digits)")
        if rate and not (rate.isascii() and rate.isdigit()):
            raise ValueError(f"WHATSAPP_SENDERS: the rate of {number} must be a whole number of messages/s: {rate!r}")
        specs.append(SenderSpec(number, int(rate) if rate else default_rate))
    if not specs:
        specs = [SenderSpec(default_id, default_rate)]
    ids = [s.phone_number_id for s in specs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"WHATSAPP_SENDERS names a number twice: {text!r}")
    return tuple(specs)


def rendezvous_sender(room_id: str, phone_number_ids: tuple[str, ...]) -> str:
    """The number a room is mapped to: the id with the highest
    sha256(id, room_id) weight. Stable across processes and restarts.

    Raises:
        ValueError: no number given.
    """
    if not phone_number_ids:
        raise ValueError("no WhatsApp sender configured")
    return max(phone_number_ids,
               key=lambda pid: hashlib.sha256(f"{pid}\x00{room_id}".encode()).digest())


def sent_from(held: str | None, phone_number_ids: tuple[str, ...]) -> str | None:
    """The number a WhatsApp message whose `sender` is `held` goes out from:
    `held` while it is one of `phone_number_ids` (the deployment's numbers,
    first the default), else the first (a message that names no number, or
    one taken out of WHATSAPP_SENDERS while the room held it). None when no
    number is given."""
    if held is not None and held in phone_number_ids:
        return held
    return phone_number_ids[0] if phone_number_ids else None
