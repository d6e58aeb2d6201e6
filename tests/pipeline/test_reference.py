"""The benchmark's generator and DuckDB reference: DuckDB's per-room table must
agree with Spark's on a generated log (two independent implementations)."""

from __future__ import annotations

from pipeline import transforms as tf
from pipeline.extract import read_lines
from tools.bench.duckdb_reference import compare_rooms, compute_rooms
from tools.bench.synth_log import generate


def test_spark_and_duckdb_agree_on_a_generated_log(spark, tmp_path):
    log = tmp_path / "events.jsonl"
    g = generate(str(log), 20_000, rooms=200)
    assert abs(g["events"] - 20_000) < 1_000

    parsed = tf.parse_lines(read_lines(spark, str(log)))
    assert tf.rejected_lines(parsed).count() == 0  # the generator writes the functions' exact line format
    messages = tf.message_lifecycle(tf.valid_events(parsed)).cache()
    rooms = tf.room_summary(messages)
    rooms.write.parquet(str(tmp_path / "rooms"))
    compute_rooms(str(log), str(tmp_path / "duck.parquet"))

    assert set(compare_rooms(str(tmp_path / "rooms"), str(tmp_path / "duck.parquet")).values()) == {0}
    # the generated rooms keep every invariant, and the mix is the one documented
    assert rooms.where("not audit_ok").count() == 0
    counts = {r["outcome"]: r["count"] for r in messages.groupBy("outcome").count().collect()}
    n = sum(counts.values())
    assert (
        0.78 < counts["acked"] / n < 0.86 and 0.12 < counts["timed_out"] / n < 0.22
    )  # 13% never acked + ~4.5% acked late
    assert messages.where("resends > 0").count() > 0


def test_compare_rooms_sees_a_difference(spark, tmp_path):
    log = tmp_path / "events.jsonl"
    generate(str(log), 3_000, rooms=20)
    compute_rooms(str(log), str(tmp_path / "duck.parquet"))
    other = spark.read.parquet(str(tmp_path / "duck.parquet"))
    # one room loses a message: its count and its throughput must show up as different
    first = sorted(r["room_id"] for r in other.select("room_id").collect())[0]
    from pyspark.sql import functions as F

    changed = other.withColumn(
        "messages", F.when(F.col("room_id") == first, F.col("messages") - 1).otherwise(F.col("messages"))
    )
    changed.write.parquet(str(tmp_path / "changed"))
    diff = compare_rooms(str(tmp_path / "changed"), str(tmp_path / "duck.parquet"))
    assert diff["messages"] == 1 and diff["missing"] == 0 and diff["acked"] == 0


def test_duckdb_keeps_the_audit_rules_on_a_dead_letter_never_sent_then_redriven(spark, tmp_path):
    """The operator day's redriven room (tests/pipeline/test_audit_rules.py):
    both implementations find no ordering violation, and agree on every column."""
    import duckdb

    from tests.pipeline.conftest import acked, enq, line, sent
    from tests.pipeline.test_audit_rules import redriven, refused_then_dead

    log = [enq(0, "r", 1), enq(0, "r", 2), *refused_then_dead("r", 1), sent(1.8, "r", 2, trigger="dead_lettered")]
    log += [acked(2, "r", 2, 200), redriven(3, "r", 1), sent(3.1, "r", 1, attempt=4, trigger="redrive")]
    log += [acked(3.3, "r", 1, 200, attempt=4)]
    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(line(r) for r in log) + "\n")
    parsed = tf.parse_lines(read_lines(spark, str(path)))
    tf.room_summary(tf.message_lifecycle(tf.valid_events(parsed))).write.parquet(str(tmp_path / "rooms"))
    compute_rooms(str(path), str(tmp_path / "duck.parquet"))
    duck = duckdb.sql(f"SELECT ordering_violations, messages_sent FROM read_parquet('{tmp_path}/duck.parquet')")
    assert duck.fetchall() == [(0, 1)]
    assert set(compare_rooms(str(tmp_path / "rooms"), str(tmp_path / "duck.parquet")).values()) == {0}


def test_duckdb_agrees_on_a_placeholder_that_moved_to_a_later_seq(spark, tmp_path):
    """A placeholder's seq given up, its message acked under a later seq
    (tests/pipeline/test_moved_placeholder.py): DuckDB counts it neither as a
    message nor as lost, as Spark does, and the two agree on every column."""
    import duckdb

    from tests.pipeline.conftest import line
    from tests.pipeline.test_moved_placeholder import moved_placeholder_log

    path = tmp_path / "events.jsonl"
    path.write_text("\n".join(line(r) for r in moved_placeholder_log()) + "\n")
    parsed = tf.parse_lines(read_lines(spark, str(path)))
    tf.room_summary(tf.message_lifecycle(tf.valid_events(parsed))).write.parquet(str(tmp_path / "rooms"))
    compute_rooms(str(path), str(tmp_path / "duck.parquet"))
    duck = duckdb.sql(f"SELECT messages, acked, lost, gaps FROM read_parquet('{tmp_path}/duck.parquet')")
    assert duck.fetchall() == [(4, 4, 0, 0)]
    assert set(compare_rooms(str(tmp_path / "rooms"), str(tmp_path / "duck.parquet")).values()) == {0}
