"""`summarize` judges one run against one shared stack: only the published
rooms' send calls count (the e2e suite's stack is shared, and its fake
platform's stats span every test)."""

from __future__ import annotations

from shared.room import make_delivery_id
from tools.local.audit import summarize
from tools.local.publisher import OutboundMessage


def send(room: str, seq: int, attempt: int) -> dict:
    return {"callback": make_delivery_id(room, 1, seq, attempt, 1_700_000_000_000_000)}


def test_another_runs_resend_is_not_a_duplicate_of_this_run():
    published = [OutboundMessage("mine", "whatsapp", "15550000001", "mine-m1", "hello")]
    stats = {"sends": [send("mine", 1, 1), send("earlier-test", 1, 1), send("earlier-test", 1, 2)]}
    summary = summarize(published, [], stats, 0.0)
    assert (summary.send_calls, summary.duplicates_sent) == (1, 0)


def test_a_resend_in_this_run_is_a_duplicate():
    published = [OutboundMessage("mine", "whatsapp", "15550000001", "mine-m1", "hello")]
    stats = {"sends": [send("mine", 1, 1), send("mine", 1, 2), send("other", 1, 1)]}
    summary = summarize(published, [], stats, 0.0)
    assert (summary.send_calls, summary.duplicates_sent) == (2, 1)


def ended(event: str, room: str, seq: int, mid: str) -> list[dict]:
    ts = "2026-11-27T10:00:00.000000Z"
    return [{"event": "enqueued", "room_id": room, "seq": seq, "message_id": mid, "ts": ts},
            {"event": event, "room_id": room, "seq": seq, "message_id": mid, "ts": ts}]


def test_a_timed_out_message_the_platform_never_received_is_lost():
    """`lost` is judged from the platform's record (issue 43): a hand-made
    `timed_out` with no send the platform accepted fails the audit."""
    published = [OutboundMessage("mine", "whatsapp", "15550000001", "mine-m1", "hello")]
    summary = summarize(published, ended("timed_out", "mine", 1, "mine-m1"), {"sends": []}, 0.0)
    assert summary.lost == ["mine-m1"] and not summary.ok
    received = summarize(published, ended("timed_out", "mine", 1, "mine-m1"), {"sends": [send("mine", 1, 1)]}, 0.0)
    assert received.lost == [] and received.ok


def test_a_message_that_failed_or_was_dead_lettered_needs_no_send():
    published = [OutboundMessage("mine", "whatsapp", "15550000001", f"mine-m{i}", "hello") for i in (1, 2)]
    events = ended("failed", "mine", 1, "mine-m1") + ended("dead_lettered", "mine", 2, "mine-m2")
    assert summarize(published, events, {"sends": []}, 0.0).lost == []
