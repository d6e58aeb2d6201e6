"""Publishing to baton's topic with per-room order, cancelling a scheduled
message, and following outcomes.

Ordering: each message is published with ordering key = its room id and
message ordering on, so Pub/Sub delivers one room's messages in publish
order (https://cloud.google.com/pubsub/docs/ordering). When a publish of a
key fails, the Pub/Sub client pauses that key: every later publish of it
fails at once, so nothing of the room can overtake the failed message.
`publish_many` reports the failed messages in order and resumes their keys
(`resume_publish`), so publishing them again goes on in order
(https://cloud.google.com/pubsub/docs/publisher#ordering_keys, "resume_publish").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import pubsub_v1

from baton_client.contract import InvalidMessage
from baton_client.messages import Message

# Firestore collection of scheduled messages and their cancellations (baton's
# shared/records.py, SCHEDULED_CANCELS): a cancelled message ends as
# `skipped` when its time comes instead of entering its room.
SCHEDULED_CANCELS = "scheduled_cancels"


class InvalidBatch(ValueError):
    """Some messages of a `publish_many` break the contract; nothing was
    published. `invalid`: [(index in the batch, InvalidMessage)]."""

    def __init__(self, invalid: list[tuple[int, InvalidMessage]]) -> None:
        self.invalid = invalid
        first = invalid[0]
        super().__init__(f"{len(invalid)} invalid message(s); first, #{first[0]}: {first[1].reason}")


@dataclass
class PublishReport:
    """What `publish_many` did: `published` Pub/Sub message ids in input
    order, `failed` [(message, error)] in input order (their rooms' keys
    resumed: publish them again, in this order, to go on)."""

    published: list[str] = field(default_factory=list)
    failed: list[tuple[Message, BaseException]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


class Publisher:
    """Publishes `Message`s to baton's topic, checked against the contract first.

    Args:
        project: the GCP project id.
        topic: the topic id (baton's PUBSUB_TOPIC, e.g. `baton-outbound`).
        client: a `pubsub_v1.PublisherClient` with message ordering on (made
            here when None; PUBSUB_EMULATOR_HOST points it at the emulator).
        max_messages, max_latency_s: batch settings of a client made here:
            a batch goes when it has this many messages or is this old (s).
        validate: check each message before publishing (True). Turn it off
            only for messages already checked (`Message.errors()`).
    """

    def __init__(self, project: str, topic: str, *, client: Any | None = None, max_messages: int = 500,
                 max_latency_s: float = 0.01, validate: bool = True) -> None:
        self._client = client or pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=max_messages, max_latency=max_latency_s))
        self.project = project
        self.topic_path = self._client.topic_path(project, topic)
        self._validate = validate

    def publish(self, message: Message) -> futures.Future:
        """Publish one message (ordering key = its room); the future resolves
        to the Pub/Sub message id. If it fails, its room's key stays paused
        until `resume(message.room_id)`.

        Raises:
            InvalidMessage: it breaks the contract (every error at once); nothing is published.
        """
        if self._validate:
            data, attrs = message.encode()
        else:
            attrs, content = message.attributes(), message.content.to_data()
            data = json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        return self._client.publish(self.topic_path, data, ordering_key=message.room_id, **attrs)

    def resume(self, room_id: str) -> None:
        """Let a room's key publish again after a failed publish."""
        self._client.resume_publish(self.topic_path, room_id)

    def publish_many(self, messages: Iterable[Message], timeout_s: float = 120,
                     on_published: Callable[[int], None] | None = None) -> PublishReport:
        """Check every message, then publish them all (each room's in the
        order given) and wait for each, at most `timeout_s` s apiece.

        Raises:
            InvalidBatch: any message breaks the contract (all of them listed); nothing is published.
        """
        batch = list(messages)
        encoded: list[tuple[bytes, dict[str, str]]] = []
        invalid: list[tuple[int, InvalidMessage]] = []
        for i, m in enumerate(batch):
            try:
                encoded.append(m.encode())
            except InvalidMessage as exc:
                invalid.append((i, exc))
        if invalid:
            raise InvalidBatch(invalid)
        pending = [self._client.publish(self.topic_path, data, ordering_key=m.room_id, **attrs)
                   for m, (data, attrs) in zip(batch, encoded, strict=True)]
        report = PublishReport()
        paused: set[str] = set()
        for i, (m, fut) in enumerate(zip(batch, pending, strict=True), 1):
            try:
                report.published.append(fut.result(timeout=timeout_s))
            except Exception as exc:  # noqa: BLE001 - reported per message; the key is resumed below
                report.failed.append((m, exc))
                paused.add(m.room_id)
            if on_published:
                on_published(i)
        for room in paused:
            self.resume(room)
        return report

    def cancel(self, room_id: str, message_id: str, reason: str, actor: str = "baton-client", *,
               database: str = "(default)", firestore_client: Any | None = None) -> bool:
        """Cancel room `room_id`'s scheduled message `message_id` (`deliver_at` /
        `delay_s`) before its time: when it comes, baton ends it as `skipped`
        with `actor` and `reason` instead of letting it into its room (what
        `baton scheduled cancel ROOM_ID MESSAGE_ID` does). Other rooms'
        messages with the same id are not touched: a message id is unique per
        room only. Needs `pip install baton-client[cancel]` and write access
        to baton's Firestore database. Returns whether baton had recorded the
        message as waiting (False: not scheduled, or published before the
        record; it is cancelled either way).
        """
        if firestore_client is None:
            from google.cloud import firestore

            firestore_client = firestore.Client(project=self.project, database=database)
        ref = firestore_client.collection(SCHEDULED_CANCELS).document(scheduled_cancel_id(room_id, message_id))
        before = ref.get()
        fields: dict[str, Any] = {"message_id": message_id, "room_id": room_id, "actor": actor, "reason": reason,
                                  "at": datetime.now(UTC)}
        if not before.exists or (before.to_dict() or {}).get("expire_at") is None:
            fields["expire_at"] = None  # kept until the message has come and ended
        ref.set(fields, merge=True)
        return before.exists


def scheduled_cancel_id(room_id: str, message_id: str) -> str:
    """The document id of one scheduled message's record in SCHEDULED_CANCELS:
    sha256 of `"{room_id} {message_id}"` (neither holds a space: the
    contract), as baton's own records name it (a test holds the two equal)."""
    return hashlib.sha256(f"{room_id} {message_id}".encode()).hexdigest()


class OutcomesUnavailable(RuntimeError):
    """The deployment has no outcomes topic."""


def subscribe_outcomes(project: str, subscription: str, callback: Callable[[dict[str, Any]], None], *,
                       topic: str = "baton-outcomes", subscriber: Any | None = None,
                       publisher: Any | None = None) -> futures.Future:
    """Follow the messages' outcomes (acked, timed out, failed with the
    platform's reason, dead-lettered, skipped, cancelled), which the
    deployment publishes to `topic` (Terraform: `NAME_PREFIX-outcomes`,
    output `outcomes_topic`; on unless `publish_outcomes = false`): creates
    `subscription` on it if missing, with message ordering (each room's
    outcomes in order: the ordering key is the room id), then calls
    `callback(outcome)` with each outcome as a dict (acking it after the
    callback returns; an exception nacks it, and it comes again). Returns
    the streaming pull future (`.cancel()` stops it).

    An outcome: `{"outcome_id": "ROOM/MESSAGE", "outcome", "room_id",
    "message_id", "seq", "provider", "provider_message_id", "attempts",
    "status", "error_code", "error_title", "reason", "actor", "ended_at",
    "published_at", "send_to_ack_ms"}` (baton's shared/outcomes.py). Pub/Sub
    delivers at least once: de-duplicate on `outcome_id`.

    Raises:
        OutcomesUnavailable: `topic` does not exist in `project`.
    """
    publisher = publisher or pubsub_v1.PublisherClient()
    subscriber = subscriber or pubsub_v1.SubscriberClient()
    topic_path = publisher.topic_path(project, topic)
    try:
        publisher.get_topic(request={"topic": topic_path})
    except gexc.NotFound:
        raise OutcomesUnavailable(f"no outcomes topic {topic_path}: this deployment does not publish outcomes "
                                  f"(follow them in the delivery event log instead)") from None
    sub_path = subscriber.subscription_path(project, subscription)
    try:
        subscriber.create_subscription(request={"name": sub_path, "topic": topic_path,
                                                "enable_message_ordering": True})
    except gexc.AlreadyExists:
        pass

    def on_message(msg: Any) -> None:
        try:
            callback(json.loads(msg.data))
        except Exception:  # noqa: BLE001 - the outcome comes again
            msg.nack()
            raise
        msg.ack()

    return subscriber.subscribe(sub_path, callback=on_message)
