"""The ports (shared/ports.py) and what sits at their boundary (issue 45 item
5): the store is composed of its parts, not assembled from mixins; the
store's and the Cloud Tasks adapters' billable calls are counted once, by the
counting calls or client they go through; the store's records take their
time from the clock it is given; the wall clock gives epoch microseconds."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.api_core import exceptions as gexc

from shared import config
from shared.clock import SYSTEM_CLOCK
from shared.firestore_calls import FirestoreCalls
from shared.opcounts import begin_request
from shared.prepare import PrepareScheduler
from shared.records import KeptRecords
from shared.room import CancelTimer, Prepare, ScheduleTimer
from shared.room_queries import RoomQueries
from shared.scheduled import ScheduledHold
from shared.store import RoomStore
from shared.tasks import CountedTasks, TimerScheduler, counted
from tools.sim.fakes import SimClock

SETTINGS = dataclasses.replace(config.load(), project="p")

# ---------------------------------------------------------------- the store's parts


def project_bases(cls: type) -> list[type]:
    return [b for b in cls.__mro__[1:] if b.__module__.startswith("shared.")]


@pytest.mark.parametrize("cls", [RoomStore, KeptRecords, RoomQueries])
def test_the_store_and_its_parts_inherit_nothing_from_the_project(cls):
    assert project_bases(cls) == []


def test_the_store_holds_its_records_and_queries_on_its_own_client_and_call_options():
    client: Any = object()  # never called: building the store asks Firestore nothing
    store = RoomStore(client, retention_hours=1, index_shards=4)
    assert isinstance(store.records, KeptRecords) and isinstance(store.queries, RoomQueries)
    assert store.records._db is client and store.queries._db is client  # noqa: SLF001
    assert store.records._fs is store._fs and store.queries._fs is store._fs  # noqa: SLF001
    assert store.numbers._fs is store._fs and store._fs.call is store._call  # noqa: SLF001
    assert store.queries._shards == 4  # noqa: SLF001


def test_what_the_store_forwards_is_its_parts_own_methods_and_nothing_else():
    store = RoomStore(object(), retention_hours=1)  # type: ignore[arg-type]
    own = {name for name, _ in inspect.getmembers(RoomStore, inspect.isfunction)}
    forwarded = {name: value for name, value in vars(store).items() if inspect.ismethod(value)}
    assert forwarded, "the store forwards the methods its callers in shared/service, admin and operators use"
    for name, method in forwarded.items():
        assert name not in own
        assert method.__self__ in (store.records, store.queries, store.swept), name
        assert method.__func__ is getattr(type(method.__self__), name), name


class Doc:
    """A Firestore document as the store's calls use it; `refuse` the next
    write with that exception."""

    def __init__(self, path: str, docs: dict[str, dict[str, Any]]) -> None:
        self.path, self._docs = path, docs
        self.refuse: Exception | None = None

    def _write(self, fields: dict[str, Any]) -> None:
        refuse, self.refuse = self.refuse, None
        if refuse is not None:
            raise refuse
        self._docs[self.path] = {**self._docs.get(self.path, {}), **fields}

    def set(self, fields: dict[str, Any], merge: bool = False, **call: Any) -> None:
        self._write(fields)

    def create(self, fields: dict[str, Any], **call: Any) -> None:
        self._write(fields)

    def update(self, fields: dict[str, Any], option: Any = None, **call: Any) -> None:
        self._write(fields)

    def get(self, **call: Any) -> Any:
        doc = self._docs.get(self.path)
        return SimpleNamespace(exists=doc is not None, to_dict=lambda: doc, update_time=None, id=self.path)


class Documents:
    """Firestore's client, as far as the store's counted calls go."""

    def __init__(self) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.refs: dict[str, Doc] = {}

    def collection(self, name: str) -> Any:
        return SimpleNamespace(document=lambda key: self.refs.setdefault(f"{name}/{key}", Doc(f"{name}/{key}",
                                                                                               self.docs)))

    def write_option(self, **precondition: Any) -> Any:
        return precondition


def test_each_counted_firestore_call_counts_what_firestore_bills_and_a_refused_write_nothing():
    db = Documents()
    calls = FirestoreCalls(db, {})  # type: ignore[arg-type]
    ref = db.collection("c").document("d")
    counts = begin_request()
    calls.get(ref)
    calls.set(ref, {"a": 1})
    ref.refuse = gexc.AlreadyExists("exists")
    with pytest.raises(gexc.AlreadyExists):
        calls.create(ref, {"a": 2})
    ref.refuse = gexc.FailedPrecondition("changed since the read")
    with pytest.raises(gexc.FailedPrecondition):
        calls.update(ref, {"a": 3}, since=calls.get(ref))
    calls.update(ref, {"a": 4})
    assert calls.stream(SimpleNamespace(stream=lambda **call: iter(()))) == []
    assert calls.stream(SimpleNamespace(stream=lambda **call: iter("xyz"))) == list("xyz")
    assert (counts.firestore_reads, counts.firestore_writes) == (2 + 1 + 3, 2)


def test_the_store_s_records_are_stamped_and_expire_by_the_clock_it_is_given():
    clock = SimClock()
    store = RoomStore(Documents(), retention_hours=2, clock=clock)  # type: ignore[arg-type]
    at = datetime.fromtimestamp(clock.now_us() / 1_000_000, UTC)
    store.keep_rejected("k1", "unparsable", {"raw": "x"})
    kept = store.records.rejected_one("k1")
    assert kept is not None and kept["rejected_at"] == at and kept["expire_at"] == at + timedelta(hours=2)
    clock.advance_ms(60_000)
    assert store.claim_replay("k1", "ops@example.com")
    replayed = store.records.rejected_one("k1")
    assert replayed is not None and replayed["replayed_at"] == at + timedelta(minutes=1)


# ---------------------------------------------------------------- Cloud Tasks calls, counted at the boundary


class TasksApi:
    """Cloud Tasks' client as the adapters call it; `refuse` the next create
    with that exception."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.refuse: Exception | None = None

    def queue_path(self, project: str, location: str, queue: str) -> str:
        return f"projects/{project}/locations/{location}/queues/{queue}"

    def create_task(self, *, parent: str, task: Any, timeout: float) -> Any:
        refuse, self.refuse = self.refuse, None
        if refuse is not None:
            raise refuse
        self.created.append(task["name"])
        return task

    def delete_task(self, *, name: str, timeout: float) -> None:
        self.deleted.append(name)

    def list_tasks(self, *, request: Any) -> list[Any]:
        return []

    def create_queue(self, *, parent: str, queue: Any) -> Any:
        return queue


