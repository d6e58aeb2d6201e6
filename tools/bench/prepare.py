"""`make bench-prepare`: preparation in parallel, sending in order (issue 14).

One room gets MESSAGES image messages, one every INTERVAL ms, each declaring
preparation (Pub/Sub attribute `prepare=media`, data `{"type": "image",
"link": <a PNG on the fake platform's /assets/>, "caption"}`): before its
turn, the `prepare` function fetches the file and uploads it to the fake
platform's media endpoint, which answers after PREPARE ms; the message is then
sent by its media id, and the fake acks every send after exactly ACK ms.
Pacing is off (PACE_INTERVAL_MS_WHATSAPP=0), so only preparation and acks
bound the room.

The same workload runs twice, each on a fresh local stack (tools/local/stack.py):

- `parallel`: PREPARE_AHEAD=8, the messages behind the head are prepared
  while the head is sent (the emulator dispatches one task per queue at a
  time and the stack has 4 prepare queues: at most 4 uploads at once);
- `sequential`: PREPARE_AHEAD=0, only the head is prepared, one after another.

From the event log (docs/event-log.md) it prints per mode: messages, acked,
per-room throughput (acked messages/s from the first `sent` to the last
`acked`), queueing delay publish -> first `sent` (`publish_to_send_ms`, p50
and worst), how often the head waited for its preparation (`preparing`),
whether first sends came in publish (seq) order and every message was acked
exactly once, wall time (first publish to last ack); then the ratios. Exit
status 1 if a message was lost (not acked) or sent out of order in any mode.

`--dry` validates the harness on code without preparation: the same run with
text messages and no `prepare` attribute (both modes then behave alike).

    python -m tools.bench.prepare --messages 200 --interval-ms 250 --prepare-ms 750 --ack-ms 100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from shared.events import TERMINAL_EVENTS
from tools.local.audit import epoch_s, percentile, read_events
from tools.local.demo import EndedTracker
from tools.local.stack import PROJECT, ROOT, TOPIC, Stack

ROOM = "bench-prepare-room"
RECIPIENT = "15557000001"
MODES = (("parallel", 8), ("sequential", 0))
# The fake platform: every send acked once, after a fixed latency; nothing else random.
FAKE_QUIET = {"ack_prob": 1.0, "fail_prob": 0.0, "duplicate_prob": 0.0, "reorder_prob": 0.0,
              "read_without_delivered_prob": 0.0, "read_prob": 0.0}


def message_ids(n: int) -> list[str]:
    """The workload's message ids, in publish order."""
    return [f"{ROOM}-m{i:04d}" for i in range(n)]


def publish(stack: Stack, n: int, interval_ms: float, dry: bool) -> list[float]:
    """Publish `n` messages to ROOM, one every `interval_ms` ms, with an
    ordering key; returns each one's publish time (epoch s, when the call was
    made). Image messages with `prepare=media` (text ones if `dry`).

    Raises:
        google.api_core.exceptions.GoogleAPICallError: a publish failed.
    """
    from google.cloud import pubsub_v1

    client = pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=1, max_latency=0.001))
    topic = client.topic_path(PROJECT, TOPIC)
    started, futures, stamps = time.monotonic(), [], []
    for i, mid in enumerate(message_ids(n)):
        delay = started + i * interval_ms / 1000 - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        attrs = {"room_id": ROOM, "provider": "whatsapp", "recipient": RECIPIENT, "message_id": mid}
        if dry:
            data = {"type": "text", "text": f"bench {i}"}
        else:
            data = {"type": "image", "link": f"{stack.fake_url}/assets/bench-{i:04d}.png", "caption": f"bench {i}"}
            attrs["prepare"] = "media"
        stamps.append(time.time())
        futures.append(client.publish(topic, json.dumps(data).encode(), ordering_key=ROOM, **attrs))
    for f in futures:
        f.result(timeout=120)
    return stamps


def wait_ended(event_log: Path, want: set[str], stall_s: float) -> int:
    """Wait until every message id in `want` has ended (or was rejected), or
    none ended for `stall_s` s; returns how many ended."""
    tracker, done, last = EndedTracker(event_log, want), 0, time.monotonic()
    while done < len(want) and time.monotonic() - last <= stall_s:
        now_done = tracker.poll()
        if now_done != done:
            done, last = now_done, time.monotonic()
        time.sleep(0.5)
    return done


