"""The ordering audit, room summary and totals on the hand-written log (expected values by hand)."""

from __future__ import annotations

from datetime import datetime

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from pipeline import transforms as tf
from tests.pipeline.conftest import acked, enq, line, lines_df, scenario, sent, timed_out

AUDIT = "room_id string, messages_sent long, ordering_violations long, max_in_flight long, in_flight_violations long, gaps long, lost long, multiple_ends long, audit_ok boolean"


def messages_of(spark, records):
    return tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in records]))))


@pytest.fixture(scope="module")
def messages(spark):
    return messages_of(spark, scenario()).cache()


def test_audit_catches_each_violation(spark, messages):
    got = tf.ordering_audit(messages).select(*[c.split()[0] for c in AUDIT.split(", ")])
    expected = spark.createDataFrame(
        [
            ("in-order", 3, 0, 1, 0, 0, 0, 0, True),
            ("resend", 1, 0, 1, 0, 0, 0, 0, True),  # a resend of the same seq is not a second message in flight
            ("lost", 1, 0, 1, 0, 0, 1, 0, False),
            ("two-in-flight", 2, 0, 2, 1, 0, 0, 0, False),
            ("out-of-order", 2, 1, 1, 0, 0, 0, 0, False),
            ("gap", 3, 0, 1, 0, 1, 0, 0, False),
            ("ends", 1, 0, 1, 0, 0, 0, 0, True),
        ],
        AUDIT,
    )
    assertDataFrameEqual(got, expected)


def test_audit_named_checks(messages):
    rows = {r["room_id"]: r for r in tf.ordering_audit(messages).collect()}
    assert not rows["two-in-flight"]["single_in_flight"] and rows["two-in-flight"]["sends_in_order"]
    assert not rows["out-of-order"]["sends_in_order"] and rows["out-of-order"]["single_in_flight"]
    assert not rows["lost"]["none_lost"] and not rows["gap"]["no_gaps"]


def test_ack_and_next_send_at_the_same_microsecond_is_not_two_in_flight(spark):
    log = [
        enq(0.0, "r", 1),
        enq(0.0, "r", 2),
        sent(1.0, "r", 1),
        acked(2.0, "r", 1, 1000.0),
        sent(2.0, "r", 2, trigger="ack"),
        acked(2.5, "r", 2, 500.0),
    ]
    row = tf.ordering_audit(messages_of(spark, log)).first()
    assert (row["max_in_flight"], row["in_flight_violations"], row["audit_ok"]) == (1, 0, True)


def test_a_message_left_in_flight_blocks_the_next(spark):
    # seq 1 is sent and never ends: seq 2 sent later overlaps it (and seq 1 is lost)
    log = [enq(0.0, "r", 1), enq(0.0, "r", 2), sent(1.0, "r", 1), sent(5.0, "r", 2), acked(5.5, "r", 2, 500.0)]
    row = tf.ordering_audit(messages_of(spark, log)).first()
    assert (row["max_in_flight"], row["in_flight_violations"], row["lost"]) == (2, 1, 1)


def test_room_summary(spark, messages):
    rooms = {r["room_id"]: r for r in tf.room_summary(messages).collect()}
    r = rooms["in-order"]
    assert (r["messages"], r["acked"], r["timed_out"], r["late_acks"], r["duplicates_sent"]) == (3, 2, 1, 1, 0)
    assert r["longest_head_of_line_wait_ms"] == 1800.0
    assert r["active_s"] == pytest.approx(4.1)  # first send at 1.0 s, last end at 5.1 s
    assert r["messages_per_s"] == pytest.approx(3 / 4.1)
    assert rooms["resend"]["duplicates_sent"] == 1
    assert (rooms["ends"]["failed"], rooms["ends"]["dead_lettered"], rooms["ends"]["send_failures"]) == (1, 1, 1)
    assert (rooms["lost"]["lost"], rooms["lost"]["audit_ok"]) == (1, False)
    assert rooms["gap"]["gaps"] == 1
    assert rooms["out-of-order"]["ordering_violations"] == 1
    assert rooms["two-in-flight"]["max_in_flight"] == 2


