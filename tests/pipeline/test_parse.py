"""Reading both line formats with one declared schema, and rejecting bad lines with a reason."""

from __future__ import annotations

import json

from pyspark.sql import Row
from pyspark.testing import assertDataFrameEqual

from pipeline import transforms as tf
from tests.pipeline.conftest import at, ev, late_ack, line, lines_df, log_entry, scenario, sent


def test_plain_lines_and_log_entries_give_the_same_events(spark):
    records = scenario()
    plain = tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in records]))).drop("source")
    entries = tf.valid_events(tf.parse_lines(lines_df(spark, [log_entry(r) for r in records]))).drop("source")
    assert plain.count() == len(records)
    assertDataFrameEqual(entries, plain)


def test_log_entry_numbers_as_doubles_become_integers(spark):
    rec = sent(1.0, "room-1", 3, attempt=2)
    entry = log_entry(rec)
    assert '"seq": 3.0' in entry  # as Cloud Logging's Struct exports it
    row = tf.valid_events(tf.parse_lines(lines_df(spark, [entry]))).first()
    assert (row["room_id"], row["seq"], row["attempt"], row["trigger"]) == ("room-1", 3, 2, "enqueue")


def test_log_entry_without_payload_ts_takes_the_entry_timestamp(spark):
    rec = sent(1.0, "room-1", 1)
    entry = json.loads(log_entry(rec))
    del entry["jsonPayload"]["ts"]
    entry["timestamp"] = at(7.25)
    row = tf.valid_events(tf.parse_lines(lines_df(spark, [json.dumps(entry)]))).first()
    assert row["ts"].isoformat() == "2026-11-22T10:00:07.250000"


def _with(rec: dict, **changes) -> str:
    out = dict(rec)
    for k, v in changes.items():
        if v is ...:
            out.pop(k)
        else:
            out[k] = v
    return json.dumps(out)


def test_bad_lines_are_kept_with_their_reason(spark):
    good = sent(1.0, "room-1", 1)
    bad = {
        "this is not json": "not_json",
        '{"log_type":"baton.delivery","event":"se': "not_json",
        "[1, 2, 3]": "not_json",
        "   ": "empty_line",
        _with(good, attempt=...): "missing_field:attempt",
        _with(good, event="exploded"): "unknown_event",
        _with(good, log_type="baton.invocation"): "wrong_log_type",
        _with(good, log_type=...): "missing_field:log_type",
        _with(good, schema_version=2): "unsupported_schema_version",
        _with(good, seq="three"): "wrong_type",
        _with(good, seq=1.5): "wrong_type:seq",
        _with(good, ts="yesterday"): "bad_timestamp",
        _with(good, ts=...): "missing_field:ts",
        _with(good, event=...): "missing_field:event",
        _with(ev("enqueued", 0.0, None, 1), room_id=None): "missing_field:room_id",
        _with(ev("acked", 2.0, "room-1"), seq=None): "missing_field:seq",
        _with(late_ack(3.0, "room-1", 1, 100.0), send_to_ack_ms=None): "missing_field:send_to_ack_ms",
    }
    valid = [
        line(good),
        line(ev("rejected", 0.5, None, reason="no_room_attribute")),  # a malformed push: no room, no seq, still valid
        line(ev("status_unknown", 0.6, None, component="webhook", reason="unknown_delivery")),
    ]
    parsed = tf.parse_lines(lines_df(spark, valid + list(bad)))
    expected = spark.createDataFrame(
        [Row(source="test.jsonl", line=k, reject_reason=v) for k, v in bad.items()],
        "source string, line string, reject_reason string",
    )
    assertDataFrameEqual(tf.rejected_lines(parsed), expected)
    assert sorted(r["event"] for r in tf.valid_events(parsed).collect()) == ["rejected", "sent", "status_unknown"]