def figures(events: list[dict[str, Any]], ids: list[str], publish_s: list[float]) -> dict[str, Any]:
    """The run's figures from its event lines (ROOM only).

    Returns a dict: `messages`, `acked` (distinct messages acked),
    `acked_exactly_once`, `lost` (published, never acked), `in_order` (the
    first `sent` of each message in publish order, and seqs rising with it),
    `throughput_per_s` (acked / s, first `sent` to last `acked`),
    `queue_p50_ms`, `queue_worst_ms` (publish -> first `sent`), `prepared`,
    `preparing`, `rejected` (event counts), `sent_after_prepared` (sends triggered by a
    finished preparation), `resends`, `wall_s` (first publish to last ack).
    """
    index = {mid: i for i, mid in enumerate(ids)}
    mine = [e for e in events if e["room_id"] == ROOM and e["message_id"] in index]
    first_sent: dict[str, dict[str, Any]] = {}
    for e in sorted((e for e in mine if e["event"] == "sent"), key=lambda e: epoch_s(e["ts"])):
        first_sent.setdefault(e["message_id"], e)
    acks = Counter(e["message_id"] for e in mine if e["event"] == "acked")
    by_time = sorted(first_sent.values(), key=lambda e: epoch_s(e["ts"]))
    order = [index[e["message_id"]] for e in by_time]
    seqs = [e["seq"] for e in by_time]
    in_order = order == sorted(order) and seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    delays = []
    for e in by_time:
        ms = e.get("publish_to_send_ms")
        delays.append(ms if ms is not None else (epoch_s(e["ts"]) - publish_s[index[e["message_id"]]]) * 1000)
    ack_times = [epoch_s(e["ts"]) for e in mine if e["event"] == "acked"]
    first_send = epoch_s(by_time[0]["ts"]) if by_time else None
    last_ack = max(ack_times) if ack_times else None
    span = (last_ack - first_send) if first_send is not None and last_ack is not None else 0.0
    kinds = Counter(e["event"] for e in mine)
    return {
        "messages": len(ids),
        "acked": len(acks),
        "acked_exactly_once": len(acks) == len(ids) and all(n == 1 for n in acks.values()),
        "lost": len(set(ids) - set(acks)),
        "not_sent": len(set(ids) - set(first_sent)),
        "in_order": in_order,
        "throughput_per_s": len(acks) / span if span > 0 else None,
        "queue_p50_ms": percentile(delays, 0.5),
        "queue_worst_ms": max(delays) if delays else None,
        "prepared": kinds["prepared"],
        "prepare_failed": kinds["prepare_failed"],
        "preparing": kinds["preparing"],
        "sent_after_prepared": sum(1 for e in mine if e["event"] == "sent" and e["trigger"] == "prepared"),
        "resends": kinds["resent"],
        "rejected": kinds["rejected"],
        "terminal_not_acked": sum(1 for e in mine if e["event"] in TERMINAL_EVENTS and e["event"] != "acked"),
        "wall_s": (last_ack - publish_s[0]) if last_ack is not None and publish_s else None,
    }


def run_mode(mode: str, ahead: int, args: argparse.Namespace, out: Path, console: Console) -> dict[str, Any]:
    """One run of the workload on a fresh stack with PREPARE_AHEAD=`ahead`; its figures."""
    event_log = out / f"prepare-events-{mode}.jsonl"
    event_log.unlink(missing_ok=True)
    env = {"PREPARE_AHEAD": str(ahead), "PACE_INTERVAL_MS_WHATSAPP": "0"}
    fake = {**FAKE_QUIET, "media_latency_ms": float(args.prepare_ms), "slow_recipients": {RECIPIENT: float(args.ack_ms)}}
    stack = Stack(ROOT / "run" / f"bench-prepare-{mode}", env=env, fake_config=fake, event_log=event_log)
    with console.status(f"[{mode}] starting the local stack..."):
        stack.start()
    try:
        os.environ.update(stack.client_env())
        ids = message_ids(args.messages)
        with console.status(f"[{mode}] publishing {args.messages} messages, one every {args.interval_ms:.0f} ms..."):
            publish_s = publish(stack, args.messages, args.interval_ms, args.dry)
        with console.status(f"[{mode}] waiting for every message to end..."):
            ended = wait_ended(event_log, set(ids), args.stall_s)
        if ended < len(ids):
            console.print(f"[red][{mode}] {len(ids) - ended} messages did not end "
                          f"({args.stall_s:.0f} s without progress)[/red]")
        media = _fake_media(stack)
    finally:
        with console.status(f"[{mode}] stopping the local stack..."):
            stack.stop()
    result = {"mode": mode, "prepare_ahead": ahead, "dry": args.dry,
              **figures(read_events(event_log), ids, publish_s), "fake_media": media}
    (out / f"prepare-{mode}.json").write_text(json.dumps(result, indent=2))
    return result


