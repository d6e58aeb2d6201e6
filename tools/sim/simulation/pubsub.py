"""Pub/Sub in the simulation: the outbound topic's ordered push subscription
to `enqueue` (one outstanding push per room, in publish order, again after
anything but 2xx, dead-lettered to `deadletter` after DLQ_ATTEMPTS failures
by half the time, an acked push duplicated late), and producers that
publish without an ordering key (each message pushed on its own).
"""

from __future__ import annotations

import base64
import functools
import json
from typing import TYPE_CHECKING

from shared.events import utc_iso
from shared.service import DEAD_LETTER_COUNT_ATTRIBUTE
from tools.sim.simulation.workload import Message, RoomPlan

if TYPE_CHECKING:
    from tools.sim.simulation.world import World

DLQ_ATTEMPTS = 5


class SimPubSub:
    """See the module; `start(plan)` begins a room's pushes."""

    def __init__(self, world: World) -> None:
        self.w = world

    def push_body(self, plan: RoomPlan, msg: Message, dead_letter_attempts: int | None = None) -> bytes:
        attrs = {"room_id": plan.room_id, "provider": plan.provider, "recipient": plan.recipient,
                 "message_id": msg.message_id}
        if plan.sequenced:
            attrs["sequence"] = str(msg.index + 1)
        if msg.deliver_at_ms is not None:
            attrs["deliver_at"] = utc_iso(self.w.start_us + msg.deliver_at_ms * 1000)
        if dead_letter_attempts is not None:
            attrs[DEAD_LETTER_COUNT_ATTRIBUTE] = str(dead_letter_attempts)
        content = {"type": "text", "text": msg.message_id} if not msg.media else \
            {"type": "image", "link": f"https://media.test/{msg.message_id}.png", "caption": msg.message_id}
        if msg.media:
            attrs["prepare"] = "media"
        data = base64.b64encode(json.dumps(content).encode()).decode()
        return json.dumps({"message": {"data": data, "attributes": attrs, "messageId": msg.pubsub_id,
                                       "publishTime": utc_iso(self.w.start_us + msg.published_us * 1000)},
                           "subscription": "projects/baton-sim/subscriptions/outbound"}).encode()

    def _unordered(self, plan: RoomPlan, msg: Message, failures: int = 0) -> None:
        """A message published without an ordering key: pushed on its own,
        whatever its room's other messages do (late by up to 8 s now and
        then), again after a failure, dead-lettered as the ordered ones."""
        body = self.push_body(plan, msg)

        def answered(status: int | None) -> None:
            if status is not None and 200 <= status < 300:
                if self.w.faults.chance("dup", "duplicated push"):
                    self._duplicate_push(body, plan.room_id, msg)
            elif failures + 1 >= DLQ_ATTEMPTS and self.w.faults.rng.random() < 0.5:
                self.w.faults.count("push dead-lettered by Pub/Sub")
                self._dead_letter(plan, msg, 1)
            else:
                self.w.sched.at(self.w.sched.now_us() + self.w.faults.redelivery_ms() * 1000,
                              lambda: self._unordered(plan, msg, failures + 1))

        late_us = 0
        if failures == 0 and self.w.faults.rng.random() < 0.3:
            late_us = self.w.faults.rng.randint(100, 8000) * 1000
            self.w.faults.count("unordered push late (producer sequence out of order)")
        self.w.invoke("enqueue", (plan.room_id,), msg.message_id, lambda: self.w.service.handle_push(body), answered,
                    self.w.faults.rng.randint(1000, 50_000) + late_us)

    def start(self, plan: RoomPlan) -> None:
        """Push the room's head message if it is published and none is outstanding."""
        if plan.unordered:
            for msg in plan.messages:
                self.w.sched.at(self.w.start_us + msg.published_us * 1000, functools.partial(self._unordered, plan, msg))
            return
        if plan.pushing or plan.head >= len(plan.messages):
            return
        msg = plan.messages[plan.head]
        at_us = self.w.start_us + msg.published_us * 1000
        if at_us > self.w.sched.now_us():
            self.w.sched.at(at_us, lambda: self.start(plan))
            return
        plan.pushing = True
        body = self.push_body(plan, msg)

        def answered(status: int | None) -> None:
            plan.pushing = False
            if status is not None and 200 <= status < 300:
                plan.head, plan.failures = plan.head + 1, 0
                if self.w.faults.chance("dup", "duplicated push"):
                    self._duplicate_push(body, plan.room_id, msg)
            else:
                plan.failures += 1
                if plan.failures >= DLQ_ATTEMPTS and self.w.faults.rng.random() < 0.5:
                    self.w.faults.count("push dead-lettered by Pub/Sub")
                    plan.head, plan.failures = plan.head + 1, 0
                    self._dead_letter(plan, msg, 1)
                else:
                    self.w.sched.at(self.w.sched.now_us() + self.w.faults.redelivery_ms() * 1000, lambda: self.start(plan))
                    return
            self.start(plan)

        self.w.invoke("enqueue", (plan.room_id,), msg.message_id, lambda: self.w.service.handle_push(body), answered,
                    self.w.faults.rng.randint(1000, 50_000))

    def _duplicate_push(self, body: bytes, room_id: str, msg: Message, tries: int = 1) -> None:
        def answered(status: int | None) -> None:
            if status is None or not 200 <= status < 300:
                self.w.retry(tries, lambda n: self._duplicate_push(body, room_id, msg, n))

        self.w.invoke("enqueue", (room_id,), f"{msg.message_id} (duplicate)", lambda: self.w.service.handle_push(body),
                    answered, self.w.faults.rng.randint(0, 30_000_000))

    def _dead_letter(self, plan: RoomPlan, msg: Message, tries: int) -> None:
        body = self.push_body(plan, msg, DLQ_ATTEMPTS)

        def answered(status: int | None) -> None:
            if status is None or not 200 <= status < 300:
                self.w.retry(tries, lambda n: self._dead_letter(plan, msg, n))

        self.w.invoke("deadletter", (plan.room_id,), msg.message_id, lambda: self.w.service.handle_dead_letter(body),
                    answered, self.w.faults.rng.randint(1000, 2_000_000))
