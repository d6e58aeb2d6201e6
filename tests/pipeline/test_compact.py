"""Spark's JSON reader with the declared schema, and incremental compaction to Parquet."""

from __future__ import annotations

import json
from datetime import date

import duckdb
import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from pipeline import transforms as tf
from pipeline.compact import PLAIN_COLUMNS, committed_batches, compact, manifest_rows, read_store
from pipeline.extract import read_events
from tests.pipeline.conftest import T0, enq, ev, line, lines_df, log_entry, scenario, sent


def test_json_reader_gives_the_events_and_reasons_of_the_per_line_parse(spark, tmp_path):
    records = scenario()
    bad = ["not json", '{"log_type":"baton.delivery","event":"se', json.dumps({**sent(1.0, "r", 1), "seq": "three"})]
    bad += [json.dumps({**sent(1.0, "r", 1), "ts": "yesterday"}), json.dumps({**sent(1.0, "r", 1), "seq": 1.5})]
    texts = [line(r) for r in records] + [log_entry(r) for r in records] + bad
    f = tmp_path / "10:00:00_10:59:59_S0.json"  # the sink's name, colons included
    f.write_text("\n".join(texts) + "\n")
    native = tf.parse_json_rows(read_events(spark, str(f)))
    per_line = tf.parse_lines(lines_df(spark, texts))
    assertDataFrameEqual(tf.valid_events(native).drop("source"), tf.valid_events(per_line).drop("source"))
    reasons = [r["reject_reason"] for r in tf.rejected_lines(native).orderBy("reject_reason").collect()]
    assert reasons == sorted(r["reject_reason"] for r in tf.rejected_lines(per_line).collect())
    assert reasons == ["bad_timestamp", "not_json", "not_json", "wrong_type", "wrong_type:seq"]
    # raw text kept where the reader could not read the line
    kept = {r["line"] for r in tf.rejected_lines(native).where("reject_reason in ('not_json', 'wrong_type')").collect()}
    assert kept == {bad[0], bad[1], bad[2]}


def _hour(root, day: int, hour: int, records: list[dict]) -> None:
    d = root / "run.googleapis.com" / "stdout" / "2026" / "11" / f"{day:02d}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{hour:02d}:00:00_{hour:02d}:59:59_S0.json").write_text("\n".join(log_entry(r) for r in records) + "\n")


def test_compaction_is_incremental_and_partitioned_by_date(spark, tmp_path):
    logs, store = tmp_path / "logs", str(tmp_path / "store")
    day1 = [sent(1.0, "a", 1), ev("acked", 2.0, "a", 1, 1, send_to_ack_ms=1000.0)]
    _hour(logs, 22, 10, day1)
    _hour(logs, 22, 11, [sent(3600.0, "a", 2)])
    first = compact(spark, str(logs), store)
    assert (first.new_files, first.known_files) == (2, 0)
    assert read_store(spark, store).count() == 3

    again = compact(spark, str(logs), store)  # nothing new: nothing parsed, nothing written
    assert (again.batch, again.new_files, again.known_files) == (None, 0, 2)
    assert read_store(spark, store).count() == 3

    _hour(logs, 23, 0, [sent(86400.0 + 60, "b", 1)])  # the next day's first hour
    third = compact(spark, str(logs), store)
    assert (third.new_files, third.known_files) == (1, 2)
    days = {r["date"]: r["count"] for r in read_store(spark, store).groupBy("date").count().collect()}
    assert days == {date(2026, 11, 22): 3, date(2026, 11, 23): 1}
    # a date range reads only its partitions
    only = read_store(spark, store, since=date(2026, 11, 23))
    assert [r["room_id"] for r in only.collect()] == ["b"]
    assert "PartitionFilters: [isnotnull(date" in only._jdf.queryExecution().executedPlan().toString()


def test_manifest_rows_are_built_in_the_jvm(spark):
    files = [("/logs/10:00:00_10:59:59_S0.json", 123, 1_700_000_000_000), ("gs://b/11.json", 2**40, 0)]
    df = manifest_rows(spark, files, "B1")
    rows = df.collect()
    assert [(r["path"], r["size"], r["modified_ms"], r["batch"]) for r in rows] == [(*f, "B1") for f in files]
    assert rows[0]["compacted_at"] is not None and rows[0]["compacted_at"] == rows[1]["compacted_at"]
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("path", "string"), ("size", "bigint"), ("modified_ms", "bigint"), ("batch", "string"),
        ("compacted_at", "timestamp"),
    ]  # fmt: skip
    # no Python worker: a DataFrame of a Python list would be a scan of an RDD of pickled rows
    assert "ExistingRDD" not in df._jdf.queryExecution().executedPlan().toString()
    with pytest.raises(ValueError, match="at least one file"):
        manifest_rows(spark, [], "B2")


def test_a_batch_without_manifest_is_ignored(spark, tmp_path):
    logs, store = tmp_path / "logs", tmp_path / "store"
    _hour(logs, 22, 10, [sent(1.0, "a", 1)])
    compact(spark, str(logs), str(store))
    # a run that died after writing its events but before its manifest
    rows = read_store(spark, str(store)).withColumn("room_id", F.lit("ghost"))
    rows.drop("date").write.parquet(str(store / "events" / "date=2026-11-22" / "batch=unfinished"))
    assert [r["room_id"] for r in read_store(spark, str(store)).collect()] == ["a"]


