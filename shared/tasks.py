"""Cloud Tasks adapter: the room timers (ack deadlines, send retries, send windows).

A timer is an HTTP task to the `timeout` function, due at the timer's time,
with the JSON body `{"room_id", "incarnation", "seq", "attempt", "due_at_us"}` (and
`"accepted_deadline_us"` when the timer carries its send's acceptance). Rooms are spread
over `TASKS_QUEUE_COUNT` queues by a stable hash of the room id, because one
queue dispatches at most 500 tasks/s
(https://cloud.google.com/tasks/docs/quotas).

Task names are derived from (room, incarnation, seq, attempt, due time), so
arming the same timer twice is refused by the real service as ALREADY_EXISTS,
which counts as success here. The emulator accepts duplicates instead; either way the
`timeout` function applies a timer only to the exact attempt it was made for,
so correctness depends on neither. The id starts with a hash, as Google asks
for task names (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks#Task).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

import grpc
from google.api_core import exceptions as gexc
from google.cloud import tasks_v2
from google.cloud.tasks_v2.services.cloud_tasks.transports import CloudTasksGrpcTransport
from google.protobuf import timestamp_pb2

from shared.config import Settings
from shared.opcounts import op_counts
from shared.ports import TasksClient
from shared.room import CancelTimer, ScheduleTimer


def _room_hash(room_id: str) -> str:
    return hashlib.sha256(room_id.encode()).hexdigest()


def queue_index(room_id: str, queue_count: int) -> int:
    """Which of the `queue_count` queues a room's timers go to (stable)."""
    return int(_room_hash(room_id)[:8], 16) % queue_count


def task_id(timer: ScheduleTimer | CancelTimer) -> str:
    """Task id of a timer: `{hash16}-{seq}-{attempt}-{due_ms}`, the hash over
    the room id and its incarnation (letters, digits, `-` only, as Cloud Tasks
    requires). Every timer the room arms has a new due time or attempt, so a
    name is never reused (a wait that would fall in the ms of the attempt's
    current wake-up, or of the timer that woke it, is moved to the next ms:
    shared/room/context.py `wait_until`, flight.py `sender_at_its_rate`):
    the real service keeps a used name for up to an hour
    (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks/create)."""
    digest = _room_hash(f"{timer.room_id}#{timer.incarnation}")[:16]
    return f"{digest}-{timer.seq}-{timer.attempt}-{timer.due_at_us // 1000}"


def timer_body(timer: ScheduleTimer) -> dict[str, object]:
    """The JSON body the `timeout` function receives. `accepted_deadline_us`
    (epoch us) is written only when set: a body without it is what older code
    wrote, and older code reading one with it ignores the extra key
    (shared/service/timers.py reads the keys it knows)."""
    body: dict[str, object] = {"room_id": timer.room_id, "incarnation": timer.incarnation, "seq": timer.seq,
                               "attempt": timer.attempt, "due_at_us": timer.due_at_us}
    if timer.accepted_deadline_us is not None:
        body["accepted_deadline_us"] = timer.accepted_deadline_us
    return body


def http_task(name: str, url: str, body: bytes, due_at_us: int, service_account: str,
              headers: dict[str, str] | None = None) -> dict[str, object]:
    """A Cloud Tasks HTTP task (the shape `create_task` takes): POST `body`
    (JSON unless `headers` say otherwise) to `url` at `due_at_us` (epoch us),
    with an OIDC token of `service_account` for `url` (none if empty: locally)
    (https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks#HttpRequest)."""
    due = timestamp_pb2.Timestamp()
    due.FromMicroseconds(due_at_us)
    http_request: dict[str, object] = {
        "http_method": tasks_v2.HttpMethod.POST,
        "url": url,
        "headers": {"Content-Type": "application/json", **(headers or {})},
        "body": body,
    }
    if service_account:
        http_request["oidc_token"] = {"service_account_email": service_account, "audience": url}
    return {"name": name, "schedule_time": due, "http_request": http_request}


class CountedTasks:
    """A Cloud Tasks client (`TasksClient`) whose billable calls are counted
    in the request's operation counts (shared/opcounts.py): each task created
    (or found created already by its name: ALREADY_EXISTS) one
    `tasks_created`, each DeleteTask call one `tasks_deleted`
    (https://cloud.google.com/tasks/pricing). The Cloud Tasks adapters
    (timers, prepare tasks, scheduled holds) call Cloud Tasks through one,
    so no adapter counts its own calls.
    """

    def __init__(self, client: TasksClient) -> None:
        self._client = client

    def queue_path(self, project: str, location: str, queue: str) -> str:
        return self._client.queue_path(project, location, queue)

    def create_task(self, *, parent: str, task: Any, timeout: float) -> Any:
        try:
            created = self._client.create_task(parent=parent, task=task, timeout=timeout)
        except gexc.AlreadyExists:
            op_counts().tasks_created += 1
            raise
        op_counts().tasks_created += 1
        return created

    def delete_task(self, *, name: str, timeout: float) -> None:
        op_counts().tasks_deleted += 1
        self._client.delete_task(name=name, timeout=timeout)

    def list_tasks(self, *, request: Any) -> Iterable[Any]:
        return self._client.list_tasks(request=request)

    def create_queue(self, *, parent: str, queue: Any) -> Any:
        return self._client.create_queue(parent=parent, queue=queue)


