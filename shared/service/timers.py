"""Timer handlers: a Cloud Tasks ack-timeout timer, and the watchdog's sweep.

Wakes rooms; must not parse pushes or statuses.
"""

from __future__ import annotations

import contextvars
import json

from shared import outbox
from shared.events import EventType
from shared.push import ROOM_ID
from shared.room import (
    TimerFired,
    WatchdogSweep,
)
from shared.service.core import Reply, ServiceCore
from shared.shards import ShardCursor


class TimerHandlers:
    """Timers and the watchdog.

    Args:
        core: applies each event to its room (shared/service/core.py).
    """

    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    def handle_timer(self, body: bytes) -> Reply:
        """A Cloud Tasks timer. 5xx makes Cloud Tasks retry (its queues retry
        without limit, infra/tasks.tf). A body that is not a timer can never
        become one, so it is answered 200 (`result: dropped`, with the reason)
        and logged as an error rather than retried forever; if it was meant
        for a real room, that room's stored wake-up brings the watchdog.
        `accepted_deadline_us` (epoch us), if the body has it, is the
        acceptance of the attempt's send the arming instance saw."""
        arrived = self.core.now_us()
        try:
            t = json.loads(body)
            room_id = str(t["room_id"])
            accepted = t.get("accepted_deadline_us")  # absent in a body older code wrote
            event = TimerFired(int(t["incarnation"]), int(t["seq"]), int(t["attempt"]), int(t["due_at_us"]), arrived,
                               None if accepted is None else int(accepted))
            if not ROOM_ID.fullmatch(room_id):
                raise ValueError(f"bad room id {room_id[:80]!r}")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            reason = f"not a baton timer: {type(exc).__name__}: {exc}"[:300]
            print(json.dumps({"severity": "ERROR", "message": f"timeout: dropped a task: {reason}"}), flush=True)
            return Reply(200, {"result": "dropped", "error": reason})
        self.core.apply(room_id, event, "timeout")
        return Reply(200, {"result": "ok"})

    def handle_sweep(self) -> Reply:
        """The watchdog: re-drive every room whose wake-up is overdue by more
        than WATCHDOG_GRACE_MS, oldest first, SWEEP_CONCURRENCY rooms at a
        time, in batches of SWEEP_BATCH_SIZE, until none is left or
        SWEEP_BUDGET_S (s) is spent; the rest wait for the next sweep. Each
        batch is the next page of the oldest-first query (a cursor per index
        shard), not its first page again: rooms that fail stay overdue and
        first in the query, and SWEEP_BATCH_SIZE of them would otherwise fill
        every batch and hide the rooms behind them. A room that becomes
        overdue behind a shard's cursor during the sweep waits for the next
        sweep. A room that fails is left for the next sweep; the answer counts them
        (`overdue`: rooms taken up; `left`: taken up but not reached in the
        budget). Any error of one room (Firestore's, a timer not armed, a
        document `room_as_read` cannot read) is logged (ERROR, with the room
        and the reason) and counted as `failed`; the other rooms go on.

        Then, in the same budget, it reads again the rooms earlier sweeps
        left idle within SWEEP_REREAD_S (s; `RoomStore.recently_swept`: one
        query, at most SWEEP_BATCH_SIZE rooms, those this sweep did not take
        up; `reread` counts them): a sweep is not redelivered, and one that
        died after ending a room's last message left that end's log line in
        the room's outbox, which this read logs (shared/outbox.py,
        `of_sweep`). The sweep's room writes run under `outbox.sweeping`."""
        with outbox.sweeping(self.core.now_us()):
            return self._sweep()

    def _sweep(self) -> Reply:
        """`handle_sweep` within `outbox.sweeping`."""
        started = self.core.monotonic()
        budget_end = started + self.core.settings.sweep_budget_s
        seen: set[str] = set()
        cursor = ShardCursor()  # each query starts after the rooms the last one gave, rescued or not
        counts = {"overdue": 0, "rescued": 0, "failed": 0, "left": 0, "reread": 0}

        def rescue(room_id: str) -> str:
            if self.core.monotonic() >= budget_end:
                return "left"
            try:
                decision = self.core.apply(room_id, WatchdogSweep(self.core.now_us()), "sweep")
            except Exception as exc:  # noqa: BLE001 - one room's trouble (even a document we cannot read) stops no other
                # Left overdue, so it stays in the query and in this log until
                # it is mended: visible, with its reason, every sweep.
                print(json.dumps({"severity": "ERROR", "message": f"sweep: room {room_id} left overdue: "
                                  f"{type(exc).__name__}: {exc}"[:500]}), flush=True)
                return "failed"
            return "rescued" if any(e.event == EventType.WATCHDOG_RESCUED for e in decision.events) else "ok"

        pool = self.core.pool(self.core.settings.sweep_concurrency) \
            if self.core.settings.sweep_concurrency > 1 else None

        def rescue_all(batch: list[str]) -> list[str]:
            if pool is None:
                return [rescue(r) for r in batch]
            # Each rescue in a copy of this request's context, taken here (a
            # worker thread's own context has neither the request's operation
            # counts nor `outbox.sweeping`): its operations count for the request.
            copies = [contextvars.copy_context() for _ in batch]
            return list(pool.map(lambda rc: rc[1].run(rescue, rc[0]), zip(batch, copies, strict=True)))

        try:
            while self.core.monotonic() < budget_end:
                before = self.core.now_us() - self.core.policy.watchdog_grace_ms * 1000
                page = self.core.store.overdue_rooms(before, self.core.settings.sweep_batch_size, cursor)
                if not page:
                    break
                # A room rescued to a wake-up still overdue can come back further on: once a sweep.
                batch = [r for r in page if r not in seen]
                seen.update(batch)
                counts["overdue"] += len(batch)
                for result in rescue_all(batch):
                    if result in counts:
                        counts[result] += 1
            if self.core.monotonic() < budget_end:
                since = self.core.now_us() - self.core.settings.sweep_reread_s * 1_000_000
                again = [r for r in self.core.store.recently_swept(since, self.core.settings.sweep_batch_size)
                         if r not in seen]
                counts["reread"] += len(again)
                for result in rescue_all(again):
                    if result in ("failed", "left", "rescued"):
                        counts[result] += 1
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)  # an error stops the rooms not yet started
        return Reply(200, {**counts, "seconds": round(self.core.monotonic() - started, 3)})
