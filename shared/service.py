"""The three request handlers, between the entry points and the room.

Each handler: parse the request, run the room's optimistic transaction
(shared/store.py calling shared/room.py's `decide`), then, after the commit,
log the events and run the effects in order: arm the timer first, then send,
so a send that dies half-way is still covered by its ack timeout. A send's
outcome is recorded (receipt on success; a `SendFailed` room event on
failure), which may start the next message.

Handlers return a `Reply` (HTTP status, JSON body); the entry points only
translate it.
"""

from __future__ import annotations

import json
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared.config import Settings
from shared.events import METRICS_LOG_TYPE, DeliveryEvent, EventLog, EventType, JsonLineWriter, utc_iso
from shared.providers import Sender
from shared.providers.whatsapp import handshake_challenge, parse_statuses, signature_valid
from shared.push import ROOM_ID, Rejected, parse_push
from shared.room import (
    Decision,
    Effect,
    KeepDeadLetter,
    Phase,
    Policy,
    Receipt,
    RoomState,
    ScheduleTimer,
    Send,
    SendFailed,
    StatusUpdate,
    TimerFired,
    TimerKind,
    decide,
    parse_delivery_id,
)
from shared.store import RoomStore, begin_request, op_counts
from shared.tasks import TimerScheduler


def now_us() -> int:
    return time.time_ns() // 1000


@dataclass(frozen=True)
class Reply:
    """An HTTP answer: status code and a short JSON-able body."""

    status: int
    body: dict[str, Any]