def _fake_media(stack: Stack) -> dict[str, int]:
    import requests

    media = requests.get(f"{stack.fake_url}/_fake/stats", timeout=10).json().get("media", {})
    return {k: v for k, v in media.items() if isinstance(v, int)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=200, help="messages published to the one room")
    parser.add_argument("--interval-ms", type=float, default=250.0, help="ms between two publishes")
    parser.add_argument("--prepare-ms", type=float, default=750.0, help="ms the fake's media upload takes")
    parser.add_argument("--ack-ms", type=float, default=100.0, help="ms from a send to its ack (fixed)")
    parser.add_argument("--stall-s", type=float, default=120.0,
                        help="s without a message ending after which a run stops waiting")
    parser.add_argument("--dry", action="store_true",
                        help="text messages without `prepare` (checks the harness on code without preparation)")
    parser.add_argument("--out", default=str(ROOT / "out" / "bench"))
    args = parser.parse_args(argv)
    console = Console()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = {mode: run_mode(mode, ahead, args, out, console) for mode, ahead in MODES}
    (out / "prepare.json").write_text(json.dumps(results, indent=2))

    kind = "text messages, no preparation (--dry)" if args.dry else f"images, upload {args.prepare_ms:.0f} ms"
    table = Table(title=f"bench-prepare: 1 room, {args.messages} {kind}, one every {args.interval_ms:.0f} ms, "
                        f"ack {args.ack_ms:.0f} ms")
    table.add_column("figure")
    for mode, ahead in MODES:
        table.add_column(f"{mode} (PREPARE_AHEAD={ahead})", justify="right")

    def num(v: Any, fmt: str = "{:.2f}") -> str:
        return "-" if v is None else fmt.format(v)

    def row(label: str, fmt: Any) -> None:
        table.add_row(label, *(fmt(results[m]) for m, _ in MODES))

    row("messages published / acked / lost (rejected)",
        lambda r: f"{r['messages']} / {r['acked']} / {r['lost']} ({r['rejected']})")
    row("per-room throughput, acked msgs/s (first send -> last ack)", lambda r: num(r["throughput_per_s"]))
    row("queueing delay publish -> first send, p50", lambda r: num(r["queue_p50_ms"], "{:,.0f} ms"))
    row("queueing delay publish -> first send, worst", lambda r: num(r["queue_worst_ms"], "{:,.0f} ms"))
    row("sent in seq order", lambda r: "yes" if r["in_order"] else "NO")
    row("every message acked exactly once", lambda r: "yes" if r["acked_exactly_once"] else "NO")
    row("prepared / prepare_failed events", lambda r: f"{r['prepared']} / {r['prepare_failed']}")
    row("head waited for its preparation (preparing)", lambda r: str(r["preparing"]))
    row("uploads made (fake platform)", lambda r: str(r["fake_media"].get("uploads", 0)))
    row("resends", lambda r: str(r["resends"]))
    row("wall time, first publish -> last ack", lambda r: num(r["wall_s"], "{:.1f} s"))
    console.print(table)
    par, seq = results["parallel"], results["sequential"]
    if par["throughput_per_s"] and seq["throughput_per_s"]:
        console.print(f"throughput parallel / sequential: {par['throughput_per_s'] / seq['throughput_per_s']:.2f}x")
    if par["queue_worst_ms"] and seq["queue_worst_ms"]:
        console.print(f"worst queueing delay sequential / parallel: {seq['queue_worst_ms'] / par['queue_worst_ms']:.2f}x")
    console.print(f"figures: {out / 'prepare.json'}")
    bad = [m for m, r in results.items() if r["lost"] or not r["in_order"] or not r["acked_exactly_once"]]
    if bad:
        console.print(f"[red]lost, duplicated or out-of-order messages in: {', '.join(bad)}[/red]")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
