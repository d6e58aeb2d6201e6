"""Declared Spark schemas for the delivery event log.

Built from `shared.events.EVENT_FIELDS`, the one definition of the log line,
narrowed to the fields the job reads (`READ_FIELDS`): Spark's JSON reader
skips the other keys of a line without building values for them. Two line
formats are read with one schema:

- a plain event line, as the functions write it (`EVENT_LOG_PATH` locally);
- a Cloud Logging `LogEntry` as the Logging sink exports it to Cloud Storage,
  with the event under `jsonPayload` and the entry's own `timestamp`.

JSON integers are declared as doubles and checked for integrality afterwards:
Cloud Logging keeps `jsonPayload` as a protobuf `Struct`, whose numbers are all
doubles, so an exported `seq` may come back as `3.0`.
"""

from __future__ import annotations

from pyspark.sql import types as T

from shared.events import EVENT_FIELDS, LOG_TYPE, SCHEMA_VERSION, TERMINAL_EVENTS, EventType

__all__ = [
    "COMPACT_SCHEMA",
    "CORRUPT_COLUMN",
    "READ_FIELDS",
    "EVENT_COLUMNS",
    "INTEGER_FIELDS",
    "LINE_SCHEMA",
    "LOG_TYPE",
    "MESSAGE_EVENTS",
    "PAYLOAD_SCHEMA",
    "SCHEMA_VERSION",
    "TERMINAL",
    "KNOWN_EVENTS",
    "EVENT_SCHEMA",
    "ENTRY_EVENTS",
    "SEND_EVENTS",
    "LIFECYCLE_EVENTS",
]

_JSON_TO_SPARK = {
    "string": T.StringType(),
    "integer": T.DoubleType(),  # checked for integrality, then cast to long
    "number": T.DoubleType(),
}

#: The event fields the transforms read, plus the two the parse checks
#: (`log_type`, `schema_version`); in the order shared.events declares them.
READ_FIELDS: tuple[str, ...] = tuple(
    k
    for k in EVENT_FIELDS
    if k
    in (
        "log_type", "schema_version", "event", "ts", "room_id", "seq", "attempt", "message_id", "provider",
        "trigger", "reason", "error_code", "error_title", "published_at", "publish_to_send_ms", "send_to_ack_ms",
        "trigger_to_send_ms", "actor", "incarnation", "event_id",
    )
)  # fmt: skip
#: The typed event columns the parse keeps (and compaction stores): `READ_FIELDS`
#: without the two checked ones, which are constant on a valid event.
EVENT_COLUMNS: tuple[str, ...] = tuple(k for k in READ_FIELDS if k not in ("log_type", "schema_version"))
#: Fields whose JSON type is integer (cast to long once validated).
INTEGER_FIELDS: tuple[str, ...] = tuple(k for k in READ_FIELDS if EVENT_FIELDS[k] == "integer")
#: Name of the column Spark fills with a line it could not parse.
CORRUPT_COLUMN = "_corrupt_record"

#: The event object itself (a plain line, or a LogEntry's `jsonPayload`).
PAYLOAD_SCHEMA = T.StructType([T.StructField(k, _JSON_TO_SPARK[EVENT_FIELDS[k]], True) for k in READ_FIELDS])

#: One line of either format: the event's fields at the top level (plain line)
#: or under `jsonPayload` (LogEntry, which also has its own `timestamp`).
LINE_SCHEMA = T.StructType(
    list(PAYLOAD_SCHEMA.fields)
    + [
        T.StructField("jsonPayload", PAYLOAD_SCHEMA, True),
        T.StructField("timestamp", T.StringType(), True),
        T.StructField(CORRUPT_COLUMN, T.StringType(), True),
    ]
)

#: A valid, typed event as the transforms see it. `ts` is a UTC timestamp;
#: `published_at` too; `*_ms` are milliseconds (double).
EVENT_SCHEMA = T.StructType(
    [
        T.StructField(
            k,
            T.TimestampType()
            if k in ("ts", "published_at")
            else T.LongType()
            if v == "integer"
            else T.DoubleType()
            if v == "number"
            else T.StringType(),
            True,
        )
        for k, v in ((k, EVENT_FIELDS[k]) for k in EVENT_COLUMNS)
    ]
)

#: A compacted event as stored in Parquet (`pipeline.compact`): the typed
#: event, its `source` file, and the `date` (UTC day of `ts`) it is partitioned by.
COMPACT_SCHEMA = T.StructType(
    list(EVENT_SCHEMA.fields)
    + [T.StructField("source", T.StringType(), True), T.StructField("date", T.DateType(), True)]
)

KNOWN_EVENTS: tuple[str, ...] = tuple(str(e) for e in EventType)
TERMINAL: tuple[str, ...] = tuple(sorted(str(e) for e in TERMINAL_EVENTS))
#: Events about one message of one room: they need `room_id` and `seq`.
MESSAGE_EVENTS: tuple[str, ...] = tuple(
    str(e)
    for e in (
        EventType.ENQUEUED,
        EventType.SENT,
        EventType.SEND_FAILED,
        EventType.ACKED,
        EventType.FAILED,
        EventType.TIMED_OUT,
        EventType.DEAD_LETTERED,
    )
)
#: How a message enters its room: queued, or parked at its place (a dead-letter
#: copy, or a placeholder for one, blocking the room until an operator acts).
ENTRY_EVENTS: tuple[str, ...] = (str(EventType.ENQUEUED), str(EventType.PARKED))
#: A send attempt that may have reached the platform: accepted (`sent`), or
#: whose outcome is unknown (`send_unknown`: counted as possibly sent).
SEND_EVENTS: tuple[str, ...] = (str(EventType.SENT), str(EventType.SEND_UNKNOWN))
#: Every event the per-message lifecycle reads (with a `seq`): entries, send
#: attempts and their failures, operator redrives, and the terminal events.
LIFECYCLE_EVENTS: tuple[str, ...] = tuple(
    sorted({*MESSAGE_EVENTS, *ENTRY_EVENTS, *SEND_EVENTS, str(EventType.REDRIVEN), *TERMINAL})
)
