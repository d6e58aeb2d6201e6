"""The audit follows the room's rules (pipeline/lifecycle.py's docstring): one
hand-made log per rule that must pass, and beside it one that breaks the rule
and must fail. Before the lifecycle read `skipped`, `parked`, `send_unknown`
and `redriven`, every passing log here was reported out of rule."""

from __future__ import annotations

import pytest

from pipeline import transforms as tf
from tests.pipeline.conftest import acked, enq, ev, line, lines_df, sent

OPS = "ops@example.com"


def audit(spark, log: list[dict]) -> dict:
    """The one room's audit row, and its messages by seq, for a hand-made log."""
    messages = tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in log]))))
    rows = tf.room_summary(messages).collect()
    assert len(rows) == 1
    return {"room": rows[0].asDict(), "messages": {r["seq"]: r.asDict() for r in messages.collect()}}


def skipped(t: float, room: str, seq: int, attempt: int | None = None) -> dict:
    return ev("skipped", t, room, seq, attempt, component="operator", actor=OPS, reason="customer asked")


def parked(t: float, room: str, seq: int) -> dict:
    return ev("parked", t, room, seq, message_id=f"{room}-m{seq}", provider="whatsapp", reason="refused while full")


def redriven(t: float, room: str, seq: int) -> dict:
    return ev("redriven", t, room, seq, component="operator", actor=OPS, reason="fixed")


def unknown(t: float, room: str, seq: int, attempt: int = 1) -> dict:
    return ev("send_unknown", t, room, seq, attempt, reason="possibly sent: held until its ack deadline, then resent")


def dead_lettered(t: float, room: str, seq: int, attempt: int = 1) -> dict:
    return ev("dead_lettered", t, room, seq, attempt, reason="send_attempts_exhausted")


def test_a_queued_message_an_operator_skipped_is_skipped_not_lost(spark):
    got = audit(spark, [enq(0, "r", 1), enq(0, "r", 2), skipped(0.5, "r", 2), sent(1, "r", 1), acked(1.2, "r", 1, 200)])
    m2 = got["messages"][2]
    assert (m2["outcome"], m2["skipped_by"], m2["skip_reason"]) == ("skipped", OPS, "customer asked")
    assert (got["room"]["skipped"], got["room"]["lost"], got["room"]["audit_ok"]) == (1, 0, True)


@pytest.mark.parametrize(("next_send_at", "ok"), [(2.5, True), (1.5, False)])
def test_a_skipped_in_flight_message_ends_its_flight_at_the_skip(spark, next_send_at, ok):
    log = [enq(0, "r", 1), enq(0, "r", 2), sent(1, "r", 1), skipped(2, "r", 1, attempt=1)]
    log += [sent(next_send_at, "r", 2, trigger="skipped"), acked(3, "r", 2, 300)]
    room = audit(spark, log)["room"]
    assert (room["single_in_flight"], room["audit_ok"]) == (ok, ok)
    assert room["in_flight_violations"] == (0 if ok else 1)


def test_a_message_that_entered_parked_and_was_redriven_or_skipped_is_no_gap(spark):
    log = [enq(0, "r", 1), parked(0.1, "r", 2), parked(0.2, "r", 3), enq(0.3, "r", 4)]
    log += [sent(1, "r", 1), acked(1.1, "r", 1, 100), redriven(2, "r", 2), sent(2.1, "r", 2, trigger="redrive")]
    log += [acked(2.2, "r", 2, 100), skipped(3, "r", 3), sent(3.1, "r", 4, trigger="skipped"), acked(3.2, "r", 4, 100)]
    room = audit(spark, log)["room"]
    assert (room["gaps"], room["entered_parked"], room["skipped"], room["acked"]) == (0, 2, 1, 3)
    assert room["audit_ok"]


def test_a_seq_that_never_entered_is_still_a_gap(spark):
    log = [enq(0, "r", 1), parked(0.1, "r", 3), sent(1, "r", 1), acked(1.1, "r", 1, 100), skipped(2, "r", 3)]
    room = audit(spark, log)["room"]
    assert (room["gaps"], room["no_gaps"], room["audit_ok"]) == (1, False, False)


@pytest.mark.parametrize(("next_send_at", "ok"), [(5.0, True), (2.0, False)])
def test_an_attempt_whose_outcome_is_unknown_is_in_flight_until_the_room_ends_or_resends_it(spark, next_send_at, ok):
    # attempt 1's outcome is unknown (no `sent`): it counts as sent from then on
    log = [enq(0, "r", 1), enq(0, "r", 2), unknown(1, "r", 1)]
    log += [ev("resent", 4, "r", 1, 2, trigger="resend"), sent(4, "r", 1, attempt=2, trigger="resend")]
    log += [acked(4.5, "r", 1, 500, attempt=2), sent(next_send_at, "r", 2, trigger="ack"), acked(5.5, "r", 2, 500)]
    got = audit(spark, log)
    assert got["messages"][1]["first_sent_at"] is not None and got["messages"][1]["unknown_sends"] == 1
    assert (got["room"]["in_flight_violations"], got["room"]["audit_ok"]) == (0 if ok else 1, ok)


def test_a_message_dead_lettered_after_an_unknown_outcome_was_in_flight_until_then(spark):
    log = [enq(0, "r", 1), enq(0, "r", 2), unknown(1, "r", 1), sent(2, "r", 2), dead_lettered(4, "r", 1)]
    room = audit(spark, log)["room"]
    assert (room["max_in_flight"], room["audit_ok"]) == (2, False)


