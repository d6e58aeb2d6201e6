"""Delivery outcomes: each message's end, published to the `outcomes` topic.

What a producer hears of its message (issue 44, item 5), as Twilio's status
callbacks or a job platform's run results tell theirs. One Pub/Sub message
per message end, on OUTCOMES_TOPIC, ordering key = the room id, published
only for the end events a committed room transaction produced
(`ServiceCore._after_commit`) or a claimed cancellation
(`claim_cancelled_end`): a redelivered timer, status or push is answered
by the room as a duplicate (`timeout_ignored`, `status_ignored`,
`duplicate_ignored`), which publishes nothing, but for a cancelled
scheduled message: every copy of it that finds it ended publishes its
outcome again, with the same `outcome_id` (the call that ended it may have
died before its publish; shared/service/scheduled_entry.py).

Wire format (data, UTF-8 JSON; attributes `outcome`, `room_id`, `provider`,
`message_id`, `outcome_id`)::

    {"outcome_id": "r-1/m-1", "outcome": "acked", "room_id": "r-1",
     "message_id": "m-1", "seq": 3, "provider": "whatsapp",
     "provider_message_id": "wamid.X", "attempts": 1, "status": "delivered",
     "error_code": null, "error_title": null, "reason": null, "actor": null,
     "ended_at": "2026-11-27T19:00:00.123456Z", "published_at": "...",
     "send_to_ack_ms": 84.2}

`outcome` is one of OUTCOME_KINDS: `acked` (with the acking `status`:
delivered, read, accepted), `timed_out`, `failed` (the platform's
`error_code` and `error_title`), `dead_lettered` (baton's `reason`),
`skipped` (an operator's: `actor`, `reason`), `cancelled` (a scheduled
message cancelled before its time: `actor`, `reason`). `outcome_id` is
`{room_id}/{message_id}` (message ids are unique per room): a consumer
de-duplicates on it (a kept outcome replayed after an interrupted replay may
come twice; Pub/Sub delivers at least once,
https://cloud.google.com/pubsub/docs/exactly-once-delivery).

Never holds a room: publishing runs after the room's sends and timers
(the hand-over does not wait for it), waits at most PUBLISH_WAIT_S for
Pub/Sub, and never raises. An outcome Pub/Sub did not take is kept in
Firestore (`outcomes_kept/{sha256(outcome_id)}`, one blind write, no TTL)
and published again by `baton outcomes replay` (the admin function,
`replay_kept`); after a failure, OUTAGE_S seconds of outcomes go straight to
Firestore (an outage costs one wait, not one per request). If Firestore
fails too, the outcome is written whole in an ERROR log line
(`outcome_not_kept`), which the log sink keeps: the last record. A crash
between the room's commit and the publish loses the outcome message (the
`acked`/`timed_out`/... event line of the delivery log stays).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from shared.events import TERMINAL_EVENTS, DeliveryEvent, EventType

OUTCOME_KINDS = ("acked", "timed_out", "failed", "dead_lettered", "skipped", "cancelled")
KEPT_OUTCOMES = "outcomes_kept"
# How long one request waits for Pub/Sub to take its outcomes, s. Publishing
# runs after the room's sends, so this bounds the request's answer, not the
# room's hand-over.
PUBLISH_WAIT_S = 2.0
# After a failed publish, outcomes go straight to Firestore for this long, s.
OUTAGE_S = 30.0
# The reason a scheduled message's cancellation ends it with (shared/service/scheduled_entry.py).
CANCELLED_REASON = "scheduled message cancelled"


def outcome_kind(event: DeliveryEvent) -> str | None:
    """The outcome a delivery event ends its message with, or None (not an end)."""
    if event.event not in TERMINAL_EVENTS or event.room_id is None or event.message_id is None:
        return None
    if event.event == EventType.SKIPPED and (event.reason or "").startswith(CANCELLED_REASON):
        return "cancelled"
    return str(event.event)


def outcome_record(event: DeliveryEvent) -> dict[str, Any] | None:
    """The outcome message (module docstring) of an end event, or None."""
    kind = outcome_kind(event)
    if kind is None:
        return None
    return {"outcome_id": f"{event.room_id}/{event.message_id}", "outcome": kind, "room_id": event.room_id,
            "message_id": event.message_id, "seq": event.seq, "provider": event.provider,
            "provider_message_id": event.provider_message_id, "attempts": event.attempt or 0,
            "status": event.status, "error_code": event.error_code, "error_title": event.error_title,
            "reason": event.reason, "actor": event.actor, "ended_at": event.ts, "published_at": event.published_at,
            "send_to_ack_ms": event.send_to_ack_ms}


def kept_id(outcome_id: str) -> str:
    """The Firestore document id of a kept outcome: sha256 hex of `outcome_id`."""
    return hashlib.sha256(outcome_id.encode()).hexdigest()


@dataclass
class ReplayReport:
    """What `replay_kept` did: `kept` found, `published` (and deleted), `failed`."""

    kept: int
    published: int
    failed: int
    dry_run: bool


class OutcomePublisher:
    """Publishes outcome records to OUTCOMES_TOPIC (ordering key = room id),
    keeping in Firestore what Pub/Sub does not take.

    Args:
        project: GCP project id.
        topic: OUTCOMES_TOPIC.
        db: a google.cloud.firestore.Client (where failed outcomes are kept).
        client: a pubsub_v1.PublisherClient with message ordering (tests pass their own).
        wait_s: how long one call waits for Pub/Sub, s.
    """

    def __init__(self, project: str, topic: str, db: Any, client: Any = None, wait_s: float = PUBLISH_WAIT_S) -> None:
        if client is None:
            import google.cloud.pubsub_v1 as pubsub_v1
            from google.cloud.pubsub_v1.types import BatchSettings, PublisherOptions

            client = pubsub_v1.PublisherClient(
                batch_settings=BatchSettings(max_latency=0.001),
                publisher_options=PublisherOptions(enable_message_ordering=True, timeout=wait_s))
        self._client = client
        self._topic = client.topic_path(project, topic)
        self._db = db
        self._wait_s = wait_s
        self._outage_until = 0.0
        self._lock = threading.Lock()

    def publish(self, records: Iterable[dict[str, Any]]) -> int:
        """Publish each record; returns how many Pub/Sub took. Never raises:
        what it did not take is kept (`keep`)."""
        records = list(records)
        if not records:
            return 0
        if time.monotonic() < self._outage_until:
            self.keep(records, "outcomes topic out (a recent publish failed)")
            return 0
        pending = []
        for r in records:
            try:
                pending.append((self._send(r), r))
            except Exception as exc:  # noqa: BLE001 - any failure: keep it
                pending.append((exc, r))
        failed: list[dict[str, Any]] = []
        error = ""
        deadline = time.monotonic() + self._wait_s
        for future, r in pending:
            try:
                if isinstance(future, Exception):
                    raise future
                future.result(timeout=max(0.01, deadline - time.monotonic()))
            except Exception as exc:  # noqa: BLE001
                failed.append(r)
                error = f"{type(exc).__name__}: {exc}"[:300]
                try:
                    # A failed ordered publish pauses its key until resumed.
                    self._client.resume_publish(self._topic, r["room_id"])
                except Exception:  # noqa: BLE001, S110 - resuming an unpaused key
                    pass
        if failed:
            self._outage_until = time.monotonic() + OUTAGE_S
            self.keep(failed, error)
        return len(records) - len(failed)

    def _send(self, record: dict[str, Any]) -> Any:
        return self._client.publish(
            self._topic, json.dumps(record, separators=(",", ":")).encode(), ordering_key=record["room_id"],
            outcome=record["outcome"], room_id=record["room_id"], provider=record["provider"] or "",
            message_id=record["message_id"], outcome_id=record["outcome_id"])

    def keep(self, records: list[dict[str, Any]], error: str) -> None:
        """Keep outcomes Pub/Sub did not take in KEPT_OUTCOMES (one blind
        write each); if Firestore fails too, log each whole (ERROR,
        `outcome_not_kept`). Never raises."""
        from datetime import UTC, datetime

        for r in records:
            try:
                self._db.collection(KEPT_OUTCOMES).document(kept_id(r["outcome_id"])).set(
                    {"outcome": r, "error": error, "kept_at": datetime.now(UTC)})
                print(json.dumps({"severity": "WARNING", "message": f"outcome {r['outcome_id']} kept for "
                                  f"`baton outcomes replay`: {error}"[:500]}), flush=True)
            except Exception as exc:  # noqa: BLE001 - the log line is the last record
                print(json.dumps({"severity": "ERROR", "message": "outcome_not_kept", "outcome": r,
                                  "error": f"{error}; Firestore: {type(exc).__name__}: {exc}"[:500]}), flush=True)

    def kept(self, limit: int = 1000) -> list[dict[str, Any]]:
        """The kept outcomes (at most `limit`), oldest first."""
        docs = self._db.collection(KEPT_OUTCOMES).order_by("kept_at").limit(limit).stream()
        return [{"id": d.id, **(d.to_dict() or {})} for d in docs]

    def replay_kept(self, limit: int = 1000, dry_run: bool = False) -> ReplayReport:
        """Publish the kept outcomes again (oldest first, at most `limit`),
        deleting each once Pub/Sub took it; one that fails stays. A replay
        interrupted between a publish and its delete publishes that outcome
        twice (consumers de-duplicate on `outcome_id`).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore failed.
        """
        kept = self.kept(limit)
        if dry_run:
            return ReplayReport(len(kept), 0, 0, True)
        published = failed = 0
        with self._lock:
            for doc in kept:
                record = doc.get("outcome") or {}
                try:
                    self._send(record).result(timeout=self._wait_s)
                except Exception:  # noqa: BLE001 - stays kept
                    failed += 1
                    try:
                        self._client.resume_publish(self._topic, record.get("room_id", ""))
                    except Exception:  # noqa: BLE001, S110
                        pass
                    continue
                self._db.collection(KEPT_OUTCOMES).document(doc["id"]).delete()
                published += 1
        if published:
            self._outage_until = 0.0
        return ReplayReport(len(kept), published, failed, False)
