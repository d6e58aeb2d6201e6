"""Receipt rules: Messenger's and Instagram's receipts by recipient, which
name no delivery id, judged against the in-flight attempt.

A receipt acks the in-flight message only if it provably covers it: the
watermark covers the platform's own stamp of this attempt (from its echo,
`platform_ts_us`; a delivery watermark strictly after it, a read watermark
at or after it: `watermark_covers`), or one of `mids` is the attempt's own
id, or (no echo yet) the watermark covers the return of its accepted send
call plus `watermark_margin_ms` the same way. A receipt before the call
returned and before the echo is kept: its mids (judged when the call
returns with its id) and its watermark (judged when the echo's stamp is
known: at the call's return, or when the echo comes, `kept_watermark_acks`).

Decides only whether a receipt acks the message holding the baton; statuses
that name an attempt are flight.py's.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.context import (
    Transition,
    log,
)
from shared.room.effects import Decision
from shared.room.inputs import RecipientReceipt
from shared.room.state import IgnoreReason, InFlight, Phase, RoomState, Trigger, acks, watermark_covers
from shared.room.transition import done, end, ignore


def receipt(t: Transition, ev: RecipientReceipt) -> Decision:
    """A receipt by recipient (Messenger watermark, Instagram seen): acks
    the in-flight message only if it provably covers it (the module's
    docstring says how); one that came before the send call returned is
    kept (`_keep_before_return`), one after is judged (`_judge_after_return`)."""
    flight = t.state.in_flight
    fields = {"status": ev.status}
    if flight is None or flight.skipped or flight.acked_early is not None:
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.NOT_IN_FLIGHT, provider=ev.provider, **fields)
    msg = flight.message
    if (msg.provider, msg.recipient) != (ev.provider, ev.recipient):
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING, provider=ev.provider,
                      seq=msg.seq, attempt=flight.attempt, **fields)
    if not acks(t.policy.ack_level(msg.provider), ev.status):
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.BELOW_ACK_LEVEL, provider=ev.provider,
                      seq=msg.seq, attempt=flight.attempt, **fields)
    if flight.platform_ts_us is not None and ev.watermark_us is not None \
            and watermark_covers(ev.status, ev.watermark_us, flight.platform_ts_us):
        # Judged on the platform's own clock: the watermark covers the
        # platform's stamp of this very attempt (its echo).
        return done(t, ack_by_receipt(t, t.state, ev.status, ev.idempotency_key, ev.seen_at_us))
    if flight.phase is Phase.SENDING:
        return _keep_before_return(t, ev, flight)
    return _judge_after_return(t, ev, flight)


def _keep_before_return(t: Transition, ev: RecipientReceipt, flight: InFlight) -> Decision:
    """A receipt before the send call returned: its mids are kept (judged
    when the call returns with its id) and, no echo yet, its watermark
    (judged when the echo's stamp is known)."""
    fields = {"status": ev.status}
    if not ev.mids and (ev.watermark_us is None or flight.platform_ts_us is not None):
        return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING, provider=ev.provider,
                      seq=flight.message.seq, attempt=flight.attempt, **fields)
    if ev.mids:
        early = tuple(dict.fromkeys((*flight.early_mids, *ev.mids)))[-20:]
        flight = replace(flight, early_mids=early, early_mids_status=ev.status)
    if ev.watermark_us is not None and flight.platform_ts_us is None:
        flight = keep_watermark(flight, ev.status, ev.watermark_us)
    log(t, EventType.STATUS_IGNORED, flight.message, attempt=flight.attempt,
        reason="receipt_before_send_returned", **fields)
    return done(t, replace(t.state, in_flight=flight))


def _judge_after_return(t: Transition, ev: RecipientReceipt, flight: InFlight) -> Decision:
    """A receipt after the send call returned acks the message if a mid is
    its id, or (SENT, no echo yet) the watermark covers the return plus
    WATERMARK_MARGIN_MS; a watermark not provable yet is kept until the
    echo's stamp comes; otherwise ignored."""
    fields = {"status": ev.status}
    by_mid = flight.provider_message_id is not None and flight.provider_message_id in ev.mids
    by_watermark = (flight.phase is Phase.SENT and flight.returned_at_us is not None
                    and ev.watermark_us is not None
                    and watermark_covers(ev.status, ev.watermark_us,
                                         flight.returned_at_us + t.policy.watermark_margin_ms * 1000))
    if by_mid or by_watermark:
        return done(t, ack_by_receipt(t, t.state, ev.status, ev.idempotency_key, ev.seen_at_us))
    if ev.watermark_us is not None and flight.platform_ts_us is None and flight.phase is Phase.SENT:
        kept = keep_watermark(flight, ev.status, ev.watermark_us)
        if kept != flight:
            log(t, EventType.STATUS_IGNORED, flight.message, attempt=flight.attempt,
                reason=f"{IgnoreReason.RECEIPT_COVERS_NOTHING}: kept until the echo's stamp", **fields)
            return done(t, replace(t.state, in_flight=kept))
    return ignore(t, EventType.STATUS_IGNORED, IgnoreReason.RECEIPT_COVERS_NOTHING, provider=ev.provider,
                  seq=flight.message.seq, attempt=flight.attempt, **fields)


def ack_by_receipt(t: Transition, state: RoomState, status: str, cause: str, seen_at_us: int) -> RoomState:
    """End the in-flight message as acked by a receipt seen at `seen_at_us`."""
    flight = state.in_flight
    assert flight is not None
    return end(t, state, EventType.ACKED, Trigger.ACK, cause, status=status,
               provider_message_id=flight.provider_message_id,
               send_to_ack_ms=(seen_at_us - flight.started_at_us) / 1000)


def keep_watermark(flight: InFlight, status: str, watermark_us: int) -> InFlight:
    """`flight` keeping the receipt watermark that covers most: a read
    watermark W covers stamps up to W, a delivery watermark up to W - 1 us."""
    def reach(st: str | None, wm: int | None) -> int:
        return -1 if wm is None else wm if st == "read" else wm - 1

    if reach(status, watermark_us) <= reach(flight.early_watermark_status, flight.early_watermark_us):
        return flight
    return replace(flight, early_watermark_us=watermark_us, early_watermark_status=status)


def kept_watermark_acks(flight: InFlight) -> bool:
    """Whether the watermark kept from a receipt that came before the echo
    (`InFlight.early_watermark_us`) covers the echo's stamp, now known."""
    return (flight.platform_ts_us is not None and flight.early_watermark_us is not None
            and flight.early_watermark_status is not None
            and watermark_covers(flight.early_watermark_status, flight.early_watermark_us, flight.platform_ts_us))
