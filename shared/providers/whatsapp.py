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

import hashlib
import hmac
import http.client
import json
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any, Literal

import requests
import urllib3.exceptions
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_any, wait_exponential
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from shared.providers.base import Media, PrepareResult, SendOutcome, SendResult

# Error codes after which sending the same message again cannot succeed.
# 131026 undeliverable, 131047 outside the 24 h customer-service window,
# 131051 unsupported message type, 100/131008/131009 invalid parameters.
PERMANENT_ERROR_CODES = frozenset({100, 131008, 131009, 131026, 131047, 131051})
# 131056 pair rate limit: Meta asks for a wait of 4^n s before the n-th retry
# (the room's rules apply it, not this adapter).
PAIR_RATE_LIMIT = 131056
# Tries of one send call when the connection cannot be opened (the only case
# retried inside the call), and the waits between them: 50 ms, then 100 ms.
CONNECT_TRIES = 3
CONNECT_RETRY_WAIT = wait_exponential(multiplier=0.05, min=0.05, max=0.2)
# A try with less of the budget left than this (s) is not started.
MIN_TRY_S = 0.02
# The largest answer body read, in bytes (Meta answers a send in a few hundred).
MAX_ANSWER_BYTES = 65536
# Media WhatsApp takes, by message type: the MIME types of the file
# (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media,
# "Supported Media Types": images are JPEG or PNG, 8-bit RGB or RGBA, 5 MB).
MEDIA_TYPES: dict[str, frozenset[str]] = {"image": frozenset({"image/jpeg", "image/png"})}
MEDIA_EXTENSIONS = {"image/jpeg": ".jpg", "image/png": ".png"}
# Graph error codes of an upload refusal that a later try may get past:
# 130429 Cloud API throughput reached, 4 the app's call rate, 80007 the
# WhatsApp Business Account's rate limit, 2 service temporarily unavailable
# (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
# Every other 4xx refusal of an upload is permanent.
UPLOAD_TRANSIENT_CODES = frozenset({2, 4, 80007, 130429})
# Defaults of the media settings (shared/config.py: MEDIA_MAX_BYTES, MEDIA_TIMEOUT_MS).
DEFAULT_MEDIA_MAX_BYTES = 5 * 1024 * 1024
DEFAULT_MEDIA_TIMEOUT_MS = 20000


