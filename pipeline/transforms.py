"""Pure transforms of the delivery event log: DataFrame in, DataFrame out.

None of these functions reads or writes anything or triggers a Spark action;
`pipeline.job` chains them and `pipeline.load` writes the results. Units:
every `*_ms` column is milliseconds (double), every `*_s` column seconds
(double), every `*_at` column a UTC timestamp.

Terms, as the delivery path uses them:

- a *message* is one `(room_id, seq)`; `seq` is its position in the room, from 1,
  in publish order;
- a message is *in flight* from its first possibly-sent attempt (`sent` or
  `send_unknown`) to its terminal event (`acked`, `failed`, `timed_out`,
  `dead_lettered`, `skipped`); a redriven dead letter lives again
  (`pipeline.lifecycle`, which holds the lifecycle and the audit);
- its *head-of-line wait* is from its entry (`enqueued`, or `parked`) to its
  first send: the time it waited behind the earlier messages of its room;
- a *late ack* is a `status_ignored` event with reason `late_ack`: the ack came
  after the timeout had already ended the message;
- a message with no terminal event in the log is *lost*.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import Column, DataFrame, GroupedData
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pipeline.lifecycle import (  # noqa: F401 - the lifecycle and audit, re-exported
    AUDIT_COLUMNS,
    LATE_ACK,
    MOVED,
    OUTCOMES,
    distinct_events,
    message_lifecycle,
    ms_between,
    ordering_audit,
    room_summary,
)
from pipeline.schema import (
    CORRUPT_COLUMN,
    EVENT_COLUMNS,
    INTEGER_FIELDS,
    KNOWN_EVENTS,
    LINE_SCHEMA,
    LOG_TYPE,
    MESSAGE_EVENTS,
    READ_FIELDS,
    SCHEMA_VERSION,
)

#: The outcomes of messages whose end depends on the ack timeout X (`ack_waits`).
WAIT_OUTCOMES = ("acked", "timed_out")


# --------------------------------------------------------------------------- parse

_JSON_OPTIONS = {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT_COLUMN}


def check_lines(raw: DataFrame, corrupt: Column, line: Column, blank: Column | None = None) -> DataFrame:
    """Type and check lines already split into the fields of `LINE_SCHEMA`.

    Input: `raw` with the `LINE_SCHEMA` columns at the top level (as Spark's
    JSON reader gives them) and `source`; `corrupt` is true where the JSON
    reader could not read the line; `line` is the text kept on a rejected
    line, an expression over `raw`'s columns that is computed for rejected
    lines only (re-serialising every valid line cost about 6 CPU-s of 60 when
    compacting 10M lines, measured); `blank` is true for a line of blanks
    (default: `line` trimmed is empty).

    Output: one row per input row: `EVENT_COLUMNS` typed (`ts`,
    `published_at` UTC timestamps; integer fields long; `*_ms` double,
    milliseconds), `source`, `line` (on rejected lines only) and
    `reject_reason` (null for a valid event, else one of `empty_line`,
    `not_json`, `wrong_type`, `wrong_type:<field>`, `missing_field:<field>`,
    `wrong_log_type`, `unsupported_schema_version`, `unknown_event`,
    `bad_timestamp`). Bad lines never raise: they get a reason.

    A line is a LogEntry (Cloud Logging's export) when it has a `jsonPayload`
    object; its event is that payload, and the entry's `timestamp` stands in
    for a missing `ts`.
    """
    entry = F.col("jsonPayload").isNotNull()

    def field(name: str) -> Column:
        payload = F.col(f"jsonPayload.{name}")
        top = F.col(name)
        if name == "ts":
            return F.when(entry, F.coalesce(payload, F.col("timestamp"))).otherwise(top)
        return F.when(entry, payload).otherwise(top)

    raw_cols = {name: field(name) for name in READ_FIELDS}
    if blank is None:
        blank = F.trim(line) == ""
    # name the fields once, so the checks below read plain columns; `line` stays
    # an expression over `raw`'s columns, computed for rejected lines only
    df = raw.select("*", *[c.alias(f"_r_{k}") for k, c in raw_cols.items()], corrupt.alias("_corrupt"),
                    blank.alias("_blank"))  # fmt: skip
    r = {k: F.col(f"_r_{k}") for k in READ_FIELDS}
    # `ts` parsed once, in its own column: the checks and the typed column both read it
    df = df.select("*", F.try_to_timestamp(r["ts"]).alias("_ts"))
    ts = F.col("_ts")
    published = F.try_to_timestamp(r["published_at"])
    non_integral = [
        F.when(r[k].isNotNull() & (r[k] != F.floor(r[k])), F.lit(f"wrong_type:{k}")) for k in INTEGER_FIELDS
    ]
    event = r["event"]
    is_message_event = event.isin(*MESSAGE_EVENTS)
    is_late_ack = (event == "status_ignored") & (r["reason"] == LATE_ACK)
    reason = F.coalesce(
        F.when(F.col("_blank"), F.lit("empty_line")),
        F.when(
            F.col("_corrupt"),
            # only evaluated for corrupt lines: was it JSON at all?
            F.when(F.json_object_keys(line).isNull(), F.lit("not_json")).otherwise(F.lit("wrong_type")),
        ),
        F.when(r["log_type"].isNull(), F.lit("missing_field:log_type")),
        F.when(r["log_type"] != LOG_TYPE, F.lit("wrong_log_type")),
        F.when(r["schema_version"] != SCHEMA_VERSION, F.lit("unsupported_schema_version")),
        F.when(event.isNull(), F.lit("missing_field:event")),
        F.when(~event.isin(*KNOWN_EVENTS), F.lit("unknown_event")),
        F.when(r["ts"].isNull(), F.lit("missing_field:ts")),
        F.when(ts.isNull(), F.lit("bad_timestamp")),
        *non_integral,
        F.when((is_message_event | is_late_ack) & r["room_id"].isNull(), F.lit("missing_field:room_id")),
        F.when((is_message_event | is_late_ack) & r["seq"].isNull(), F.lit("missing_field:seq")),
        F.when((event == "sent") & r["attempt"].isNull(), F.lit("missing_field:attempt")),
        F.when(is_late_ack & r["send_to_ack_ms"].isNull(), F.lit("missing_field:send_to_ack_ms")),
    )
    typed = []
    for name in EVENT_COLUMNS:
        if name == "ts":
            col = ts
        elif name == "published_at":
            col = published
        elif name in INTEGER_FIELDS:
            # a huge or fractional number was rejected above; keep the cast safe anyway
            col = F.when(F.abs(r[name]) < F.lit(9.0e18), r[name].cast(T.LongType()))
        else:
            col = r[name]
        typed.append(col.alias(name))
    # the reason in its own column too, computed once for `line` and `reject_reason`
    checked = df.select("*", reason.alias("_reason"))
    reject_reason = F.col("_reason")
    if_rejected = F.when(reject_reason.isNotNull(), line)
    return checked.select(*typed, "source", if_rejected.alias("line"), reject_reason.alias("reject_reason"))


def parse_lines(lines: DataFrame) -> DataFrame:
    """Parse raw text lines of either format into typed events plus a verdict
    (`check_lines`' output), keeping the raw text of every rejected line.

    Input: `value` (string, one line) and `source` (string, the file it came
    from). This is the per-line path (`from_json` over text) for lines
    already in a DataFrame, such as the tests' hand-written ones; files are
    read with `pipeline.extract.read_events`, Spark's JSON data source, which
    is several times faster.
    """
    j = F.from_json(F.col("value"), LINE_SCHEMA, _JSON_OPTIONS)
    df = lines.select("source", "value", j.alias("_j"))
    raw = df.select("source", "value", "_j.*", F.col("_j").isNull().alias("_null"))
    corrupt = F.col("_null") | F.col(CORRUPT_COLUMN).isNotNull()
    return check_lines(raw, corrupt, F.col("value"))


def parse_json_rows(rows: DataFrame) -> DataFrame:
    """`check_lines` on the rows of Spark's JSON reader read with `LINE_SCHEMA`
    (plus `source`), as `pipeline.extract.read_events` gives them.

    The reader keeps a line's raw text only when it cannot read it (the
    corrupt-record column: not JSON, or a field of the wrong type); a line it
    read that fails a check keeps, as `line`, the fields the job reads
    re-serialised as JSON (`to_json`, nulls left out). Blank lines are
    skipped by the reader: they are neither events nor rejects.
    """
    corrupt = F.col(CORRUPT_COLUMN).isNotNull()
    fields = F.struct(*[F.col(k) for k in READ_FIELDS], "jsonPayload", "timestamp")
    line = F.when(corrupt, F.col(CORRUPT_COLUMN)).otherwise(F.to_json(fields))
    # the reader skips blank lines; a line of blanks it cannot read is kept as corrupt
    blank = corrupt & (F.trim(F.col(CORRUPT_COLUMN)) == "")
    return check_lines(rows, corrupt, line, blank)


def valid_events(parsed: DataFrame, columns: tuple[str, ...] = EVENT_COLUMNS) -> DataFrame:
    """The valid events of a parse's output: the given event fields
    (`EVENT_COLUMNS` by default) plus `source`; no `line`, no `reject_reason`."""
    return parsed.where(F.col("reject_reason").isNull()).select(*columns, "source")


def rejected_lines(parsed: DataFrame) -> DataFrame:
    """The rejected lines of a parse's output: `source`, `line` (text, see
    `parse_lines` and `parse_json_rows`) and `reject_reason` (never null)."""
    return parsed.where(F.col("reject_reason").isNotNull()).select("source", "line", "reject_reason")


# --------------------------------------------------------------------------- totals


def _totals_of(grouped: GroupedData, keys: tuple[str, ...], extra: dict[str, Column] | None = None) -> DataFrame:
    """The totals' aggregate over `grouped` (messages grouped by `keys`),
    with the `extra` aggregate columns (name -> aggregate) after the figures."""
    extra = extra or {}
    acked = F.col("outcome") == "acked"
    return grouped.agg(
        # a moved placeholder's message counts under its later seq (pipeline/lifecycle.py)
        F.count(F.when(F.col("outcome") != MOVED, 1)).alias("messages"),
        *[F.count(F.when(F.col("outcome") == o, 1)).alias(o) for o in OUTCOMES],
        F.count(F.when((F.col("outcome") == "timed_out") & F.col("late_ack_ms").isNotNull(), 1)).alias("late_acks"),
        F.coalesce(F.sum("resends"), F.lit(0)).alias("duplicates_sent"),
        # HyperLogLog++ (exact for small counts): an exact distinct count adds an
        # Expand of every row, which made these totals slower than the rest of the job
        F.approx_count_distinct("room_id", 0.01).alias("rooms"),
        F.percentile_approx(F.when(acked, F.col("send_to_ack_ms")), [0.5, 0.9, 0.99], 10000).alias("_ack"),
        F.percentile_approx("publish_to_send_ms", [0.5, 0.99], 10000).alias("_p2s"),
        *[c.alias(name) for name, c in extra.items()],
    ).select(
        *keys,
        "rooms",
        "messages",
        *OUTCOMES,
        "late_acks",
        "duplicates_sent",
        (F.col("acked") / F.col("messages")).alias("acked_share"),
        (F.col("timed_out") / F.col("messages")).alias("timed_out_share"),
        F.col("_ack")[0].alias("send_to_ack_p50_ms"),
        F.col("_ack")[1].alias("send_to_ack_p90_ms"),
        F.col("_ack")[2].alias("send_to_ack_p99_ms"),
        F.col("_p2s")[0].alias("publish_to_send_p50_ms"),
        F.col("_p2s")[1].alias("publish_to_send_p99_ms"),
        *extra,
    )


def message_time(messages: DataFrame) -> Column:
    """The time a message is filed under in totals: enqueued, else first sent, else ended."""
    return F.coalesce(F.col("enqueued_at"), F.col("first_sent_at"), F.col("ended_at"))


def totals_by_time(messages: DataFrame, bucket_s: int = 3600) -> DataFrame:
    """Totals per time bucket of `bucket_s` seconds (3600: per hour), by the
    message's enqueue time (`message_time`).

    Output: `bucket_start` (UTC timestamp), `rooms` (approximate, within about
    1%), `messages`, one count per
    outcome (`acked`, `timed_out`, `failed`, `dead_lettered`, `lost`),
    `late_acks`, `duplicates_sent`, `acked_share` and `timed_out_share`
    (0..1, of messages), approximate
    `send_to_ack_p50_ms`/`p90`/`p99` of acked messages and
    `publish_to_send_p50_ms`/`p99`. Raises ValueError if `bucket_s` < 1.
    """
    keyed = messages.withColumn("bucket_start", _time_bucket(messages, bucket_s))
    return _totals_of(keyed.groupBy("bucket_start"), ("bucket_start",)).orderBy("bucket_start")


def _time_bucket(messages: DataFrame, bucket_s: int) -> Column:
    """The start (UTC timestamp) of the `bucket_s`-second bucket of the message's
    `message_time`. Raises ValueError if `bucket_s` < 1."""
    if bucket_s < 1:
        raise ValueError(f"bucket_s must be >= 1 s, got {bucket_s}")
    secs = F.unix_seconds(message_time(messages))
    return F.timestamp_seconds(secs - F.pmod(secs, F.lit(bucket_s)))


def provider_key() -> Column:
    """Over `message_lifecycle` rows: the provider a message's totals and
    latencies go under (`unknown` when no event of the message logged one)."""
    return F.coalesce(F.col("provider"), F.lit("unknown"))


def totals_by_provider(messages: DataFrame) -> DataFrame:
    """The same totals as `totals_by_time`, per `provider` (`whatsapp`,
    `messenger`, `instagram`, ...; `unknown` if no event of the message
    logged one): the report's main figures (acked share, timeouts, ack
    latency) broken down by platform. One row per provider, by name."""
    keyed = messages.withColumn("provider", provider_key())
    return _totals_of(keyed.groupBy("provider"), ("provider",)).orderBy("provider")


def totals_by_time_and_provider(messages: DataFrame, bucket_s: int = 3600) -> DataFrame:
    """The rows of `totals_by_time(messages, bucket_s)` and of
    `totals_by_provider(messages)` from one aggregate over the messages
    (grouping sets: by bucket, and by provider) rather than a pass for each
    (measured at 10M events: 2.2-2.5 s instead of 3.0-3.5 s).

    Output: the totals' columns after `bucket_start` and `provider`, and
    `_by_provider` (boolean): false on a bucket's row (`provider` null), true
    on a provider's (`bucket_start` null). `split_totals` separates them; the
    result has a row per bucket and per provider, small enough to cache so the
    aggregate runs once for both.
    """
    keyed = messages.withColumns({"bucket_start": _time_bucket(messages, bucket_s), "provider": provider_key()})
    return _totals_of(
        keyed.groupingSets([["bucket_start"], ["provider"]], "bucket_start", "provider"),
        ("bucket_start", "provider"),
        {"_by_provider": F.grouping("bucket_start") == 1},
    )


def split_totals(both: DataFrame) -> tuple[DataFrame, DataFrame]:
    """(by time, by provider) from `totals_by_time_and_provider`'s rows, with
    the columns of `totals_by_time` and `totals_by_provider`, unordered (a
    sort costs a sampling job; readers order the written tables)."""
    figures = [c for c in both.columns if c not in ("bucket_start", "provider", "_by_provider")]
    by_provider = F.col("_by_provider")
    return (
        both.where(~by_provider).select("bucket_start", *figures),
        both.where(by_provider).select("provider", *figures),
    )


# --------------------------------------------------------------------------- timeout


def ack_waits(messages: DataFrame, extra: tuple[str, ...] = ()) -> DataFrame:
    """The messages whose end depends on the ack timeout X: those that were
    acked or timed out. Columns: `room_id`, `seq`, `ack_latency_ms` (send to
    the ack that arrived, in time or late; null when no ack ever came), and
    the `extra` columns of `messages` asked for.
    """
    return messages.where(F.col("outcome").isin(*WAIT_OUTCOMES)).select("room_id", "seq", "ack_latency_ms", *extra)


def timeout_tradeoff(messages: DataFrame, candidates_ms: Iterable[float]) -> DataFrame:
    """For each candidate ack timeout X (ms), what it would cost.

    A message waiting for its ack holds its room for min(ack latency, X) when
    the ack arrives, and for X when none does (the platform's no-ack share).
    Failed and dead-lettered messages do not depend on X and are left out.

    Output, one row per candidate, ordered by `timeout_ms`: `timeout_ms`,
    `arriving_acks`, `acks_too_late` (latency > X), `share_too_late` (of
    arriving acks, 0..1), `waits` (acked + timed-out messages), `mean_hold_ms`
    (room time per message), `room_max_messages_per_s` (1000 / mean hold: the
    rate of a room with a backlog), `room_busy_s_mean` and `room_busy_s_p90`
    (per room, total seconds its messages held it). Raises ValueError for an
    empty or non-positive candidate list.
    """
    xs = sorted({float(x) for x in candidates_ms})
    if not xs or xs[0] <= 0:
        raise ValueError(f"candidate timeouts must be > 0 ms, got {xs}")
    lat = F.col("ack_latency_ms")
    # one aggregate per room over the waits, with each candidate's figures as
    # columns (least() skips a null: a wait with no ack holds the room for X);
    # then one row per (candidate, room). A cross join of the waits with the
    # candidates and an aggregate over it took 2.9 s warm at 10M events, this 1.4-2.1 s
    per_room_wide = (
        ack_waits(messages)
        .groupBy("room_id")
        .agg(
            F.count(lat).alias("arriving"),
            F.count("*").alias("n"),
            *[F.sum(F.least(lat, F.lit(x))).alias(f"_busy{i}") for i, x in enumerate(xs)],
            *[F.count(F.when(lat > F.lit(x), 1)).alias(f"_late{i}") for i, x in enumerate(xs)],
        )
    )
    by_candidate = F.array(*[
        F.struct(F.lit(x).alias("timeout_ms"), F.col(f"_busy{i}").alias("busy_ms"), F.col(f"_late{i}").alias("too_late"))
        for i, x in enumerate(xs)
    ])  # fmt: skip
    per_room = per_room_wide.select("room_id", "arriving", "n", F.inline(by_candidate))
    return (
        per_room.groupBy("timeout_ms")
        .agg(
            F.sum("arriving").alias("arriving_acks"),
            F.sum("too_late").alias("acks_too_late"),
            F.sum("n").alias("waits"),
            (F.sum("busy_ms") / F.sum("n")).alias("mean_hold_ms"),
            (F.avg("busy_ms") / 1000.0).alias("room_busy_s_mean"),
            (F.percentile_approx("busy_ms", 0.9, 10000) / 1000.0).alias("room_busy_s_p90"),
        )
        .select(
            "timeout_ms",
            "arriving_acks",
            "acks_too_late",
            F.when(F.col("arriving_acks") > 0, F.col("acks_too_late") / F.col("arriving_acks")).alias("share_too_late"),
            "waits",
            "mean_hold_ms",
            F.when(F.col("mean_hold_ms") > 0, 1000.0 / F.col("mean_hold_ms")).alias("room_max_messages_per_s"),
            "room_busy_s_mean",
            "room_busy_s_p90",
        )
        .orderBy("timeout_ms")
    )


def observed_timeout_ms() -> Column:
    """Over `message_lifecycle` rows: for a timed-out message, the observed
    ack timeout in ms (last `sent` to `timed_out`, which includes Cloud Tasks'
    dispatch delay); null for any other outcome."""
    return F.when(F.col("outcome") == "timed_out", ms_between(F.col("ended_at"), F.col("last_sent_at")))
