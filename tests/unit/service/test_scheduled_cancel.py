"""Scheduled messages (issue 28, items 7 and 9): a cancelled one is never
sent and ends once, whatever brings it at its time; cancel deletes its task
by the recorded name, with no listing; a hop task that comes early (Cloud
Tasks' clock ahead of ours) is held again under a name of its own, not
dropped as ALREADY_EXISTS under the running task's.

The real `ScheduledHold` over a fake Cloud Tasks client that refuses a name
used before, as the real service does for about an hour
(https://cloud.google.com/tasks/docs/reference/rest/v2/projects.locations.queues.tasks/create)."""

from __future__ import annotations

import base64
import dataclasses
import json
from typing import Any

from google.api_core import exceptions as gexc

from shared.events import utc_iso
from shared.scheduled import ScheduledHold
from tests.unit.service.test_faults import Knobs, World, build_service

S = 1_000_000


class NamedTasksClient:
    """Cloud Tasks as far as ScheduledHold uses it; refuses a reused name; no listing."""

    def __init__(self) -> None:
        self.created: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []

    def queue_path(self, project: str, location: str, queue: str) -> str:
        return f"projects/{project}/locations/{location}/queues/{queue}"

    def create_task(self, parent: str, task: dict[str, Any], timeout: float) -> None:
        if task["name"] in self.created:
            raise gexc.AlreadyExists(f"{task['name']} was used")
        self.created[task["name"]] = task

    def delete_task(self, name: str, timeout: float) -> None:
        self.deleted.append(name)

    def list_tasks(self, request: Any) -> list[Any]:
        raise AssertionError("cancel must not list the queue")


def push(world: World, mid: str, delay_s: float, room_id: str = "room-s") -> bytes:
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": "15550001", "message_id": mid,
             "delay_s": str(delay_s)}
    return json.dumps({"message": {"data": base64.b64encode(b'{"type":"text","text":"later"}').decode(),
                                   "attributes": attrs, "messageId": f"p-{room_id}-{mid}",
                                   "publishTime": utc_iso(world.clock.now_us())}}).encode()


def setup():
    world = World(Knobs())
    client = NamedTasksClient()
    service = build_service(world)
    service.core.scheduled = ScheduledHold(client, dataclasses.replace(world.settings, project="p"))
    return world, service, client


def kinds(world: World, mid: str) -> list[str]:
    """The message's lines as the log's readers keep them: one per (room, `event_id`)."""
    seen: set[tuple[str | None, str]] = set()
    kept = []
    for e in world.events.events:
        if e.message_id != mid or (e.event_id is not None and (e.room_id, e.event_id) in seen):
            continue
        seen.add((e.room_id, e.event_id or ""))
        kept.append(str(e.event))
    return kept


def first_hand_skips(world: World, mid: str) -> int:
    """`skipped` lines of the message logged by the call that ended it (not `relogged`)."""
    return sum(1 for e in world.events.events if e.message_id == mid and e.event == "skipped" and not e.relogged)


def test_a_copy_after_a_cancel_whose_process_died_after_its_claim_logs_the_end():
    """The claim (`claim_cancelled_end`) landed and the process died before
    its `skipped` line (simulation seed 13, 2026-11-28): the next copy finds
    the message ended and logs the line again, `relogged`, with the event id
    every copy uses, and publishes the outcome. Before: `duplicate_ignored`
    only, and the message never ended in the log."""
    world, service, client = setup()
    body = push(world, "m1", 10)
    service.handle_push(body)
    world.store.cancel_scheduled("room-s", "m1", "ops", "withdrawn")
    assert world.store.claim_cancelled_end("room-s", "m1")[0] == "ended_now"  # ... and the process died here
    assert "skipped" not in kinds(world, "m1")
    world.clock.advance_ms(11_000)
    assert service.handle_push(body, scheduled_entry=True).body["result"] == "cancelled"  # its task comes
    [line] = [e for e in world.events.events if e.message_id == "m1" and e.event == "skipped"]
    assert (line.relogged, line.event_id, line.actor) == (True, "cancelled.m1", "ops")
    assert service.handle_push(body).body["result"] == "cancelled"  # a redelivered push: the same line again
    assert kinds(world, "m1").count("skipped") == 1 and world.platform.calls == []


def test_a_cancelled_message_redelivered_after_its_time_is_not_sent_and_ends_once():
    world, service, client = setup()
    body = push(world, "m1", 10)
    assert service.handle_push(body).body["result"] == "scheduled"
    world.store.cancel_scheduled("room-s", "m1", "ops", "campaign withdrawn")
    world.clock.advance_ms(11_000)
    first = service.handle_push(body)  # Pub/Sub redelivers the original push after its time
    second = service.handle_push(body, scheduled_entry=True)  # then its task comes
    assert (first.body["result"], second.body["result"]) == ("cancelled", "cancelled")
    assert kinds(world, "m1").count("skipped") == 1 and "enqueued" not in kinds(world, "m1")
    assert first_hand_skips(world, "m1") == 1  # the second copy's line is the first's, relogged
    assert world.platform.calls == []


