"""The request handlers, between the entry points and the room's rules.

Each handler parses its request, runs the room's optimistic transaction
(shared/store.py calling shared/room.py's `decide`), then, after the commit,
logs the events and runs the effects in order: arm the timer first, then send,
so a send that dies half-way is still covered by a timer. A send's outcome
(accepted, refused, unknown) goes back into the room as a `SendReturned`
event, which may start the next message; the loop follows it.

Failures, and what the room does:
- Firestore unreachable or a room contended past the retry budget: the handler
  raises, the entry point answers 503, the caller (Pub/Sub, Meta, Cloud Tasks,
  Cloud Scheduler) retries; nothing was committed, or the commit stands and
  the retry is a recognised duplicate.
- A timer that cannot be armed (after a few quick tries): logged as
  `timer_arm_failed`, the send still goes out (the room's stored `wake_at_us`
  lets the watchdog find it), and the request answers 503 so its redelivery
  re-arms the timer (`rearm_if_replay`).
- A crash between any two steps: the committed state stands; its timer, a
  redelivery or the watchdog wakes the room (shared/room.py, "Wake-ups").

Handlers return a `Reply` (HTTP status, JSON body); the entry points only
translate it.
"""

from __future__ import annotations

import base64
import binascii
import contextvars
import json
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from typing import Any

from google.api_core import exceptions as gexc
from tenacity import retry, retry_if_exception_type, stop_after_attempt, wait_exponential

from shared.config import Settings
from shared.events import METRICS_LOG_TYPE, DeliveryEvent, EventLog, EventType, JsonLineWriter, utc_iso
from shared.providers import Sender, SendOutcome, SendResult
from shared.providers.base import Media, Preparer
from shared.providers.meta_messaging import WEBHOOK_OBJECTS, MessagingItem, parse_messaging
from shared.providers.whatsapp import handshake_challenge, parse_statuses, signature_valid
from shared.push import ROOM_ID, Rejected, parse_push
from shared.room import (
    CancelTimer,
    Decision,
    Effect,
    Park,
    Policy,
    Prepare,
    Prepared,
    PrepareFailed,
    RecipientReceipt,
    Redrive,
    RoomEvent,
    RoomState,
    ScheduleTimer,
    Send,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
    ack_deadline_us,
    decide,
    parse_delivery_id,
    recipient_key,
)
from shared.room import SendOutcome as RoomSendOutcome
from shared.scheduled import ENTER_AT_ONCE_MS
from shared.status_queue import (
    KIND_RECIPIENT_RECEIPTS,
    KIND_ROOM_STATUSES,
    QueuedStatus,
    RecipientReceipts,
    RoomStatuses,
    StatusPublishFailed,
    StatusQueue,
    Unroutable,
)
from shared.store import ContentionError, RoomStore, begin_request, op_counts
from shared.tasks import TimerScheduler

# Pub/Sub adds this attribute to a message it forwards to a dead-letter topic
# (https://cloud.google.com/pubsub/docs/handling-failures#track-delivery-attempts).
DEAD_LETTER_COUNT_ATTRIBUTE = "CloudPubSubDeadLetterSourceDeliveryCount"


def now_us() -> int:
    """Wall-clock time, epoch microseconds."""
    return time.time_ns() // 1000


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


