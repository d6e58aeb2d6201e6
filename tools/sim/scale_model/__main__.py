"""`python -m tools.sim.scale_model` (`make scale-model`): run the users' load on
the real rules in virtual time and judge every component against its
documented limit. Exit 0: nothing passes a limit; 1: something does.

The load (defaults): 25,000 rooms, a steady 1,000 messages/s for 150 s with
a burst of 10,000 messages/s for 60 s from s 30. A uniform `--sample` of the
rooms is simulated with exactly its share of the load, so each room sees the
full deployment's per-room rate; aggregates are scaled by 1 / sample.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from shared.shards import SHARDED_FIELDS, index_shard
from shared.tasks import queue_index
from tools.sim.scale_model import limits
from tools.sim.scale_model.meter import peak_and_p99
from tools.sim.scale_model.traffic import Load, Traffic
from tools.sim.scale_model.world import ScaleWorld

ROOT = Path(__file__).resolve().parents[3]
# Seconds one request of each function takes in the cloud (infra/modules/sizing; tests/infra/test_sizing.py
# keeps them equal).
SECONDS_PER_REQUEST = {"enqueue": 0.3, "webhook": 0.15, "timeout": 0.1}
INSTANCE_UTILISATION = 0.6
# Timer queues are sized for this share of their 500 dispatches/s (infra/modules/sizing): timers come in waves
# one ack timeout after a burst starts.
QUEUE_LIMIT_SHARE = 0.6
# Timer task creates a message the queues are sized for (infra/modules/sizing).
TIMER_TASKS_PER_MESSAGE = 1.2
# WhatsApp numbers are sized at most this busy at the peak (infra/modules/sizing, docs/scale.md).
SENDER_LIMIT_SHARE = 0.7


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rooms", type=int, default=25_000, help="rooms of the deployment")
    parser.add_argument("--sample", type=float, default=0.04, help="share of the rooms simulated (0-1]")
    parser.add_argument("--burst", type=float, default=10_000, help="burst messages/s (all rooms)")
    parser.add_argument("--burst-s", type=float, default=60, help="burst length, s")
    parser.add_argument("--background", type=float, default=1_000, help="steady messages/s (all rooms)")
    parser.add_argument("--duration-s", type=float, default=150, help="publishing time, s")
    parser.add_argument("--room-burst", type=int, default=1, help="messages published to one room back to back")
    parser.add_argument("--ack-median-ms", type=float, default=400.0, help="the platform's median ack latency, ms")
    parser.add_argument("--index-shards", type=int, default=128, help="INDEX_SHARDS (infra default)")
    parser.add_argument("--tasks-queues", type=int, default=0, help="timer queues; 0: derived as infra/modules/sizing does")
    parser.add_argument("--threads", type=int, default=8, help="requests per function instance (function_threads)")
    parser.add_argument("--senders", default="",
                        help="WHATSAPP_SENDERS of the deployment (id:rate,...); empty: as many numbers at 950 msg/s as "
                             "the sizing asks for, at most 70%% busy at the peak (infra/modules/sizing)")
    parser.add_argument("--firestore-tf", type=Path, default=ROOT / "infra" / "firestore.tf",
                        help="the index layout to judge (default: this checkout's infra/firestore.tf)")
    args = parser.parse_args(argv)
    if not 0 < args.sample <= 1:
        parser.error("--sample must be in (0, 1]")
    peak = args.burst + args.background
    queues = args.tasks_queues or max(1, math.ceil(peak * TIMER_TASKS_PER_MESSAGE / (500 * QUEUE_LIMIT_SHARE)))
    rooms = max(1, round(args.rooms * args.sample))
    scale = args.rooms / rooms
    # As many numbers at 950 msg/s as the sizing asks for: at most 70% busy at the peak (infra/modules/sizing).
    senders = args.senders or ",".join(f"{1000001 + i}:950" for i in range(math.ceil(peak * 1.05 / (950 * SENDER_LIMIT_SHARE))))
    world = ScaleWorld.build(args.firestore_tf, args.index_shards, queues, sampled_senders(senders, 1 / scale))
    if args.room_burst < 1:
        parser.error("--room-burst must be at least 1")
    load = Load(rooms, args.background / scale, args.burst / scale, 30, args.burst_s, args.duration_s,
                ack_median_ms=args.ack_median_ms, room_burst=args.room_burst)
    traffic = Traffic(world, load)
    started = time.monotonic()
    traffic.plan()
    traffic.run()  # the service reads the model's clock (ScaleWorld.build passes it)
    wall = time.monotonic() - started
    print(f"scale model: {args.rooms:,} rooms ({rooms:,} simulated, x{scale:g}), {args.burst:,.0f} msg/s burst for "
          f"{args.burst_s:g} s over {args.background:,.0f} msg/s for {args.duration_s:g} s; {queues} timer queues, "
          f"{args.index_shards} index shards, firestore layout {args.firestore_tf.name}")
    print(f"simulated {traffic.published:,} messages, {len(world.platform.calls):,} sends in {wall:.0f} s wall")
    # A queue's or a shard's load is its rooms' load: scaled by the rooms it
    # has in the deployment (the hash spreads N rooms evenly) over the rooms
    # of the sample it got, so the sample's own unevenness is not counted.
    sampled = [f"room-{i:06d}" for i in range(rooms)]
    key_scale = {**_per_key_scale(sampled, lambda r: f"queue-{queue_index(r, queues)}", args.rooms / queues),
                 **{f"{field}@shard{s}": v for field in SHARDED_FIELDS
                    for s, v in _per_key_scale(sampled, lambda r: index_shard(r, args.index_shards),
                                               args.rooms / args.index_shards).items()}}
    return report(world, traffic, scale, args.threads, key_scale)


def sampled_senders(spec: str, share: float) -> str:
    """WHATSAPP_SENDERS for the sample: each number keeps its id and gets
    `share` of its rate (at least 1), so the sampled rooms fill its send
    window as the whole deployment's rooms fill the real one."""
    numbers = []
    for item in spec.replace(" ", "").split(","):
        number, _, rate = item.partition(":")
        numbers.append(f"{number}:{max(1, round(int(rate or 75) * share))}")
    return ",".join(numbers)


