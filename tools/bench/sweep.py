"""`make bench-sweep`: how fast the watchdog rescues overdue rooms.

On a fresh local stack (the Firestore and Cloud Tasks emulators and the fake
platform; its own sweeper is off), ROOMS rooms are given a message in flight
whose timer was never armed, decided far enough in the past that every one
is overdue by WATCHDOG_GRACE_MS at once (as after a regional incident). Then
the `sweep` handler runs in this process, as the function would, until no
room is overdue. Each rescue is one room transaction, one Cloud Tasks create
(the resend's timer), one send call to the fake platform and one blind write.

Printed: rooms rescued, seconds, rooms/s per sweep call and overall, at the
SWEEP_CONCURRENCY given, and the time 100,000 overdue rooms would take at that
rate. Measured on this machine's emulators: it shows the handler's own
parallelism, not Firestore's or Cloud Tasks' production rates.

    python -m tools.bench.sweep --rooms 5000 --concurrency 16
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

# Rescues need no ack: every send reaches a silent device, so nothing but the watchdog acts.
FAKE = {"ack_prob": 0.0, "fail_prob": 0.0, "duplicate_prob": 0.0, "reorder_prob": 0.0}
# The production default: a rescued room is not overdue again within the run.
GRACE_MS = 60_000


class QuietLog:
    """Counts the delivery events instead of printing them (the bench prints its own table)."""

    def __init__(self) -> None:
        self.count = 0

    def emit(self, event: object) -> None:
        self.count += 1


def make_overdue(store, policy, rooms: list[str], decided_us: int, workers: int) -> None:
    """Give each room a message in flight decided at `decided_us`, its timer never armed."""
    from shared.room import Enqueue, decide

    def one(room: str) -> None:
        event = Enqueue(f"m-{room}", "whatsapp", "15550001", "hi", decided_us, decided_us)
        store.apply(room, lambda s: decide(s, event, policy, "bench"))

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(one, rooms))


def main() -> None:
    parser = argparse.ArgumentParser(description="Watchdog rescue rate on the emulators.")
    parser.add_argument("--rooms", type=int, default=5000, help="rooms made overdue at once")
    parser.add_argument("--concurrency", type=int, default=16, help="SWEEP_CONCURRENCY")
    parser.add_argument("--batch", type=int, default=500, help="SWEEP_BATCH_SIZE")
    args = parser.parse_args()
    console = Console()
    from tools.local.stack import ROOT, Stack

    env = {"WATCHDOG_GRACE_MS": str(GRACE_MS), "ACK_TIMEOUT_MS": "3000", "SEND_TIMEOUT_MS": "2000"}
    with tempfile.TemporaryDirectory(prefix="baton-sweep-", dir=ROOT / "out" if (ROOT / "out").is_dir() else None) \
            as run_dir:
        stack = Stack(Path(run_dir), env=env, fake_config=FAKE, sweep_interval_s=86_400.0).start()
        try:
            os.environ.update(stack.client_env())
            os.environ.update(env)
            report = run(stack, args)
        finally:
            stack.stop()
    table = Table(title=f"watchdog sweep, {args.rooms} overdue rooms, SWEEP_CONCURRENCY={args.concurrency}")
    for column in ("call", "overdue", "rescued", "failed", "left", "seconds", "rooms/s"):
        table.add_column(column, justify="right")
    for i, body in enumerate(report["calls"], 1):
        rate = body["rescued"] / body["seconds"] if body["seconds"] else 0.0
        table.add_row(str(i), str(body["overdue"]), str(body["rescued"]), str(body["failed"]), str(body["left"]),
                      f"{body['seconds']:.1f}", f"{rate:.0f}")
    console.print(table)
    rate = report["rescued"] / report["seconds"]
    console.print(f"rescued {report['rescued']} of {args.rooms} rooms in {report['seconds']:.1f} s: "
                  f"[bold]{rate:.0f} rooms/s[/bold] (goal: 100); 100,000 overdue rooms at this rate: "
                  f"{100_000 / rate / 60:.1f} min")


def run(stack, args) -> dict:
    from google.cloud import firestore

    from shared import config
    from shared.providers import make_senders
    from shared.room import policy_from_settings
    from shared.service import DeliveryService, ServiceCore
    from shared.store import RoomStore
    from shared.tasks import TimerScheduler, make_client

    settings = dataclasses.replace(config.load(), whatsapp_api_base=stack.fake_url, timeout_url=stack.url("timeout"),
                                   sweep_concurrency=args.concurrency, sweep_batch_size=args.batch,
                                   event_log_path="")
    policy = policy_from_settings(settings)
    store = RoomStore(firestore.Client(project=settings.project), retention_hours=1)
    service = DeliveryService(ServiceCore(settings, policy, store, TimerScheduler(make_client(settings), settings),
                                          make_senders(settings), QuietLog()))
    rooms = [f"sweep-{i:06d}" for i in range(args.rooms)]
    # Decided long enough ago that the hold (send window + ack timeout) and the grace have passed.
    decided = time.time_ns() // 1000 - (policy.send_window_ms + policy.ack_timeout_ms + GRACE_MS + 5000) * 1000
    made = time.monotonic()
    make_overdue(store, policy, rooms, decided, workers=8)
    print(f"made {len(rooms)} overdue rooms in {time.monotonic() - made:.1f} s", flush=True)
    calls, started = [], time.monotonic()
    while True:
        body = service.handle_sweep().body
        calls.append(body)
        print(f"sweep: {body}", flush=True)
        if body["overdue"] == 0 or len(calls) > 50:
            break
    return {"calls": calls[:-1] if len(calls) > 1 else calls, "rescued": sum(c["rescued"] for c in calls),
            "seconds": time.monotonic() - started}


if __name__ == "__main__":
    main()
