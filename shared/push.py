"""Parsing the Pub/Sub push envelope into a room event, or a reason to reject.

Envelope (https://cloud.google.com/pubsub/docs/push#receive_push):
`{"message": {"data": base64, "attributes": {...}, "messageId", "publishTime",
"orderingKey"}, "subscription"}`. The emulator's envelope has no `orderingKey`,
so the room id travels as the `room_id` attribute as well as the ordering key;
when both are present they must agree (Pub/Sub orders by the key, the room is
chosen by the attribute: a message whose two disagree would be ordered in one
room's stream and delivered in another's).

Producer contract: shared/contract/message.v1.schema.json (a JSON Schema of
the attributes and the decoded `data`, every kind; docs/contract.md). This
module checks a push with it (`shared.contract.errors`, the same check the
client in client/ makes before publishing, so both give the same reason) and
then what only a deployment knows: the providers it sends to (PROVIDERS), its
WhatsApp numbers (WHATSAPP_SENDERS, for `sender`), and that the room id and
the envelope's `orderingKey` agree. Optional attributes: `deliver_at` /
`delay_s` (scheduled delivery, shared/scheduled.py), `prepare` (`media`: the
file is uploaded to the platform before its turn and sent by media id;
shared/prepare.py), `sequence` (the producer's own order in the room, from 1:
the room holds a message until its predecessors came or
SEQUENCE_GAP_TIMEOUT_MS passed), and for WhatsApp `sender` (the phone-number
id to send from; shared/senders.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared import contract
from shared.providers.registry import KNOWN_PROVIDERS, has_numbers
from shared.room import Enqueue
from shared.senders import rendezvous_sender

# Firestore document ids may not contain '/', and ids of the form __x__ are
# reserved (https://firebase.google.com/docs/firestore/quotas#collections_documents_and_fields).
# Matched whole (`fullmatch`: `$` would also match before a final newline);
# `.` and `..` are not document ids either.
ROOM_ID = re.compile(r"(?!__.*__$)(?!\.\.?$)[A-Za-z0-9_.:@+=-]{1,256}")
# The kinds whose file the room knows by `media_kind` and `media_link` (and
# may prepare: upload before its turn); a WhatsApp `image`, `video`, `audio`,
# `document`, `sticker`, a Messenger or Instagram attachment.
MEDIA_KINDS = frozenset({"image", "video", "audio", "document", "sticker", "file"})
# The `data` fields the room's `text`, `media_kind` and `media_link` carry;
# a message with any other field travels with its `data` as `payload`.
_PLAIN_FIELDS = {"text": frozenset({"type", "text"}), "media": frozenset({"type", "link", "caption"})}


@dataclass(frozen=True)
class Rejected:
    """A push that can never become a valid message: kept under `key` with
    `reason` and the raw `record`, then acked so it blocks nothing."""

    key: str
    reason: str
    record: dict[str, Any]
    room_id: str | None = None
    message_id: str | None = None


@dataclass(frozen=True)
class Accepted:
    """A valid push: its room, its `Enqueue`, and when it may enter the room
    (`deliver_at_us`, epoch us, from `deliver_at` / `delay_s`; None: now)."""

    room_id: str
    event: Enqueue
    deliver_at_us: int | None = None


def _parse_time_us(value: Any) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        # Pub/Sub gives nanoseconds, e.g. 2026-11-22T11:25:17.123456789Z.
        head, _, frac = value.rstrip("Z").partition(".")
        dt = datetime.fromisoformat(head + "+00:00")
        if not 1970 <= dt.year <= 9998:  # a time baton could not log back (utc_iso) is no publish time
            return None
        return int(dt.timestamp()) * 1_000_000 + int((frac + "000000")[:6])
    except (ValueError, OverflowError):
        return None


def parse_time_us(text: str) -> int:
    """Epoch us of an RFC 3339 time with a zone (`2026-11-23T09:00:00Z`).

    Raises:
        ValueError: not such a time.
    """
    if not isinstance(text, str) or "T" not in text:
        raise ValueError(f"not an RFC 3339 time: {text!r:.60}")
    dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if dt.tzinfo is None:
        raise ValueError(f"an RFC 3339 time needs a zone (Z or +hh:mm): {text!r:.60}")
    try:
        # Converting to UTC overflows near years 1 and 9999 (datetime's range).
        in_utc = dt.astimezone(UTC)
    except OverflowError:
        raise ValueError(f"time out of range: {text!r:.60}") from None
    if not 1970 <= in_utc.year <= 9998:
        raise ValueError(f"time out of range: {text!r:.60}")
    return int(dt.timestamp() * 1_000_000)


# At most this far ahead (s): 10 years, far beyond any product need, below any overflow.
MAX_DELAY_S = contract.MAX_DELAY_S


def deliver_at_of(attrs: dict[str, Any], publish_time: Any) -> int | None:
    """When a message enters its room (epoch us) from its `deliver_at` or
    `delay_s` attribute (after its publish time), or None if it has neither.

    Raises:
        ValueError: both given, or either malformed (the push is kept as
            rejected with this reason).
    """
    at, delay = attrs.get("deliver_at"), attrs.get("delay_s")
    if at is not None and delay is not None:
        raise ValueError("give `deliver_at` or `delay_s`, not both")
    if at is not None:
        return parse_time_us(at)
    if delay is None:
        return None
    try:
        seconds = float(delay)
    except (TypeError, ValueError):
        raise ValueError(f"`delay_s` is not a number of seconds: {delay!r:.60}") from None
    if not 0 <= seconds <= MAX_DELAY_S or seconds != seconds:
        raise ValueError(f"`delay_s` must be from 0 to {MAX_DELAY_S} s: {delay!r:.60}")
    published = _parse_time_us(publish_time)
    if published is None:
        raise ValueError("`delay_s` needs the message's publishTime")
    return published + int(seconds * 1_000_000)


def _utf8(text: str) -> bool:
    """Whether `text` can be stored and logged as UTF-8 (no lone surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(value: Any, limit: int = 65536) -> str | None:
    """A raw envelope field as a string Firestore can always store: JSON
    (non-ASCII escaped, so lone surrogates and odd types survive), cut at
    `limit` characters; None stays None."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=True, default=repr)[:limit]


def _plain(value: Any, limit: int) -> str | None:
    """A string field as received (cut at `limit`), or `storable(value)`."""
    if isinstance(value, str) and _utf8(value):
        return value[:limit]
    return storable(value, limit)


def _storable_attributes(attrs: Any) -> dict[str, str] | str | None:
    """Pub/Sub attributes (string to string) as a map, or as JSON text when
    they are not what Firestore can store as one."""
    if isinstance(attrs, dict) and all(
            isinstance(k, str) and k and len(k.encode("utf-8", "replace")) <= 1500 and _utf8(k)
            and isinstance(v, str) and _utf8(v) for k, v in attrs.items()) \
            and len(json.dumps(attrs)) <= 65536:
        return attrs
    return storable(attrs)


def parse_push(body: bytes, now_us: int, providers: frozenset[str] = KNOWN_PROVIDERS,
               senders: tuple[str, ...] = ()) -> Accepted | Rejected:
    """Validate one push request; `providers` are the ones this deployment
    sends to (PROVIDERS), `senders` its WhatsApp phone-number ids
    (WHATSAPP_SENDERS): a WhatsApp message's room is mapped to one by
    rendezvous hash (`Enqueue.default_sender`), and a `sender` attribute
    must name one of them (empty: no mapping, the first number sends).

    Returns `Accepted` with the `Enqueue` event, or `Rejected` with the reason
    (never raises: every bad input is kept, see `Rejected`; should a check
    below ever raise on an input nobody foresaw, the push is kept as rejected
    with that error as its reason rather than answered 500, which would hold
    its ordering key for Pub/Sub's whole retry budget).
    """
    try:
        return _parse_push(body, now_us, providers, senders)
    except Exception as exc:  # noqa: BLE001 - a parsing bug must not become a 500 that blocks the room
        return Rejected("body-" + hashlib.sha256(body).hexdigest()[:32],
                        f"push could not be parsed: {type(exc).__name__}: {exc}"[:500],
                        {"raw": body[:65536].decode(errors="replace")})


def _parse_push(body: bytes, now_us: int, providers: frozenset[str], senders: tuple[str, ...]) -> Accepted | Rejected:
    body_key = "body-" + hashlib.sha256(body).hexdigest()[:32]
    try:
        envelope = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return Rejected(body_key, "push body is not JSON", {"raw": body[:65536].decode(errors="replace")})
    message = envelope.get("message") if isinstance(envelope, dict) else None
    if not isinstance(message, dict):
        return Rejected(body_key, "push body has no `message` object", {"raw": body[:65536].decode(errors="replace")})
    pubsub_id = message.get("messageId") or message.get("message_id")
    usable_id = isinstance(pubsub_id, str) and pubsub_id.isascii() and pubsub_id.isalnum() and len(pubsub_id) <= 100
    key = f"pubsub-{pubsub_id}" if usable_id else body_key
    attrs = message.get("attributes") or {}
    raw_data = message.get("data", "")
    # Kept as received where Firestore can store it, else as JSON text: a
    # rejected push is always kept (never a 5xx for bad input).
    record = {"pubsub_message_id": _plain(pubsub_id, 1024), "attributes": _storable_attributes(attrs),
              "data": _plain(raw_data, 65536), "publish_time": _plain(message.get("publishTime"), 1024),
              "ordering_key": _plain(message.get("orderingKey"), 1024)}

    def reject(reason: str) -> Rejected:
        room = attrs.get("room_id") if isinstance(attrs, dict) and isinstance(attrs.get("room_id"), str) else None
        mid = attrs.get("message_id") if isinstance(attrs, dict) and isinstance(attrs.get("message_id"), str) else None
        return Rejected(key, reason, record, room, mid)

    if not isinstance(attrs, dict):
        return reject("`attributes` is not an object")
    ordering_key = message.get("orderingKey")
    if ordering_key is not None and not isinstance(ordering_key, str):
        return reject("`orderingKey` is not a string")
    try:
        data = json.loads(base64.b64decode(raw_data, validate=True)) if isinstance(raw_data, str) else None
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return reject("`data` is not base64-encoded JSON")
    if "room_id" not in attrs and isinstance(ordering_key, str) and ordering_key:
        attrs = {**attrs, "room_id": ordering_key}  # a producer that set only the ordering key
    broken = contract.errors(attrs, data)
    if broken:
        return reject(contract.reason_of(broken))
    if not isinstance(data, dict):  # the contract refuses it first; said again for the reader (and the type checker)
        return reject("`data` is not a JSON object")
    room_id, message_id, provider, recipient = attrs["room_id"], attrs["message_id"], attrs["provider"], \
        attrs["recipient"]
    if ordering_key and ordering_key != room_id:
        return reject(f"`room_id` attribute {room_id!r} disagrees with the envelope's `orderingKey` "
                      f"{_plain(ordering_key, 300)!r}")
    if provider not in providers:
        return reject(f"`provider` {provider!r} is not enabled here (PROVIDERS={','.join(sorted(providers))})")
    kind = data.get("type", "text")
    media_kind = kind if kind in MEDIA_KINDS else None
    text = data["text"] if kind == "text" else data.get("caption", "")
    media_link = data.get("link") if media_kind else None
    plain = _PLAIN_FIELDS["text" if kind == "text" else "media"] if kind == "text" or media_kind else frozenset()
    payload = None if data.keys() <= plain else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    prepare = attrs.get("prepare")
    sequence = int(attrs["sequence"]) if "sequence" in attrs else None
    sender = attrs.get("sender")
    if sender is not None and sender not in senders:
        return reject(f"`sender` {str(sender)[:40]!r} is not one of this deployment's WhatsApp numbers "
                      f"(WHATSAPP_SENDERS)")
    default_sender = rendezvous_sender(room_id, senders) if has_numbers(provider) and senders else None
    try:
        deliver_at_us = deliver_at_of(attrs, message.get("publishTime"))
    except ValueError as exc:
        return reject(f"scheduled delivery: {exc}")
    published_at_us = _parse_time_us(message.get("publishTime")) or now_us
    return Accepted(room_id, Enqueue(message_id, provider, recipient, text, published_at_us, now_us,
                                     media_kind=media_kind, media_link=media_link, prepare=prepare,
                                     sequence=sequence, sender=sender, default_sender=default_sender,
                                     payload=payload),
                    deliver_at_us)
