"""The fake platform: a local HTTP server speaking the wire formats of the
WhatsApp Cloud API, the Messenger Send API and Instagram messaging.

The only home-made server of the project. It answers the send call
(`POST /{version}/{phone-number-id}/messages`) with a `wamid`, then posts
signed status webhooks (`X-Hub-Signature-256`) to the webhook URL, the way
Meta does: `sent` at once, then `delivered` and maybe `read` after a
log-normal delivery latency, for a share of messages only (the rest never get
an ack); sometimes `failed`, `read` without `delivered`, duplicated or
reordered webhooks; retried with backoff when the webhook does not answer 200.

Each recipient is a device that "receives" a message at its delivery time.
Messages waiting for the same device are delivered independently, so a burst
can arrive in any order (as Meta documents). The device log is how the demo
and the tests judge ordering: `GET /_fake/stats`.

Faults of the send call itself, each for chosen recipients (their next
sends) or as a share of all sends (drawn from the seeded rng):
- a Graph error answer (HTTP 400, nothing sent): `send_errors`, and 130429
  (throughput) or 131056 (pair rate limit) at random;
- `http_5xx`: HTTP 500/503 with a Graph error body, nothing sent;
- `drop_after_read`: the whole request is read and the message sent (the
  device receives it, webhooks follow), then the connection is closed with no
  HTTP answer at all: the sender cannot know it went out;
- `slow_send_ms`: the message is sent when the request is read, the answer
  comes only that many ms later (past the sender's timeout, typically);
- `answer_without_id`: sent, but answered 200 with an empty `messages` list;
- `trickle_answer_ms`: sent, and the answer written one byte every that many ms.
`GET /_fake/stats` counts each fault injected, by kind (`faults`).
With `pair_rate_interval_ms` set, the fake enforces a pair rate per
recipient as Meta does (a token bucket of `pair_rate_burst`): a send to a
person whose bucket is empty is answered 131056 and not sent.

Messenger and Instagram (`POST /{version}/{PAGE-ID or IG-ID}/messages`, told
apart by the id in the path; shared/providers/meta_messaging.py has the
shapes and their sources): the answer is `{"recipient_id", "message_id"}`;
no asynchronous failure. Messenger posts `message_deliveries` receipts (with
`mids` for a share `messenger_mids_prob`, the watermark always) and
`message_reads` for read messages; each watermark is what Meta documents:
every message to that person stamped before it has been delivered (read).
Instagram posts no delivery receipt: `messaging_seen` naming one message, for
read messages only, and an echo (`is_echo`) of every send. Each app signs
with its own secret.

Media (WhatsApp; shared/providers/whatsapp.py has the shapes and their
sources): `POST /{version}/{phone-number-id}/media`, a multipart form with
`messaging_product=whatsapp`, `type` (a MIME type WhatsApp takes) and `file`
(at most `media_max_bytes`), is answered `{"id": MEDIA-ID}` after
`media_latency_ms`, or with the Graph error Meta gives for a missing field,
a type it does not take or a file too large; the ids are remembered per phone
number id. A send of `"type": "image"` names `image.id` (one uploaded with
that phone number id, else HTTP 400, code 100, "(#100) Param image.id is not
a valid whatsapp business account media attachment ID") or `image.link`, and
then goes like a text (faults, device, webhooks). Faults of uploads:
`upload_http_5xx` (the next N answered HTTP 500, no media made) and
`upload_errors` (Graph error codes of the next uploads, HTTP 400).
Files to fetch: `GET /assets/{name}` serves deterministic bytes by the name's
extension (`.png` a real 1x1 PNG whose colour comes from the name, `.jpg` /
`.jpeg` a real 8x8 JPEG, `.gif` a 1x1 GIF served as `image/gif`, anything else
`application/octet-stream`); `?bytes=N` pads the file to N bytes; names
starting `missing-` are 404, `unavailable-` 503. `GET /_fake/stats` counts
them all under `media`.

Run: `python -m tools.fake_platform --port 8090 --webhook-url http://127.0.0.1:8081/`.
Change behaviour at run time: `POST /_fake/config` with a JSON subset of
`FakeConfig` (checked against its types); `POST /_fake/reset` clears the
records.
"""

from __future__ import annotations

import argparse
import base64
import email.parser
import email.policy
import hashlib
import heapq
import hmac
import itertools
import json
import math
import random
import re
import signal
import threading
import time
import typing
import urllib.parse
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

SEND_PATH = re.compile(r"^/v[0-9.]+/(?P<phone>[^/]+)/messages$")
MEDIA_PATH = re.compile(r"^/v[0-9.]+/(?P<phone>[^/]+)/media$")
ASSET_PATH = re.compile(r"^/assets/(?P<name>[A-Za-z0-9._-]+)$")
# The MIME types the media endpoint takes (images, stickers, audio, video,
# documents; https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media,
# "Supported Media Types"; documents abridged).
UPLOAD_TYPES = ("audio/aac", "audio/amr", "audio/mp4", "audio/mpeg", "audio/ogg", "text/plain",
                "application/pdf", "image/jpeg", "image/png", "image/webp", "video/3gpp", "video/mp4")
# The largest upload request body read at all, bytes (larger ones are refused unread).
MAX_UPLOAD_REQUEST_BYTES = 64 * 1024 * 1024


