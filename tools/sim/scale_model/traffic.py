"""The load and the platform's answers, as events in virtual time.

`Traffic` publishes messages to rooms (Pub/Sub ordered push: one push per
ordering key outstanding at a time, the next after the previous is
answered 2xx; a 5xx push comes back after a backoff), posts WhatsApp status
webhooks for every send the platform took as bench-core's fake platform
posts them (`Traffic._plan_statuses`), and runs each timer task at its due
time. Everything goes through the real service's handlers.
"""

from __future__ import annotations

import base64
import heapq
import json
import math
import random
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from shared.events import utc_iso
from shared.opcounts import begin_request
from shared.providers.whatsapp import sign
from shared.tasks import queue_index, timer_body
from tools.sim.fake_platform.config import FakeConfig
from tools.sim.scale_model.world import ScaleWorld

PUSH_LATENCY_US = 20_000  # Pub/Sub push to the function, one way
# The platform's webhook behaviour: the fake platform's defaults (but for the
# delivered share and latency, which the `Load` sets).
PLATFORM = FakeConfig()
PUSH_RETRY_US = 1_000_000  # Pub/Sub's minimum backoff after a refused push (the subscription's retry policy)


@dataclass(frozen=True)
class Load:
    """What the producers publish: `rooms` rooms (the sample), a steady
    `background_per_s` messages/s over `duration_s` s, and a burst of
    `burst_per_s` on top from `burst_start_s` for `burst_s` s (all rates for
    the sample). `delivered_share`: sends the platform reports delivered;
    `ack_median_ms`: their median latency. `room_burst`: messages a
    producer publishes to one room back to back (bench-core publishes in
    bursts of 3 per room: then a room's later messages are sent on the ack
    or the timeout of the one before, by the webhook or timeout function,
    not by enqueue)."""

    rooms: int
    background_per_s: float
    burst_per_s: float
    burst_start_s: float
    burst_s: float
    duration_s: float
    delivered_share: float = 0.87
    ack_median_ms: float = 400.0
    room_burst: int = 1