@pytest.mark.parametrize(("next_send_at", "ok"), [(4.1, True), (3.2, False)])
def test_an_early_ack_kept_until_the_send_window_closed_is_not_a_violation(spark, next_send_at, ok):
    # attempt 1's ack arrives while attempt 2's call may still go out: the room
    # keeps it (status_ignored) and logs `acked` when the window has closed (4.0)
    log = [enq(0, "r", 1), enq(0, "r", 2), sent(0.5, "r", 1), ev("resent", 3, "r", 1, 2, trigger="resend")]
    log += [sent(3, "r", 1, attempt=2, trigger="resend")]
    log += [
        ev("status_ignored", 3.1, "r", 1, 1, component="webhook", status="delivered", reason="acked_while_resending")
    ]
    log += [acked(4.0, "r", 1, 2600), sent(next_send_at, "r", 2, trigger="ack"), acked(4.5, "r", 2, 400)]
    room = audit(spark, log)["room"]
    assert (room["in_flight_violations"], room["audit_ok"]) == (0 if ok else 1, ok)


def test_a_redriven_dead_letter_lives_again_without_breaking_order_or_ending_twice(spark):
    log = [enq(0, "r", 1), enq(0, "r", 2), enq(0, "r", 3)]
    log += [sent(1, "r", 1), dead_lettered(2, "r", 1), sent(2.1, "r", 2, trigger="dead_lettered")]
    log += [acked(2.5, "r", 2, 400), redriven(3, "r", 1), sent(3.1, "r", 1, attempt=2, trigger="redrive")]
    log += [acked(3.5, "r", 1, 400, attempt=2), sent(3.6, "r", 3, trigger="ack"), acked(4, "r", 3, 400)]
    got = audit(spark, log)
    m1, room = got["messages"][1], got["room"]
    assert (m1["outcome"], m1["redrives"], len(m1["lives"]), m1["terminal_events"]) == ("acked", 1, 2, 2)
    assert (room["ordering_violations"], room["multiple_ends"], room["max_in_flight"]) == (0, 0, 1)
    assert (room["acked"], room["dead_lettered"], room["redrives"], room["audit_ok"]) == (3, 0, 1, True)


def refused_then_dead(room: str, seq: int) -> list[dict]:
    """Every attempt of `seq` refused (nothing possibly sent), then dead-lettered."""
    fails = [ev("send_failed", 1 + 0.2 * a, room, seq, a, reason="transient") for a in (1, 2, 3)]
    return [*fails, dead_lettered(1.7, room, seq, attempt=3)]


@pytest.mark.parametrize(("redriven_first", "ok"), [(True, True), (False, False)])
def test_a_dead_letter_never_sent_and_redriven_after_later_messages_is_not_out_of_order(spark, redriven_first, ok):
    """Found by the operator day (tools/local/operator_day.py) on the emulators: the
    platform refused message 1 three times, message 2 went, then an operator
    redrove 1. Its first send is in its second life, so it is not a first
    send; without the redrive the same late send is out of order."""
    log = [enq(0, "r", 1), enq(0, "r", 2), *refused_then_dead("r", 1)]
    log += [sent(1.8, "r", 2, trigger="dead_lettered"), acked(2, "r", 2, 200)]
    log += [redriven(3, "r", 1)] if redriven_first else []
    log += [sent(3.1, "r", 1, attempt=4, trigger="redrive"), acked(3.3, "r", 1, 200, attempt=4)]
    if not redriven_first:  # the same sends, with no dead letter between: 1 first sent after 2
        log = [e for e in log if e["event"] != "dead_lettered"]
    room = audit(spark, log)["room"]
    assert (room["ordering_violations"], room["sends_in_order"], room["audit_ok"]) == (1 - ok, ok, ok)
    assert room["messages_sent"] == (1 if ok else 2)  # messages sent in their first life


def test_a_redriven_dead_letter_sent_while_another_message_is_in_flight_is_a_violation(spark):
    log = [enq(0, "r", 1), enq(0, "r", 2)]
    log += [sent(1, "r", 1), dead_lettered(2, "r", 1), sent(2.1, "r", 2, trigger="dead_lettered")]
    log += [redriven(2.2, "r", 1), sent(2.3, "r", 1, attempt=2, trigger="redrive"), acked(2.5, "r", 2, 400)]
    log += [acked(3.5, "r", 1, 1200, attempt=2)]
    room = audit(spark, log)["room"]
    assert (room["in_flight_violations"], room["ordering_violations"], room["audit_ok"]) == (1, 0, False)


def test_two_ends_in_one_life_fail_and_an_unended_second_life_is_lost(spark):
    log = [enq(0, "r", 1), sent(1, "r", 1), acked(1.5, "r", 1, 500), ev("timed_out", 4, "r", 1, 1)]
    room = audit(spark, log)["room"]
    assert (room["multiple_ends"], room["one_end_each"], room["audit_ok"]) == (1, False, False)
    log = [enq(0, "r", 1), sent(1, "r", 1), dead_lettered(2, "r", 1), redriven(3, "r", 1), sent(3.1, "r", 1, 2)]
    got = audit(spark, log)
    assert (got["messages"][1]["outcome"], got["room"]["lost"], got["room"]["audit_ok"]) == ("lost", 1, False)
