"""End users who answer: replies and reactions the fake platform posts to
baton's webhook, signed like every webhook, for baton to forward unchanged
to its `inbound` topic (shared/service/inbound.py; the demo checks each one
arrives byte for byte).

With `reply_every` = N (FakeConfig), every N-th message the platform sends
(counted over all providers) gets, once delivered, a text reply and a
reaction to it from its recipient (not from silent recipients). Each body
posted is recorded (provider, user, sha256 of the exact bytes) under
`inbound_posted` in `GET /_fake/stats`; a retry posts the same bytes.

Shapes, from Meta's documentation: WhatsApp `messages` field with
`value.messages[]` of `type` `text` and `reaction`
(https://developers.facebook.com/docs/whatsapp/cloud-api/webhooks/payload-examples);
Messenger and Instagram `messaging[]` items with `message` and `reaction`
(https://developers.facebook.com/docs/messenger-platform/reference/webhook-events/message-reactions).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

REPLY_AFTER_S = 0.3
REACTION_AFTER_S = 0.35
WHATSAPP_ACCOUNT = "102290129340398"


def _whatsapp_body(platform: Any, rec: Any, message: dict[str, Any]) -> dict[str, Any]:
    return {"object": "whatsapp_business_account", "entry": [{"id": WHATSAPP_ACCOUNT, "changes": [{
        "field": "messages", "value": {
            "messaging_product": "whatsapp",
            "metadata": {"display_phone_number": "15550000000", "phone_number_id": rec.sender or "100000000000001"},
            "contacts": [{"profile": {"name": "Fake User"}, "wa_id": rec.recipient}],
            "messages": [{"from": rec.recipient, "id": "wamid.IN" + hashlib.sha1(
                f"{rec.wamid}{message['type']}".encode()).hexdigest()[:20], "timestamp": str(int(time.time())),
                **message}]}}]}]}


def _meta_body(app: Any, rec: Any, item: dict[str, Any]) -> dict[str, Any]:
    now_ms = int(time.time() * 1000)
    return {"object": "page" if app.provider == "messenger" else "instagram",
            "entry": [{"id": app.account_id, "time": now_ms, "messaging": [
                {"sender": {"id": rec.recipient}, "recipient": {"id": app.account_id}, "timestamp": now_ms, **item}]}]}


def _post(platform: Any, provider: str, user: str, raw: bytes, secret: bytes, attempt: int = 1) -> None:
    if attempt == 1:
        with platform.lock:
            platform.inbound_posted.append({"provider": provider, "user": user,
                                            "sha256": hashlib.sha256(raw).hexdigest()})
    platform._post_signed(raw, secret, lambda: _post(platform, provider, user, raw, secret, attempt + 1), attempt)


def reply_plan(platform: Any, rec: Any, app: Any = None) -> list[tuple[float, Any]]:
    """The reply and reaction to `rec` (a SendRecord just sent), if it is
    one of every `reply_every`; `app` is the Meta app of a Messenger or
    Instagram send (None: WhatsApp). Lock held."""
    every = platform.config.reply_every
    if not every or len(platform.sends) % every or rec.recipient in platform.config.silent_recipients:
        return []

    def reply() -> None:
        if app is None:
            body = _whatsapp_body(platform, rec, {"type": "text", "text": {"body": "thanks!"}})
            _post(platform, "whatsapp", rec.recipient, json.dumps(body).encode(), platform.app_secret)
        else:
            body = _meta_body(app, rec, {"message": {"mid": "m_in" + rec.wamid[-16:], "text": "thanks!"}})
            _post(platform, app.provider, rec.recipient, json.dumps(body).encode(), app.app_secret.encode())

    def reaction() -> None:
        if app is None:
            body = _whatsapp_body(platform, rec, {"type": "reaction",
                                                  "reaction": {"message_id": rec.wamid, "emoji": "\U0001f44d"}})
            _post(platform, "whatsapp", rec.recipient, json.dumps(body).encode(), platform.app_secret)
        else:
            body = _meta_body(app, rec, {"reaction": {"mid": rec.wamid, "action": "react", "reaction": "like",
                                                      "emoji": "\U0001f44d"}})
            _post(platform, app.provider, rec.recipient, json.dumps(body).encode(), app.app_secret.encode())

    return [(rec.at + REPLY_AFTER_S, reply), (rec.at + REACTION_AFTER_S, reaction)]
