"""The provider-neutral send interface every platform adapter implements.

A send call ends in one of three outcomes, and the room's rules
(shared/room/flight.py) treat each differently: ACCEPTED starts the ack wait from the
call's return; REFUSED (provably not sent) backs off and retries, or fails the
message for good; UNKNOWN (possibly sent) is held like a sent message and
resent only if no ack comes by its deadline.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol


class SendOutcome(StrEnum):
    """What the caller of a send call knows when it returns."""

    ACCEPTED = "accepted"  # the platform took the message (2xx with its message id)
    REFUSED = "refused"  # provably not sent: the platform answered with an error, or no connection could be opened
    UNKNOWN = "unknown"  # may have reached the platform: timeout after connecting, dropped connection, 5xx,
    #                      2xx without an id; counts as possibly sent


@dataclass(frozen=True)
class SendResult:
    """The outcome of one send call.

    - `provider_message_id`: the platform's id (WhatsApp's `wamid`), set
      only when ACCEPTED.
    - `permanent` (only meaningful for REFUSED): retrying cannot help (e.g.
      WhatsApp 131026 undeliverable, 131047 outside the 24 h window).
    - `rate_limited`: the platform's per-recipient pair rate limit (WhatsApp
      131056, retry after 4^n s); the room's rules compute the wait, never
      the adapter.
    - `error_code`, `error_title`: the platform's error code and message, or
      for a network failure a description of it (what the event log shows).
    """

    outcome: SendOutcome
    provider_message_id: str | None = None
    permanent: bool = False
    rate_limited: bool = False
    error_code: int | None = None
    error_title: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is SendOutcome.ACCEPTED


@dataclass(frozen=True)
class Media:
    """The media of a message: `kind` (`image`, `video`, `audio`, `document`,
    `sticker`; Messenger's and Instagram's `file`), and either the platform's
    `media_id` from an upload (a prepared message) or a public `link` the
    platform fetches itself. The message's text is its caption."""

    kind: str
    media_id: str | None = None
    link: str | None = None


def media_reference(media: Media | None, data: dict[str, Any]) -> tuple[str, str]:
    """Which media a send names, in order of precedence: the prepared upload's
    id (`media.media_id`), the message's link (`media.link`), else the
    producer's own `data["id"]` or `data["link"]`. Returns ("id", value) or
    ("link", value); each platform spells the two keys its own way.

    Raises:
        ValueError: none of the four is there.
    """
    if media is not None and media.media_id:
        return "id", media.media_id
    if media is not None and media.link:
        return "link", media.link
    if data.get("id"):
        return "id", data["id"]
    if data.get("link"):
        return "link", data["link"]
    raise ValueError("a media message needs a media id or a link")


class Sender(Protocol):
    """A platform client: `send` never raises for platform or network errors.
    `media`: send this media with `text` as its caption (None: a text message).
    `payload`: the producer's `data` as JSON text (shared/contract) for a kind
    that `text` and `media` cannot say (a template, a location, quick
    replies...); the client builds that kind's wire format from it, `media`
    (a prepared file's id) taking precedence over its link or id."""

    def send(self, recipient: str, text: str, delivery_id: str, media: Media | None = None,
             payload: str | None = None) -> SendResult: ...


@dataclass(frozen=True)
class PrepareResult:
    """The outcome of one preparation (a media upload).

    - `media_id`: the platform's id of the uploaded media, when it worked;
    - `error`: why it did not (the event log shows it);
    - `permanent`: trying again cannot help (the media is missing, too big,
      of a type the platform refuses); a transient failure is retried.
    """

    media_id: str | None = None
    error: str | None = None
    permanent: bool = False

    @property
    def ok(self) -> bool:
        return self.media_id is not None


class Preparer(Protocol):
    """Prepares one message for sending: fetches its media from `link` and
    uploads it to the platform. Never raises for platform or network errors."""

    def prepare_media(self, kind: str, link: str) -> PrepareResult: ...


@dataclass(frozen=True)
class InboundItem:
    """One webhook item baton does not consume (a message a person wrote, a
    reaction, a postback, another `field`), for the `inbound` topic
    (shared/service/inbound.py).

    - `provider`: whatsapp, messenger or instagram; `object`: the payload's
      `object` (`whatsapp_business_account`, `page`, `instagram`);
    - `field`: the webhook field it came under (WhatsApp's `changes[].field`,
      e.g. `messages`, `account_update`; Messenger and Instagram: `messages`,
      `message_reactions`, `messaging_postbacks`, ... by the item's key, or
      `changes[].field`);
    - `account_id`: `entry[].id` (the WhatsApp Business Account, the Page or
      the Instagram account);
    - `user_id`: the person it is from (WhatsApp `messages[].from`, Messenger
      and Instagram `sender.id`), or None (an account-level field).
    """

    provider: str
    object: str
    field: str
    account_id: str
    user_id: str | None
