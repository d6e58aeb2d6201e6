"""One row per message: how each hand-written message went (expected values worked out by hand)."""

from __future__ import annotations

from datetime import datetime

from pyspark.testing import assertDataFrameEqual

from pipeline import transforms as tf
from tests.pipeline.conftest import line, lines_df, scenario

COLS = "room_id string, seq long, outcome string, sends long, resends long, attempts long, send_failures long, terminal_events long, head_of_line_wait_ms double, in_flight_ms double, send_to_ack_ms double, late_ack_ms double, ack_latency_ms double"


def messages(spark):
    return tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in scenario()]))))


def test_each_message_lifecycle(spark):
    got = messages(spark).select(*[c.split()[0] for c in COLS.split(", ")])
    expected = spark.createDataFrame(
        [
            ("in-order", 1, "acked", 1, 0, 1, 0, 1, 1000.0, 500.0, 500.0, None, 500.0),
            ("in-order", 2, "acked", 1, 0, 1, 0, 1, 1400.0, 400.0, 400.0, None, 400.0),
            ("in-order", 3, "timed_out", 1, 0, 1, 0, 1, 1800.0, 3000.0, None, 4000.0, 4000.0),
            ("resend", 1, "acked", 2, 1, 2, 0, 1, 1000.0, 3300.0, 300.0, None, 300.0),
            ("lost", 1, "acked", 1, 0, 1, 0, 1, 500.0, 300.0, 300.0, None, 300.0),
            ("lost", 2, "lost", 0, 0, None, 0, 0, None, None, None, None, None),
            ("two-in-flight", 1, "acked", 1, 0, 1, 0, 1, 1000.0, 1000.0, 1000.0, None, 1000.0),
            ("two-in-flight", 2, "acked", 1, 0, 1, 0, 1, 1400.0, 1500.0, 1500.0, None, 1500.0),
            ("out-of-order", 1, "acked", 1, 0, 1, 0, 1, 2000.0, 500.0, 500.0, None, 500.0),
            ("out-of-order", 2, "acked", 1, 0, 1, 0, 1, 900.0, 500.0, 500.0, None, 500.0),
            ("gap", 1, "acked", 1, 0, 1, 0, 1, 1000.0, 200.0, 200.0, None, 200.0),
            ("gap", 2, "acked", 1, 0, 1, 0, 1, 1200.0, 200.0, 200.0, None, 200.0),
            ("gap", 4, "acked", 1, 0, 1, 0, 1, 1400.0, 200.0, 200.0, None, 200.0),
            ("ends", 1, "failed", 1, 0, 1, 0, 1, 1000.0, 400.0, None, None, None),
            ("ends", 2, "dead_lettered", 0, 0, None, 1, 1, None, None, None, None, None),
        ],
        COLS,
    )
    assertDataFrameEqual(got, expected)


def test_times_reasons_and_first_send(spark):
    rows = {(r["room_id"], r["seq"]): r for r in messages(spark).collect()}
    resend = rows[("resend", 1)]
    assert resend["first_sent_at"] == datetime(2026, 11, 22, 10, 0, 1)
    assert resend["last_sent_at"] == datetime(2026, 11, 22, 10, 0, 4)
    assert resend["first_send_trigger"] == "enqueue"  # the first send, not the resend
    assert rows[("in-order", 2)]["first_send_trigger"] == "ack"
    assert rows[("ends", 1)]["error_code"] == 131026
    assert rows[("ends", 1)]["error_title"] == "Message undeliverable"
    assert rows[("ends", 2)]["dead_letter_reason"] == "send_attempts_exhausted"
    assert rows[("in-order", 1)]["message_id"] == "in-order-m1"
    assert rows[("lost", 2)]["ended_at"] is None


def test_duplicate_terminal_event_counts_but_first_end_wins(spark):
    from tests.pipeline.conftest import acked, enq, sent, timed_out

    log = [enq(0.0, "r", 1), sent(1.0, "r", 1), timed_out(4.0, "r", 1), acked(5.0, "r", 1, 4000.0)]
    row = tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in log])))).first()
    assert (row["outcome"], row["terminal_events"], row["in_flight_ms"]) == ("timed_out", 2, 3000.0)


def test_totals_by_provider(spark):
    """Acked share, timeouts and ack latency per platform, worked out by hand."""
    from tests.pipeline.conftest import acked, ev, timed_out

    def on(provider: str, t: float, room: str, seq: int) -> list[dict]:
        return [
            ev("enqueued", t, room, seq, message_id=f"{room}-{seq}", provider=provider),
            ev("sent", t + 0.1, room, seq, 1, provider=provider, trigger="enqueue"),
        ]

    log = on("whatsapp", 0, "w", 1) + [acked(0.6, "w", 1, 500.0)] + on("whatsapp", 1, "w", 2) + [timed_out(4.1, "w", 2)]
    for i, ms in enumerate((100.0, 200.0, 300.0), start=1):
        log += on("messenger", 10 * i, "m", i) + [acked(10 * i + 0.1 + ms / 1000, "m", i, ms)]
    log += [ev("enqueued", 50, "x", 1)]  # no provider logged: `unknown`, lost
    msgs = tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in log]))))
    got = tf.totals_by_provider(msgs).select(
        "provider", "messages", "acked", "timed_out", "lost", "acked_share", "timed_out_share", "send_to_ack_p50_ms"
    )
    expected = spark.createDataFrame(
        [
            ("messenger", 3, 3, 0, 0, 1.0, 0.0, 200.0),
            ("unknown", 1, 0, 0, 1, 0.0, 0.0, None),
            ("whatsapp", 2, 1, 1, 0, 0.5, 0.5, 500.0),
        ],
        "provider string, messages long, acked long, timed_out long, lost long, acked_share double, "
        "timed_out_share double, send_to_ack_p50_ms double",
    )
    assertDataFrameEqual(got, expected)