def test_committed_batches_are_the_manifest_partitions(spark, tmp_path):
    logs, store = tmp_path / "logs", tmp_path / "store"
    assert committed_batches(spark, str(store)) == []
    _hour(logs, 22, 10, [sent(1.0, "a", 1)])
    first = compact(spark, str(logs), str(store)).batch
    _hour(logs, 22, 11, [sent(3600.0, "a", 2)])
    second = compact(spark, str(logs), str(store)).batch
    # a manifest write still under way (or dead) leaves only a hidden directory
    (store / "_manifest" / "_temporary" / "0").mkdir(parents=True)
    assert committed_batches(spark, str(store)) == sorted([first, second])


def test_missing_store_is_a_clear_error(spark, tmp_path):
    with pytest.raises(FileNotFoundError):
        read_store(spark, str(tmp_path / "nothing"))


def test_each_compacted_file_is_sorted_by_room_and_seq(spark, tmp_path):
    # written in time order, as a log is: rooms and seqs interleaved
    records = [enq(float(t), f"r{t % 3}", 10 - t // 3) for t in range(30)]
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(line(r) for r in records) + "\n")
    store = tmp_path / "store"
    compact(spark, str(src), str(store))
    files = sorted(str(p) for p in (store / "events").rglob("*.parquet"))
    per_file = [duckdb.sql(f"SELECT room_id, seq FROM read_parquet('{f}')").fetchall() for f in files]
    assert sum(len(rows) for rows in per_file) == len(records)
    # one run per file, in (room, seq) order: the per-message sort after the shuffle merges runs
    for rows in per_file:
        assert rows == sorted(rows)


def test_stored_times_are_int64_micros_and_unique_columns_plain(spark, tmp_path):
    records = [enq(float(t), f"r{t % 3}", t) for t in range(30)]
    src = tmp_path / "events.jsonl"
    src.write_text("\n".join(line(r) for r in records) + "\n")
    store = tmp_path / "store"
    compact(spark, str(src), str(store))
    files = [str(p) for p in (store / "events").rglob("*.parquet")]
    meta = duckdb.sql(f"SELECT path_in_schema, type, encodings FROM parquet_metadata({files!r})").fetchall()
    by_col = {}
    for col, physical, encodings in meta:
        by_col.setdefault(col, set()).add((physical, encodings))
    # Parquet's standard timestamp, not Spark's default INT96
    assert {p for p, _ in by_col["ts"]} == {"INT64"}
    # mostly distinct values: plain, without a dictionary the writer would build and drop
    for col in PLAIN_COLUMNS:
        assert all("DICTIONARY" not in enc for _, enc in by_col[col]), (col, by_col[col])
    assert all("DICTIONARY" in enc for _, enc in by_col["room_id"])


def test_a_store_written_with_int96_times_reads_with_new_batches(spark, tmp_path):
    # stores compacted before the times were INT64 keep their INT96 batches
    logs, store = tmp_path / "logs", str(tmp_path / "store")
    _hour(logs, 22, 10, [sent(1.0, "a", 1)])
    spark.conf.set("spark.sql.parquet.outputTimestampType", "INT96")
    try:
        compact(spark, str(logs), store)
    finally:
        spark.conf.set("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
    _hour(logs, 22, 11, [sent(3600.0, "a", 2)])
    compact(spark, str(logs), store)
    files = [str(p) for p in (tmp_path / "store" / "events").rglob("*.parquet")]
    types = duckdb.sql(f"SELECT DISTINCT type FROM parquet_metadata({files!r}) WHERE path_in_schema = 'ts'").fetchall()
    assert sorted(t for (t,) in types) == ["INT64", "INT96"]
    rows = read_store(spark, store).select("seq", F.unix_micros("ts").alias("us")).orderBy("seq").collect()
    assert [(r["seq"], r["us"]) for r in rows] == [(1, (T0 + 1) * 1_000_000), (2, (T0 + 3600) * 1_000_000)]


def test_a_batch_compacted_before_a_column_was_read_gives_it_as_null(spark, tmp_path):
    # `actor` was added to the read fields: older batches have no such column
    logs, store = tmp_path / "logs", str(tmp_path / "store")
    _hour(logs, 22, 10, [sent(1.0, "a", 1)])
    compact(spark, str(logs), store)
    (old,) = [p for p in (tmp_path / "store" / "events").rglob("batch=*") if p.is_dir()]
    without = tmp_path / "without"
    spark.read.parquet(str(old)).drop("actor").write.parquet(str(without))
    for f in old.glob("*.parquet"):
        f.unlink()
    for f in without.glob("*.parquet"):
        f.rename(old / f.name)
    _hour(logs, 22, 11, [ev("skipped", 3600.0, "a", 2, component="operator", actor="ops@example.com")])
    compact(spark, str(logs), store)
    rows = read_store(spark, store).select("seq", "actor").orderBy("seq").collect()
    assert [(r["seq"], r["actor"]) for r in rows] == [(1, None), (2, "ops@example.com")]
