"""WhatsApp Cloud API adapter: the send call, the media upload, the signed status webhook.

Wire format, from Meta's documentation:
- Send: `POST {base}/{version}/{phone-number-id}/messages`, bearer token, JSON
  `{"messaging_product": "whatsapp", "recipient_type": "individual", "to",
  "type": "text", "text": {"body"}, "biz_opaque_callback_data"}`; the answer's
  `messages[0].id` is the `wamid`
  (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages).
  An image: `"type": "image", "image": {"id": MEDIA-ID, "caption"}` (an
  uploaded file) or `"image": {"link": URL, "caption"}` (WhatsApp fetches it);
  caption at most 1024 characters
  (https://developers.facebook.com/docs/whatsapp/cloud-api/messages/image-messages).
  An unknown media id is refused with HTTP 400, code 100, "(#100) Param
  image.id is not a valid whatsapp business account media attachment ID".
  Every other kind names its object after its `type`, as in that reference:
  `video`, `document` (`caption`, `filename`), `audio` and `sticker` (no
  caption) like an image; `location` (`latitude`, `longitude`, `name`,
  `address`); `contacts` (a list of contact objects); `interactive` (`type`
  `button` or `list`, `header`, `body`, `footer`, `action`,
  https://developers.facebook.com/docs/whatsapp/cloud-api/messages/interactive-reply-buttons-messages
  and .../interactive-list-messages); `reaction` (`message_id`, `emoji`); and
  `template` (`name`, `language.code`, `components` with `parameters`,
  https://developers.facebook.com/docs/whatsapp/cloud-api/guides/send-message-templates),
  the only kind WhatsApp delivers outside the 24-hour customer service window
  (any other is refused there with 131047,
  https://developers.facebook.com/docs/whatsapp/cloud-api/guides/send-messages#customer-service-windows).
- Media upload: `POST {base}/{version}/{phone-number-id}/media`, bearer token,
  multipart form `messaging_product=whatsapp`, `type=<MIME>`, `file`; the
  answer is `{"id": MEDIA-ID}`, usable by that phone number only, for 30 days.
  Images: `image/jpeg` and `image/png`, at most 5 MB
  (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media,
  "Supported Media Types"). A type it does not take is refused with HTTP 400,
  code 100, "(#100) Param file must be a file with one of the following types: ...".
- Errors: HTTP 4xx/5xx with `{"error": {"code", "message", "error_data":
  {"details"}}}` (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
- Status webhooks: `entry[].changes[].value.statuses[]` with `id`, `status`
  (`sent`, `delivered`, `read`, `failed`), `timestamp`, `recipient_id`,
  `biz_opaque_callback_data`, `errors[]`; signed with `X-Hub-Signature-256:
  sha256=<hex HMAC-SHA256 of the raw body, keyed by the app secret>`
  (https://developers.facebook.com/docs/graph-api/webhooks/getting-started).
"""

from __future__ import annotations

import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import requests

from shared.providers.base import InboundItem, Media, PrepareResult, media_reference
from shared.providers.graph import (
    MAX_ANSWER_BYTES,
    MIN_TRY_S,
    GraphApiClient,
    _AnswerUnreadable,
    _clip,
    _graph_error,
    session_without_retries,
)

# Meta's webhook signatures and handshake, and the transport's connection rule,
# live in graph.py (every Graph API platform shares them); named here too.
from shared.providers.graph import handshake_challenge as handshake_challenge
from shared.providers.graph import never_connected as never_connected
from shared.providers.graph import sign as sign
from shared.providers.graph import signature_valid as signature_valid

