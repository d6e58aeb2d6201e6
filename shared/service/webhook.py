"""Webhook handlers: Meta's handshake, the signed status webhook in both modes
(`direct` applies here, `queued` publishes to the status queue), receipts by
recipient (Messenger, Instagram).

Verifies and routes; the statuses' effect on a room is statuses.py's.
"""

from __future__ import annotations

import json
from dataclasses import asdict

from shared.events import DeliveryEvent, EventType, utc_iso
from shared.providers.meta_messaging import WEBHOOK_OBJECTS, MessagingItem, parse_messaging
from shared.providers.whatsapp import handshake_challenge, parse_statuses, signature_valid
from shared.room import (
    RecipientReceipt,
    RoomState,
    recipient_key,
)
from shared.service import core
from shared.service.core import Reply, ServiceCore
from shared.status_queue import (
    QueuedStatus,
    RecipientReceipts,
    RoomStatuses,
    Unroutable,
)


class WebhookHandlers(ServiceCore):
    """The `webhook` function."""

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
        arrived = core.now_us()
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
                self._after_commit(room_id, core.decide(RoomState(room_id), event, self.policy, "webhook"), "webhook")
                logged_only += 1
                continue
            by_room.setdefault(room_id, []).append(st)
        batches = [RoomStatuses(room, arrived, tuple(sts)) for room, sts in by_room.items()]
        if batches or unroutable:
            self.status_queue().publish(batches, unroutable)
        return Reply(200, {"statuses": len(statuses), "queued": sum(len(b.statuses) for b in batches),
                           "rooms": len(batches), "logged": logged_only, "unroutable": len(unroutable)})
