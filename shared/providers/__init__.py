"""Platform adapters. Each provider name a producer may put in the `provider`
attribute maps to a client with `send(recipient, text, delivery_id) -> SendResult`
(shared/providers/base.py).

WhatsApp's Cloud API (whatsapp.py), Messenger and Instagram messaging
(meta_messaging.py). A fourth platform is one module: a client with `send`
(build the request, read the answer into a `SendResult`), a webhook parser
into statuses or recipient receipts, its entry here and in
`shared.config.PROVIDERS` (ack level, secrets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.providers.base import Sender, SendOutcome, SendResult
from shared.providers.meta_messaging import InstagramClient, MessengerClient
from shared.providers.whatsapp import WhatsAppClient

if TYPE_CHECKING:  # only for the annotation: importing shared.providers reads no configuration
    from shared.config import Settings

__all__ = ["KNOWN_PROVIDERS", "Sender", "SendOutcome", "SendResult", "make_senders"]

KNOWN_PROVIDERS = frozenset({"whatsapp", "messenger", "instagram"})


def make_senders(settings: Settings) -> dict[str, Sender]:
    """One client per known provider, configured from the settings
    (`whatsapp_api_base`, `whatsapp_api_version`, `whatsapp_phone_number_id`,
    `whatsapp_access_token`, the Messenger Page and Instagram account ids and
    tokens, and `send_timeout_ms`: one send call's whole budget in ms,
    reconnects included). All three speak the Graph API at `whatsapp_api_base`."""
    base, version, budget = settings.whatsapp_api_base, settings.whatsapp_api_version, settings.send_timeout_ms
    return {
        "whatsapp": WhatsAppClient(base, version, settings.whatsapp_phone_number_id,
                                   settings.whatsapp_access_token, budget),
        "messenger": MessengerClient(base, version, settings.messenger_page_id, settings.messenger_access_token,
                                     budget),
        "instagram": InstagramClient(base, version, settings.instagram_account_id, settings.instagram_access_token,
                                     budget),
    }