def test_cancel_deletes_the_task_by_the_name_its_hold_recorded():
    world, service, client = setup()
    service.handle_push(push(world, "m1", 3600))
    recorded = world.store.cancel_scheduled("room-s", "m1", "ops", "withdrawn")
    assert recorded is not None and service.scheduled.delete(recorded["task"])
    assert client.deleted == [f"{service.scheduled.queue_path}/tasks/{recorded['task']}"]
    assert recorded["task"] in {name.rsplit("/", 1)[-1] for name in client.created}


def test_a_cancel_that_deletes_the_task_ends_the_message_itself_once_and_first():
    """On the real service a deleted task never comes, so nothing would end
    the cancelled message (the emulator, lacking DeleteTask, used to run it
    anyway and hid this): the cancel ends it as `skipped` with the
    operator's name, publishes its outcome, then deletes the task. A
    copy that comes later (the task, had its delete failed, or a redelivered
    push) logs the same line again (`relogged`): one end, no send."""
    import types

    from shared.admin.actions import Args, scheduled_cancel

    world, service, client = setup()
    body = push(world, "m1", 3600)
    assert service.handle_push(body).body["result"] == "scheduled"
    order: list[str] = []
    ended_by = service.end_cancelled_scheduled
    hold = types.SimpleNamespace(delete=lambda task: order.append("delete") or service.scheduled.delete(task))
    admin = types.SimpleNamespace(
        operators=types.SimpleNamespace(store=world.store, now_us=world.clock.now_us,
                                        service=types.SimpleNamespace(end_cancelled_scheduled=lambda *a: (
                                            order.append("end"), ended_by(*a))[1])),
        scheduled_factory=lambda: hold)
    answer = scheduled_cancel(admin, Args({"room_id": "room-s", "message_id": "m1", "reason": "withdrawn"}), "ops")
    assert answer["ended_now"] and answer["task_deleted"] and answer["was_waiting"], answer
    assert order == ["end", "delete"]
    skipped = [e for e in world.events.events if e.message_id == "m1" and e.event == "skipped"]
    assert len(skipped) == 1 and skipped[0].actor == "ops" and "withdrawn" in (skipped[0].reason or "")
    world.clock.advance_ms(3_601_000)
    assert service.handle_push(body).body["result"] == "cancelled"  # Pub/Sub redelivers the push after its time
    assert kinds(world, "m1").count("skipped") == 1 and "enqueued" not in kinds(world, "m1")
    assert first_hand_skips(world, "m1") == 1
    assert world.platform.calls == []


def test_a_hop_task_that_comes_early_is_held_again_not_dropped():
    world, service, client = setup()
    body = push(world, "m1", 10)
    service.handle_push(body)
    world.clock.advance_ms(8_000)  # Cloud Tasks' clock runs 2 s ahead of the function's
    assert service.handle_push(body, scheduled_entry=True).body["result"] == "scheduled"
    assert len(client.created) == 2, sorted(client.created)  # a second task, under a name of its own
    world.clock.advance_ms(2_500)
    assert service.handle_push(body, scheduled_entry=True).body["result"] == "ok"
    assert kinds(world, "m1").count("enqueued") == 1


def test_two_rooms_scheduling_the_same_message_id_both_enter_and_cancel_is_per_room():
    """Ids are unique per room only (issue 43, bug 2): a campaign schedules
    `promo-1` in every room for 09:00. Each room's message gets its own task
    and record; a cancel names its room and touches no other."""
    world, service, client = setup()
    bodies = {room: push(world, "promo-1", 10, room) for room in ("room-a", "room-b", "room-c")}
    for body in bodies.values():
        assert service.handle_push(body).body["result"] == "scheduled"
    assert len(client.created) == 3, sorted(client.created)  # not ALREADY_EXISTS taken as done
    world.store.cancel_scheduled("room-c", "promo-1", "ops", "withdrawn in room-c only")
    world.clock.advance_ms(11_000)
    results = {room: service.handle_push(body, scheduled_entry=True).body["result"]
               for room, body in bodies.items()}
    assert results == {"room-a": "ok", "room-b": "ok", "room-c": "cancelled"}
    entered = sorted(e.room_id for e in world.events.events if e.event == "enqueued" and e.message_id == "promo-1")
    assert entered == ["room-a", "room-b"]
    assert sorted(c.room_id for c in world.platform.calls) == ["room-a", "room-b"]
