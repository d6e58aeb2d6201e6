"""Platform adapters. Each provider name a producer may put in the `provider`
attribute maps to a client with `send(recipient, text, delivery_id) -> SendResult`
(shared/providers/base.py).

Only WhatsApp's Cloud API for now; Instagram messaging has no delivery webhook
(only `messaging_seen`), so it would run on ack timeouts alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.providers.base import Sender, SendOutcome, SendResult
from shared.providers.whatsapp import WhatsAppClient

if TYPE_CHECKING:  # only for the annotation: importing shared.providers reads no configuration
    from shared.config import Settings

__all__ = ["KNOWN_PROVIDERS", "Sender", "SendOutcome", "SendResult", "make_senders"]

KNOWN_PROVIDERS = frozenset({"whatsapp"})


def make_senders(settings: Settings) -> dict[str, Sender]:
    """One client per known provider, configured from the settings
    (`whatsapp_api_base`, `whatsapp_api_version`, `whatsapp_phone_number_id`,
    `whatsapp_access_token`, and `send_timeout_ms`: one send call's whole
    budget in ms, reconnects included)."""
    return {
        "whatsapp": WhatsAppClient(
            settings.whatsapp_api_base,
            settings.whatsapp_api_version,
            settings.whatsapp_phone_number_id,
            settings.whatsapp_access_token,
            settings.send_timeout_ms,
        )
    }
