"""The delivery event log: one JSON line per room transition.

This module is the schema's single definition. The functions write these lines
to stdout, where Cloud Functions turns each into a structured LogEntry (the
line's keys land under `jsonPayload`; `severity` and `message` are special, see
https://cloud.google.com/functions/docs/monitoring/logging#writing_structured_logs).
A Logging sink routes the entries with `jsonPayload.log_type="baton.delivery"`
to Cloud Storage, and the PySpark pipeline (pipeline/) reads exactly these
fields. Locally the same lines are appended to `EVENT_LOG_PATH` too.

The message text is never logged, nor the recipient's phone number.

Line shape (`severity` to `room_id` always present; a field that does
not apply to the event is left out, which every reader takes as null: the
pipeline's declared schema, the console's timeline, `tools.local.audit.read_events`)::

    {"severity": "INFO", "message": "acked room-7#3.1",
     "log_type": "baton.delivery", "schema_version": 1,
     "event": "acked", "ts": "2026-11-22T11:25:17.123456Z", "component": "webhook",
     "room_id": "room-7", "seq": 3, "attempt": 1, "message_id": "m-...",
     "provider": "whatsapp", "delivery_id": "3.1.1763810717123.hd7v4lrwu8.room-7",
     "provider_message_id": "wamid....", "status": "delivered",
     "send_to_ack_ms": 84.2, "incarnation": 1763810000000000,
     "event_id": "w5f0c2a9e1b7.0"}

Leaving the nulls out is a quarter of a typical line's bytes, and every
line is paid for once ingested into Cloud Logging (docs/cost.md).
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from contextvars import ContextVar, Token
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

LOG_TYPE = "baton.delivery"
METRICS_LOG_TYPE = "baton.invocation"
SCHEMA_VERSION = 1
# Special keys of a structured log line: Cloud Logging moves them into the
# LogEntry's `trace` and `spanId`, so Logs Explorer groups a request's lines
# under it (https://cloud.google.com/logging/docs/structured-logging#special-payload-fields).
TRACE_KEY = "logging.googleapis.com/trace"
SPAN_KEY = "logging.googleapis.com/spanId"
_CLOUD_TRACE = re.compile(r"^([0-9a-fA-F]{32})(?:/(\d+))?")
_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")
_request_trace: ContextVar[dict[str, str] | None] = ContextVar("baton_request_trace", default=None)


def trace_fields(cloud_trace_context: str | None, traceparent: str | None, project: str) -> dict[str, str]:
    """The trace keys of a request's log lines, from its `X-Cloud-Trace-Context`
    (`TRACE_ID/SPAN_ID;o=1`, span id decimal) or else its W3C `traceparent`
    (`00-TRACE_ID-SPAN_ID-01`, span id hex): `{TRACE_KEY:
    "projects/P/traces/TRACE_ID", SPAN_KEY: span}`; `{}` when neither parses
    (https://cloud.google.com/trace/docs/trace-context)."""
    if cloud_trace_context and (m := _CLOUD_TRACE.match(cloud_trace_context.strip())):
        trace, span = m.group(1).lower(), m.group(2)
        span_hex = f"{int(span):016x}" if span and int(span) < 2**64 else None
    elif traceparent and (m := _TRACEPARENT.match(traceparent.strip())):
        trace, span_hex = m.group(1), m.group(2)
    else:
        return {}
    if trace == "0" * 32:
        return {}
    fields = {TRACE_KEY: f"projects/{project}/traces/{trace}"}
    if span_hex:
        fields[SPAN_KEY] = span_hex
    return fields


def set_request_trace(fields: dict[str, str] | None) -> Token[dict[str, str] | None]:
    """Make `fields` (`trace_fields`) part of every event line this thread
    writes until `reset_request_trace(token)`; the entry points set it per request."""
    return _request_trace.set(fields or None)


def reset_request_trace(token: Token[dict[str, str] | None]) -> None:
    """End what `set_request_trace` began."""
    _request_trace.reset(token)


class EventType(StrEnum):
    """Every kind of delivery event. Terminal ones end a message for good."""

    ENQUEUED = "enqueued"  # accepted and queued in its room, seq assigned
    DUPLICATE_IGNORED = "duplicate_ignored"  # a push redelivery of a known message_id
    REJECTED = "rejected"  # a push that can never be valid, kept with its reason
    SENT = "sent"  # the platform accepted a send call (attempt >= 1)
    SEND_FAILED = "send_failed"  # one send call failed; a retry or an end follows
    ACKED = "acked"  # terminal: delivered/read status for the in-flight message
    FAILED = "failed"  # terminal: the platform reported the message failed
    TIMED_OUT = "timed_out"  # terminal: no ack within ACK_TIMEOUT_MS
    DEAD_LETTERED = "dead_lettered"  # terminal: baton gave up (reason says why)
    STATUS_IGNORED = "status_ignored"  # a status changing nothing: late, duplicate, `sent`
    STATUS_UNKNOWN = "status_unknown"  # a status for a delivery baton does not know
    PAUSED = "paused"  # an operator paused the room: it keeps accepting messages and starts none
    RESUMED = "resumed"  # an operator resumed a paused room: its head goes out in its turn
    STATUS_DEAD_LETTERED = "status_dead_lettered"  # a status-queue message moved to the error queue after failing
    TIMEOUT_IGNORED = "timeout_ignored"  # a timer task for an attempt no longer in flight, or superseded
    SEND_UNKNOWN = "send_unknown"  # a send call whose outcome is unknown: counts as possibly sent
    TIMER_REARMED = "timer_rearmed"  # a timer came before the room's deadline: armed again for the rest
    TIMER_ARM_FAILED = "timer_arm_failed"  # Cloud Tasks refused a timer; the request answers 5xx, the watchdog backs it up
    RESENT = "resent"  # the in-flight message is sent again as a new attempt (reason says why)
    SCHEDULED = "scheduled"  # a message with a later `deliver_at`/`delay_s` waits outside its room (a Cloud Tasks task)
    PREPARING = "preparing"  # the head of line waits for its preparation (a media upload): not sent yet
    PREPARED = "prepared"  # a message's preparation finished; its result is stored with the message
    PREPARE_FAILED = "prepare_failed"  # one preparation attempt failed; a retry, or the poison policy, follows
    PREPARE_IGNORED = "prepare_ignored"  # a preparation result for a message that no longer waits for one (reason says why)
    PREPARE_REQUEST_FAILED = "prepare_request_failed"  # Cloud Tasks refused a prepare task; the request answers 5xx
    SEQUENCE_HELD = "sequence_held"  # a message with a producer `sequence` ahead of the next expected one waits for its predecessors
    SEQUENCE_GAP = "sequence_gap"  # the gap timeout passed: the missing producer sequence numbers are given up, the room moves on
    PACED = "paced"  # the room's pair-rate bucket is empty: the head waits for a token, not sent yet
    BACKPRESSURE = "backpressure"  # a push refused (503) because its room is full; it is awaited in its place
    PARKED = "parked"  # a message put at its place in its room, blocking it until an operator acts
    BLOCKED = "blocked"  # the room's head is parked: nothing is sent until an operator redrives or skips it
    REDRIVEN = "redriven"  # an operator released a parked message: it is sent in its turn
    SKIPPED = "skipped"  # terminal: an operator ended the message unsent (or unacked)
    WATCHDOG_RESCUED = "watchdog_rescued"  # the sweep found the room's wake-up overdue and re-drove it
    OPERATOR_IGNORED = "operator_ignored"  # an operator action that changes nothing (already done, wrong seq)
    STATUSES_REPLAYED = "statuses_replayed"  # an operator published a room's statuses from the status error queue again


TERMINAL_EVENTS = frozenset(
    {EventType.ACKED, EventType.FAILED, EventType.TIMED_OUT, EventType.DEAD_LETTERED, EventType.SKIPPED}
)

_SEVERITY = {
    EventType.REJECTED: "WARNING",
    EventType.SEND_FAILED: "WARNING",
    EventType.FAILED: "WARNING",
    EventType.DEAD_LETTERED: "ERROR",
    EventType.STATUS_UNKNOWN: "WARNING",
    EventType.STATUS_DEAD_LETTERED: "ERROR",
    EventType.SEND_UNKNOWN: "WARNING",
    EventType.TIMER_ARM_FAILED: "ERROR",
    EventType.BACKPRESSURE: "WARNING",
    EventType.PARKED: "ERROR",
    EventType.BLOCKED: "ERROR",
    EventType.WATCHDOG_RESCUED: "WARNING",
    EventType.SKIPPED: "WARNING",
    EventType.PREPARE_FAILED: "WARNING",
    EventType.PREPARE_REQUEST_FAILED: "ERROR",
    EventType.SEQUENCE_GAP: "WARNING",
}


@dataclass(frozen=True)
class DeliveryEvent:
    """One transition of one room, as logged.

    Times: `ts` and `published_at` are RFC 3339 UTC strings with microseconds;
    every `*_ms` field is a duration in milliseconds (float).

    - `seq`: the message's position in its room, from 1, in publish order.
    - `attempt`: the send attempt, from 1; it is the fencing token of a send.
    - `delivery_id`: our id of one attempt, sent to the platform as
      `biz_opaque_callback_data` and echoed in its status webhooks.
    - `trigger`: on `sent`, what started the send (`shared.room.Trigger`:
      `enqueue`, `ack`, `failed`, `timed_out`, `dead_lettered`, `skipped`,
      `redrive`, `retry`, `resend`, `paced`).
    - `publish_to_send_ms`: Pub/Sub publish time to this send call (on `sent`).
    - `send_to_ack_ms`: this attempt's send to the status that acked it (on
      `acked`, and on `status_ignored` with reason `late_ack`).
    - `trigger_to_send_ms`: arrival of the request that freed the room to this
      send call (on `sent`): the head-of-line hand-over delay.
    - `actor`: who did an operator action (`paused`, `resumed`, `redriven`,
      `skipped`, `operator_ignored`, `statuses_replayed`), else null.
    - `incarnation`: the room's incarnation (its document's creation time,
      epoch us; shared/room) the event belongs to: a room deleted by TTL and
      made again starts its seqs at 1, so a message is (room, incarnation,
      seq). Taken from `delivery_id` when not given; null when unknown.
    - `event_id`: `"{write id}.{index}"`, unique per room, on the events a
      room transaction decided (shared/outbox.py): such an event may be
      logged twice (once after the commit, once more by a later transaction
      that found it in the room's outbox); `"cancelled.{message_id}"` on
      the `skipped` line of a scheduled message cancelled before its time,
      logged again by each later copy of it (shared/service/scheduled_entry.py);
      readers keep one line per (`room_id`, `event_id`). Null on the other
      events.
    - `relogged`: true on a line a later transaction of the room logs for
      an earlier write it found in the room's outbox (`outbox.log_left_behind`,
      also on a redelivery's read), or a later copy of a cancelled scheduled
      message logs for its end (`end_cancelled`), which its own process may have logged
      already: a second copy most often, the only one when that process died
      between its commit and its log lines. infra/analytics.tf keeps these
      lines out of the _Default log bucket by default (the sink's bucket has
      them). Left out (null) on a line logged first-hand.
    """

    event: EventType
    ts: str
    component: str
    room_id: str | None
    seq: int | None = None
    attempt: int | None = None
    message_id: str | None = None
    provider: str | None = None
    delivery_id: str | None = None
    provider_message_id: str | None = None
    status: str | None = None
    trigger: str | None = None
    reason: str | None = None
    error_code: int | None = None
    error_title: str | None = None
    published_at: str | None = None
    publish_to_send_ms: float | None = None
    send_to_ack_ms: float | None = None
    trigger_to_send_ms: float | None = None
    actor: str | None = None
    incarnation: int | None = None
    event_id: str | None = None
    relogged: bool | None = None

    def field_values(self) -> dict[str, Any]:
        """Every field by name, in their order: `dataclasses.asdict`'s
        answer (the values are scalars, which it would copy as themselves)
        at a fraction of its CPU, taken on every event line and outbox record."""
        return {name: getattr(self, name) for name in _EVENT_FIELD_NAMES}

    def to_record(self) -> dict[str, Any]:
        """The JSON object written for this event (see the module docstring):
        the fields that do not apply (None) are left out."""
        # `room_id` stays even when null: the line's subject (none: a status of an unknown delivery, ...).
        body = {k: v for k, v in self.field_values().items() if v is not None or k == "room_id"}
        body["event"] = str(self.event)
        if self.incarnation is None and self.delivery_id is not None:
            body["incarnation"] = incarnation_of(self.delivery_id)
        label = f"{self.event} {self.room_id}"
        if self.seq is not None:
            label += f"#{self.seq}.{self.attempt}" if self.attempt else f"#{self.seq}"
        if self.reason:
            label += f" ({self.reason})"
        return {
            "severity": _SEVERITY.get(self.event, "INFO"),
            "message": label,
            "log_type": LOG_TYPE,
            "schema_version": SCHEMA_VERSION,
            **body,
        }


_EVENT_FIELD_NAMES = tuple(f.name for f in fields(DeliveryEvent))

# Field name -> JSON type, for readers that declare the schema (pipeline/).
EVENT_FIELDS: dict[str, str] = {
    "severity": "string",
    "message": "string",
    "log_type": "string",
    "schema_version": "integer",
    "event": "string",
    "ts": "string",
    "component": "string",
    "room_id": "string",
    "seq": "integer",
    "attempt": "integer",
    "message_id": "string",
    "provider": "string",
    "delivery_id": "string",
    "provider_message_id": "string",
    "status": "string",
    "trigger": "string",
    "reason": "string",
    "error_code": "integer",
    "error_title": "string",
    "published_at": "string",
    "publish_to_send_ms": "number",
    "send_to_ack_ms": "number",
    "trigger_to_send_ms": "number",
    "actor": "string",
    "incarnation": "integer",
    "event_id": "string",
    "relogged": "boolean",
}


def incarnation_of(delivery_id: str) -> int | None:
    """The room incarnation a delivery id names (`shared.room.make_delivery_id`:
    its fourth dot-separated part, base 36), or None when it is not one."""
    parts = delivery_id.split(".", 4)
    if len(parts) != 5:
        return None
    try:
        return int(parts[3], 36) or None
    except ValueError:
        return None


def utc_iso(epoch_us: int) -> str:
    """RFC 3339 UTC timestamp with microseconds, from epoch microseconds."""
    return datetime.fromtimestamp(epoch_us / 1_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class JsonLineWriter:
    """Writes JSON lines to stdout (unless `stdout=False`) and, if a path is
    given, appends them to a file.

    Each line is written with a single `write` on a file opened with O_APPEND,
    so several processes can append to one local file without interleaving.
    """

    def __init__(self, path: str = "", stdout: bool = True) -> None:
        self._path = path
        self._stdout = stdout
        self._lock = threading.Lock()
        self._fd: int | None = None

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate from outside: escape it, keep the line
            line = json.dumps(record, separators=(",", ":"), ensure_ascii=True) + "\n"
        with self._lock:
            if self._stdout:
                sys.stdout.write(line)
                sys.stdout.flush()
            if self._path:
                if self._fd is None:
                    self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
                os.write(self._fd, line.encode())


def quiet_rules(setting: str) -> frozenset[str]:
    """The QUIET_EVENTS setting as a set of `event` or `event:reason` names.

    Raises:
        ValueError: a name that is not an event type of `EventType`.
    """
    rules = frozenset(part.strip() for part in setting.split(",") if part.strip())
    known = {str(e) for e in EventType}
    unknown = sorted(r for r in rules if r.split(":", 1)[0] not in known)
    if unknown:
        raise ValueError(f"QUIET_EVENTS names unknown event types: {', '.join(unknown)}")
    return rules


class EventLog:
    """Sink for delivery events; `events` keeps them when `keep=True` (tests).

    `quiet`: `event` or `event:reason` names (`quiet_rules`) that are not
    written: the chattiest lines, which change nothing in a room (for example
    `status_ignored:sent_status`, about one per message, and
    `timeout_ignored`), may be left out to save Cloud Logging ingestion
    (docs/event-log.md says what the analytics lose)."""

    def __init__(self, path: str = "", keep: bool = False, quiet: frozenset[str] = frozenset()) -> None:
        self._writer = JsonLineWriter(path)
        self._keep = keep
        self._quiet = quiet
        self.events: list[DeliveryEvent] = []

    def emit(self, event: DeliveryEvent) -> None:
        self._emit(event, compact=False)

    def emit_again(self, event: DeliveryEvent) -> None:
        """Log an event a room's outbox kept (shared/outbox.py), which may
        have been logged already: its non-null keys only (a reader takes a
        missing key as null), to spend fewer Cloud Logging bytes on a line
        that is most often a duplicate."""
        self._emit(event, compact=True)

    def _emit(self, event: DeliveryEvent, compact: bool) -> None:
        if self._quiet and (str(event.event) in self._quiet or f"{event.event}:{event.reason}" in self._quiet):
            return
        if self._keep:
            self.events.append(event)
        record = event.to_record()
        if compact:
            record = {k: v for k, v in record.items() if v is not None}
        if (trace := _request_trace.get()) is not None:
            record.update(trace)
        self._writer.write(record)