def never_connected(exc: BaseException) -> bool:
    """Whether a request failed before a connection was open, so no byte of it
    reached the platform: connection refused, DNS failure, connect timeout
    (urllib3's NewConnectionError / ConnectTimeoutError, which requests wraps
    in ConnectionError / ConnectTimeout). Everything else, a failed TLS
    handshake included, counts as possibly sent."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError):
        return False
    reason = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return isinstance(reason, NewConnectionError | ConnectTimeoutError)


class _AnswerUnreadable(Exception):
    """The status line came, but not the whole body within the budget and size
    (`too_long`: the body was longer than allowed)."""

    def __init__(self, status: int, why: str, too_long: bool = False) -> None:
        super().__init__(f"HTTP {status} answer {why}")
        self.status = status
        self.too_long = too_long


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


class WhatsAppClient:
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
            keep it well below the ack timeout.
        media_max_bytes: the largest media file `prepare_media` fetches and
            uploads, in bytes (MEDIA_MAX_BYTES; WhatsApp's images: 5 MB).
        media_timeout_ms: one `prepare_media` call's whole budget in ms, the
            fetch and the upload together (MEDIA_TIMEOUT_MS).

    How the budget bounds a call: each try gets what is left of the budget as
    its connect timeout and as its read timeout, and no try or wait starts
    once it is spent. requests' read timeout bounds each socket read, not the
    whole answer, so a platform trickling bytes could stretch a call: the
    answer body is read in chunks with the deadline checked between them (and
    at most `MAX_ANSWER_BYTES`), which bounds the body to the budget plus one
    read; only a status line and headers trickled a byte at a time could
    last longer (Meta answers a send in one short JSON body). What bounds even
    that is the calling function's own request timeout; and since a message's
    ack deadline counts from when its send call returned, a long call delays
    only its own room and cannot cut a message's ack wait short.
    """

    # What the platform's error codes mean for a retry (subclasses for the
    # other Graph API messaging platforms set their own).
    permanent_codes: frozenset[int] = PERMANENT_ERROR_CODES
    rate_limited_codes: frozenset[int] = frozenset({PAIR_RATE_LIMIT})

    def __init__(self, api_base: str, api_version: str, phone_number_id: str, access_token: str,
                 timeout_ms: int, *, media_max_bytes: int = DEFAULT_MEDIA_MAX_BYTES,
                 media_timeout_ms: int = DEFAULT_MEDIA_TIMEOUT_MS) -> None:
        self._url = f"{api_base.rstrip('/')}/{api_version}/{phone_number_id}/messages"
        self._media_url = f"{api_base.rstrip('/')}/{api_version}/{phone_number_id}/media"
        self._budget_s = timeout_ms / 1000
        self._media_budget_s = media_timeout_ms / 1000
        self._media_max_bytes = media_max_bytes
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {access_token}"
        # Media links are fetched with a session of their own: no bearer token.
        self._fetch_session = requests.Session()
        for session in (self._session, self._fetch_session):
            # max_retries=0: urllib3 must not resend anything on its own.
            adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32, max_retries=0)
            session.mount("http://", adapter)
            session.mount("https://", adapter)

    @staticmethod
    def answer_id(payload: Any) -> str | None:
        """The platform's message id in a 2xx answer (`messages[0].id`, the wamid), or None."""
        try:
            wamid = payload["messages"][0]["id"]
        except (KeyError, IndexError, TypeError):
            return None
        return wamid if isinstance(wamid, str) and wamid else None

    @staticmethod
    def request_body(recipient: str, text: str, delivery_id: str, media: Media | None = None) -> dict[str, Any]:
        """The send call's JSON body: a text message, or with `media` a
        message of type `media.kind` (`image`) by `media.media_id` (an
        uploaded file) or else by `media.link`, `text` as its caption when
        not empty.

        Raises:
            ValueError: `media` has neither a media id nor a link.
        """
        body: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": recipient,
        }
        if media is None:
            body["type"] = "text"
            body["text"] = {"preview_url": False, "body": text}
        else:
            if media.media_id:
                obj: dict[str, Any] = {"id": media.media_id}
            elif media.link:
                obj = {"link": media.link}
            else:
                raise ValueError("a media message needs a media id or a link")
            if text:
                obj["caption"] = text
            body["type"] = media.kind
            body[media.kind] = obj
        body["biz_opaque_callback_data"] = delivery_id
        return body

    def _open(self, session: requests.Session, method: Literal["GET", "POST"], url: str, deadline: float, *,
              allow_redirects: bool = False, **kwargs: Any) -> requests.Response:
        """Start one request before `deadline` (time.monotonic() s) and return
        its streamed response (status and headers read, body not yet).

        Retried (tenacity, at most `CONNECT_TRIES` tries) only when the
        connection could never be opened: such a request provably never
        reached the server, so trying again cannot duplicate it. Nothing else
        is retried here.

        Raises:
            requests.RequestException: the last try's failure.
        """

        def left_s() -> float:
            return deadline - time.monotonic()

        def budget_spent(state: RetryCallState) -> bool:
            return left_s() < MIN_TRY_S

        def wait_s(state: RetryCallState) -> float:
            return max(0.0, min(CONNECT_RETRY_WAIT(state), left_s() - MIN_TRY_S))

        def one_try() -> requests.Response:
            left = left_s()
            if left <= 0:
                raise requests.ConnectTimeout("the call's budget was spent before a connection was open")
            call = session.post if method == "POST" else session.get
            return call(url, timeout=(left, left), stream=True, allow_redirects=allow_redirects, **kwargs)

        retrying = Retrying(retry=retry_if_exception(never_connected), wait=wait_s,
                            stop=stop_any(stop_after_attempt(CONNECT_TRIES), budget_spent), reraise=True)
        return retrying(one_try)

    @staticmethod
    def _read(resp: requests.Response, deadline: float, limit: int) -> bytes:
        """The whole body of `resp`, read by `deadline` (time.monotonic() s),
        at most `limit` bytes; closes the response.

        Raises:
            _AnswerUnreadable: longer than `limit` (`too_long`), not read by
                the deadline, or cut off.
        """
        # read1 returns what one socket read brings (iter_content would block
        # until a whole chunk came), so the deadline is checked after each read.
        read = getattr(resp.raw, "read1", None) or resp.raw.read  # read1: urllib3 >= 2.3
        try:
            raw = bytearray()
            while chunk := read(65536, decode_content=True):
                raw += chunk
                if len(raw) > limit:
                    raise _AnswerUnreadable(resp.status_code, f"longer than {limit} bytes", too_long=True)
                if time.monotonic() > deadline:
                    raise _AnswerUnreadable(resp.status_code, "not read within the budget")
            resp.raw.release_conn()  # read to the end: the connection can serve the next call
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            raise _AnswerUnreadable(resp.status_code, f"cut off: {type(exc).__name__}: {exc}") from exc
        finally:
            resp.close()
        return bytes(raw)

    def _post(self, body: dict[str, Any]) -> tuple[int, Any]:
        """POST a send within the budget; returns the HTTP status and the
        decoded JSON answer (None when it is not JSON). Only a connection that
        was never opened is tried again (`_open`).

        Raises:
            requests.RequestException: the last try's failure.
            _AnswerUnreadable: a status came, its body not within the budget.
        """
        deadline = time.monotonic() + self._budget_s
        resp = self._open(self._session, "POST", self._url, deadline, json=body)
        raw = self._read(resp, deadline, MAX_ANSWER_BYTES)
        try:
            return resp.status_code, json.loads(raw)
        except ValueError:
            return resp.status_code, None

    def send(self, recipient: str, text: str, delivery_id: str, media: Media | None = None) -> SendResult:
        """Send one message, within `timeout_ms`: a text, or with `media` an
        image by media id or by link (`text` its caption, when not empty).
        Never raises for platform or network errors:

        - ACCEPTED: HTTP 2xx with `messages[0].id` (the wamid);
        - REFUSED (provably not sent): a Graph error answer, HTTP 4xx
          (`permanent` for `PERMANENT_ERROR_CODES`, among them 100, which an
          unknown media id gets; `rate_limited` for 131056;
          https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes),
          no connection could be opened within the budget (transient), or a
          `media` without id or link (permanent, nothing was called);
        - UNKNOWN (possibly sent): anything after the request may have been
          written (read timeout, connection reset or dropped, an answer cut
          off), HTTP 5xx, or 2xx without an id. `error_title` says why.
        """
        try:
            body = self.request_body(recipient, text, delivery_id, media)
        except ValueError as exc:
            return SendResult(SendOutcome.REFUSED, permanent=True, error_title=str(exc))
        try:
            status, payload = self._post(body)
        except requests.RequestException as exc:
            if never_connected(exc):
                return SendResult(SendOutcome.REFUSED,
                                  error_title=_clip(f"no connection could be opened: {type(exc).__name__}: {exc}"))
            return SendResult(SendOutcome.UNKNOWN,
                              error_title=_clip(f"possibly sent, no answer: {type(exc).__name__}: {exc}"))
        except _AnswerUnreadable as exc:
            if 400 <= exc.status < 500:
                return SendResult(SendOutcome.REFUSED, error_title=_clip(str(exc)))
            return SendResult(SendOutcome.UNKNOWN, error_title=_clip(f"possibly sent: {exc}"))
        if 200 <= status < 300:
            wamid = self.answer_id(payload)
            if wamid is not None:
                return SendResult(SendOutcome.ACCEPTED, provider_message_id=wamid)
            return SendResult(SendOutcome.UNKNOWN, error_title=f"possibly sent: HTTP {status} without a message id")
        code, title = _graph_error(payload, status)
        if 400 <= status < 500:
            return SendResult(SendOutcome.REFUSED, permanent=code in self.permanent_codes,
                              rate_limited=code in self.rate_limited_codes, error_code=code, error_title=title)
        # 5xx (and any other status): the platform may have sent it before failing.
        return SendResult(SendOutcome.UNKNOWN, error_code=code,
                          error_title=_clip(f"possibly sent: HTTP {status}: {title}"))

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
            length = resp.headers.get("Content-Length")
            if length and length.isdigit() and int(length) > self._media_max_bytes:
                return _prep_failed(f"media too large: {length} bytes, at most {self._media_max_bytes}",
                                    permanent=True)
            try:
                data = self._read(resp, deadline, self._media_max_bytes)
            except _AnswerUnreadable as exc:
                if exc.too_long:
                    return _prep_failed(f"media too large: more than {self._media_max_bytes} bytes", permanent=True)
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


