"""The ports of the delivery service: what it asks of the outside world, as
typed Protocols.

Each has a production adapter and an in-memory fake (tools/sim/fakes, the
simulation's), and mypy checks that both fit (tools/sim/fakes/ports_check.py):

- `RoomStore`: the rooms' optimistic transaction, the blind writes beside it,
  the records and queries the handlers need (shared/store.py, Firestore);
- `Timers`: the rooms' timers (shared/tasks.py, Cloud Tasks);
- `PrepareTasks`: the preparation tasks (shared/prepare.py, Cloud Tasks);
- `ScheduledHolds`: scheduled messages waiting for their time
  (shared/scheduled.py, Cloud Tasks);
- `StatusPublisher`: the status queue (shared/status_queue.py, Pub/Sub);
- `TasksClient`: the part of Cloud Tasks' client the three Cloud Tasks
  adapters call (`google.cloud.tasks_v2.CloudTasksClient`, the tests' and
  the simulation's fakes);
- `Clock`: the time, epoch microseconds (shared/clock.py; `SimClock` of
  tools/sim/fakes).

Units: every `*_us` is epoch microseconds, every `*_s` seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from shared import outbox
    from shared.room import CancelTimer, Decision, Prepare, RoomState, ScheduleTimer
    from shared.scheduled import ScheduledMessage
    from shared.shards import ShardCursor
    from shared.status_queue import RecipientReceipts, RoomStatuses, Unroutable


class Clock(Protocol):
    """Where the time comes from."""

    def now_us(self) -> int:
        """Now, epoch microseconds."""
        ...


class RoomStore(Protocol):
    """The rooms and what the handlers keep beside them (shared/store.py)."""

    # Where `apply` logs the events an earlier write left in the room's
    # outbox, before its commit replaces them (shared/outbox.py); the
    # service sets it to its event log.
    outbox_sink: outbox.Sink | None

    def apply(self, room_id: str, decide_fn: Callable[[RoomState], Decision]) -> Decision:
        """Decide on the room's state and commit the decision, atomically;
        `decide_fn` may run several times and has no side effects."""
        ...

    def record_accepted(self, room_id: str, incarnation: int, seq: int, attempt: int, deadline_us: int) -> None:
        """The platform accepted (seq, attempt): one blind write."""
        ...

    def record_echo(self, room_id: str, incarnation: int, seq: int, attempt: int, platform_ts_us: int,
                    provider_message_id: str | None, number: str | None = None,
                    deadline_s: float | None = None) -> None:
        """The platform's own record of a send (echo, `sent`): one blind write."""
        ...

    def read_room(self, room_id: str, deadline_s: float | None = None) -> RoomState | None:
        """The room as a transaction would see it, or None: one read."""
        ...

    def load_room(self, room_id: str) -> RoomState | None:
        """The stored room, or None."""
        ...

    def keep_rejected(self, key: str, reason: str, record: dict[str, Any]) -> None:
        """Keep a push that can never be valid."""
        ...

    def record_scheduled(self, message_id: str, room_id: str, deliver_at_us: int, hop_due_us: int, task: str) -> None:
        """Record that a message waits for its time as task `task`."""
        ...

    def cancel_scheduled(self, room_id: str, message_id: str, actor: str, reason: str) -> dict[str, Any] | None:
        """Mark a scheduled message cancelled; what was recorded of it before, or None."""
        ...

    def claim_cancelled_end(self, room_id: str, message_id: str) -> tuple[str, dict[str, Any] | None]:
        """Whether a scheduled message that came was cancelled, and whether this call ends it."""
        ...

    def overdue_rooms(self, before_us: int, limit: int, cursor: ShardCursor | None = None) -> list[str]:
        """Rooms whose wake-up is before `before_us` (the watchdog's)."""
        ...

    def rooms_sending_to(self, recipient_key: str) -> list[str]:
        """Rooms whose in-flight message goes to `recipient_key`."""
        ...

    def rooms_for_receipt(self, recipient_key: str, receipt: str) -> list[str]:
        """Rooms sending to `recipient_key`, or whose last write applied receipt `receipt` (one query)."""
        ...

    def recently_swept(self, since_us: int, limit: int) -> list[str]:
        """Rooms whose last write a sweep made at or after `since_us` (epoch us) and left idle (one query)."""
        ...


class Timers(Protocol):
    """The rooms' timers (shared/tasks.py)."""

    def schedule(self, timer: ScheduleTimer) -> None:
        """Arm `timer`; arming it again is harmless."""
        ...

    def cancel(self, timer: CancelTimer) -> bool:
        """Best effort: delete a timer whose attempt ended; True if deleted."""
        ...


class PrepareTasks(Protocol):
    """The preparation tasks (shared/prepare.py)."""

    def request(self, p: Prepare) -> None:
        """Ask for the preparation `p`; asking twice is harmless."""
        ...


class ScheduledHolds(Protocol):
    """Scheduled messages waiting outside their room (shared/scheduled.py)."""

    def hold(self, room_id: str, message_id: str, push_body: bytes, deliver_at_us: int, now_us: int,
             again: bool = False) -> tuple[int, str]:
        """Hold `push_body` until `deliver_at_us` (or this hop's end); (the hop's due time, the task id)."""
        ...

    def list(self, room_id: str | None = None, limit: int = 1000) -> list[ScheduledMessage]:
        """The messages waiting, earliest first."""
        ...

    def delete(self, task: str) -> bool:
        """Delete a waiting task by its id where the service allows; True if deleted."""
        ...


class StatusPublisher(Protocol):
    """The status queue (shared/status_queue.py)."""

    def publish(self, batches: Iterable[RoomStatuses], unroutable: Iterable[Unroutable] = (),
                receipts: Iterable[RecipientReceipts] = ()) -> int:
        """Publish every batch, receipt and unroutable record; how many messages."""
        ...

    def record_failure(self, pubsub_message_id: str, room_id: str, error: str) -> int:
        """Count one failed delivery of a status-queue message; the count so far."""
        ...

    def dead_letter(self, data: bytes, room_id: str, reason: str, attempts: int, kind: str = ...) -> None:
        """Move a status-queue message that keeps failing to the error queue."""
        ...


class TasksClient(Protocol):
    """What the Cloud Tasks adapters call of Cloud Tasks' client (keyword
    arguments as `google.cloud.tasks_v2.CloudTasksClient` takes them; a task
    and a queue are given as dicts, which the client marshals)."""

    def queue_path(self, project: str, location: str, queue: str) -> str:
        ...

    def create_task(self, *, parent: str, task: Any, timeout: float) -> Any:
        ...

    def delete_task(self, *, name: str, timeout: float) -> None:
        ...

    def list_tasks(self, *, request: Any) -> Iterable[Any]:
        ...

    def create_queue(self, *, parent: str, queue: Any) -> Any:
        ...
