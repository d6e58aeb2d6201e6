"""Status handlers: the status queue's push (queued mode), and applying
statuses and receipts by recipient to their rooms (both modes).

Applies platform statuses to rooms; must not verify signatures (webhook.py).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import replace

from shared import outbox
from shared.events import DeliveryEvent, EventType, utc_iso
from shared.push import ROOM_ID
from shared.room import (
    RecipientReceipt,
    StatusUpdate,
    decided_without_room,
    parse_delivery_id,
)
from shared.room_document import recipient_key
from shared.service.core import TRANSIENT_ERRORS, Reply, ServiceCore
from shared.status_queue import (
    KIND_RECIPIENT_RECEIPTS,
    KIND_ROOM_STATUSES,
    QueuedStatus,
    RecipientReceipts,
    RoomStatuses,
    Unroutable,
)


class StatusHandlers:
    """Statuses and receipts applied to rooms: the `status` function's push,
    and what the webhook (webhook.py) calls to route and apply statuses and
    receipts in direct mode.

    Args:
        core: applies each event to its room (shared/service/core.py).
    """

    def __init__(self, core: ServiceCore) -> None:
        self.core = core

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
        arrived = self.core.now_us()
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
            self.core.status_queue().publish([], [Unroutable(reason, record)])
            print(json.dumps({"severity": "ERROR", "message": f"status: kept in the error queue: {reason}"}), flush=True)
            return Reply(200, {"result": "kept", "error": reason})
        try:
            if receipts is not None:
                # Decided now, not at the receive time: the room's next send is
                # due within SEND_START_DEADLINE_MS of its decision.
                decided = self.core.now_us()
                applied = self.apply_receipt_events(
                    [replace(r, at_us=decided, received_at_us=r.at_us) for r in receipts.events()], "status")
            else:
                applied = self.apply_statuses(list(batch.statuses), batch.room_id, batch.received_at_us, "status")
        except TRANSIENT_ERRORS:
            raise  # 503: retried with backoff for as long as it takes, never dead-lettered by us
        except Exception as exc:  # noqa: BLE001 - a bug or data the code cannot handle: counted, then moved aside
            reason = f"{type(exc).__name__}: {exc}"[:500]
            pubsub_id = str(message.get("messageId") or message.get("message_id") or "")
            failures = self.core.status_queue().record_failure(pubsub_id, batch.room_id, reason)
            print(json.dumps({"severity": "ERROR", "message": f"status: room {batch.room_id}: delivery {failures} of "
                                                              f"message {pubsub_id} failed: {reason}"}), flush=True)
            if failures < self.core.settings.status_max_attempts:
                raise
            self.core.status_queue().dead_letter(base64.b64decode(message["data"]), batch.room_id, reason, failures,
                                            KIND_RECIPIENT_RECEIPTS if receipts is not None else KIND_ROOM_STATUSES)
            self.core.events.emit(DeliveryEvent(EventType.STATUS_DEAD_LETTERED, utc_iso(self.core.now_us()), "status",
                                           batch.room_id, reason=f"failed {failures} times: {reason}"[:500]))
            return Reply(200, {"result": "dead_lettered", "attempts": failures, "error": reason})
        return Reply(200, {"result": "ok", "statuses": len(batch.statuses), "applied": applied})

    def route(self, st: QueuedStatus, arrived: int, component: str) -> tuple[str, StatusUpdate] | None:
        """The room and event a status is for, or None (logged as
        `status_unknown`) when it carries no baton delivery id."""
        try:
            room_id, incarnation, seq, attempt, sent_at_us = parse_delivery_id(st.delivery_id)
            if not ROOM_ID.fullmatch(room_id):
                raise ValueError(room_id)
        except ValueError:
            self.core.events.emit(DeliveryEvent(EventType.STATUS_UNKNOWN, utc_iso(arrived), component, None,
                                           provider=st.provider, provider_message_id=st.provider_message_id,
                                           status=st.status, reason="no baton delivery id"))
            return None
        decided = self.core.now_us()
        return room_id, StatusUpdate(incarnation, seq, attempt, st.status, sent_at_us, decided,
                                     st.provider_message_id, st.error_code, st.error_title,
                                     received_at_us=arrived if arrived < decided else None,
                                     sender=st.sender)

    def apply_statuses(self, statuses: list[QueuedStatus], room_id: str | None, arrived: int, component: str) -> int:
        """Apply statuses in order, each in its room's transaction; returns how
        many were applied. `room_id`: the room they must all be for (status
        queue), or None (direct webhook: any rooms). One room's trouble (any
        error, even a document `room_as_read` cannot read) does not hold the
        others back: each is logged with its reason, all are tried, then one
        failure is raised (`_first_to_raise`; a redelivery repeats the
        applied ones as duplicates, which change nothing)."""
        applied = 0
        failures: list[Exception] = []
        for st in statuses:
            routed = self.route(st, arrived, component)
            if routed is None:
                continue
            target, event = routed
            if room_id is not None and target != room_id:
                self.core.events.emit(DeliveryEvent(EventType.STATUS_UNKNOWN, utc_iso(arrived), component, room_id,
                                               provider=st.provider, provider_message_id=st.provider_message_id,
                                               status=st.status, reason=f"delivery id of another room: {target}"))
                continue
            if decided_without_room(event):  # a `sent` status: every phase's row leaves the room as it is
                self.core.apply_without_state(target, event, component)
                continue
            try:
                self.core.apply(target, event, component)
            except Exception as exc:  # noqa: BLE001 - one room's trouble stops no other room's statuses
                _log_room_failure(component, target, exc)
                failures.append(exc)
                continue
            applied += 1
        if failures:
            raise _first_to_raise(failures)
        return applied

    def apply_receipt_events(self, receipts: list[RecipientReceipt], component: str) -> int:
        """Apply each receipt to the rooms sending to its recipient, and to
        the room whose last write applied this same receipt
        (`RoomStore.rooms_for_receipt`: one query); returns how many room
        events were applied. Raises what the store raises, after trying
        every receipt (a redelivery repeats the applied ones, which then
        change nothing).

        Each room's transaction runs under `outbox.applying_receipt`: its
        write stores the receipt's digest (the document's `outbox.RECEIPT`),
        so a redelivery finds the room even when the receipt acked its last
        message (idle, `in_flight_to` null) and its process died before
        logging the ack; that read logs the write's lines (shared/outbox.py)."""
        applied, failures = 0, []
        for receipt in receipts:
            rooms = self.core.store.rooms_for_receipt(recipient_key(receipt.provider, receipt.recipient),
                                                      outbox.receipt_digest(receipt.idempotency_key))
            if not rooms:
                self.core.events.emit(DeliveryEvent(EventType.STATUS_UNKNOWN, utc_iso(receipt.at_us), component, None,
                                               provider=receipt.provider, status=receipt.status,
                                               reason="no room has a message in flight to this recipient"))
            for room_id in rooms:
                try:
                    with outbox.applying_receipt(receipt.idempotency_key):
                        self.core.apply(room_id, receipt, component)
                    applied += 1
                except Exception as exc:  # noqa: BLE001 - one room's trouble stops no other room's receipt
                    _log_room_failure(component, room_id, exc)
                    failures.append(exc)
        if failures:
            raise _first_to_raise(failures)
        return applied


def _log_room_failure(component: str, room_id: str, exc: Exception) -> None:
    """Keep one room's failure visible (ERROR, with its reason) while the
    other rooms' statuses go on."""
    print(json.dumps({"severity": "ERROR", "message": f"{component}: room {room_id}: a status was not applied: "
                      f"{type(exc).__name__}: {exc}"[:500]}), flush=True)


def _first_to_raise(failures: list[Exception]) -> Exception:
    """The failure a request raises after trying every room: the first
    transient one (503: redelivered, never counted toward a dead letter),
    else the first (500; the status queue counts it, STATUS_MAX_ATTEMPTS)."""
    return next((f for f in failures if isinstance(f, TRANSIENT_ERRORS)), failures[0])
