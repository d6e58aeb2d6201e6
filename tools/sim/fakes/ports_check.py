"""mypy's proof that the production adapters and the in-memory fakes both fit
baton's ports (shared/ports.py): `make lint` type-checks this module
(pyproject.toml's mypy `files`); nothing here runs. A fake or an adapter
whose methods drift from its port fails the lint, not a test far away."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.cloud import tasks_v2

    from shared import ports
    from shared.clock import SystemClock
    from shared.prepare import PrepareScheduler
    from shared.scheduled import ScheduledHold
    from shared.status_queue import StatusQueue
    from shared.store import RoomStore
    from shared.tasks import CountedTasks, TimerScheduler
    from tools.sim.fakes import FakeRoomStore, FakeStatusQueue, FakeTimers, SimClock

    def production(store: RoomStore, timers: TimerScheduler, prepare: PrepareScheduler, held: ScheduledHold,
                   queue: StatusQueue, clock: SystemClock, client: tasks_v2.CloudTasksClient,
                   counted: CountedTasks) -> None:
        _store: ports.RoomStore = store
        _timers: ports.Timers = timers
        _prepare: ports.PrepareTasks = prepare
        _held: ports.ScheduledHolds = held
        _queue: ports.StatusPublisher = queue
        _clock: ports.Clock = clock
        _client: ports.TasksClient = client
        _counted: ports.TasksClient = counted

    def fakes(store: FakeRoomStore, timers: FakeTimers, queue: FakeStatusQueue, clock: SimClock) -> None:
        _store: ports.RoomStore = store
        _timers: ports.Timers = timers
        _queue: ports.StatusPublisher = queue
        _clock: ports.Clock = clock
