"""`summarize` judges one run against one shared stack: only the published
rooms' send calls count (the e2e suite's stack is shared, and its fake
platform's stats span every test)."""

from __future__ import annotations

from shared.room import make_delivery_id
from tools.audit import summarize
from tools.publisher import OutboundMessage


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
