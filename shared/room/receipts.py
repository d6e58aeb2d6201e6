"""Receipt rules: Messenger's and Instagram's receipts by recipient, which
name no delivery id, judged against the in-flight attempt.

Decides only whether a receipt acks the message holding the baton; statuses
that name an attempt are flight.py's.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.effects import Decision
from shared.room.inputs import RecipientReceipt
from shared.room.state import IgnoreReason, Phase, Trigger, acks
from shared.room.transition import TransitionCore


class ReceiptRules(TransitionCore):
    """Rules for receipts by recipient (`RecipientReceipt`)."""

    def receipt(self, ev: RecipientReceipt) -> Decision:
        """A receipt by recipient (Messenger watermark, Instagram seen): acks
        the in-flight message only if it provably covers it: the watermark is
        at or after the platform's own stamp of this attempt (from its echo,
        `platform_ts_us`), or one of `mids` is the attempt's own id, or (no
        echo yet) the watermark is at least `watermark_margin_ms` past the
        return of its accepted send call. A receipt before the call returned
        and before the echo is remembered by its mids only (a watermark then
        cannot tell our message from the ones before it)."""
        flight = self.state.in_flight
        fields = {"status": ev.status}
        if flight is None or flight.skipped or flight.acked_early is not None:
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.NOT_IN_FLIGHT, provider=ev.provider, **fields)
        msg = flight.message
        if (msg.provider, msg.recipient) != (ev.provider, ev.recipient):
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING, provider=ev.provider,
                               seq=msg.seq, attempt=flight.attempt, **fields)
        if not acks(self.policy.ack_level(msg.provider), ev.status):
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.BELOW_ACK_LEVEL, provider=ev.provider,
                               seq=msg.seq, attempt=flight.attempt, **fields)
        if flight.platform_ts_us is not None and ev.watermark_us is not None \
                and ev.watermark_us >= flight.platform_ts_us:
            # Judged on the platform's own clock: the watermark covers the
            # platform's stamp of this very attempt (its echo).
            return self.done(self.end(self.state, EventType.ACKED, Trigger.ACK, ev.idempotency_key,
                                      status=ev.status, provider_message_id=flight.provider_message_id,
                                      send_to_ack_ms=(ev.seen_at_us - flight.started_at_us) / 1000))
        if flight.phase is Phase.SENDING:
            if not ev.mids:
                return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING,
                                   provider=ev.provider, seq=msg.seq, attempt=flight.attempt, **fields)
            early = tuple(dict.fromkeys((*flight.early_mids, *ev.mids)))[-20:]
            self.log(EventType.STATUS_IGNORED, msg, attempt=flight.attempt,
                     reason="receipt_before_send_returned", **fields)
            return self.done(replace(self.state, in_flight=replace(flight, early_mids=early,
                                                                   early_mids_status=ev.status)))
        by_mid = flight.provider_message_id is not None and flight.provider_message_id in ev.mids
        by_watermark = (flight.phase is Phase.SENT and flight.returned_at_us is not None
                        and ev.watermark_us is not None
                        and ev.watermark_us >= flight.returned_at_us + self.policy.watermark_margin_ms * 1000)
        if not (by_mid or by_watermark):
            return self.ignore(EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING, provider=ev.provider,
                               seq=msg.seq, attempt=flight.attempt, **fields)
        return self.done(self.end(self.state, EventType.ACKED, Trigger.ACK, ev.idempotency_key, status=ev.status,
                                  provider_message_id=flight.provider_message_id,
                                  send_to_ack_ms=(ev.seen_at_us - flight.started_at_us) / 1000))