def _graph_error(payload: Any, status: int) -> tuple[int | None, str]:
    """(code, message) of a Graph error answer `{"error": {"code", "message"}}`;
    the message falls back to `HTTP {status}`."""
    error = payload.get("error") if isinstance(payload, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    code = int(code) if isinstance(code, int | str) and not isinstance(code, bool) and str(code).isdigit() else None
    title = _clip(str((error.get("message") if isinstance(error, dict) else None) or f"HTTP {status}"))
    return code, title


def _prep_failed(error: str, permanent: bool = False) -> PrepareResult:
    return PrepareResult(error=_clip(error), permanent=permanent)


def _clip(text: str, limit: int = 300) -> str:
    return text[:limit]


def sign(raw_body: bytes, app_secret: str) -> str:
    """The `X-Hub-Signature-256` header value for `raw_body`."""
    return "sha256=" + hmac.new(app_secret.encode(), raw_body, hashlib.sha256).hexdigest()


def signature_valid(raw_body: bytes, header: str | None, app_secret: str) -> bool:
    """Check `X-Hub-Signature-256` (`sha256=<64 hex digits>`) over the raw
    body, comparing bytes in constant time
    (https://developers.facebook.com/docs/graph-api/webhooks/getting-started).
    Any header value (missing, empty, another scheme, the wrong length,
    non-ASCII) gives True or False, never an error."""
    if not isinstance(header, str) or not header.startswith("sha256="):
        return False
    expected = sign(raw_body, app_secret).encode("ascii")
    # "replace" never raises; a non-ASCII header then simply cannot match.
    given = header.strip().encode("utf-8", errors="replace")
    return hmac.compare_digest(expected, given)


def handshake_challenge(args: dict[str, str], verify_token: str) -> str | None:
    """Meta's subscription handshake: the `hub.challenge` to echo when
    `hub.mode=subscribe` and `hub.verify_token` matches, else None."""
    token = str(args.get("hub.verify_token", "")).encode(errors="replace")
    if args.get("hub.mode") == "subscribe" and hmac.compare_digest(token, verify_token.encode(errors="replace")):
        return args.get("hub.challenge", "")
    return None


def parse_statuses(payload: Any) -> list[PlatformStatus]:
    """Every status in a webhook payload, in payload order. Changes without
    statuses (inbound messages, other fields) contribute nothing.

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
                    )
                )
    return out
