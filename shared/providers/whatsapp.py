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
import time
from dataclasses import dataclass
from typing import Any

import requests
from tenacity import retry, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from shared.providers.base import SendOutcome, SendResult

# Error codes after which sending the same message again cannot succeed.
# 131026 undeliverable, 131047 outside the 24 h customer-service window,
# 131051 unsupported message type, 100/131008/131009 invalid parameters.
PERMANENT_ERROR_CODES = frozenset({100, 131008, 131009, 131026, 131047, 131051})
# 131056 pair rate limit: Meta asks for a wait of 4^n s before the n-th retry
# (the room's rules apply it).
PAIR_RATE_LIMIT = 131056


def never_connected(exc: BaseException) -> bool:
    """Whether a request failed before a connection was open, so no byte of it
    reached the platform: connection refused, DNS failure, connect timeout."""
    if isinstance(exc, requests.ConnectTimeout):
        return True
    if not isinstance(exc, requests.ConnectionError):
        return False
    reason = exc.args[0] if exc.args else None
    reason = getattr(reason, "reason", reason)  # urllib3's MaxRetryError wraps the cause
    return isinstance(reason, NewConnectionError | ConnectTimeoutError)


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
    """Sends text messages through the Cloud API.

    Args:
        api_base: e.g. `https://graph.facebook.com` (the fake platform locally).
        api_version: e.g. `v21.0`.
        phone_number_id: the sending number's id.
        access_token: the bearer token (a secret).
        timeout_ms: the whole send call's budget in ms, reconnects included.
            Each try gets what is left of it as its connect and read timeout;
            requests' read timeout bounds each socket read, not the whole
            answer, so a platform trickling bytes could stretch one try (Meta
            answers a send in one short JSON body).
    """

    def __init__(self, api_base: str, api_version: str, phone_number_id: str, access_token: str, timeout_ms: int) -> None:
        self._url = f"{api_base.rstrip('/')}/{api_version}/{phone_number_id}/messages"
        self._budget_s = timeout_ms / 1000
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {access_token}"
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32, max_retries=0)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)

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

    def _post(self, body: dict[str, Any]) -> requests.Response:
        """POST within the budget. Retried (tenacity) only when the connection
        could never be opened: such a request provably never reached the
        platform, so trying again cannot duplicate the message."""
        deadline = time.monotonic() + self._budget_s

        @retry(retry=retry_if_exception(never_connected),
               stop=stop_after_attempt(3) | stop_after_delay(self._budget_s),
               wait=wait_exponential(multiplier=0.05, max=0.2), reraise=True)
        def attempt() -> requests.Response:
            left = deadline - time.monotonic()
            if left <= 0:
                raise requests.ConnectTimeout("send budget used up before a connection was open")
            return self._session.post(self._url, json=body, timeout=(left, left))

        return attempt()

    def send(self, recipient: str, text: str, delivery_id: str) -> SendResult:
        """Send one text message. Never raises for platform or network errors:

        - ACCEPTED: HTTP 2xx with `messages[0].id` (the wamid);
        - REFUSED: a Graph error answer (HTTP 4xx; `permanent` for the codes
          that can never succeed, `rate_limited` for 131056), or no connection
          could be opened within the budget;
        - UNKNOWN: anything after the request may have been written (read
          timeout, connection reset or dropped), HTTP 5xx, or 2xx without an id.
        """
        try:
            resp = self._post(self.request_body(recipient, text, delivery_id))
        except requests.RequestException as exc:
            outcome = SendOutcome.REFUSED if never_connected(exc) else SendOutcome.UNKNOWN
            return SendResult(outcome, error_title=f"{type(exc).__name__}: {exc}"[:300])
        try:
            payload = resp.json()
        except ValueError:
            payload = {}
        if resp.ok:
            try:
                return SendResult(SendOutcome.ACCEPTED, provider_message_id=str(payload["messages"][0]["id"]))
            except (KeyError, IndexError, TypeError):
                return SendResult(SendOutcome.UNKNOWN, error_title=f"HTTP {resp.status_code} without messages[0].id")
        error = payload.get("error") if isinstance(payload, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        title = (error.get("message") if isinstance(error, dict) else None) or f"HTTP {resp.status_code}"
        code = int(code) if isinstance(code, int | str) and str(code).isdigit() else None
        if resp.status_code >= 500:
            return SendResult(SendOutcome.UNKNOWN, error_code=code, error_title=str(title)[:300])
        return SendResult(SendOutcome.REFUSED, permanent=code in PERMANENT_ERROR_CODES,
                          rate_limited=code == PAIR_RATE_LIMIT, error_code=code, error_title=str(title)[:300])


def sign(raw_body: bytes, app_secret: str) -> str:
    """The `X-Hub-Signature-256` header value for `raw_body`."""
    return "sha256=" + hmac.new(app_secret.encode(), raw_body, hashlib.sha256).hexdigest()


def signature_valid(raw_body: bytes, header: str | None, app_secret: str) -> bool:
    """Check `X-Hub-Signature-256` over the raw body, in constant time. Any
    header value, non-ASCII included, gives True or False, never an error."""
    if not header or not header.startswith("sha256="):
        return False
    given = header.strip().encode("utf-8", errors="replace")
    return hmac.compare_digest(sign(raw_body, app_secret).encode(), given)


def handshake_challenge(args: dict[str, str], verify_token: str) -> str | None:
    """Meta's subscription handshake: the `hub.challenge` to echo when
    `hub.mode=subscribe` and `hub.verify_token` matches, else None."""
    token = args.get("hub.verify_token", "")
    if args.get("hub.mode") == "subscribe" and hmac.compare_digest(token.encode(), verify_token.encode()):
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
                if not isinstance(st, dict) or not isinstance(st.get("id"), str) or not isinstance(st.get("status"), str):
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