def counted(client: TasksClient) -> CountedTasks:
    """`client`, its task creates and deletes counted (`CountedTasks`; one
    already counted is returned as it is)."""
    return client if isinstance(client, CountedTasks) else CountedTasks(client)


def create_named(client: TasksClient, parent: str, task: dict[str, object]) -> None:
    """Create `task` in queue `parent`; one that exists already by that name is
    fine (the real service refuses a name used in the last hour or so).

    Raises:
        google.api_core.exceptions.GoogleAPICallError: refused or unreachable.
    """
    try:
        # A dict: the client marshals it (proto-plus), and the fakes of the
        # port (tools/sim/fakes, the simulation) read it as one.
        client.create_task(parent=parent, task=task, timeout=10.0)
    except gexc.AlreadyExists:
        pass


def ensure_queues(client: TasksClient, paths: list[str]) -> None:
    """Create the queues at `paths` (full resource names) if missing: the
    local stack only; Terraform owns them in the cloud."""
    for path in paths:
        try:
            client.create_queue(parent=path.rsplit("/queues/", 1)[0], queue={"name": path})
        except gexc.AlreadyExists:
            pass


def make_client(settings: Settings) -> tasks_v2.CloudTasksClient:
    """A Cloud Tasks client; on the local stack, bound to the emulator over an
    insecure gRPC channel (CLOUD_TASKS_EMULATOR_HOST)."""
    if settings.tasks_emulator_host:
        channel = grpc.insecure_channel(settings.tasks_emulator_host)
        return tasks_v2.CloudTasksClient(transport=CloudTasksGrpcTransport(channel=channel))
    return tasks_v2.CloudTasksClient()


class TimerScheduler:
    """Arms room timers as Cloud Tasks.

    Args:
        client: a `tasks_v2.CloudTasksClient` (or a fake: `TasksClient`);
            its calls are counted (`CountedTasks`).
        settings: project, location, queue prefix and count, the `timeout`
            function's URL, and the service account for the OIDC token.
    """

    # Set once a DeleteTask call is answered UNIMPLEMENTED (the emulator).
    _delete_unimplemented = False

    def __init__(self, client: TasksClient, settings: Settings) -> None:
        self._client = counted(client)
        self._s = settings

    def queue_path(self, room_id: str) -> str:
        index = queue_index(room_id, self._s.tasks_queue_count)
        return self._client.queue_path(self._s.project, self._s.tasks_location, f"{self._s.tasks_queue_prefix}-{index}")

    def all_queue_paths(self) -> list[str]:
        return [
            self._client.queue_path(self._s.project, self._s.tasks_location, f"{self._s.tasks_queue_prefix}-{i}")
            for i in range(self._s.tasks_queue_count)
        ]

    def schedule(self, timer: ScheduleTimer) -> None:
        """Create the task of `timer`; an existing task of that name is fine.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Cloud Tasks refused
                or was unreachable (the caller answers 5xx; its redelivery
                re-arms the timer).
        """
        parent = self.queue_path(timer.room_id)
        create_named(self._client, parent, http_task(
            f"{parent}/tasks/{task_id(timer)}", self._s.timeout_url, json.dumps(timer_body(timer)).encode(),
            timer.due_at_us, self._s.tasks_service_account))

    def cancel(self, timer: CancelTimer) -> bool:
        """Delete the task of a timer whose attempt has ended; True if deleted.

        Best effort, never raises: a task that already ran or was deleted
        (NOT_FOUND), a refusal or an outage leave the timer to fire and be
        ignored, as before. An emulator without DeleteTask (gcloud-tasks-emulator
        as published; the local stack adds it: tools/local/tasks_emulator.py)
        answers UNIMPLEMENTED: the first such answer turns deletion off for
        this process. One DeleteTask call is one Cloud Tasks operation, the same
        price as the dispatch it saves (https://cloud.google.com/tasks/pricing).
        """
        if TimerScheduler._delete_unimplemented:
            return False
        name = f"{self.queue_path(timer.room_id)}/tasks/{task_id(timer)}"
        try:
            self._client.delete_task(name=name, timeout=5.0)
            return True
        except gexc.MethodNotImplemented:
            TimerScheduler._delete_unimplemented = True
        except (gexc.GoogleAPICallError, gexc.RetryError):
            pass
        return False

    def ensure_queues(self) -> None:
        """Create the queues if missing (local stack only; Terraform owns them in the cloud)."""
        ensure_queues(self._client, self.all_queue_paths())