TIMER = ScheduleTimer("room-1", 7, 1, 1, 1_700_000_000_000_000)


def test_a_timer_armed_is_one_task_created_and_a_cancel_one_task_deleted():
    api = TasksApi()
    timers = TimerScheduler(api, SETTINGS)
    counts = begin_request()
    timers.schedule(TIMER)
    assert counts.tasks_created == 1 and len(api.created) == 1
    TimerScheduler._delete_unimplemented = False
    assert timers.cancel(CancelTimer("room-1", 7, 1, 1, TIMER.due_at_us))
    assert counts.tasks_deleted == 1 and len(api.deleted) == 1


def test_a_task_found_created_already_counts_as_created_and_a_refused_one_does_not():
    api = TasksApi()
    prepare = PrepareScheduler(api, SETTINGS)
    counts = begin_request()
    api.refuse = gexc.AlreadyExists("a task of that name exists")
    prepare.request(Prepare("room-1", 7, 1, 1, TIMER.due_at_us))
    assert counts.tasks_created == 1
    api.refuse = gexc.ServiceUnavailable("injected")
    with pytest.raises(gexc.ServiceUnavailable):
        prepare.request(Prepare("room-1", 7, 2, 1, TIMER.due_at_us))
    assert counts.tasks_created == 1


def test_deleting_a_scheduled_message_s_task_is_a_task_delete_like_a_timer_s():
    """Before the counting client, only the timers counted their DeleteTask
    calls: a scheduled message's cancel deleted its task uncounted."""
    api = TasksApi()
    held = ScheduledHold(api, SETTINGS)
    counts = begin_request()
    hop, task = held.hold("room-1", "m-1", b"{}", TIMER.due_at_us, TIMER.due_at_us - 60_000_000)
    assert held.delete(task)
    assert (counts.tasks_created, counts.tasks_deleted) == (1, 1)


def test_an_adapter_given_a_counted_client_counts_each_call_once():
    api = TasksApi()
    client = counted(api)
    assert counted(client) is client and isinstance(client, CountedTasks)
    counts = begin_request()
    TimerScheduler(client, SETTINGS).schedule(TIMER)
    assert counts.tasks_created == 1


# ---------------------------------------------------------------- the fakes the tools use


ROOT = Path(__file__).resolve().parents[3]


def test_no_product_code_or_tool_imports_the_tests():
    """The fakes a tool runs on (the simulation, the scale model) live in an
    importable package (tools/sim/fakes; tests/fakes.py re-exports them)."""
    importers = []
    for top in ("shared", "functions", "baton_cli", "pipeline", "tools"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                if any(n == "tests" or n.startswith("tests.") for n in names):
                    importers.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not importers


# ---------------------------------------------------------------- the clock


def test_the_system_clock_gives_epoch_microseconds():
    before = time.time_ns() // 1000
    now = SYSTEM_CLOCK.now_us()
    assert before <= now <= time.time_ns() // 1000
