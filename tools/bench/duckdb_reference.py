"""The per-room metrics of `pipeline.transforms.room_summary`, computed by
DuckDB on one machine: the benchmark's reference, and a second, independent
implementation to check the Spark one against.

    python -m tools.bench.duckdb_reference --input EVENTS.jsonl --output rooms.parquet

Same definitions as the Spark transforms (`pipeline.lifecycle`, the
`moved` outcome of a placeholder's seq given up, a message keyed by room,
incarnation and seq, and one line per `event_id` included), computed
another way: each event is given its life by a window over the message's
events (Spark builds the lives from arrays per message). It reads the
plain line format only, and skips lines that are not valid events instead of
keeping them. With `--source parquet` it reads a compacted store's valid
events instead (`pipeline.compact`), the input Spark's Parquet runs read.
"""

from __future__ import annotations

import argparse
import time

from pipeline.schema import LIFECYCLE_EVENTS, SEND_EVENTS, TERMINAL
from shared.events import EVENT_FIELDS, LOG_TYPE

_DUCK_TYPES = {"string": "VARCHAR", "integer": "BIGINT", "number": "DOUBLE", "boolean": "BOOLEAN"}

#: The columns compared between Spark's `rooms` table and DuckDB's.
COMPARED = (
    "messages",
    "enqueued",
    "entered_parked",
    "acked",
    "timed_out",
    "failed",
    "dead_lettered",
    "skipped",
    "lost",
    "late_acks",
    "duplicates_sent",
    "unknown_sends",
    "send_failures",
    "redrives",
    "messages_sent",
    "ordering_violations",
    "max_in_flight",
    "in_flight_violations",
    "gaps",
    "multiple_ends",
    "longest_head_of_line_wait_ms",
    "active_s",
    "messages_per_s",
)


def _q(values) -> str:
    return ", ".join(f"'{v}'" for v in values)