@dataclass
class FakeConfig:
    """How the fake platform behaves. Probabilities (`*_prob`) are shares in
    [0, 1] of all sends; times in ms. Per-recipient faults apply to that
    recipient's next sends, one list item (or one count) per send."""

    ack_prob: float = 0.87  # messages that ever get a delivered/read webhook
    ack_median_ms: float = 80.0  # log-normal delivery latency, median
    ack_sigma: float = 1.0  # log-normal shape: the long tail
    read_prob: float = 0.5  # acked messages that are also read
    read_delay_ms: float = 400.0  # median delay from delivered to read
    read_without_delivered_prob: float = 0.03  # acks that come as `read` only
    fail_prob: float = 0.01  # messages that end with a `failed` webhook
    duplicate_prob: float = 0.05  # webhooks posted twice
    reorder_prob: float = 0.05  # webhooks whose statuses come in swapped order
    send_latency_ms: float = 0.0  # time the send call takes to answer
    silent_recipients: list[str] = field(default_factory=list)  # never ack these
    slow_recipients: dict[str, float] = field(default_factory=dict)  # recipient -> fixed ack latency ms
    send_errors: dict[str, list[int]] = field(default_factory=dict)  # recipient -> error codes for its next sends
    throughput_error_prob: float = 0.0  # sends answered with error 130429 (throughput limit), not sent
    pair_rate_limit_prob: float = 0.0  # sends answered with error 131056 (pair rate limit), not sent
    http_5xx: dict[str, list[int]] = field(default_factory=dict)  # recipient -> HTTP 5xx for its next sends, not sent
    http_5xx_prob: float = 0.0  # sends answered HTTP 500 or 503, not sent
    drop_after_read: dict[str, int] = field(default_factory=dict)  # recipient -> how many next sends to drop
    drop_after_read_prob: float = 0.0  # sends sent, then the connection closed with no answer
    slow_send_ms: dict[str, list[float]] = field(default_factory=dict)  # recipient -> answer delays of its next sends
    slow_send_prob: float = 0.0  # sends whose answer comes `slow_send_prob_ms` after they were sent
    slow_send_prob_ms: float = 5000.0
    answer_without_id: dict[str, int] = field(default_factory=dict)  # recipient -> next sends sent, answered 200 with no id
    trickle_answer_ms: dict[str, list[float]] = field(default_factory=dict)  # recipient -> ms between answer bytes
    pair_rate_interval_ms: float = 0.0  # enforce a pair rate per recipient: one token per this many ms (0: off)
    pair_rate_burst: int = 45  # tokens a recipient's bucket holds; a send with none gets 131056, not sent
    messenger_mids_prob: float = 0.7  # Messenger delivery receipts that carry `mids` (the watermark always comes)
    media_latency_ms: float = 750.0  # time a media upload takes to answer
    media_max_bytes: int = 5 * 1024 * 1024  # largest file the media endpoint takes (WhatsApp's images: 5 MB)
    upload_http_5xx: int = 0  # the next this many uploads are answered HTTP 500, no media made
    upload_errors: list[int] = field(default_factory=list)  # Graph error codes of the next uploads (HTTP 400)
    seed: int = 7


# Graph error bodies of the faults (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
RANDOM_SEND_ERRORS = {130429: ("throughput_error", "(#130429) Rate limit hit"),
                      131056: ("pair_rate_limit", "(#131056) (Business Account, Consumer Account) pair rate limit hit")}
HTTP_5XX_ERRORS = {500: (1, "An unknown error occurred"), 503: (2, "Service temporarily unavailable")}
UNKNOWN_MEDIA_ID = "(#100) Param image.id is not a valid whatsapp business account media attachment ID"
UPLOAD_ERRORS = {130429: "(#130429) Rate limit hit", 80007: "(#80007) Rate limit issues",
                 4: "(#4) Application request limit reached", 131053: "(#131053) Media upload error"}


