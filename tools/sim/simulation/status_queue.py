"""The status queue of WEBHOOK_MODE=queued in the simulation: the status topic
and its ordered push subscription to the `status` function.

`publish` is baton's `StatusQueue` port (a port call: latency, stalls, a
crash, or `StatusPublishFailed` with nothing published). Each batch goes to
its ordering key (a room, or `recipient:{provider}:{id}` for receipts); the
subscription pushes one message per key at a time, in publish order, again
after anything but 2xx (or no answer), and may push an acked one again
later. `record_failure` and `dead_letter` keep the failure counts and the
error queue in memory (what `baton statuses list` would show).
"""

from __future__ import annotations

import base64
import json
from collections import deque
from typing import TYPE_CHECKING, Any

from shared.status_queue import KIND_RECIPIENT_RECEIPTS, KIND_ROOM_STATUSES, StatusPublishFailed
from tools.sim.fakes import Crash

if TYPE_CHECKING:
    from tools.sim.simulation.world import World


class SimStatusQueue:
    """See the module. `error_queue`: (kind, room or key, reason, attempts, data: None when unroutable)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.keys: dict[str, deque[tuple[str, bytes, dict[str, str]]]] = {}
        self.pushing: set[str] = set()
        self.failures: dict[str, int] = {}
        self.error_queue: list[tuple[str, str | None, str, int | None, bytes | None]] = []
        self._ids = 0

    def publish(self, batches: Any, unroutable: Any = (), receipts: Any = ()) -> int:
        faults, sched = self.world.faults, self.world.sched
        sched.pause(faults.port_latency_us("pubsub.publish"))
        if faults.chance("crash", "crash before pubsub.publish"):
            raise Crash("injected: died before publishing statuses")
        if faults.chance("store_error", "status publish failed"):
            raise StatusPublishFailed("injected: Pub/Sub did not take the statuses")
        n = 0
        for b in batches:
            self._enqueue(b.room_id, b.encode(), {"room_id": b.room_id, "kind": KIND_ROOM_STATUSES})
            n += 1
        for r in receipts:
            self._enqueue(r.ordering_key, r.encode(), {"kind": KIND_RECIPIENT_RECEIPTS,
                                                       "recipient_key": r.recipient_key})
            n += 1
        for u in unroutable:
            self.error_queue.append(("unroutable", None, u.reason, None, None))
            n += 1
        return n

    def record_failure(self, pubsub_message_id: str, room_id: str, error: str) -> int:
        self.failures[pubsub_message_id] = self.failures.get(pubsub_message_id, 0) + 1
        return self.failures[pubsub_message_id]

    def dead_letter(self, data: bytes, room_id: str, reason: str, attempts: int, kind: str = KIND_ROOM_STATUSES) -> None:
        self.world.faults.count("status message dead-lettered to the error queue")
        self.error_queue.append((kind, room_id, reason, attempts, data))

    def replay(self) -> int:
        """`baton statuses replay` (shared/admin/error_queue.py): each kept
        room's statuses and recipient's receipts published again, ordered as
        the webhook published them; unroutable records stay. Returns how
        many were replayed."""
        kept, n = [], 0
        for kind, key, reason, attempts, data in self.error_queue:
            if data is None or key is None:
                kept.append((kind, key, reason, attempts, data))
                continue
            if kind == KIND_RECIPIENT_RECEIPTS:
                self._enqueue(f"recipient:{key}", data, {"kind": KIND_RECIPIENT_RECEIPTS, "recipient_key": key})
            else:
                self._enqueue(key, data, {"room_id": key, "kind": KIND_ROOM_STATUSES})
            n += 1
        self.error_queue = kept
        self.world.faults.count("status message replayed from the error queue", n)
        return n

    def _enqueue(self, key: str, data: bytes, attrs: dict[str, str]) -> None:
        self._ids += 1
        self.keys.setdefault(key, deque()).append((f"st-{self._ids}", data, attrs))
        self.world.sched.at(self.world.sched.now_us(), lambda: self._deliver(key))

    def _envelope(self, message_id: str, data: bytes, attrs: dict[str, str]) -> bytes:
        return json.dumps({"message": {"data": base64.b64encode(data).decode(), "attributes": attrs,
                                       "messageId": message_id},
                           "subscription": "projects/baton-sim/subscriptions/statuses"}).encode()

    def _deliver(self, key: str) -> None:
        queue = self.keys.get(key)
        if key in self.pushing or not queue:
            return
        self.pushing.add(key)
        message_id, data, attrs = queue[0]
        body = self._envelope(message_id, data, attrs)
        world = self.world

        def answered(status: int | None) -> None:
            self.pushing.discard(key)
            if status is not None and 200 <= status < 300:
                queue.popleft()
                if world.faults.chance("dup", "duplicated status push"):
                    world.invoke("status", (), f"{key} (duplicate)", lambda: world.service.handle_status_push(body),
                                 lambda _s: None, world.faults.rng.randint(0, 20_000_000))
                self._deliver(key)
            elif not (world.ended and world.sched.now_us() > world.end_us):
                world.sched.at(world.sched.now_us() + world.faults.redelivery_ms() * 1000, lambda: self._deliver(key))

        world.invoke("status", (attrs.get("room_id", ""),) if attrs.get("room_id") else (), key,
                     lambda: world.service.handle_status_push(body), answered, world.faults.rng.randint(1000, 50_000))
