"""WhatsApp Cloud API adapter: the send call, the signed status webhook.

Wire format, from Meta's documentation:
- Send: `POST {base}/{version}/{phone-number-id}/messages`, bearer token, JSON
  `{"messaging_product": "whatsapp", "recipient_type": "individual", "to",
  "type": "text", "text": {"body"}, "biz_opaque_callback_data"}`; the answer's
  `messages[0].id` is the `wamid`
  (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages).
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
from dataclasses import dataclass
from typing import Any

import requests
import urllib3.exceptions
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_any, wait_exponential
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from shared.providers.base import SendOutcome, SendResult

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
    """The status line came, but not the whole body within the budget and size."""

    def __init__(self, status: int, why: str) -> None:
        super().__init__(f"HTTP {status} answer {why}")
        self.status = status


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
    """Sends text messages through the Cloud API
    (https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages).

    Args:
        api_base: e.g. `https://graph.facebook.com` (the fake platform locally).
        api_version: e.g. `v21.0`.
        phone_number_id: the sending number's id.
        access_token: the bearer token (a secret).
        timeout_ms: the whole send call's budget in ms, reconnects included;
            keep it well below the ack timeout.

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
                 timeout_ms: int) -> None:
        self._url = f"{api_base.rstrip('/')}/{api_version}/{phone_number_id}/messages"
        self._budget_s = timeout_ms / 1000
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {access_token}"
        # max_retries=0: urllib3 must not resend anything on its own.
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32, max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

    @staticmethod
    def answer_id(payload: Any) -> str | None:
        """The platform's message id in a 2xx answer (`messages[0].id`, the wamid), or None."""
        try:
            wamid = payload["messages"][0]["id"]
        except (KeyError, IndexError, TypeError):
            return None
        return wamid if isinstance(wamid, str) and wamid else None

    @staticmethod
    def request_body(recipient: str, text: str, delivery_id: str) -> dict[str, Any]:
        """The send call's JSON body."""
        return {
            "messaging_product": "whatsapp",
            "recipient_type": "individual",
            "to": recipient,
            "type": "text",
            "text": {"preview_url": False, "body": text},
            "biz_opaque_callback_data": delivery_id,
        }

    def _post(self, body: dict[str, Any]) -> tuple[int, Any]:
        """POST within the budget; returns the HTTP status and the decoded JSON
        answer (None when it is not JSON).

        Retried (tenacity, at most `CONNECT_TRIES` tries) only when the
        connection could never be opened: such a request provably never
        reached the platform, so trying again cannot duplicate the message.
        Nothing else is retried here.

        Raises:
            requests.RequestException: the last try's failure.
            _AnswerUnreadable: a status came, its body not within the budget.
        """
        deadline = time.monotonic() + self._budget_s

        def left_s() -> float:
            return deadline - time.monotonic()

        def budget_spent(state: RetryCallState) -> bool:
            return left_s() < MIN_TRY_S

        def wait_s(state: RetryCallState) -> float:
            return max(0.0, min(CONNECT_RETRY_WAIT(state), left_s() - MIN_TRY_S))

        def one_try() -> requests.Response:
            left = left_s()
            if left <= 0:
                raise requests.ConnectTimeout("the send budget was spent before a connection was open")
            return self._session.post(self._url, json=body, timeout=(left, left), stream=True, allow_redirects=False)

        retrying = Retrying(retry=retry_if_exception(never_connected), wait=wait_s,
                            stop=stop_any(stop_after_attempt(CONNECT_TRIES), budget_spent), reraise=True)
        resp = retrying(one_try)
        # read1 returns what one socket read brings (iter_content would block
        # until a whole chunk came), so the deadline is checked after each read.
        read = getattr(resp.raw, "read1", None) or resp.raw.read  # read1: urllib3 >= 2.3
        try:
            raw = bytearray()
            while chunk := read(8192, decode_content=True):
                raw += chunk
                if len(raw) > MAX_ANSWER_BYTES:
                    raise _AnswerUnreadable(resp.status_code, f"longer than {MAX_ANSWER_BYTES} bytes")
                if left_s() < 0:
                    raise _AnswerUnreadable(resp.status_code, "not read within the send budget")
            resp.raw.release_conn()  # read to the end: the connection can serve the next send
        except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
            raise _AnswerUnreadable(resp.status_code, f"cut off: {type(exc).__name__}: {exc}") from exc
        finally:
            resp.close()
        try:
            return resp.status_code, json.loads(raw)
        except ValueError:
            return resp.status_code, None

    def send(self, recipient: str, text: str, delivery_id: str) -> SendResult:
        """Send one text message, within `timeout_ms`. Never raises for
        platform or network errors:

        - ACCEPTED: HTTP 2xx with `messages[0].id` (the wamid);
        - REFUSED (provably not sent): a Graph error answer, HTTP 4xx
          (`permanent` for `PERMANENT_ERROR_CODES`, `rate_limited` for 131056;
          https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes),
          or no connection could be opened within the budget (transient);
        - UNKNOWN (possibly sent): anything after the request may have been
          written (read timeout, connection reset or dropped, an answer cut
          off), HTTP 5xx, or 2xx without an id. `error_title` says why.
        """
        try:
            status, payload = self._post(self.request_body(recipient, text, delivery_id))
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
        error = payload.get("error") if isinstance(payload, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        code = int(code) if isinstance(code, int | str) and str(code).isdigit() else None
        title = _clip(str((error.get("message") if isinstance(error, dict) else None) or f"HTTP {status}"))
        if 400 <= status < 500:
            return SendResult(SendOutcome.REFUSED, permanent=code in self.permanent_codes,
                              rate_limited=code in self.rate_limited_codes, error_code=code, error_title=title)
        # 5xx (and any other status): the platform may have sent it before failing.
        return SendResult(SendOutcome.UNKNOWN, error_code=code,
                          error_title=_clip(f"possibly sent: HTTP {status}: {title}"))


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
