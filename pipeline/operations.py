"""Faults and operations, from the events that are not a message's lifecycle.

Pure DataFrame transforms (no action, no I/O), as in `pipeline.transforms`.
Input: valid events (`transforms.valid_events`). Every `*_ms` column is
milliseconds (double), every `*_at` column a UTC timestamp.

- `faults`: every event type but the normal path's, counted by its
  cause (its `reason`, or `error_title`, with numbers replaced by `N` so that
  "next token in 120 ms" and "in 80 ms" count together) and provider;
- `waits`: the episodes with a start and an end (`WAIT_KINDS`): pauses,
  parked messages, paced waits, preparation at the head of line, producer
  sequences held, scheduled messages, each with its duration;
- `operator_actions`: every action an operator took, with actor, time,
  room and reason (the audit trail);
- `room_faults`: per room, the faults that stop or slow it;
- `sequence_gaps`: each producer sequence gap given up, with its numbers;
- `rescues`: each watchdog rescue, with its phase and how overdue the room was.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from pipeline.lifecycle import ms_between
from pipeline.schema import SEND_EVENTS, TERMINAL

#: Events an operator's action logs (`actor` set).
OPERATOR_EVENTS = ("paused", "resumed", "skipped", "redriven", "operator_ignored", "statuses_replayed")
#: The normal path of a message, reported per message, not as faults.
NORMAL_PATH = ("enqueued", "sent", "acked", "timed_out")
#: Faults counted per room (`room_faults`), in its column order.
ROOM_FAULTS = (
    "backpressure", "watchdog_rescued", "timer_arm_failed", "resent", "send_unknown", "blocked", "sequence_gap",
    "prepare_failed",
)  # fmt: skip


@dataclass(frozen=True)
class WaitKind:
    """An episode: from a `start` event to the first of the `ends` after it,
    for the same room and `key` (`seq`, `message_id`, or the room alone)."""

    kind: str
    start: str
    ends: tuple[str, ...]
    key: str | None
    meaning: str


_SENT_OR_ENDED = (*SEND_EVENTS, *TERMINAL)
WAIT_KINDS = (
    WaitKind("paused", "paused", ("resumed",), None, "an operator paused the room, until the resume"),
    WaitKind("parked", "parked", ("redriven", "skipped"), "seq", "a parked message blocks its room until an operator redrives or skips it"),
    WaitKind("paced", "paced", _SENT_OR_ENDED, "seq", "the head waits for a token of its pair rate or a slot of its sender"),
    WaitKind("preparing", "preparing", _SENT_OR_ENDED, "seq", "the head waits for its preparation (a media upload)"),
    WaitKind("sequence_held", "sequence_held", ("enqueued",), "message_id", "a message waits for its producer's earlier sequence numbers"),
    WaitKind("scheduled", "scheduled", ("enqueued", "skipped"), "message_id", "a scheduled message waits outside its room until its time"),
)  # fmt: skip


def cause() -> Column:
    """An event's cause, for counting: its `reason` (else `error_title`, else
    `-`), at most 80 characters, with every number replaced by `N`."""
    text = F.coalesce(F.col("reason"), F.col("error_title"), F.lit("-"))
    return F.regexp_replace(F.substring(text, 1, 80), r"[0-9]+(\.[0-9]+)?", "N")


def faults(events: DataFrame) -> DataFrame:
    """Counts of every event but the normal path's (`NORMAL_PATH`), by `event`,
    `cause` and `provider` (`-` when the event has none). Columns: `event`,
    `cause`, `provider`, `events`, `rooms` (distinct rooms, approximate,
    within about 1%). Ordered by event, then most frequent first."""
    return (
        events.where(~F.col("event").isin(*NORMAL_PATH))
        .groupBy("event", cause().alias("cause"), F.coalesce(F.col("provider"), F.lit("-")).alias("provider"))
        .agg(F.count("*").alias("events"), F.approx_count_distinct("room_id", 0.01).alias("rooms"))
        .orderBy("event", F.desc("events"), "cause")
    )


def _key(k: WaitKind) -> Column:
    """What ties a wait's start to its end besides the room: the `key`
    column as a string, or `""` for a wait of the room itself."""
    return F.lit("") if k.key is None else F.col(k.key).cast("string")


def _scheduled_due() -> Column:
    """On a `scheduled` event: when the message was due to enter its room,
    from its reason (`enters its room at 2026-11-22T10:00:00.000000Z ...`)."""
    return F.try_to_timestamp(F.regexp_extract(F.col("reason"), r"enters its room at (\S+)", 1))


def waits(events: DataFrame) -> DataFrame:
    """One row per episode of `WAIT_KINDS`: `kind`, `room_id`, `seq`,
    `message_id`, `provider`, `started_at`, `ended_at` (null while it still
    waits at the end of the log), `wait_ms`, `actor` and `cause` (of the
    start event), `due_at` and `late_ms` (a scheduled message: when it was
    due, and how late it entered its room after that)."""
    starts = events.where(F.col("event").isin(*[k.start for k in WAIT_KINDS]))
    kind_of = F.lit(None).cast("string")
    key_of = F.lit(None).cast("string")
    for k in WAIT_KINDS:
        kind_of = F.when(F.col("event") == k.start, F.lit(k.kind)).otherwise(kind_of)
        key_of = F.when(F.col("event") == k.start, _key(k)).otherwise(key_of)
    starts = starts.select(
        kind_of.alias("kind"), "room_id", "seq", "message_id", "provider", F.col("ts").alias("started_at"),
        "actor", cause().alias("cause"), F.when(F.col("event") == "scheduled", _scheduled_due()).alias("due_at"),
        key_of.alias("_key"),
    )  # fmt: skip
    ends = functools.reduce(DataFrame.unionByName, [
        events.where(F.col("event").isin(*k.ends) & _key(k).isNotNull())
        .select(F.lit(k.kind).alias("_kind"), F.col("room_id").alias("_room"), _key(k).alias("_key_e"), F.col("ts").alias("_end"))
        for k in WAIT_KINDS
    ])  # fmt: skip
    # only the ends of messages and rooms that waited: a semi-join against the
    # starts' keys (broadcast: they are few) before the join, rather than
    # shuffling every `sent` and `enqueued` of the log
    keys = starts.select(F.col("kind").alias("_kind"), F.col("room_id").alias("_room"), F.col("_key").alias("_key_e"))
    ends = ends.join(F.broadcast(keys.distinct()), ["_kind", "_room", "_key_e"], "left_semi")
    joined = starts.join(
        ends,
        (starts["kind"] == ends["_kind"]) & (starts["room_id"] == ends["_room"]) & (starts["_key"] == ends["_key_e"])
        & (ends["_end"] >= starts["started_at"]),
        "left",
    )  # fmt: skip
    # one row per start (two identical start events count once)
    firsts = joined.groupBy("kind", "room_id", "_key", "started_at").agg(
        *[F.first(c, ignorenulls=True).alias(c) for c in ("seq", "message_id", "provider", "actor", "cause", "due_at")],
        F.min("_end").alias("ended_at"),
    )  # fmt: skip
    return firsts.select(
        "kind", "room_id", F.when(F.col("seq") > 0, F.col("seq")).alias("seq"), "message_id", "provider",
        "started_at", "ended_at", ms_between(F.col("ended_at"), F.col("started_at")).alias("wait_ms"), "actor",
        "cause", "due_at", F.greatest(ms_between(F.col("ended_at"), F.col("due_at")), F.lit(0.0)).alias("late_ms"),
    )  # fmt: skip


def wait_summary(w: DataFrame) -> DataFrame:
    """`waits` per kind and provider: `episodes`, `open` (no end in the log),
    `rooms`, `total_s`, `p50_ms`, `p99_ms`, `max_ms` (approximate
    percentiles), and for scheduled messages `late_p50_ms`, `late_max_ms`."""
    return (
        w.groupBy("kind", F.coalesce(F.col("provider"), F.lit("-")).alias("provider"))
        .agg(
            F.count("*").alias("episodes"),
            F.count(F.when(F.col("ended_at").isNull(), 1)).alias("open"),
            F.countDistinct("room_id").alias("rooms"),
            (F.sum("wait_ms") / 1000.0).alias("total_s"),
            F.percentile_approx("wait_ms", [0.5, 0.99], 10000).alias("_p"),
            F.max("wait_ms").alias("max_ms"),
            F.percentile_approx("late_ms", 0.5, 10000).alias("late_p50_ms"),
            F.max("late_ms").alias("late_max_ms"),
        )
        .select(
            "kind", "provider", "episodes", "open", "rooms", "total_s", F.col("_p")[0].alias("p50_ms"),
            F.col("_p")[1].alias("p99_ms"), "max_ms", "late_p50_ms", "late_max_ms",
        )
        .orderBy("kind", "provider")
    )  # fmt: skip


def operator_actions(events: DataFrame) -> DataFrame:
    """The operator audit trail: every `OPERATOR_EVENTS` event an operator
    logged (`actor` set), in time order. Columns: `ts`, `action` (the event;
    `scheduled_cancelled` for a scheduled message cancelled before it entered
    its room), `actor`, `room_id`, `seq`, `message_id`, `reason`."""
    cancelled = (F.col("event") == "skipped") & F.col("seq").isNull()
    action = F.when(cancelled, F.lit("scheduled_cancelled")).otherwise(F.col("event"))
    return (
        events.where(F.col("event").isin(*OPERATOR_EVENTS) & F.col("actor").isNotNull())
        .select("ts", action.alias("action"), "actor", "room_id", "seq", "message_id", "reason")
        .orderBy("ts", "room_id", "seq")
    )


def room_faults(events: DataFrame) -> DataFrame:
    """Per room with any of them, the count of each `ROOM_FAULTS` event
    (back-pressure refusals, watchdog rescues, timers not armed, resends,
    unknown outcomes, blocked heads, sequence gaps, preparation failures), and
    `total`. Ordered by total, most first."""
    counts = [F.count(F.when(F.col("event") == e, 1)).alias(e) for e in ROOM_FAULTS]
    total = sum((F.col(e) for e in ROOM_FAULTS[1:]), F.col(ROOM_FAULTS[0]))
    return (
        events.where(F.col("event").isin(*ROOM_FAULTS) & F.col("room_id").isNotNull())
        .groupBy("room_id")
        .agg(*counts)
        .withColumn("total", total)
        .orderBy(F.desc("total"), "room_id")
    )


def sequence_gaps(events: DataFrame) -> DataFrame:
    """Each producer sequence gap a room gave up on: `room_id`, `ts`,
    `missing` (the sequence numbers, `3` or `3..5`, from the event's reason)."""
    missing = F.regexp_extract(F.col("reason"), r"producer sequence (\S+) missing", 1)
    return (
        events.where(F.col("event") == "sequence_gap")
        .select("room_id", "ts", missing.alias("missing"))
        .orderBy("room_id", "ts")
    )


def rescues(events: DataFrame) -> DataFrame:
    """Each watchdog rescue: `room_id`, `seq`, `provider`, `ts`, `phase`
    (the attempt's phase, or `sequence gap`) and `overdue_ms`, how late the
    room's own wake-up was, from the event's reason (`{phase}, overdue {ms}
    ms`; null in lines written before it said so)."""
    reason = F.coalesce(F.col("reason"), F.lit(""))
    overdue = F.regexp_extract(reason, r"overdue ([0-9.]+) ms", 1)
    return events.where(F.col("event") == "watchdog_rescued").select(
        "room_id", "seq", "provider", "ts", F.regexp_extract(reason, r"^([^,]*)", 1).alias("phase"),
        F.when(overdue != "", overdue.cast("double")).alias("overdue_ms"),
    )


def rescue_summary(rescues_df: DataFrame) -> DataFrame:
    """Watchdog rescues by `phase`: `rescues`, `rooms`, `overdue_p50_ms`,
    `overdue_p99_ms`, `overdue_max_ms` (ms)."""
    return (
        rescues_df.groupBy("phase")
        .agg(
            F.count("*").alias("rescues"),
            F.countDistinct("room_id").alias("rooms"),
            F.percentile_approx("overdue_ms", 0.5, 10000).alias("overdue_p50_ms"),
            F.percentile_approx("overdue_ms", 0.99, 10000).alias("overdue_p99_ms"),
            F.max("overdue_ms").alias("overdue_max_ms"),
        )
        .orderBy(F.desc("rescues"), "phase")
    )


def preparation_times(events: DataFrame) -> DataFrame:
    """Each preparation that finished: `room_id`, `seq`, `provider`, `ts`,
    `took_ms` (request to result, as the `prepared` event's reason says:
    `attempt N took X ms`)."""
    took = F.regexp_extract(F.col("reason"), r"took ([0-9.]+) ms", 1)
    return events.where(F.col("event") == "prepared").select(
        "room_id", "seq", "provider", "ts", F.when(took != "", took.cast("double")).alias("took_ms")
    )


def sends_per_message(messages: DataFrame) -> DataFrame:
    """Duplicates per message: how many messages had each number of
    possibly-sent attempts beyond the first (`sent` and `send_unknown`
    attempts, less one), among messages with at least one. Columns:
    `extra_sends`, `messages`, ordered."""
    attempts = F.col("sends") + F.col("unknown_sends")
    extra = F.greatest(attempts - 1, F.lit(0))
    return (
        messages.where(attempts > 0).groupBy(extra.alias("extra_sends")).agg(F.count("*").alias("messages"))
        .orderBy("extra_sends")
    )  # fmt: skip
