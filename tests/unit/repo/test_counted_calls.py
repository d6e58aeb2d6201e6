"""The counting wrappers at the port boundary (issue 45, item 5), over
in-memory fakes of the clients (no emulator): each billable call counts
what it did once, a call that failed nothing counts nothing, a commit whose
answer was lost but which landed counts its writes, and the sender window's
and the `sent` proof's calls count as their share too (shared/opcounts.py's
meanings). Each test fails if its count is dropped."""

from __future__ import annotations

import dataclasses
import json
import random
from types import SimpleNamespace
from typing import Any

import pytest
from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared import config
from shared.counted import CountedPublisher, CountedSender, counted_publisher
from shared.firestore_calls import FirestoreCalls
from shared.opcounts import begin_request, counted_as
from shared.room import Decision, Enqueue, decide, policy_from_settings
from shared.room_queries import RoomQueries, SendingNumberQueries, shard_groups
from shared.sender_window import SenderWindow
from shared.service.core import ServiceCore
from shared.service.inbound import InboundPost, InboundPublisher
from shared.store import RoomStore
from tests.fakes import FakePlatform, FakeRoomStore, FakeTimers, RecordingEventLog, SimClock

SETTINGS = dataclasses.replace(config.load(), project="p")
POLICY = policy_from_settings(SETTINGS)
T0 = 1_800_000_000_000_000


# ---------------------------------------------------------------- a Firestore client in memory


class Ref:
    """A document reference; `refuse` the next write with that exception."""

    def __init__(self, db: Client, path: str) -> None:
        self.db, self.path, self.id = db, path, path.rsplit("/", 1)[-1]
        self.refuse: Exception | None = None

    def _write(self, fields: dict[str, Any], create: bool = False) -> Any:
        refuse, self.refuse = self.refuse, None
        if refuse is not None:
            raise refuse
        if create and self.path in self.db.docs:
            raise gexc.AlreadyExists(self.path)
        old = self.db.docs.get(self.path, {})
        self.db.docs[self.path] = {**old, **{k: old.get(k, 0) + v.value if isinstance(v, firestore.Increment) else v
                                             for k, v in fields.items()}}
        return SimpleNamespace(update_time=len(self.db.docs))

    def get(self, **call: Any) -> Any:
        doc = self.db.docs.get(self.path)
        return SimpleNamespace(exists=doc is not None, to_dict=lambda: None if doc is None else dict(doc),
                               update_time=1, id=self.id, get=lambda key: (doc or {})[key])

    def set(self, fields: dict[str, Any], merge: bool = False, **call: Any) -> Any:
        return self._write(fields)

    def create(self, fields: dict[str, Any], **call: Any) -> Any:
        return self._write(fields, create=True)

    def update(self, fields: dict[str, Any], option: Any = None, **call: Any) -> Any:
        return self._write(fields)


class Batch:
    """A write batch; its commit does what the client's `commit_fault` says."""

    def __init__(self, db: Client) -> None:
        self.db, self.writes = db, []

    def update(self, ref: Ref, doc: dict[str, Any], option: Any = None) -> None:
        self.writes.append((ref, doc))

    create = set = update

    def commit(self, **call: Any) -> None:
        fault, self.db.commit_fault = self.db.commit_fault, None
        if fault is None or fault[1]:  # no fault, or one whose write lands all the same
            for ref, doc in self.writes:
                self.db.docs[ref.path] = dict(doc)
        if fault is not None:
            raise fault[0]


class Query:
    """A query over the client's `rows` (the documents it finds, at most
    its `limit`) that counts its asks."""

    def __init__(self, db: Client, n: int | None = None) -> None:
        self.db, self.n = db, n

    def where(self, **_: Any) -> Query:
        return self

    def order_by(self, *_: Any) -> Query:
        return self

    start_after = select = order_by

    def limit(self, n: int) -> Query:
        return Query(self.db, n)

    def stream(self, **call: Any) -> list[Any]:
        self.db.asked += 1
        return [SimpleNamespace(id=r, to_dict=lambda r=r: {"wake_at_us": 1, "head_since_us": 1, "parked": 1})
                for r in self.db.rows[:self.n]]

    def count(self, alias: str) -> Any:
        self.db.asked += 1
        return SimpleNamespace(get=lambda **call: [[SimpleNamespace(value=len(self.db.rows))]])


