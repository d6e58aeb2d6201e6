"""Webhook handlers: Meta's handshake, the signed status webhook in both modes
(`direct` applies here, `queued` publishes to the status queue), receipts by
recipient (Messenger, Instagram).

Verifies and routes; the statuses' effect on a room is statuses.py's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import asdict

from google.api_core import exceptions as gexc

from shared import outbox
from shared.config import Settings
from shared.events import DeliveryEvent, EventType, utc_iso
from shared.opcounts import counted_as
from shared.ports import RoomStore
from shared.providers.graph import handshake_challenge, signature_valid
from shared.providers.meta_messaging import MessagingItem
from shared.providers.registry import (
    PLATFORMS,
    Platform,
    WebhookFormat,
    by_webhook_object,
    parse_receipts,
    parse_statuses,
)
from shared.providers.whatsapp import PlatformStatus
from shared.push import ROOM_ID
from shared.room import (
    ACK_STATUSES,
    IgnoreReason,
    RecipientReceipt,
    RoomState,
    awaits_platform_proof,
    decided_without_room,
    parse_delivery_id,
)
from shared.room_document import recipient_key
from shared.service.core import Reply, ServiceCore
from shared.service.inbound import forward_inbound
from shared.service.sent_proofs import PendingProof, SentProofRecord, after_ack_line
from shared.service.statuses import StatusHandlers
from shared.status_queue import (
    QueuedStatus,
    RecipientReceipts,
    RoomStatuses,
    Unroutable,
)

# One try of at most this long (s) for each read and write of a `sent`
# proof, and at most SENT_PROOF_POST_S for the proofs of one post:
# Firestore answers a read in tens of ms, and a proof is worth less than the
# webhook's answer time.
SENT_PROOF_CALL_S = 1.0
SENT_PROOF_POST_S = 2.0
# A post that comes this soon (us) after the instance's previous one defers
# its `sent` proofs (`note_sent_proofs`): more posts are coming to check them.
PROOF_BUSY_US = 250_000


def note_sent_proofs(record: SentProofRecord, statuses: list[PlatformStatus], arrived: int,
                     send_timeout_ms: int, acks_applied: bool = True) -> None:
    """WHATSAPP_SENT_PROOF=on, first step, no I/O: the `sent` statuses of a
    post (`arrived`, epoch us) whose attempt the instance's own `record`
    (shared/service/sent_proofs.py) does not know to be settled wait there
    for their check.

    `acks_applied` (WEBHOOK_MODE=direct): this instance applies its posts'
    statuses to their rooms itself, and `settle_applied` records what they
    settle once they are applied. So a `sent`, while posts keep coming (the
    previous one less than PROOF_BUSY_US before), waits until
    SEND_TIMEOUT_MS after its attempt's start (its delivery id): its ack,
    usually a fraction of a second behind it, can settle it first, and the
    check still comes before the earliest resend of an unknown outcome
    (ACK_TIMEOUT_MS after the send returned, always longer: config.load).
    Otherwise at once: no later post may come to check it in time.

    Not `acks_applied` (WEBHOOK_MODE=queued): a status here is only
    published; the `status` function applies it later, after Pub/Sub's
    delivery and, when a push fails or its instance dies, after the
    subscription's redelivery, which can be past the room's ack deadline.
    Until then the room holds the attempt as SENDING or UNKNOWN and resends
    it at that deadline unless the `sent` proof is in the room. So every
    `sent` of an attempt not known to be settled is checked at once: a
    queued webhook neither applies acks nor sends, so nothing could settle
    it later, and a proof kept in memory is lost with its instance (`make
    chaos CHAOS_WEBHOOK_MODE=queued` counts the resends that follow a status
    of the earlier attempt: docs/benchmarks.md, Chaos). The price is the
    read of the `sent` status's room per WhatsApp message in queued mode, as
    before the record existed; the default, direct, keeps the savings."""
    busy = record.last_post_us is not None and 0 <= arrived - record.last_post_us < PROOF_BUSY_US
    record.last_post_us = arrived
    for st in statuses:
        if st.status != "sent" or (attempt := _attempt_of(st)) is None or record.is_settled(attempt):
            continue
        started = parse_delivery_id(st.callback_data)[4]
        due = max(arrived, started + send_timeout_ms * 1000) if busy and acks_applied else arrived
        record.wait(PendingProof(attempt, arrived if st.timestamp_s is None else st.timestamp_s * 1_000_000,
                                 st.provider_message_id, st.phone_number_id, due))


def settle_applied(record: SentProofRecord, statuses: list[PlatformStatus]) -> None:
    """WHATSAPP_SENT_PROOF=on, WEBHOOK_MODE=direct, once this request has
    applied `statuses` to their rooms (not before: a post that fails is sent
    again by the platform, maybe after the room's ack deadline, and its
    waiting `sent` proof must still come): a `delivered` or `read` settles
    every attempt of its message, a `failed` its attempt."""
    for st in statuses:
        if st.status in ACK_STATUSES or st.status == "failed":
            attempt = _attempt_of(st)
            if attempt is not None and st.status == "failed":
                record.settle(attempt)
            elif attempt is not None:
                record.settle_message(*attempt[:3])


def _attempt_of(st: PlatformStatus) -> tuple[str, int, int, int] | None:
    """The (room, incarnation, seq, attempt) a status's delivery id names, or
    None when it is not baton's (logged as `status_unknown` where it is routed)."""
    try:
        room_id, incarnation, seq, attempt, _ = parse_delivery_id(st.callback_data or "")
    except ValueError:
        return None
    return (room_id, incarnation, seq, attempt) if ROOM_ID.fullmatch(room_id) else None


