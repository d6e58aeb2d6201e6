"""The status queue (WEBHOOK_MODE=queued): what the `webhook` function
publishes and the `status` function applies.

A platform's status webhook is answered as soon as its signature and shape are
checked and its statuses are safely in Pub/Sub: one message per room per
payload, ordering key = room id, on STATUS_TOPIC. The `status` function
receives them by an ordered push subscription and applies them to the rooms
with the same rules as the direct path (fencing by incarnation/seq/attempt,
duplicates, late acks: shared/room/).

The error queue is the topic STATUS_TOPIC-dead-letter, kept by a pull
subscription and listed and replayed by `baton statuses`. Three ways in:
- a message the `status` function fails on with a non-transient error
  (a bug) STATUS_MAX_ATTEMPTS times: the function counts the failures itself
  and moves it there with the error as its reason (this works on the
  emulator too, whose ordered push subscriptions cannot dead-letter: see
  docs/architecture.md, "Status webhooks");
- in the cloud, a message Pub/Sub could not deliver in the subscription's
  (higher) maximum attempts, forwarded by its dead-letter policy;
- a status whose room cannot be known (no baton delivery id), or a message
  that does not parse: published there at once, with the reason.

Wire format of a status-queue message (data, UTF-8 JSON)::

    {"room_id": "r-1", "received_at_us": 1763800000000000,
     "statuses": [{"delivery_id": "3.1.1763799999000.1.r-1", "status": "delivered",
                   "provider": "whatsapp", "provider_message_id": "wamid.X",
                   "error_code": null, "error_title": null, "sender": "106540352242922"}]}

(`sender`, the WhatsApp number the status came from, may be absent or null:
messages queued before it was added are read as "not said".)

attributes: `room_id` (the emulator's push envelope has no `orderingKey`,
as measured on the Pub/Sub emulator: shared/push.py), `kind` = `room_statuses`. In the error queue, the
messages baton puts there carry `reason` (and `attempts` when they failed),
with `kind` = `unroutable` when no room can take them; the ones Pub/Sub
forwards keep their attributes and gain `CloudPubSubDeadLetterSourceDeliveryCount`
(https://cloud.google.com/pubsub/docs/handling-failures#track-delivery-attempts).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import Any

from shared.counted import counted_publisher
from shared.firestore_calls import FirestoreCalls
from shared.providers.registry import WHATSAPP

KIND_ROOM_STATUSES = "room_statuses"
# Failed deliveries of status-queue messages, by Pub/Sub message id.
STATUS_FAILURES = "status_failures"
KIND_UNROUTABLE = "unroutable"
# Messenger/Instagram receipts name a recipient, not a room: keyed by recipient.
KIND_RECIPIENT_RECEIPTS = "recipient_receipts"
# What the publishes of one webhook call may take before it answers 503 and the
# platform sends the payload again, s (Meta retries a webhook answered with
# anything but 200 for up to 7 days:
# https://developers.facebook.com/docs/whatsapp/cloud-api/guides/set-up-webhooks).
PUBLISH_TIMEOUT_S = 8.0


class StatusPublishFailed(RuntimeError):
    """A status could not be put in Pub/Sub: the webhook must answer 5xx so
    the platform sends it again."""


@dataclass(frozen=True)
class QueuedStatus:
    """One platform status bound for a room. `delivery_id` is baton's
    (shared/room/ `make_delivery_id`)."""

    delivery_id: str
    status: str
    provider: str = WHATSAPP  # the platform whose webhook reports statuses by delivery id
    provider_message_id: str | None = None
    error_code: int | None = None
    error_title: str | None = None
    sender: str | None = None  # WhatsApp: the phone-number id it came from (`metadata.phone_number_id`)


@dataclass(frozen=True)
class RoomStatuses:
    """The statuses of one webhook payload for one room, in payload order;
    `received_at_us` is when the webhook got them (epoch us)."""

    room_id: str
    received_at_us: int
    statuses: tuple[QueuedStatus, ...]

    def encode(self) -> bytes:
        """The message data: UTF-8 JSON (module docstring)."""
        return json.dumps({"room_id": self.room_id, "received_at_us": self.received_at_us,
                           "statuses": [asdict(s) for s in self.statuses]}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> RoomStatuses:
        """Parse message data.

        Raises:
            ValueError: not the wire format of the module docstring.
        """
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("room_id"), str) \
                or not isinstance(doc.get("received_at_us"), int) or not isinstance(doc.get("statuses"), list):
            raise ValueError("expected {room_id: str, received_at_us: int, statuses: [...]}")
        out = []
        for s in doc["statuses"]:
            if not (isinstance(s, dict) and isinstance(s.get("delivery_id"), str) and isinstance(s.get("status"), str)):
                raise ValueError("each status needs string `delivery_id` and `status`")
            code = s.get("error_code")
            title = s.get("error_title")
            pmid = s.get("provider_message_id")
            provider = s.get("provider", WHATSAPP)  # queued before the provider was kept: WhatsApp's
            if not isinstance(provider, str):
                raise ValueError("`provider` must be a string")
            sender = s.get("sender")  # absent in messages queued before senders were matched per attempt
            out.append(QueuedStatus(s["delivery_id"], s["status"], provider,
                                    pmid if isinstance(pmid, str) else None,
                                    code if isinstance(code, int) and not isinstance(code, bool) else None,
                                    title if isinstance(title, str) else None,
                                    sender if isinstance(sender, str) else None))
        return cls(doc["room_id"], doc["received_at_us"], tuple(out))


@dataclass(frozen=True)
class RecipientReceipts:
    """The receipts of one webhook payload for one recipient (Messenger,
    Instagram), in payload order: `recipient_key` is `{provider}:{recipient}`
    (shared/room/ `recipient_key`); each receipt is `{"provider",
    "recipient", "status", "watermark_us", "mids"}`. Published with ordering
    key `recipient:{recipient_key}` and attribute `kind` =
    `recipient_receipts`; the `status` function finds the rooms."""

    recipient_key: str
    received_at_us: int
    receipts: tuple[dict[str, Any], ...]

    @classmethod
    def of(cls, key: str, received_at_us: int, receipts: Iterable[Any]) -> RecipientReceipts:
        """From `shared.room.RecipientReceipt` events of one recipient."""
        return cls(key, received_at_us, tuple({"provider": r.provider, "recipient": r.recipient, "status": r.status,
                                               "watermark_us": r.watermark_us, "mids": list(r.mids)}
                                              for r in receipts))

    def events(self) -> list[Any]:
        """The receipts as `shared.room.RecipientReceipt` events, received at `received_at_us`."""
        from shared.room import RecipientReceipt

        return [RecipientReceipt(r["provider"], r["recipient"], r["status"], r["watermark_us"], tuple(r["mids"]),
                                 self.received_at_us) for r in self.receipts]

    @property
    def ordering_key(self) -> str:
        return f"recipient:{self.recipient_key}"

    def encode(self) -> bytes:
        return json.dumps({"recipient_key": self.recipient_key, "received_at_us": self.received_at_us,
                           "receipts": list(self.receipts)}, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> RecipientReceipts:
        """Parse message data.

        Raises:
            ValueError: not this wire format.
        """
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("recipient_key"), str) \
                or not isinstance(doc.get("received_at_us"), int) or not isinstance(doc.get("receipts"), list):
            raise ValueError("expected {recipient_key: str, received_at_us: int, receipts: [...]}")
        for r in doc["receipts"]:
            ok = isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("provider", "recipient", "status")) \
                and (r.get("watermark_us") is None or isinstance(r.get("watermark_us"), int)) \
                and isinstance(r.get("mids"), list) and all(isinstance(m, str) for m in r["mids"])
            if not ok:
                raise ValueError("each receipt needs provider, recipient, status, watermark_us and mids")
        return cls(doc["recipient_key"], doc["received_at_us"], tuple(doc["receipts"]))


@dataclass(frozen=True)
class Unroutable:
    """Something the status queue cannot hand to a room (a status without a
    baton delivery id, a message that does not parse): kept in the error queue
    with its reason. `record` is JSON-able."""

    reason: str
    record: dict[str, Any]


class StatusQueue:
    """The status queue's adapter: publishes room statuses to STATUS_TOPIC
    (ordered by room) and records to the error queue, waiting until Pub/Sub
    has each; counts the failed deliveries of a status-queue message in
    Firestore (`status_failures/{pubsub message id}`, written only when one
    fails).

    Args:
        project: GCP project id.
        topic: STATUS_TOPIC.
        error_topic: the error queue (STATUS_TOPIC-dead-letter).
        db: the Firestore client (google.cloud.firestore.Client).
        retention_hours: how far ahead a failure count's `expire_at` (TTL) is set.
        timeout_s: how long to wait for all publishes of one call, s.
    """

    def __init__(self, project: str, topic: str, error_topic: str, db: Any = None, retention_hours: int = 48,
                 timeout_s: float = PUBLISH_TIMEOUT_S) -> None:
        import google.cloud.pubsub_v1 as pubsub_v1
        from google.cloud.pubsub_v1.types import BatchSettings, PublisherOptions

        # A webhook waits for its publishes: no batching delay (the default
        # waits up to 10 ms for a batch to fill).
        self._client = counted_publisher(pubsub_v1.PublisherClient(  # each publish counted (shared/counted.py)
            batch_settings=BatchSettings(max_latency=0.001),
            publisher_options=PublisherOptions(enable_message_ordering=True, timeout=timeout_s)))
        self._topic = self._client.topic_path(project, topic)
        self._error_topic = self._client.topic_path(project, error_topic)
        self._timeout_s = timeout_s
        self._db = db
        self._fs = FirestoreCalls(db, {})  # the failure counts' calls, counted
        self._retention_hours = retention_hours

    def record_failure(self, pubsub_message_id: str, room_id: str, error: str) -> int:
        """Count one failed delivery of a status-queue message; returns the
        count so far (1 on the first failure).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore failed (the
                caller answers 503: the delivery is retried and not counted).
        """
        from datetime import UTC, datetime, timedelta

        from google.cloud import firestore

        ref = self._db.collection(STATUS_FAILURES).document(pubsub_message_id)
        self._fs.set(ref, {"count": firestore.Increment(1), "room_id": room_id, "last_error": error[:1000],
                           "expire_at": datetime.now(UTC) + timedelta(hours=self._retention_hours)}, merge=True)
        snap = self._fs.get(ref)
        return int(snap.get("count"))

    def dead_letter(self, data: bytes, room_id: str, reason: str, attempts: int,
                    kind: str = KIND_ROOM_STATUSES) -> None:
        """Move a status-queue message that keeps failing to the error queue,
        with its reason and how often it failed.

        Raises:
            StatusPublishFailed: Pub/Sub did not take it.
        """
        try:
            self._client.publish(self._error_topic, data, kind=kind, room_id=room_id,
                                 reason=reason[:500], attempts=str(attempts)).result(timeout=self._timeout_s)
        except Exception as exc:  # noqa: BLE001
            raise StatusPublishFailed(f"could not move a status-queue message to the error queue: {exc!r}") from exc

    def publish(self, batches: Iterable[RoomStatuses], unroutable: Iterable[Unroutable] = (),
                receipts: Iterable[RecipientReceipts] = ()) -> int:
        """Publish every batch and unroutable record; returns how many messages.

        Raises:
            StatusPublishFailed: any publish failed or timed out (the others may
                have been published: the statuses are idempotent in the room).
        """
        pending: list[tuple[Any, str]] = []
        for b in batches:
            pending.append((self._client.publish(self._topic, b.encode(), ordering_key=b.room_id,
                                                 room_id=b.room_id, kind=KIND_ROOM_STATUSES), b.room_id))
        for r in receipts:
            pending.append((self._client.publish(self._topic, r.encode(), ordering_key=r.ordering_key,
                                                 kind=KIND_RECIPIENT_RECEIPTS, recipient_key=r.recipient_key),
                            r.ordering_key))
        for u in unroutable:
            pending.append((self._client.publish(self._error_topic, json.dumps(u.record, default=str).encode(),
                                                 kind=KIND_UNROUTABLE, reason=u.reason[:500]), ""))
        errors = []
        for future, key in pending:
            try:
                future.result(timeout=self._timeout_s)
            except Exception as exc:  # noqa: BLE001 - any failure means: ask the platform to retry
                errors.append(exc)
                if key:
                    # An ordered publish that failed pauses its key until resumed.
                    self._client.resume_publish(self._topic, key)
        if errors:
            raise StatusPublishFailed(f"{len(errors)} of {len(pending)} publishes failed: {errors[0]!r}"[:300])
        return len(pending)