class Client:
    """Firestore's client as far as the counted calls go."""

    def __init__(self, rows: list[str] | None = None) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.refs: dict[str, Ref] = {}
        self.rows = rows or []
        self.asked = 0
        self.commit_fault: tuple[Exception, bool] | None = None  # (raised, landed)

    def collection(self, name: str) -> Any:
        query = Query(self)
        query.document = lambda key: self.refs.setdefault(f"{name}/{key}", Ref(self, f"{name}/{key}"))  # type: ignore[attr-defined]
        return query

    def batch(self) -> Batch:
        return Batch(self)

    def write_option(self, **precondition: Any) -> Any:
        return precondition


def enqueue(mid: str) -> Any:
    event = Enqueue(mid, "whatsapp", "15550001", "hi", T0 - 5_000, T0)
    return lambda state: decide(state, event, POLICY, "test")


def counted(fn: Any) -> tuple[int, int]:
    counts = begin_request()
    fn()
    return counts.firestore_reads, counts.firestore_writes


# ---------------------------------------------------------------- the room transaction


def test_a_committed_transaction_counts_its_read_and_its_write():
    store = RoomStore(Client(), retention_hours=1)  # type: ignore[arg-type]
    assert counted(lambda: store.apply("r1", enqueue("m1"))) == (1, 1)


def test_a_decision_that_changes_nothing_counts_its_read_only():
    store = RoomStore(Client(), retention_hours=1)  # type: ignore[arg-type]
    assert counted(lambda: store.apply("r1", lambda state: Decision(None))) == (1, 0)


@pytest.mark.parametrize("fault", [gexc.AlreadyExists("retried by the client"), gexc.DeadlineExceeded("lost")],
                         ids=["precondition_after_a_landed_retry", "answer_lost"])
def test_a_commit_whose_answer_was_lost_but_landed_counts_its_write(fault):
    db = Client()
    store = RoomStore(db, retention_hours=1)  # type: ignore[arg-type]
    db.commit_fault = (fault, True)
    assert counted(lambda: store.apply("r1", enqueue("m1"))) == (2, 1)  # the read, the read that finds it landed


def test_a_commit_that_did_not_land_counts_no_write():
    db = Client()
    store = RoomStore(db, retention_hours=1)  # type: ignore[arg-type]
    db.commit_fault = (gexc.DeadlineExceeded("lost"), False)
    counts = begin_request()
    with pytest.raises(gexc.DeadlineExceeded):
        store.apply("r1", enqueue("m1"))
    assert (counts.firestore_reads, counts.firestore_writes) == (2, 0)


def test_a_refused_commit_counts_nothing_and_the_one_that_follows_its_write():
    db = Client()
    store = RoomStore(db, retention_hours=1)  # type: ignore[arg-type]
    db.commit_fault = (gexc.FailedPrecondition("another writer came first"), False)
    assert counted(lambda: store.apply("r1", enqueue("m1"))) == (2, 1)


def test_a_blind_acceptance_is_one_write_and_none_for_a_missing_room():
    db = Client()
    store = RoomStore(db, retention_hours=1)  # type: ignore[arg-type]
    store.apply("r1", enqueue("m1"))
    assert counted(lambda: store.record_accepted("r1", 1, 1, 1, T0)) == (0, 1)
    store.room_ref("r2").refuse = gexc.NotFound("no such room")
    assert counted(lambda: store.record_accepted("r2", 1, 1, 1, T0)) == (0, 0)


def test_the_proof_s_read_and_write_count_as_firestore_s_and_as_the_proof_s():
    db = Client()
    store = RoomStore(db, retention_hours=1)  # type: ignore[arg-type]
    store.apply("r1", enqueue("m1"))
    counts = begin_request()
    store.read_room("r1")  # outside the proof: not its share
    with counted_as("proof"):
        store.read_room("r1")
        store.record_echo("r1", 1, 1, 1, T0, "wamid.1", number="1001")
    assert (counts.firestore_reads, counts.firestore_writes) == (2, 1)
    assert (counts.proof_reads, counts.proof_writes) == (1, 1)
    assert (counts.window_reads, counts.window_writes) == (0, 0)


# ---------------------------------------------------------------- the calls themselves


