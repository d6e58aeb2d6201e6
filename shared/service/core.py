"""The core every handler shares: apply one event to a room and run its
effects after the commit, and the clock, the error classes and the answer.

Handlers read the clock (`ServiceCore.now_us`), the rules (`ServiceCore.decide`)
and the timer arm retry's sleep through the core: tests and the simulation
pass a simulated clock, a checked `decide` and a simulated sleep as the
constructor's arguments (issue 45, item 5), no module attribute is patched.
Must not hold any entry point's parsing (the handler modules do).

`ServiceCore`'s arguments:

    settings: the environment's settings.
    policy: the room policy (timeouts in ms, limits).
    store: the rooms (`shared.ports.RoomStore`: shared/store.py's Firestore adapter, or a fake).
    timers: the rooms' timers (`shared.ports.Timers`: shared/tasks.py's Cloud Tasks adapter, or a fake).
    senders: provider name (or `provider:number`) -> platform client.
    events: where delivery events go.
    status_queue: builds the status-queue publisher on first use (queued
        webhook mode; the functions that never publish never build it).
    scheduled: holds messages with a later `deliver_at` (shared/scheduled.py),
        or None (such a message then enters its room at once).
    prepare_tasks: creates the prepare tasks (shared/prepare.py, or a fake
        with `request`); None: a `Prepare` effect fails like a timer that
        cannot be armed.
    preparers: provider name -> what prepares its messages (uploads media).
    sender_window: the WhatsApp numbers' per-second windows
        (shared/sender_window.py), None: not limited.
    incident: the incident switch (shared/admin/incident.py), None: never held.
    outcomes: the outcomes topic (shared/outcomes.py), None: OUTCOMES=off.
    inbound: the inbound topic (shared/service/inbound.py), None: not forwarded.
    The seams tests and the simulation give (production takes the defaults):
    clock: the time, epoch microseconds (`shared.clock.SYSTEM_CLOCK`).
    decide: the room's rules (`shared.room.decide`; tests pass a checked copy).
    sleep: the wait between a timer's or a prepare task's arm tries, seconds
        (`time.sleep`; the simulation passes one that takes simulated time).
    monotonic: the budgets' clock, seconds (`time.monotonic`: the sweep's
        SWEEP_BUDGET_S, the webhook's SENT_PROOF_POST_S).
    pool: builds the sweep's worker pool from a worker count
        (`ThreadPoolExecutor`; the simulation's runs them in its scheduler).

Send, then arm (`ServiceCore._run_effects`): a decision's send call goes
before its timer tasks are created: the hand-over (an ack's arrival -> the
next send) waits for no Cloud Tasks call. The room keeps a live wake-up
(DESIGN.md invariant 8): a send whose outcome cannot be recorded (503) still
gets its timer; an arm that fails after the send is what it was before (the
send was made anyway): 503, and the redelivery re-arms (`rearm_if_replay`,
same task name); a crash between the send and the arm is what one between
the commit and the arm was: the redelivery re-arms, else the watchdog's sweep
finds the room at its due time (fixed by the decision, never later for a
later arm) plus WATCHDOG_GRACE_MS; its ack, if it comes, ends it as usual. An
ack that beats the arm finds no task to delete (best effort): the task runs
once and is ignored (invariant 5).

A send provably not made (REFUSED: its number at its rate, the incident
switch, the start deadline passed, the platform's refusal) whose outcome a
committed write recorded arms no timer of its own: that write's decision
(PACED until the slot, BACKOFF, the end) arms the room's next wake-up, and
the attempt's timer would only fire to be ignored. `make scale-model` at the
users' burst (2026-11-28): 0.19 of 1.38 task creates a message were these
timers, one per send that waited for a slot of its number. A refusal whose
write fails raises, and the attempt's timer is armed as before.

Acceptance on the timer (issue 46): a WhatsApp send accepted at an ack
level other than `accepted` is recorded by no write of its own: the
attempt's timer, armed right after the send, carries its ack deadline
(`ScheduleTimer.accepted_deadline_us`), applied when it fires; the
attempt is not settled for the `sent` proof (a lost or late timer leaves
it to the watchdog, and the `sent` status's echo makes that a timeout).
Fault paths and what reads SENDING meanwhile: docs/architecture.md,
"Writes outside the transaction". A send whose decision arms no timer of
its attempt (none does: `shared.room.transition.start` arms, then sends)
falls back to the blind write (`RoomStore.record_accepted`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from google.api_core import exceptions as gexc
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from shared import outbox
from shared.clock import SYSTEM_CLOCK
from shared.config import Settings
from shared.counted import CountedSender
from shared.events import METRICS_LOG_TYPE, DeliveryEvent, EventLog, EventType, JsonLineWriter, utc_iso
from shared.opcounts import begin_request, invocation_counts
from shared.outcomes import OutcomePublisher, outcome_record
from shared.ports import Clock, PrepareTasks, RoomStore, ScheduledHolds, StatusPublisher, Timers
from shared.prepare import untag_media
from shared.providers import Sender, SendOutcome, SendResult
from shared.providers.base import Media, Preparer
from shared.providers.registry import records_acceptance_blind
from shared.room import (
    CancelTimer,
    Decision,
    Policy,
    Prepare,
    RoomEvent,
    RoomState,
    ScheduleTimer,
    Send,
    SendReturned,
    ack_deadline_us,
    decided_without_room,
)
from shared.room import decide as room_decide
from shared.room_document import room_doc_bytes
from shared.sender_window import SenderWindow
from shared.service.sent_proofs import SentProofRecord
from shared.status_queue import StatusPublishFailed
from shared.store import ContentionError

if TYPE_CHECKING:
    from shared.admin.incident import IncidentSwitch
    from shared.service.inbound import InboundPublisher

# Pub/Sub adds this attribute to a message it forwards to a dead-letter topic
# (https://cloud.google.com/pubsub/docs/handling-failures#track-delivery-attempts).
DEAD_LETTER_COUNT_ATTRIBUTE = "CloudPubSubDeadLetterSourceDeliveryCount"

# The rules: a room's state, an event, the policy and the component -> the decision (shared/room).
DecideFn = Callable[[RoomState, RoomEvent, Policy, str], Decision]


class WorkerPool(Protocol):
    """The sweep's worker pool (`concurrent.futures.ThreadPoolExecutor`'s shape)."""

    def map(self, fn: Callable[[Any], Any], items: Any, /) -> Iterator[Any]:
        ...

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        ...


def now_us() -> int:
    """Wall-clock time, epoch microseconds (the system clock: what runs
    outside a service, `start_request`; a service reads `ServiceCore.now_us`)."""
    return SYSTEM_CLOCK.now_us()

class TimerArmFailed(RuntimeError):
    """Cloud Tasks refused a timer after the room's commit: the request must be
    retried by its caller (its redelivery re-arms the timer)."""

# Failures that mean "try again later": Firestore or Cloud Tasks unreachable or
# overloaded, a room that kept changing under the request, a timer that could
# not be armed, a status Pub/Sub did not take. The entry points answer 503 and
# the caller's redelivery (Pub/Sub, Meta, Cloud Tasks, Cloud Scheduler) retries.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    gexc.GoogleAPICallError, gexc.RetryError, ContentionError, TimerArmFailed, StatusPublishFailed, ConnectionError,
    TimeoutError)

@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status code and a short JSON-able body."""

    status: int
    body: dict[str, Any]

