"""Incremental compaction: hourly JSON exports -> Parquet partitioned by date.

    python -m pipeline.compact --input out/demo/events.jsonl --store out/compacted
    python -m pipeline.compact --input gs://LOGS/run.googleapis.com/stdout/ --store gs://REPORTS/compacted --master cluster

A *store* is a directory holding:

- `events/date=YYYY-MM-DD/batch=B/*.parquet`: every line read, parsed once
  (`pipeline.transforms.parse_json_rows`): the typed event columns
  (`pipeline.schema.EVENT_COLUMNS`), `source`, and for a rejected line its
  `line` and `reject_reason`. `date` is the UTC day of the event's `ts`
  (`__HIVE_DEFAULT_PARTITION__` when a rejected line has no usable `ts`).
  Each file is sorted by `room_id`, then `seq`;
- `_manifest/batch=B/*.parquet`: one row per input file compacted in batch
  B: `path`, `size` (bytes), `modified_ms`, `compacted_at`. A batch counts
  once its manifest is written (the last write of a run), so a run that
  dies half-way leaves data that readers ignore and whose files the next run
  compacts again.

Each run lists the input files, leaves out those already in the manifest
(by path), and parses only the new ones in a single pass over their JSON.
The Logging sink writes each hourly file once (`HH:00:00_HH:59:59_S0.json`),
so a file is compacted once; a file whose size changed after it was
compacted is reported and left alone (compact it into a new store). One
compaction at a time per store. The report reads the store
(`read_store`): a report over some days reads those days' columns only.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from urllib.parse import unquote

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline import transforms as tf
from pipeline.extract import list_files, read_events
from pipeline.load import join_path, list_names, path_exists
from pipeline.schema import EVENT_COLUMNS, EVENT_SCHEMA

log = logging.getLogger("pipeline.compact")

#: The columns stored per line, besides the `date` and `batch` partitions.
STORED_COLUMNS: tuple[str, ...] = (*EVENT_COLUMNS, "source", "line", "reject_reason")
#: The stored lines as read back: the typed event, `source`, `line`,
#: `reject_reason`, and the `date` and `batch` partitions.
STORED_SCHEMA = T.StructType(
    list(EVENT_SCHEMA.fields)
    + [T.StructField(c, T.StringType(), True) for c in ("source", "line", "reject_reason")]
    + [T.StructField("date", T.DateType(), True), T.StructField("batch", T.StringType(), True)]
)
#: Stored columns of mostly distinct values, written without Parquet's
#: dictionary encoding (`parquet.enable.dictionary#<column>`,
#: https://github.com/apache/parquet-java/blob/master/parquet-hadoop/README.md):
#: the writer would build each one's dictionary, find it too big and fall back
#: to plain encoding. Measured at 10M events: about 2 CPU-s less; the store
#: 128 MB against 120 MB with dictionaries (both with INT64 times).
PLAIN_COLUMNS: tuple[str, ...] = (
    "ts", "published_at", "message_id", "seq", "publish_to_send_ms", "send_to_ack_ms", "trigger_to_send_ms",
    "event_id",
)  # fmt: skip


@dataclass(frozen=True)
class CompactResult:
    """What one compaction run did: `batch` (None if nothing was new),
    `new_files` compacted, `known_files` skipped (already in the store),
    `changed_files` (in the store, but their size changed since; skipped),
    `seconds` of wall clock."""

    batch: str | None
    new_files: int
    known_files: int
    changed_files: list[str]
    seconds: float


def _manifest(spark: SparkSession, store: str) -> DataFrame | None:
    path = join_path(store, "_manifest")
    if not path_exists(spark, path):
        return None
    return spark.read.parquet(path)


def manifest_rows(spark: SparkSession, files: list[tuple[str, int, int]], batch: str) -> DataFrame:
    """The manifest rows of `files` ((path, size in bytes, modification time
    in ms), as `list_files` gives them) compacted in `batch`: `path`, `size`,
    `modified_ms`, `batch`, `compacted_at` (now, UTC).

    Built from literals in the JVM: PySpark's `createDataFrame` of a Python
    list ships the rows through a Python worker, whose start alone took about
    0.6 s of each compaction (measured: `PythonRunner` boot time 611 ms).
    Raises ValueError when `files` is empty (a batch has at least one file).
    """
    if not files:
        raise ValueError("a manifest batch needs at least one file")
    rows = [
        F.struct(
            F.lit(path).alias("path"),
            F.lit(size).cast("long").alias("size"),
            F.lit(mtime).cast("long").alias("modified_ms"),
        )
        for path, size, mtime in files
    ]
    return (
        spark.range(1)
        .select(F.inline(F.array(*rows)))
        .select("path", "size", "modified_ms", F.lit(batch).alias("batch"), F.current_timestamp().alias("compacted_at"))
    )


def compact(spark: SparkSession, inputs: str | list[str], store: str) -> CompactResult:
    """Compact the JSON files under `inputs` not yet in `store` into it.

    `inputs`: files, directories (recursive), local globs or `gs://` URIs, in
    either line format. One Spark job reads every new file once with the
    JSON data source and writes their events (and rejects) to
    `store/events/`, partitioned by `date` and this run's `batch`; then the
    batch's manifest. Returns a `CompactResult`. Raises FileNotFoundError for
    a local input that matches nothing.
    """
    t0 = time.perf_counter()
    files = list_files(spark, inputs)
    manifest = _manifest(spark, store)
    known: dict[str, int] = {}
    if manifest is not None:
        known = {r["path"]: r["size"] for r in manifest.select("path", "size").collect()}
    new = [f for f in files if f[0] not in known]
    changed = [p for p, size, _ in files if p in known and known[p] != size]
    for p in changed:
        log.warning("%s changed since it was compacted (size %d -> now different): left alone", p, known[p])
    if not new:
        log.info("compact: nothing new (%d files already in %s)", len(files), store)
        return CompactResult(None, 0, len(files) - len(new), changed, time.perf_counter() - t0)
    batch = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]
    parsed = tf.parse_json_rows(read_events(spark, [p for p, _, _ in new]))
    day = F.to_date(F.col("ts"))
    (
        parsed.select(*STORED_COLUMNS, day.alias("date"), F.lit(batch).alias("batch"))
        # the partitioned write sorts by (date, batch) anyway; adding (room_id, seq)
        # hands the per-message aggregate runs already in its order, which the sort
        # after its shuffle merges rather than sorts (measured at 10M events: that
        # stage 12.6-13.2 s instead of 15.1-16.5 s)
        .sortWithinPartitions("date", "batch", "room_id", "seq")
        .write.mode("append")
        .options(**{f"parquet.enable.dictionary#{c}": "false" for c in PLAIN_COLUMNS})
        .partitionBy("date", "batch")
        .parquet(join_path(store, "events"))
    )
    (
        manifest_rows(spark, new, batch)
        .coalesce(1)
        .write.mode("append")
        .partitionBy("batch")
        .parquet(join_path(store, "_manifest"))
    )
    seconds = time.perf_counter() - t0
    log.info(
        "compact: batch %s, %d new files (%d already in the store) in %.1f s", batch, len(new), len(known), seconds
    )
    return CompactResult(batch, len(new), len(files) - len(new), changed, seconds)


def committed_batches(spark: SparkSession, store: str) -> list[str]:
    """The batches of `store` whose manifest is written (committed), sorted;
    [] when there is none. Read from the names of the manifest's partition
    directories (`_manifest/batch=B/`), which the job commit of the manifest's
    write creates: one listing, where reading the manifest took three Spark
    jobs (the report's first stage 3.1-3.5 s instead of 3.7 s at 10M events)."""
    names = list_names(spark, join_path(store, "_manifest"))
    return [unquote(n.removeprefix("batch=")) for n in names if n.startswith("batch=")]


def read_store(spark: SparkSession, store: str, since: date | None = None, until: date | None = None) -> DataFrame:
    """The compacted lines of `store` (committed batches only) from day
    `since` to day `until` (inclusive, UTC; None: unbounded): the
    `STORED_COLUMNS` plus `date`. The date bounds prune partitions, so only
    those days' files are opened; lines with no usable `ts` (rejects only)
    are included only when neither bound is given. Raises FileNotFoundError
    when `store` has no manifest (nothing compacted yet).
    """
    batches = committed_batches(spark, store)
    if not batches:
        raise FileNotFoundError(f"no compacted store at {store} (run `make compact` or pass --input)")
    # declared, not inferred from one file: a batch compacted before a column
    # was read (such as `actor`) gives it as null, whichever file Spark opens first
    df = (
        spark.read.schema(STORED_SCHEMA)
        .option("basePath", join_path(store, "events"))
        .parquet(join_path(store, "events"))
    )
    df = df.where(F.col("batch").isin(*batches))
    if since is not None:
        df = df.where(F.col("date") >= F.lit(since))
    if until is not None:
        df = df.where(F.col("date") <= F.lit(until))
    return df.select(*STORED_COLUMNS, "date")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from pipeline.session import LOCAL

    p = argparse.ArgumentParser(prog="python -m pipeline.compact", description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True, nargs="+", help="JSON log file(s), directory or glob; gs:// on Dataproc")
    p.add_argument("--store", required=True, help="the compacted store (local or gs://)")
    p.add_argument("--master", default=LOCAL.master, help="Spark master, or 'cluster' to take the cluster's")
    p.add_argument("--driver-memory", default=LOCAL.driver_memory, help="local driver (= executor) memory")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """`make compact`: compact, print what was done; exit 0 (2 on bad arguments)."""
    from pipeline.session import session_for

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    spark = session_for(args.master, args.driver_memory)
    try:
        r = compact(spark, args.input, args.store)
    finally:
        spark.stop()
    print(
        f"compacted {r.new_files} new file(s) into {args.store} (batch {r.batch}); "
        f"{r.known_files} already there; {len(r.changed_files)} changed since; {r.seconds:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