def test_a_commit_counts_each_document_it_writes_and_landed_those_of_a_lost_answer():
    db = Client()
    calls = FirestoreCalls(db, {})  # type: ignore[arg-type]
    counts = begin_request()
    calls.commit(db.batch(), 3)
    db.commit_fault = (gexc.FailedPrecondition("changed"), False)
    with pytest.raises(gexc.FailedPrecondition):
        calls.commit(db.batch(), 2)
    assert counts.firestore_writes == 3
    calls.landed(2)
    assert (counts.firestore_reads, counts.firestore_writes) == (0, 5)


def test_writes_tried_count_a_refused_write_too():
    db = Client()
    calls = FirestoreCalls(db, {}, writes_tried=True)  # type: ignore[arg-type]
    ref = db.collection("c").document("d")
    counts = begin_request()
    calls.create(ref, {"a": 1})
    with pytest.raises(gexc.AlreadyExists):
        calls.create(ref, {"a": 2})
    ref.refuse = gexc.ServiceUnavailable("down")
    with pytest.raises(gexc.ServiceUnavailable):
        calls.update(ref, {"a": 3}, last_update_time=1)
    assert counts.firestore_writes == 3


def test_parallel_queries_and_counts_are_counted_in_the_request_s_thread():
    db = Client(rows=["a", "b"])
    calls = FirestoreCalls(db, {})  # type: ignore[arg-type]
    counts = begin_request()
    pages = calls.stream_all({k: db.collection("rooms") for k in range(4)})
    assert [len(p) for p in pages.values()] == [2] * 4 and counts.firestore_reads == 8
    db.rows = []
    calls.stream_all({k: db.collection("rooms") for k in range(3)})
    assert counts.firestore_reads == 8 + 3  # a query that finds nothing: one read
    assert calls.count_all([db.collection("rooms") for _ in range(5)], 1.0) == [0] * 5
    assert counts.firestore_reads == 8 + 3 + 5


# ---------------------------------------------------------------- the rooms' queries


def test_each_room_query_counts_what_firestore_bills():
    db = Client(rows=["r1", "r2", "r3"])
    calls = FirestoreCalls(db, {})  # type: ignore[arg-type]
    queries = RoomQueries(calls, index_shards=4)
    assert counted(lambda: queries.overdue_rooms(T0, limit=8)) == (4 * 2, 0)  # 2 a shard (limit 8 / 4 shards)
    assert counted(lambda: queries.rooms_sending_to("whatsapp:15550001")) == (3, 0)
    assert counted(lambda: queries.rooms_for_receipt("messenger:PSID", "r0")) == (3, 0)  # one OR query
    assert counted(lambda: queries.list_rooms("parked", 10)) == (3, 0)
    db.rows = []
    assert counted(lambda: queries.list_rooms("parked", 10)) == (1, 0)  # nothing found: one read
    assert counted(lambda: queries.rooms_for_receipt("messenger:PSID", "r0")) == (1, 0)  # as rooms_sending_to
    assert counted(lambda: queries.count_in_flight("whatsapp")) == (1, 0)
    assert counted(lambda: SendingNumberQueries(calls).count_sending_from(["1001", "1002"])) == (2, 0)


@pytest.mark.parametrize("shards", [16, 40])
def test_a_count_over_the_shard_groups_counts_one_read_a_group_in_the_request(shards):
    """Before the counting calls, `count_rooms` counted each group's read in
    the worker thread that asked it, where the request's counters are not:
    `baton status` counted none of its sharded counts."""
    db = Client(rows=["r1"])
    queries = RoomQueries(FirestoreCalls(db, {}), index_shards=shards)  # type: ignore[arg-type]
    counts = begin_request()
    assert queries.count_rooms("lag") == len(shard_groups(shards))
    assert counts.firestore_reads == len(shard_groups(shards)) == db.asked


# ---------------------------------------------------------------- the sender window