def test_totals_by_provider_and_hour(spark, messages):
    (p,) = tf.totals_by_provider(messages).collect()
    assert p["provider"] == "whatsapp"
    got = (
        p["rooms"],
        p["messages"],
        p["acked"],
        p["timed_out"],
        p["failed"],
        p["dead_lettered"],
        p["lost"],
        p["late_acks"],
        p["duplicates_sent"],
    )
    assert got == (7, 15, 11, 1, 1, 1, 1, 1, 1)
    assert p["acked_share"] == pytest.approx(11 / 15)
    (h,) = tf.totals_by_time(messages, 3600).collect()
    assert h["bucket_start"] == datetime(2026, 11, 22, 10, 0) and h["messages"] == 15
    # acked send-to-ack: 200, 200, 200, 300, 300, 400, 500, 500, 500, 1000, 1500 ms: the 6th of 11 is the median
    assert h["send_to_ack_p50_ms"] == 400.0
    with pytest.raises(ValueError):
        tf.totals_by_time(messages, 0)


def test_totals_by_time_and_provider_in_one_aggregate(spark, messages):
    # the scenario's 15 messages on WhatsApp at 10:xx, and a copy on Messenger an hour later
    later = {c: F.col(c) + F.expr("INTERVAL 1 HOUR") for c in ("enqueued_at", "first_sent_at", "ended_at")}
    both_days = messages.unionByName(messages.withColumns({**later, "provider": F.lit("messenger")}))
    by_hour, by_provider = tf.split_totals(tf.totals_by_time_and_provider(both_days, 3600))
    hours = sorted((r["bucket_start"].hour, r["messages"], r["acked"]) for r in by_hour.collect())
    assert hours == [(10, 15, 11), (11, 15, 11)]
    assert sorted((r["provider"], r["messages"], r["rooms"]) for r in by_provider.collect()) == [
        ("messenger", 15, 7),
        ("whatsapp", 15, 7),
    ]
    # the same rows and columns as the one-key tables
    assertDataFrameEqual(by_hour, tf.totals_by_time(both_days, 3600))
    assertDataFrameEqual(by_provider, tf.totals_by_provider(both_days))
    assert by_hour.columns == tf.totals_by_time(both_days).columns
    assert by_provider.columns == tf.totals_by_provider(both_days).columns


def test_timeout_tradeoff_by_hand(spark):
    # room a: acks after 100 ms and 300 ms, one message never acked; room b: one ack 2000 ms late
    log = [
        enq(0.0, "a", 1), enq(0.0, "a", 2), enq(0.0, "a", 3), enq(0.0, "b", 1),
        sent(1.0, "a", 1), acked(1.1, "a", 1, 100.0), sent(1.2, "a", 2), acked(1.5, "a", 2, 300.0),
        sent(1.6, "a", 3), timed_out(2.6, "a", 3),
        sent(1.0, "b", 1), timed_out(2.0, "b", 1),
    ]  # fmt: skip
    from tests.pipeline.conftest import late_ack

    log.append(late_ack(3.0, "b", 1, 2000.0))
    rows = {r["timeout_ms"]: r for r in tf.timeout_tradeoff(messages_of(spark, log), [200, 1000]).collect()}
    x200, x1000 = rows[200.0], rows[1000.0]
    # X = 200 ms: holds a = 100 + 200 + 200, b = 200; 300 and 2000 come too late
    assert (x200["arriving_acks"], x200["acks_too_late"], x200["waits"]) == (3, 2, 4)
    assert x200["share_too_late"] == pytest.approx(2 / 3)
    assert x200["mean_hold_ms"] == pytest.approx(175.0)
    assert x200["room_busy_s_mean"] == pytest.approx(0.35)
    # X = 1 s: holds a = 100 + 300 + 1000, b = 1000; only the 2000 ms ack is too late
    assert x1000["acks_too_late"] == 1
    assert x1000["mean_hold_ms"] == pytest.approx(600.0)
    assert x1000["room_max_messages_per_s"] == pytest.approx(1000 / 600)
    with pytest.raises(ValueError):
        tf.timeout_tradeoff(messages_of(spark, log), [0])
