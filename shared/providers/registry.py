"""The platform registry: per provider (WhatsApp, Messenger, Instagram), what
the rest of baton needs to know of it, in one place (issue 45, item 4).

- `webhook_object`: the `object` of its webhook posts (which app signed a
  post, and whose parser reads it).
- `secret_setting`: the `Settings` field of its app secret (the key of
  X-Hub-Signature-256).
- `webhook_format`: what its webhook reports, hence its parser:
  `STATUSES` (per message, naming baton's delivery id: `parse_statuses`,
  shared/providers/whatsapp.py) or `RECEIPTS` (per recipient: watermarks and
  message ids, `parse_receipts`, shared/providers/meta_messaging.py).
- `default_ack_level`: what acks its messages unless ACK_LEVEL_* says
  otherwise (shared/config.py holds the setting; a test keeps the two equal).
- `has_numbers`: it sends from several numbers of the deployment
  (WHATSAPP_SENDERS, shared/senders.py): a message names the number it goes
  out from, and a room keeps one number.
- `acceptance`: how a send it accepted is recorded in the room
  (`Acceptance`).

Pure data and lookups: it imports no client, so the room's rules
(shared/room/) may ask it (`has_numbers`) without the platforms' I/O code;
the parsers' modules are imported on their first call. A fourth platform is
one more `Platform` here, its client and parser, and its settings in
`shared.config` (PROVIDERS, ACK_LEVEL_*, its secret).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the annotations only: importing the registry loads no client
    from shared.config import Settings
    from shared.providers.base import InboundItem
    from shared.providers.meta_messaging import MessagingItem
    from shared.providers.whatsapp import PlatformStatus

WHATSAPP = "whatsapp"
MESSENGER = "messenger"
INSTAGRAM = "instagram"


class WebhookFormat(StrEnum):
    """What a platform's webhook reports."""

    STATUSES = "statuses"  # per message, by baton's delivery id (WhatsApp `statuses[]`)
    RECEIPTS = "receipts"  # per recipient: delivery and read watermarks, message ids (`messaging[]`)


class Acceptance(StrEnum):
    """How a send the platform accepted is recorded in its room."""

    # No transaction: its statuses name baton's delivery id. The outcome
    # rides on the attempt's timer, armed right after the send
    # (`ScheduleTimer.accepted_deadline_us`, issue 46: no write at all),
    # applied when the timer fires; older code wrote it blind
    # (`RoomStore.record_accepted`, applied at the room's next read:
    # docs/architecture.md, "Writes outside the transaction"). Unless its
    # ack level is `accepted` (then the acceptance acks it: a transaction).
    BLIND_WRITE = "blind_write"
    # A `SendReturned` through the room's transaction, keeping the platform's
    # message id: its receipts name that id, not baton's delivery id.
    TRANSACTION = "transaction"


@dataclass(frozen=True)
class Platform:
    """One provider's facts (module docstring)."""

    name: str
    webhook_object: str
    secret_setting: str
    webhook_format: WebhookFormat
    default_ack_level: str
    has_numbers: bool
    acceptance: Acceptance

    def app_secret(self, settings: Settings) -> str:
        """Its app secret in `settings` (empty: none configured)."""
        return str(getattr(settings, self.secret_setting))


PLATFORMS: tuple[Platform, ...] = (
    Platform(WHATSAPP, "whatsapp_business_account", "whatsapp_app_secret", WebhookFormat.STATUSES, "delivered",
             has_numbers=True, acceptance=Acceptance.BLIND_WRITE),
    Platform(MESSENGER, "page", "messenger_app_secret", WebhookFormat.RECEIPTS, "delivered",
             has_numbers=False, acceptance=Acceptance.TRANSACTION),
    Platform(INSTAGRAM, "instagram", "instagram_app_secret", WebhookFormat.RECEIPTS, "read",
             has_numbers=False, acceptance=Acceptance.TRANSACTION),
)
BY_NAME: dict[str, Platform] = {p.name: p for p in PLATFORMS}
KNOWN_PROVIDERS = frozenset(BY_NAME)
# A webhook post's `object` -> the provider whose app sent it.
WEBHOOK_OBJECTS: dict[str, str] = {p.webhook_object: p.name for p in PLATFORMS}


def platform(provider: str) -> Platform:
    """The registry's entry for `provider`.

    Raises:
        KeyError: not a known provider.
    """
    return BY_NAME[provider]


def by_webhook_object(obj: Any) -> Platform | None:
    """The platform whose webhook posts carry `object` = `obj`, or None."""
    name = WEBHOOK_OBJECTS.get(obj) if isinstance(obj, str) else None
    return None if name is None else BY_NAME[name]


def has_numbers(provider: str) -> bool:
    """Whether `provider` sends from several numbers of the deployment (a
    message names its number); False for an unknown provider."""
    entry = BY_NAME.get(provider)
    return entry is not None and entry.has_numbers


def records_acceptance_blind(provider: str) -> bool:
    """Whether a send `provider` accepted is recorded outside the room's
    transaction (`Acceptance.BLIND_WRITE`: on its attempt's timer, or by one
    blind write) rather than in it."""
    entry = BY_NAME.get(provider)
    return entry is not None and entry.acceptance is Acceptance.BLIND_WRITE


def parse_statuses(payload: Any) -> list[PlatformStatus]:
    """The `STATUSES` parser (shared/providers/whatsapp.py `parse_statuses`).

    Raises:
        ValueError, TypeError, AttributeError, KeyError: not such a webhook.
    """
    from shared.providers.whatsapp import parse_statuses as parse

    return parse(payload)


def parse_receipts(payload: Any) -> list[MessagingItem]:
    """The `RECEIPTS` parser (shared/providers/meta_messaging.py `parse_messaging`).

    Raises:
        ValueError: not such a webhook.
    """
    from shared.providers.meta_messaging import parse_messaging

    return parse_messaging(payload)


def inbound_items(entry: Platform, payload: Any) -> list[InboundItem]:
    """What a post of `entry`'s webhook holds that baton does not consume
    (shared/service/inbound.py), by its format's parser module.

    Raises:
        ValueError: not such a webhook.
    """
    if entry.webhook_format is WebhookFormat.STATUSES:
        from shared.providers import whatsapp

        return whatsapp.inbound_items(payload)
    from shared.providers import meta_messaging

    return meta_messaging.inbound_items(payload)
