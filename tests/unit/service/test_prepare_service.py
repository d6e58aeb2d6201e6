"""The service around preparation (shared/service/): the prepare function's
handler, and a prepare task Cloud Tasks refuses. In-memory fakes
(tests/fakes.py) for the store, timers and platform; the emulator tests are
in tests/integration/test_prepare.py."""

from __future__ import annotations

import base64
import json

import pytest
from google.api_core import exceptions as gexc

from shared.events import utc_iso
from shared.prepare import prepare_body
from shared.providers.base import Media, PrepareResult
from shared.room import Prepare
from shared.service import TimerArmFailed
from tests.unit.service.test_faults import Knobs, World, build_service

ROOM = "room-p"


class FakePrepareTasks:
    """Records the prepare tasks asked for; refuses the next `fail` of them."""

    def __init__(self) -> None:
        self.requested: list[Prepare] = []
        self.fail = 0

    def request(self, p: Prepare) -> None:
        if self.fail:
            self.fail -= 1
            raise gexc.ServiceUnavailable("injected: Cloud Tasks unavailable")
        self.requested.append(p)


class FakePreparer:
    """Answers every preparation with `result`; counts the calls."""

    def __init__(self, result: PrepareResult) -> None:
        self.result = result
        self.calls: list[tuple[str, str]] = []

    def prepare_media(self, kind: str, link: str) -> PrepareResult:
        self.calls.append((kind, link))
        return self.result


def image_push(world: World, mid: str) -> bytes:
    data = base64.b64encode(json.dumps({"type": "image", "link": f"https://media.test/{mid}.png",
                                        "caption": mid}).encode()).decode()
    attrs = {"room_id": ROOM, "provider": "whatsapp", "recipient": "15550001", "message_id": mid, "prepare": "media"}
    return json.dumps({"message": {"data": data, "attributes": attrs, "messageId": f"ps{mid}",
                                   "publishTime": utc_iso(world.clock.now_us())}}).encode()


def service_with(world: World, tasks: FakePrepareTasks, preparer: FakePreparer):
    service = build_service(world)
    service.core.prepare_tasks, service.core.preparers = tasks, {"whatsapp": preparer}
    return service


def test_a_prepare_task_cloud_tasks_refuses_answers_503_and_the_redelivered_push_asks_again():
    world, tasks = World(Knobs()), FakePrepareTasks()
    service = service_with(world, tasks, FakePreparer(PrepareResult(media_id="mid-1")))
    tasks.fail = 3  # every quick retry of the first request
    with pytest.raises(TimerArmFailed):  # the entry point answers 503
        service.handle_push(image_push(world, "i1"))
    assert [e.event for e in world.events.events][-1] == "prepare_request_failed"
    assert tasks.requested == [] and world.platform.calls == []
    assert service.handle_push(image_push(world, "i1")).status == 200  # Pub/Sub's redelivery
    assert [(p.seq, p.attempt) for p in tasks.requested] == [(1, 1)]


def test_the_prepare_handler_uploads_stores_the_media_id_and_the_waiting_head_is_sent_by_it():
    world, tasks = World(Knobs()), FakePrepareTasks()
    preparer = FakePreparer(PrepareResult(media_id="mid-1"))
    service = service_with(world, tasks, preparer)
    service.handle_push(image_push(world, "i1"))
    assert world.platform.calls == []  # the head waits for its preparation
    reply = service.handle_prepare(json.dumps(prepare_body(tasks.requested[0])).encode())
    assert reply.body["result"] == "prepared" and preparer.calls == [("image", "https://media.test/i1.png")]
    (call,) = world.platform.calls
    assert call.media == Media("image", media_id="mid-1") and call.text == "i1"


def test_a_task_for_a_message_that_needs_nothing_any_more_uploads_nothing():
    world, tasks = World(Knobs()), FakePrepareTasks()
    preparer = FakePreparer(PrepareResult(media_id="mid-1"))
    service = service_with(world, tasks, preparer)
    service.handle_push(image_push(world, "i1"))
    service.handle_push(image_push(world, "i2"))
    first, second = (json.dumps(prepare_body(p)).encode() for p in tasks.requested)
    service.handle_prepare(first)
    again = service.handle_prepare(first)  # Cloud Tasks ran it twice
    service.skip(ROOM, 2, "ops", "not wanted")
    after_skip = service.handle_prepare(second)
    dropped = service.handle_prepare(b'{"room_id": "x"}')
    assert again.body["result"] == after_skip.body["result"] == "nothing to prepare"
    assert preparer.calls == [("image", "https://media.test/i1.png")]
    assert dropped.status == 200 and dropped.body["result"] == "dropped"


def test_a_permanent_failure_is_stored_and_the_message_dead_lettered_by_the_default_policy():
    world, tasks = World(Knobs()), FakePrepareTasks()
    service = service_with(world, tasks, FakePreparer(PrepareResult(error="HTTP 404 on the link", permanent=True)))
    service.handle_push(image_push(world, "i1"))
    reply = service.handle_prepare(json.dumps(prepare_body(tasks.requested[0])).encode())
    assert reply.body["result"] == "failed" and world.platform.calls == []
    ends = [(e.event, e.reason) for e in world.events.events if e.event == "dead_lettered"]
    assert ends and "HTTP 404 on the link" in ends[0][1]
