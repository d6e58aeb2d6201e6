"""`make bench-hot-room`: does one full, hot room slow the other rooms down?

One room gets HOT messages at once while its capacity (MAX_QUEUED_MESSAGES) is
small, so most of its pushes are refused with 503 and come back by Pub/Sub's
retry; meanwhile COLD rooms get 2 messages each. The same cold workload also
runs alone first. Printed: the cold rooms' publish-to-first-send latency p50
and p99 (ms) alone and beside the hot room, their ratio, how many pushes the
hot room refused, and how long it took to drain. Nothing is lost: every
message of both runs must end.

    python -m tools.bench.hot_room --hot 100 --cold 300 --capacity 10
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from shared.events import TERMINAL_EVENTS
from tools.local.audit import epoch_s, make_workload, percentile, read_events
from tools.local.demo import EndedTracker, deliver
from tools.local.publisher import OutboundMessage, Publisher
from tools.local.stack import PROJECT, ROOT, TOPIC, Stack


def cold_latencies(events: list[dict], prefix: str) -> list[float]:
    return [e["publish_to_send_ms"] for e in events
            if e["event"] == "sent" and e["attempt"] == 1 and (e["room_id"] or "").startswith(prefix)]


def wait_ended(event_log: Path, want: set[str], stall_s: float) -> None:
    """Wait until every message id in `want` has ended.

    Raises:
        TimeoutError: none ended for `stall_s` s while some were left.
    """
    tracker, done, last = EndedTracker(event_log, want), 0, time.monotonic()
    while done < len(want):
        now_done = tracker.poll()
        if now_done != done:
            done, last = now_done, time.monotonic()
        if time.monotonic() - last > stall_s:
            raise TimeoutError(f"{len(want) - done} hot messages not ended after {stall_s:.0f} s without progress")
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description="One hot room beside many cold ones.")
    parser.add_argument("--hot", type=int, default=100, help="messages published at once to the hot room")
    parser.add_argument("--cold", type=int, default=300, help="cold rooms, 2 messages each")
    parser.add_argument("--capacity", type=int, default=10, help="MAX_QUEUED_MESSAGES of every room")
    parser.add_argument("--out", default=str(ROOT / "out" / "bench"))
    args = parser.parse_args()
    console = Console()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    event_log = out / "hot-room-events.jsonl"
    event_log.unlink(missing_ok=True)
    stack = Stack(ROOT / "run" / "bench-hot", event_log=event_log, fake_config={"ack_median_ms": 100.0},
                  env={"MAX_QUEUED_MESSAGES": str(args.capacity)})
    with console.status("starting the local stack..."):
        stack.start()
    try:
        alone = make_workload(args.cold, 2, seed=3, prefix="alone")
        with console.status(f"{len(alone)} cold messages alone..."):
            deliver(stack, alone, stall_s=60)
        hot = [OutboundMessage("hot-room", "whatsapp", "15550009999", f"hot-{i}", f"hot message {i}")
               for i in range(args.hot)]
        beside = make_workload(args.cold, 2, seed=4, prefix="beside")
        with console.status(f"{args.hot} hot messages, then {len(beside)} cold ones..."):
            started = time.monotonic()
            Publisher(PROJECT, TOPIC).publish_all(hot)
            deliver(stack, beside, stall_s=60)
            cold_done_s = time.monotonic() - started
            wait_ended(event_log, {m.message_id for m in hot}, stall_s=120)
            hot_done_s = time.monotonic() - started
    finally:
        with console.status("stopping the local stack..."):
            stack.stop()
    events = read_events(event_log)
    a, b = cold_latencies(events, "alone-"), cold_latencies(events, "beside-")
    refused = sum(1 for e in events if e["event"] == "backpressure" and e["room_id"] == "hot-room")
    hot_ended = [e for e in events if e["room_id"] == "hot-room" and e["event"] in TERMINAL_EVENTS]
    # By the time each send call started: a line is written when its call
    # returns, and an ack may start the next send before that.
    hot_order = [e["seq"] for e in sorted((e for e in events if e["room_id"] == "hot-room" and e["event"] == "sent"),
                                         key=lambda e: e["ts"])]
    first_end = min(epoch_s(e["ts"]) for e in hot_ended)
    last_end = max(epoch_s(e["ts"]) for e in hot_ended)
    table = Table(title=f"one hot room ({args.hot} messages, capacity {args.capacity}) beside {args.cold} cold rooms")
    table.add_column("figure")
    table.add_column("value", justify="right")
    a50, a99, b50, b99 = percentile(a, 0.5), percentile(a, 0.99), percentile(b, 0.5), percentile(b, 0.99)
    table.add_row("cold publish->send p50 / p99, alone (ms)", f"{a50:,.0f} / {a99:,.0f}")
    table.add_row("cold publish->send p50 / p99, beside the hot room (ms)", f"{b50:,.0f} / {b99:,.0f}")
    table.add_row("ratio beside / alone, p50 / p99", f"{b50 / a50:.2f} / {b99 / a99:.2f}")
    table.add_row("hot room: pushes refused (503, back-pressure)", f"{refused:,}")
    table.add_row("hot room: messages ended / sent in seq order", f"{len(hot_ended)} / {hot_order == sorted(hot_order)}")
    table.add_row("cold rooms done after (s) / hot room drained after (s)", f"{cold_done_s:.1f} / {hot_done_s:.1f}")
    table.add_row("hot room drain rate (messages/s)", f"{len(hot_ended) / max(last_end - first_end, 1e-9):.2f}")
    console.print(table)


if __name__ == "__main__":
    main()
