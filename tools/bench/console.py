"""`make bench-console`: how fast every console page answers on the local
stack with 10,000 rooms (issue 48: p95 under 300 ms).

A fresh local stack (its sweeper idle); ROOMS rooms are written straight to
Firestore in batches (each the room rules' own state after one `Enqueue`,
so each holds a message; every PAUSED_EVERY-th room also paused), and the
event log gets EVENTS_PER_ROOM delivery lines per room (as after a day's
traffic: what the timeline and the message search index). Then each page is
asked REQUESTS times, as a browser does, through the stack's `baton
console` proxy (so the figure includes the proxy hop and the admin
function's token check), after WARMUP requests not counted.

Printed: per page, p50, p95 and max in ms, the median Firestore documents
read per request (the admin function's own count, METRICS_LOG_PATH; a room
list page shows PAGE = 50 rooms), and whether p95 < GOAL_MS.
Exit 1 if a page misses it. The overview keeps its counts OVERVIEW_TTL_S
and a room list its pages LIST_TTL_S (shared/console/app.py, served stale
while asked again in the background); their cost when asked anew
(`?fresh=1`) is printed beside them, not held to the goal: on the emulator
every query scans all the rooms. Measured on this machine's emulators: it
shows the console's own cost, not Firestore's production latency.

    python -m tools.bench.console --rooms 10000 --requests 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from rich.console import Console
from rich.table import Table

GOAL_MS = 300.0
# The overview's counts asked anew each time (its cache bypassed): printed, not held to
# GOAL_MS; the emulator counts by scanning every room, Firestore by its index.
INFORMATIONAL = "overview, counted again (?fresh=1)"
LIST_AGAIN = "rooms: lagging, asked again (?fresh=1)"
FRESH_REQUESTS = 5
PAUSED_EVERY = 20
EVENTS_PER_ROOM = 5
WARMUP = 3
BATCH = 400  # Firestore allows 500 writes per batch


def seed(project: str, rooms: list[str], shards: int, event_log: Path, workers: int = 4) -> None:
    """Write the rooms' documents (batched) and their event lines."""
    from google.cloud import firestore

    from shared.room import Enqueue, Pause, Policy, RoomState, decide
    from shared.room_document import ROOMS, room_to_doc
    from shared.shards import SHARD_FIELD, index_shard
    from shared.store import WRITE_ID

    policy = Policy(ack_timeout_ms=60_000, send_timeout_ms=10_000)
    db = firestore.Client(project=project)
    now = time.time_ns() // 1000
    base = now - 3600 * 10**6

    def doc(i: int, room: str) -> dict[str, Any]:
        at = base + (i * 7919 % len(rooms)) * 1000
        state = decide(RoomState(room), Enqueue(f"{room}-m1", "whatsapp", "15550001", "hi", at, at),
                       policy, "bench").state
        if i % PAUSED_EVERY == 0:
            state = decide(state, Pause("bench", "benchmark", at + 1), policy, "bench").state or state
        return {**room_to_doc(state), WRITE_ID: uuid.uuid4().hex, SHARD_FIELD: index_shard(room, shards),
                "expire_at": None}

    def write(start: int) -> None:
        batch = db.batch()
        for i in range(start, min(start + BATCH, len(rooms))):
            batch.set(db.collection(ROOMS).document(rooms[i]), doc(i, rooms[i]))
        batch.commit(timeout=120)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(write, range(0, len(rooms), BATCH)))
    kinds = ["enqueued", "sent", "status_ignored", "acked", "enqueued"]
    with event_log.open("a", encoding="utf-8") as fh:
        for i, room in enumerate(rooms):
            for k in range(EVENTS_PER_ROOM):
                ts = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base / 1e6 + i)) + f".{k:06d}Z"
                fh.write(json.dumps({"log_type": "baton.delivery", "event": kinds[k % len(kinds)], "ts": ts,
                                     "component": "bench", "room_id": room, "seq": 1 + k // 4, "attempt": 1,
                                     "message_id": f"{room}-m{1 + k // 4}", "provider": "whatsapp"}) + "\n")


def measure(session: requests.Session, method: str, url: str, n: int, data: dict[str, str] | None = None,
            warmup: int = WARMUP, failed: list[int] | None = None) -> list[float]:
    """`n` timings (ms) of one request, after `warmup`; each must answer 200
    or 303, or, with `failed` given, a 503 is timed and its count appended there.

    Raises:
        RuntimeError: another status.
    """
    out, refused = [], 0
    for k in range(warmup + n):
        started = time.perf_counter()
        r = session.request(method, url, data=data, allow_redirects=False, timeout=120)
        took = (time.perf_counter() - started) * 1000
        if r.status_code not in (200, 303):
            if failed is None or r.status_code != 503:
                raise RuntimeError(f"{method} {url}: {r.status_code} {r.text[:300]}")
            refused += 1
        if k >= warmup:
            out.append(took)
    if failed is not None:
        failed.append(refused)
    return out


def reads_since(metrics: Path, start: int) -> tuple[list[int], int]:
    """The admin function's Firestore reads per request (METRICS_LOG_PATH
    lines) from line `start` on, and the next line's number."""
    if not metrics.exists():
        return [], start
    lines = metrics.read_text().splitlines()
    rows = [json.loads(line) for line in lines[start:] if line.strip()]
    reads = [int(r.get("firestore_reads", 0)) for r in rows if r.get("function") == "admin"]
    return reads, len(lines)


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18] if len(values) > 1 else values[0]