def per_message(world: ScaleWorld, traffic: Traffic) -> dict[str, float]:
    """Firestore operations per message of the run (reads and writes, the
    send window's among them), as bench-core's metrics count them."""
    messages = max(1, traffic.published)
    return {name: world.meter.total(name) / messages
            for name in ("firestore_reads", "firestore_writes", "window_reads", "window_writes")}


def _per_key_scale(rooms: list[str], key_of: Callable[[str], object], real_per_key: float) -> dict[object, float]:
    counts = Counter(key_of(r) for r in rooms)
    return {key: real_per_key / n for key, n in counts.items()}


def report(world: ScaleWorld, traffic: Traffic, scale: float, threads: int, key_scale: dict) -> int:
    """Print one row per component and return the exit status."""
    meter, failed = world.meter, []
    rows: list[tuple[str, float, float, float, str, bool]] = []

    def judge(what: str, component: str, limit: limits.Limit, per: float = 1.0, scaled: bool = True) -> None:
        peak, p99 = peak_and_p99(meter.rates(component, limit.window_s, scale if scaled else 1.0,
                                             key_scale if scaled else None))
        peak, p99 = peak * per, p99 * per
        over = peak > limit.per_s
        if over:
            what += f" [{meter.busiest(component, limit.window_s, scale if scaled else 1.0, key_scale if scaled else None)}]"
        rows.append((what + (" (soft)" if limit.soft else ""), peak, p99, limit.per_s, limit.source, over))
        if over and not limit.soft:
            failed.append(what)

    judge("index writes per sequential range (10 s)", "sequential index range writes", limits.SEQUENTIAL_INDEX_RANGE)
    judge("writes per room document (60 s)", "document writes", limits.DOCUMENT_WRITES, scaled=False)
    judge("task dispatches per timer queue (10 s)", "task dispatches per queue", limits.QUEUE_DISPATCHES)
    judge("task creates per timer queue (10 s)", "task creates per queue", limits.QUEUE_CREATES)
    judge("publish bytes per ordering key (10 s)", "pubsub publish bytes per ordering key", limits.ORDERING_KEY_BYTES,
          scaled=False)
    for function, seconds in SECONDS_PER_REQUEST.items():
        rates = [r for r in meter.rates_of("function invocations", function, 10, scale)]
        peak, p99 = peak_and_p99(rates)
        need = peak * seconds / (threads * INSTANCE_UTILISATION)
        over = need > limits.MAX_INSTANCES.per_s
        rows.append((f"{function}: instances at {threads} threads (from {peak:,.0f} req/s)", need,
                     peak_and_p99([r * seconds / (threads * INSTANCE_UTILISATION) for r in rates])[1],
                     limits.MAX_INSTANCES.per_s, limits.MAX_INSTANCES.source, over))
        if over:
            failed.append(function)
    width = max(len(r[0]) for r in rows)
    print(f"\n{'component':<{width}}  {'peak':>10}  {'p99':>10}  {'limit':>10}  verdict  source")
    for what, peak, p99, limit, source, over in rows:
        verdict = ("over" if "(soft)" in what else "OVER") if over else "ok"
        print(f"{what:<{width}}  {peak:>10,.1f}  {p99:>10,.1f}  {limit:>10,.0f}  {verdict:<7}  {source}")
    messages = traffic.published * scale
    print("\nper message (the whole run): "
          f"{meter.total('firestore_writes') * scale / messages:.2f} Firestore writes "
          f"({meter.total('window_writes') * scale / messages:.2f} of the send window), "
          f"{meter.total('firestore_reads') * scale / messages:.2f} reads "
          f"({meter.total('window_reads') * scale / messages:.2f} of the send window), "
          f"{meter.total('sequential index range writes') * scale / messages:.2f} sequential index entries, "
          f"{meter.total('task creates per queue') * scale / messages:.2f} task creates, "
          f"{meter.total('function invocations') * scale / messages:.2f} invocations, "
          f"{meter.total('event log bytes') * scale / messages:,.0f} event-log bytes")
    busiest = max(meter.rates("event log bytes", 60, scale), default=0.0)
    print(f"event log at the busiest minute: {busiest * 60 / 1e9:.2f} GB/min (lines only, before Cloud Logging's "
          f"per-entry metadata)")
    print(f"\nverdict: {'FAIL: ' + ', '.join(failed) if failed else 'PASS'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
