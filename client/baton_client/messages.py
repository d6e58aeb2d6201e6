"""Typed messages: one class per kind of baton's message contract
(`baton_client/contract/message.v1.schema.json`), each turning into the
contract's `data` object (`to_data()`), and `Message`, what is published:
the room, the provider, the recipient, the idempotency key, the content and
the optional scheduling, preparation, sequence and sender.

The classes build the data; the contract checks it (`Message.errors()`), so
a limit lives in one place, the schema. Where a class has no field for
something the contract allows, `Raw(data)` sends any contract-valid object.

Kinds by provider (what the contract takes):
- WhatsApp: Text, Image, Video, Audio, Document, Sticker, Location, Contacts,
  Buttons, ListMessage, Reaction, Template.
- Messenger: Text, Image, Video, Audio, File (attachments), with
  `quick_replies` and `tag` (outside the 24-hour window, e.g. HUMAN_AGENT).
- Instagram: Text, Image, Video, Audio, File, with `quick_replies`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from baton_client.contract import check, errors


class Content(Protocol):
    """A message's content: anything with `to_data()`, the contract's `data`."""

    def to_data(self) -> dict[str, Any]: ...


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None and v != () and v != []}


@dataclass(frozen=True)
class QuickReply:
    """A Messenger or Instagram quick reply: `title` (at most 20 characters)
    and the `payload` your webhook gets back (at most 1000)."""

    title: str
    payload: str

    def to_data(self) -> dict[str, Any]:
        return {"content_type": "text", "title": self.title, "payload": self.payload}


def _replies(replies: Sequence[QuickReply]) -> list[dict[str, Any]] | None:
    return [r.to_data() for r in replies] or None


@dataclass(frozen=True)
class Text:
    """A text: at most 4,096 characters on WhatsApp, 2,000 on Messenger,
    1,000 on Instagram. `preview_url` (WhatsApp) shows a link's preview;
    `quick_replies` and `tag` are Messenger's (quick replies Instagram's too)."""

    text: str
    preview_url: bool | None = None
    quick_replies: Sequence[QuickReply] = ()
    tag: str | None = None

    def to_data(self) -> dict[str, Any]:
        return _drop_none({"type": "text", "text": self.text, "preview_url": self.preview_url,
                           "quick_replies": _replies(self.quick_replies), "tag": self.tag})


@dataclass(frozen=True)
class _Media:
    link: str | None = None  # an http(s) URL the platform fetches (or baton uploads first: prepare=True)
    id: str | None = None  # a media id you uploaded to the platform yourself
    caption: str | None = None  # image, video, document (WhatsApp): at most 1,024 characters
    quick_replies: Sequence[QuickReply] = ()  # Messenger and Instagram
    tag: str | None = None  # Messenger, outside the 24-hour window

    kind = ""

    def to_data(self) -> dict[str, Any]:
        return _drop_none({"type": self.kind, "link": self.link, "id": self.id, "caption": self.caption,
                           "quick_replies": _replies(self.quick_replies), "tag": self.tag})


@dataclass(frozen=True)
class Image(_Media):
    """An image by `link` or `id`, with an optional `caption` (WhatsApp)."""

    kind = "image"


@dataclass(frozen=True)
class Video(_Media):
    """A video by `link` or `id`, with an optional `caption` (WhatsApp)."""

    kind = "video"


@dataclass(frozen=True)
class Audio(_Media):
    """An audio file by `link` or `id` (no caption)."""

    kind = "audio"


@dataclass(frozen=True)
class Sticker(_Media):
    """A WhatsApp sticker (WebP) by `link` or `id` (no caption)."""

    kind = "sticker"


@dataclass(frozen=True)
class File(_Media):
    """A Messenger or Instagram file attachment by `link` or `id`."""

    kind = "file"


@dataclass(frozen=True)
class Document:
    """A WhatsApp document by `link` or `id`, with an optional `caption` and
    the `filename` the user sees."""

    link: str | None = None
    id: str | None = None
    caption: str | None = None
    filename: str | None = None

    def to_data(self) -> dict[str, Any]:
        return _drop_none({"type": "document", "link": self.link, "id": self.id, "caption": self.caption,
                           "filename": self.filename})


@dataclass(frozen=True)
class Location:
    """A WhatsApp location: degrees, with an optional `name` and `address`."""

    latitude: float
    longitude: float
    name: str | None = None
    address: str | None = None

    def to_data(self) -> dict[str, Any]:
        return _drop_none({"type": "location", "latitude": self.latitude, "longitude": self.longitude,
                           "name": self.name, "address": self.address})


@dataclass(frozen=True)
class Contacts:
    """WhatsApp contact cards: Meta's contact objects, each with
    `name.formatted_name` (e.g. `{"name": {"formatted_name": "Ada"},
    "phones": [{"phone": "+1 555 0100", "type": "WORK"}]}`)."""

    contacts: Sequence[dict[str, Any]]

    def to_data(self) -> dict[str, Any]:
        return {"type": "contacts", "contacts": list(self.contacts)}


@dataclass(frozen=True)
class Button:
    """A reply button: `id` (at most 256 characters, sent back to your webhook) and `title` (at most 20)."""

    id: str
    title: str


@dataclass(frozen=True)
class Buttons:
    """A WhatsApp interactive message with 1 to 3 reply buttons; `body` at
    most 1,024 characters, `header` and `footer` texts at most 60."""

    body: str
    buttons: Sequence[Button]
    header: str | None = None
    footer: str | None = None

    def to_data(self) -> dict[str, Any]:
        interactive: dict[str, Any] = {"type": "button", "body": {"text": self.body}, "action": {
            "buttons": [{"type": "reply", "reply": {"id": b.id, "title": b.title}} for b in self.buttons]}}
        _frame(interactive, self.header, self.footer)
        return {"type": "interactive", "interactive": interactive}


@dataclass(frozen=True)
class Row:
    """A list row: `id` (at most 200 characters), `title` (24), `description` (72)."""

    id: str
    title: str
    description: str | None = None


@dataclass(frozen=True)
class Section:
    """A list section: its rows and, when a list has several, a `title` (at most 24 characters)."""

    rows: Sequence[Row]
    title: str | None = None


@dataclass(frozen=True)
class ListMessage:
    """A WhatsApp list message: `button` opens it (at most 20 characters);
    1 to 10 sections, at most 10 rows in all."""

    body: str
    button: str
    sections: Sequence[Section]
    header: str | None = None
    footer: str | None = None

    def to_data(self) -> dict[str, Any]:
        sections = [_drop_none({"title": s.title, "rows": [_drop_none({"id": r.id, "title": r.title,
                                                                         "description": r.description})
                                                            for r in s.rows]}) for s in self.sections]
        interactive: dict[str, Any] = {"type": "list", "body": {"text": self.body},
                                       "action": {"button": self.button, "sections": sections}}
        _frame(interactive, self.header, self.footer)
        return {"type": "interactive", "interactive": interactive}


def _frame(interactive: dict[str, Any], header: str | None, footer: str | None) -> None:
    if header is not None:
        interactive["header"] = {"type": "text", "text": header}
    if footer is not None:
        interactive["footer"] = {"text": footer}


@dataclass(frozen=True)
class Reaction:
    """A WhatsApp reaction to the message `message_id` (its wamid); an empty `emoji` removes it."""

    message_id: str
    emoji: str

    def to_data(self) -> dict[str, Any]:
        return {"type": "reaction", "message_id": self.message_id, "emoji": self.emoji}


@dataclass(frozen=True)
class Template:
    """A WhatsApp template message, the only kind WhatsApp delivers outside
    the 24-hour customer service window: an approved template's `name` and
    `language` code, `body` parameters (texts, in order), an optional
    `header` (a text, or an `Image`/`Video`/`Document` by link or id), and
    `buttons`: {index: payload} of its quick-reply buttons, or
    `url_buttons`: {index: the URL's variable part}. `components` replaces
    all of these with Meta's own component list."""

    name: str
    language: str
    body: Sequence[str] = ()
    header: str | Image | Video | Document | None = None
    buttons: dict[int, str] = field(default_factory=dict)
    url_buttons: dict[int, str] = field(default_factory=dict)
    components: Sequence[dict[str, Any]] | None = None

    def to_data(self) -> dict[str, Any]:
        components = list(self.components) if self.components is not None else self._components()
        template: dict[str, Any] = {"name": self.name, "language": {"code": self.language}}
        if components:
            template["components"] = components
        return {"type": "template", "template": template}

    def _components(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if isinstance(self.header, str):
            out.append({"type": "header", "parameters": [{"type": "text", "text": self.header}]})
        elif self.header is not None:
            media = self.header.to_data()
            kind = media.pop("type")
            media.pop("caption", None)
            out.append({"type": "header", "parameters": [{"type": kind, kind: media}]})
        if self.body:
            out.append({"type": "body", "parameters": [{"type": "text", "text": t} for t in self.body]})
        for index, payload in sorted(self.buttons.items()):
            out.append({"type": "button", "sub_type": "quick_reply", "index": index,
                        "parameters": [{"type": "payload", "payload": payload}]})
        for index, text in sorted(self.url_buttons.items()):
            out.append({"type": "button", "sub_type": "url", "index": index,
                        "parameters": [{"type": "text", "text": text}]})
        return out


@dataclass(frozen=True)
class Raw:
    """Any contract-valid `data` object, as is."""

    data: dict[str, Any]

    def to_data(self) -> dict[str, Any]:
        return dict(self.data)


def _seconds(value: float) -> str:
    """`delay_s` as the contract writes it: up to 6 decimals, no exponent."""
    return f"{value:.6f}".rstrip("0").rstrip(".") if value == value and value >= 0 else str(value)


@dataclass(frozen=True)
class Message:
    """One message to publish.

    - `room_id`: the ordering key; one room's messages are delivered in publish order.
    - `provider`: `whatsapp`, `messenger` or `instagram`; `recipient`: the
      phone number, PSID or IGSID (5 to 20 digits).
    - `message_id`: the idempotency key (unique per room): published twice, sent once.
    - `content`: a kind above (`Text("hi")`, `Template(...)`, ...).
    - `deliver_at` (an aware datetime or RFC 3339 text) or `delay_s` (s after
      publishing): it enters its room then (cancel it before with `Publisher.cancel`).
    - `prepare`: upload the media (WhatsApp) before its turn, send it by id.
    - `sequence`: your own order in the room (from 1) when several services publish to it.
    - `sender`: the WhatsApp phone-number id to send from.
    """

    room_id: str
    provider: str
    recipient: str
    message_id: str
    content: Content
    deliver_at: datetime | str | None = None
    delay_s: float | None = None
    prepare: bool = False
    sequence: int | None = None
    sender: str | None = None

    def attributes(self) -> dict[str, str]:
        """The Pub/Sub attributes (strings), as the contract names them."""
        attrs = {"room_id": self.room_id, "provider": self.provider, "recipient": self.recipient,
                 "message_id": self.message_id}
        if self.deliver_at is not None:
            at = self.deliver_at
            if isinstance(at, datetime):
                if at.tzinfo is None:
                    raise ValueError("deliver_at needs a time zone (e.g. datetime.now(timezone.utc))")
                at = at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
            attrs["deliver_at"] = at
        if self.delay_s is not None:
            attrs["delay_s"] = _seconds(self.delay_s)
        if self.prepare:
            attrs["prepare"] = "media"
        if self.sequence is not None:
            attrs["sequence"] = str(self.sequence)
        if self.sender is not None:
            attrs["sender"] = self.sender
        return attrs

    def errors(self) -> list[str]:
        """Every way this message breaks the contract (empty: none), with the
        reason baton's push parser would give."""
        return errors(self.attributes(), self.content.to_data())

    def encode(self) -> tuple[bytes, dict[str, str]]:
        """(data bytes, attributes) to publish, after the contract's check.

        Raises:
            InvalidMessage: every error at once (`errors`, `reason`).
        """
        attrs, data = self.attributes(), self.content.to_data()
        check(attrs, data)
        return json.dumps(data, ensure_ascii=False, separators=(",", ":")).encode("utf-8"), attrs
