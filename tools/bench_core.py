"""`make bench-core`: capacity, hand-over latency and Firestore cost per message
on the local stack, beside the Firestore emulator's raw transaction rate
measured in the same run.

1. raw rate: read-and-write Firestore transactions on distinct documents,
   one thread, against this run's emulator;
2. capacity: a burst of ROOMS x BURST messages published at once; the
   sustained rate of messages ended (acked, timed out, failed), between the
   10th and the 90th percentile of end times;
3. hand-over: messages published at half that capacity, in per-room bursts
   so rooms have a queue; the delay from an ack webhook's arrival to the next
   send call of that room (the `sent` events with trigger `ack`);
4. cost: Firestore reads and writes, Cloud Tasks creates and function
   invocations per ended message, from the functions' invocation records.

The fake platform's ack latency is log-normal with a 100 ms median.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from pathlib import Path

from google.cloud import firestore
from rich.console import Console
from rich.table import Table

from shared.events import TERMINAL_EVENTS
from tools.audit import epoch_s, make_workload, percentile, read_events
from tools.demo import deliver
from tools.publisher import OutboundMessage, Publisher
from tools.stack import PROJECT, ROOT, TOPIC, Stack


def raw_transaction_rate(n: int) -> float:
    """Read-and-write transactions per second on distinct documents, one thread."""
    db = firestore.Client(project=PROJECT)
    refs = [db.collection("bench_raw").document(f"d{i}-{time.time_ns()}") for i in range(n)]

    @firestore.transactional
    def bump(txn: firestore.Transaction, ref: firestore.DocumentReference) -> None:
        snap = ref.get(transaction=txn)
        txn.set(ref, {"n": (snap.get("n") if snap.exists else 0) + 1, "pad": "x" * 200})

    for ref in refs[:20]:  # warm the channel
        bump(db.transaction(), ref)
    started = time.perf_counter()
    for ref in refs[20:]:
        bump(db.transaction(), ref)
    return (n - 20) / (time.perf_counter() - started)


def end_times(events: list[dict], prefix: str) -> list[float]:
    return sorted(epoch_s(e["ts"]) for e in events
                  if e["event"] in TERMINAL_EVENTS and (e["room_id"] or "").startswith(prefix))


def paced_workload(rooms: int, burst: int, rate: float, seconds: float, prefix: str, seed: int) -> list[tuple[float, OutboundMessage]]:
    """(offset s, message): bursts of `burst` back-to-back messages per room,
    bursts spread uniformly over `seconds`, `rate` messages/s overall."""
    rng = random.Random(seed)
    n_bursts = max(1, int(rate * seconds / burst))
    out = []
    counters: Counter[int] = Counter()
    for b in range(n_bursts):
        r = rng.randrange(rooms)
        t = b * burst / rate
        for _ in range(burst):
            counters[r] += 1
            room = f"{prefix}-{r:05d}"
            k = counters[r]
            out.append((t, OutboundMessage(room, "whatsapp", f"1556{r:07d}", f"{room}-m{k}", f"bench {k}")))
    return out


def publish_paced(plan: list[tuple[float, OutboundMessage]]) -> None:
    publisher = Publisher(PROJECT, TOPIC)
    started = time.monotonic()
    futures = []
    for offset, m in plan:
        delay = started + offset - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        futures.append(publisher.publish(m))
    for f in futures:
        f.result(timeout=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=3, help="messages per room in the capacity burst")
    parser.add_argument("--half-seconds", type=float, default=40.0, help="duration of the half-capacity run, s")
    parser.add_argument("--raw-n", type=int, default=400)
    parser.add_argument("--out", default=str(ROOT / "out" / "bench"))
    args = parser.parse_args()
    console = Console()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    event_log = out / "core-events.jsonl"
    event_log.unlink(missing_ok=True)
    stack = Stack(ROOT / "run" / "bench", event_log=event_log, fake_config={"ack_median_ms": 100.0})
    with console.status("starting the local stack..."):
        stack.start()
    try:
        os.environ.update(stack.client_env())
        with console.status("raw Firestore transaction rate..."):
            raw = raw_transaction_rate(args.raw_n)
        console.print(f"raw read+write transactions, distinct documents, one thread: {raw:.1f}/s")

        burst = make_workload(args.rooms, args.burst, seed=11, prefix="cap")
        with console.status(f"capacity: {len(burst):,} messages at once..."):
            deliver(stack, burst, stall_s=60)
        ends = end_times(read_events(event_log), "cap-")
        lo, hi = ends[int(len(ends) * 0.1)], ends[int(len(ends) * 0.9)]
        capacity = (int(len(ends) * 0.9) - int(len(ends) * 0.1)) / (hi - lo)
        console.print(f"capacity: {capacity:.1f} messages ended/s")

        rate = capacity / 2
        plan = paced_workload(args.rooms, 3, rate, args.half_seconds, "half", seed=5)
        with console.status(f"half capacity: {len(plan):,} messages at {rate:.1f}/s in room bursts of 3..."):
            publish_paced(plan)
            want = {m.message_id for _, m in plan}
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                done = {e["message_id"] for e in read_events(event_log) if e["event"] in TERMINAL_EVENTS}
                if want <= done:
                    break
                time.sleep(0.5)
        events = read_events(event_log)
        half = [e for e in events if (e["room_id"] or "").startswith("half-")]
        handover = [e["trigger_to_send_ms"] for e in half if e["event"] == "sent" and e["trigger"] == "ack"]
        ended_half = end_times(events, "half-")
        achieved = len(ended_half) / (ended_half[-1] - ended_half[0]) if len(ended_half) > 1 else 0.0
    finally:
        with console.status("stopping the local stack..."):
            stack.stop()

    invocations = [json.loads(line) for line in (stack.run_dir / "invocations.jsonl").open()]
    ended = sum(1 for e in events if e["event"] in TERMINAL_EVENTS)
    acked = sum(1 for e in events if e["event"] == "acked")
    totals = Counter()
    for inv in invocations:
        for k in ("firestore_reads", "firestore_writes", "tasks_created", "send_calls"):
            totals[k] += inv[k]
        totals[f"inv_{inv['function']}"] += 1
    result = {
        "rooms": args.rooms,
        "raw_firestore_txn_per_s": raw,
        "capacity_msgs_per_s": capacity,
        "capacity_over_raw": capacity / raw,
        "half_rate_target_per_s": rate,
        "half_rate_achieved_per_s": achieved,
        "handover_samples": len(handover),
        "handover_p50_ms": percentile(handover, 0.5),
        "handover_p99_ms": percentile(handover, 0.99),
        "ended_messages": ended,
        "acked_share": acked / ended if ended else None,
        **{f"{k}_per_message": v / ended for k, v in totals.items()},
    }
    (out / "core.json").write_text(json.dumps(result, indent=2))
    table = Table(title=f"bench-core: {args.rooms:,} rooms, ack latency median 100 ms")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    table.add_row("Firestore emulator raw txn/s (read+write, distinct docs)", f"{raw:.1f}", "")
    table.add_row("capacity, messages ended/s", f"{capacity:.1f}", f">= {raw / 3:.1f}")
    table.add_row("capacity / raw", f"{capacity / raw:.2f}", ">= 0.33")
    table.add_row("half-capacity run: target / achieved msgs/s", f"{rate:.1f} / {achieved:.1f}", "")
    table.add_row(f"ack -> next send p50 ({len(handover)} hand-overs)", ms(result["handover_p50_ms"]), "<= 30 ms")
    table.add_row("ack -> next send p99", ms(result["handover_p99_ms"]), "<= 150 ms")
    table.add_row("Firestore reads per ended message", f"{result['firestore_reads_per_message']:.2f}", "<= 5")
    table.add_row("Firestore writes per ended message", f"{result['firestore_writes_per_message']:.2f}", "<= 3")
    table.add_row("Cloud Tasks creates per ended message", f"{result['tasks_created_per_message']:.2f}", "")
    for fn in ("enqueue", "webhook", "timeout", "sweep"):
        table.add_row(f"{fn} invocations per ended message", f"{result.get(f'inv_{fn}_per_message', 0):.2f}", "")
    table.add_row("acked share", f"{result['acked_share']:.3f}", "")
    console.print(table)
    console.print(f"figures: {out / 'core.json'}")


if __name__ == "__main__":
    main()