def rooms_sql(path: str, source: str = "json") -> str:
    """A DuckDB query returning one row per room, over the JSON-lines file(s)
    at `path` (`source="json"`), or over a compacted store's events
    (`source="parquet"`: `path` is the store, `pipeline.compact`; valid events only)."""
    columns = ", ".join(f"'{k}': '{'TIMESTAMP' if k == 'ts' else _DUCK_TYPES[v]}'" for k, v in EVENT_FIELDS.items())
    path = path.replace("'", "''")
    terminal = f"event IN ({_q(TERMINAL)})"
    late = "(event = 'status_ignored' AND reason = 'late_ack')"
    # a placeholder's seq given up, its message gone on under a later seq (the
    # room logs held messages themselves under seq 0): outcome `moved`
    moved = "(event = 'sequence_held' AND seq > 0)"
    if source == "json":
        scan = f"""read_json('{path}', format = 'newline_delimited', columns = {{{columns}}},
                 timestampformat = '%Y-%m-%dT%H:%M:%S.%fZ', ignore_errors = true)
  WHERE log_type = '{LOG_TYPE}' AND"""
    elif source == "parquet":
        scan = f"""read_parquet('{path}/events/*/*/*.parquet', hive_partitioning = true)
  WHERE reject_reason IS NULL AND"""
    else:
        raise ValueError(f"source must be json or parquet, got {source!r}")
    sends = f"event IN ({_q(SEND_EVENTS)})"
    return f"""
WITH ev AS (
  -- a message is (room, incarnation, seq): -1 stands for an incarnation the line does not carry;
  -- a line logged twice (the room's outbox: the same event_id) counts once
  SELECT room_id, coalesce(incarnation, -1) AS inc, seq, event, reason, ts, send_to_ack_ms
  FROM {scan} room_id IS NOT NULL AND seq IS NOT NULL
    AND (event IN ({_q(LIFECYCLE_EVENTS)}) OR {late} OR {moved})
  QUALIFY event_id IS NULL OR row_number() OVER (PARTITION BY room_id, event_id ORDER BY ts) = 1
),
first_end AS (
  SELECT room_id, inc, seq, min(ts) FILTER ({terminal}) AS fe FROM ev GROUP BY room_id, inc, seq
),
-- each event's life: how many redrives after the message's first end (a dead
-- letter released) came at or before it; a redrive counts before an event at its time
lived AS (
  SELECT e.*, sum(CASE WHEN e.event = 'redriven' AND e.ts > f.fe THEN 1 ELSE 0 END)
                OVER (PARTITION BY e.room_id, e.inc, e.seq ORDER BY e.ts, (e.event = 'redriven') DESC
                      ROWS UNBOUNDED PRECEDING) AS life
  FROM ev e JOIN first_end f ON e.room_id = f.room_id AND e.inc = f.inc AND e.seq = f.seq
),
life AS (
  SELECT room_id, inc, seq, life,
         min(ts) FILTER ({sends}) AS start,
         min(ts) FILTER ({terminal}) AS ended,
         arg_min(event, ts) FILTER ({terminal}) AS outcome,
         count(*) FILTER ({terminal}) AS ends,
         count(*) FILTER ({moved}) AS moves
  FROM lived GROUP BY room_id, inc, seq, life
),
last_life AS (
  SELECT room_id, inc, seq, max(life) AS last, bool_or(ends > 1) AS multi, sum(moves) > 0 AS moved
  FROM life GROUP BY room_id, inc, seq
),
-- the last life's end; with none, `moved` if the seq gave up its place, else `lost`
fin AS (
  SELECT l.room_id, l.inc, l.seq, coalesce(l.outcome, CASE WHEN x.moved THEN 'moved' END, 'lost') AS outcome,
         l.ended, x.multi
  FROM life l JOIN last_life x ON l.room_id = x.room_id AND l.inc = x.inc AND l.seq = x.seq AND l.life = x.last
),
msg AS (
  SELECT e.room_id, e.inc, e.seq,
         min(ts) FILTER (event = 'enqueued') AS enq,
         min(ts) FILTER (event = 'parked') AS parked,
         min(ts) FILTER ({sends}) AS first_sent,
         count(*) FILTER (event = 'sent') AS sends,
         count(*) FILTER (event = 'send_unknown') AS unknown_sends,
         count(*) FILTER (event = 'send_failed') AS send_failures,
         count(*) FILTER (event = 'redriven') AS redrives,
         min(send_to_ack_ms) FILTER ({late}) AS late_ack_ms,
         any_value(f.outcome) AS outcome, any_value(f.ended) AS ended, any_value(f.multi) AS multi
  FROM ev e JOIN fin f ON e.room_id = f.room_id AND e.inc = f.inc AND e.seq = f.seq
  GROUP BY e.room_id, e.inc, e.seq
),
-- ordering reads the first life's first send only: a message first sent after
-- a redrive (all its first life's sends refused) goes where the operator put it
ord AS (
  SELECT room_id, count(*) AS messages_sent, count(*) FILTER (seq < prev_max) AS ordering_violations
  FROM (SELECT room_id, seq, max(seq) OVER (PARTITION BY room_id, inc ORDER BY start, seq
                                           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_max
        FROM life WHERE life = 0 AND start IS NOT NULL)
  GROUP BY room_id
),

flight AS (
  SELECT room_id, max(running) AS max_in_flight,
         count(*) FILTER (delta = 1 AND running > 1) AS in_flight_violations
  FROM (SELECT room_id, delta,
               sum(delta) OVER (PARTITION BY room_id ORDER BY t, delta ROWS UNBOUNDED PRECEDING) AS running
        FROM (SELECT room_id, start AS t, 1 AS delta FROM life WHERE start IS NOT NULL
              UNION ALL
              SELECT room_id, greatest(ended, start), -1 FROM life
              WHERE start IS NOT NULL AND ended IS NOT NULL))
  GROUP BY room_id
),
per_room AS (
  SELECT room_id,
         -- a moved placeholder's message counts under its later seq
         count(*) FILTER (outcome <> 'moved') AS messages, count(enq) AS enqueued, count(parked) AS entered_parked,
         count(*) FILTER (outcome = 'acked') AS acked,
         count(*) FILTER (outcome = 'timed_out') AS timed_out,
         count(*) FILTER (outcome = 'failed') AS failed,
         count(*) FILTER (outcome = 'dead_lettered') AS dead_lettered,
         count(*) FILTER (outcome = 'skipped') AS skipped,
         count(*) FILTER (outcome = 'lost') AS lost,
         count(*) FILTER (outcome = 'timed_out' AND late_ack_ms IS NOT NULL) AS late_acks,
         sum(greatest(sends - 1, 0)) AS duplicates_sent,
         sum(unknown_sends) AS unknown_sends,
         sum(send_failures) AS send_failures,
         sum(redrives) AS redrives,
         count(*) FILTER (multi) AS multiple_ends,
         max(epoch_us(first_sent) - epoch_us(least(enq, parked))) / 1000.0 AS longest_head_of_line_wait_ms,
         (epoch_us(max(ended)) - epoch_us(min(first_sent))) / 1e6 AS active_s,
         count(ended) AS ended_n
  FROM msg GROUP BY room_id
),
-- seq numbers in 1..max(entered seq) of each incarnation that never entered
gaps AS (
  SELECT room_id, sum(g) AS gaps
  FROM (SELECT room_id, coalesce(max(seq) FILTER (enq IS NOT NULL OR parked IS NOT NULL), 0)
                          - count(*) FILTER (enq IS NOT NULL OR parked IS NOT NULL) AS g
        FROM msg GROUP BY room_id, inc)
  GROUP BY room_id
)
SELECT p.room_id, p.messages, p.enqueued, p.entered_parked, p.acked, p.timed_out, p.failed, p.dead_lettered,
       p.skipped, p.lost, p.late_acks, p.duplicates_sent, p.unknown_sends, p.send_failures, p.redrives,
       coalesce(o.messages_sent, 0) AS messages_sent, coalesce(o.ordering_violations, 0) AS ordering_violations,
       coalesce(f.max_in_flight, 0) AS max_in_flight, coalesce(f.in_flight_violations, 0) AS in_flight_violations,
       g.gaps, p.multiple_ends, p.longest_head_of_line_wait_ms, p.active_s,
       CASE WHEN p.active_s > 0 THEN p.ended_n / p.active_s END AS messages_per_s
FROM per_room p JOIN gaps g USING (room_id) LEFT JOIN ord o USING (room_id) LEFT JOIN flight f USING (room_id)
"""


