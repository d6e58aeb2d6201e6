"""The fake platform's core: its state (sends, devices, acks, counters), the
timeline of planned actions run by one scheduler thread, signed webhook
posting with Meta's retries, stats and run-time config changes.

Decides nothing about a message's fate; must not touch any wire format of a
send or a receipt (whatsapp.py, meta_messaging.py) nor inject faults (faults.py).
`receive` marks Messenger/Instagram messages on the device for their
watermarks (`_mark`, meta_messaging.py).
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import random
import threading
import time
import typing
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, fields
from typing import Any

import requests

from tools.sim.fake_platform.config import FakeConfig, _conforms


@dataclass
class SendRecord:
    """One message the platform accepted and sent (shown by `GET /_fake/stats` under `sends`)."""

    recipient: str
    wamid: str  # the platform's message id (a wamid, or a Messenger/Instagram mid)
    callback: str  # our delivery id where the wire format carries it (not Instagram's)
    at: float  # epoch s: the platform's stamp of the message
    provider: str = "whatsapp"
    kind: str = "text"  # the message's type: `text`, `image`, `template`, ... (Messenger/Instagram: the attachment's)
    media_id: str | None = None  # an image sent by media id
    sender: str = ""  # WhatsApp: the phone-number id in the send path (its statuses name it)
    body: dict[str, Any] | None = None  # the send call's JSON as received (FakeConfig.record_bodies)
    # WhatsApp, epoch s: when the call's request reached the fake's handler,
    # and the stamp its number's rate check counted it at (`number_rate_per_s`).
    received: float = 0.0
    counted: float = 0.0


@dataclass(frozen=True)
class MetaApp:
    """One Messenger or Instagram app: the id in its send path, its token and secret."""

    provider: str
    account_id: str
    access_token: str
    app_secret: str


class PlatformCore:
    """State of the fake platform and what every wire format shares (thread-safe)."""

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
        """Forget every record and counter (`POST /_fake/reset`); the config stays."""
        with self.lock:
            self.sends: list[SendRecord] = []
            self.device: dict[str, list[dict[str, Any]]] = {}
            self.acked: set[str] = set()  # wamids whose ack webhook was posted
            self.webhooks_posted = 0
            self.webhooks_failed = 0
            self.inbound_posted: list[dict[str, str]] = []  # replies and reactions posted (replies.py)
            self.send_errors_returned = 0  # Graph error answers (HTTP 400), queued or random
            self.faults: Counter[str] = Counter()  # faults injected, by kind
            # Messenger/Instagram: per person, [stamp, delivered, read] of each message (watermarks).
            self.conversations: dict[tuple[str, str], list[list[Any]]] = {}
            self.pair_buckets: dict[str, tuple[float, float]] = {}  # recipient -> (tokens, at epoch s)
            self.number_sends: dict[str, list[float]] = {}  # phone number id -> its sends' times in the last second
            # The sends refused 130429 by `number_rate_per_s`: {sender, callback, received, counted} (epoch s).
            self.throughput_refusals: list[dict[str, Any]] = []
            self.media: dict[str, dict[str, dict[str, Any]]] = {}  # phone id -> media id -> {type, bytes, sha256}
            self.media_counts: Counter[str] = Counter()  # uploads, refusals, sends by id / link, asset fetches

    # ------------------------------------------------------------ timeline

    def at(self, when: float, action: Any) -> None:
        """Run `action()` (on the webhook pool) at `when`, epoch s."""
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

    def receive(self, rec: SendRecord) -> None:
        """`rec`'s device receives it now (the device log judges ordering)."""
        with self.lock:
            if rec.provider != "whatsapp":
                self._mark(rec, 1)  # on the device: covered by the next delivery watermark
            self.device.setdefault(rec.recipient, []).append(
                {"wamid": rec.wamid, "callback": rec.callback, "at": time.time()}
            )

    # ------------------------------------------------------------ webhooks

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
                "throughput_refusals": list(self.throughput_refusals),
                "device": self.device,
                "acked_wamids": sorted(self.acked),
                "webhooks_posted": self.webhooks_posted,
                "inbound_posted": list(self.inbound_posted),
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
               "answer_without_id", "trickle_answer", "window_closed")


def _error(code: int, message: str, kind: str) -> dict[str, Any]:
    """A Graph API error body (https://developers.facebook.com/docs/graph-api/guides/error-handling)."""
    return {"error": {"message": message, "type": kind, "code": code,
                      "error_data": {"messaging_product": "whatsapp", "details": message},
                      "fbtrace_id": "A" + hashlib.md5(message.encode()).hexdigest()[:22]}}