def run(stack: Any, rooms: int, n: int, console: Console
        ) -> tuple[dict[str, list[float]], dict[str, int], dict[str, float]]:
    """Seed `rooms` rooms into `stack`, then time each page `n` times (ms);
    also how many answered 503 (a Firestore call past its deadline) per
    page, and the median Firestore documents read per request of each page
    (as the admin function counts them: one per document, one at least per
    query; the overview's counts one per aggregation)."""
    import re

    from shared import config

    names = [f"bench-{i:05d}" for i in range(rooms)]
    shards = config.load().index_shards
    started = time.monotonic()
    seed("baton-local", names, shards, stack.event_log)
    console.print(f"seeded {rooms:,} rooms and {rooms * EVENTS_PER_ROOM:,} event lines "
                  f"in {time.monotonic() - started:.0f} s")
    base = stack.console_url
    session = requests.Session()
    room = names[len(names) // 2]
    next_url = token = None
    for _ in range(5):  # the first queries after the seeding may pass their deadline on a loaded machine
        next_url = next_url or re.search(r'id="next" href="([^"]+)"',
                                         session.get(base + "rooms?kind=lag", timeout=120).text)
        token = token or re.search(r'name="csrf" value="([^"]+)"',
                                   session.get(base + f"room?id={room}", timeout=120).text)
        if next_url and token:
            break
    if next_url is None or token is None:
        raise RuntimeError("the rooms list has no next page, or the room page no form")
    cursor_path = next_url.group(1).replace("&amp;", "&").removeprefix("/console/")
    pages = {
        "overview": ("GET", base, None),
        "rooms: lagging, page 1": ("GET", base + "rooms?kind=lag", None),
        "rooms: lagging, page 2": ("GET", base + cursor_path, None),
        "rooms: paused": ("GET", base + "rooms?kind=paused", None),
        "rooms: stuck": ("GET", base + "rooms?kind=stuck", None),
        "search by message id": ("GET", base + f"rooms?q={room}-m1", None),
        "one room": ("GET", base + f"room?id={room}", None),
        "action: pause, dry run": ("POST", base + "act", {"action": "pause", "room": room, "reason": "bench",
                                                          "step": "preview", "csrf": token.group(1)}),
        "dead letters": ("GET", base + "list/dead-letters", None),
        "scheduled": ("GET", base + "list/scheduled", None),
    }
    timings, refused, reads = {}, {}, {}
    metrics = stack.run_dir / "invocations.jsonl"
    _, line = reads_since(metrics, 0)
    for name, (method, url, data) in pages.items():
        failed: list[int] = []
        timings[name] = measure(session, method, url, n, data, failed=failed)
        refused[name] = failed[0]
        counted, line = reads_since(metrics, line)
        reads[name] = statistics.median(counted) if counted else float("nan")
    failed = []
    timings[INFORMATIONAL] = measure(session, "GET", base + "?fresh=1", FRESH_REQUESTS, warmup=0, failed=failed)
    refused[INFORMATIONAL] = failed[0]
    counted, line = reads_since(metrics, line)
    reads[INFORMATIONAL] = statistics.median(counted) if counted else float("nan")
    failed = []
    timings[LIST_AGAIN] = measure(session, "GET", base + "rooms?kind=lag&fresh=1", FRESH_REQUESTS, warmup=0,
                                  failed=failed)
    refused[LIST_AGAIN] = failed[0]
    counted, line = reads_since(metrics, line)
    reads[LIST_AGAIN] = statistics.median(counted) if counted else float("nan")
    return timings, refused, reads


def main() -> int:
    parser = argparse.ArgumentParser(description="Every console page's p95 on the local stack.")
    parser.add_argument("--rooms", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=40, help="timed requests per page")
    args = parser.parse_args()
    console = Console()
    from tools.local.stack import ROOT, Stack

    out = ROOT / "out"
    with tempfile.TemporaryDirectory(prefix="baton-console-bench-", dir=out if out.is_dir() else None) as run_dir:
        stack = Stack(Path(run_dir), sweep_interval_s=86_400.0,
                      fake_config={"ack_prob": 0.0, "fail_prob": 0.0}).start()
        try:
            os.environ.update(stack.client_env())
            timings, refused, reads = run(stack, args.rooms, args.requests, console)
        except RuntimeError:
            log = Path(run_dir) / "admin.log"
            console.print("the admin function's log ends:\n" + "\n".join(log.read_text().splitlines()[-15:]))
            raise
        finally:
            stack.stop()
    load = os.getloadavg()[0]
    table = Table(title=f"console pages, {args.rooms:,} rooms, {args.requests} requests each "
                        f"(through the `baton console` proxy; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                        f"{os.cpu_count()} cores, load average {load:.1f})")
    for column in ("page", "p50 ms", "p95 ms", "max ms", "503s", "reads", f"p95 < {GOAL_MS:.0f} ms"):
        table.add_column(column, justify="left" if column == "page" else "right")
    missed = []
    for name, values in timings.items():
        ok = p95(values) < GOAL_MS and not refused[name]
        informational = name in (INFORMATIONAL, LIST_AGAIN)
        missed += [] if ok or informational else [name]
        table.add_row(name, f"{statistics.median(values):.0f}", f"{p95(values):.0f}", f"{max(values):.0f}",
                      str(refused[name]), f"{reads[name]:.0f}",
                      "yes" if ok else "not held to it" if informational else "[red]no[/]")
    console.print(table)
    if missed:
        console.print(f"[red]missed the goal[/]: {', '.join(missed)}")
        return 1
    console.print(f"[green]every page's p95 is under {GOAL_MS:.0f} ms[/]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