_arm_retry = retry(retry=retry_if_exception_type((gexc.GoogleAPICallError, gexc.RetryError)),
                   stop=stop_after_attempt(3), wait=wait_exponential(multiplier=0.05, max=0.4), reraise=True)


class ServiceCore:
    """What every handler shares: apply an event to a room, then run what it
    decided (log the events, arm timers, send, follow the send's outcome).

    Args: the module docstring's list.
    """

    def __init__(self, settings: Settings, policy: Policy, store: RoomStore, timers: Timers,
                 senders: dict[str, Sender], events: EventLog,
                 status_queue: Callable[[], StatusPublisher] | None = None, scheduled: ScheduledHolds | None = None,
                 prepare_tasks: PrepareTasks | None = None, preparers: dict[str, Preparer] | None = None,
                 sender_window: SenderWindow | None = None, incident: IncidentSwitch | None = None,
                 outcomes: OutcomePublisher | None = None, inbound: InboundPublisher | None = None, *,
                 clock: Clock = SYSTEM_CLOCK, decide: DecideFn = room_decide,
                 sleep: Callable[[float], None] = time.sleep, monotonic: Callable[[], float] = time.monotonic,
                 pool: Callable[[int], WorkerPool] = ThreadPoolExecutor) -> None:
        self.clock = clock
        self.decide = decide
        self.sleep = sleep
        self.monotonic = monotonic
        self.pool = pool
        self.outcomes = outcomes  # the outcomes topic (shared/outcomes.py), None: OUTCOMES=off
        self.inbound = inbound  # the inbound topic (shared/service/inbound.py), None: not forwarded
        self.incident = incident  # the incident switch (shared/admin/incident.py), None: never held
        self.scheduled = scheduled
        self.sender_window = sender_window
        # The attempts this instance knows need no `sent` proof (webhook.py).
        self.sent_proofs = SentProofRecord()
        specs = settings.whatsapp_sender_specs
        # With one number every message is its (`sender` None): no mapping kept.
        self.sender_ids = tuple(spec.phone_number_id for spec in specs) if len(specs) > 1 else ()
        self.sender_rates = {spec.phone_number_id: spec.rate_per_s for spec in specs}  # parsed once, not per send
        self.prepare_tasks = prepare_tasks
        self.preparers = preparers or {}
        self._status_queue_factory = status_queue
        self._status_queue: StatusPublisher | None = None
        self.settings = settings
        # The room's stored size, measured by the store adapter (MAX_ROOM_BYTES; shared/room_document.py).
        self.policy = policy if policy.room_bytes is not None else replace(policy, room_bytes=room_doc_bytes)
        self.store = store
        self.timers = timers
        self.senders = senders
        self.events = events
        store.outbox_sink = outbox.sink_of(events)  # shared/outbox.py: what an earlier write left, logged before a commit
        self._metrics = JsonLineWriter(settings.metrics_log_path, stdout=False) if settings.metrics_log_path else None

    def now_us(self) -> int:
        """Now, epoch microseconds, by the service's clock."""
        return self.clock.now_us()

    def arm_retry(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` retried as a timer arm is (`_arm_retry`), waiting with `sleep`."""
        retrying = _arm_retry(fn)
        return retrying if self.sleep is time.sleep else retrying.retry_with(sleep=self.sleep)

    def status_queue(self) -> StatusPublisher:
        """The status-queue publisher, built on first use.

        Raises:
            RuntimeError: the service was built without one.
        """
        if self._status_queue is None:
            if self._status_queue_factory is None:
                raise RuntimeError("no status queue configured (WEBHOOK_MODE=queued needs one)")
            self._status_queue = self._status_queue_factory()
        return self._status_queue

    def apply(self, room_id: str, event: RoomEvent, component: str) -> Decision:
        """Apply one event to a room and run what it decided. Raises what the
        store raises, and `TimerArmFailed` after running every other effect."""
        decision = self.store.apply(room_id, lambda s: self.decide(s, event, self.policy, component))
        self._after_commit(room_id, decision, component)
        return decision

    def apply_without_state(self, room_id: str, event: RoomEvent, component: str) -> Decision:
        """Decide an event that changes no room (a platform's `sent` status:
        its row in every phase leaves the room as it is, `WITHOUT_ROOM`)
        against an empty `RoomState`, with no transaction, then log and run
        what it decided as after a commit. Raises what `_after_commit`
        raises, and `ValueError` for an event of another kind."""
        if not decided_without_room(event):
            raise ValueError(f"{event!r} depends on its room's state: apply it in a transaction")
        decision = self.decide(RoomState(room_id), event, self.policy, component)
        self._after_commit(room_id, decision, component)
        return decision

    def _after_commit(self, room_id: str, decision: Decision, component: str) -> None:
        """Log a committed decision's events and run its effects, following
        send outcomes into further room transactions. A decision's send goes
        before its timers are armed (`_run_effects`); preparation requests
        and timer cancellations run after every send. Raises `TimerArmFailed`
        at the end if a timer could not be armed."""
        work: deque[Decision] = deque([decision])
        arm_failures: list[str] = []
        cancels: list[CancelTimer] = []
        prepares: list[Prepare] = []
        ended: list[dict[str, Any]] = []  # the outcomes these committed decisions produced
        unarmed: set[tuple[int, int, int, int]] = set()  # timers not armed for a refused send (`_run_effects`)
        try:
            while work:
                d = work.popleft()
                for ev in d.events:
                    self.events.emit(ev)
                    if self.outcomes is not None and (record := outcome_record(ev)) is not None:
                        ended.append(record)
                outbox.logged(room_id, d.events)  # shared/outbox.py: a later write of this request may clear them
                cancels += [e for e in d.effects if isinstance(e, CancelTimer)]  # last: no send waits for them
                prepares += [e for e in d.effects if isinstance(e, Prepare)]  # after the sends: likewise
                work.extend(self._run_effects(room_id, d, component, arm_failures, unarmed))
            for prepare in prepares:
                self._request_preparation(room_id, prepare, component, arm_failures)
            for cancel in (c for c in cancels if (c.incarnation, c.seq, c.attempt, c.due_at_us) not in unarmed):
                self.timers.cancel(cancel)  # a timer never armed is not deleted (a DeleteTask answered NOT_FOUND)
        finally:  # a later step that raises (a send's outcome not recorded) keeps the committed ends
            if ended and self.outcomes is not None:
                self.outcomes.publish(ended)  # after the sends: never holds the room, never raises
        if arm_failures:
            raise TimerArmFailed("; ".join(arm_failures))

    def _run_effects(self, room_id: str, decision: Decision, component: str, arm_failures: list[str],
                     unarmed: set[tuple[int, int, int, int]]) -> list[Decision]:
        """Send, then arm (module docstring), carrying an acceptance seen; a
        refused send's timer goes to `unarmed` ((incarnation, seq, attempt,
        due us)) instead. Returns the decisions the sends' outcomes committed."""
        timed = {(e.incarnation, e.seq, e.attempt) for e in decision.effects if isinstance(e, ScheduleTimer)}
        accepted: dict[tuple[int, int, int], int] = {}  # (incarnation, seq, attempt) -> ack deadline, epoch us
        not_sent: set[tuple[int, int, int]] = set()  # refused, and recorded: no timer (the module docstring)
        try:
            follow_ups = [f for e in decision.effects if isinstance(e, Send)
                          and (f := self._send(room_id, e, component, timed, accepted, not_sent)) is not None]
        except Exception:  # the send's outcome not recorded (503): its timer is armed all the same
            self._arm_all(room_id, decision, component, arm_failures, accepted)
            raise
        self._arm_all(room_id, decision, component, arm_failures, accepted, not_sent)
        unarmed.update((e.incarnation, e.seq, e.attempt, e.due_at_us) for e in decision.effects
                       if isinstance(e, ScheduleTimer) and (e.incarnation, e.seq, e.attempt) in not_sent)
        return follow_ups

    def _request_preparation(self, room_id: str, prepare: Prepare, component: str, arm_failures: list[str]) -> None:
        """Create a prepare task. A failure is logged and, like a timer that
        cannot be armed, makes the request answer 503 so its redelivery asks
        again; the head's PREPARE_TIMEOUT_MS backs that up."""
        try:
            if self.prepare_tasks is None:
                raise RuntimeError("no prepare task queue configured")
            self.arm_retry(self.prepare_tasks.request)(prepare)
        except (gexc.GoogleAPICallError, gexc.RetryError, RuntimeError) as exc:
            arm_failures.append(f"prepare task: {type(exc).__name__}: {exc}"[:200])
            self.events.emit(DeliveryEvent(EventType.PREPARE_REQUEST_FAILED, utc_iso(self.now_us()), component, room_id,
                                           seq=prepare.seq, attempt=prepare.attempt, reason=str(exc)[:200]))

    def _arm_all(self, room_id: str, decision: Decision, component: str, arm_failures: list[str],
                 accepted: dict[tuple[int, int, int], int], not_sent: Set[tuple[int, int, int]] = frozenset()) -> None:
        """Create a decision's timer tasks (each retried, `arm_retry`) but
        those of `not_sent` (`_send`), each of an attempt in `accepted`
        carrying its ack deadline (epoch us). A failure is logged and added
        to `arm_failures` (the request answers 503)."""
        for timer in (e for e in decision.effects if isinstance(e, ScheduleTimer)
                      and (e.incarnation, e.seq, e.attempt) not in not_sent):
            if (deadline := accepted.get((timer.incarnation, timer.seq, timer.attempt))) is not None:
                timer = replace(timer, accepted_deadline_us=deadline)
            # An attempt whose acceptance rides on its timer is not settled for the `sent` proof: a timer
            # lost or later than WATCHDOG_GRACE_MS leaves the attempt to the watchdog as `sending`, and
            # only the `sent` status's echo then times it out rather than resending it (`make chaos`:
            # 188 duplicates in 10,188 sends with the attempt settled here, Cloud Tasks outages losing tasks).
            try:
                self.arm_retry(self.timers.schedule)(timer)
            except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
                if deadline is not None:
                    accept_blind(self.store, room_id, timer, deadline)
                arm_failures.append(f"{type(exc).__name__}: {exc}"[:200])
                self.events.emit(DeliveryEvent(EventType.TIMER_ARM_FAILED, utc_iso(self.now_us()), component,
                                               room_id, seq=timer.seq, attempt=timer.attempt, reason=str(exc)[:200]))

    def _send(self, room_id: str, send: Send, component: str, timed: set[tuple[int, int, int]],
              accepted: dict[tuple[int, int, int], int], not_sent: set[tuple[int, int, int]]) -> Decision | None:
        """Make the call of `send` (or refuse it) and record its outcome: in
        a transaction (the decision returned), or (WhatsApp, accepted) in
        `accepted` ((incarnation, seq, attempt) -> ack deadline, epoch us)
        for its timer to carry if the attempt is in `timed`, else blind
        (`RoomStore.record_accepted`). A REFUSED send whose outcome a write
        recorded adds its attempt to `not_sent` (no timer: module docstring)."""
        attempt = (send.incarnation, send.message.seq, send.attempt)
        msg = send.message
        assert msg.text is not None, "a parked placeholder is never sent"
        started = self.now_us()
        if started > send.start_by_us:
            # Too late to start: the room's send window assumes no call starts
            # after this. Provably not sent, so a retry is safe.
            result = SendResult(SendOutcome.REFUSED, error_title="send not started within SEND_START_DEADLINE_MS")
        elif (busy := (self.incident and self.incident.hold_until(started))
                or sender_slot(self.sender_window, self.sender_rates, send.number, started)) is not None:
            # The incident switch is on, or its number is at its rate: no call; the room waits.
            return _note_refused(attempt, not_sent, self.store.apply(room_id, lambda s: self.decide(s, SendReturned(
                send.incarnation, msg.seq, send.attempt, SendOutcome.REFUSED, started, send.cause,
                sender_busy_until_us=busy), self.policy, component)))
        else:
            sender = self.senders.get(f"{msg.provider}:{send.number}") or self.senders[msg.provider]
            # Prepared: by the platform's media id; else by link (the platform fetches it). A media id is
            # the uploading number's only: one uploaded with another number than the one it goes out from
            # (WHATSAPP_SENDERS changed since) goes by link (simulation, seeds 22 and 130).
            uploader, media_id = untag_media(msg.prepared) if msg.prepared else (None, None)
            uploader = uploader or msg.sender  # kept before the number was recorded: its own sender's
            prepared = media_id if uploader is None or uploader == send.number else None
            media = None if msg.media_kind is None else \
                Media(msg.media_kind, media_id=prepared, link=None if prepared else msg.media_link)
            # A kind beyond text and media (a template, ...) carries its `data` (shared/contract).
            kind: dict[str, Any] = {"payload": msg.payload} if msg.payload is not None else {}
            if media is not None:
                kind["media"] = media
            # Checked again after the slot take (Firestore reads and a write,
            # with retries): no I/O between this check and the call (DESIGN.md,
            # invariant 11). Every SENDING rule assumes a call starts by
            # `start_by_us`; past it, the room's rules decide as for any
            # refused send (provably not sent: the slot is simply unused).
            started = self.now_us()
            if started > send.start_by_us:
                result = SendResult(SendOutcome.REFUSED,
                                    error_title="send not started within SEND_START_DEADLINE_MS (after its slot take)")
            else:
                result = CountedSender(sender).send(msg.recipient, msg.text, send.delivery_id, **kind)
        returned = self.now_us()
        self.events.emit(send_event(room_id, send, result, started, component))
        if result.outcome is SendOutcome.ACCEPTED and records_acceptance_blind(msg.provider) \
                and self.policy.ack_level(msg.provider) != "accepted":
            # No transaction (WhatsApp, Acceptance.BLIND_WRITE): the module docstring's "Acceptance on the
            # timer". (Messenger and Instagram record the platform's message id in a transaction.)
            if attempt in timed:
                accepted[attempt] = ack_deadline_us(self.policy, returned)  # not settled: see `_arm_all`
                return None
            self.store.record_accepted(room_id, send.incarnation, msg.seq, send.attempt,
                                       ack_deadline_us(self.policy, returned))
            # Recorded as accepted: its `sent` status proves nothing more (no read for it here).
            self.sent_proofs.settle((room_id, *attempt))
            return None
        returned_event = SendReturned(send.incarnation, msg.seq, send.attempt, result.outcome,
                                      returned, send.cause, result.permanent, result.rate_limited,
                                      result.error_code, result.error_title, result.provider_message_id)
        recorded = self.store.apply(room_id, lambda s: self.decide(s, returned_event, self.policy, component))
        return _note_refused(attempt, not_sent, recorded) if result.outcome is SendOutcome.REFUSED else recorded

    def record_invocation(self, function: str, started_us: int, status: int) -> None:
        """Append this request's operation counts to METRICS_LOG_PATH (if set):
        the benchmark's and the cost estimate's source."""
        if self._metrics is None:
            return
        self._metrics.write({
            "log_type": METRICS_LOG_TYPE, "function": function, "ts": utc_iso(started_us),
            "duration_ms": (self.now_us() - started_us) / 1000, "http_status": status, **invocation_counts()})


def accept_blind(store: RoomStore, room_id: str, timer: ScheduleTimer, deadline_us: int) -> None:
    """The timer that was to carry an accepted send's acceptance (ack
    deadline `deadline_us`, epoch us) could not be armed (the request
    answers 503; its redelivery re-arms the timer without it): write the
    acceptance into the room instead (the blind write,
    `RoomStore.record_accepted`), so that the watchdog, which then wakes the
    attempt, times it out rather than resending a message the platform took
    (`make chaos`, direct, 2026-11-28: 56 of 98 duplicates followed a failed
    arm). A failure of this write too leaves the attempt to the `sent`
    proof's echo (`awaits_platform_proof`)."""
    try:
        store.record_accepted(room_id, timer.incarnation, timer.seq, timer.attempt, deadline_us)
    except (gexc.GoogleAPICallError, gexc.RetryError):
        pass


def _note_refused(attempt: tuple[int, int, int], not_sent: set[tuple[int, int, int]], recorded: Decision) -> Decision:
    """`recorded`, the decision on a REFUSED send (provably not made); if it
    wrote the room, `attempt` joins `not_sent`: that write's decision arms
    the room's next wake-up (PACED, BACKOFF, an end), so the attempt's own
    timer is not armed (the module docstring). A decision that wrote
    nothing (the attempt was stale) leaves the attempt's timer armed."""
    if recorded.state is not None:
        not_sent.add(attempt)
    return recorded


def sender_slot(window: SenderWindow | None, rates: Mapping[str, int], number: str | None, now: int) -> int | None:
    """None when a send from WhatsApp number `number` may go now (a slot of
    its per-second window taken; no window kept, or not WhatsApp: `number`
    None), else when (epoch us) to try again. `rates`: number -> its rate
    (messages/s). Raises what Firestore raises (the request answers 503)."""
    if window is None or number is None:
        return None
    taken = window.take(number, rates.get(number, 0), now)
    return None if taken is None else taken.ready_at_us


def start_request() -> int:
    """Reset the per-request operation counters; returns the start time (epoch us)."""
    begin_request()
    return now_us()


def send_event(room_id: str, send: Send, result: SendResult, started: int, component: str) -> DeliveryEvent:
    """The log line of a send call that started at `started` (epoch us):
    `sent`, `send_unknown` or `send_failed` (with the failure's kind)."""
    msg = send.message
    common: dict[str, Any] = dict(seq=msg.seq, attempt=send.attempt, message_id=msg.message_id,
                                  provider=msg.provider, delivery_id=send.delivery_id, trigger=str(send.trigger))
    if result.outcome is SendOutcome.ACCEPTED:
        return DeliveryEvent(EventType.SENT, utc_iso(started), component, room_id,
                             provider_message_id=result.provider_message_id,
                             published_at=utc_iso(msg.published_at_us),
                             publish_to_send_ms=(started - msg.published_at_us) / 1000,
                             trigger_to_send_ms=(started - send.trigger_at_us) / 1000, **common)
    if result.outcome is SendOutcome.UNKNOWN:
        return DeliveryEvent(EventType.SEND_UNKNOWN, utc_iso(started), component, room_id,
                             error_code=result.error_code, error_title=result.error_title,
                             reason="possibly sent: held until its ack deadline, then resent", **common)
    failure = "permanent" if result.permanent else "rate_limited" if result.rate_limited else "transient"
    return DeliveryEvent(EventType.SEND_FAILED, utc_iso(started), component, room_id,
                         error_code=result.error_code, error_title=result.error_title, reason=failure, **common)
