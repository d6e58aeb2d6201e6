"""The load test's producer: ROOMS x MESSAGES text messages, published at
RATE messages/s with the room as ordering key (tools/local/publisher.py), message
`n` of every room before message `n + 1` of any, so every room has work
from the first second on. Message ids are `{run_id}-r{room}-m{n}`: the
verdict re-derives the published set from them."""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator

from tools.local.publisher import OutboundMessage


def workload(run_id: str, rooms: int, messages: int) -> Iterator[OutboundMessage]:
    """Every message of the run, round by round."""
    for n in range(1, messages + 1):
        for room in range(rooms):
            yield OutboundMessage(f"{run_id}-r{room:06d}", "whatsapp", f"1555{room:07d}", f"{run_id}-r{room:06d}-m{n}",
                                  f"load test message {n}")


def published_ids(run_id: str, rooms: int, messages: int) -> set[str]:
    """The message ids `workload` publishes."""
    return {m.message_id for m in workload(run_id, rooms, messages)}


def main(argv: list[str] | None = None) -> None:
    from tools.local.publisher import Publisher  # needs the Pub/Sub client; the plan does not

    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("project", "topic", "run-id"):
        parser.add_argument(f"--{name}", required=True)
    parser.add_argument("--rooms", type=int, required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--rate", type=float, required=True, help="messages/s")
    args = parser.parse_args(argv)
    publisher = Publisher(args.project, args.topic)
    batch, started, sent = [], time.monotonic(), 0
    per_tick = max(1, round(args.rate / 10))  # ten batches a second
    for message in workload(args.run_id, args.rooms, args.messages):
        batch.append(message)
        if len(batch) == per_tick:
            sent += publisher.publish_all(batch)
            batch = []
            time.sleep(max(0.0, started + sent / args.rate - time.monotonic()))
    sent += publisher.publish_all(batch)
    print(f"published {sent:,} messages in {time.monotonic() - started:.1f} s")


if __name__ == "__main__":
    main()