def check_due_proofs(record: SentProofRecord, store: RoomStore, now: int,
                     monotonic: Callable[[], float] = time.monotonic) -> None:
    """`WebhookHandlers._record_sent_proofs`' work, on `record` and `store`;
    `monotonic` (seconds) measures the SENT_PROOF_POST_S budget."""
    rooms: dict[str, RoomState | None] = {}
    give_up_at = monotonic() + SENT_PROOF_POST_S
    for proof in record.take_due(now):
        room_id, incarnation, seq, attempt = proof.attempt
        try:
            if monotonic() > give_up_at:
                raise TimeoutError(f"the proofs of this post took over {SENT_PROOF_POST_S} s")
            if room_id not in rooms:
                rooms[room_id] = store.read_room(room_id, deadline_s=SENT_PROOF_CALL_S)
            state = rooms[room_id]
            if state is None or not awaits_platform_proof(state, incarnation, seq, attempt, proof.number):
                continue
            store.record_echo(room_id, incarnation, seq, attempt, proof.platform_ts_us,
                              proof.provider_message_id, number=proof.number, deadline_s=SENT_PROOF_CALL_S)
            rooms[room_id] = None  # proven: a repeat of this `sent` in the post writes nothing more
        except (gexc.GoogleAPICallError, gexc.RetryError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            # ValueError, KeyError, TypeError: a room document room_as_read cannot read.
            print(json.dumps({"severity": "ERROR", "message": f"webhook: room {room_id}: the `sent` proof of "
                              f"#{seq} attempt {attempt} was not written, nor any later one of this post: "
                              f"{type(exc).__name__}: {exc}"[:500]}), flush=True)
            return

# One try of at most this long (s) for the read of an echo's room: only a
# receipt kept from before the echo waits on it (`_record_echo`).
ECHO_READ_S = 1.0


class WebhookHandlers:
    """The `webhook` function: parses and verifies a post, then routes its
    statuses and receipts through the status handlers it holds.

    Args:
        core: the rooms' transactions, the settings, the event log and the
            instance's `sent` proof record (shared/service/core.py).
        statuses: routes and applies statuses and receipts (statuses.py).
    """

    def __init__(self, core: ServiceCore, statuses: StatusHandlers) -> None:
        self.core = core
        self.statuses = statuses

    def handle_handshake(self, args: dict[str, str]) -> Reply:
        """Meta's GET verification of the webhook URL."""
        challenge = handshake_challenge(args, self.core.settings.whatsapp_verify_token)
        if challenge is None:
            return Reply(403, {"error": "verify token mismatch"})
        return Reply(200, {"challenge": challenge})

    def handle_status_webhook(self, raw: bytes, signature: str | None) -> Reply:
        """A signed status webhook: 401 on a bad signature (nothing changes),
        400 on a body of the wrong shape. Then, by WEBHOOK_MODE: `queued`
        publishes the statuses to the status queue and answers 200 without a
        room transaction (`StatusPublishFailed` if Pub/Sub does not take
        them: the entry point answers 503); `direct` applies every status
        here (raises what the store raises, after applying the other rooms').
        In both, with WHATSAPP_SENT_PROOF on, a `sent` status of an attempt
        this instance does not know to be settled costs, once it is due, a
        read of its room and sometimes a blind write, best effort and bounded
        in time (`note_sent_proofs`, `_record_sent_proofs`).

        Which app signed it: the payload's `object` names the platform
        (`by_webhook_object`, shared/providers/registry.py), and only that
        platform's app secret is tried, so
        one Meta app serving WhatsApp and Messenger with one secret works. A
        payload that names no enabled platform (no JSON, no `object`, a list
        there) is checked against every enabled app's secret: 401 if none
        signed it, else 400 (a body without `object` is read in the signing
        app's own format)."""
        arrived = self.core.now_us()
        try:
            payload = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            payload = None
        claimed = payload.get("object") if isinstance(payload, dict) else None
        settings = self.core.settings
        named = by_webhook_object(claimed)
        if named is not None and named.name in settings.enabled_providers:
            if not signed_by(settings, named, raw, signature):
                return Reply(401, {"error": f"bad or missing X-Hub-Signature-256 for the {named.name} app"})
            platform = named
        else:
            app = signing_app(settings, raw, signature)
            if app is None:
                return Reply(401, {"error": "bad or missing X-Hub-Signature-256"})
            if not isinstance(payload, dict) or "object" in payload:
                shown = claimed if isinstance(payload, dict) else None
                return Reply(400, {"error": f"not a status webhook: `object` {str(shown)[:80]!r} names no "
                                            f"platform enabled here (PROVIDERS)"})
            platform = app  # no `object`: read it as the signing app's own format (its parser then judges it)
        try:
            # What baton does not consume goes to the inbound topic first (503 if it cannot: shared/service/inbound.py).
            forward_inbound(self.core.inbound, platform.name, payload, raw, signature, arrived)
            if platform.webhook_format is WebhookFormat.RECEIPTS:
                return self._apply_receipts(parse_receipts(payload), arrived)
            statuses = parse_statuses(payload)
        except (ValueError, TypeError, AttributeError, KeyError, UnicodeDecodeError) as exc:
            return Reply(400, {"error": f"not a status webhook: {type(exc).__name__}: {exc}"[:300]})
        ours = self.core.sender_rates  # this deployment's numbers
        for st in statuses:
            if st.phone_number_id is not None and st.phone_number_id not in ours:
                # Meta posts every number of the app's business accounts to one
                # URL: a number baton does not send from has no message of ours.
                self.core.events.emit(DeliveryEvent(
                    EventType.STATUS_IGNORED, utc_iso(arrived), "webhook", None, provider=platform.name,
                    status=st.status, provider_message_id=st.provider_message_id,
                    reason=f"{IgnoreReason.OTHER_SENDER}: {st.phone_number_id[:20]}"))
        mine = [st for st in statuses if st.phone_number_id is None or st.phone_number_id in ours]
        if settings.sent_proof:
            note_sent_proofs(self.core.sent_proofs, mine, arrived, self.core.policy.send_timeout_ms,
                             settings.webhook_mode == "direct")
        queued = [QueuedStatus(st.callback_data or "", st.status, platform.name, st.provider_message_id,
                               st.error_code, st.error_title, st.phone_number_id) for st in mine]
        if settings.webhook_mode == "queued":
            reply = self._queue_statuses(queued, arrived)
        else:
            known = [self._logged_after_own_ack(st) for st in mine]  # no room read for what cannot change it
            acked_before = outbox.acked_here()
            applied = self.statuses.apply_statuses([q for q, k in zip(queued, known, strict=True) if not k], None,
                                                   arrived, "webhook")
            reply = Reply(200, {"statuses": len(statuses), "applied": applied + sum(known)})
            self.core.sent_proofs.acks_applied([a for st in mine if st.status in ACK_STATUSES and (a := _attempt_of(st))],
                                               outbox.acked_here() - acked_before, self.core.now_us())
            if settings.sent_proof:
                settle_applied(self.core.sent_proofs, mine)
        if settings.sent_proof:
            self._record_sent_proofs(self.core.now_us())
        return reply

    def _logged_after_own_ack(self, st: PlatformStatus) -> bool:
        """WEBHOOK_MODE=direct: a status other than `sent` of an attempt
        whose ack this instance applied (`SentProofRecord.applied_ack`)
        cannot change its room, which would answer it `status_ignored`,
        reason `after_acked`: that line is logged here, the same fields,
        without the room's read (True); else False, and the status is
        applied to its room."""
        now, attempt = self.core.now_us(), _attempt_of(st)
        if st.status == "sent" or attempt is None or not self.core.sent_proofs.applied_ack(attempt, now):
            return False
        self.core.events.emit(after_ack_line(attempt, st.status, st.provider_message_id, now))
        return True

    def _record_sent_proofs(self, now: int) -> None:
        """WHATSAPP_SENT_PROOF=on, second step, after the post's statuses:
        each proof due by `now` (epoch us) and still unsettled records its
        attempt as taken by the platform in its room, when the attempt's send
        outcome is not known to be accepted (SENDING or UNKNOWN,
        `awaits_platform_proof`), as an echo does (`RoomStore.record_echo`,
        one blind write). Each room named is read once (`RoomStore.read_room`);
        an attempt this instance knows is settled costs nothing. The stamp is
        the status's `timestamp` (s), or its arrival (epoch us) without one.
        Without this, an attempt whose send outcome was unknown (a connection
        dropped after the request was read) is sent again after its ack
        timeout when no `delivered` or `read` came.

        Not one transaction: a room that moves on in between gets a stale
        entry (docs/architecture.md, "Writes outside the transaction").

        Best effort: each read and write is one try of at most
        SENT_PROOF_CALL_S, and the proofs of one post stop once they have
        taken SENT_PROOF_POST_S; the first call that fails, or a room
        document that does not parse, is logged (ERROR) and ends the proofs
        of this post (the due ones are dropped), and the statuses go on. A
        lost proof only brings back the resend it would have saved, while a
        503 or a 500 would hold every room's statuses in this post until
        Meta sends it again, and retries would hold the answer.
        """
        with counted_as("proof"):  # the proof's share of this request's counts (bench-core, make cost)
            check_due_proofs(self.core.sent_proofs, self.core.store, now, self.core.monotonic)

    def _record_echo(self, item: MessagingItem, arrived: int) -> RecipientReceipt | None:
        """Record an echo's platform stamp for the attempt its metadata names
        (nothing for an echo without baton's delivery id or stamp). Then one
        read of its room (best effort, one try of at most ECHO_READ_S): if
        that attempt keeps the watermark of a receipt that came before both
        its send's return and this echo (`InFlight.early_watermark_us`),
        returns that receipt again, to be judged now that the stamp is known
        (the room's receipt rule, with its usual strictness); else None.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: the blind write
                failed (the entry point answers 503 and Meta sends it again).
        """
        if item.metadata is None or item.timestamp_ms is None:
            return None
        try:
            room_id, incarnation, seq, attempt, _ = parse_delivery_id(item.metadata)
        except ValueError:
            return None
        if not ROOM_ID.fullmatch(room_id):
            return None
        self.core.store.record_echo(room_id, incarnation, seq, attempt, item.timestamp_ms * 1000,
                               item.mids[0] if item.mids else None)
        try:
            state = self.core.store.read_room(room_id, deadline_s=ECHO_READ_S)
        except (gexc.GoogleAPICallError, gexc.RetryError, TimeoutError, ValueError, KeyError, TypeError) as exc:
            # Lost, the kept receipt is judged by a later receipt, or the ack timeout ends the wait.
            print(json.dumps({"severity": "ERROR", "message": f"webhook: room {room_id}: the echo of #{seq} attempt "
                              f"{attempt} was recorded, its room not read: {type(exc).__name__}: {exc}"[:500]}),
                  flush=True)
            return None
        flight = None if state is None else state.in_flight
        if state is None or flight is None or state.incarnation != incarnation or flight.message.seq != seq \
                or flight.attempt != attempt or flight.early_watermark_us is None \
                or flight.early_watermark_status is None:
            return None
        return RecipientReceipt(flight.message.provider, flight.message.recipient, flight.early_watermark_status,
                                flight.early_watermark_us, (), arrived)

    def _apply_receipts(self, items: list[MessagingItem], arrived: int) -> Reply:
        """Messenger and Instagram webhooks: an echo of our own send that
        names its attempt (Messenger's `metadata`, our delivery id) records
        the platform's stamp of it in its room (`RoomStore.record_echo`, one
        blind write, in both modes: what a watermark is judged against), and
        reads the room once: a receipt the attempt kept from before the echo
        is judged again with it (`_record_echo`);
        other echoes and messages people wrote are logged and ignored; each
        receipt goes to the rooms whose in-flight message is for its
        recipient. `direct` applies them here; `queued` publishes one
        status-queue message per recipient (ordering key
        `recipient:{provider}:{id}`) for the `status` function."""
        receipts: list[RecipientReceipt] = []
        for item in items:
            if item.kind == "echo" and (kept := self._record_echo(item, arrived)) is not None:
                receipts.append(kept)
            if item.kind not in ("delivery", "read"):
                self.core.events.emit(DeliveryEvent(EventType.STATUS_IGNORED, utc_iso(arrived), "webhook", None,
                                               provider=item.provider, reason=f"{item.kind}_webhook",
                                               provider_message_id=item.mids[0] if item.mids else None))
                continue
            receipts.append(RecipientReceipt(item.provider, item.user_id,
                                             "delivered" if item.kind == "delivery" else "read",
                                             None if item.watermark_ms is None else item.watermark_ms * 1000,
                                             item.mids, arrived))
        if self.core.settings.webhook_mode == "queued":
            by_key: dict[str, list[RecipientReceipt]] = {}
            for r in receipts:
                by_key.setdefault(recipient_key(r.provider, r.recipient), []).append(r)
            if by_key:
                self.core.status_queue().publish([], [], [RecipientReceipts.of(k, arrived, rs) for k, rs in by_key.items()])
            return Reply(200, {"receipts": len(items), "queued": len(receipts)})
        applied = self.statuses.apply_receipt_events(receipts, "webhook")
        return Reply(200, {"receipts": len(items), "applied": applied})

    def _queue_statuses(self, statuses: list[QueuedStatus], arrived: int) -> Reply:
        """Queued mode: one status-queue message per room, in payload order;
        statuses without a room go to the error queue with their reason."""
        by_room: dict[str, list[QueuedStatus]] = {}
        unroutable: list[Unroutable] = []
        logged_only = 0
        for st in statuses:
            routed = self.statuses.route(st, arrived, "webhook")
            if routed is None:
                unroutable.append(Unroutable("no baton delivery id", {"received_at_us": arrived, **asdict(st)}))
                continue
            room_id, event = routed
            if decided_without_room(event):  # a `sent`: changes nothing in the room (WITHOUT_ROOM),
                # decided without the room's state, logged here, not queued.
                self.core.apply_without_state(room_id, event, "webhook")
                logged_only += 1
                continue
            by_room.setdefault(room_id, []).append(st)
        batches = [RoomStatuses(room, arrived, tuple(sts)) for room, sts in by_room.items()]
        if batches or unroutable:
            self.core.status_queue().publish(batches, unroutable)
        return Reply(200, {"statuses": len(statuses), "queued": sum(len(b.statuses) for b in batches),
                           "rooms": len(batches), "logged": logged_only, "unroutable": len(unroutable)})


def signed_by(settings: Settings, platform: Platform, raw: bytes, signature: str | None) -> bool:
    """Whether `platform`'s app secret signed `raw` (X-Hub-Signature-256)."""
    secret = platform.app_secret(settings)
    return bool(secret) and signature_valid(raw, signature, secret)


def signing_app(settings: Settings, raw: bytes, signature: str | None) -> Platform | None:
    """The first enabled platform (registry order) whose app secret signed `raw`, or None."""
    for platform in PLATFORMS:
        if platform.name in settings.enabled_providers and signed_by(settings, platform, raw, signature):
            return platform
    return None