class DeliveryService:
    """Handles pushes, dead-letter pushes, status webhooks, timers, watchdog
    sweeps and operator actions for every room.

    Args:
        settings: the environment's settings.
        policy: the room policy (timeouts in ms, limits).
        store: the Firestore adapter (or a fake with the same methods).
        timers: the Cloud Tasks adapter (or a fake with `schedule`).
        senders: provider name -> platform client.
        events: where delivery events go.
        status_queue: builds the status-queue publisher on first use (queued
            webhook mode; the functions that never publish never build it).
        scheduled: holds messages with a later `deliver_at` (shared/scheduled.py),
            or None (such a message then enters its room at once).
        prepare_tasks: creates the prepare tasks (shared/prepare.py, or a fake
            with `request`); None: a `Prepare` effect fails like a timer that
            cannot be armed.
        preparers: provider name -> what prepares its messages (uploads media).
    """

    def __init__(self, settings: Settings, policy: Policy, store: RoomStore, timers: TimerScheduler,
                 senders: dict[str, Sender], events: EventLog,
                 status_queue: Callable[[], StatusQueue] | None = None, scheduled: Any = None,
                 prepare_tasks: Any = None, preparers: dict[str, Preparer] | None = None) -> None:
        self.scheduled = scheduled
        self.prepare_tasks = prepare_tasks
        self.preparers = preparers or {}
        self._status_queue_factory = status_queue
        self._status_queue: StatusQueue | None = None
        self.settings = settings
        self.policy = policy
        self.store = store
        self.timers = timers
        self.senders = senders
        self.events = events
        self._metrics = JsonLineWriter(settings.metrics_log_path, stdout=False) if settings.metrics_log_path else None

    def status_queue(self) -> StatusQueue:
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
        decision = self.store.apply(room_id, lambda s: decide(s, event, self.policy, component))
        self._after_commit(room_id, decision, component)
        return decision

    # ------------------------------------------------------------ enqueue

    def handle_push(self, body: bytes, scheduled_entry: bool = False) -> Reply:
        """A Pub/Sub push, or (`scheduled_entry`) a scheduled message's task
        bringing the same envelope back at its time. 2xx acks it; 503 (room
        full) makes Pub/Sub (or Cloud Tasks) deliver it again later; the room
        remembers it at its place meanwhile. A message due later than
        ENTER_AT_ONCE_MS from now waits as a task (`scheduled`); one whose
        scheduled time has come enters unless an operator cancelled it."""
        arrived = now_us()
        parsed = parse_push(body, arrived, self.settings.enabled_providers)
        if isinstance(parsed, Rejected):
            self._keep_rejected(parsed, arrived, "enqueue")
            return Reply(200, {"result": "rejected", "reason": parsed.reason})
        e = parsed.event
        due = parsed.deliver_at_us
        if due is not None and self.scheduled is not None:
            if due > arrived + ENTER_AT_ONCE_MS * 1000:
                hop = self.scheduled.hold(e.message_id, body, due, arrived)
                self.events.emit(DeliveryEvent(EventType.SCHEDULED, utc_iso(arrived), "enqueue", parsed.room_id,
                                               message_id=e.message_id, provider=e.provider,
                                               reason=f"enters its room at {utc_iso(due)}"
                                                      + (f" (next hop {utc_iso(hop)})" if hop < due else "")))
                return Reply(200, {"result": "scheduled", "deliver_at": utc_iso(due)})
            if scheduled_entry:
                cancel = self.store.scheduled_cancelled(e.message_id)
                if cancel is not None:
                    # Ends unsent, as an operator's skip does.
                    self.events.emit(DeliveryEvent(EventType.SKIPPED, utc_iso(arrived), "enqueue", parsed.room_id,
                                                   message_id=e.message_id, provider=e.provider,
                                                   actor=cancel.get("actor"),
                                                   reason=f"scheduled message cancelled before its time: "
                                                          f"{cancel.get('reason')}"[:300]))
                    return Reply(200, {"result": "cancelled"})
        decision = self.apply(parsed.room_id, parsed.event, "enqueue")
        if decision.refused:
            return Reply(503, {"result": "backpressure", "reason": decision.refused})
        return Reply(200, {"result": "ok"})

    def handle_dead_letter(self, body: bytes) -> Reply:
        """A push from the dead-letter topic: the message is parked at its place
        in its room, which blocks there until an operator acts."""
        arrived = now_us()
        parsed = parse_push(body, arrived, self.settings.enabled_providers)
        if isinstance(parsed, Rejected):
            self._keep_rejected(parsed, arrived, "deadletter")
            return Reply(200, {"result": "rejected", "reason": parsed.reason})
        attrs = (json.loads(body).get("message") or {}).get("attributes") or {}
        attempts = attrs.get(DEAD_LETTER_COUNT_ATTRIBUTE, "?")
        e = parsed.event
        park = Park(e.message_id, e.provider, e.recipient, e.text, e.published_at_us, arrived,
                    f"dead-lettered by Pub/Sub after {attempts} delivery attempts", media_kind=e.media_kind,
                    media_link=e.media_link, prepare=e.prepare, sequence=e.sequence)
        self.apply(parsed.room_id, park, "deadletter")
        return Reply(200, {"result": "parked"})

    def _keep_rejected(self, rejected: Rejected, arrived: int, component: str) -> None:
        self.store.keep_rejected(rejected.key, rejected.reason, rejected.record)
        self.events.emit(DeliveryEvent(EventType.REJECTED, utc_iso(arrived), component, rejected.room_id,
                                       message_id=rejected.message_id, reason=rejected.reason))

    # ------------------------------------------------------------ webhook

    def handle_handshake(self, args: dict[str, str]) -> Reply:
        """Meta's GET verification of the webhook URL."""
        challenge = handshake_challenge(args, self.settings.whatsapp_verify_token)
        if challenge is None:
            return Reply(403, {"error": "verify token mismatch"})
        return Reply(200, {"challenge": challenge})

    def handle_status_webhook(self, raw: bytes, signature: str | None) -> Reply:
        """A signed status webhook: 401 on a bad signature (nothing changes),
        400 on a body of the wrong shape. Then, by WEBHOOK_MODE: `queued`
        publishes the statuses to the status queue and answers 200 without
        touching Firestore (`StatusPublishFailed` if Pub/Sub does not take
        them: the entry point answers 503); `direct` applies every status
        here (raises what the store raises, after applying the other rooms')."""
        arrived = now_us()
        app = self._signing_app(raw, signature)
        if app is None:
            return Reply(401, {"error": "bad or missing X-Hub-Signature-256"})
        try:
            payload = json.loads(raw)
            # No `object` at all: read it as the signing app's own format (its parser then judges it).
            provider = (WEBHOOK_OBJECTS.get(payload.get("object"), None if "object" in payload else app)
                        if isinstance(payload, dict) else None)
            if provider != app:
                raise ValueError(f"`object` {payload.get('object') if isinstance(payload, dict) else None!r} is not "
                                 f"a webhook of the {app} app that signed it")
            if provider != "whatsapp":
                return self._apply_receipts(parse_messaging(payload), arrived)
            statuses = parse_statuses(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            return Reply(400, {"error": f"not a status webhook: {exc}"})
        queued = [QueuedStatus(st.callback_data or "", st.status, "whatsapp", st.provider_message_id, st.error_code,
                               st.error_title) for st in statuses]
        if self.settings.webhook_mode == "queued":
            return self._queue_statuses(queued, arrived)
        applied = self._apply_statuses(queued, None, arrived, "webhook")
        return Reply(200, {"statuses": len(statuses), "applied": applied})

    def _signing_app(self, raw: bytes, signature: str | None) -> str | None:
        """The provider whose app secret signed `raw` (X-Hub-Signature-256), or
        None. Each Meta app has its own secret; one webhook URL serves all."""
        secrets = {"whatsapp": self.settings.whatsapp_app_secret, "messenger": self.settings.messenger_app_secret,
                   "instagram": self.settings.instagram_app_secret}
        for provider, secret in secrets.items():
            if provider in self.settings.enabled_providers and secret and signature_valid(raw, signature, secret):
                return provider
        return None

    def _apply_receipts(self, items: list[MessagingItem], arrived: int) -> Reply:
        """Messenger and Instagram webhooks: echoes of our own sends and
        messages people wrote are logged and ignored; each receipt goes to the
        rooms whose in-flight message is for its recipient. `direct` applies
        them here; `queued` publishes one status-queue message per recipient
        (ordering key `recipient:{provider}:{id}`) for the `status` function."""
        receipts: list[RecipientReceipt] = []
        for item in items:
            if item.kind not in ("delivery", "read"):
                self.events.emit(DeliveryEvent(EventType.STATUS_IGNORED, utc_iso(arrived), "webhook", None,
                                               provider=item.provider, reason=f"{item.kind}_webhook",
                                               provider_message_id=item.mids[0] if item.mids else None))
                continue
            receipts.append(RecipientReceipt(item.provider, item.user_id,
                                             "delivered" if item.kind == "delivery" else "read",
                                             None if item.watermark_ms is None else item.watermark_ms * 1000,
                                             item.mids, arrived))
        if self.settings.webhook_mode == "queued":
            by_key: dict[str, list[RecipientReceipt]] = {}
            for r in receipts:
                by_key.setdefault(recipient_key(r.provider, r.recipient), []).append(r)
            if by_key:
                self.status_queue().publish([], [], [RecipientReceipts.of(k, arrived, rs) for k, rs in by_key.items()])
            return Reply(200, {"receipts": len(items), "queued": len(receipts)})
        applied = self._apply_receipt_events(receipts, "webhook")
        return Reply(200, {"receipts": len(items), "applied": applied})

    def _apply_receipt_events(self, receipts: list[RecipientReceipt], component: str) -> int:
        """Apply each receipt to the rooms sending to its recipient
        (`RoomStore.rooms_sending_to`); returns how many room events were
        applied. Raises what the store raises, after trying every receipt (a
        redelivery repeats the applied ones, which then change nothing)."""
        applied, failures = 0, []
        for receipt in receipts:
            rooms = self.store.rooms_sending_to(recipient_key(receipt.provider, receipt.recipient))
            if not rooms:
                self.events.emit(DeliveryEvent(EventType.STATUS_UNKNOWN, utc_iso(receipt.at_us), component, None,
                                               provider=receipt.provider, status=receipt.status,
                                               reason="no room has a message in flight to this recipient"))
            for room_id in rooms:
                try:
                    self.apply(room_id, receipt, component)
                    applied += 1
                except (gexc.GoogleAPICallError, gexc.RetryError, TimerArmFailed, RuntimeError) as exc:
                    failures.append(exc)
        if failures:
            raise failures[0]
        return applied

    def _queue_statuses(self, statuses: list[QueuedStatus], arrived: int) -> Reply:
        """Queued mode: one status-queue message per room, in payload order;
        statuses without a room go to the error queue with their reason."""
        by_room: dict[str, list[QueuedStatus]] = {}
        unroutable: list[Unroutable] = []
        logged_only = 0
        for st in statuses:
            routed = self._route(st, arrived, "webhook")
            if routed is None:
                unroutable.append(Unroutable("no baton delivery id", {"received_at_us": arrived, **asdict(st)}))
                continue
            room_id, event = routed
            if event.status == "sent":
                # Changes nothing in the room (decide answers it without the
                # room's state): logged here, not queued.
                self._after_commit(room_id, decide(RoomState(room_id), event, self.policy, "webhook"), "webhook")
                logged_only += 1
                continue
            by_room.setdefault(room_id, []).append(st)
        batches = [RoomStatuses(room, arrived, tuple(sts)) for room, sts in by_room.items()]
        if batches or unroutable:
            self.status_queue().publish(batches, unroutable)
        return Reply(200, {"statuses": len(statuses), "queued": sum(len(b.statuses) for b in batches),
                           "rooms": len(batches), "logged": logged_only, "unroutable": len(unroutable)})

    def handle_status_push(self, body: bytes) -> Reply:
        """A status-queue message, pushed by the ordered subscription of
        STATUS_TOPIC: applies its statuses to their room. 200 acks it.

        - A transient failure (TRANSIENT_ERRORS) raises: 503, Pub/Sub
          redelivers with backoff, for as long as it takes.
        - Any other exception (a bug, a document the code cannot read) is
          counted per Pub/Sub message id and raised (500, redelivered with
          backoff) until it has failed STATUS_MAX_ATTEMPTS times; then the
          message goes to the error queue with the error as its reason, a
          `status_dead_lettered` event is logged and the push is acked, so
          the room's later statuses are not held behind it. Replayed after a
          fix (`baton statuses replay`), each status applies once.
        - A message that can never be applied (it does not parse) goes to
          the error queue at once with its reason, and is acked.
        """
        arrived = now_us()
        try:
            envelope = json.loads(body)
            message = envelope["message"]
            attributes = message.get("attributes") or {}
            data = base64.b64decode(message.get("data") or "", validate=True)
            if attributes.get("kind") == KIND_RECIPIENT_RECEIPTS:
                receipts = RecipientReceipts.decode(data)
                batch = RoomStatuses(receipts.recipient_key, receipts.received_at_us, ())
            else:
                receipts = None
                batch = RoomStatuses.decode(data)
            if receipts is None and attributes.get("room_id", batch.room_id) != batch.room_id:
                raise ValueError("`room_id` attribute and data disagree")
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error, UnicodeDecodeError) as exc:
            reason = f"not a status-queue message: {type(exc).__name__}: {exc}"[:300]
            record = {"received_at_us": arrived, "body": body.decode("utf-8", "replace")[:20_000]}
            self.status_queue().publish([], [Unroutable(reason, record)])
            print(json.dumps({"severity": "ERROR", "message": f"status: kept in the error queue: {reason}"}), flush=True)
            return Reply(200, {"result": "kept", "error": reason})
        try:
            if receipts is not None:
                # Decided now, not at the receive time: the room's next send is
                # due within SEND_START_DEADLINE_MS of its decision.
                decided = now_us()
                applied = self._apply_receipt_events(
                    [replace(r, at_us=decided, received_at_us=r.at_us) for r in receipts.events()], "status")
            else:
                applied = self._apply_statuses(list(batch.statuses), batch.room_id, batch.received_at_us, "status")
        except TRANSIENT_ERRORS:
            raise  # 503: retried with backoff for as long as it takes, never dead-lettered by us
        except Exception as exc:  # noqa: BLE001 - a bug or data the code cannot handle: counted, then moved aside
            reason = f"{type(exc).__name__}: {exc}"[:500]
            pubsub_id = str(message.get("messageId") or message.get("message_id") or "")
            failures = self.status_queue().record_failure(pubsub_id, batch.room_id, reason)
            print(json.dumps({"severity": "ERROR", "message": f"status: room {batch.room_id}: delivery {failures} of "
                                                              f"message {pubsub_id} failed: {reason}"}), flush=True)
            if failures < self.settings.status_max_attempts:
                raise
            self.status_queue().dead_letter(base64.b64decode(message["data"]), batch.room_id, reason, failures,
                                            KIND_RECIPIENT_RECEIPTS if receipts is not None else KIND_ROOM_STATUSES)
            self.events.emit(DeliveryEvent(EventType.STATUS_DEAD_LETTERED, utc_iso(now_us()), "status",
                                           batch.room_id, reason=f"failed {failures} times: {reason}"[:500]))
            return Reply(200, {"result": "dead_lettered", "attempts": failures, "error": reason})
        return Reply(200, {"result": "ok", "statuses": len(batch.statuses), "applied": applied})

    def _route(self, st: QueuedStatus, arrived: int, component: str) -> tuple[str, StatusUpdate] | None:
        """The room and event a status is for, or None (logged as
        `status_unknown`) when it carries no baton delivery id."""
        try:
            room_id, incarnation, seq, attempt, sent_at_us = parse_delivery_id(st.delivery_id)
            if not ROOM_ID.fullmatch(room_id):
                raise ValueError(room_id)
        except ValueError:
            self.events.emit(DeliveryEvent(EventType.STATUS_UNKNOWN, utc_iso(arrived), component, None,
                                           provider=st.provider, provider_message_id=st.provider_message_id,
                                           status=st.status, reason="no baton delivery id"))
            return None
        decided = now_us()
        return room_id, StatusUpdate(incarnation, seq, attempt, st.status, sent_at_us, decided,
                                     st.provider_message_id, st.error_code, st.error_title,
                                     received_at_us=arrived if arrived < decided else None)

    def _apply_statuses(self, statuses: list[QueuedStatus], room_id: str | None, arrived: int, component: str) -> int:
        """Apply statuses in order, each in its room's transaction; returns how
        many were applied. `room_id`: the room they must all be for (status
        queue), or None (direct webhook: any rooms). One room's trouble does
        not hold the others back: all are tried, then the first failure is
        raised (a redelivery repeats the applied ones as duplicates, which
        change nothing)."""
        applied = 0
        failures: list[Exception] = []
        for st in statuses:
            routed = self._route(st, arrived, component)
            if routed is None:
                continue
            target, event = routed
            if room_id is not None and target != room_id:
                self.events.emit(DeliveryEvent(EventType.STATUS_UNKNOWN, utc_iso(arrived), component, room_id,
                                               provider=st.provider, provider_message_id=st.provider_message_id,
                                               status=st.status, reason=f"delivery id of another room: {target}"))
                continue
            if event.status == "sent":
                self._after_commit(target, decide(RoomState(target), event, self.policy, component), component)
                continue
            try:
                self.apply(target, event, component)
            except (gexc.GoogleAPICallError, gexc.RetryError, TimerArmFailed, RuntimeError) as exc:
                failures.append(exc)
                continue
            applied += 1
        if failures:
            raise failures[0]
        return applied

    # ------------------------------------------------------------ timers and the watchdog

    def handle_timer(self, body: bytes) -> Reply:
        """A Cloud Tasks timer. 5xx makes Cloud Tasks retry (its queues retry
        without limit, infra/tasks.tf). A body that is not a timer can never
        become one, so it is answered 200 (`result: dropped`, with the reason)
        and logged as an error rather than retried forever; if it was meant
        for a real room, that room's stored wake-up brings the watchdog."""
        arrived = now_us()
        try:
            t = json.loads(body)
            room_id = str(t["room_id"])
            event = TimerFired(int(t["incarnation"]), int(t["seq"]), int(t["attempt"]), int(t["due_at_us"]), arrived)
            if not ROOM_ID.fullmatch(room_id):
                raise ValueError(f"bad room id {room_id[:80]!r}")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            reason = f"not a baton timer: {type(exc).__name__}: {exc}"[:300]
            print(json.dumps({"severity": "ERROR", "message": f"timeout: dropped a task: {reason}"}), flush=True)
            return Reply(200, {"result": "dropped", "error": reason})
        self.apply(room_id, event, "timeout")
        return Reply(200, {"result": "ok"})

    def handle_prepare(self, body: bytes) -> Reply:
        """A prepare task (shared/prepare.py): prepare message `seq` of a room
        (upload its media), then store the result in the room (`Prepared`, or
        `PrepareFailed`, which the room retries with its own backoff).

        - A message that no longer needs it (ended, already prepared, another
          incarnation) is answered 200 at once: nothing to do.
        - A transient failure (TRANSIENT_ERRORS: Firestore unreachable)
          raises: 503, Cloud Tasks retries the task, which may upload again;
          the room keeps the first result.
        - A body that is not a prepare task is answered 200 (`dropped`) and
          logged as an error: retrying cannot mend it, and the head's
          PREPARE_TIMEOUT_MS asks again for any preparation it was meant for.
        """
        arrived = now_us()
        try:
            t = json.loads(body)
            room_id = str(t["room_id"])
            incarnation, seq, attempt = int(t["incarnation"]), int(t["seq"]), int(t["attempt"])
            if not ROOM_ID.fullmatch(room_id):
                raise ValueError(f"bad room id {room_id[:80]!r}")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            reason = f"not a prepare task: {type(exc).__name__}: {exc}"[:300]
            print(json.dumps({"severity": "ERROR", "message": f"prepare: dropped a task: {reason}"}), flush=True)
            return Reply(200, {"result": "dropped", "error": reason})
        state = self.store.load_room(room_id)
        found = state.message(seq) if state is not None and state.incarnation == incarnation else None
        msg = found[0] if found is not None else None
        if msg is None or not msg.needs_preparation or msg.prep_failed is not None:
            return Reply(200, {"result": "nothing to prepare"})
        preparer = self.preparers.get(msg.provider)
        if preparer is None or msg.media_kind is None or msg.media_link is None:
            event: RoomEvent = PrepareFailed(incarnation, seq, attempt,
                                             f"no way to prepare a {msg.media_kind} message for {msg.provider}",
                                             True, now_us())
        else:
            result = preparer.prepare_media(msg.media_kind, msg.media_link)
            done = now_us()
            if result.media_id is not None:
                event = Prepared(incarnation, seq, attempt, result.media_id, (done - arrived) / 1000, done)
            else:
                event = PrepareFailed(incarnation, seq, attempt, result.error or "preparation failed",
                                      result.permanent, done)
        self.apply(room_id, event, "prepare")
        return Reply(200, {"result": "prepared" if isinstance(event, Prepared) else "failed"})

    def handle_sweep(self) -> Reply:
        """The watchdog: re-drive every room whose wake-up is overdue by more
        than WATCHDOG_GRACE_MS, oldest first, SWEEP_CONCURRENCY rooms at a
        time, in batches of SWEEP_BATCH_SIZE, until none is left or
        SWEEP_BUDGET_S (s) is spent; the rest wait for the next sweep. A room
        that fails is left for the next sweep; the answer counts them
        (`overdue`: rooms taken up; `left`: taken up but not reached in the
        budget)."""
        started = time.monotonic()
        budget_end = started + self.settings.sweep_budget_s
        seen: set[str] = set()
        counts = {"overdue": 0, "rescued": 0, "failed": 0, "left": 0}

        def rescue(room_id: str) -> str:
            if time.monotonic() >= budget_end:
                return "left"
            try:
                decision = self.apply(room_id, WatchdogSweep(now_us()), "sweep")
            except (gexc.GoogleAPICallError, gexc.RetryError, TimerArmFailed, RuntimeError) as exc:
                print(json.dumps({"severity": "ERROR", "message": f"sweep: room {room_id}: {exc!r}"}), flush=True)
                return "failed"
            return "rescued" if any(e.event == EventType.WATCHDOG_RESCUED for e in decision.events) else "ok"

        pool = ThreadPoolExecutor(max_workers=self.settings.sweep_concurrency) \
            if self.settings.sweep_concurrency > 1 else None
        try:
            while time.monotonic() < budget_end:
                before = now_us() - self.policy.watchdog_grace_ms * 1000
                batch = [r for r in self.store.overdue_rooms(before, self.settings.sweep_batch_size) if r not in seen]
                if not batch:
                    break
                seen.update(batch)
                counts["overdue"] += len(batch)
                if pool is None:
                    results = [rescue(r) for r in batch]
                else:
                    # Each rescue in a copy of this request's context: its operations count for the request.
                    results = list(pool.map(lambda r: contextvars.copy_context().run(rescue, r), batch))
                for result in results:
                    if result in counts:
                        counts[result] += 1
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)  # an error stops the rooms not yet started
        return Reply(200, {**counts, "seconds": round(time.monotonic() - started, 3)})

    # ------------------------------------------------------------ operators

    def redrive(self, room_id: str, seq: int, actor: str, reason: str) -> Decision:
        """Release the parked message `seq` of a room: it is sent in its turn."""
        return self.apply(room_id, Redrive(seq, actor, reason, now_us()), "operator")

    def skip(self, room_id: str, seq: int, actor: str, reason: str) -> Decision:
        """End message `seq` of a room (in flight or queued) as `skipped`."""
        return self.apply(room_id, Skip(seq, actor, reason, now_us()), "operator")

    # ------------------------------------------------------------ effects

    def _after_commit(self, room_id: str, decision: Decision, component: str) -> None:
        """Log a committed decision's events and run its effects, following
        send outcomes into further room transactions. Raises `TimerArmFailed`
        at the end if a timer could not be armed."""
        work: deque[Decision] = deque([decision])
        arm_failures: list[str] = []
        cancels: list[CancelTimer] = []
        prepares: list[Prepare] = []
        while work:
            d = work.popleft()
            for ev in d.events:
                self.events.emit(ev)
            for effect in d.effects:
                if isinstance(effect, CancelTimer):
                    cancels.append(effect)  # last: the next message's send does not wait for it
                    continue
                if isinstance(effect, Prepare):
                    prepares.append(effect)  # after the sends: the head's hand-over does not wait for them
                    continue
                follow_up = self._run_effect(room_id, effect, component, arm_failures)
                if follow_up is not None:
                    work.append(follow_up)
        for prepare in prepares:
            self._request_preparation(room_id, prepare, component, arm_failures)
        for cancel in cancels:
            self.timers.cancel(cancel)
        if arm_failures:
            raise TimerArmFailed("; ".join(arm_failures))

    def _request_preparation(self, room_id: str, prepare: Prepare, component: str, arm_failures: list[str]) -> None:
        """Create a prepare task. A failure is logged and, like a timer that
        cannot be armed, makes the request answer 503 so its redelivery asks
        again; the head's PREPARE_TIMEOUT_MS backs that up."""
        try:
            if self.prepare_tasks is None:
                raise RuntimeError("no prepare task queue configured")
            _arm_retry(self.prepare_tasks.request)(prepare)
        except (gexc.GoogleAPICallError, gexc.RetryError, RuntimeError) as exc:
            arm_failures.append(f"prepare task: {type(exc).__name__}: {exc}"[:200])
            self.events.emit(DeliveryEvent(EventType.PREPARE_REQUEST_FAILED, utc_iso(now_us()), component, room_id,
                                           seq=prepare.seq, attempt=prepare.attempt, reason=str(exc)[:200]))

    def _run_effect(self, room_id: str, effect: Effect, component: str, arm_failures: list[str]) -> Decision | None:
        if isinstance(effect, ScheduleTimer):
            try:
                _arm_retry(self.timers.schedule)(effect)
            except (gexc.GoogleAPICallError, gexc.RetryError) as exc:
                arm_failures.append(f"{type(exc).__name__}: {exc}"[:200])
                self.events.emit(DeliveryEvent(EventType.TIMER_ARM_FAILED, utc_iso(now_us()), component, room_id,
                                               seq=effect.seq, attempt=effect.attempt, reason=str(exc)[:200]))
            return None
        assert isinstance(effect, Send)
        return self._send(room_id, effect, component)

    def _send(self, room_id: str, send: Send, component: str) -> Decision | None:
        msg = send.message
        assert msg.text is not None, "a parked placeholder is never sent"
        started = now_us()
        if started > send.start_by_us:
            # Too late to start: the room's send window assumes no call starts
            # after this. Provably not sent, so a retry is safe.
            result = SendResult(SendOutcome.REFUSED, error_title="send not started within SEND_START_DEADLINE_MS")
        else:
            op_counts().send_calls += 1
            sender = self.senders[msg.provider]
            if msg.media_kind is None:
                result = sender.send(msg.recipient, msg.text, send.delivery_id)
            else:
                # Prepared: by the platform's media id; else by link (the platform fetches it).
                media = Media(msg.media_kind, media_id=msg.prepared, link=None if msg.prepared else msg.media_link)
                result = sender.send(msg.recipient, msg.text, send.delivery_id, media=media)
        returned = now_us()
        common: dict[str, Any] = dict(seq=msg.seq, attempt=send.attempt, message_id=msg.message_id,
                                      provider=msg.provider, delivery_id=send.delivery_id, trigger=str(send.trigger))
        if result.outcome is SendOutcome.ACCEPTED:
            self.events.emit(DeliveryEvent(
                EventType.SENT, utc_iso(started), component, room_id,
                provider_message_id=result.provider_message_id,
                published_at=utc_iso(msg.published_at_us),
                publish_to_send_ms=(started - msg.published_at_us) / 1000,
                trigger_to_send_ms=(started - send.trigger_at_us) / 1000,
                **common))
        elif result.outcome is SendOutcome.UNKNOWN:
            self.events.emit(DeliveryEvent(EventType.SEND_UNKNOWN, utc_iso(started), component, room_id,
                                           error_code=result.error_code, error_title=result.error_title,
                                           reason="possibly sent: held until its ack deadline, then resent",
                                           **common))
        else:
            kind = "permanent" if result.permanent else "rate_limited" if result.rate_limited else "transient"
            self.events.emit(DeliveryEvent(EventType.SEND_FAILED, utc_iso(started), component, room_id,
                                           error_code=result.error_code, error_title=result.error_title,
                                           reason=kind, **common))
        if result.outcome is SendOutcome.ACCEPTED and msg.provider == "whatsapp" \
                and self.policy.ack_level("whatsapp") != "accepted":
            # The common case costs one blind write instead of a transaction.
            # (Messenger and Instagram record the platform's message id in a
            # transaction: their receipts name it, not our delivery id.)
            self.store.record_accepted(room_id, send.incarnation, msg.seq, send.attempt,
                                       ack_deadline_us(self.policy, returned))
            return None
        returned_event = SendReturned(send.incarnation, msg.seq, send.attempt, RoomSendOutcome(str(result.outcome)),
                                      returned, send.cause, result.permanent, result.rate_limited,
                                      result.error_code, result.error_title, result.provider_message_id)
        return self.store.apply(room_id, lambda s: decide(s, returned_event, self.policy, component))

    # ------------------------------------------------------------ metrics

    def record_invocation(self, function: str, started_us: int, status: int) -> None:
        """Append this request's operation counts to METRICS_LOG_PATH (if set):
        the benchmark's and the cost estimate's source."""
        if self._metrics is None:
            return
        c = op_counts()
        self._metrics.write({
            "log_type": METRICS_LOG_TYPE, "function": function, "ts": utc_iso(started_us),
            "duration_ms": (now_us() - started_us) / 1000, "http_status": status,
            "firestore_reads": c.firestore_reads, "firestore_writes": c.firestore_writes,
            "tasks_created": c.tasks_created, "send_calls": c.send_calls, "status_publishes": c.status_publishes,
        })


def start_request() -> int:
    """Reset the per-request operation counters; returns the start time (epoch us)."""
    begin_request()
    return now_us()