def test_the_window_s_calls_count_as_firestore_s_and_as_the_window_s_a_refused_take_too():
    db = Client()
    window = SenderWindow(db, random.Random(1), slots_per_document=1)  # type: ignore[arg-type]
    counts = begin_request()
    assert window.take("1001", 1, T0) is None  # one read, one create
    assert (counts.firestore_reads, counts.firestore_writes, counts.window_reads, counts.window_writes) == (1, 1, 1, 1)
    assert [(n, d, slot) for n, d, slot, _ in counts.window_slots] == [("1001", 0, 0)]
    other = SenderWindow(db, random.Random(1), slots_per_document=1)  # type: ignore[arg-type]
    ref = db.collection("sender_windows").document(other.document_id("1001", 0))
    db.docs[ref.path] = {"last_us": 0}
    ref.refuse = gexc.FailedPrecondition("another instance took it")
    counts = begin_request()
    assert other.take("1001", 1, T0 + 5_000_000) is not None
    assert (counts.firestore_reads, counts.firestore_writes, counts.window_reads, counts.window_writes) == (1, 1, 1, 1)
    assert counts.window_slots == []


# ---------------------------------------------------------------- publishes and sends


class Future:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def result(self, timeout: float | None = None) -> str:
        if self.error is not None:
            raise self.error
        return "1"


class Publisher:
    """Pub/Sub's publisher client; `fail_topics` refuse their publishes."""

    def __init__(self, fail_topics: tuple[str, ...] = ()) -> None:
        self.fail_topics, self.published = fail_topics, []

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish(self, topic: str, data: bytes, **attributes: Any) -> Future:
        self.published.append(topic)
        return Future(gexc.ServiceUnavailable("injected") if topic.endswith(self.fail_topics) else None)

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        pass


def test_each_publish_counts_once_whatever_pub_sub_answers():
    client = counted_publisher(Publisher(fail_topics=("bad",)))
    assert counted_publisher(client) is client and isinstance(client, CountedPublisher)
    counts = begin_request()
    client.publish("projects/p/topics/good", b"x").result()
    with pytest.raises(gexc.ServiceUnavailable):
        client.publish("projects/p/topics/bad", b"x").result()
    assert counts.status_publishes == 2


def test_a_forwarded_post_the_inbound_topic_refuses_is_two_publishes():
    api = Publisher(fail_topics=("inbound",))
    publisher = InboundPublisher("p", "inbound", "status-dead-letter", client=api)
    post = InboundPost(b"{}", "whatsapp:1", {"provider": "whatsapp"})
    counts = begin_request()
    assert publisher.forward(post) == "error_queue"
    assert counts.status_publishes == 2 == len(api.published)


def test_the_status_queue_publishes_and_counts_its_failures_through_counted_calls(monkeypatch):
    from shared.status_queue import StatusQueue

    monkeypatch.setenv("PUBSUB_EMULATOR_HOST", "localhost:1")  # a client that connects to nothing when built
    db = Client()
    queue = StatusQueue("p", "status", "status-dead-letter", db)
    assert isinstance(queue._client, CountedPublisher)  # noqa: SLF001
    counts = begin_request()
    assert queue.record_failure("m1", "r1", "boom") == 1
    assert (counts.firestore_reads, counts.firestore_writes) == (1, 1)


def test_a_send_call_is_counted_where_the_platform_client_is_called():
    sender = SimpleNamespace(send=lambda *a, **k: "result", calls=0)
    counts = begin_request()
    assert CountedSender(sender).send("15550001", "hi", "d-1") == "result"  # type: ignore[arg-type]
    assert counts.send_calls == 1


def test_a_push_that_sends_counts_one_send_call_and_the_invocation_record_carries_the_counts(tmp_path):
    clock = SimClock()
    settings = dataclasses.replace(SETTINGS, metrics_log_path=str(tmp_path / "metrics.jsonl"))
    platform = FakePlatform(clock, budget_ms=2_000)
    core = ServiceCore(settings, POLICY, FakeRoomStore(clock), FakeTimers(clock),  # type: ignore[arg-type]
                       {"whatsapp": platform}, RecordingEventLog(clock), clock=clock)
    counts = begin_request()
    core.apply("r1", Enqueue("m1", "whatsapp", "15550001", "hi", clock.now_us(), clock.now_us()), "enqueue")
    assert len(platform.calls) == 1 and counts.send_calls == 1
    core.record_invocation("enqueue", clock.now_us(), 200)
    record = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert [k for k in record if k not in ("log_type", "function", "ts", "duration_ms", "http_status")] == [
        "firestore_reads", "firestore_writes", "tasks_created", "tasks_deleted", "send_calls", "status_publishes",
        "window_reads", "window_writes", "proof_reads", "proof_writes", "window_slots"]
    assert record["send_calls"] == 1
