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
from dataclasses import dataclass
from typing import Any

import requests
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

# Error codes after which sending the same message again cannot succeed.
# 131026 undeliverable, 131047 outside the 24 h customer-service window,
# 131051 unsupported message type, 100/131008/131009 invalid parameters.
PERMANENT_ERROR_CODES = frozenset({100, 131008, 131009, 131026, 131047, 131051})
# 131056 pair rate limit: Meta asks for a wait of 4^n s before the n-th retry.
PAIR_RATE_LIMIT = 131056


@dataclass(frozen=True)
class SendResult:
    """Outcome of one send call. On success `provider_message_id` is the wamid;
    on failure `permanent` says whether a retry can help, and `retry_after_ms`
    (ms) overrides the retry backoff when the platform asks for a wait."""

    ok: bool
    provider_message_id: str | None = None
    permanent: bool = False
    error_code: int | None = None
    error_title: str | None = None
    retry_after_ms: int | None = None


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
        timeout_ms: how long one HTTP call may take, in ms.
    """

    def __init__(self, api_base: str, api_version: str, phone_number_id: str, access_token: str, timeout_ms: int) -> None:
        self._url = f"{api_base.rstrip('/')}/{api_version}/{phone_number_id}/messages"
        self._timeout_s = timeout_ms / 1000
        self._session = requests.Session()
        self._session.headers["Authorization"] = f"Bearer {access_token}"
        adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32)
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

    # A refused connection never reached the platform, so retrying it at once
    # cannot duplicate a message; anything later is left to the room's retry.
    @retry(
        retry=retry_if_exception_type(requests.ConnectionError),
        stop=stop_after_attempt(3),
        wait=wait_exponential(multiplier=0.05, max=0.5),
        reraise=True,
    )
    def _post(self, body: dict[str, Any]) -> requests.Response:
        return self._session.post(self._url, json=body, timeout=self._timeout_s)

    def send(self, recipient: str, text: str, delivery_id: str, attempt: int = 1) -> SendResult:
        """Send one text message. Never raises for platform or network errors:
        they come back as a failed `SendResult` (transient unless the error code
        says the message can never be sent)."""
        try:
            resp = self._post(self.request_body(recipient, text, delivery_id))
        except requests.RequestException as exc:
            return SendResult(ok=False, error_title=f"{type(exc).__name__}: {exc}"[:300])
        try:
            payload = resp.json()
        except ValueError:
            payload = {}
        if resp.ok:
            try:
                return SendResult(ok=True, provider_message_id=str(payload["messages"][0]["id"]))
            except (KeyError, IndexError, TypeError):
                return SendResult(ok=False, error_title=f"HTTP {resp.status_code} without messages[0].id")
        error = payload.get("error") if isinstance(payload, dict) else None
        code = error.get("code") if isinstance(error, dict) else None
        title = (error.get("message") if isinstance(error, dict) else None) or f"HTTP {resp.status_code}"
        code = int(code) if isinstance(code, int | str) and str(code).isdigit() else None
        retry_after_ms = 4**attempt * 1000 if code == PAIR_RATE_LIMIT else None
        return SendResult(
            ok=False,
            permanent=code in PERMANENT_ERROR_CODES,
            error_code=code,
            error_title=str(title)[:300],
            retry_after_ms=retry_after_ms,
        )


def sign(raw_body: bytes, app_secret: str) -> str:
    """The `X-Hub-Signature-256` header value for `raw_body`."""
    return "sha256=" + hmac.new(app_secret.encode(), raw_body, hashlib.sha256).hexdigest()


def signature_valid(raw_body: bytes, header: str | None, app_secret: str) -> bool:
    """Check `X-Hub-Signature-256` over the raw body, in constant time."""
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(raw_body, app_secret), header.strip())


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
