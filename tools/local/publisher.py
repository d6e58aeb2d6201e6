"""The tools' own publishing (demo, benchmarks, audit): a thin layer over the
installable client, baton-client (client/, `baton_client`), which users use
in their own code (README, "Publishing").

`OutboundMessage` is a workload line: a text, or any other kind as its
contract `data` (`data`, e.g. a template); the client checks it against the
message contract (shared/contract) before publishing.

CLI: `python -m tools.local.publisher WORKLOAD.jsonl` publishes a workload file,
one JSON object per line with `room_id`, `provider`, `recipient`,
`message_id`, and `text` or `data` (optional `deliver_at`, `delay_s`);
PUBSUB_EMULATOR_HOST points it at the emulator.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

from baton_client import Message, Raw, Text
from baton_client import Publisher as ClientPublisher


@dataclass(frozen=True)
class OutboundMessage:
    """One chat message to deliver: `text` (a text message), or `data`, the
    contract's data object of any kind (then `text` is only a label).
    `deliver_at` (RFC 3339 with a zone) or `delay_s` (s after publishing):
    scheduled delivery, the message enters its room then (shared/scheduled.py)."""

    room_id: str
    provider: str
    recipient: str
    message_id: str
    text: str
    deliver_at: str | None = None
    delay_s: float | None = None
    data: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> OutboundMessage:
        """Raises KeyError if a field is missing."""
        data = obj.get("data")
        text = str(obj["text"]) if data is None else str(obj.get("text", data.get("type", "")))
        return cls(str(obj["room_id"]), str(obj["provider"]), str(obj["recipient"]), str(obj["message_id"]),
                   text, obj.get("deliver_at"), obj.get("delay_s"), data)

    def message(self) -> Message:
        """The client's `Message` for it."""
        content = Raw(self.data) if self.data is not None else Text(self.text)
        return Message(self.room_id, self.provider, self.recipient, self.message_id, content,
                       deliver_at=self.deliver_at, delay_s=self.delay_s)


class Publisher:
    """Publishes outbound messages with ordering keys through baton-client.

    Args:
        project: GCP project id.
        topic: topic id (PUBSUB_TOPIC).
    """

    def __init__(self, project: str, topic: str) -> None:
        self.client = ClientPublisher(project, topic)

    def publish(self, msg: OutboundMessage) -> futures.Future:
        """Publish one message; the future resolves to the Pub/Sub message id.

        Raises:
            baton_client.InvalidMessage: it breaks the contract (nothing published).
        """
        return self.client.publish(msg.message())

    def publish_all(self, messages: Iterable[OutboundMessage], on_published: Callable[[int], None] | None = None) -> int:
        """Publish every message and wait for all of them.

        Returns:
            How many were published.
        Raises:
            baton_client.InvalidBatch: some break the contract (nothing published).
            RuntimeError: some publishes failed (their ordering keys are resumed
                so a retry can go on; Pub/Sub pauses a key after a failure).
        """
        report = self.client.publish_many([m.message() for m in messages], on_published=on_published)
        if report.failed:
            raise RuntimeError(f"{len(report.failed)} publishes failed; first: {report.failed[0][1]!r}")
        return len(report.published)


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
            except (ValueError, KeyError, AttributeError) as exc:
                raise ValueError(f"{path}:{n}: not a workload line ({exc})") from None
    return out


def main() -> None:
    from shared import config

    parser = argparse.ArgumentParser(description="Publish a workload file of outbound messages.")
    parser.add_argument("workload", help="JSON lines: room_id, provider, recipient, message_id, text or data")
    args = parser.parse_args()
    settings = config.load()
    messages = read_workload(args.workload)
    count = Publisher(settings.project, settings.pubsub_topic).publish_all(messages)
    print(f"published {count} messages to {settings.pubsub_topic}", file=sys.stderr)


if __name__ == "__main__":
    main()