class Baton:
    """Handles enqueue pushes, status webhooks and timers for every room.

    Args:
        settings: the environment's settings.
        policy: the room policy (timeouts in ms, limits).
        store: the Firestore adapter.
        timers: the Cloud Tasks adapter.
        senders: provider name -> platform client.
        events: where delivery events go.
    """

    def __init__(self, settings: Settings, policy: Policy, store: RoomStore, timers: TimerScheduler,
                 senders: dict[str, Sender], events: EventLog) -> None:
        self.settings = settings
        self.policy = policy
        self.store = store
        self.timers = timers
        self.senders = senders
        self.events = events
        self._metrics = JsonLineWriter(settings.metrics_log_path, stdout=False) if settings.metrics_log_path else None

    # ------------------------------------------------------------ enqueue

    def handle_push(self, body: bytes) -> Reply:
        """A Pub/Sub push. 2xx acks it; 5xx makes Pub/Sub redeliver."""
        arrived = now_us()
        parsed = parse_push(body, arrived)
        if isinstance(parsed, Rejected):
            self.store.keep_rejected(parsed.key, parsed.reason, parsed.record)
            self.events.emit(DeliveryEvent(EventType.REJECTED, utc_iso(arrived), "enqueue", parsed.room_id,
                                           message_id=parsed.message_id, reason=parsed.reason))
            return Reply(200, {"result": "rejected", "reason": parsed.reason})
        decision = self.store.apply(parsed.room_id, lambda s: decide(s, parsed.event, self.policy, "enqueue"))
        if decision.refused:
            return Reply(503, {"result": "backpressure", "reason": decision.refused})
        self._after_commit(parsed.room_id, decision, "enqueue")
        return Reply(200, {"result": "ok"})

    # ------------------------------------------------------------ webhook

    def handle_handshake(self, args: dict[str, str]) -> Reply:
        """Meta's GET verification of the webhook URL."""
        challenge = handshake_challenge(args, self.settings.whatsapp_verify_token)
        if challenge is None:
            return Reply(403, {"error": "verify token mismatch"})
        return Reply(200, {"challenge": challenge})

    def handle_status_webhook(self, raw: bytes, signature: str | None) -> Reply:
        """A signed status webhook: 401 on a bad signature (nothing changes),
        400 on a body of the wrong shape, else every status is applied."""
        arrived = now_us()
        if not signature_valid(raw, signature, self.settings.whatsapp_app_secret):
            return Reply(401, {"error": "bad or missing X-Hub-Signature-256"})
        try:
            statuses = parse_statuses(json.loads(raw))
        except (ValueError, UnicodeDecodeError) as exc:
            return Reply(400, {"error": f"not a WhatsApp status webhook: {exc}"})
        applied = 0
        for st in statuses:
            try:
                room_id, seq, attempt, sent_at_us = parse_delivery_id(st.callback_data or "")
                if not ROOM_ID.match(room_id):
                    raise ValueError(room_id)
            except ValueError:
                self.events.emit(DeliveryEvent(EventType.STATUS_UNKNOWN, utc_iso(arrived), "webhook", None,
                                               provider="whatsapp", provider_message_id=st.provider_message_id,
                                               status=st.status, reason="no baton delivery id"))
                continue
            event = StatusUpdate(seq, attempt, st.status, sent_at_us, arrived, st.provider_message_id,
                                 st.error_code, st.error_title)
            if st.status == "sent":
                # Changes nothing: decide answers it without the room's state,
                # so no transaction is spent on it.
                decision = decide(RoomState(room_id), event, self.policy, "webhook")
                self._after_commit(room_id, decision, "webhook")
                continue
            decision = self.store.apply(room_id, lambda s, e=event: decide(s, e, self.policy, "webhook"))
            self._after_commit(room_id, decision, "webhook")
            applied += 1
        return Reply(200, {"statuses": len(statuses), "applied": applied})

    # ------------------------------------------------------------ timers

    def handle_timer(self, body: bytes) -> Reply:
        """A Cloud Tasks timer. 400 for a body that is not a timer (Cloud Tasks
        would retry it, so it is logged); 5xx makes Cloud Tasks retry."""
        arrived = now_us()
        try:
            t = json.loads(body)
            room_id, seq, attempt, kind = str(t["room_id"]), int(t["seq"]), int(t["attempt"]), TimerKind(t["kind"])
        except (ValueError, KeyError, TypeError) as exc:
            return Reply(400, {"error": f"not a baton timer: {exc}"})
        event = TimerFired(seq, attempt, kind, arrived)

        def decide_timer(state: RoomState) -> Decision:
            ev = event
            flight = state.in_flight
            if (kind is TimerKind.ACK_TIMEOUT and flight is not None and flight.message.seq == seq
                    and flight.attempt == attempt and flight.phase is Phase.SENDING):
                # Only a live ack timeout pays for the receipt read.
                confirmed = self.store.has_receipt(state.room_id, seq, attempt)
                ev = TimerFired(seq, attempt, kind, arrived, Receipt.CONFIRMED if confirmed else Receipt.MISSING)
            return decide(state, ev, self.policy, "timeout")

        decision = self.store.apply(room_id, decide_timer)
        self._after_commit(room_id, decision, "timeout")
        return Reply(200, {"result": "ok"})

    # ------------------------------------------------------------ effects

    def _after_commit(self, room_id: str, decision: Decision, component: str) -> None:
        """Log a committed decision's events and run its effects, following
        send failures into further room transactions."""
        work: deque[Decision] = deque([decision])
        while work:
            d = work.popleft()
            for ev in d.events:
                self.events.emit(ev)
            for effect in d.effects:
                follow_up = self._run_effect(room_id, effect, component)
                if follow_up is not None:
                    work.append(follow_up)

    def _run_effect(self, room_id: str, effect: Effect, component: str) -> Decision | None:
        if isinstance(effect, ScheduleTimer):
            self.timers.schedule(effect)
            return None
        if isinstance(effect, KeepDeadLetter):
            return None  # written in the transaction already
        assert isinstance(effect, Send)
        return self._send(room_id, effect, component)

    def _send(self, room_id: str, send: Send, component: str) -> Decision | None:
        msg = send.message
        sender = self.senders[msg.provider]
        started = now_us()
        op_counts().send_calls += 1
        result = sender.send(msg.recipient, msg.text, send.delivery_id, send.attempt)
        common = dict(seq=msg.seq, attempt=send.attempt, message_id=msg.message_id, provider=msg.provider,
                      delivery_id=send.delivery_id, trigger=send.trigger)
        if result.ok:
            self.events.emit(DeliveryEvent(
                EventType.SENT, utc_iso(started), component, room_id,
                provider_message_id=result.provider_message_id,
                published_at=utc_iso(msg.published_at_us),
                publish_to_send_ms=(started - msg.published_at_us) / 1000,
                trigger_to_send_ms=(started - send.trigger_at_us) / 1000,
                **common))
            self.store.write_receipt(room_id, msg.seq, send.attempt, result.provider_message_id or "",
                                     datetime.fromtimestamp(started / 1e6, tz=UTC))
            return None
        self.events.emit(DeliveryEvent(EventType.SEND_FAILED, utc_iso(started), component, room_id,
                                       error_code=result.error_code, error_title=result.error_title,
                                       reason="permanent" if result.permanent else "transient", **common))
        failed = SendFailed(msg.seq, send.attempt, result.permanent, now_us(), result.error_code,
                            result.error_title, result.retry_after_ms)
        return self.store.apply(room_id, lambda s: decide(s, failed, self.policy, component))

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
            "tasks_created": c.tasks_created, "send_calls": c.send_calls,
        })


def start_request() -> int:
    """Reset the per-request operation counters; returns the start time (epoch us)."""
    begin_request()
    return now_us()