def compute_rooms(input_path: str, output_path: str, threads: int = 2, source: str = "json") -> dict:
    """Write DuckDB's per-room table for `input_path` (JSON lines, or a
    compacted store with `source="parquet"`) to `output_path` (Parquet).
    Returns {"rooms": n, "seconds": s}."""
    import duckdb

    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}; SET preserve_insertion_order = false;")
    out = output_path.replace("'", "''")
    con.execute(f"COPY ({rooms_sql(input_path, source)}) TO '{out}' (FORMAT PARQUET)")
    n = con.execute(f"SELECT count(*) FROM '{out}'").fetchone()[0]
    con.close()
    return {"rooms": int(n), "seconds": time.perf_counter() - t0}


def compare_rooms(spark_rooms_dir: str, duck_rooms_file: str) -> dict[str, int]:
    """Rooms whose value differs between Spark's `rooms` Parquet directory and
    DuckDB's file, per compared column (doubles within 1e-6 relative), plus
    `missing` (rooms in one table only). All zeros = the two agree."""
    import duckdb

    checks = []
    for c in COMPARED:
        checks.append(
            f"count(*) FILTER (NOT (s.{c} IS NOT DISTINCT FROM d.{c} OR abs(s.{c} - d.{c}) <= 1e-6 * greatest(abs(d.{c}), 1))) AS {c}"
        )
    sql = f"""
      SELECT count(*) FILTER (s.room_id IS NULL OR d.room_id IS NULL) AS missing, {", ".join(checks)}
      FROM read_parquet('{spark_rooms_dir}/*.parquet') s FULL OUTER JOIN read_parquet('{duck_rooms_file}') d USING (room_id)
    """
    con = duckdb.connect()
    row = con.execute(sql).fetchone()
    names = [d[0] for d in con.description]
    con.close()
    return dict(zip(names, (int(v) for v in row), strict=True))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.duckdb_reference", description=__doc__.split("\n")[0])
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--source", choices=("json", "parquet"), default="json", help="parquet: --input is a compacted store"
    )
    a = p.parse_args(argv)
    r = compute_rooms(a.input, a.output, a.threads, a.source)
    print(f"{r['rooms']:,} rooms in {r['seconds']:.1f} s -> {a.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