def _png(rgb: tuple[int, int, int]) -> bytes:
    """A valid 1x1 RGB PNG of colour `rgb` (https://www.w3.org/TR/png/)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (len(data).to_bytes(4, "big") + kind + data
                + zlib.crc32(kind + data).to_bytes(4, "big"))
    ihdr = (1).to_bytes(4, "big") * 2 + bytes([8, 2, 0, 0, 0])  # 1x1, 8-bit, truecolour
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" + bytes(rgb))) \
        + chunk(b"IEND", b"")


# An 8x8 baseline JPEG (made once with Pillow) and a 1x1 GIF: real files.
JPEG_BYTES = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1RV19iZ2hnPk1xeXBk"
    "eFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAAIAAgDASIA"
    "AhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0Kx"
    "wRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ip"
    "qrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREA"
    "AgECBAQDBAcFBAQAAQJ3AAECAxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldY"
    "WVpjZGVmZ2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq8vP09fb3"
    "+Pn6/9oADAMBAAIRAxEAPwCSiiivGPWP/9k=")
GIF_BYTES = base64.b64decode("R0lGODdhAQABAIAAAAAAAAAAACwAAAAAAQABAAAIBAABBAQAOw==")


def asset(name: str, size: int | None = None) -> tuple[int, str, bytes]:
    """`(HTTP status, Content-Type, body)` of `GET /assets/{name}[?bytes=size]`:
    deterministic bytes by extension, padded with zero bytes to `size`. The
    handler serves it `delay_ms` ms late when the query asks (a slow media host)."""
    if name.startswith("missing-"):
        return 404, "text/plain", b"not found"
    if name.startswith("unavailable-"):
        return 503, "text/plain", b"unavailable"
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext == "png":
        digest = hashlib.sha256(name.encode()).digest()
        kind, body = "image/png", _png((digest[0], digest[1], digest[2]))
    elif ext in ("jpg", "jpeg"):
        kind, body = "image/jpeg", JPEG_BYTES
    elif ext == "gif":
        kind, body = "image/gif", GIF_BYTES
    else:
        kind, body = "application/octet-stream", hashlib.sha256(name.encode()).digest()
    if size is not None and size > len(body):
        body += bytes(size - len(body))
    return 200, kind, body


@dataclass
class SendRecord:
    recipient: str
    wamid: str  # the platform's message id (a wamid, or a Messenger/Instagram mid)
    callback: str  # our delivery id where the wire format carries it (not Instagram's)
    at: float  # epoch s: the platform's stamp of the message
    provider: str = "whatsapp"
    kind: str = "text"  # the message's type: `text` or `image`
    media_id: str | None = None  # an image sent by media id


@dataclass(frozen=True)
class MetaApp:
    """One Messenger or Instagram app: the id in its send path, its token and secret."""

    provider: str
    account_id: str
    access_token: str
    app_secret: str


class FakeWhatsApp:
    """State and behaviour of the fake platform (thread-safe)."""

    def __init__(self, webhook_url: str, app_secret: str, access_token: str, config: FakeConfig,
                 meta_apps: tuple[MetaApp, ...] = ()) -> None:
        self.webhook_url = webhook_url
        self.app_secret = app_secret.encode()
        self.access_token = access_token
        self.meta_apps = {app.account_id: app for app in meta_apps}
        self.config = config
        self.rng = random.Random(config.seed)
        self.lock = threading.Lock()
        self.counter = itertools.count(1)
        self.timeline: list[tuple[float, int, Any]] = []
        self.wake = threading.Condition(self.lock)
        self.pool = ThreadPoolExecutor(max_workers=24, thread_name_prefix="webhook")
        self.local = threading.local()
        self.stopping = False
        self.reset()
        threading.Thread(target=self._scheduler, daemon=True, name="fake-scheduler").start()

    def reset(self) -> None:
        with self.lock:
            self.sends: list[SendRecord] = []
            self.device: dict[str, list[dict[str, Any]]] = {}
            self.acked: set[str] = set()  # wamids whose ack webhook was posted
            self.webhooks_posted = 0
            self.webhooks_failed = 0
            self.send_errors_returned = 0  # Graph error answers (HTTP 400), queued or random
            self.faults: Counter[str] = Counter()  # faults injected, by kind
            # Messenger/Instagram: per person, [stamp, delivered, read] of each message (watermarks).
            self.conversations: dict[tuple[str, str], list[list[Any]]] = {}
            self.pair_buckets: dict[str, tuple[float, float]] = {}  # recipient -> (tokens, at epoch s)
            self.media: dict[str, dict[str, dict[str, Any]]] = {}  # phone id -> media id -> {type, bytes, sha256}
            self.media_counts: Counter[str] = Counter()  # uploads, refusals, sends by id / link, asset fetches

    # ------------------------------------------------------------ timeline

    def at(self, when: float, action: Any) -> None:
        with self.lock:
            heapq.heappush(self.timeline, (when, next(self.counter), action))
            self.wake.notify()

    def _scheduler(self) -> None:
        while True:
            with self.lock:
                while not self.timeline or self.timeline[0][0] > time.time():
                    if self.stopping:
                        return
                    timeout = None if not self.timeline else max(0.0, self.timeline[0][0] - time.time())
                    self.wake.wait(timeout if timeout is not None else 0.5)
                _, _, action = heapq.heappop(self.timeline)
            self.pool.submit(action)

    # ------------------------------------------------------------ sends

    def handle_send(self, phone_id: str, auth: str | None,
                    body: dict[str, Any]) -> tuple[int | None, dict[str, Any] | TrickledAnswer]:
        """Answer one send call: `(HTTP status, JSON body)` (a `TrickledAnswer`
        to write it slowly), or `(None, {})` to close the connection without
        any answer."""
        if phone_id in self.meta_apps:
            return self.handle_meta_send(self.meta_apps[phone_id], auth, body)
        if auth != f"Bearer {self.access_token}":
            return 401, _error(190, "Invalid OAuth access token.", "OAuthException")
        if body.get("messaging_product") != "whatsapp" or body.get("type") not in ("text", "image"):
            return 400, _error(100, "Invalid parameter", "OAuthException")
        recipient, kind, media_id = body.get("to"), body["type"], None
        if kind == "text":
            text = (body.get("text") or {}).get("body") if isinstance(body.get("text"), dict) else None
            if not isinstance(recipient, str) or not isinstance(text, str) or not text:
                return 400, _error(131008, "Required parameter is missing", "OAuthException")
        else:
            refusal, media_id = self._check_image(phone_id, recipient, body.get("image"))
            if refusal is not None:
                return refusal
        cfg = self.config
        with self.lock:
            refusal = self._refusal(recipient)
            if refusal is not None:
                return refusal
            drop, slow_ms = self._after_send_faults(recipient)
        if cfg.send_latency_ms:
            time.sleep(cfg.send_latency_ms / 1000)
        now = time.time()
        wamid = "wamid." + hashlib.sha1(f"{now}{next(self.counter)}".encode()).hexdigest()[:24].upper()
        record = SendRecord(recipient, wamid, str(body.get("biz_opaque_callback_data", "")), now,
                            kind=kind, media_id=media_id)
        with self.lock:
            self.sends.append(record)
            if kind != "text":
                self.media_counts["sends_by_media_id" if media_id else "sends_by_link"] += 1
            plan = self._plan(record)
        for when, action in plan:
            self.at(when, action)
        if slow_ms:
            time.sleep(slow_ms / 1000)
        if drop:
            return None, {}
        answer: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "contacts": [{"input": recipient, "wa_id": recipient.lstrip("+")}],
            "messages": [{"id": wamid}],
        }
        with self.lock:
            if cfg.answer_without_id.get(recipient, 0) > 0:
                cfg.answer_without_id[recipient] -= 1
                self.faults["answer_without_id"] += 1
                answer["messages"] = []
            trickle = cfg.trickle_answer_ms.get(recipient)
            ms_per_byte = float(trickle.pop(0)) if trickle else 0.0
            self.faults["trickle_answer"] += ms_per_byte > 0
        return 200, TrickledAnswer(answer, ms_per_byte) if ms_per_byte else answer

    def _check_image(self, phone_id: str, recipient: Any,
                     image: Any) -> tuple[tuple[int, dict[str, Any]] | None, str | None]:
        """Validate an image send's `to` and `image` object: `(refusal or
        None, the media id it names or None)`."""
        if not isinstance(recipient, str) or not isinstance(image, dict):
            return (400, _error(131008, "Required parameter is missing", "OAuthException")), None
        caption = image.get("caption")
        if caption is not None and (not isinstance(caption, str) or len(caption) > 1024):
            return (400, _error(100, "(#100) Param image.caption must be at most 1024 characters long",
                                "OAuthException")), None
        media_id, link = image.get("id"), image.get("link")
        if media_id is not None:
            with self.lock:
                known = isinstance(media_id, str) and media_id in self.media.get(phone_id, {})
                self.media_counts["unknown_media_id"] += not known
            if not known:
                return (400, _error(100, UNKNOWN_MEDIA_ID, "OAuthException")), None
            return None, media_id
        if isinstance(link, str) and link.lower().startswith(("http://", "https://")):
            return None, None
        if link is not None:
            return (400, _error(100, "(#100) Param image.link is not a valid URI.", "OAuthException")), None
        return (400, _error(131008, "(#131008) Required parameter is missing: image.id or image.link",
                            "OAuthException")), None

    def handle_upload(self, phone_id: str, auth: str | None, content_type: str,
                      raw: bytes) -> tuple[int, dict[str, Any]]:
        """Answer one media upload (multipart `messaging_product`, `type`,
        `file`): `(HTTP status, JSON body)`, after `media_latency_ms`."""
        cfg = self.config
        if cfg.media_latency_ms:
            time.sleep(cfg.media_latency_ms / 1000)
        if phone_id in self.meta_apps:
            return 400, _error(100, "(#100) Unsupported post request", "GraphMethodException")
        if auth != f"Bearer {self.access_token}":
            return 401, _error(190, "Invalid OAuth access token.", "OAuthException")
        fields_ = _multipart(content_type, raw)
        with self.lock:
            if cfg.upload_http_5xx > 0:
                cfg.upload_http_5xx -= 1
                self.media_counts["upload_http_5xx"] += 1
                return 500, _error(1, "An unknown error occurred", "OAuthException")
            if cfg.upload_errors:
                code = cfg.upload_errors.pop(0)
                self.media_counts["upload_errors"] += 1
                return 400, _error(code, UPLOAD_ERRORS.get(code, f"(#{code}) simulated error {code}"),
                                   "OAuthException")
        refusal = self._upload_refusal(fields_)
        if refusal is not None:
            with self.lock:
                self.media_counts["upload_refused"] += 1
            return 400, refusal
        mime, data = fields_["type"][1].decode(), fields_["file"][1]
        with self.lock:
            media_id = str(1_000_000_000_000_000 + next(self.counter))
            self.media.setdefault(phone_id, {})[media_id] = {
                "type": mime, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            self.media_counts["uploads"] += 1
        return 200, {"id": media_id}

    def _upload_refusal(self, form: dict[str, tuple[str | None, bytes]] | None) -> dict[str, Any] | None:
        """The Graph error of an upload form Meta would refuse, or None."""
        if form is None:
            return _error(100, "(#100) The parameter messaging_product is required.", "OAuthException")
        for name in ("messaging_product", "file", "type"):
            if name not in form:
                return _error(100, f"(#100) The parameter {name} is required.", "OAuthException")
        if form["messaging_product"][1] != b"whatsapp":
            return _error(100, "(#100) Param messaging_product must be one of {WHATSAPP} - got "
                               f"\"{form['messaging_product'][1].decode(errors='replace')}\".", "OAuthException")
        mime = form["type"][1].decode(errors="replace")
        if mime not in UPLOAD_TYPES:
            return _error(100, "(#100) Param file must be a file with one of the following types: "
                               f"{', '.join(UPLOAD_TYPES)}. Received file of type '{mime}'.", "OAuthException")
        if len(form["file"][1]) > self.config.media_max_bytes:
            return _error(100, "(#100) Invalid parameter: File Too Large", "OAuthException")
        if not form["file"][1]:
            return _error(100, "(#100) Invalid parameter: the file is empty", "OAuthException")
        return None

    def handle_meta_send(self, app: MetaApp, auth: str | None,
                         body: dict[str, Any]) -> tuple[int | None, dict[str, Any] | TrickledAnswer]:
        """A Messenger or Instagram send call: `{"recipient": {"id"}, "message": {"text"}}`
        (Messenger also `messaging_type`), answered `{"recipient_id", "message_id"}`."""
        if auth != f"Bearer {app.access_token}":
            return 401, _error(190, "Invalid OAuth access token.", "OAuthException")
        recipient = (body.get("recipient") or {}).get("id") if isinstance(body.get("recipient"), dict) else None
        message = body.get("message") if isinstance(body.get("message"), dict) else {}
        text = message.get("text")
        if not isinstance(recipient, str) or not isinstance(text, str) or not text:
            return 400, _error(100, "(#100) The parameter recipient or message is required", "OAuthException")
        if app.provider == "messenger" and body.get("messaging_type") not in ("RESPONSE", "UPDATE", "MESSAGE_TAG"):
            return 400, _error(100, "(#100) messaging_type is required", "OAuthException")
        with self.lock:
            refusal = self._refusal(recipient)
            if refusal is not None:
                return refusal
            drop, slow_ms = self._after_send_faults(recipient)
        if self.config.send_latency_ms:
            time.sleep(self.config.send_latency_ms / 1000)
        now = time.time()
        mid = ("m_" if app.provider == "messenger" else "aWdf") + \
            hashlib.sha1(f"{now}{next(self.counter)}".encode()).hexdigest()[:24]
        callback = message.get("metadata") if app.provider == "messenger" else ""
        record = SendRecord(recipient, mid, str(callback or ""), now, app.provider)
        with self.lock:
            self.sends.append(record)
            self.conversations.setdefault((app.provider, recipient), []).append([now, False, False])
            plan = self._meta_plan(app, record)
        for when, action in plan:
            self.at(when, action)
        if slow_ms:
            time.sleep(slow_ms / 1000)
        if drop:
            return None, {}
        return 200, {"recipient_id": recipient, "message_id": mid}

    def _meta_plan(self, app: MetaApp, rec: SendRecord) -> list[tuple[float, Any]]:
        """A Messenger or Instagram message's fate. Lock held."""
        cfg, rng = self.config, self.rng
        fixed = cfg.slow_recipients.get(rec.recipient)
        latency_ms = fixed if fixed is not None else cfg.ack_median_ms * math.exp(cfg.ack_sigma * rng.gauss(0, 1))
        t_delivered = rec.at + latency_ms / 1000
        plan: list[tuple[float, Any]] = [(t_delivered, lambda: self.receive(rec))]
        if app.provider == "instagram":
            plan.append((rec.at + 0.005, lambda: self.post_meta(app, rec, "echo")))
        if rec.recipient in cfg.silent_recipients or rng.random() >= cfg.ack_prob:
            return plan
        read = rng.random() < cfg.read_prob
        t_read = t_delivered + cfg.read_delay_ms * math.exp(0.5 * rng.gauss(0, 1)) / 1000
        if app.provider == "messenger":
            with_mids = rng.random() < cfg.messenger_mids_prob
            plan.append((t_delivered, lambda: self.post_meta(app, rec, "delivery", with_mids)))
            if read:
                plan.append((t_read, lambda: self.post_meta(app, rec, "read")))
            if rng.random() < cfg.duplicate_prob:
                plan.append((t_delivered + 0.05, lambda: self.post_meta(app, rec, "delivery", with_mids)))
        elif read:
            plan.append((t_read, lambda: self.post_meta(app, rec, "seen")))
        return plan

    def _mark(self, rec: SendRecord, index: int) -> None:
        """Mark `rec` delivered (index 1) or read (2, which implies delivered). Lock held."""
        for m in self.conversations.get((rec.provider, rec.recipient), []):
            if m[0] == rec.at:
                m[index] = True
                m[1] = True

    def _watermark_ms(self, rec: SendRecord, index: int) -> int:
        """The watermark of a delivery (index 1) or read (2) receipt to `rec`'s
        person: every message to them stamped before it is delivered (read),
        as Meta documents it. Lock held."""
        pending = [m[0] for m in self.conversations.get((rec.provider, rec.recipient), []) if not m[index]]
        return int((min(pending) if pending else time.time()) * 1000)

    def post_meta(self, app: MetaApp, rec: SendRecord, kind: str, with_mids: bool = True, attempt: int = 1) -> None:
        """Post one Messenger/Instagram webhook about `rec`, signed with the app's secret."""
        page = {"id": app.account_id}
        person = {"id": rec.recipient}
        now_ms = int(time.time() * 1000)
        with self.lock:
            if kind == "delivery":
                item = {"sender": person, "recipient": page, "timestamp": now_ms,
                        "delivery": {"watermark": self._watermark_ms(rec, 1)}}
                if with_mids:
                    item["delivery"]["mids"] = [rec.wamid]
            elif kind == "read":
                self._mark(rec, 2)
                item = {"sender": person, "recipient": page, "timestamp": now_ms,
                        "read": {"watermark": self._watermark_ms(rec, 2)}}
            elif kind == "seen":
                self._mark(rec, 2)
                item = {"sender": person, "recipient": page, "timestamp": now_ms, "read": {"mid": rec.wamid}}
            else:  # echo of our own send
                item = {"sender": page, "recipient": person, "timestamp": now_ms,
                        "message": {"mid": rec.wamid, "is_echo": True, "text": "(echo)"}}
            if kind in ("delivery", "read", "seen"):
                self.acked.add(rec.wamid)
        payload = {"object": "page" if app.provider == "messenger" else "instagram",
                   "entry": [{"id": app.account_id, "time": now_ms, "messaging": [item]}]}
        self._post_signed(json.dumps(payload).encode(), app.app_secret.encode(),
                          lambda: self.post_meta(app, rec, kind, with_mids, attempt + 1), attempt)

    def _chance(self, prob: float) -> bool:
        """A draw from the seeded rng, made only for a non-zero share (so the
        other draws do not shift when no fault is asked for)."""
        return prob > 0 and self.rng.random() < prob

    def _refusal(self, recipient: str) -> tuple[int, dict[str, Any]] | None:
        """A fault answered instead of sending, if any. Lock held."""
        cfg = self.config
        queued_errors = cfg.send_errors.get(recipient)
        if queued_errors:
            code = queued_errors.pop(0)
            self.send_errors_returned += 1
            self.faults["send_error"] += 1
            return 400, _error(code, f"simulated error {code}", "OAuthException")
        if cfg.pair_rate_interval_ms > 0:
            now = time.time()
            tokens, at = self.pair_buckets.get(recipient, (float(cfg.pair_rate_burst), now))
            tokens = min(float(cfg.pair_rate_burst), tokens + (now - at) * 1000 / cfg.pair_rate_interval_ms)
            if tokens < 1.0:
                self.pair_buckets[recipient] = (tokens, now)
                kind, message = RANDOM_SEND_ERRORS[131056]
                self.send_errors_returned += 1
                self.faults[kind] += 1
                return 400, _error(131056, message, "OAuthException")
            self.pair_buckets[recipient] = (tokens - 1.0, now)
        queued_5xx = cfg.http_5xx.get(recipient)
        if queued_5xx:
            return self._http_5xx(queued_5xx.pop(0))
        for code, prob in ((130429, cfg.throughput_error_prob), (131056, cfg.pair_rate_limit_prob)):
            if self._chance(prob):
                kind, message = RANDOM_SEND_ERRORS[code]
                self.send_errors_returned += 1
                self.faults[kind] += 1
                return 400, _error(code, message, "OAuthException")
        if self._chance(cfg.http_5xx_prob):
            return self._http_5xx(self.rng.choice(sorted(HTTP_5XX_ERRORS)))
        return None

    def _http_5xx(self, status: int) -> tuple[int, dict[str, Any]]:
        self.faults["http_5xx"] += 1
        code, message = HTTP_5XX_ERRORS.get(status, HTTP_5XX_ERRORS[500])
        return status, _error(code, message, "OAuthException")

    def _after_send_faults(self, recipient: str) -> tuple[bool, float]:
        """Whether to drop the answer of a send that goes out, and how many ms
        to hold it back. Lock held."""
        cfg = self.config
        drop = False
        if cfg.drop_after_read.get(recipient, 0) > 0:
            cfg.drop_after_read[recipient] -= 1
            drop = True
        elif self._chance(cfg.drop_after_read_prob):
            drop = True
        slow_ms = 0.0
        queued_slow = cfg.slow_send_ms.get(recipient)
        if queued_slow:
            slow_ms = float(queued_slow.pop(0))
        elif self._chance(cfg.slow_send_prob):
            slow_ms = cfg.slow_send_prob_ms
        self.faults["drop_after_read"] += drop
        self.faults["slow_send"] += slow_ms > 0
        return drop, slow_ms

    def _plan(self, rec: SendRecord) -> list[tuple[float, Any]]:
        """Decide this message's fate: when the device receives it and which
        webhooks are posted when. Called with the lock held."""
        cfg, rng = self.config, self.rng
        t0 = rec.at
        fixed = cfg.slow_recipients.get(rec.recipient)
        latency_ms = fixed if fixed is not None else cfg.ack_median_ms * math.exp(cfg.ack_sigma * rng.gauss(0, 1))
        plan: list[tuple[float, Any]] = [(t0 + 0.005, lambda: self.post(rec, "sent"))]
        if rng.random() < cfg.fail_prob:
            plan.append((t0 + latency_ms / 1000, lambda: self.post(rec, "failed")))
            return plan
        plan.append((t0 + latency_ms / 1000, lambda: self.receive(rec)))
        if rec.recipient in cfg.silent_recipients or rng.random() >= cfg.ack_prob:
            return plan
        statuses = []
        if rng.random() < cfg.read_without_delivered_prob:
            statuses.append((latency_ms, "read"))
        else:
            statuses.append((latency_ms, "delivered"))
            if rng.random() < cfg.read_prob:
                statuses.append((latency_ms + cfg.read_delay_ms * math.exp(0.5 * rng.gauss(0, 1)), "read"))
        if len(statuses) == 2 and rng.random() < cfg.reorder_prob:
            (t1, s1), (t2, s2) = statuses
            statuses = [(t1, s2), (t2, s1)]
        for delay_ms, status in statuses:
            plan.append((t0 + delay_ms / 1000, lambda s=status: self.post(rec, s)))
            if rng.random() < cfg.duplicate_prob:
                plan.append((t0 + (delay_ms + 50) / 1000, lambda s=status: self.post(rec, s)))
        return plan

    def receive(self, rec: SendRecord) -> None:
        with self.lock:
            if rec.provider != "whatsapp":
                self._mark(rec, 1)  # on the device: covered by the next delivery watermark
            self.device.setdefault(rec.recipient, []).append(
                {"wamid": rec.wamid, "callback": rec.callback, "at": time.time()}
            )

    # ------------------------------------------------------------ webhooks

    def status_payload(self, rec: SendRecord, status: str) -> dict[str, Any]:
        st: dict[str, Any] = {
            "id": rec.wamid,
            "status": status,
            "timestamp": str(int(time.time())),
            "recipient_id": rec.recipient.lstrip("+"),
            "biz_opaque_callback_data": rec.callback,
        }
        if status == "failed":
            st["errors"] = [{"code": 131026, "title": "Message undeliverable", "message": "Message undeliverable",
                             "error_data": {"details": "Message Undeliverable."}}]
        else:
            st["conversation"] = {"id": "conv-" + rec.recipient, "origin": {"type": "service"}}
            st["pricing"] = {"billable": True, "pricing_model": "PMP", "category": "service"}
        return {
            "object": "whatsapp_business_account",
            "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550000000", "phone_number_id": "100000000000001"},
                "statuses": [st]}}]}],
        }

    def post(self, rec: SendRecord, status: str, attempt: int = 1) -> None:
        raw = json.dumps(self.status_payload(rec, status)).encode()
        if status in ("delivered", "read"):
            with self.lock:
                self.acked.add(rec.wamid)
        self._post_signed(raw, self.app_secret, lambda: self.post(rec, status, attempt + 1), attempt)

    def _post_signed(self, raw: bytes, secret: bytes, again: Any, attempt: int = 1) -> None:
        """POST a webhook body signed with `secret`; `again` posts it once
        more, as Meta retries a webhook not answered 200 (with backoff)."""
        signature = "sha256=" + hmac.new(secret, raw, hashlib.sha256).hexdigest()
        session = getattr(self.local, "session", None)
        if session is None:
            session = self.local.session = requests.Session()
        try:
            headers = {"Content-Type": "application/json", "X-Hub-Signature-256": signature}
            ok = session.post(self.webhook_url, data=raw, timeout=10, headers=headers).status_code == 200
        except requests.RequestException:
            ok = False
        with self.lock:
            self.webhooks_posted += 1
            self.webhooks_failed += 0 if ok else 1
        if not ok and attempt < 8 and not self.stopping:
            # Meta retries failed webhooks with backoff (for up to 7 days).
            self.at(time.time() + 0.2 * 2 ** (attempt - 1), again)

    # ------------------------------------------------------------ stats

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "sends": [asdict(s) for s in self.sends],
                "device": self.device,
                "acked_wamids": sorted(self.acked),
                "webhooks_posted": self.webhooks_posted,
                "webhooks_failed": self.webhooks_failed,
                "send_errors_returned": self.send_errors_returned,
                "faults": {kind: self.faults[kind] for kind in FAULT_KINDS},
                "pending_actions": len(self.timeline),
                "media": {**{k: self.media_counts[k] for k in MEDIA_COUNTS},
                          "media_ids": {phone: sorted(ids) for phone, ids in self.media.items()}},
            }

    def update_config(self, changes: dict[str, Any]) -> None:
        """Apply a JSON subset of `FakeConfig`, all or nothing.

        Raises:
            ValueError: an unknown key, or a value not of the field's type
                (a probability outside [0, 1], an HTTP status outside 5xx).
        """
        if not isinstance(changes, dict):
            raise ValueError("config changes must be a JSON object")
        known = {f.name for f in fields(FakeConfig)}
        unknown = set(changes) - known
        if unknown:
            raise ValueError(f"unknown config keys {sorted(unknown)}")
        hints = typing.get_type_hints(FakeConfig)
        for key, value in changes.items():
            if not _conforms(value, hints[key]):
                raise ValueError(f"`{key}` must be of type {hints[key]}, not {value!r}")
            if key.endswith("_prob") and not 0 <= value <= 1:
                raise ValueError(f"`{key}` is a share in [0, 1], not {value!r}")
            if key in ("media_latency_ms", "media_max_bytes", "upload_http_5xx") and value < 0:
                raise ValueError(f"`{key}` must not be negative, not {value!r}")
            if key == "http_5xx" and not all(500 <= st <= 599 for sts in value.values() for st in sts):
                raise ValueError("`http_5xx` statuses must be 5xx")
        with self.lock:
            for key, value in changes.items():
                setattr(self.config, key, value)
            if "seed" in changes:
                self.rng = random.Random(changes["seed"])


# Counters of `stats()["media"]`.
MEDIA_COUNTS = ("uploads", "upload_refused", "upload_http_5xx", "upload_errors", "sends_by_media_id",
                "sends_by_link", "unknown_media_id", "asset_fetches")
FAULT_KINDS = ("send_error", "throughput_error", "pair_rate_limit", "http_5xx", "drop_after_read", "slow_send",
               "answer_without_id", "trickle_answer")


@dataclass(frozen=True)
class TrickledAnswer:
    """An answer the handler writes one byte every `ms_per_byte` ms."""

    body: dict[str, Any]
    ms_per_byte: float


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a FakeConfig field's type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and _conforms(v, args[1]) for k, v in value.items())
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, int | float)
    return isinstance(value, hint)


def _error(code: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code,
                      "error_data": {"messaging_product": "whatsapp", "details": message},
                      "fbtrace_id": "A" + hashlib.md5(message.encode()).hexdigest()[:22]}}


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]] | None:
    """The fields of a `multipart/form-data` body: name -> (the part's
    Content-Type, its bytes); None when the body is not such a form."""
    if not content_type.lower().startswith("multipart/form-data"):
        return None
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    if not message.is_multipart():
        return None
    out: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            payload = part.get_payload(decode=True)
            out[name] = (part.get_content_type() if part.get("Content-Type") else None, payload or b"")
    return out


def make_handler(fake: FakeWhatsApp) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: without TCP_NODELAY every
        # answer waits for the client's delayed ACK (about 40 ms here).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet access log
            pass

        def _json(self, status: int | None, body: Any) -> None:
            if status is None:  # drop: no answer at all, the connection is closed
                self.close_connection = True
                return
            trickle_ms = body.ms_per_byte if isinstance(body, TrickledAnswer) else 0.0
            raw = json.dumps(body.body if isinstance(body, TrickledAnswer) else body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                if not trickle_ms:
                    self.wfile.write(raw)
                for i in range(len(raw) if trickle_ms else 0):  # a platform trickling its answer
                    self.wfile.write(raw[i:i + 1])
                    self.wfile.flush()
                    time.sleep(trickle_ms / 1000)
            except OSError:  # the client gave up waiting (a slow send)
                self.close_connection = True

        def _raw(self, status: int, content_type: str, body: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the client gave up (a file larger than it takes)
                self.close_connection = True

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            if self.path == "/_fake/stats":
                return self._json(200, fake.stats())
            if self.path == "/_fake/health":
                return self._json(200, {"ok": True})
            url = urllib.parse.urlsplit(self.path)
            match = ASSET_PATH.match(url.path)
            if match:
                query = urllib.parse.parse_qs(url.query)
                size = query.get("bytes", [""])[0]
                delay = query.get("delay_ms", [""])[0]
                if delay.isdigit():
                    time.sleep(min(int(delay), 60_000) / 1000)  # a slow media host (tests of preparation order)
                status, kind, body = asset(match["name"], int(size) if size.isdigit() else None)
                with fake.lock:
                    fake.media_counts["asset_fetches"] += 1
                return self._raw(status, kind, body)
            self._json(404, _error(100, "Unknown path", "GraphMethodException"))

        def do_POST(self) -> None:
            media = MEDIA_PATH.match(self.path)
            if media:
                length = int(self.headers.get("Content-Length") or 0)
                if length > MAX_UPLOAD_REQUEST_BYTES:
                    self.close_connection = True
                    return self._json(413, _error(100, "(#100) Invalid parameter: File Too Large", "OAuthException"))
                raw = self.rfile.read(length)
                status, answer = fake.handle_upload(media["phone"], self.headers.get("Authorization"),
                                                    self.headers.get("Content-Type") or "", raw)
                return self._json(status, answer)
            try:
                body = self._body()
            except ValueError:
                return self._json(400, _error(100, "Invalid JSON", "OAuthException"))
            if self.path == "/_fake/config":
                try:
                    fake.update_config(body)
                except ValueError as exc:
                    return self._json(400, {"error": str(exc)})
                return self._json(200, asdict(fake.config))
            if self.path == "/_fake/reset":
                fake.reset()
                return self._json(200, {"ok": True})
            match = SEND_PATH.match(self.path)
            if not match:
                return self._json(404, _error(100, "Unknown path", "GraphMethodException"))
            status, answer = fake.handle_send(match["phone"], self.headers.get("Authorization"), body)
            self._json(status, answer)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--webhook-url", required=True)
    parser.add_argument("--app-secret", default="local-app-secret")
    parser.add_argument("--access-token", default="local-access-token")
    parser.add_argument("--messenger", default="200000000000002:local-messenger-token:local-messenger-secret",
                        help="PAGE-ID:TOKEN:SECRET of the Messenger app")
    parser.add_argument("--instagram", default="300000000000003:local-instagram-token:local-instagram-secret",
                        help="IG-ID:TOKEN:SECRET of the Instagram app")
    parser.add_argument("--config", default="{}", help="JSON object: FakeConfig fields to override")
    args = parser.parse_args()
    config = FakeConfig()
    apps = tuple(MetaApp(provider, *spec.split(":", 2))
                 for provider, spec in (("messenger", args.messenger), ("instagram", args.instagram)))
    fake = FakeWhatsApp(args.webhook_url, args.app_secret, args.access_token, config, apps)
    fake.update_config(json.loads(args.config))
    server = ThreadingHTTPServer((args.host, args.port), make_handler(fake))
    server.daemon_threads = True

    def stop(*_: Any) -> None:
        fake.stopping = True
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    server.serve_forever()


if __name__ == "__main__":
    main()
