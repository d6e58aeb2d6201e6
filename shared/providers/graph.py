"""The Graph API transport that WhatsApp, Messenger and Instagram share: one
send call within a budget, its outcome classified (accepted, refused, unknown),
and Meta's webhook signatures and subscription handshake.

Each platform builds on `GraphApiClient` with its own request body, answer id
and error codes (whatsapp.py, meta_messaging.py); this module knows no
platform's message shapes.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import time
from typing import Any, Literal

import requests
import urllib3.exceptions
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from shared.providers.base import Media, SendOutcome, SendResult

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
    """The status line came, but not the whole body within the budget and size
    (`too_long`: the body was longer than allowed)."""

    def __init__(self, status: int, why: str, too_long: bool = False) -> None:
        super().__init__(f"HTTP {status} answer {why}")
        self.status = status
        self.too_long = too_long


def session_without_retries() -> requests.Session:
    """A pooled HTTP session that never resends anything on its own
    (urllib3's max_retries=0): a retry is the caller's decision."""
    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_connections=4, pool_maxsize=32, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def environment_read_once(session: requests.Session, url: str) -> requests.Session:
    """`session`, for calls to `url`'s host only, with what requests reads
    from the environment on every call (`trust_env`: the proxies for the
    host, a CA bundle, a ~/.netrc login) read now instead, and kept.

    Why: those reads (os.environ scanned for `*_proxy`, two file checks for
    a .netrc) took about 0.17 ms of CPU per send call on the bench machine,
    a send call per message; a function's environment does not change while
    it runs, so what they find does not either. The same settings then
    apply as requests would merge them (`Session.merge_environment_settings`,
    `prepare_request`)."""
    found = session.merge_environment_settings(url, {}, None, None, None)
    session.proxies.update(found["proxies"])
    session.verify = found["verify"]
    if session.auth is None:
        session.auth = requests.utils.get_netrc_auth(url)
    session.trust_env = False
    return session


class GraphApiClient:
    """One Graph API messaging endpoint (`{api_base}/{api_version}/{node_id}/messages`)
    and the rules every platform on it shares: a send call's budget and how
    its outcome is classified (`send`). A platform subclass gives
    `request_body`, `answer_id` and its error codes (`permanent_codes`,
    `rate_limited_codes`).

    Args:
        api_base: e.g. `https://graph.facebook.com` (the fake platform locally).
        api_version: e.g. `v21.0`.
        node_id: the sending node (a WhatsApp phone number id, a Page id, an
            Instagram account id).
        access_token: the bearer token (a secret). It goes to `api_base` only.
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

    # What the platform's error codes mean for a retry (each platform sets its own).
    permanent_codes: frozenset[int] = frozenset()
    rate_limited_codes: frozenset[int] = frozenset()

    def __init__(self, api_base: str, api_version: str, node_id: str, access_token: str, timeout_ms: int) -> None:
        self._node_url = f"{api_base.rstrip('/')}/{api_version}/{node_id}"
        self._url = f"{self._node_url}/messages"
        self._budget_s = timeout_ms / 1000
        self._session = environment_read_once(session_without_retries(), self._node_url)  # the platform's host only
        self._session.headers["Authorization"] = f"Bearer {access_token}"

    @staticmethod
    def answer_id(payload: Any) -> str | None:
        """The platform's message id in a 2xx answer, or None (each platform's own)."""
        raise NotImplementedError

    # (code, subcode or None for any) of the refusal "outside the 24-hour
    # window", and what to do instead (each platform its own): the message
    # fails at once with this said in its reason (never resent).
    window_closed_codes: frozenset[tuple[int, int | None]] = frozenset()
    window_closed_advice: str = ""

    @staticmethod
    def request_body(recipient: str, text: str, delivery_id: str, media: Media | None = None,
                     payload: str | None = None) -> dict[str, Any]:
        """The send call's JSON body (each platform's own).

        Raises:
            ValueError: a message this platform cannot send.
        """
        raise NotImplementedError

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

        tries_spent = stop_after_attempt(CONNECT_TRIES)

        def stop(state: RetryCallState) -> bool:
            return tries_spent(state) or budget_spent(state)

        retrying = Retrying(retry=retry_if_exception(never_connected), wait=wait_s, stop=stop, reraise=True)
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

    def send(self, recipient: str, text: str, delivery_id: str, media: Media | None = None,
             payload: str | None = None) -> SendResult:
        """Send one message, within `timeout_ms`: a text, or with `media` a
        media message (`text` its caption, when not empty), or with `payload`
        (the producer's contract `data`) a message of its kind. Never raises
        for platform or network errors:

        - ACCEPTED: HTTP 2xx with the platform's message id (`answer_id`);
        - REFUSED (provably not sent): a Graph error answer, HTTP 4xx
          (`permanent` for the platform's `permanent_codes`, `rate_limited`
          for its `rate_limited_codes`; for `window_closed_codes`, permanent
          with an `error_title` that begins "outside the 24-hour customer
          service window" and gives `window_closed_advice`), no connection could be opened within
          the budget (transient), or a message `request_body` refuses
          (permanent, nothing was called);
        - UNKNOWN (possibly sent): anything after the request may have been
          written (read timeout, connection reset or dropped, an answer cut
          off), HTTP 5xx, or 2xx without an id. `error_title` says why.
        """
        try:
            body = self.request_body(recipient, text, delivery_id, media, payload)
        except (ValueError, KeyError, TypeError) as exc:
            return SendResult(SendOutcome.REFUSED, permanent=True, error_title=str(exc))
        try:
            status, answer = self._post(body)
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
            wamid = self.answer_id(answer)
            if wamid is not None:
                return SendResult(SendOutcome.ACCEPTED, provider_message_id=wamid)
            return SendResult(SendOutcome.UNKNOWN, error_title=f"possibly sent: HTTP {status} without a message id")
        code, title = _graph_error(answer, status)
        if 400 <= status < 500:
            subcode = _graph_subcode(answer)
            if (code, subcode) in self.window_closed_codes or (code, None) in self.window_closed_codes:
                return SendResult(SendOutcome.REFUSED, permanent=True, error_code=code,
                                  error_title=_clip(f"outside the 24-hour customer service window: "
                                                    f"{self.window_closed_advice} ({title})"))
            return SendResult(SendOutcome.REFUSED, permanent=code in self.permanent_codes,
                              rate_limited=code in self.rate_limited_codes, error_code=code, error_title=title)
        # 5xx (and any other status): the platform may have sent it before failing.
        return SendResult(SendOutcome.UNKNOWN, error_code=code,
                          error_title=_clip(f"possibly sent: HTTP {status}: {title}"))


def _graph_error(payload: Any, status: int) -> tuple[int | None, str]:
    """(code, message) of a Graph error answer `{"error": {"code", "message"}}`;
    the message falls back to `HTTP {status}`."""
    error = payload.get("error") if isinstance(payload, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    code = int(code) if isinstance(code, int | str) and not isinstance(code, bool) and str(code).isdigit() else None
    title = _clip(str((error.get("message") if isinstance(error, dict) else None) or f"HTTP {status}"))
    return code, title


def _graph_subcode(payload: Any) -> int | None:
    """`error.error_subcode` of a Graph error answer, or None."""
    error = payload.get("error") if isinstance(payload, dict) else None
    sub = error.get("error_subcode") if isinstance(error, dict) else None
    return sub if isinstance(sub, int) and not isinstance(sub, bool) else None


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
