"""bench-core's per-phase figures (tools/bench/core.py, phase_acks), on
hand-made events: the acked share of one phase's rooms, and how long an ack
status waited between the webhook and its room."""

from __future__ import annotations

from tools.bench.core import phase_acks


def event(kind: str, room: str, ts: str, seq: int = 1, **kw) -> dict:
    return {"event": kind, "room_id": room, "seq": seq, "attempt": 1, "ts": ts, "reason": kw.pop("reason", None),
            "send_to_ack_ms": kw.pop("send_to_ack_ms", None), **kw}


def test_a_phases_share_and_the_wait_of_its_statuses_from_webhook_to_room():
    events = [
        event("sent", "half-1", "2026-11-24T10:00:00Z"),
        event("acked", "half-1", "2026-11-24T10:00:01.5Z", send_to_ack_ms=500),  # reached the webhook at 0.5 s
        event("sent", "half-2", "2026-11-24T10:00:00Z"),
        event("status_ignored", "half-2", "2026-11-24T10:00:05Z", reason="late_ack", send_to_ack_ms=1000),
        event("timed_out", "half-2", "2026-11-24T10:00:03Z"),
        event("acked", "cap-1", "2026-11-24T10:00:09Z", send_to_ack_ms=1),  # another phase: not counted
    ]
    share, p50, p99 = phase_acks(events, "half-")
    assert share == 0.5  # one acked, one timed out
    # waits: 1.5 - 0.5 = 1.0 s and 5.0 - 1.0 = 4.0 s (the late one waited past its deadline)
    assert abs(p50 - 2.5) < 0.01 and 3.9 < p99 <= 4.0
    assert phase_acks(events[:2], "half-")[1:] == (1.0, 1.0)


def test_a_phase_with_no_ended_message_has_no_share():
    assert phase_acks([event("sent", "light-1", "2026-11-24T10:00:00Z")], "light-")[0] is None
