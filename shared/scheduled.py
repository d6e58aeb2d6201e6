"""Scheduled delivery: a message published with `deliver_at` or `delay_s`
waits outside its room, as a Cloud Tasks task, until its time.

The task is an HTTP POST of the message's own Pub/Sub push envelope to the
`enqueue` function (ENQUEUE_URL), with the header `X-Baton-Scheduled: 1`, on
the queue SCHEDULED_QUEUE; when it comes, `enqueue` handles it as the push it
is, and the message takes its place behind what the room holds then.

- The task's name derives from the room, the message id and the hop's due
  time (ids are unique per room only: DESIGN.md invariant 12), so a
  redelivered publish creates no second task on the real service (a name is
  refused as ALREADY_EXISTS for up to an hour after its task ran or was
  deleted: https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks/create);
  and should two copies run (the emulator does not refuse names), the room's
  de-duplication by message id lets one in.
- A task can be scheduled at most 30 days ahead
  (https://cloud.google.com/tasks/docs/quotas): a later time is reached in
  hops of `MAX_HOP_S`; a hop that comes early is held again.
- Each hold is recorded (`scheduled_cancels/{hash of room and message id}`: room,
  time, hop, task name; one write per scheduled message and hop). Cancel
  (`baton scheduled cancel`) marks that record cancelled, ends the held
  message as `skipped` (a deleted task never comes, so nothing else would),
  then deletes the task by its recorded name, with no listing. Whatever
  brings a scheduled message in at its time (its task, had the delete
  failed, or Pub/Sub redelivering the original push) checks the mark first,
  and the first to find it ends the message as `skipped`, once; a later one
  is logged a duplicate.
- A hop task that comes early (Cloud Tasks' clock ahead of the function's)
  is held again under a name of its own (`-r{arrival ms}`): under the
  running task's name, the real service would refuse it as ALREADY_EXISTS,
  `create_named` would take that as done, and the message would be lost.

Scale: the messages wait in Cloud Tasks, not in memory or in Firestore: a
queue holds any number of tasks, and dispatches at most 500 a second
(https://cloud.google.com/tasks/docs/quotas), so tens of millions waiting cost
storage nobody pays for, and what bounds the design is how many come due in
the same second.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import cast

from google.api_core import exceptions as gexc
from google.cloud import tasks_v2

from shared.config import Settings
from shared.ports import TasksClient
from shared.push import deliver_at_of
from shared.records import scheduled_key
from shared.tasks import counted, create_named, ensure_queues, http_task

SCHEDULED_HEADER = "X-Baton-Scheduled"
# One hop at most 29 days ahead: Cloud Tasks schedules at most 30 days ahead.
MAX_HOP_S = 29 * 24 * 3600
# A message due within this much of its arrival enters its room at once (ms).
ENTER_AT_ONCE_MS = 1000


def scheduled_task_id(room_id: str, message_id: str, due_at_us: int, again_at_us: int | None = None) -> str:
    """`sched-{hash24}-{due_ms}`, the hash of the room and the message id: the
    same message of the same room and hop always name the same task, and the
    same message id in two rooms (ids are unique per room only: a campaign
    schedules `promo-1` in every room) names two (DESIGN.md invariant 12). A
    hop held again because its task came early (`again_at_us`, when it came)
    adds `-r{ms}`, so its name differs from the running task's."""
    digest = hashlib.sha256(scheduled_key(room_id, message_id).encode()).hexdigest()[:24]
    return f"sched-{digest}-{due_at_us // 1000}" + ("" if again_at_us is None else f"-r{again_at_us // 1000}")


@dataclass(frozen=True)
class ScheduledMessage:
    """One message waiting in the scheduled queue: its room, id, when it
    enters its room (epoch us), and when this hop's task is due."""

    task: str
    room_id: str
    message_id: str
    deliver_at_us: int
    hop_due_us: int


class ScheduledHold:
    """Holds scheduled messages as Cloud Tasks tasks (module docstring).

    Args:
        client: a `tasks_v2.CloudTasksClient` (or a fake: `TasksClient`);
            its calls are counted (`shared.tasks.CountedTasks`).
        settings: project, TASKS_LOCATION, SCHEDULED_QUEUE, ENQUEUE_URL and the
            tasks identity for the OIDC token.
    """

    def __init__(self, client: TasksClient, settings: Settings) -> None:
        self._client = counted(client)
        self._s = settings

    @property
    def queue_path(self) -> str:
        return self._client.queue_path(self._s.project, self._s.tasks_location, self._s.scheduled_queue)

    def hold(self, room_id: str, message_id: str, push_body: bytes, deliver_at_us: int, now_us: int,
             again: bool = False) -> tuple[int, str]:
        """Create the task that brings `push_body` back to `enqueue` at
        `deliver_at_us` (or, beyond 29 days, at the end of this hop); returns
        the hop's due time (epoch us) and the task's id. An existing task of
        that name (this room's message and hop, created by an earlier
        delivery of the same push) is fine. `again`: a hop task that came early holds it again
        (a name of its own, `scheduled_task_id`).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Cloud Tasks refused
                or was unreachable (`enqueue` answers 5xx; Pub/Sub redelivers).
        """
        hop_due = min(deliver_at_us, now_us + MAX_HOP_S * 1_000_000)
        task = scheduled_task_id(room_id, message_id, hop_due, now_us if again else None)
        create_named(self._client, self.queue_path, http_task(
            f"{self.queue_path}/tasks/{task}", self._s.enqueue_url, push_body,
            hop_due, self._s.tasks_service_account, {SCHEDULED_HEADER: "1"}))
        return hop_due, task

    def list(self, room_id: str | None = None, limit: int = 1000) -> list[ScheduledMessage]:
        """The messages waiting (this hop's tasks), earliest first; `room_id` narrows them."""
        out = []
        request = {"parent": self.queue_path, "response_view": tasks_v2.Task.View.FULL}
        for task in self._client.list_tasks(request=request):
            try:
                envelope = json.loads(task.http_request.body)
                attrs = envelope["message"].get("attributes") or {}
                room, mid = attrs.get("room_id") or envelope["message"].get("orderingKey"), attrs["message_id"]
                deliver_at = deliver_at_of(attrs, envelope["message"].get("publishTime"))
            except (ValueError, KeyError, TypeError):
                continue
            if room_id is not None and room != room_id:
                continue
            # proto-plus gives a Timestamp field as a datetime at run time (its stubs say Timestamp).
            when = cast(datetime, task.schedule_time)
            hop = int(when.timestamp() * 1_000_000) if when else 0
            out.append(ScheduledMessage(task.name.rsplit("/", 1)[-1], room, mid, deliver_at or hop, hop))
            if len(out) >= limit:
                break
        return sorted(out, key=lambda m: m.deliver_at_us)

    def delete(self, task: str) -> bool:
        """Delete the waiting task `task` (its id, as recorded by the hold)
        where the service allows; True if deleted. Never raises for a task
        already gone or an emulator without DeleteTask."""
        try:
            self._client.delete_task(name=f"{self.queue_path}/tasks/{task}", timeout=10.0)
            return True
        except (gexc.MethodNotImplemented, gexc.NotFound):
            return False

    def ensure_queue(self) -> None:
        """Create the queue if missing (local stack only; Terraform owns it in the cloud)."""
        ensure_queues(self._client, [self.queue_path])
