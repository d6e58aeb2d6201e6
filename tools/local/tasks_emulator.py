"""The local Cloud Tasks stand-in: gcloud-tasks-emulator with DeleteTask.

Run by `.venv-tasks/bin/python` (the emulator pins protobuf<5, so it has its
own virtualenv: requirements-tasks-emulator.txt), as a script, with the
emulator's own command line (`start -p PORT -q`).

Cloud Tasks has no official emulator, and `gcloud-tasks-emulator` 0.6.2
answers DeleteTask UNIMPLEMENTED, so on the local stack every timer whose
attempt was acked still fired and was ignored: about one `timeout` request,
one Firestore read and one dispatch a message that the deployed service,
which deletes an ended attempt's timer (shared/tasks.py,
`TimerScheduler.cancel`), does not make. This adds the one call, with the
real service's answers (https://cloud.google.com/tasks/docs/reference/rpc/google.cloud.tasks.v2#google.cloud.tasks.v2.CloudTasks.DeleteTask):
empty on success; NOT_FOUND for a task that is not in its queue (it ran,
was deleted, or never was).

The emulator's queue lists are changed only by its processor thread (every
0.1 s it takes each task out by index, then dispatches it or, when it is not
due, puts it back at the end) and by appends; removing a task from a gRPC
thread could shift an index the processor has just found. So a delete only
marks the name, and the processor drops a marked task when its turn comes
(within the loop's 0.1 s), without dispatching it. A task that is not due is
left in its place instead of taken out and put back: a delete that looked for
it in between would find nothing and answer NOT_FOUND.
"""

from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime

from gcloud_tasks_emulator import __main__ as emulator_main
from gcloud_tasks_emulator import server
from google.api_core.exceptions import GoogleAPICallError, NotFound
from google.protobuf import empty_pb2

_deleted: set[str] = set()  # names deleted by DeleteTask and not yet dropped by the processor
_deleted_lock = threading.Lock()
_submit_task = server.QueueState.submit_task


def _queue_of(task_name: str) -> str:
    return task_name.rsplit("/", 2)[0]


def delete_task(self: server.QueueState, task_name: str) -> None:
    """Mark the task `task_name` deleted; NotFound if it is not queued (or already deleted)."""
    queued = any(t.name == task_name for t in list(self._queue_tasks.get(_queue_of(task_name), ())))
    with _deleted_lock:
        if not queued or task_name in _deleted:
            raise NotFound(f"Task not found: {task_name}")
        _deleted.add(task_name)


def submit_task(self: server.QueueState, task_name: str, force_run: bool = False):  # type: ignore[no-untyped-def]
    """The emulator's submit_task, except that a task marked deleted is
    dropped, not dispatched, and one not due yet is left in its place."""
    with _deleted_lock:
        deleted = task_name in _deleted
        _deleted.discard(task_name)
    tasks = self._queue_tasks.get(_queue_of(task_name), [])
    if deleted:
        for i, task in enumerate(tasks):
            if task.name == task_name:
                tasks.pop(i)
                break
        if force_run:  # RunTask of a deleted task: the real service answers NOT_FOUND
            raise NotFound(f"Task not found: {task_name}")
        return None
    if not force_run and "?" not in task_name:  # "?port=": the emulator's own special case, left to it
        task = next((t for t in list(tasks) if t.name == task_name), None)
        if task is not None and task.schedule_time and task.schedule_time >= datetime.now(UTC):
            return task  # not due: the emulator's own test, without taking it out
    return _submit_task(self, task_name, force_run)


def DeleteTask(self: server.Greeter, request, context):  # type: ignore[no-untyped-def]  # noqa: N802 (gRPC's name)
    try:
        self._state.delete_task(request.name)
        return empty_pb2.Empty()
    except GoogleAPICallError as err:
        context.abort(err.grpc_status_code, err.message)


server.QueueState.delete_task = delete_task  # type: ignore[attr-defined]
server.QueueState.submit_task = submit_task  # type: ignore[method-assign]
server.Greeter.DeleteTask = DeleteTask  # type: ignore[attr-defined]

if __name__ == "__main__":
    sys.exit(emulator_main.main())