class Traffic:
    """Runs a `Load` on a `ScaleWorld` until every event has happened."""

    def __init__(self, world: ScaleWorld, load: Load, seed: int = 7) -> None:
        self.world, self.load = world, load
        self.rng = random.Random(seed)
        self.heap: list[tuple[int, int, str, object]] = []
        self._n = 0
        self.backlog: dict[str, deque[str]] = defaultdict(deque)
        self.outstanding: set[str] = set()
        self.published = 0
        self.sends_seen = 0
        self.secret = world.settings.whatsapp_app_secret
        self.t0 = world.clock.now_us()

    def _at(self, at_us: int, kind: str, payload: object) -> None:
        self._n += 1
        heapq.heappush(self.heap, (at_us, self._n, kind, payload))

    def plan(self) -> None:
        """Every publish of the load: bursts of `room_burst` messages to
        uniform rooms, at Poisson times."""
        load, t = self.load, 0.0
        while t < load.duration_s:
            burst = load.burst_start_s <= t < load.burst_start_s + load.burst_s
            rate = load.background_per_s + (load.burst_per_s if burst else 0.0)
            t += self.rng.expovariate(rate / load.room_burst)
            room = f"room-{self.rng.randrange(load.rooms):06d}"
            for _ in range(load.room_burst):
                self._at(self.t0 + int(t * 1e6), "publish", room)

    def run(self) -> None:
        """Process events in time order until none is left."""
        clock = self.world.clock
        while self.heap:
            at_us, _, kind, payload = heapq.heappop(self.heap)
            clock.advance_to_us(at_us)
            counts = begin_request()  # each event is one request: its Firestore operations counted apart
            getattr(self, f"_on_{kind}")(payload)
            for name in ("firestore_reads", "firestore_writes", "window_reads", "window_writes"):
                if getattr(counts, name):
                    self.world.meter.count(name, "all", getattr(counts, name), at_us)
            self._follow_up()

    # -- events

    def _on_publish(self, room: str) -> None:
        self.published += 1
        message_id = f"{room}-m{self.published}"
        self.backlog[room].append(message_id)
        self.world.meter.count("pubsub publish bytes per ordering key", room, 300, self.world.clock.now_us())
        if room not in self.outstanding:
            self.outstanding.add(room)
            self._at(self.world.clock.now_us() + PUSH_LATENCY_US, "push", room)

    def _on_push(self, room: str) -> None:
        message_id = self.backlog[room][0]
        now = self.world.clock.now_us()
        self._invocation("enqueue")
        reply = self.world.serve("enqueue").handle_push(_push_body(room, message_id, now))
        if reply.status >= 300:
            self._at(now + PUSH_RETRY_US, "push", room)
            return
        self.backlog[room].popleft()
        if self.backlog[room]:
            self._at(self.world.clock.now_us() + PUSH_LATENCY_US, "push", room)
        else:
            self.outstanding.discard(room)

    def _on_status(self, item: tuple[str, str, str]) -> None:
        raw = _status_body([item], self.world.clock.now_us())
        self._invocation("webhook")
        self.world.serve("webhook").handle_status_webhook(raw, sign(raw, self.secret))

    def _on_timer(self, task: object) -> None:
        if task.deleted:  # type: ignore[attr-defined]  # an ack deleted it (DeleteTask): it never runs
            return
        self._invocation("timeout")
        queue = f"queue-{queue_index(task.timer.room_id, self.world.settings.tasks_queue_count)}"  # type: ignore[attr-defined]
        self.world.meter.count("task dispatches per queue", queue, 1, self.world.clock.now_us())
        self.world.serve("timeout").handle_timer(json.dumps(timer_body(task.timer)).encode())  # type: ignore[attr-defined]

    # -- what a handler left behind: sends to answer, timers to run

    def _follow_up(self) -> None:
        calls = self.world.platform.calls
        for call in calls[self.sends_seen:]:
            self.sends_seen += 1
            if call.provider_message_id is not None:
                self._plan_statuses(call)
        timers = self.world.timers
        for task in timers.new:
            self._at(task.due_at_us, "timer", task)
        timers.new.clear()

    def _plan_statuses(self, call: Any) -> None:
        """The status webhooks of one message the platform took, planned as
        the fake platform bench-core runs against plans them
        (tools/sim/fake_platform/whatsapp.py, its `FakeConfig` shares): `sent`
        5 ms after it took the message, then `failed`, or for `ack_prob` of
        the rest `delivered` (or `read` alone) after a log-normal latency
        (median `delivered_median_ms`), `read` after it for `read_prob`,
        some swapped, some posted twice."""
        cfg, rng = PLATFORM, self.rng
        t0 = call.reached_us if call.reached_us is not None else call.started_us
        item = (call.delivery_id, call.provider_message_id)
        self._at(t0 + 5_000, "status", (*item, "sent"))
        latency_us = int(self.load.ack_median_ms * 1000 * math.exp(cfg.ack_sigma * rng.gauss(0, 1)))
        if rng.random() < cfg.fail_prob:
            self._at(t0 + latency_us, "status", (*item, "failed"))
            return
        if rng.random() >= self.load.delivered_share:
            return
        if rng.random() < cfg.read_without_delivered_prob:
            statuses = [(latency_us, "read")]
        else:
            statuses = [(latency_us, "delivered")]
            if rng.random() < cfg.read_prob:
                statuses.append((latency_us + int(cfg.read_delay_ms * 1000 * math.exp(0.5 * rng.gauss(0, 1))), "read"))
        if len(statuses) == 2 and rng.random() < cfg.reorder_prob:
            (t1, s1), (t2, s2) = statuses
            statuses = [(t1, s2), (t2, s1)]
        for delay_us, status in statuses:
            self._at(t0 + delay_us, "status", (*item, status))
            if rng.random() < cfg.duplicate_prob:
                self._at(t0 + delay_us + 50_000, "status", (*item, status))

    def _invocation(self, function: str) -> None:
        self.world.meter.count("function invocations", function, 1, self.world.clock.now_us())


def _push_body(room: str, message_id: str, now_us: int) -> bytes:
    """A Pub/Sub push envelope of one text message (shared/push.py's contract)."""
    attrs = {"room_id": room, "provider": "whatsapp", "recipient": "15550001", "message_id": message_id}
    data = base64.b64encode(json.dumps({"type": "text", "text": "campaign text"}).encode()).decode()
    return json.dumps({"message": {"data": data, "attributes": attrs, "messageId": message_id,
                                   "publishTime": utc_iso(now_us)},
                       "subscription": "projects/baton-local/subscriptions/outbound"}).encode()


def _status_body(items: list[tuple[str, str, str]], at_us: int) -> bytes:
    """A WhatsApp status webhook body (Cloud API `statuses` of the messages field)."""
    statuses = [{"id": wamid, "status": status, "timestamp": str(at_us // 1_000_000), "recipient_id": "15550001",
                 "biz_opaque_callback_data": delivery_id,
                 **({"errors": [{"code": 131026, "title": "Message undeliverable"}]} if status == "failed" else {})}
                for delivery_id, wamid, status in items]
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [
        {"field": "messages", "value": {"messaging_product": "whatsapp", "statuses": statuses}}]}]}).encode()
