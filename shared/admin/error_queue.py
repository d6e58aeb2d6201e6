"""The status error queue: list what it holds, replay it after a fix.

What lands there (shared/status_queue.py): a room's statuses that the `status`
function kept failing on (moved there after STATUS_MAX_ATTEMPTS failures, with
the error as the reason; in the cloud also what Pub/Sub's dead-letter policy
forwards), and records that can never reach a room (a status without a baton
delivery id, a message that does not parse), kept with their reason. The error queue is the pull subscription STATUS_TOPIC-error-queue on
the topic STATUS_TOPIC-dead-letter; it keeps messages for 7 days
(infra/ sets its retention; the local stack the same).

- `list` pulls without consuming: every message pulled is released again
  (ack deadline 0) at the end.
- `replay` publishes each room's statuses again to STATUS_TOPIC (ordering key
  = room id), and each recipient's receipts (Messenger, Instagram: ordering
  key `recipient:{provider}:{id}`, as the webhook published them), and then
  acks it in the error queue; a webhook post the inbound topic did not take
  (`kind` = `inbound`, shared/service/inbound.py) goes to INBOUND_TOPIC,
  unchanged, with its attributes and ordering key. A status applied twice
  changes its room once (shared/room/ de-duplicates and fences statuses),
  so a replay interrupted between the publish and the ack is safe to repeat.
  Unroutable records are never replayed (there is no room to send them to);
  they stay until their retention ends.

Used by the admin function (shared/admin/actions.py) for `baton statuses
list|replay`, on the local stack or in the cloud with the deployment's own
settings; `make statuses-list` and `make statuses-replay` run them on the
local stack.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.service.inbound import KIND_INBOUND
from shared.status_queue import (
    KIND_RECIPIENT_RECEIPTS,
    KIND_ROOM_STATUSES,
    KIND_UNROUTABLE,
    RecipientReceipts,
    RoomStatuses,
)

ERROR_QUEUE_SUFFIX = "-error-queue"
# Pub/Sub's attribute on a message it forwarded to a dead-letter topic
# (https://cloud.google.com/pubsub/docs/handling-failures#track-delivery-attempts).
DELIVERY_COUNT_ATTRIBUTE = "CloudPubSubDeadLetterSourceDeliveryCount"
PULL_BATCH = 100


@dataclass(frozen=True)
class ErrorRecord:
    """One message of the error queue. `room_id` is None for unroutable
    records and for receipts by recipient, which name `recipient_key`
    (`{provider}:{recipient}`) instead; `delivery_attempts` is how often the
    `status` function failed on it (None when it was put there directly);
    `published` is RFC 3339."""

    message_id: str
    kind: str
    room_id: str | None
    statuses: int
    reason: str
    delivery_attempts: int | None
    published: str
    data: str
    recipient_key: str | None = None

    @property
    def target(self) -> str | None:
        """What it is for: its room, or its recipient (`{provider}:{recipient}`)."""
        return self.room_id or self.recipient_key


def _record(received: Any) -> ErrorRecord:
    msg = received.message
    attrs = dict(msg.attributes)
    kind = attrs.get("kind", KIND_ROOM_STATUSES)
    room_id: str | None = None
    recipient: str | None = None
    count = 0
    if kind == KIND_INBOUND:
        # A webhook post the inbound topic did not take (shared/service/inbound.py): for its ordering key.
        recipient, count = attrs.get("ordering_key_wanted") or f"{attrs.get('provider')}:", int(attrs.get("items", 0))
    elif kind == KIND_RECIPIENT_RECEIPTS:
        try:
            receipts = RecipientReceipts.decode(msg.data)
            recipient, count = receipts.recipient_key, len(receipts.receipts)
        except ValueError as exc:
            kind, attrs["reason"] = KIND_UNROUTABLE, f"does not parse: {exc}"
    elif kind != KIND_UNROUTABLE:
        try:
            batch = RoomStatuses.decode(msg.data)
            room_id, count = batch.room_id, len(batch.statuses)
        except ValueError as exc:
            kind, attrs["reason"] = KIND_UNROUTABLE, f"does not parse: {exc}"
    attempts = attrs.get("attempts") or attrs.get(DELIVERY_COUNT_ATTRIBUTE)
    reason = attrs.get("reason") or (f"Pub/Sub could not deliver it in {attempts} attempts" if attempts else "")
    return ErrorRecord(msg.message_id, kind, room_id, count, reason, int(attempts) if attempts else None,
                       msg.publish_time.isoformat() if msg.publish_time else "", msg.data.decode("utf-8", "replace"),
                       recipient)


class ErrorQueue:
    """The status error queue of one project.

    Args:
        project: GCP project id.
        status_topic: STATUS_TOPIC; the error queue is its `-dead-letter`
            topic's `-error-queue` subscription.
        inbound_topic: INBOUND_TOPIC, where a replay sends the webhook
            posts kept here (`kind` = `inbound`).
        pull_timeout_s: how long one pull waits for messages, s.
    """

    def __init__(self, project: str, status_topic: str, pull_timeout_s: float = 5.0,
                 inbound_topic: str = "baton-inbound") -> None:
        import google.cloud.pubsub_v1 as pubsub_v1

        self._subscriber = pubsub_v1.SubscriberClient()
        self._publisher = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
        self.subscription = self._subscriber.subscription_path(project, f"{status_topic}{ERROR_QUEUE_SUFFIX}")
        self._topic = self._publisher.topic_path(project, status_topic)
        self._inbound_topic = self._publisher.topic_path(project, inbound_topic)
        self._pull_timeout_s = pull_timeout_s

    def _pull_all(self, limit: int) -> list[Any]:
        """Lease up to `limit` messages (each once), until a pull comes back empty."""
        got: dict[str, Any] = {}
        while len(got) < limit:
            response = self._subscriber.pull(
                request={"subscription": self.subscription, "max_messages": min(PULL_BATCH, limit - len(got))},
                timeout=self._pull_timeout_s)
            fresh = [m for m in response.received_messages if m.message.message_id not in got]
            if not fresh:
                break
            for m in fresh:
                got[m.message.message_id] = m
        return list(got.values())

    def _release(self, ack_ids: list[str]) -> None:
        for i in range(0, len(ack_ids), PULL_BATCH):
            self._subscriber.modify_ack_deadline(request={"subscription": self.subscription,
                                                          "ack_ids": ack_ids[i:i + PULL_BATCH], "ack_deadline_seconds": 0})

    def list(self, room: str | None = None, limit: int = 1000) -> list[ErrorRecord]:
        """What the error queue holds (at most `limit`, optionally one room's
        or one recipient's), oldest first; nothing is consumed."""
        received = self._pull_all(limit)
        try:
            records = [_record(m) for m in received]
        finally:
            self._release([m.ack_id for m in received])
        return sorted((r for r in records if room is None or r.target == room), key=lambda r: r.published)

    def replay(self, room: str | None = None, limit: int = 1000,
               on_replayed: Callable[[str], None] | None = None) -> dict[str, int]:
        """Publish each room's statuses and each recipient's receipts again to
        STATUS_TOPIC, oldest first, then remove them from the error queue.
        Returns counts: `replayed`, `unroutable` (kept), `other_rooms` (kept:
        `room`, a room id or a recipient key, was given). `on_replayed` is
        called with the room id or recipient key of each message as soon as
        it is published again, before it is removed from the error queue
        (the CLI logs `statuses_replayed` from it).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: a publish failed (what
                was not acked stays in the error queue; run it again).
        """
        received = self._pull_all(limit)
        keep: list[str] = []
        counts = {"replayed": 0, "unroutable": 0, "other_rooms": 0}
        try:
            for m in sorted(received, key=lambda m: (m.message.publish_time, m.message.message_id)):
                record = _record(m)
                if record.target is None:
                    counts["unroutable"] += 1
                    keep.append(m.ack_id)
                    continue
                if room is not None and record.target != room:
                    counts["other_rooms"] += 1
                    keep.append(m.ack_id)
                    continue
                if record.kind == KIND_INBOUND:
                    # To the inbound topic, unchanged, with its attributes (shared/service/inbound.py).
                    kept = {k: v for k, v in m.message.attributes.items()
                            if k not in ("kind", "reason", "ordering_key_wanted")}
                    self._publisher.publish(self._inbound_topic, m.message.data, ordering_key=record.recipient_key,
                                            replayed_from=record.message_id, **kept).result(timeout=30)
                    if on_replayed is not None:
                        on_replayed(record.target)
                    self._subscriber.acknowledge(request={"subscription": self.subscription, "ack_ids": [m.ack_id]})
                    counts["replayed"] += 1
                    continue
                if record.recipient_key is not None:
                    # As the webhook published them: ordered per recipient (shared/status_queue.py).
                    attrs = {"ordering_key": f"recipient:{record.recipient_key}", "kind": KIND_RECIPIENT_RECEIPTS,
                             "recipient_key": record.recipient_key}
                else:
                    attrs = {"ordering_key": record.target, "room_id": record.target, "kind": KIND_ROOM_STATUSES}
                self._publisher.publish(self._topic, m.message.data, replayed_from=record.message_id,
                                        **attrs).result(timeout=30)
                if on_replayed is not None:  # published: logged even if the ack below fails
                    on_replayed(record.target)
                self._subscriber.acknowledge(request={"subscription": self.subscription, "ack_ids": [m.ack_id]})
                counts["replayed"] += 1
        except BaseException:
            keep.extend(m.ack_id for m in received if m.ack_id not in keep)
            raise
        finally:
            self._release(keep)
        return counts
