"""Guards and fault paths no test reached before (issue 43, item 5): each
test fails when its guard is removed.

- every entry point of functions/main.py answers a Firestore that is down or
  times out with 503 (redelivered), not a 500 or a hang;
- a Firestore that hangs (accepts the connection, never answers) is bounded
  by the store's deadline;
- `prepare`: a malformed body is dropped with its reason (200), a Firestore
  failure is a 503;
- the watchdog's sweep query failing is a 503, not a 200 that hides it;
- `status`: a Firestore timeout is a 503 that never counts toward the status
  dead letter; `deadletter`: a Firestore timeout is a 503 and nothing is parked;
- the sent proof's per-post budget (SENT_PROOF_POST_S) stops the proofs of a
  slow post.
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from shared.room import make_delivery_id
from shared.service import DeliveryService, ServiceCore
from shared.service import webhook as webhook_module
from shared.status_queue import QueuedStatus, RoomStatuses
from tests.fakes import FakeStatusQueue
from tests.unit.service.test_faults import SECRET, Knobs, World, push_body, seams, status_body


class DownStore:
    """A Firestore every call of which raises `exc` (down, or timing out)."""

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def fail(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            raise self.exc
        return fail


@pytest.fixture(scope="module")
def entry() -> Iterator[Any]:
    """functions/main.py, imported with every client aimed at a closed port
    (its import builds the deployed service; these tests use `respond` only)."""
    with pytest.MonkeyPatch.context() as mp:
        for var in ("FIRESTORE_EMULATOR_HOST", "CLOUD_TASKS_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST"):
            mp.setenv(var, "127.0.0.1:1")
        import functions.main as main
        yield main


def service_over(world: World, store: Any, queue: FakeStatusQueue | None = None) -> DeliveryService:
    return DeliveryService(ServiceCore(world.settings, world.policy, store, world.timers,
                                       {"whatsapp": world.platform}, world.events,  # type: ignore[arg-type]
                                       status_queue=(lambda: queue) if queue is not None else None, **seams(world)))


def status_push(room_id: str, delivery_id: str) -> bytes:
    batch = RoomStatuses(room_id, 1, (QueuedStatus(delivery_id, "delivered"),))
    return json.dumps({"message": {"data": base64.b64encode(batch.encode()).decode(),
                                   "attributes": {"room_id": room_id, "kind": "room_statuses"},
                                   "messageId": "ps-1"}}).encode()


def requests_of_every_entry_point(world: World) -> dict[str, tuple[str, tuple[Any, ...]]]:
    """function -> (handler name, its arguments): a request of each that reaches Firestore."""
    now = world.clock.now_us()
    did = make_delivery_id("room-g", now, 1, 1, now)
    raw, sig = status_body([(did, "wamid.1", "delivered")], now)
    timer = json.dumps({"room_id": "room-g", "incarnation": now, "seq": 1, "attempt": 1, "due_at_us": now}).encode()
    prep = json.dumps({"room_id": "room-g", "incarnation": now, "seq": 1, "attempt": 1}).encode()
    return {
        "enqueue": ("handle_push", (push_body("room-g", "m1", "15550001", "hi", "p1", now),)),
        "deadletter": ("handle_dead_letter", (push_body("room-g", "m1", "15550001", "hi", "p1", now, 5),)),
        "webhook": ("handle_status_webhook", (raw, sig)),
        "status": ("handle_status_push", (status_push("room-g", did),)),
        "timeout": ("handle_timer", (timer,)),
        "prepare": ("handle_prepare", (prep,)),
        "sweep": ("handle_sweep", ()),
    }


@pytest.mark.parametrize("exc", [gexc.ServiceUnavailable("down"), gexc.DeadlineExceeded("timed out"),
                                 gexc.RetryError("deadline spent", None)], ids=["down", "timeout", "retries_spent"])
@pytest.mark.parametrize("function", ["enqueue", "deadletter", "webhook", "status", "timeout", "prepare", "sweep"])
def test_every_entry_point_answers_503_when_firestore_fails(entry, function, exc):
    world = World(Knobs())
    queue = FakeStatusQueue()
    store = DownStore(exc)
    app = service_over(world, store, queue)
    handler, args = requests_of_every_entry_point(world)[function]
    response = entry.respond(app, function, getattr(app, handler), *args)
    assert response.status_code == 503, (function, response.get_data())
    assert store.calls  # it did reach Firestore
    assert world.platform.calls == [] and queue.failures == {}  # nothing sent; a timeout is never counted
    assert queue.error_queue == []  # nor dead-lettered


def test_a_malformed_prepare_task_is_dropped_with_its_reason(entry, capsys):
    world = World(Knobs())
    store = DownStore(AssertionError("a dropped task reads nothing"))
    app = service_over(world, store)
    response = entry.respond(app, "prepare", app.handle_prepare, b'{"room_id": "r", "seq": "one"}')
    assert response.status_code == 200 and json.loads(response.get_data())["result"] == "dropped"
    assert store.calls == [] and "prepare: dropped a task" in capsys.readouterr().out


def test_a_failing_sweep_query_is_a_503_not_a_quiet_200(entry):
    world = World(Knobs())
    store = DownStore(gexc.ServiceUnavailable("query failed"))
    app = service_over(world, store)
    response = entry.respond(app, "sweep", app.handle_sweep)
    assert response.status_code == 503 and store.calls == ["overdue_rooms"]


@pytest.fixture
def silent_firestore(monkeypatch) -> Iterator[str]:
    """A server that accepts connections and never answers: a Firestore that hangs."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    host = f"127.0.0.1:{server.getsockname()[1]}"
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", host)
    try:
        yield host
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in accepted:
            conn.close()
        server.close()


