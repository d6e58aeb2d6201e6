"""The simulated deployment: the real service over instrumented fakes.

`ScaleWorld` builds a `DeliveryService` (shared/service) with the fakes of
tools/sim/fakes and a simulated clock, and meters every operation the model
checks: room writes per document and per index range (`IndexLayout`),
timer task creates and dispatches per queue (`shared.tasks.queue_index`),
invocations per function, event-log bytes, and each request's Firestore
reads and writes (shared/opcounts.py): the room store's as the real
`RoomStore` counts them (one read per transaction and per `read_room`, one
write per committed change and per blind write: a `sent` proof's echo; a
WhatsApp send's acceptance rides on its timer since issue 46, so the
acceptance's blind write is counted only if the service still makes it,
`MeteredStore.record_accepted`), and the send window's by
the real `SenderWindow` over an in-memory client (memfirestore.py), which
counts its own.
"""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path
from typing import Any

from shared import config
from shared.events import DeliveryEvent
from shared.opcounts import op_counts
from shared.room import Decision, RoomState, policy_from_settings
from shared.sender_window import SenderWindow
from shared.service import DeliveryService, ServiceCore
from shared.tasks import queue_index
from tools.sim.fakes import FakePlatform, FakeRoomStore, FakeTimers, SimClock
from tools.sim.scale_model.memfirestore import MemFirestore
from tools.sim.scale_model.meter import IndexLayout, Meter

# The functions that send (each through its own instance's send window).
SENDING_FUNCTIONS = ("enqueue", "webhook", "timeout")


class MeteredStore(FakeRoomStore):
    """FakeRoomStore that meters each room write: one per document, and one
    per index range whose entry the write changes."""

    def __init__(self, clock: SimClock, meter: Meter, layout: IndexLayout, index_shards: int) -> None:
        super().__init__(clock, index_shards=index_shards)
        self._meter, self._layout = meter, layout

    def apply(self, room_id: str, decide_fn: Any) -> Decision:
        op_counts().firestore_reads += 1  # RoomStore.apply reads the room once (no contention in virtual time)
        return super().apply(room_id, decide_fn)

    def read_room(self, room_id: str, deadline_s: float | None = None) -> RoomState | None:
        op_counts().firestore_reads += 1
        return super().read_room(room_id, deadline_s)

    def record_echo(self, room_id: str, *args: Any, **kwargs: Any) -> None:
        if room_id in self.docs:
            op_counts().firestore_writes += 1
        super().record_echo(room_id, *args, **kwargs)

    def _write(self, room_id: str, decision: Decision) -> str:
        op_counts().firestore_writes += 1 + len(decision.dead_letters)
        old = self.docs.get(room_id)
        write_id = super()._write(room_id, decision)
        now = self._clock.now_us()
        self._meter.count("document writes", room_id, 1, now)
        self._meter.count("database writes", "all", 1, now)
        for name, sequential in self._layout.ranges(old, self.docs[room_id], now):
            self._meter.count("sequential index range writes" if sequential else "spread index writes", name, 1, now)
        return write_id

    def record_accepted(self, room_id: str, incarnation: int, seq: int, attempt: int, deadline_us: int) -> None:
        if room_id in self.docs:
            op_counts().firestore_writes += 1
        super().record_accepted(room_id, incarnation, seq, attempt, deadline_us)
        self._meter.count("document writes", room_id, 1, self._clock.now_us())
        self._meter.count("database writes", "all", 1, self._clock.now_us())


class MeteredTimers(FakeTimers):
    """FakeTimers that meters task creates per queue and keeps the new tasks
    for the model to run at their time."""

    def __init__(self, clock: SimClock, meter: Meter, queue_count: int) -> None:
        super().__init__(clock)
        self._meter, self._queues = meter, queue_count
        self.new: list[Any] = []

    def schedule(self, timer: Any) -> None:
        before = len(self.tasks)
        super().schedule(timer)
        if len(self.tasks) > before:
            task = self.tasks[-1]
            self.new.append(task)
            self._meter.count("task creates per queue", f"queue-{queue_index(timer.room_id, self._queues)}", 1,
                              self._clock.now_us())


class CountingLog:
    """An event log that only counts the bytes of the lines it would write."""

    def __init__(self, meter: Meter, clock: SimClock) -> None:
        self._meter, self._clock = meter, clock
        self.lines = 0

    def emit(self, event: DeliveryEvent) -> None:
        self.lines += 1
        self._meter.count("event log bytes", "all", len(json.dumps(event.to_record())) + 1, self._clock.now_us())

    def emit_again(self, event: DeliveryEvent) -> None:
        """A line a room's outbox kept, logged again (EventLog.emit_again: its non-null keys only)."""
        self.lines += 1
        record = {k: v for k, v in event.to_record().items() if v is not None}
        self._meter.count("event log bytes", "all", len(json.dumps(record)) + 1, self._clock.now_us())


@dataclasses.dataclass
class ScaleWorld:
    """The fakes, the meter and the service of one model run."""

    clock: SimClock
    meter: Meter
    store: MeteredStore
    timers: MeteredTimers
    platform: FakePlatform
    log: CountingLog
    settings: config.Settings
    service: DeliveryService
    windows: dict[str, SenderWindow]

    def serve(self, function: str) -> DeliveryService:
        """The service as `function`'s instance runs it: with that
        instance's own send window (leases are per process)."""
        self.service.core.sender_window = self.windows[function]
        return self.service

    @classmethod
    def build(cls, firestore_tf: Path, index_shards: int, tasks_queue_count: int,
              whatsapp_senders: str = "", seed: int = 7) -> ScaleWorld:
        """A world with the local defaults but for the queue and shard counts
        the deployment would have, in direct webhook mode, sending from
        `whatsapp_senders` (WHATSAPP_SENDERS; empty: the local default
        number) through the real send window."""
        clock, meter = SimClock(), Meter()
        settings = dataclasses.replace(config.load(), webhook_mode="direct", event_log_path="", metrics_log_path="",
                                       index_shards=index_shards, tasks_queue_count=tasks_queue_count,
                                       whatsapp_senders=whatsapp_senders)
        store = MeteredStore(clock, meter, IndexLayout.from_terraform(firestore_tf), index_shards)
        timers = MeteredTimers(clock, meter, tasks_queue_count)
        platform = FakePlatform(clock, settings.send_timeout_ms)
        log = CountingLog(meter, clock)
        # One instance of each sending function, as bench-core's local stack
        # runs them: each its own process, with its own window (its own leases)
        # over the one Firestore.
        db = MemFirestore()
        # The window's own calls take simulated time only: the model's counts do not depend on the machine's load.
        def sim_ns() -> int:
            return clock.now_us() * 1000

        windows = {function: SenderWindow(db, random.Random(seed + i), monotonic_ns=sim_ns)  # type: ignore[arg-type]
                   for i, function in enumerate(SENDING_FUNCTIONS)}
        service = DeliveryService(ServiceCore(settings, policy_from_settings(settings), store, timers,
                                              {"whatsapp": platform}, log, clock=clock))  # type: ignore[arg-type]
        return cls(clock, meter, store, timers, platform, log, settings, service, windows)
