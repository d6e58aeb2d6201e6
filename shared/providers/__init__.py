"""Platform adapters. Each provider name a producer may put in the `provider`
attribute maps to a client with `send(recipient, text, delivery_id) -> SendResult`
(shared/providers/base.py).

Only WhatsApp's Cloud API for now; Instagram messaging has no delivery webhook
(only `messaging_seen`), so it would run on ack timeouts alone.
"""

from __future__ import annotations

from shared.config import Settings
from shared.providers.base import Sender, SendOutcome, SendResult
from shared.providers.whatsapp import WhatsAppClient

__all__ = ["KNOWN_PROVIDERS", "Sender", "SendOutcome", "SendResult", "make_senders"]

KNOWN_PROVIDERS = frozenset({"whatsapp"})


def make_senders(settings: Settings) -> dict[str, Sender]:
    """One client per known provider, configured from the settings."""
    return {
        "whatsapp": WhatsAppClient(
            settings.whatsapp_api_base,
            settings.whatsapp_api_version,
            settings.whatsapp_phone_number_id,
            settings.whatsapp_access_token,
            settings.send_timeout_ms,
        )
    }
