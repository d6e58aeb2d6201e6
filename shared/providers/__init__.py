"""Platform adapters. Each provider name a producer may put in the `provider`
attribute maps to a client with `send(recipient, text, delivery_id, attempt)`.

Only WhatsApp's Cloud API for now; Instagram messaging has no delivery webhook
(only `messaging_seen`), so it would run on ack timeouts alone.
"""

from __future__ import annotations

from typing import Protocol

from shared.config import Settings
from shared.providers.whatsapp import SendResult, WhatsAppClient

KNOWN_PROVIDERS = frozenset({"whatsapp"})


class Sender(Protocol):
    def send(self, recipient: str, text: str, delivery_id: str, attempt: int = 1) -> SendResult: ...


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
