"""`make bench-core`: capacity, hand-over latency and Firestore cost per message
on the local stack, beside the Firestore emulator's raw transaction rate
measured in the same run.

1. raw rate: read-and-write Firestore transactions on distinct documents,
   one thread, against this run's emulator, before the capacity run (the
   reference of capacity / raw), and again after it and after the light
   load, where the emulator's JVM has warmed up: those two read about twice
   the first (2026-11-28: 91 before, 241 after the capacity run), so the
   first figure measures a cold emulator, and capacity / raw moves with how
   cold it was;
2. capacity: a burst of ROOMS x BURST messages published at once; the
   sustained rate of messages ended (acked, timed out, failed), between the
   10th and the 90th percentile of end times;
3. hand-over: messages published at half that capacity, in per-room bursts
   so rooms have a queue; the delay from an ack webhook's arrival to the next
   send call of that room (the `sent` events with trigger `ack`); then again
   at a light load (`--light-rate`, 4 msgs/s), where no queue forms in the
   emulator's push loop (about 2 pushes in flight at a time, shared by every
   subscription: docs/architecture.md);
4. cost: Firestore reads and writes, Cloud Tasks creates, status-queue
   publishes and function invocations per ended message, from the functions'
   invocation records.

Each WEBHOOK_MODE (`--modes`, default both: queued, then direct) gets a
stack and a whole run of its own; the table puts them side by side. So does
`direct/outcomes-off` (OUTCOMES=off, shared/outcomes.py): the hand-over
with and without publishing outcomes, in the same run.

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
from tools.local.audit import epoch_s, make_workload, percentile, read_events, sender_waits
from tools.local.demo import deliver
from tools.local.publisher import OutboundMessage, Publisher
from tools.local.stack import PROJECT, ROOT, TOPIC, Stack

# Firestore counts of an invocation record, and the shares of them the
# sender window and the sent proof made (the rest is the rooms').
SPLIT_COUNTS = ("firestore_reads", "firestore_writes", "window_reads", "window_writes", "proof_reads", "proof_writes")


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


def measure_raw(mode: str, n: int, when: str, console: Console) -> float:
    """`raw_transaction_rate(n)`, shown as measured (`when`: its place in the run)."""
    with console.status(f"[{mode}] raw Firestore transaction rate ({when})..."):
        raw = raw_transaction_rate(n)
    console.print(f"[{mode}] raw read+write transactions, distinct documents, one thread, {when}: {raw:.1f}/s")
    return raw


def end_times(events: list[dict], prefix: str) -> list[float]:
    return sorted(epoch_s(e["ts"]) for e in events
                  if e["event"] in TERMINAL_EVENTS and (e["room_id"] or "").startswith(prefix))


def phase_acks(events: list[dict], prefix: str) -> tuple[float | None, float | None, float | None]:
    """For the rooms of one phase (`prefix`): the acked share of ended
    messages, and how long an ack status waited between reaching the
    webhook and being applied to its room, p50 and p99 (s). The status's
    arrival is its send's `sent` event plus the event's `send_to_ack_ms`
    (measured to the webhook's receive time); in direct mode the webhook
    applies it at once, in queued mode it first goes through the status
    topic's push subscription."""
    mine = [e for e in events if (e["room_id"] or "").startswith(prefix)]
    sent = {(e["room_id"], e["seq"], e["attempt"]): epoch_s(e["ts"]) for e in mine if e["event"] == "sent"}
    waits = [epoch_s(e["ts"]) - (sent[key] + e["send_to_ack_ms"] / 1000) for e in mine
             if (e["event"] == "acked" or e["reason"] == "late_ack") and e["send_to_ack_ms"] is not None
             and (key := (e["room_id"], e["seq"], e["attempt"])) in sent]
    ended = sum(1 for e in mine if e["event"] in TERMINAL_EVENTS)
    acked = sum(1 for e in mine if e["event"] == "acked")
    return (acked / ended if ended else None, percentile(waits, 0.5), percentile(waits, 0.99))


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


def wait_ended(event_log: Path, want: set[str], timeout_s: float) -> None:
    """Wait until every message id in `want` has a terminal event in the log,
    or `timeout_s` s have passed (the figures then cover what ended)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if want <= {e["message_id"] for e in read_events(event_log) if e["event"] in TERMINAL_EVENTS}:
            return
        time.sleep(0.5)


def run_mode(mode: str, args: argparse.Namespace, out: Path, console: Console) -> dict:
    """One whole measurement (raw rate, capacity, hand-over, cost) on a fresh
    local stack whose webhook runs in WEBHOOK_MODE=`mode`; returns the figures."""
    mode, _, variant = mode.partition("/")  # "direct/outcomes-off": the same mode with OUTCOMES=off
    name = f"{mode}-{variant}" if variant else mode
    event_log = out / f"core-events-{name}.jsonl"
    event_log.unlink(missing_ok=True)
    stack = Stack(ROOT / "run" / f"bench-{name}", env={"WEBHOOK_MODE": mode, "OUTCOMES": "off" if variant else "on"},
                  event_log=event_log, fake_config={"ack_median_ms": 100.0})
    with console.status(f"[{mode}] starting the local stack..."):
        stack.start()
    try:
        os.environ.update(stack.client_env())
        raws = [measure_raw(mode, args.raw_n, "before the capacity run", console)]

        burst = make_workload(args.rooms, args.burst, seed=11, prefix="cap")
        with console.status(f"[{mode}] capacity: {len(burst):,} messages at once..."):
            deliver(stack, burst, stall_s=60)
        ends = end_times(read_events(event_log), "cap-")
        lo, hi = ends[int(len(ends) * 0.1)], ends[int(len(ends) * 0.9)]
        capacity = (int(len(ends) * 0.9) - int(len(ends) * 0.1)) / (hi - lo)
        console.print(f"[{mode}] capacity: {capacity:.1f} messages ended/s")

        raws.append(measure_raw(mode, args.raw_n, "after the capacity run", console))
        rate = capacity / 2
        plan = paced_workload(args.rooms, 3, rate, args.half_seconds, "half", seed=5)
        half_started = time.time()
        with console.status(f"[{mode}] half capacity: {len(plan):,} messages at {rate:.1f}/s in room bursts of 3..."):
            publish_paced(plan)
            wait_ended(event_log, {m.message_id for _, m in plan}, 120)
        half_ended = time.time()
        # Light load: far below what the emulator's push loop can carry, so
        # the hand-over shows each path's own cost rather than queueing.
        light_plan = paced_workload(args.rooms, 3, args.light_rate, args.light_seconds, "light", seed=9)
        with console.status(f"[{mode}] light load: {len(light_plan):,} messages at {args.light_rate:.1f}/s..."):
            publish_paced(light_plan)
            wait_ended(event_log, {m.message_id for _, m in light_plan}, 60)
        raws.append(measure_raw(mode, args.raw_n, "after the light load", console))
        # The ratio's reference stays the first figure, as its target was set on it: the later two
        # meet an emulator the run has warmed (its JIT), about twice as fast (docs/benchmarks.md).
        raw = raws[0]
        events = read_events(event_log)
        light = [e["trigger_to_send_ms"] for e in events if (e["room_id"] or "").startswith("light-")
                 and e["event"] == "sent" and e["trigger"] == "ack"]
        half = [e for e in events if (e["room_id"] or "").startswith("half-")]
        handover = [e["trigger_to_send_ms"] for e in half if e["event"] == "sent" and e["trigger"] == "ack"]
        ended_half = end_times(events, "half-")
        achieved = len(ended_half) / (ended_half[-1] - ended_half[0]) if len(ended_half) > 1 else 0.0
    finally:
        with console.status(f"[{mode}] stopping the local stack..."):
            stack.stop()

    invocations = [json.loads(line) for line in (stack.run_dir / "invocations.jsonl").open()]
    ended = sum(1 for e in events if e["event"] in TERMINAL_EVENTS)
    acked = sum(1 for e in events if e["event"] == "acked")
    totals: Counter[str] = Counter()
    for inv in invocations:
        for k in ("firestore_reads", "firestore_writes", "tasks_created", "send_calls"):
            totals[k] += inv[k]
        totals["tasks_deleted"] += inv.get("tasks_deleted", 0)  # acked attempts' timers (DeleteTask)
        totals[f"inv_{inv['function']}"] += 1
        # One Pub/Sub message per room per webhook payload (queued mode).
        totals["status_publishes"] += inv.get("status_publishes", 0)
        for k in SPLIT_COUNTS[2:]:  # the sender window's and the sent proof's shares of the Firestore counts
            totals[k] += inv.get(k, 0)
    totals["window_waits"] = sender_waits(events)
    # The half-capacity run alone (a number at under a third of its rate):
    # the invocations that started while it ran, per message of it ended.
    half_totals: Counter[str] = Counter()
    for inv in invocations:
        if half_started <= epoch_s(inv["ts"]) <= half_ended:
            for k in SPLIT_COUNTS:
                half_totals[k] += inv.get(k, 0)
    half_ended_n = len(ended_half)
    result = {
        "webhook_mode": mode,
        "rooms": args.rooms,
        "raw_firestore_txn_per_s": raw,
        "raw_firestore_txn_per_s_each": raws,
        "capacity_msgs_per_s": capacity,
        "capacity_over_raw": capacity / raw,
        "half_rate_target_per_s": rate,
        "half_rate_achieved_per_s": achieved,
        "handover_samples": len(handover),
        "handover_p50_ms": percentile(handover, 0.5),
        "handover_p99_ms": percentile(handover, 0.99),
        "light_rate_per_s": args.light_rate,
        "light_handover_samples": len(light),
        "light_handover_p50_ms": percentile(light, 0.5),
        "light_handover_p99_ms": percentile(light, 0.99),
        "ended_messages": ended,
        "acked_share": acked / ended if ended else None,
        **{f"{phase}_{name}": value for phase in ("cap", "half", "light")
           for name, value in zip(("acked_share", "status_wait_p50_s", "status_wait_p99_s"),
                                  phase_acks(events, f"{phase}-"), strict=True)},
        **{f"{k}_per_message": v / ended for k, v in totals.items()},
        **{f"half_{k}_per_message": v / half_ended_n for k, v in half_totals.items() if half_ended_n},
    }
    result["outcomes"] = "off" if variant else "on"
    (out / f"core-{name}.json").write_text(json.dumps(result, indent=2))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--burst", type=int, default=3, help="messages per room in the capacity burst")
    parser.add_argument("--half-seconds", type=float, default=40.0, help="duration of the half-capacity run, s")
    parser.add_argument("--raw-n", type=int, default=400)
    parser.add_argument("--light-rate", type=float, default=4.0, help="messages/s of the light-load run")
    parser.add_argument("--light-seconds", type=float, default=30.0, help="duration of the light-load run, s")
    parser.add_argument("--modes", default="queued,direct,direct/outcomes-off",
                        help="WEBHOOK_MODE values to measure, one stack each, in this order; MODE/outcomes-off: "
                             "that mode with OUTCOMES=off (what publishing outcomes costs the hand-over)")
    parser.add_argument("--out", default=str(ROOT / "out" / "bench"))
    args = parser.parse_args()
    console = Console()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    results = {mode: run_mode(mode, args, out, console) for mode in modes}
    from shared.config import ENV_VARS

    default = ENV_VARS["WEBHOOK_MODE"][0]
    # core.json: the default mode's figures (tools/bench/cost.py reads them).
    (out / "core.json").write_text(json.dumps(results.get(default, next(iter(results.values()))), indent=2))

    table = Table(title=f"bench-core: {args.rooms:,} rooms, ack latency median 100 ms, by WEBHOOK_MODE "
                        f"(default {default})")
    table.add_column("figure")
    for mode in modes:
        table.add_column(mode, justify="right")
    table.add_column("target", justify="right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    def row(label: str, fmt, target: str = "") -> None:
        table.add_row(label, *(fmt(results[m]) for m in modes), target)

    row("Firestore emulator raw txn/s (read+write, distinct docs; before the capacity run)",
        lambda r: f"{r['raw_firestore_txn_per_s']:.1f}")
    row("  raw: before capacity / after it / after light load",
        lambda r: " / ".join(f"{x:.0f}" for x in r.get("raw_firestore_txn_per_s_each", [])))
    row("capacity, messages ended/s", lambda r: f"{r['capacity_msgs_per_s']:.1f}", ">= raw / 3")
    row("capacity / raw", lambda r: f"{r['capacity_over_raw']:.2f}", ">= 0.33")
    row("half-capacity run: target / achieved msgs/s",
        lambda r: f"{r['half_rate_target_per_s']:.1f} / {r['half_rate_achieved_per_s']:.1f}")
    row("hand-overs measured (ack webhook -> next send)", lambda r: str(r["handover_samples"]))
    row("ack -> next send p50", lambda r: ms(r["handover_p50_ms"]), "<= 30 ms")
    row("ack -> next send p99", lambda r: ms(r["handover_p99_ms"]), "<= 150 ms")
    row("light load: msgs/s, hand-overs measured", lambda r: f"{r['light_rate_per_s']:.0f}, {r['light_handover_samples']}")
    row("light load: ack -> next send p50", lambda r: ms(r["light_handover_p50_ms"]))
    row("light load: ack -> next send p99", lambda r: ms(r["light_handover_p99_ms"]))
    row("Firestore reads per ended message", lambda r: f"{r.get('firestore_reads_per_message', 0):.2f}", "<= 4")
    row("Firestore writes per ended message", lambda r: f"{r.get('firestore_writes_per_message', 0):.2f}", "<= 3.2")

    def split(prefix: str = "") -> dict[str, tuple[float, float]]:
        """{part: (reads, writes) per message}: the rooms', the sender window's, the sent proof's."""
        def g(r: dict, k: str) -> float:
            return r.get(f"{prefix}{k}_per_message", 0)
        return {"rooms": lambda r: (g(r, "firestore_reads") - g(r, "window_reads") - g(r, "proof_reads"),
                                    g(r, "firestore_writes") - g(r, "window_writes") - g(r, "proof_writes")),
                "window": lambda r: (g(r, "window_reads"), g(r, "window_writes")),
                "proof": lambda r: (g(r, "proof_reads"), g(r, "proof_writes"))}

    targets = {"rooms": "<= 5 / <= 3", "window": "", "proof": ""}
    for part, of in split().items():
        # The sender window: WHATSAPP_SENDER_RATE, shared/sender_window.py;
        # the proof: WHATSAPP_SENT_PROOF, shared/service/webhook.py.
        row(f"  of these, the {part}' reads / writes" if part == "rooms" else f"  of these, the {part}'s reads / writes",
            lambda r, of=of: "{:.2f} / {:.2f}".format(*of(r)), targets[part])
    for part, of in split("half_").items():
        row(f"  half-capacity run: the {part}' reads / writes" if part == "rooms"
            else f"  half-capacity run: the {part}'s reads / writes",
            lambda r, of=of: "{:.3f} / {:.3f}".format(*of(r)),
            "<= 0.2 in all" if part == "window" else "")
    row("sends that waited for a slot of their number, per ended message",
        lambda r: f"{r.get('window_waits_per_message', 0):.3f}")
    row("Cloud Tasks creates per ended message", lambda r: f"{r.get('tasks_created_per_message', 0):.2f}")
    row("Cloud Tasks deletes (acked attempts' timers) per ended message",
        lambda r: f"{r.get('tasks_deleted_per_message', 0):.2f}")
    row("status-queue publishes per ended message", lambda r: f"{r.get('status_publishes_per_message', 0):.2f}")
    for fn in ("enqueue", "webhook", "status", "timeout", "sweep"):
        row(f"{fn} invocations per ended message", lambda r, fn=fn: f"{r.get(f'inv_{fn}_per_message', 0):.2f}")
    row("all function invocations per ended message",
        lambda r: f"{sum(v for k, v in r.items() if k.startswith('inv_')):.2f}")
    row("acked share", lambda r: f"{r['acked_share']:.3f}")
    for phase, label in (("cap", "capacity run"), ("half", "half-capacity run"), ("light", "light load")):
        row(f"{label}: acked share", lambda r, p=phase: f"{r.get(f'{p}_acked_share') or 0:.3f}")
        row(f"{label}: ack status webhook -> applied p50 / p99",
            lambda r, p=phase: f"{r.get(f'{p}_status_wait_p50_s') or 0:.2f} / {r.get(f'{p}_status_wait_p99_s') or 0:.2f} s")
    console.print(table)
    for m in modes:  # outcomes on minus off, same mode, same run (goal: at most +5 ms at the p50)
        off = results.get(f"{m}/outcomes-off")
        if off and results[m]["handover_p50_ms"] is not None and off["handover_p50_ms"] is not None:
            console.print(f"{m}: ack -> next send p50 with outcomes on minus off: "
                          f"{results[m]['handover_p50_ms'] - off['handover_p50_ms']:+.1f} ms (half-capacity run), "
                          f"{(results[m]['light_handover_p50_ms'] or 0) - (off['light_handover_p50_ms'] or 0):+.1f} ms "
                          f"(light load); goal <= +5 ms")
    console.print(f"figures: {', '.join(str(out / f'core-{m.replace(chr(47), chr(45))}.json') for m in modes)}; "
                  f"default mode in {out / 'core.json'}")


if __name__ == "__main__":
    main()
