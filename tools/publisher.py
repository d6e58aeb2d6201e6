"""Publishing outbound messages: the producer side of baton.

One Pub/Sub message per chat message, `ordering_key` = room id (Pub/Sub then
pushes one message per room at a time, in publish order), attributes
`room_id` (the emulator's push envelope drops the ordering key), `provider`,
`recipient`, `message_id` (the producer's idempotency key), and data =
`{"type": "text", "text": ...}` as JSON.

CLI: `python -m tools.publisher WORKLOAD.jsonl` publishes a workload file,
one JSON object per line with `room_id`, `provider`, `recipient`,
`message_id`, `text`; PUBSUB_EMULATOR_HOST points it at the emulator.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from google.cloud import pubsub_v1


@dataclass(frozen=True)
class OutboundMessage:
    """One chat message to deliver. `text` at most 4096 characters.
    `deliver_at` (RFC 3339 with a zone) or `delay_s` (s after publishing):
    scheduled delivery, the message enters its room then (shared/scheduled.py)."""

    room_id: str
    provider: str
    recipient: str
    message_id: str
    text: str
    deliver_at: str | None = None
    delay_s: float | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> OutboundMessage:
        """Raises KeyError if a field is missing."""
        return cls(str(obj["room_id"]), str(obj["provider"]), str(obj["recipient"]), str(obj["message_id"]),
                   str(obj["text"]), obj.get("deliver_at"), obj.get("delay_s"))


class Publisher:
    """Publishes outbound messages with ordering keys.

    Args:
        project: GCP project id.
        topic: topic id (PUBSUB_TOPIC).
    """

    def __init__(self, project: str, topic: str) -> None:
        self._client = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
            # Small batches keep publish latency low while a burst still batches.
            batch_settings=pubsub_v1.types.BatchSettings(max_messages=500, max_latency=0.01),
        )
        self._topic = self._client.topic_path(project, topic)

    def publish(self, msg: OutboundMessage) -> futures.Future:
        """Publish one message; the future resolves to the Pub/Sub message id."""
        data = json.dumps({"type": "text", "text": msg.text}).encode()
        schedule = {k: str(v) for k, v in (("deliver_at", msg.deliver_at), ("delay_s", msg.delay_s)) if v is not None}
        return self._client.publish(
            self._topic, data, ordering_key=msg.room_id,
            room_id=msg.room_id, provider=msg.provider, recipient=msg.recipient, message_id=msg.message_id,
            **schedule,
        )

    def publish_all(self, messages: Iterable[OutboundMessage], on_published: Callable[[int], None] | None = None) -> int:
        """Publish every message and wait for all of them.

        Returns:
            How many were published.
        Raises:
            RuntimeError: some publishes failed (their ordering keys are resumed
                so a retry can go on; Pub/Sub pauses a key after a failure).
        """
        pending: list[tuple[OutboundMessage, futures.Future]] = []
        for msg in messages:
            pending.append((msg, self.publish(msg)))
        failed = []
        for i, (msg, fut) in enumerate(pending, 1):
            try:
                fut.result(timeout=120)
            except Exception as exc:  # noqa: BLE001 - collected and reported below
                failed.append((msg, exc))
                self._client.resume_publish(self._topic, msg.room_id)
            if on_published:
                on_published(i)
        if failed:
            raise RuntimeError(f"{len(failed)} publishes failed; first: {failed[0][1]!r}")
        return len(pending)


def read_workload(path: str) -> list[OutboundMessage]:
    """Read a workload file (JSON lines).

    Raises:
        ValueError: a line is not JSON or misses a field (with its line number).
    """
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(OutboundMessage.from_json(json.loads(line)))
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{path}:{n}: not a workload line ({exc})") from None
    return out


def main() -> None:
    from shared import config

    parser = argparse.ArgumentParser(description="Publish a workload file of outbound messages.")
    parser.add_argument("workload", help="JSON lines: room_id, provider, recipient, message_id, text")
    args = parser.parse_args()
    settings = config.load()
    messages = read_workload(args.workload)
    count = Publisher(settings.project, settings.pubsub_topic).publish_all(messages)
    print(f"published {count} messages to {settings.pubsub_topic}", file=sys.stderr)


if __name__ == "__main__":
    main()
