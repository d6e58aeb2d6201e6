"""The simulated deployment: the real `DeliveryService` behind the entry
points, over the in-memory ports, driven by Pub/Sub, Cloud Tasks, Meta,
Cloud Scheduler and operators, all on one `Scheduler`.

What each outside party does (the contracts DESIGN.md and the docs state):
- Pub/Sub (ordered push, ordering key = room): one outstanding push per room,
  in publish order, at least once; a push answered anything but 2xx (or never
  answered: a crash) comes again after a backoff, before any later message
  of its room; after `DLQ_ATTEMPTS` failed deliveries it may go to the
  dead-letter topic (the `deadletter` endpoint) and the room's next message
  is pushed; an acked push may come again, late (a duplicate). Producers
  without an ordering key: each message pushed on its own (pubsub.py).
- Cloud Tasks: runs each timer task at or after its due time (dispatch
  delay), retries it until answered 2xx, may run it twice, never runs a
  deleted one; a task may be lost (the watchdog exists for that). Scheduled
  messages and prepare tasks through the real `ScheduledHold` and
  `PrepareScheduler` (scheduled.py), media uploads (media.py).
- Firestore's TTL: deletes rooms past their retention (some seeds: 15-40 s).
- Meta: posts webhooks (platforms.py), again after a non-2xx answer; in
  WEBHOOK_MODE=queued (40% of seeds) the `webhook` function publishes them
  to the status queue and the `status` function applies them (status_queue.py).
- Cloud Scheduler: the watchdog sweep every `SWEEP_EVERY_MS`.
- Operators (operators.py): now and then pause and resume a room, skip a
  held message, redrive or skip a parked one; in the drain, resume every
  paused room and redrive or skip every parked message, so a healthy run
  ends with every room empty; `baton scheduled cancel` (a campaign's
  message) and `statuses replay` (after a bad revision of `status`).
- A Firestore outage of 5-60 s (a quarter of the seeds): every call
  refused, so pushes fail until Pub/Sub dead-letters them, and the copies
  are parked for operators.
- An unreadable room document (by seed): a room written by hand or by
  another version, with an overdue wake-up; the watchdog must step over it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

from shared import config
from shared.prepare import PrepareScheduler
from shared.room import RoomState, policy_from_settings
from shared.room_document import room_as_read, room_to_doc
from shared.scheduled import ScheduledHold
from shared.service import TRANSIENT_ERRORS, DeliveryService, Reply, ServiceCore
from shared.tasks import timer_body
from tools.sim.fakes import ArmedTask, Crash, FakeRoomStore, FakeTimers, RecordingEventLog
from tools.sim.simulation.faults import Faults
from tools.sim.simulation.media import SimPreparer
from tools.sim.simulation.operators import operate
from tools.sim.simulation.platforms import INSTAGRAM_SECRET, MESSENGER_SECRET, WHATSAPP_SECRET, Platform
from tools.sim.simulation.ports import Port, SimSenderWindow
from tools.sim.simulation.pubsub import SimPubSub
from tools.sim.simulation.scheduled import SimTask, SimTasksClient, cancel_scheduled, record_claims, run_task
from tools.sim.simulation.scheduler import Aborted, Invocation, Scheduler
from tools.sim.simulation.status_queue import SimStatusQueue
from tools.sim.simulation.workload import (
    CAMPAIGN_ID,
    campaign_cancel,
    room_settings,
    sweep_settings,
    ttl_ms,
    webhook_mode,
    workload,
)

ACK_TIMEOUT_MS = 3000
SEND_TIMEOUT_MS = 2000
SEND_START_DEADLINE_MS = 2000
WATCHDOG_GRACE_MS = 10_000
SWEEP_EVERY_MS = 15_000
NUMBERS = ("100000000000001", "100000000000002")
NUMBER_RATE = 2  # sends/s per number: low, so the sender window is busy
BROKEN_ROOM = "room-unreadable"
WORK_MS = 60_000  # the workload's span
DRAIN_MS = 600_000  # then no faults: what is left must finish by itself
MAX_TRIES = 60  # a caller gives up re-sending one request after this many (a 500 loops forever otherwise)


@dataclass
class Answer:
    """One invocation as the world saw it: `status` None when never answered (a crash)."""

    function: str
    rooms: tuple[str, ...]
    label: str
    started_us: int
    ended_us: int
    status: int | None
    error: str = ""


class World:
    """One run: build it with a seed, `run()`, then read its records (checks.py)."""

    def __init__(self, seed: int, only_rooms: frozenset[str] | None = None,
                 without: frozenset[str] = frozenset(), store_options: dict[str, Any] | None = None) -> None:
        """`store_options`: attributes set on the fake store (a test's code before a fix)."""
        self.seed = seed
        self.sched = Scheduler(random.Random(seed))
        self.faults = Faults(self.sched.rng)
        with mock.patch.dict(os.environ, clear=True):
            defaults = config.load()  # the deployed defaults, whatever the shell (or a test session) has set
        self.settings = dataclasses.replace(
            defaults, ack_timeout_ms=ACK_TIMEOUT_MS, send_timeout_ms=SEND_TIMEOUT_MS,
            send_start_deadline_ms=SEND_START_DEADLINE_MS, watchdog_grace_ms=WATCHDOG_GRACE_MS,
            providers="whatsapp,messenger,instagram", whatsapp_senders=",".join(f"{n}:{NUMBER_RATE}" for n in NUMBERS),
            whatsapp_app_secret=WHATSAPP_SECRET, messenger_app_secret=MESSENGER_SECRET,
            instagram_app_secret=INSTAGRAM_SECRET, metrics_log_path="",
            event_log_path="", webhook_mode=webhook_mode(seed), **sweep_settings(seed),
            **room_settings(seed))
        self.policy = policy_from_settings(self.settings)
        self.ttl_ms = ttl_ms(seed)
        self.store = FakeRoomStore(self.sched, retention_ms=self.ttl_ms or 3_600_000)  # type: ignore[arg-type]
        for name, value in (store_options or {}).items():
            setattr(self.store, name, value)
        self.deleted: list[tuple[int, str]] = []  # (at_us, room_id): rooms Firestore's TTL deleted
        self.ended_before: dict[str, list[Any]] = {}  # room -> what it had ended before TTL deleted it
        self.claims, self.cancels = record_claims(self)
        # The events each committed decision carried (room_id, event): what the room decided, whether or
        # not its process lived to log it (the checks' excuses read this, not the log).
        self.committed: list[tuple[str, Any]] = []
        real_write = self.store._write

        def write(room_id: str, decision: Any) -> str:
            write_id = real_write(room_id, decision)
            self.committed.extend((room_id, e) for e in decision.events)
            return write_id

        self.store._write = write  # type: ignore[method-assign]
        self.tasks_client = SimTasksClient(self)
        self.prepare_client = SimTasksClient(self, self.dispatch_prepare)
        self.uploads: dict[str, str] = {}  # media id -> the number that uploaded it
        self.media_ids = 0
        self.store.between_read_and_commit = lambda room: self.sched.pause(
            self.faults.port_latency_us("firestore between read and commit"))
        self.timers = FakeTimers(self.sched)  # type: ignore[arg-type]
        self.events = RecordingEventLog(self.sched)  # type: ignore[arg-type]
        # What the service sets on its store (through the port here, so on the fake itself): the outbox's
        # left-behind lines are logged before the next commit (shared/outbox.py).
        self.store.outbox_sink = self.events.emit
        self.window = SimSenderWindow(self.sched, self.faults)
        self.platforms = {p: Platform(p, self.sched, self.faults, self._post_webhook, SEND_TIMEOUT_MS)
                          for p in ("whatsapp", "messenger", "instagram")}
        self.platforms["whatsapp"].slot_of = self.window.slot_of
        self.platforms["whatsapp"].uploads = self.uploads
        store_port = Port("firestore", self.store, self.sched, self.faults, before={"apply": self._store_fault})
        timer_port = Port("cloud tasks", self.timers, self.sched, self.faults,
                          before={"schedule": self._arm_fault}, after={"schedule": lambda _r: self._new_tasks()})
        self.status_queue = SimStatusQueue(self)
        self.scheduled_hold = ScheduledHold(Port("cloud tasks (scheduled)", self.tasks_client, self.sched,  # type: ignore[arg-type]
                                                 self.faults, plain=frozenset({"queue_path"})), self.settings)
        self.prepare_scheduler = PrepareScheduler(Port("cloud tasks (prepare)", self.prepare_client,  # type: ignore[arg-type]
                                                       self.sched, self.faults, plain=frozenset({"queue_path"})),
                                                  self.settings)
        self._ports = (store_port, timer_port)
        self.store_port = store_port
        self.service = self._build(self.settings)
        self.numbers_changed: list[tuple[int, tuple[str, ...]]] = []  # (at_us, the numbers from then on)
        self.rooms = workload(seed, only_rooms)
        self.answers: list[Answer] = []
        self.errors_500: list[Answer] = []
        self._known_tasks = 0
        self.broken_doc = self.sched.rng.random() < 0.3 and "unreadable-doc" not in without
        self.ended = False
        self.pubsub = SimPubSub(self)
        # A bad revision (WEBHOOK_MODE=queued seeds, a stream of its own): the `status` function fails on
        # every batch for a while (not a transient error: counted, then moved to the error queue);
        # after it, an operator replays the error queue (`baton statuses replay`).
        bad = random.Random(f"bad-revision-{seed}")
        self.bad_revision: tuple[int, int] | None = None
        if self.settings.webhook_mode == "queued" and bad.random() < 0.3:
            start = self.sched.now_us() + bad.randint(5_000, 40_000) * 1000
            self.bad_revision = (start, start + bad.randint(20_000, 60_000) * 1000)
            self.settings = dataclasses.replace(self.settings, status_max_attempts=3)
            self.service = self._build(self.settings)

    def _build(self, settings: Any) -> DeliveryService:
        """A service instance as a cold start builds it, over the world's ports."""
        store_port, timer_port = self._ports
        # As shared.providers.make_senders: a client per number of the
        # settings (a number removed has none), plain `whatsapp` the first.
        wa = self.platforms["whatsapp"]
        senders: dict[str, Any] = {f"whatsapp:{spec.phone_number_id}": wa.sender(spec.phone_number_id)
                                   for spec in settings.whatsapp_sender_specs}
        senders["whatsapp"] = wa.sender(NUMBERS[0])
        senders["messenger"] = self.platforms["messenger"].sender("page")
        senders["instagram"] = self.platforms["instagram"].sender("ig-account")
        # As make_preparers: one per number (media uploaded with a number is that number's), plain `whatsapp` the first.
        preparers: dict[str, Any] = {f"whatsapp:{spec.phone_number_id}": SimPreparer(self, spec.phone_number_id)
                                     for spec in settings.whatsapp_sender_specs}
        preparers["whatsapp"] = SimPreparer(self, NUMBERS[0])
        # The service's clock, retry sleeps, budgets and sweep pool on the scheduler's virtual time.
        sched = self.sched
        return DeliveryService(ServiceCore(settings, policy_from_settings(settings), store_port, timer_port,
                                           senders, self.events, status_queue=lambda: self.status_queue,  # type: ignore[arg-type]
                                           sender_window=self.window, scheduled=self.scheduled_hold,  # type: ignore[arg-type]
                                           prepare_tasks=self.prepare_scheduler, preparers=preparers,
                                           clock=sched, sleep=sched.sleep_s, monotonic=sched.monotonic, pool=sched.pool))

    def _change_numbers(self) -> None:
        """A configuration change between invocations: a sending number
        removed (or added back). Invocations under way finish on the old
        instance; every later one runs on a new one (a new revision)."""
        numbers = NUMBERS[:1] if self.settings.whatsapp_senders.count(",") else NUMBERS
        self.faults.count("sending number removed" if len(numbers) == 1 else "sending number added")
        self.settings = dataclasses.replace(self.settings, whatsapp_senders=",".join(
            f"{n}:{NUMBER_RATE}" for n in numbers))
        self.service = self._build(self.settings)
        self.numbers_changed.append((self.sched.now_us(), numbers))

    # -- faults the ports arm in their fakes

    def _store_fault(self) -> None:
        f = self.faults
        inv = self.sched.current()
        if self.bad_revision is not None and inv is not None and inv.name.startswith("status ") \
                and self.bad_revision[0] <= self.sched.now_us() < self.bad_revision[1]:
            f.count("status failed by a bad revision (not transient)")
            raise RuntimeError("injected: a bug of a bad revision")
        if f.chance("store_error", "firestore commit failed"):
            self.store.fail_next_commit()
        elif f.chance("store_error", "firestore commit landed, answer lost"):
            self.store.fail_next_commit(after_write=True, surfaced=f.rng.random() < 0.5)
        elif f.chance("crash", "crash after a commit landed"):
            self.store.crash_after_next_commit()

    def _arm_fault(self) -> None:
        if self.faults.chance("arm_error", "timer arm refused"):
            self.timers.fail_next_arm(times=self.faults.rng.randint(1, 3))

    def _new_tasks(self) -> None:
        for task in self.timers.tasks[self._known_tasks:]:
            if self.faults.chance("lost_task", "timer task lost"):
                task.lost = True
                continue
            self._dispatch_task(task, self.faults.dispatch_delay_ms())
        self._known_tasks = len(self.timers.tasks)

    # -- invocations

    def invoke(self, function: str, rooms: tuple[str, ...], label: str, body: Callable[[], Reply],
               then: Callable[[int | None], None], delay_us: int = 0) -> None:
        """Run `body` as one invocation of `function`; `then(status)` with
        its HTTP status (None: never answered), as functions/main.py answers:
        a `Reply`'s status, 503 for a transient error, 500 for anything else."""
        started = self.sched.now_us() + delay_us

        def done(inv: Invocation) -> None:
            result, error = inv.result, ""
            if isinstance(result, Reply):
                status: int | None = result.status
            elif isinstance(result, Crash | Aborted):
                status, error = None, str(result)
            elif isinstance(result, TRANSIENT_ERRORS):
                status, error = 503, f"{type(result).__name__}: {result}"
            else:
                status, error = 500, f"{type(result).__name__}: {result}"
            answer = Answer(function, rooms, label, started, self.sched.now_us(), status, error[:300])
            self.answers.append(answer)
            if status == 500:
                self.errors_500.append(answer)
            if not isinstance(result, Aborted):
                then(status)

        self.sched.spawn(f"{function} {label}", body, done, delay_us)

    def retry(self, tries: int, again: Callable[[int], None]) -> None:
        if tries < MAX_TRIES and not (self.ended and self.sched.now_us() > self.end_us):
            self.sched.at(self.sched.now_us() + self.faults.redelivery_ms() * 1000, lambda: again(tries + 1))

    # -- Cloud Tasks, Meta, Cloud Scheduler

    def _dispatch_task(self, task: ArmedTask, delay_ms: int, tries: int = 1) -> None:
        def run() -> None:
            if task.deleted or task.done:
                return
            task.runs += 1
            body = json.dumps(timer_body(task.timer)).encode()

            def answered(status: int | None) -> None:
                if status is not None and 200 <= status < 300:
                    task.done = True
                    if self.faults.chance("dup", "timer task run twice"):
                        self.invoke("timeout", (task.room_id,), f"{task.name} (again)",
                                    lambda: self.service.handle_timer(body), lambda _s: None,
                                    self.faults.rng.randint(0, 5_000_000))
                elif tries < MAX_TRIES:
                    self._dispatch_task(task, self.faults.redelivery_ms(), tries + 1)

            self.invoke("timeout", (task.room_id,), task.name, lambda: self.service.handle_timer(body), answered)

        self.sched.at(max(task.due_at_us, self.sched.now_us()) + delay_ms * 1000, run)

    def _post_webhook(self, at_us: int, raw: bytes, signature: str, label: str, tries: int = 1) -> None:
        def post() -> None:
            def answered(status: int | None) -> None:
                if status is None or not 200 <= status < 300:
                    self.retry(tries, lambda n: self._post_webhook(self.sched.now_us(), raw, signature, label, n))

            self.invoke("webhook", (), label, lambda: self.service.handle_status_webhook(raw, signature), answered)

        self.sched.at(at_us, post)

    def _sweep(self) -> None:
        if self.sched.now_us() >= self.end_us:
            return
        self.invoke("sweep", (), "watchdog", self.service.handle_sweep, lambda _s: None)
        self.sched.at(self.sched.now_us() + SWEEP_EVERY_MS * 1000, self._sweep)

    def dispatch_scheduled(self, task: SimTask) -> None:
        """A scheduled message's task: `enqueue` with X-Baton-Scheduled (`scheduled_entry`)."""
        run_task(self, task, "enqueue", f"{task.label} (scheduled)", "scheduled task run twice",
                 lambda: self.service.handle_push(task.body, scheduled_entry=True))

    def dispatch_prepare(self, task: SimTask) -> None:
        """A prepare task (shared/prepare.py): the `prepare` function."""
        run_task(self, task, "prepare", task.name, "prepare task run twice",
                 lambda: self.service.handle_prepare(task.body))

    def _ttl(self) -> None:
        """Firestore's TTL: deletes the rooms whose `expire_at` has passed
        (checked every 5 s; Google deletes within a day of it, so any
        moment after is legal)."""
        if self.sched.now_us() >= self.end_us:
            return
        docs = dict(self.store.docs)
        for room_id in self.store.delete_expired():
            self.deleted.append((self.sched.now_us(), room_id))
            # What the room had ended (its durable record) goes with it: kept for the checks.
            self.ended_before.setdefault(room_id, []).extend(room_as_read(room_id, docs[room_id], self.sched.now_us()).ended)
            self.faults.count("room deleted by TTL (a new incarnation next)")
        self.sched.at(self.sched.now_us() + 5_000_000, self._ttl)

    def _write_broken_doc(self) -> None:
        doc = room_to_doc(RoomState(BROKEN_ROOM))
        doc["wake_at_us"] = self.start_us  # overdue: the watchdog's query finds it first
        del doc[self.faults.rng.choice(("incarnation", "next_seq"))]
        self.store.docs[BROKEN_ROOM] = doc
        self.faults.count("unreadable room document")

    # -- the run

    def run(self) -> None:
        self.start_us = self.sched.now_us()
        self.drain_us = self.start_us + WORK_MS * 1000
        self.end_us = self.drain_us + DRAIN_MS * 1000
        for plan in self.rooms:
            self.pubsub.start(plan)
        if self.sched.rng.random() < 0.3:
            for _ in range(self.sched.rng.randint(1, 2)):
                self.sched.at(self.start_us + self.sched.rng.randint(0, WORK_MS) * 1000, self._change_numbers)
        outage = random.Random(f"outage-{self.seed}")  # its own stream: other seeds run as before
        if outage.random() < 0.25:
            start = self.start_us + outage.randint(0, WORK_MS - 20_000) * 1000
            self.faults.outages.append((start, start + outage.randint(5_000, 60_000) * 1000))
            self.faults.count("Firestore outage (5-60 s)")
        if self.broken_doc:
            self.sched.at(self.start_us + self.sched.rng.randint(0, WORK_MS) * 1000, self._write_broken_doc)
        self.sched.at(self.start_us + SWEEP_EVERY_MS * 1000, self._sweep)
        if self.ttl_ms is not None:
            self.sched.at(self.start_us + 5_000_000, self._ttl)
        if self.bad_revision is not None:
            self.faults.count("bad revision of the status function")
            for at_us in (self.bad_revision[1] + 10_000_000, self.drain_us + 1_000_000):
                self.sched.at(at_us, self.status_queue.replay)
        cancel = campaign_cancel(self.seed, [p.room_id for p in workload(self.seed, None)])
        if cancel is not None and any(p.room_id == cancel[0] for p in self.rooms):
            self.sched.at(self.start_us + cancel[1] * 1000, functools.partial(cancel_scheduled, self, cancel[0],
                                                                              CAMPAIGN_ID))
        self.sched.at(self.start_us + 10_000_000, lambda: operate(self, False))
        self.sched.run_until(self.drain_us)
        self.faults.calm()
        self.sched.run_until(self.end_us)
        self.ended = True
        self.sched.run_until(self.end_us + 60_000_000)
        self.sched.close()

    def room_state(self, room_id: str) -> RoomState | None:
        doc = self.store.docs.get(room_id)
        return None if doc is None else room_as_read(room_id, json.loads(json.dumps(doc)), self.sched.now_us())
