"""In-memory fakes of baton's adapters, driven by a simulated clock (tests/fakes.py re-exports them).

They stand in for Firestore (`FakeRoomStore`), Cloud Tasks (`FakeTimers`) and
the WhatsApp Cloud API (`FakePlatform`) in service-level tests
(tests/unit/service/test_faults.py) and in the simulation (tools/sim/simulation). Each can be told to fail its next call in the ways
the real service fails, including the `Crash` of the process between two
steps of a request, and to take (simulated) time while other requests run.

Units: every `*_us` value is epoch microseconds of the simulated clock; every
`*_ms` value is a duration in milliseconds.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, overload

from google.api_core import exceptions as gexc

from shared import outbox
from shared.events import DeliveryEvent
from shared.providers import SendOutcome, SendResult
from shared.room import (
    CancelTimer,
    Decision,
    KeepDeadLetter,
    RoomState,
    ScheduleTimer,
    parse_delivery_id,
)
from shared.room_document import acceptance_key, room_as_read, room_to_doc
from shared.shards import SHARD_FIELD, ShardCursor, index_shard
from shared.store import DEFAULT_INDEX_SHARDS, WRITE_ID, ContentionError
from shared.tasks import task_id

T0_US = 1_700_000_000_000_000  # the simulated clock's start: 2023-11-14T22:13:20Z

# What happens while a call is under way: called with the moment (epoch µs)
# the call ends; it may move the clock forward, up to that moment.
Meanwhile = Callable[[int], None]


class Crash(BaseException):
    """The process dies here: nothing after this point of the request runs.

    A `BaseException`, so no `except Exception` in the code under test can
    swallow it; the harness catches it and treats the request as unanswered
    (its caller redelivers it later).
    """


class SimClock:
    """Simulated time in epoch µs. Only `advance_ms` (or a fake that takes
    time, such as a slow send) moves it."""

    def __init__(self, start_us: int = T0_US) -> None:
        self._now_us = start_us

    def now_us(self) -> int:
        """The current simulated time, epoch µs (the signature of `shared.service.now_us`)."""
        return self._now_us

    def advance_ms(self, ms: int) -> None:
        """Move time forward by `ms` milliseconds (never backwards)."""
        if ms < 0:
            raise ValueError(f"time does not go back: {ms} ms")
        self._now_us += ms * 1000

    def advance_to_us(self, at_us: int) -> None:
        """Move time forward to `at_us` (µs) if it is later than now."""
        self._now_us = max(self._now_us, at_us)

    def sleep_s(self, seconds: float) -> None:
        """A `time.sleep` replacement (tenacity's waits): simulated time passes."""
        self._now_us += round(seconds * 1_000_000)


@dataclass(frozen=True)
class LoggedEvent:
    """One delivery event with the simulated time it was emitted and the
    request (`owner`, set by the harness) that emitted it."""

    at_us: int
    owner: str
    event: DeliveryEvent


class RecordingEventLog:
    """The service's event sink, kept in memory and never printed."""

    def __init__(self, clock: SimClock) -> None:
        self._clock = clock
        self.owner = ""
        self.logged: list[LoggedEvent] = []

    def emit(self, event: DeliveryEvent) -> None:
        self.logged.append(LoggedEvent(self._clock.now_us(), self.owner, event))

    @property
    def events(self) -> list[DeliveryEvent]:
        return [e.event for e in self.logged]


# ---------------------------------------------------------------- Firestore


@overload
def _copy(doc: dict[str, Any]) -> dict[str, Any]: ...


@overload
def _copy(doc: dict[str, Any] | None) -> dict[str, Any] | None: ...


def _copy(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    # A pickle round trip: deep, and much faster than copy.deepcopy.
    return None if doc is None else pickle.loads(pickle.dumps(doc))


def _b36(n: int) -> str:
    """`n` in base 36: write ids short enough for the outbox's write keys (shared/outbox.py, ID_CHARS)."""
    digits = ""
    while True:
        n, r = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
        if n == 0:
            return digits


@dataclass
class _CommitFault:
    kind: str  # "fail" (nothing written), "lost_answer" (retried by the client), "surfaced", "crash_after"
    meanwhile: Meanwhile | None = None


class FakeRoomStore:
    """`shared.store.RoomStore` in memory. A room is kept as its document,
    exactly as the real store writes it: `room_to_doc(state)` plus `write_id`
    and `expire_at` (µs here; None while the room holds a message). Reads go
    through `room_as_read`, so blind-written acceptances (`record_accepted`,
    the `accepted` map) and echoes are applied to the in-flight attempt the
    way the real store's readers see them, and the next transaction's write
    clears them.

    `apply` is the real store's optimistic transaction: read, `decide_fn`,
    commit if the document's version has not changed since the read (else read
    and decide again, at most `max_attempts` times, then `ContentionError`).

    Faults, each for the next commit (that writes) only:
    - `fail_next_commit()`: the commit fails and nothing is written: the
      caller sees `ServiceUnavailable` (the real store reads the room once
      more, finds no write of its own, and raises).
    - `fail_next_commit(after_write=True, surfaced, meanwhile)`: an ambiguous
      commit: the write lands, its answer is lost. With `recognise_own_writes`
      (the real store, which writes a `write_id`), either the client library
      retries the commit, the retry's precondition fails and the store reads
      the room again (`surfaced=False`), or the error reaches the store
      (`surfaced=True`: DEADLINE_EXCEEDED, UNAVAILABLE, INTERNAL or RetryError)
      and it reads the room once more; finding its own write id, it returns
      the decision as committed. `meanwhile` runs between the landing and that
      read: another writer's commit, after which the store cannot tell (on the
      retried path it decides again on the new state; on the surfaced path it
      raises `DeadlineExceeded`). Without `recognise_own_writes` (the store
      before the fix), the caller sees `DeadlineExceeded`.
    - `crash_after_next_commit()`: the write lands, then the process dies.
    - `contend_next_commit(meanwhile)`: another writer changes the room between
      read and commit (`meanwhile`, or a touch of the document), so the
      precondition fails and `decide_fn` runs again.
    - `fail_next_accept(after_write)`, `crash_before_next_accept()`: the next
      `record_accepted` raises `ServiceUnavailable` (nothing written) or
      `DeadlineExceeded` (the write landed), or the process dies before it.

    Checks it records for the harness (lists of findings):
    - `decide_side_effects`: `probe()` changed while `decide_fn` ran (inv. 7).
    - `foreign_writes`: a write to a room outside `allowed_rooms[-1]` (inv. 6).
    """

    _stores = 0  # stores made in this process

    def __init__(self, clock: SimClock, retention_ms: int = 48 * 3600 * 1000, max_attempts: int = 10,
                 recognise_own_writes: bool = True, index_shards: int = DEFAULT_INDEX_SHARDS) -> None:
        self._clock = clock
        self.index_shards = index_shards
        self.retention_ms = retention_ms
        self.max_attempts = max_attempts
        self.recognise_own_writes = recognise_own_writes
        self.docs: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, int] = {}
        self.dead_letters: dict[str, KeepDeadLetter] = {}
        self.rejected: dict[str, dict[str, Any]] = {}
        self.scheduled: dict[tuple[str, str], dict[str, Any]] = {}  # (room, message id) -> its scheduled record
        self.commits = 0
        self._write_ids = 0
        # Write ids unique across stores, as the real store's uuids are: the outbox (shared/outbox.py)
        # remembers per request (or per thread outside one) which writes' lines it logged.
        FakeRoomStore._stores += 1
        self._write_prefix = f"{_b36(FakeRoomStore._stores)}w"
        self.probe: Callable[[], Any] | None = None
        self.decide_side_effects: list[str] = []
        self.allowed_rooms: list[frozenset[str] | None] = []
        self.foreign_writes: list[str] = []
        self._commit_fault: _CommitFault | None = None
        self._contend: list[Meanwhile | None] = []
        self._accept_fault: str | None = None
        self._carried: dict[str, Any] | None = None
        self._receipt: str | None = None
        # Called with the room id between each transaction attempt's read
        # (and decide) and its commit: the simulation yields to its other
        # invocations there, so their commits make this one's precondition fail.
        self.between_read_and_commit: Callable[[str], None] | None = None
        # As RoomStore.outbox_sink: logs what a transaction finds left in the outbox (shared/outbox.py).
        self.outbox_sink: outbox.Sink | None = None
        # The outbox's reads, as the real store's; a test sets them to the code
        # before the outbox (nothing left read back, no-op reads log nothing).
        self.left_behind = outbox.left_behind
        self.concerning = outbox.concerning
        self.of_receipt = outbox.of_receipt
        self.of_sweep = outbox.of_sweep
        # Whether a receipt's lookup also finds the room whose last write
        # applied it (`rooms_for_receipt`); a test sets it False for the code
        # before (by `in_flight_to` only).
        self.finds_by_receipt = True
        # Whether a sweep's write that leaves its room idle stores
        # `outbox.SWEPT` (so `recently_swept` finds it); a test sets it
        # False for the code before.
        self.marks_swept = True

    # -- faults

    def fail_next_commit(self, after_write: bool = False, surfaced: bool = False,
                         meanwhile: Meanwhile | None = None) -> None:
        kind = "fail" if not after_write else "surfaced" if surfaced else "lost_answer"
        self._commit_fault = _CommitFault(kind, meanwhile)

    def crash_after_next_commit(self) -> None:
        self._commit_fault = _CommitFault("crash_after")

    def contend_next_commit(self, meanwhile: Meanwhile | None = None) -> None:
        self._contend.append(meanwhile)

    def fail_next_accept(self, after_write: bool = False) -> None:
        self._accept_fault = "after_write" if after_write else "fail"

    def crash_before_next_accept(self) -> None:
        self._accept_fault = "crash"

    def clear_faults(self) -> None:
        self._commit_fault = None
        self._contend = []
        self._accept_fault = None

    # -- the transaction

    def _check_owner(self, room_id: str, what: str) -> None:
        allowed = self.allowed_rooms[-1] if self.allowed_rooms else None
        if allowed is not None and room_id not in allowed:
            self.foreign_writes.append(f"{what} to {room_id} while handling a request of {sorted(allowed)}")

    def _decide(self, decide_fn: Callable[[RoomState], Decision], room_id: str) -> tuple[Decision, int]:
        version = self.versions.get(room_id, 0)
        before = self.probe() if self.probe else None
        decision = decide_fn(room_as_read(room_id, _copy(self.docs.get(room_id)), self._clock.now_us()))
        if self.probe and self.probe() != before:
            self.decide_side_effects.append(f"room {room_id}: a side effect ran inside the transaction function")
        return decision, version

    def _write(self, room_id: str, decision: Decision) -> str:
        assert decision.state is not None
        self._check_owner(room_id, "room write")
        self._write_ids += 1
        write_id = f"{self._write_prefix}{_b36(self._write_ids)}"
        # As the real store: no expiry while the room holds a message or is paused.
        holds = decision.state.holds_messages or decision.state.paused
        carried, receipt = self._carried, self._receipt
        self._carried = self._receipt = None
        self.docs[room_id] = _copy({**room_to_doc(decision.state), WRITE_ID: write_id,
                                    SHARD_FIELD: index_shard(room_id, self.index_shards),
                                    "expire_at": None if holds else self._clock.now_us() + self.retention_ms * 1000,
                                    outbox.RECEIPT: receipt,
                                    outbox.OUTBOX: outbox.entry(decision, write_id, carried)})
        swept = outbox.swept_of_write(self.docs[room_id]) if self.marks_swept else None
        if swept is not None:  # as the real store: absent from every other write
            self.docs[room_id][outbox.SWEPT] = swept
        self.versions[room_id] = self.versions.get(room_id, 0) + 1
        for effect in decision.dead_letters:
            self.dead_letters[f"{effect.room_id}:{effect.incarnation}:{effect.message.seq}"] = effect
        self.commits += 1
        return write_id

    def apply(self, room_id: str, decide_fn: Callable[[RoomState], Decision]) -> Decision:
        """Run `decide_fn` on the room's state and commit its decision (see the class)."""
        unconfirmed: tuple[str, Decision] | None = None
        receipt = outbox.receipt_of_write()  # the receipt this transaction applies, if any (as the real store)
        for _ in range(self.max_attempts):
            if unconfirmed is not None and (self.docs.get(room_id) or {}).get(WRITE_ID) == unconfirmed[0]:
                return unconfirmed[1]  # our own commit landed: its decision stands
            unconfirmed = None
            decision, version = self._decide(decide_fn, room_id)
            stored = self.docs.get(room_id)
            left = self.left_behind(room_id, stored)  # the outbox, as the real store (shared/outbox.py)
            if decision.state is None:
                left = (self.concerning(left, decision.events) | self.of_receipt(left, stored, receipt, WRITE_ID)
                        | self.of_sweep(left, stored, WRITE_ID))
            if left and self.outbox_sink is not None:
                outbox.log_left_behind(room_id, left, self.outbox_sink)
            if decision.state is None:
                return outbox.stamped(decision, None, stored.get("incarnation", 0) if stored else 0)
            if self.between_read_and_commit is not None:
                self.between_read_and_commit(room_id)
            if self._contend:
                meanwhile = self._contend.pop(0)
                if meanwhile is not None:
                    meanwhile(self._clock.now_us())
                else:
                    self.versions[room_id] = self.versions.get(room_id, 0) + 1  # another writer touched it
            if self.versions.get(room_id, 0) != version:
                continue  # the precondition fails: read and decide again
            fault, self._commit_fault = self._commit_fault, None
            if fault is not None and fault.kind == "fail":
                raise gexc.ServiceUnavailable("injected: Firestore commit failed")
            self._carried = outbox.carried(stored, left) if self.outbox_sink is None else None
            # Its events' ids name the id `_write` gives this write (its counter's next value).
            decision = outbox.stamped(decision, f"{self._write_prefix}{_b36(self._write_ids + 1)}",
                                      decision.state.incarnation)
            self._receipt = receipt  # as `_carried`: what `_write` stores beside the decision
            write_id = self._write(room_id, decision)
            if fault is None:
                return decision
            if fault.kind == "crash_after":
                raise Crash("injected: died after the commit landed, before its answer")
            if not self.recognise_own_writes:
                raise gexc.DeadlineExceeded("injected: Firestore committed, the answer was lost")
            if fault.meanwhile is not None:
                fault.meanwhile(self._clock.now_us())
            if fault.kind == "surfaced":
                # The error reached the store: one more read tells whether it landed.
                if (self.docs.get(room_id) or {}).get(WRITE_ID) == write_id:
                    return decision
                raise gexc.DeadlineExceeded("injected: Firestore committed, the answer was lost")
            # The client library retried the commit; its precondition failed.
            unconfirmed = (write_id, decision)
        raise ContentionError(f"room {room_id!r} changed under {self.max_attempts} attempts in a row")

    # -- blind writes

    def record_accepted(self, room_id: str, incarnation: int, seq: int, attempt: int, deadline_us: int) -> None:
        """One blind write of the room's `accepted` map (no read, no transaction)."""
        fault, self._accept_fault = self._accept_fault, None
        if fault == "crash":
            raise Crash("injected: died after the send, before recording its acceptance")
        if fault == "fail":
            raise gexc.ServiceUnavailable("injected: Firestore refused the acceptance")
        doc = self.docs.get(room_id)
        if doc is None:
            return  # NotFound: nothing waits for this send
        self._check_owner(room_id, "acceptance write")
        doc.setdefault("accepted", {})[acceptance_key(incarnation, seq, attempt)] = deadline_us
        for path in outbox.cleared(room_id):  # the same write deletes the outbox entries this request logged
            (doc.get(outbox.OUTBOX) or {}).pop(path.split(".", 1)[1], None)
        self.versions[room_id] = self.versions.get(room_id, 0) + 1
        if fault == "after_write":
            raise gexc.DeadlineExceeded("injected: the acceptance landed, its answer was lost")

    def record_echo(self, room_id: str, incarnation: int, seq: int, attempt: int, platform_ts_us: int,
                    provider_message_id: str | None, number: str | None = None,
                    deadline_s: float | None = None) -> None:
        """One blind write of the room's `echoes` map (no read, no transaction)."""
        doc = self.docs.get(room_id)
        if doc is None:
            return
        entry: dict[str, object] = {"ts": platform_ts_us, "mid": provider_message_id}
        if number is not None:
            entry["num"] = number
        doc.setdefault("echoes", {})[acceptance_key(incarnation, seq, attempt)] = entry
        self.versions[room_id] = self.versions.get(room_id, 0) + 1

    def read_room(self, room_id: str, deadline_s: float | None = None) -> RoomState | None:
        """One read outside any transaction (RoomStore.read_room)."""
        return self.load_room(room_id)

    # -- scheduled messages (shared/records.py's, in memory)

    def record_scheduled(self, message_id: str, room_id: str, deliver_at_us: int, hop_due_us: int, task: str) -> None:
        self.scheduled.setdefault((room_id, message_id), {}).update(
            {"message_id": message_id, "room_id": room_id, "deliver_at_us": deliver_at_us, "hop_due_us": hop_due_us,
             "task": task})

    def cancel_scheduled(self, room_id: str, message_id: str, actor: str, reason: str) -> dict[str, Any] | None:
        key = (room_id, message_id)
        before = dict(self.scheduled[key]) if key in self.scheduled else None
        self.scheduled.setdefault(key, {}).update({"message_id": message_id, "room_id": room_id, "actor": actor,
                                                   "reason": reason})
        return before

    def claim_cancelled_end(self, room_id: str, message_id: str) -> tuple[str, dict[str, Any] | None]:
        doc = self.scheduled.get((room_id, message_id))
        if doc is None:  # never held: the record starts here, as the real store's
            self.scheduled[(room_id, message_id)] = {"message_id": message_id, "room_id": room_id,
                                                     "entered_at": self._clock.now_us()}
            return "not_cancelled", None
        if doc.get("entered_at") is not None:
            return "not_cancelled", None
        if "actor" not in doc:
            doc["entered_at"] = self._clock.now_us()  # as the real store: a later cancel is too late
            return "not_cancelled", None
        if doc.get("ended"):
            return "ended_before", doc
        doc["ended"] = True
        return "ended_now", doc

    def keep_rejected(self, key: str, reason: str, record: dict[str, Any]) -> None:
        self.rejected[key] = {**record, "reason": reason}

    def overdue_rooms(self, before_us: int, limit: int, cursor: ShardCursor | None = None) -> list[str]:
        """Rooms whose `wake_at_us` is before `before_us`, oldest first (ties
        by room id), at most `limit`. One index shard (0): with `cursor`, the
        answer starts after `cursor.after[0]` (Firestore's `start_after` on
        (wake_at_us, id)), the cursor moves to its last room, and the shard is
        done when fewer than `limit` came (then [] without a look)."""
        if cursor is not None and 0 in cursor.done:
            return []
        found = sorted((d["wake_at_us"], room_id) for room_id, d in self.docs.items()
                       if d.get("wake_at_us") is not None and d["wake_at_us"] < before_us)
        if cursor is not None and 0 in cursor.after:
            found = [row for row in found if row > cursor.after[0]]
        page = found[:limit]
        if cursor is not None:
            if page:
                cursor.after[0] = page[-1]
            if len(page) < limit:
                cursor.done.add(0)
        return [room_id for _, room_id in page]

    def rooms_sending_to(self, recipient_key: str) -> list[str]:
        """Every room whose `in_flight_to` is `recipient_key`."""
        return sorted(r for r, d in self.docs.items() if d.get("in_flight_to") == recipient_key)

    def rooms_for_receipt(self, recipient_key: str, receipt: str) -> list[str]:
        """As `RoomQueries.rooms_for_receipt` (one OR query): every room whose
        `in_flight_to` is `recipient_key` or whose `outbox.RECEIPT` is
        `receipt` (a digest), by id."""
        return sorted(r for r, d in self.docs.items() if d.get("in_flight_to") == recipient_key
                      or (self.finds_by_receipt and d.get(outbox.RECEIPT) == receipt))

    def recently_swept(self, since_us: int, limit: int) -> list[str]:
        """As `SweptRooms.recently_swept` (one range query): at most `limit`
        rooms whose `outbox.SWEPT` is at or after `since_us` (epoch us),
        oldest first, ties by id."""
        found = sorted((d[outbox.SWEPT], r) for r, d in self.docs.items()
                       if isinstance(d.get(outbox.SWEPT), int) and d[outbox.SWEPT] >= since_us)
        return [r for _, r in found[:limit]]

    # -- TTL and reading

    def delete_expired(self) -> list[str]:
        """Firestore TTL: delete every room whose `expire_at` has passed."""
        now = self._clock.now_us()
        gone = [r for r, d in self.docs.items() if d.get("expire_at") is not None and d["expire_at"] <= now]
        for room_id in gone:
            del self.docs[room_id]
            self.versions[room_id] = self.versions.get(room_id, 0) + 1
        return gone

    def load_doc(self, room_id: str) -> dict[str, Any] | None:
        """The stored document (a deep copy), or None."""
        return _copy(self.docs.get(room_id))

    def load_room(self, room_id: str) -> RoomState | None:
        """The stored room as its readers see it (`room_as_read`), or None."""
        doc = self.docs.get(room_id)
        return room_as_read(room_id, _copy(doc), self._clock.now_us()) if doc is not None else None


# ---------------------------------------------------------------- Cloud Tasks


@dataclass
class ArmedTask:
    """One Cloud Tasks task of a room timer. `due_at_us`/`armed_at_us` in epoch µs.

    `runs`: how many times Cloud Tasks called the `timeout` function with it;
    `done`: a run was answered 2xx (Cloud Tasks retries it until then);
    `lost`: it never runs (the fault the watchdog exists for).
    """

    name: str
    timer: ScheduleTimer
    armed_at_us: int
    runs: int = 0
    done: bool = False
    lost: bool = False
    deleted: bool = False

    @property
    def room_id(self) -> str:
        return self.timer.room_id

    @property
    def due_at_us(self) -> int:
        return self.timer.due_at_us


class FakeTimers:
    """`shared.tasks.TimerScheduler` in memory: records every armed task.

    Like the real service, a task name (`shared.tasks.task_id`) is created
    once: creating it again is a no-op that succeeds, even after the task ran.

    Faults (for the next calls only):
    - `fail_next_arm(skip, times)`: `skip` more arms succeed, then the next
      `times` calls raise `ServiceUnavailable` (nothing is armed). The service
      tries an arm 3 times, so `times=3` makes it give up.
    - `crash_next_arm()`: the next `schedule` call raises `Crash`.
    - `slow_next_arm(ms, meanwhile)`: the next call creates its task, then its
      answer takes `ms` ms; `meanwhile` runs half-way (the process stalls
      between its commit and its send).
    - `lose_next_task()`: the next task is created but never runs.
    """

    def __init__(self, clock: SimClock) -> None:
        self._clock = clock
        self.tasks: list[ArmedTask] = []
        self._names: set[str] = set()
        self.failed_arms: list[ScheduleTimer] = []
        self._skip: int | None = None
        self._fail_times = 0
        self._crash_next = False
        self._slow: tuple[int, Meanwhile | None] | None = None
        self._lose_next = False

    def fail_next_arm(self, skip: int = 0, times: int = 3) -> None:
        self._skip, self._fail_times = skip, times

    def crash_next_arm(self) -> None:
        self._crash_next = True

    def slow_next_arm(self, ms: int, meanwhile: Meanwhile | None = None) -> None:
        self._slow = (ms, meanwhile)

    def lose_next_task(self) -> None:
        self._lose_next = True

    def clear_faults(self) -> None:
        self._skip, self._fail_times = None, 0
        self._crash_next = False
        self._slow = None
        self._lose_next = False

    def schedule(self, timer: ScheduleTimer) -> None:
        """Create `timer`'s task, due at `timer.due_at_us` (epoch µs)."""
        if self._crash_next:
            self._crash_next = False
            raise Crash("injected: died before arming the timer")
        if self._skip is not None:
            if self._skip == 0 and self._fail_times > 0:
                self._fail_times -= 1
                if self._fail_times == 0:
                    self._skip = None
                self.failed_arms.append(timer)
                raise gexc.ServiceUnavailable("injected: Cloud Tasks unavailable")
            self._skip -= 1
        name = task_id(timer)
        if name not in self._names:
            self._names.add(name)
            lost, self._lose_next = self._lose_next, False
            self.tasks.append(ArmedTask(name, timer, self._clock.now_us(), lost=lost))
        slow, self._slow = self._slow, None
        if slow is not None:
            ms, meanwhile = slow
            end_us = self._clock.now_us() + ms * 1000
            self._clock.advance_ms(ms // 2)
            if meanwhile is not None:
                meanwhile(end_us)
            self._clock.advance_to_us(end_us)

    def cancel(self, timer: CancelTimer) -> bool:
        """Delete `timer`'s task if it has not run (DeleteTask); True if deleted."""
        name = task_id(timer)
        for task in self.tasks:
            if task.name == name and not task.done and not task.deleted:
                task.deleted = True
                return True
        return False

    def pending(self, room_id: str | None = None) -> list[ArmedTask]:
        """Tasks not yet answered 2xx (and not lost or deleted), earliest due first."""
        found = [t for t in self.tasks if not t.done and not t.lost and not t.deleted
                 and (room_id is None or t.room_id == room_id)]
        return sorted(found, key=lambda t: t.due_at_us)

    def due(self) -> list[ArmedTask]:
        """Pending tasks due now or earlier, earliest first (ties: arming order)."""
        now = self._clock.now_us()
        return [t for t in self.pending() if t.due_at_us <= now]


# ---------------------------------------------------------------- the platform


SEND_KINDS = ("ok", "transient", "rate_limited", "permanent", "unknown_reached", "unknown_lost", "crash_before",
              "crash_after")


@dataclass
class SendCall:
    """One call of the platform's send API. Times in epoch µs of the simulated clock.

    - `decided_us`: the attempt's decision (from its delivery id, ms precision).
    - `reached_us`, `reach_order`: when, and as which of all the platform's
      deliveries (1, 2, ...), the platform took the message to deliver it;
      None / 0 when it never did (refused, lost, or never sent).
    - `seen`: what the caller got back: `accepted`, `refused`, `unknown`, or
      `crash` (the process died before or after the call).
    """

    room_id: str
    incarnation: int
    seq: int
    attempt: int
    delivery_id: str
    text: str
    decided_us: int
    started_us: int
    kind: str
    ends_us: int = 0  # when the call returns (or is cut off), known from its start
    returned_us: int = 0
    seen: str = ""
    reached_us: int | None = None
    reach_order: int = 0
    provider_message_id: str | None = None
    media: object = None  # the `Media` of an image send, None for text

    @property
    def reached(self) -> bool:
        return self.reached_us is not None


@dataclass
class _NextSend:
    latency_ms: int = 0
    kind: str = "ok"
    reach: str = "start"  # when the platform takes the message: at the call's "start" or "end", or "never"
    during: Callable[[SendCall], None] | None = None


@dataclass
class FakePlatform:
    """A `shared.providers.Sender` for WhatsApp: records every send call.

    A call lasts its latency, cut off at `budget_ms` (the real adapter bounds
    a call by SEND_TIMEOUT_MS, reconnects included): a cut-off call returns
    UNKNOWN, and the platform may or may not have the message. The platform
    takes a message at the call's start or at its end (just before the answer
    or the cut-off), never after the call returned.

    Faults and delays apply to the next send call only:
    - `slow_next_send(ms, reach, during)`: the call takes `ms`; `during(call)`
      runs half-way through it (it may move the clock up to `call.ends_us`).
    - `fail_next_send(kind)`: `transient`, `rate_limited` (131056) or
      `permanent` (131026): refused, nothing reaches the user; `unknown_reached`
      (the platform has it, the caller sees UNKNOWN, as after a 5xx or a
      dropped connection), `unknown_lost` (UNKNOWN, the platform never got it);
      `crash_before` / `crash_after` (the process dies before the call / after
      the platform took it: `Crash` is raised).
    - `during_next_send(fn)`: `fn(call)` runs half-way through the call.
    """

    clock: SimClock
    budget_ms: int
    calls: list[SendCall] = field(default_factory=list)
    _next: _NextSend = field(default_factory=_NextSend)
    _reached: int = 0

    def slow_next_send(self, ms: int, reach: str = "start", during: Callable[[SendCall], None] | None = None) -> None:
        assert reach in {"start", "end", "never"}, reach
        self._next.latency_ms, self._next.reach = ms, reach
        if during is not None:
            self._next.during = during

    def fail_next_send(self, kind: str) -> None:
        assert kind in SEND_KINDS, kind
        self._next.kind = kind

    def during_next_send(self, fn: Callable[[SendCall], None]) -> None:
        self._next.during = fn

    def clear_faults(self) -> None:
        self._next = _NextSend()

    def send(self, recipient: str, text: str, delivery_id: str, media: object = None) -> SendResult:
        plan, self._next = self._next, _NextSend()
        room_id, incarnation, seq, attempt, decided_us = parse_delivery_id(delivery_id)
        call = SendCall(room_id, incarnation, seq, attempt, delivery_id, text, decided_us, self.clock.now_us(),
                        plan.kind, media=media)
        self.calls.append(call)
        if plan.kind == "crash_before":
            call.returned_us, call.seen = call.started_us, "crash"
            raise Crash("injected: died before the send call")
        cut = plan.latency_ms > self.budget_ms
        duration = min(plan.latency_ms, self.budget_ms)
        takes = plan.kind in {"ok", "unknown_reached", "crash_after"} and not (cut and plan.reach == "never")
        at_end = plan.reach == "end" or (plan.reach == "never" and not cut)
        if takes and not at_end:
            self._take(call)
        call.ends_us = call.started_us + duration * 1000
        self.clock.advance_ms(duration // 2)
        if plan.during is not None:
            plan.during(call)
        self.clock.advance_to_us(call.ends_us)
        if takes and at_end:
            self._take(call)
        call.returned_us = self.clock.now_us()
        if plan.kind == "crash_after":
            call.seen = "crash"
            raise Crash("injected: died after the platform took the send")
        result = self._result(plan.kind, cut, call)
        call.seen = str(result.outcome)
        return result

    @staticmethod
    def _result(kind: str, cut: bool, call: SendCall) -> SendResult:
        if cut:
            return SendResult(SendOutcome.UNKNOWN, error_title="possibly sent, no answer: ReadTimeout (budget spent)")
        if kind == "ok":
            return SendResult(SendOutcome.ACCEPTED, provider_message_id=call.provider_message_id)
        if kind == "transient":
            return SendResult(SendOutcome.REFUSED, error_title="no connection could be opened: injected")
        if kind == "rate_limited":
            return SendResult(SendOutcome.REFUSED, rate_limited=True, error_code=131056,
                              error_title="(#131056) (Business Account, Consumer Account) pair rate limit hit")
        if kind == "permanent":
            return SendResult(SendOutcome.REFUSED, permanent=True, error_code=131026,
                              error_title="Message undeliverable")
        return SendResult(SendOutcome.UNKNOWN, error_title="possibly sent: HTTP 503: injected")

    def _take(self, call: SendCall) -> None:
        self._reached += 1
        call.reached_us = self.clock.now_us()
        call.reach_order = self._reached
        call.provider_message_id = f"wamid.{self._reached}"

    def reached_calls(self, room_id: str | None = None) -> list[SendCall]:
        """Calls whose message the platform took, in the order it took them."""
        return sorted((c for c in self.calls if c.reached and (room_id is None or c.room_id == room_id)),
                      key=lambda c: c.reach_order)


# ---------------------------------------------------------------- the status queue


class FakeStatusQueue:
    """`shared.status_queue.StatusQueue` in memory: `published` holds the room
    batches in publish order, `error_queue` what went to the error queue
    (`(kind, room_id or None, reason, attempts)`), `failures` the failure count
    per Pub/Sub message id. `fail_next_publish()` makes the next `publish`
    raise `StatusPublishFailed` with nothing published."""

    def __init__(self) -> None:
        self.published: list[Any] = []
        self.error_queue: list[tuple[str, str | None, str, int | None]] = []
        self.failures: dict[str, int] = {}
        self._fail_publish = False

    def fail_next_publish(self) -> None:
        self._fail_publish = True

    def publish(self, batches: Any, unroutable: Any = (), receipts: Any = ()) -> int:
        from shared.status_queue import StatusPublishFailed

        batches, unroutable = list(batches) + list(receipts), list(unroutable)
        if self._fail_publish:
            self._fail_publish = False
            raise StatusPublishFailed("injected: Pub/Sub unavailable")
        self.published.extend(batches)
        self.error_queue.extend(("unroutable", None, u.reason, None) for u in unroutable)
        return len(batches) + len(unroutable)

    def record_failure(self, pubsub_message_id: str, room_id: str, error: str) -> int:
        self.failures[pubsub_message_id] = self.failures.get(pubsub_message_id, 0) + 1
        return self.failures[pubsub_message_id]

    def dead_letter(self, data: bytes, room_id: str, reason: str, attempts: int, kind: str = "room_statuses") -> None:
        self.error_queue.append((kind, room_id, reason, attempts))
