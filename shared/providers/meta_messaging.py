"""Messenger and Instagram messaging: the send call and the signed webhooks.

Both are Graph API messaging platforms of Meta with the same shapes, unlike
WhatsApp's Cloud API:

- Send: `POST {base}/{version}/{PAGE-ID or IG-ID}/messages`, bearer token,
  JSON `{"recipient": {"id": PSID or IGSID}, "messaging_type": "RESPONSE",
  "message": {"text"}}` (Messenger also takes `message.metadata`, a string
  echoed in `message_echoes`: baton's delivery id goes there); the answer is
  `{"recipient_id", "message_id"}`
  (https://developers.facebook.com/docs/messenger-platform/reference/send-api;
  Instagram: https://developers.facebook.com/docs/instagram-platform/instagram-api-with-instagram-login/messaging-api).
  Failures come only in this answer, never by webhook.
  An attachment: `"message": {"attachment": {"type": "image" | "video" |
  "audio" | "file", "payload": {"url"} or {"attachment_id"}}}`; quick replies:
  `message.quick_replies` (at most 13; `content_type` `text` with a `title`
  of at most 20 characters and a `payload`,
  https://developers.facebook.com/docs/messenger-platform/reference/buttons/quick-replies).
  Outside the 24-hour window Messenger needs `"messaging_type":
  "MESSAGE_TAG", "tag": "HUMAN_AGENT"` (or another tag,
  https://developers.facebook.com/docs/messenger-platform/send-messages/message-tags);
  without one it refuses with code 10, subcode 2018278 ("This message is
  sent outside of allowed window",
  https://developers.facebook.com/docs/messenger-platform/error-codes).
- Webhooks: `{"object": "page" | "instagram", "entry": [{"id", "time",
  "messaging": [...]}]}`, signed like WhatsApp's (`X-Hub-Signature-256`,
  keyed by that app's secret). Messenger receipts: `message_deliveries`
  items `{"sender": {"id": PSID}, "recipient": {"id": PAGE-ID}, "delivery":
  {"mids"?: [...], "watermark": ms}}` (every message the platform stamped
  before `watermark` was delivered; `mids` may be absent for older clients,
  https://developers.facebook.com/documentation/business-messaging/messenger-platform/webhooks/webhook-events/message-deliveries)
  and `message_reads` items with `"read": {"watermark": ms}` (every message at
  or before it was read,
  https://developers.facebook.com/documentation/business-messaging/messenger-platform/webhooks/webhook-events/message-reads).
  Instagram has no delivery receipt: `messaging_seen` items carry
  `"read": {"mid"}` (one message seen), and our own sends come back as
  `message` items with `"is_echo": true`
  (https://developers.facebook.com/docs/instagram-platform/webhooks/examples).
  Messages people send us (`message` without `is_echo`), reactions,
  postbacks and every other item or field are not baton's business:
  `inbound_items` names them for the `inbound` topic
  (shared/service/inbound.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from shared.providers import registry
from shared.providers.base import InboundItem, Media, PrepareResult, media_reference
from shared.providers.graph import GraphApiClient

# Graph API error codes of the Send API after which the same message cannot
# succeed: 100 invalid parameter, 10 and 200 permission (e.g. outside the
# messaging window, subcode 2018278), 551 "this person isn't available right
# now"; 613 and 4 are call-rate limits (retried after a longer wait)
# (https://developers.facebook.com/docs/messenger-platform/error-codes).
PERMANENT_CODES = frozenset({10, 100, 200, 551})
RATE_LIMITED_CODES = frozenset({4, 613})

# Why a preparation for Messenger or Instagram fails: baton uploads media
# ahead of its turn for WhatsApp only (the contract refuses `prepare` for
# others; an attachment goes by its link or its attachment id).
PREPARE_REFUSAL = "media is prepared for WhatsApp only; send an attachment by `link` or `id`"
# Messenger's "outside of allowed window" (code 10, subcode 2018278).
WINDOW_CLOSED = (10, 2018278)
ATTACHMENT_KINDS = frozenset({"image", "video", "audio", "file"})

# A webhook post's `object` -> its provider (the registry's, WhatsApp's too).
WEBHOOK_OBJECTS = registry.WEBHOOK_OBJECTS


def _message(text: str, delivery_id: str | None, media: Media | None, data: dict[str, Any]) -> dict[str, Any]:
    """The Send API's `message` object: text, or an attachment (a prepared
    `media.media_id`, else the media's link or id), with its quick replies and
    (Messenger) `metadata`."""
    kind = data.get("type") or (media.kind if media is not None else "text")
    if kind == "text":
        message: dict[str, Any] = {"text": text}
    elif kind in ATTACHMENT_KINDS:
        how, value = media_reference(media, data)
        ref: dict[str, Any] = {"attachment_id" if how == "id" else "url": value}
        message = {"attachment": {"type": kind, "payload": ref}}
    else:
        raise ValueError(f"no message type {kind!r} here")
    if data.get("quick_replies"):
        message["quick_replies"] = data["quick_replies"]
    if delivery_id is not None:
        message["metadata"] = delivery_id
    return message


class MessengerClient(GraphApiClient):
    """Sends text and attachments (image, video, audio, file) with quick
    replies through the Messenger Send API, with the budget and outcome rules
    of the Graph API (`GraphApiClient`); `delivery_id` travels as
    `message.metadata`; a `tag` in the producer's data sends with
    `messaging_type` MESSAGE_TAG (outside the 24-hour window), else RESPONSE.
    Code 10 subcode 2018278 (outside the window) fails the message at once,
    its reason saying to send with a tag. `prepare_media` fails for good
    (`PREPARE_REFUSAL`).

    Args:
        api_base, api_version: as for WhatsApp (the Graph API).
        page_id: the sending Page.
        access_token: the Page access token (a secret).
        timeout_ms: the whole send call's budget in ms.
    """

    permanent_codes = PERMANENT_CODES
    rate_limited_codes = RATE_LIMITED_CODES
    window_closed_codes = frozenset({WINDOW_CLOSED})
    window_closed_advice = "Messenger takes a message here only with a message tag (e.g. `tag`: HUMAN_AGENT)"

    def __init__(self, api_base: str, api_version: str, page_id: str, access_token: str, timeout_ms: int) -> None:
        super().__init__(api_base, api_version, page_id, access_token, timeout_ms)

    @staticmethod
    def answer_id(payload: Any) -> str | None:
        """`message_id` of a 2xx answer, or None."""
        mid = payload.get("message_id") if isinstance(payload, dict) else None
        return mid if isinstance(mid, str) and mid else None

    @staticmethod
    def request_body(recipient: str, text: str, delivery_id: str, media: Media | None = None,
                     payload: str | None = None) -> dict[str, Any]:
        """The send call's JSON body (`messaging_type` RESPONSE: a reply
        within the messaging window; MESSAGE_TAG with the data's `tag`).

        Raises:
            ValueError: a kind Messenger has no message for.
        """
        data: dict[str, Any] = json.loads(payload) if payload else {}
        tag = data.get("tag")
        head: dict[str, Any] = {"recipient": {"id": recipient}}
        head.update({"messaging_type": "MESSAGE_TAG", "tag": tag} if tag else {"messaging_type": "RESPONSE"})
        return {**head, "message": _message(text, delivery_id, media, data)}

    def prepare_media(self, kind: str, link: str) -> PrepareResult:
        """Always a permanent failure (`PREPARE_REFUSAL`): nothing is fetched or uploaded."""
        return PrepareResult(error=PREPARE_REFUSAL, permanent=True)


class InstagramClient(MessengerClient):
    """Sends text and attachments with quick replies through Instagram
    messaging (the Messenger shapes, without `messaging_type`, `tag` or
    `metadata`, which it does not document)."""

    window_closed_advice = "Instagram takes no message here until the user writes again"

    @staticmethod
    def request_body(recipient: str, text: str, delivery_id: str, media: Media | None = None,
                     payload: str | None = None) -> dict[str, Any]:
        """The send call's JSON body.

        Raises:
            ValueError: a kind Instagram has no message for.
        """
        data: dict[str, Any] = json.loads(payload) if payload else {}
        return {"recipient": {"id": recipient}, "message": _message(text, None, media, data)}


@dataclass(frozen=True)
class MessagingItem:
    """One `entry[].messaging[]` item, reduced to what baton acts on.

    - `kind`: `delivery`, `read` (receipts: they may ack a message),
      `echo` (our own send coming back), `incoming` (a person wrote to us),
      `other` (reactions, postbacks, ...).
    - `user_id`: the person (PSID or IGSID): `sender.id` of a receipt or an
      incoming message, `recipient.id` of an echo.
    - `watermark_ms`: Messenger receipts only (epoch ms).
    - `mids`: the message ids named (`delivery.mids`, `read.mid`, the echo's `mid`).
    - `metadata`: an echo's `message.metadata` (Messenger echoes the string a
      send put there: baton's delivery id), else None.
    - `timestamp_ms`: the item's `timestamp` (epoch ms, the platform's
      clock; for an echo, when the platform stamped our message), or None.
    """

    provider: str
    kind: str
    user_id: str
    watermark_ms: int | None
    mids: tuple[str, ...]
    metadata: str | None = None
    timestamp_ms: int | None = None


def _str_id(party: Any) -> str:
    value = party.get("id") if isinstance(party, dict) else None
    if not isinstance(value, str | int) or isinstance(value, bool) or not str(value):
        raise ValueError("`sender.id` and `recipient.id` must be ids")
    return str(value)


def _watermark(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("`watermark` must be a whole number of ms")
    return value


def parse_messaging(payload: Any) -> list[MessagingItem]:
    """Every `entry[].messaging[]` item of a Messenger (`object` = `page`) or
    Instagram (`instagram`) webhook, in payload order.

    Raises:
        ValueError: not such a webhook, or an item of a known kind with the
            wrong shape (a watermark that is not a number, a mid that is not
            a string, an item without sender and recipient ids).
    """
    if not isinstance(payload, dict) or payload.get("object") not in ("page", "instagram"):
        raise ValueError("expected `object` = `page` or `instagram`")
    provider = WEBHOOK_OBJECTS[payload["object"]]
    if not isinstance(payload.get("entry"), list):
        raise ValueError("expected an `entry` list")
    out: list[MessagingItem] = []
    for entry in payload["entry"]:
        items = entry.get("messaging", []) if isinstance(entry, dict) else None
        if not isinstance(items, list):
            raise ValueError("`entry[]` items must be objects with a `messaging` list")
        for item in items:
            if not isinstance(item, dict):
                raise ValueError("`messaging[]` items must be objects")
            sender, recipient = _str_id(item.get("sender")), _str_id(item.get("recipient"))
            if isinstance(item.get("delivery"), dict):
                d = item["delivery"]
                mids = d.get("mids") or []
                if not isinstance(mids, list) or not all(isinstance(m, str) for m in mids):
                    raise ValueError("`delivery.mids` must be a list of strings")
                out.append(MessagingItem(provider, "delivery", sender, _watermark(d.get("watermark")), tuple(mids)))
            elif isinstance(item.get("read"), dict):
                r = item["read"]
                mid = r.get("mid")
                if mid is not None and not isinstance(mid, str):
                    raise ValueError("`read.mid` must be a string")
                watermark = _watermark(r["watermark"]) if "watermark" in r else None
                if mid is None and watermark is None:
                    raise ValueError("`read` needs `watermark` or `mid`")
                out.append(MessagingItem(provider, "read", sender, watermark, (mid,) if mid else ()))
            elif isinstance(item.get("message"), dict):
                m = item["message"]
                mid = m.get("mid")
                mids = (mid,) if isinstance(mid, str) else ()
                if m.get("is_echo"):
                    metadata = m.get("metadata") if isinstance(m.get("metadata"), str) else None
                    ts = item.get("timestamp")
                    stamp = ts if isinstance(ts, int) and not isinstance(ts, bool) and ts >= 0 else None
                    out.append(MessagingItem(provider, "echo", recipient, None, mids, metadata, stamp))
                else:
                    out.append(MessagingItem(provider, "incoming", sender, None, mids))
            else:
                out.append(MessagingItem(provider, "other", sender, None, ()))
    return out


# The webhook field of a `messaging[]` item, by its key
# (https://developers.facebook.com/docs/messenger-platform/webhooks#event-notifications).
_ITEM_FIELDS = {"message": "messages", "reaction": "message_reactions", "postback": "messaging_postbacks",
                "optin": "messaging_optins", "referral": "messaging_referrals", "account_linking":
                "messaging_account_linking", "pass_thread_control": "messaging_handovers",
                "take_thread_control": "messaging_handovers", "policy_enforcement": "messaging_policy_enforcement"}
_ENVELOPE_KEYS = frozenset({"sender", "recipient", "timestamp"})


def _item_field(item: dict[str, Any]) -> str:
    for key in item:
        if key in _ITEM_FIELDS:
            return _ITEM_FIELDS[key]
    rest = [k for k in item if k not in _ENVELOPE_KEYS]
    return rest[0] if rest else "unknown"


def inbound_items(payload: Any) -> list[InboundItem]:
    """What baton does not consume in a Messenger (`page`) or Instagram
    (`instagram`) webhook, in payload order: every `messaging[]` item but
    receipts (`delivery`, `read`) and echoes of sends (`message.is_echo`),
    i.e. messages people wrote, reactions, postbacks, optins, referrals, ...
    (user = `sender.id`); every `changes[]` item (Instagram comments and
    mentions, Page feed: user = `value.from.id` when there is one); and the
    items of any other list of an entry (`standby`, ...).

    Raises:
        ValueError: not such a webhook (parse_messaging's checks).
    """
    if not isinstance(payload, dict) or payload.get("object") not in ("page", "instagram"):
        raise ValueError("expected `object` = `page` or `instagram`")
    obj = payload["object"]
    provider = WEBHOOK_OBJECTS[obj]
    if not isinstance(payload.get("entry"), list):
        raise ValueError("expected an `entry` list")
    out: list[InboundItem] = []
    for entry in payload["entry"]:
        if not isinstance(entry, dict):
            raise ValueError("`entry[]` items must be objects")
        account = str(entry.get("id") or "")
        for key, items in entry.items():
            if key in ("id", "time") or not isinstance(items, list):
                continue
            for item in items:
                if not isinstance(item, dict):
                    raise ValueError(f"`{key}[]` items must be objects")
                if key == "changes":
                    value = item.get("value")
                    who = value.get("from") if isinstance(value, dict) else None
                    user = who.get("id") if isinstance(who, dict) else None
                    out.append(InboundItem(provider, obj, str(item.get("field") or "unknown"), account,
                                           None if user is None else str(user)))
                    continue
                message = item.get("message")
                if key == "messaging" and (isinstance(item.get("delivery"), dict) or isinstance(item.get("read"), dict)
                                           or (isinstance(message, dict) and message.get("is_echo"))):
                    continue  # a receipt or an echo: baton's (parse_messaging)
                sender = item.get("sender")
                user = sender.get("id") if isinstance(sender, dict) else None
                out.append(InboundItem(provider, obj, _item_field(item) if key == "messaging" else key, account,
                                       None if user is None else str(user)))
    return out
