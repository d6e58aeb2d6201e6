"""Where the milliseconds of one baton hand-over go, on the local emulators.

A hand-over: a `delivered` webhook for a room's in-flight message arrives,
the room's next message goes out. This runs baton's own `DeliveryService`
(shared/bootstrap.py, unchanged) in this process against a fresh local stack
and times each step of `handle_status_webhook` with wrappers installed here
only: signature and parsing, the room's Firestore read, `decide`, the
conditional commit, the event log lines, the Cloud Tasks create of the next
message's timer, the send call, and the blind write of its acceptance.

Per room: two messages pushed (the first is sent), then one signed
`delivered` webhook for the first, timed. The fake platform acks nothing
itself (`ack_prob` 0), nothing else runs: this is a hand-over's own cost,
without queueing. The HTTP receive of the webhook (functions-framework,
Flask) is not in it; `make bench-compare` shows it as the gap between the
platform's and baton's own ack-to-next-send.

    python -m tools.bench.compare.profile_handover --handovers 200
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from google.cloud.firestore_v1.batch import WriteBatch
from google.cloud.firestore_v1.document import DocumentReference
from rich.console import Console
from rich.table import Table

from shared.providers.whatsapp import sign
from tools.local.audit import percentile
from tools.local.stack import ROOT, Stack

PHASES = ("firestore read", "decide and rest", "firestore commit", "event log lines", "cloud tasks create",
          "send call", "acceptance blind write")


class Recorder:
    """Collects (phase, start, end) perf_counter s while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.inside = False
        self.spans: list[tuple[str, float, float]] = []
        self.lock = threading.Lock()

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn`, timed as `name` unless called inside another timed step
        (a blind write commits a batch: it counts once, as the write)."""

        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.inside:
                return fn(*args, **kwargs)
            self.inside = True
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.inside = False
                if self.on:
                    with self.lock:
                        self.spans.append((name, t0, time.perf_counter()))
        return timed


def envelope(room: str, k: int) -> bytes:
    """A Pub/Sub push envelope as the emulator sends it (shared/push.py)."""
    data = base64.b64encode(json.dumps({"type": "text", "text": f"profile {k}"}).encode()).decode()
    return json.dumps({"message": {"data": data, "messageId": f"{room}-{k}-{time.time_ns()}",
                                   "publishTime": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                                   "attributes": {"room_id": room, "provider": "whatsapp", "recipient": "15559990000",
                                                  "message_id": f"{room}-m{k}"}},
                       "subscription": "projects/baton-local/subscriptions/profile"}).encode()


def delivered(delivery_id: str, wamid: str) -> bytes:
    """A `delivered` status webhook body, as the fake platform posts it."""
    status = {"id": wamid, "status": "delivered", "timestamp": str(int(time.time())), "recipient_id": "15559990000",
              "biz_opaque_callback_data": delivery_id}
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{
        "field": "messages", "value": {"messaging_product": "whatsapp", "statuses": [status]}}]}]}).encode()


def profile(handovers: int, warmup: int, run_dir: Path, console: Console) -> dict[str, Any]:
    """Time `handovers` hand-overs (after `warmup` untimed ones) on a fresh
    stack; returns per-phase p50/p90 in ms and the webhook's total."""
    stack = Stack(run_dir, fake_config={"ack_prob": 0.0, "fail_prob": 0.0}, sweep_interval_s=0)
    with console.status("starting a local stack for the profile..."):
        stack.start()
    try:
        os.environ.update(stack.function_env())
        from shared.bootstrap import bootstrap

        service = bootstrap()
        rec = Recorder()
        DocumentReference.get = rec.wrap("firestore read", DocumentReference.get)
        WriteBatch.commit = rec.wrap("firestore commit", WriteBatch.commit)
        DocumentReference.update = rec.wrap("acceptance blind write", DocumentReference.update)
        service.timers.schedule = rec.wrap("cloud tasks create", service.timers.schedule)
        service.events.emit = rec.wrap("event log lines", service.events.emit)
        sender = service.senders["whatsapp"]
        last_send: dict[str, Any] = {}
        raw_send = sender.send

        def send(recipient: str, text: str, delivery_id: str) -> Any:
            result = raw_send(recipient, text, delivery_id)
            last_send.update(delivery_id=delivery_id, wamid=result.provider_message_id)
            return result

        sender.send = rec.wrap("send call", send)
        secret = service.settings.whatsapp_app_secret
        rows: list[dict[str, float]] = []
        quiet = open(os.devnull, "w")  # noqa: SIM115 - the event lines baton also prints to stdout
        with console.status("profiling hand-overs...") as status, contextlib.redirect_stdout(quiet):
            for i in range(warmup + handovers):
                room = f"prof-{i:05d}-{time.time_ns() % 10**6}"
                service.handle_push(envelope(room, 1))
                first = dict(last_send)
                service.handle_push(envelope(room, 2))
                raw = delivered(first["delivery_id"], first["wamid"])
                signature = sign(raw, secret)
                rec.spans.clear()
                rec.on = True
                t0 = time.perf_counter()
                reply = service.handle_status_webhook(raw, signature)
                total = time.perf_counter() - t0
                rec.on = False
                if reply.status != 200 or i < warmup:
                    continue
                row: dict[str, float] = defaultdict(float)
                for name, start, end in rec.spans:
                    row[name] += (end - start) * 1000
                sends = [start for name, start, _ in rec.spans if name == "send call"]
                reads = [start for name, start, _ in rec.spans if name == "firestore read"]
                row["signature and parsing"] = ((reads[0] - t0) * 1000) if reads else 0.0
                row["webhook handler, total"] = total * 1000
                row["arrival to send call (hand-over)"] = ((sends[0] - t0) * 1000) if sends else float("nan")
                named = sum(row[p] for p in PHASES if p != "decide and rest") + row["signature and parsing"]
                row["decide and rest"] = row["webhook handler, total"] - named
                rows.append(row)
                status.update(f"profiling hand-overs... {len(rows)}/{handovers}")
    finally:
        with console.status("stopping the profile's stack..."):
            stack.stop()
    keys = ["signature and parsing", *PHASES, "webhook handler, total", "arrival to send call (hand-over)"]
    return {k: {"p50_ms": percentile([r[k] for r in rows], 0.5), "p90_ms": percentile([r[k] for r in rows], 0.9),
                "mean_ms": sum(r[k] for r in rows) / len(rows) if rows else None} for k in keys} | {"samples": len(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handovers", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--out", default=str(ROOT / "out" / "compare" / "profile.json"))
    args = parser.parse_args()
    console = Console(width=120)
    result = profile(args.handovers, args.warmup, ROOT / "run" / "compare-profile", console)
    table = Table(title=f"one baton hand-over on the emulators, {result['samples']} samples, no other load (ms)")
    for col in ("step", "p50", "p90", "mean"):
        table.add_column(col, justify="right" if col != "step" else "left")
    for k, v in result.items():
        if isinstance(v, dict):
            table.add_row(k, *(f"{v[q]:.2f}" if v[q] is not None else "-" for q in ("p50_ms", "p90_ms", "mean_ms")))
    console.print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    console.print(f"written: {args.out}")


if __name__ == "__main__":
    main()