# Error codes after which sending the same message again cannot succeed.
# 131026 undeliverable, 131047 outside the 24 h customer-service window,
# 131051 unsupported message type, 100/131008/131009 invalid parameters.
PERMANENT_ERROR_CODES = frozenset({100, 131008, 131009, 131026, 131047, 131051})
# 131056 pair rate limit: Meta asks for a wait of 4^n s before the n-th retry
# (the room's rules apply it, not this adapter).
PAIR_RATE_LIMIT = 131056
# Media WhatsApp takes, by message type: the MIME types of the file and its
# largest size in bytes (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media,
# "Supported Media Types": images JPEG or PNG, 5 MB; video MP4 or 3GPP, 16 MB;
# audio AAC, AMR, MP3, MP4 audio or OGG (opus), 16 MB; documents text, PDF
# and Office files, 100 MB; stickers WebP, 500 KB animated).
MEDIA_TYPES: dict[str, frozenset[str]] = {
    "image": frozenset({"image/jpeg", "image/png"}),
    "video": frozenset({"video/mp4", "video/3gpp"}),
    "audio": frozenset({"audio/aac", "audio/amr", "audio/mpeg", "audio/mp4", "audio/ogg"}),
    "document": frozenset({"text/plain", "application/pdf", "application/msword", "application/vnd.ms-excel",
                           "application/vnd.ms-powerpoint",
                           "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
                           "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
                           "application/vnd.openxmlformats-officedocument.presentationml.presentation"}),
    "sticker": frozenset({"image/webp"}),
}
MEDIA_LIMIT_BYTES = {"image": 5 * 1024 * 1024, "video": 16 * 1024 * 1024, "audio": 16 * 1024 * 1024,
                     "document": 100 * 1024 * 1024, "sticker": 500 * 1024}
MEDIA_EXTENSIONS = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp", "video/mp4": ".mp4",
                    "audio/mpeg": ".mp3", "audio/ogg": ".ogg", "application/pdf": ".pdf", "text/plain": ".txt"}
# The kinds whose object carries a caption (audio and stickers have none).
CAPTIONED = frozenset({"image", "video", "document"})
# (code, subcode) of "outside the 24-hour customer service window": 131047
# (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
WINDOW_CLOSED = 131047
# Graph error codes of an upload refusal that a later try may get past:
# 130429 Cloud API throughput reached, 4 the app's call rate, 80007 the
# WhatsApp Business Account's rate limit, 2 service temporarily unavailable
# (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
# Every other 4xx refusal of an upload is permanent.
UPLOAD_TRANSIENT_CODES = frozenset({2, 4, 80007, 130429})
# Defaults of the media settings (shared/config.py: MEDIA_MAX_BYTES, MEDIA_TIMEOUT_MS).
DEFAULT_MEDIA_MAX_BYTES = 5 * 1024 * 1024
DEFAULT_MEDIA_TIMEOUT_MS = 20000


@dataclass(frozen=True)
class PlatformStatus:
    """One entry of `value.statuses[]`. `timestamp_s` is Meta's, in seconds."""

    provider_message_id: str
    status: str
    recipient_id: str | None
    timestamp_s: int | None
    callback_data: str | None
    error_code: int | None
    error_title: str | None
    phone_number_id: str | None = None  # `value.metadata.phone_number_id`: the number it was sent from


