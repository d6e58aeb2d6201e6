"""The platforms' clients, built from the settings: `make_senders` (one
client per provider and WhatsApp number) and `make_preparers` (the media
uploaders). Imported on first use (shared/providers/__init__.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shared.providers.base import Preparer, Sender
from shared.providers.meta_messaging import InstagramClient, MessengerClient
from shared.providers.registry import INSTAGRAM, MESSENGER, WHATSAPP
from shared.providers.whatsapp import WhatsAppClient

if TYPE_CHECKING:  # only for the annotation: importing shared.providers reads no configuration
    from shared.config import Settings


def _whatsapp(settings: Settings, phone_number_id: str | None = None) -> WhatsAppClient:
    return WhatsAppClient(settings.whatsapp_api_base, settings.whatsapp_api_version,
                          phone_number_id or settings.whatsapp_sender_specs[0].phone_number_id,
                          settings.whatsapp_access_token,
                          settings.send_timeout_ms, media_max_bytes=settings.media_max_bytes,
                          media_timeout_ms=settings.media_timeout_ms)


def make_senders(settings: Settings) -> dict[str, Sender]:
    """One client per known provider, configured from the settings
    (`whatsapp_api_base`, `whatsapp_api_version`, `whatsapp_phone_number_id`,
    `whatsapp_access_token`, the Messenger Page and Instagram account ids and
    tokens, and `send_timeout_ms`: one send call's whole budget in ms,
    reconnects included). All three speak the Graph API at `whatsapp_api_base`.
    WhatsApp's client also gets `media_max_bytes` (bytes) and
    `media_timeout_ms` (ms), though only `make_preparers`' clients use them;
    Messenger's and Instagram's refuse media messages for good.

    Every WhatsApp number of WHATSAPP_SENDERS has a client of its own under
    `whatsapp:{phone_number_id}` (the send path names the number); plain
    `whatsapp` is the first one. One access token serves them all: a system
    user's token reaches every number of its WhatsApp Business Account
    (https://developers.facebook.com/docs/whatsapp/business-management-api/get-started)."""
    base, version, budget = settings.whatsapp_api_base, settings.whatsapp_api_version, settings.send_timeout_ms
    numbers: dict[str, Sender] = {f"{WHATSAPP}:{spec.phone_number_id}": _whatsapp(settings, spec.phone_number_id)
                                  for spec in settings.whatsapp_sender_specs}
    return {
        **numbers,
        WHATSAPP: _whatsapp(settings),
        MESSENGER: MessengerClient(base, version, settings.messenger_page_id, settings.messenger_access_token,
                                     budget),
        INSTAGRAM: InstagramClient(base, version, settings.instagram_account_id, settings.instagram_access_token,
                                     budget),
    }


def make_preparers(settings: Settings) -> dict[str, Preparer]:
    """provider -> the client that prepares its messages' media: `{"whatsapp":
    WhatsAppClient}` (an instance of its own, beside `make_senders`'), which
    fetches a media link and uploads the file to
    `POST {whatsapp_api_base}/{whatsapp_api_version}/{whatsapp_phone_number_id}/media`
    within `media_timeout_ms` (ms), files up to `media_max_bytes` (bytes)
    (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media).
    A provider missing here prepares nothing: a `prepare` push for it is
    rejected by the push parser. Each WhatsApp number has its own under
    `whatsapp:{phone_number_id}` (media uploaded with a number can be sent by
    it only)."""
    numbers: dict[str, Preparer] = {f"{WHATSAPP}:{spec.phone_number_id}": _whatsapp(settings, spec.phone_number_id)
                                    for spec in settings.whatsapp_sender_specs}
    return {**numbers, WHATSAPP: _whatsapp(settings)}
