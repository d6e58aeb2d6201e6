"""The process of one alternative to baton, (a), (b) or (c), all in one
asyncio event loop, against the fake platform (tools/sim/fake_platform/):

- `fire` (a): every message is sent the moment it is published, concurrently;
- `delay` (b): per room, the next send starts `--delay-ms` after the previous
  send call returned; acks are not waited for;
- `actor` (c): per room, an actor sends its head message, then waits for its
  `delivered`, `read` or `failed` webhook, or for `--ack-timeout-ms` measured
  from the send call's return (baton's rule), before sending the next.
  Every room lives in this process's memory: nothing persists.

All three serve the platform's signed status webhooks on `--port` (checking
`X-Hub-Signature-256` as baton does) and send with the WhatsApp wire format
and baton's delivery-id format as `biz_opaque_callback_data`. A send the
platform refuses or does not answer is tried again (at most 5 tries, 0.2 s
apart, doubling); none happens with the comparison's fake configuration.

It replays the plan (`--plan`, tools/bench/compare/workload.py) from its own
start, writes `--result` (JSON: start and end epoch s, counts, the
hand-overs it measured itself) when every message has been sent (and, for
the actor, has ended), then keeps answering webhooks until SIGTERM.

    python -m tools.bench.compare.alternatives --system actor --fake-url http://127.0.0.1:PORT \\
        --port PORT2 --plan out/compare/plan.json --result out/compare/actor.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from shared.providers.whatsapp import WhatsAppClient, parse_statuses, signature_valid
from shared.room import make_delivery_id
from tools.bench.compare.httpio import HttpClient, HttpError, serve
from tools.bench.compare.workload import Planned, load_plan

SEND_PATH = "/v21.0/100000000000001/messages"  # the fake's defaults, as baton's config has them
ACCESS_TOKEN = "local-access-token"
APP_SECRET = "local-app-secret"
SEND_TRIES = 5
ACK_STATUSES = frozenset({"delivered", "read", "failed"})


class Alternative:
    """One system's state: the send client, the rooms, the pending acks."""

    def __init__(self, system: str, fake_url: str, ack_timeout_ms: float, delay_ms: float) -> None:
        parts = urlsplit(fake_url)
        self.system = system
        self.client = HttpClient(parts.hostname or "127.0.0.1", parts.port or 80)
        self.ack_timeout_s = ack_timeout_ms / 1000
        self.delay_s = delay_ms / 1000
        self.pending: dict[str, asyncio.Future[float]] = {}  # delivery id -> epoch s of its ack's arrival
        self.queues: dict[str, asyncio.Queue[Planned]] = {}
        self.remaining: dict[str, int] = defaultdict(int)
        self.tasks: list[asyncio.Task[None]] = []
        self.counts: dict[str, int] = defaultdict(int)
        self.handover_ms: list[float] = []  # ack arrival -> next send start, this process's own clock
        self.webhooks = 0

    # ------------------------------------------------------------ platform

    async def send(self, p: Planned) -> tuple[str, float]:
        """Send `p` (retrying refusals); returns (delivery id, epoch s the
        accepted call returned). Registers the ack future before the call, so
        an ack arriving before the answer is not lost."""
        wait = 0.2
        for attempt in range(1, SEND_TRIES + 1):
            delivery_id = make_delivery_id(p.room, 1, p.k, attempt, time.time_ns() // 1000)
            if self.system == "actor":
                self.pending[delivery_id] = asyncio.get_running_loop().create_future()
            body = json.dumps(WhatsAppClient.request_body(p.recipient, f"message {p.k} of {p.room}",
                                                          delivery_id)).encode()
            try:
                status, answer = await self.client.post(SEND_PATH, body, {
                    "Authorization": f"Bearer {ACCESS_TOKEN}", "Content-Type": "application/json"})
                ok = status == 200 and bool(json.loads(answer).get("messages"))
            except (HttpError, OSError, ValueError):
                ok = False
            self.counts["send_calls"] += 1
            if ok:
                return delivery_id, time.time()
            self.counts["send_errors"] += 1
            self.pending.pop(delivery_id, None)
            await asyncio.sleep(wait)
            wait *= 2
        self.counts["given_up"] += 1
        return "", time.time()

    def on_webhook(self, method: str, path: str, headers: dict[str, str], body: bytes) -> int:
        """A status webhook: 401 on a bad signature, else 200; acks resolve
        the waiting actor's future."""
        arrived = time.time()
        if method != "POST":
            return 200
        if not signature_valid(body, headers.get("x-hub-signature-256"), APP_SECRET):
            return 401
        self.webhooks += 1
        try:
            statuses = parse_statuses(json.loads(body))
        except ValueError:
            return 400
        for st in statuses:
            if st.status in ACK_STATUSES:
                fut = self.pending.get(st.callback_data or "")
                if fut is not None and not fut.done():
                    fut.set_result(arrived)
        return 200

    # ------------------------------------------------------------ systems

    async def fire(self, p: Planned) -> None:
        """(a): send at once, wait for nothing."""
        await self.send(p)
        self.counts["sent"] += 1

    async def room_loop(self, room: str) -> None:
        """(b) and (c): one room's messages, one after another."""
        queue = self.queues[room]
        ready_at = 0.0  # (b): earliest epoch s of the next send
        acked_at: float | None = None  # (c): arrival of the previous message's ack
        while self.remaining[room] > 0:
            p = await queue.get()
            self.remaining[room] -= 1
            if self.system == "delay" and time.time() < ready_at:
                await asyncio.sleep(ready_at - time.time())
            if acked_at is not None:
                self.handover_ms.append((time.time() - acked_at) * 1000)
            delivery_id, returned = await self.send(p)
            self.counts["sent"] += 1
            ready_at, acked_at = returned + self.delay_s, None
            if self.system == "actor" and delivery_id:
                fut = self.pending[delivery_id]
                try:
                    acked_at = await asyncio.wait_for(asyncio.shield(fut), self.ack_timeout_s)
                    self.counts["acked"] += 1
                except TimeoutError:
                    self.counts["timed_out"] += 1
                finally:
                    self.pending.pop(delivery_id, None)

    def arrive(self, p: Planned) -> None:
        """A message is published: hand it to its system."""
        if self.system == "fire":
            self.tasks.append(asyncio.create_task(self.fire(p)))
            return
        if p.room not in self.queues:
            self.queues[p.room] = asyncio.Queue()
            self.tasks.append(asyncio.create_task(self.room_loop(p.room)))
        self.queues[p.room].put_nowait(p)

    async def replay(self, plan: list[Planned]) -> tuple[float, float]:
        """Publish the plan at its offsets and wait until every message is
        done; returns (start, end) epoch s."""
        for p in plan:
            self.remaining[p.room] += 1
        started = time.time()
        for p in plan:
            delay = started + p.offset_s - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            self.arrive(p)
        await asyncio.gather(*self.tasks)
        return started, time.time()


async def main_async(args: argparse.Namespace) -> None:
    """Serve webhooks, replay the plan, write the result, serve until SIGTERM."""
    alt = Alternative(args.system, args.fake_url, args.ack_timeout_ms, args.delay_ms)
    server = await serve("127.0.0.1", args.port, alt.on_webhook)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    plan = load_plan(Path(args.plan))
    replay = asyncio.create_task(alt.replay(plan))
    done, _ = await asyncio.wait({replay, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
    if replay in done:
        started, finished = replay.result()
        result: dict[str, Any] = {"system": args.system, "started_at": started, "finished_at": finished,
                                  "counts": dict(alt.counts), "handover_ms": alt.handover_ms,
                                  "webhooks": alt.webhooks}
        tmp = Path(args.result + ".tmp")
        tmp.write_text(json.dumps(result))
        tmp.rename(args.result)
        await stop.wait()  # keep answering the platform's webhooks until the driver is done
    server.close()
    await alt.client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--system", choices=["fire", "delay", "actor"], required=True)
    parser.add_argument("--fake-url", required=True)
    parser.add_argument("--port", type=int, required=True, help="port of this process's webhook")
    parser.add_argument("--plan", required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--ack-timeout-ms", type=float, default=3000.0)
    parser.add_argument("--delay-ms", type=float, default=300.0)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
