"""Scheduled messages in the simulation: the scheduled queue of Cloud Tasks
behind the real `shared.scheduled.ScheduledHold`, and operators' `baton
scheduled cancel`.

`SimTasksClient` is the part of `tasks_v2.CloudTasksClient` the hold uses
(`queue_path`, `create_task`, `delete_task`), over the world's scheduler: a
task name is refused (`AlreadyExists`) while a task of that name exists or
ran or was deleted within the hour, as the real service does
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks/create);
a task runs at or after its time (the world's dispatch delay), again until
answered 2xx, sometimes twice, never once deleted. The world wraps it as a
port (latency, stalls, crashes, transient errors).

`claims` records every `claim_cancelled_end` the service made (room,
message id, time, verdict) so the checks can tell a message cancelled
before it entered its room from one cancelled after.
Units: `*_us` epoch us of the virtual clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from google.api_core import exceptions as gexc

if TYPE_CHECKING:
    from tools.sim.simulation.world import World

NAME_KEPT_US = 3_600_000_000  # a task's name stays taken this long after it ran or was deleted


@dataclass
class SimTask:
    name: str
    body: bytes
    due_us: int
    room_id: str
    label: str
    created_us: int
    deleted: bool = False
    done_us: int | None = None  # when it ran to a 2xx (or was deleted)


class SimTasksClient:
    """See the module. `tasks`: every task created, by its short name.
    `dispatch(task)` schedules its runs (the world's, per queue kind)."""

    def __init__(self, world: World, dispatch: Callable[[SimTask], None] | None = None) -> None:
        self.world = world
        self.tasks: dict[str, SimTask] = {}
        self._dispatch = dispatch or world.dispatch_scheduled

    def queue_path(self, project: str, location: str, queue: str) -> str:
        return f"projects/{project}/locations/{location}/queues/{queue}"

    def create_task(self, parent: str, task: dict[str, Any], timeout: float | None = None) -> None:
        name = str(task["name"]).rsplit("/", 1)[1]
        now = self.world.sched.now_us()
        old = self.tasks.get(name)
        if old is not None and (old.done_us is None or now - old.done_us < NAME_KEPT_US):
            raise gexc.AlreadyExists(f"task {name} exists")
        http = task["http_request"]
        body = http["body"]  # type: ignore[index]
        attrs = _attributes(body)
        due = task["schedule_time"].ToMicroseconds()  # type: ignore[union-attr]
        t = SimTask(name, body, due, attrs.get("room_id", ""), attrs.get("message_id", name), now)
        self.tasks[name] = t
        self._dispatch(t)

    def delete_task(self, name: str, timeout: float | None = None) -> None:
        t = self.tasks.get(name.rsplit("/", 1)[1])
        if t is None or t.deleted or t.done_us is not None:
            raise gexc.NotFound(f"task {name} not found")
        t.deleted, t.done_us = True, self.world.sched.now_us()


def _attributes(body: bytes) -> dict[str, str]:
    """A push envelope's attributes, or a prepare task's room (its body is `{"room_id", ...}`)."""
    doc = json.loads(body)
    if "message" not in doc:
        return {"room_id": str(doc.get("room_id", ""))}
    return doc["message"].get("attributes") or {}


@dataclass(frozen=True)
class Claim:
    room_id: str
    message_id: str
    at_us: int
    verdict: str


def record_claims(world: World) -> tuple[list[Claim], list[Claim]]:
    """Wrap the fake store's `claim_cancelled_end` and `cancel_scheduled` to
    record each claim and each cancel (verdict `cancelled`) as it lands."""
    claims: list[Claim] = []
    cancels: list[Claim] = []
    real_claim, real_cancel = world.store.claim_cancelled_end, world.store.cancel_scheduled

    def claim(room_id: str, message_id: str) -> tuple[str, dict[str, Any] | None]:
        verdict, doc = real_claim(room_id, message_id)
        claims.append(Claim(room_id, message_id, world.sched.now_us(), verdict))
        return verdict, doc

    def cancel(room_id: str, message_id: str, actor: str, reason: str) -> dict[str, Any] | None:
        cancels.append(Claim(room_id, message_id, world.sched.now_us(), "cancelled"))
        return real_cancel(room_id, message_id, actor, reason)

    world.store.claim_cancelled_end = claim  # type: ignore[method-assign]
    world.store.cancel_scheduled = cancel  # type: ignore[method-assign]
    return claims, cancels


# The deployed queues retry a task without limit (infra/tasks.tf: max_attempts
# = -1); the simulation gives up after MAX_TRIES, except that a 503 (a room
# full: MAX_QUEUED_MESSAGES, a transient error) is retried ten times longer,
# as long as a room may stay full behind a rate-limited head (seed 502: a
# scheduled message given up after 60 tries while its room was full for 330 s).
BACKPRESSURE_TRIES = 600


def run_task(world: World, task: SimTask, function: str, label: str, dup_kind: str,
             handler: Callable[[], Any], tries: int = 1) -> None:
    """Cloud Tasks runs `task` at (or after) its time (the dispatch delay):
    `handler` as an invocation of `function`; again after anything but 2xx
    (up to MAX_TRIES), sometimes twice (`dup_kind`); never once deleted."""
    from tools.sim.simulation.world import MAX_TRIES

    delay_ms = world.faults.dispatch_delay_ms() if tries == 1 else world.faults.redelivery_ms()

    def run() -> None:
        if task.deleted or task.done_us is not None:
            return

        def answered(status: int | None) -> None:
            if status is not None and 200 <= status < 300:
                task.done_us = world.sched.now_us()
                if world.faults.chance("dup", dup_kind):
                    again = f"{label[:-1]}, again)" if label.endswith(")") else f"{label} (again)"
                    world.invoke(function, (task.room_id,), again, handler, lambda _s: None,
                                 world.faults.rng.randint(0, 5_000_000))
            elif tries < MAX_TRIES or (status == 503 and tries < BACKPRESSURE_TRIES):
                run_task(world, task, function, label, dup_kind, handler, tries + 1)

        world.invoke(function, (task.room_id,), label, handler, answered)

    world.sched.at(max(task.due_us, world.sched.now_us()) + delay_ms * 1000, run)


def cancel_scheduled(world: World, room_id: str, message_id: str) -> None:
    """`baton scheduled cancel`: the admin action itself (shared/admin/queues.py
    `scheduled_cancel`) over the world's store, service, clock and scheduled
    hold; again every 2 s until answered."""
    import types

    from shared.admin.actions import Args
    from shared.admin.queues import scheduled_cancel
    from shared.service import Reply
    from tools.sim.simulation.world import MAX_TRIES

    world.faults.count("operator scheduled cancel")
    args = {"room_id": room_id, "message_id": message_id, "reason": "campaign called off"}

    def act() -> Reply:
        # Built at each try: a restart between tries gives the world a new service.
        admin = types.SimpleNamespace(
            operators=types.SimpleNamespace(store=world.store_port, service=world.service, now_us=world.sched.now_us),
            scheduled_factory=lambda: world.scheduled_hold)
        return Reply(200, scheduled_cancel(admin, Args(args), "simulation"))  # type: ignore[arg-type]

    def answered(status: int | None, tries: int = 1) -> None:
        if (status is None or not 200 <= status < 300) and tries < MAX_TRIES:
            world.sched.at(world.sched.now_us() + 2_000_000, lambda: world.invoke(
                "operator", (room_id,), f"scheduled cancel {message_id} (again)", act,
                lambda s: answered(s, tries + 1)))

    world.invoke("operator", (room_id,), f"scheduled cancel {message_id}", act, answered)