class WhatsAppClient(GraphApiClient):
    """Sends text and image messages through the Cloud API
    (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages),
    and prepares images: fetches a file and uploads it to the media endpoint
    (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media).
    Both a `Sender` and a `Preparer` (shared/providers/base.py).

    Args:
        api_base: e.g. `https://graph.facebook.com` (the fake platform locally).
        api_version: e.g. `v21.0`.
        phone_number_id: the sending number's id (media uploaded with it can
            be sent by it only).
        access_token: the bearer token (a secret). It goes to `api_base`
            only, never to a media link.
        timeout_ms: the whole send call's budget in ms, reconnects included;
            keep it well below the ack timeout (`GraphApiClient` says how
            the budget bounds a call).
        media_max_bytes: the largest media file `prepare_media` fetches and
            uploads, in bytes (MEDIA_MAX_BYTES; WhatsApp's images: 5 MB).
        media_timeout_ms: one `prepare_media` call's whole budget in ms, the
            fetch and the upload together (MEDIA_TIMEOUT_MS).

    Sends (`GraphApiClient.send`): ACCEPTED on HTTP 2xx with `messages[0].id`
    (the wamid); REFUSED on a Graph error 4xx (`permanent` for
    `PERMANENT_ERROR_CODES`, among them 100, which an unknown media id gets;
    `rate_limited` for 131056,
    https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes);
    UNKNOWN on 5xx or anything after the request may have been written.
    """

    permanent_codes: frozenset[int] = PERMANENT_ERROR_CODES
    rate_limited_codes: frozenset[int] = frozenset({PAIR_RATE_LIMIT})
    window_closed_codes = frozenset({(WINDOW_CLOSED, None)})
    window_closed_advice = "only a template reaches this user now (error 131047); send one"

    def __init__(self, api_base: str, api_version: str, phone_number_id: str, access_token: str,
                 timeout_ms: int, *, media_max_bytes: int = DEFAULT_MEDIA_MAX_BYTES,
                 media_timeout_ms: int = DEFAULT_MEDIA_TIMEOUT_MS) -> None:
        super().__init__(api_base, api_version, phone_number_id, access_token, timeout_ms)
        self._media_url = f"{self._node_url}/media"
        self._media_budget_s = media_timeout_ms / 1000
        self._media_max_bytes = media_max_bytes
        # Media links are fetched with a session of their own: no bearer token.
        self._fetch_session = session_without_retries()

    @staticmethod
    def answer_id(payload: Any) -> str | None:
        """The platform's message id in a 2xx answer (`messages[0].id`, the wamid), or None."""
        try:
            wamid = payload["messages"][0]["id"]
        except (KeyError, IndexError, TypeError):
            return None
        return wamid if isinstance(wamid, str) and wamid else None

    @staticmethod
    def request_body(recipient: str, text: str, delivery_id: str, media: Media | None = None,
                     payload: str | None = None) -> dict[str, Any]:
        """The send call's JSON body (the module's wire formats). Without
        `payload`: a text message, or with `media` a message of type
        `media.kind` by `media.media_id` (an uploaded file) or else by
        `media.link`, `text` as its caption when not empty. With `payload`
        (the producer's `data`, shared/contract): a message of its `type`,
        built from it; a prepared `media.media_id` replaces its link.

        Raises:
            ValueError, KeyError: a message this module cannot build (a
                contract-valid `data` never is one).
        """
        data: dict[str, Any] = json.loads(payload) if payload else {}
        kind = data.get("type") or (media.kind if media is not None else "text")
        body: dict[str, Any] = {"messaging_product": "whatsapp", "recipient_type": "individual", "to": recipient,
                                "type": kind}
        if kind == "text":
            body["text"] = {"preview_url": bool(data.get("preview_url", False)), "body": text}
        elif kind in MEDIA_TYPES:
            how, value = media_reference(media, data)
            obj: dict[str, Any] = {how: value}
            if text and kind in CAPTIONED:
                obj["caption"] = text
            if kind == "document" and data.get("filename"):
                obj["filename"] = data["filename"]
            body[kind] = obj
        elif kind == "location":
            body["location"] = {k: data[k] for k in ("latitude", "longitude", "name", "address") if k in data}
        elif kind == "reaction":
            body["reaction"] = {"message_id": data["message_id"], "emoji": data["emoji"]}
        elif kind in ("contacts", "interactive", "template"):
            body[kind] = data[kind]
        else:
            raise ValueError(f"WhatsApp has no message type {kind!r}")
        body["biz_opaque_callback_data"] = delivery_id
        return body

    def prepare_media(self, kind: str, link: str) -> PrepareResult:
        """Fetch the file at `link` and upload it to WhatsApp's media
        endpoint, within `media_timeout_ms` in all; returns its media id.
        Never raises for platform or network errors.

        1. Fetch: `GET link` (redirects followed, no bearer token), streamed,
           at most `media_max_bytes` bytes (a larger `Content-Length` is
           refused before reading). Its MIME type is the answer's
           `Content-Type`, which must be one WhatsApp takes for `kind`
           (`MEDIA_TYPES`: images `image/jpeg`, `image/png`).
        2. Upload: `POST {base}/{version}/{phone-number-id}/media`, multipart
           `messaging_product=whatsapp`, `type=<MIME>`, `file`; the answer's
           `id` is the media id. Only a connection never opened is tried again
           within the call (an upload twice makes an unused media id at worst).

        Returns a `PrepareResult`:
        - `media_id` set: the upload's `id`;
        - `permanent` (trying again cannot help): `kind` not supported, a
          link that is not an http(s) URL, the fetch answered 404, 410 or any
          other 4xx but 408 and 429, a file larger than `media_max_bytes`, an
          empty file, a MIME type WhatsApp does not take for `kind`, an upload
          refused with a Graph error 4xx whose code is not in
          `UPLOAD_TRANSIENT_CODES`;
        - transient otherwise: connection errors, timeouts and answers cut off
          (fetch or upload), fetch 408, 429 or 5xx, upload 429, 5xx or a
          throughput/rate code (130429, 4, 80007, 2), a 2xx upload answer
          without an `id`, the budget spent.
        `error` says which, with the platform's message where there is one.
        """
        deadline = time.monotonic() + self._media_budget_s
        if kind not in MEDIA_TYPES:
            return _prep_failed(f"media kind {kind!r} is not supported (only {', '.join(sorted(MEDIA_TYPES))})",
                                permanent=True)
        if not isinstance(link, str) or not link.lower().startswith(("http://", "https://")):
            return _prep_failed(f"media link {link!r} is not an http(s) URL", permanent=True)
        fetched = self._fetch(kind, link, deadline)
        if isinstance(fetched, PrepareResult):
            return fetched
        mime, data = fetched
        if deadline - time.monotonic() < MIN_TRY_S:
            return _prep_failed("the media budget was spent before the upload")
        return self._upload(link, mime, data, deadline)

    def _fetch(self, kind: str, link: str, deadline: float) -> tuple[str, bytes] | PrepareResult:
        """(MIME type, bytes) of the file at `link`, or why not (`prepare_media`'s rules)."""
        try:
            resp = self._open(self._fetch_session, "GET", link, deadline, allow_redirects=True)
        except (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                requests.exceptions.InvalidSchema) as exc:
            return _prep_failed(f"media link not usable: {type(exc).__name__}: {exc}", permanent=True)
        except requests.RequestException as exc:
            return _prep_failed(f"fetching the media failed: {type(exc).__name__}: {exc}")
        try:
            status = resp.status_code
            if not 200 <= status < 300:
                permanent = 400 <= status < 500 and status not in (408, 429)
                return _prep_failed(f"fetching the media: HTTP {status}", permanent=permanent)
            mime = (resp.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
            if mime not in MEDIA_TYPES[kind]:
                return _prep_failed(f"media type {mime or 'missing'!r} is not one WhatsApp takes for {kind} "
                                    f"({', '.join(sorted(MEDIA_TYPES[kind]))})", permanent=True)
            # WhatsApp's own limit for the kind, or MEDIA_MAX_BYTES if lower.
            limit = min(self._media_max_bytes, MEDIA_LIMIT_BYTES.get(kind, self._media_max_bytes))
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > limit:
                return _prep_failed(f"media too large: {length} bytes, at most {limit}", permanent=True)
            try:
                data = self._read(resp, deadline, limit)
            except _AnswerUnreadable as exc:
                if exc.too_long:
                    return _prep_failed(f"media too large: more than {limit} bytes", permanent=True)
                return _prep_failed(f"fetching the media: {exc}")
        finally:
            resp.close()
        if not data:
            return _prep_failed("the media file is empty", permanent=True)
        return mime, data

    def _upload(self, link: str, mime: str, data: bytes, deadline: float) -> PrepareResult:
        """Upload `data` of type `mime` to the media endpoint (`prepare_media`'s rules)."""
        name = urllib.parse.urlsplit(link).path.rsplit("/", 1)[-1] or f"media{MEDIA_EXTENSIONS.get(mime, '')}"
        try:
            resp = self._open(self._session, "POST", self._media_url, deadline,
                              data={"messaging_product": "whatsapp", "type": mime}, files={"file": (name, data, mime)})
            raw = self._read(resp, deadline, MAX_ANSWER_BYTES)
        except requests.RequestException as exc:
            return _prep_failed(f"uploading the media failed: {type(exc).__name__}: {exc}")
        except _AnswerUnreadable as exc:
            return _prep_failed(f"uploading the media: {exc}")
        try:
            payload = json.loads(raw)
        except ValueError:
            payload = None
        status = resp.status_code
        if 200 <= status < 300:
            media_id = payload.get("id") if isinstance(payload, dict) else None
            if isinstance(media_id, str | int) and not isinstance(media_id, bool) and str(media_id):
                return PrepareResult(media_id=str(media_id))
            return _prep_failed(f"uploading the media: HTTP {status} without a media id")
        code, title = _graph_error(payload, status)
        label = f"uploading the media: HTTP {status}" + (f", error {code}" if code is not None else "") + f": {title}"
        permanent = 400 <= status < 500 and status != 429 and code not in UPLOAD_TRANSIENT_CODES
        return _prep_failed(label, permanent=permanent)


def _prep_failed(error: str, permanent: bool = False) -> PrepareResult:
    return PrepareResult(error=_clip(error), permanent=permanent)


def parse_statuses(payload: Any) -> list[PlatformStatus]:
    """Every status in a webhook payload, in payload order. What else a
    payload holds (inbound messages, other fields) is `inbound_items`'.

    Raises:
        ValueError: the payload is not a WhatsApp Business Account webhook.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("entry"), list):
        raise ValueError("expected an object with an `entry` list")
    out: list[PlatformStatus] = []
    for entry in payload["entry"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("changes", []), list):
            raise ValueError("`entry[]` items must be objects with a `changes` list")
        for change in entry.get("changes", []):
            value = change.get("value") if isinstance(change, dict) else None
            if not isinstance(value, dict):
                raise ValueError("`changes[].value` must be an object")
            metadata = value.get("metadata")
            number = metadata.get("phone_number_id") if isinstance(metadata, dict) else None
            statuses = value.get("statuses", [])
            if not isinstance(statuses, list):
                raise ValueError("`value.statuses` must be a list")
            for st in statuses:
                if not (isinstance(st, dict) and isinstance(st.get("id"), str) and isinstance(st.get("status"), str)):
                    raise ValueError("each status needs string `id` and `status`")
                errors = st.get("errors") or [{}]
                first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
                code = first.get("code")
                ts = st.get("timestamp")
                out.append(
                    PlatformStatus(
                        provider_message_id=st["id"],
                        status=st["status"],
                        recipient_id=st.get("recipient_id"),
                        timestamp_s=int(ts) if isinstance(ts, str | int) and str(ts).isdigit() else None,
                        callback_data=st.get("biz_opaque_callback_data"),
                        error_code=int(code) if isinstance(code, int) else None,
                        error_title=first.get("title") or first.get("message"),
                        phone_number_id=number if isinstance(number, str) else None,
                    )
                )
    return out


# `value` keys of a `messages` change that baton consumes or that only
# describe it: a change with nothing else is not forwarded.
_CONSUMED_VALUE_KEYS = frozenset({"messaging_product", "metadata", "statuses", "contacts"})


def inbound_items(payload: Any) -> list[InboundItem]:
    """What baton does not consume in a WhatsApp webhook, in payload order:
    each message a person sent (`value.messages[]`: text, reactions,
    button replies, media, ...: user = `from`), and each change of another
    `field` (`account_update`, `message_template_status_update`, ...) or
    with other content (`value.errors`): one item each, user None. A change
    of statuses only yields nothing (parse_statuses takes those).

    Raises:
        ValueError: not a WhatsApp Business Account webhook (parse_statuses' checks).
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("entry"), list):
        raise ValueError("expected an object with an `entry` list")
    out: list[InboundItem] = []
    obj = str(payload.get("object") or "whatsapp_business_account")
    for entry in payload["entry"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("changes", []), list):
            raise ValueError("`entry[]` items must be objects with a `changes` list")
        account = str(entry.get("id") or "")
        for change in entry.get("changes", []):
            if not isinstance(change, dict):
                raise ValueError("`changes[]` items must be objects")
            field = str(change.get("field") or "")
            value = change.get("value")
            if field != "messages":
                out.append(InboundItem("whatsapp", obj, field or "unknown", account, None))
                continue
            if not isinstance(value, dict):
                raise ValueError("`changes[].value` must be an object")
            messages = value.get("messages", [])
            for m in messages if isinstance(messages, list) else [messages]:
                sender = m.get("from") if isinstance(m, dict) else None
                out.append(InboundItem("whatsapp", obj, field, account, sender if isinstance(sender, str) else None))
            if set(value) - _CONSUMED_VALUE_KEYS - {"messages"}:
                out.append(InboundItem("whatsapp", obj, field, account, None))
    return out
