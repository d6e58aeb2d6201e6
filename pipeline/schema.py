"""Declared Spark schemas for the delivery event log.

Built from `shared.events.EVENT_FIELDS`, the one definition of the log line, so
a field added there reaches the pipeline without a second list to keep in
step. Two line formats are read with one schema:

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
    "CORRUPT_COLUMN",
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
]

_JSON_TO_SPARK = {
    "string": T.StringType(),
    "integer": T.DoubleType(),  # checked for integrality, then cast to long
    "number": T.DoubleType(),
}

#: Event fields, in the order shared.events declares them.
EVENT_COLUMNS: tuple[str, ...] = tuple(EVENT_FIELDS)
#: Fields whose JSON type is integer (cast to long once validated).
INTEGER_FIELDS: tuple[str, ...] = tuple(k for k, v in EVENT_FIELDS.items() if v == "integer")
#: Name of the column Spark fills with a line it could not parse.
CORRUPT_COLUMN = "_corrupt_record"

#: The event object itself (a plain line, or a LogEntry's `jsonPayload`).
PAYLOAD_SCHEMA = T.StructType([T.StructField(k, _JSON_TO_SPARK[v], True) for k, v in EVENT_FIELDS.items()])

#: One line of either format: the event's fields at the top level (plain line)
#: or under `jsonPayload` (LogEntry, which also has `timestamp` and `logName`).
LINE_SCHEMA = T.StructType(
    list(PAYLOAD_SCHEMA.fields)
    + [
        T.StructField("jsonPayload", PAYLOAD_SCHEMA, True),
        T.StructField("timestamp", T.StringType(), True),
        T.StructField("logName", T.StringType(), True),
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
        for k, v in EVENT_FIELDS.items()
    ]
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