def test_a_firestore_that_hangs_is_bounded_by_the_stores_deadline(entry, silent_firestore):
    from google.cloud import firestore

    from shared.store import RoomStore

    world = World(Knobs())
    store = RoomStore(firestore.Client(project="baton-local"), 1, deadline_s=1.0)
    app = service_over(world, store)
    result: list[Any] = []
    body = push_body("room-h", "m1", "15550001", "hi", "p1", world.clock.now_us())
    worker = threading.Thread(target=lambda: result.append(entry.respond(app, "enqueue", app.handle_push, body)),
                              daemon=True)
    worker.start()
    worker.join(timeout=60)  # the deadline is 1 s a call; without it the call would wait for ever
    assert not worker.is_alive(), "a hanging Firestore held the request past every deadline"
    assert result[0].status_code == 503


def test_the_sent_proofs_of_one_post_stop_after_their_budget(monkeypatch, capsys):
    """Each proof's read takes 0.9 s (within SENT_PROOF_CALL_S): after
    SENT_PROOF_POST_S (2 s) of them, the post's other proofs are not tried
    and the statuses go on."""
    from tests.unit.service.test_sender_service import rendezvous_sender
    from tests.unit.service.test_sent_proof_service import NUMBERS, rooms_with_a_send, statuses

    rooms = {f"room-{i}": "unknown_reached" for i in range(5)}
    world, service, _, ids = rooms_with_a_send("on", rooms)
    clock = [0.0]
    service.core.monotonic = lambda: clock[0]  # the budget's clock: the reads' simulated time
    reads: list[str] = []
    real = world.store.read_room

    def slow_read(room_id: str, deadline_s: float | None = None) -> Any:
        reads.append(room_id)
        clock[0] += 0.9
        return real(room_id, deadline_s)

    monkeypatch.setattr(world.store, "read_room", slow_read)
    body = statuses(*[(ids[r], "sent", rendezvous_sender(r, NUMBERS)) for r in rooms])
    from shared.providers.whatsapp import sign

    assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
    assert len(reads) == 3, reads  # 0.9, 1.8, 2.7 s: the third read ends past the budget; no fourth
    assert f"over {webhook_module.SENT_PROOF_POST_S} s" in capsys.readouterr().out
    proven = [r for r in rooms if world.store.load_room(r).in_flight.phase.value == "sent"]
    assert proven == list(rooms)[:3]
