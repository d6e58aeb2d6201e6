"""Cloud Tasks adapter of preparation: the tasks that call the `prepare` function.

A message with a `prepare` attribute (`media`: upload its file to the
platform, then send it by the media id) is prepared before its turn, while
the messages ahead of it are sent (shared/room/preparation.py). The room
asks for it with a `Prepare` effect; this adapter makes it an HTTP task to
the `prepare` function (PREPARE_URL) with the JSON body
`{"room_id", "incarnation", "seq", "attempt"}`, due at the effect's time.

- Task names derive from (room, incarnation, seq, attempt): asking twice for
  the same attempt makes one task on the real service (ALREADY_EXISTS counts
  as success); the emulator accepts duplicates, and a preparation that runs
  twice uploads twice at worst: the room keeps the first result.
- Queues: PREPARE_QUEUE_PREFIX-0 .. -(PREPARE_QUEUE_COUNT-1). A room's
  consecutive messages go to consecutive queues (room hash + seq), so on the
  emulator, which dispatches one task of a queue at a time, the preparations
  of one room run side by side. The real service dispatches many tasks of a
  queue at once (`max_concurrent_dispatches`, infra/tasks.tf) and 500 a second
  (https://cloud.google.com/tasks/docs/quotas).
- A failed task (5xx: Firestore or the platform unreachable) is retried by
  Cloud Tasks with the queue's backoff; a preparation that fails with an
  answer is reported to the room, which retries it with its own backoff and
  then applies PREPARE_POISON.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from shared.config import Settings
from shared.ports import TasksClient
from shared.room import Prepare
from shared.tasks import counted, create_named, ensure_queues, http_task


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def tag_media(number: str | None, media_id: str) -> str:
    """What a room keeps of a prepared message (`prepared`): the platform's
    media id and, for WhatsApp, the number that uploaded it, `{number}|{id}`
    (a media id is that number's only, and WHATSAPP_SENDERS may change
    before the send: simulation seed 130). `number` None: the id alone."""
    return media_id if number is None else f"{number}|{media_id}"


def untag_media(prepared: str) -> tuple[str | None, str]:
    """(the number that uploaded it, or None when not recorded; the media id) of `prepared`."""
    number, sep, media_id = prepared.rpartition("|")
    return (number or None, media_id) if sep else (None, prepared)


def prepare_queue_index(room_id: str, seq: int, queue_count: int) -> int:
    """Which of the `queue_count` prepare queues message `seq` of a room goes to."""
    return (int(_digest(room_id)[:8], 16) + seq) % queue_count


def prepare_task_id(p: Prepare) -> str:
    """`{hash16}-p{seq}-{attempt}`, the hash over the room id and its incarnation."""
    return f"{_digest(f'{p.room_id}#{p.incarnation}')[:16]}-p{p.seq}-{p.attempt}"


def prepare_body(p: Prepare) -> dict[str, Any]:
    """The JSON body the `prepare` function receives."""
    return {"room_id": p.room_id, "incarnation": p.incarnation, "seq": p.seq, "attempt": p.attempt}


class PrepareScheduler:
    """Creates the prepare tasks.

    Args:
        client: a `tasks_v2.CloudTasksClient` (or a fake: `TasksClient`);
            its calls are counted (`shared.tasks.CountedTasks`).
        settings: project, TASKS_LOCATION, PREPARE_QUEUE_PREFIX and _COUNT,
            PREPARE_URL, and the tasks identity for the OIDC token.
    """

    def __init__(self, client: TasksClient, settings: Settings) -> None:
        self._client = counted(client)
        self._s = settings

    def queue_path(self, index: int) -> str:
        return self._client.queue_path(self._s.project, self._s.tasks_location,
                                       f"{self._s.prepare_queue_prefix}-{index}")

    def all_queue_paths(self) -> list[str]:
        return [self.queue_path(i) for i in range(self._s.prepare_queue_count)]

    def request(self, p: Prepare) -> None:
        """Create the task of `p`; an existing task of that name is fine.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Cloud Tasks refused
                or was unreachable (the caller answers 5xx; its redelivery asks again).
        """
        parent = self.queue_path(prepare_queue_index(p.room_id, p.seq, self._s.prepare_queue_count))
        create_named(self._client, parent, http_task(
            f"{parent}/tasks/{prepare_task_id(p)}", self._s.prepare_url, json.dumps(prepare_body(p)).encode(),
            p.due_at_us, self._s.tasks_service_account))

    def ensure_queues(self) -> None:
        """Create the queues if missing (local stack only; Terraform owns them in the cloud)."""
        ensure_queues(self._client, self.all_queue_paths())
