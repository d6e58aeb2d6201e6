"""One local Spark session for all pipeline tests, and helpers to write event
lines the way the functions do (through shared.events)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from shared.events import DeliveryEvent, EventType, utc_iso

#: 2026-11-22T10:00:00Z in epoch seconds: every test log starts here.
T0 = 1_795_341_600


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pipeline.session import build_session

    session = build_session("local[2]", driver_memory="1g", shuffle_partitions=2, app_name="baton-pipeline-tests")
    yield session
    session.stop()


def at(seconds: float) -> str:
    """RFC 3339 time `seconds` after T0 (microsecond precision)."""
    return utc_iso(round((T0 + seconds) * 1_000_000))


def ev(event: str, t: float, room: str | None, seq: int | None = None, attempt: int | None = None, **kw: Any) -> dict:
    """One event as the functions log it (`DeliveryEvent.to_record`), at T0 + t seconds."""
    comp = kw.pop("component", "enqueue")
    return DeliveryEvent(EventType(event), at(t), comp, room, seq, attempt, **kw).to_record()


def line(record: dict) -> str:
    return json.dumps(record, separators=(",", ":"))


def log_entry(record: dict, insert_id: str = "x") -> str:
    """The same event as Cloud Logging exports it to Cloud Storage: a LogEntry,
    `severity` lifted out of the payload, numbers as JSON doubles (Struct)."""
    payload = {k: (float(v) if isinstance(v, int) and not isinstance(v, bool) else v) for k, v in record.items()}
    severity = payload.pop("severity")
    return json.dumps(
        {
            "insertId": insert_id,
            "jsonPayload": payload,
            "logName": "projects/p/logs/run.googleapis.com%2Fstdout",
            "receiveTimestamp": record["ts"],
            "resource": {"type": "cloud_run_revision", "labels": {"service_name": "webhook"}},
            "severity": severity,
            "timestamp": record["ts"],
        }
    )


def lines_df(spark: Any, lines: list[str], source: str = "test.jsonl") -> Any:
    """A DataFrame shaped like `pipeline.extract.read_lines`' output."""
    return spark.createDataFrame([(v, source) for v in lines], "value string, source string")


def sent(
    t: float, room: str, seq: int, attempt: int = 1, trigger: str = "enqueue", p2s: float = 100.0, **kw: Any
) -> dict:
    return ev(
        "sent",
        t,
        room,
        seq,
        attempt,
        provider="whatsapp",
        delivery_id=f"{seq}.{attempt}.x.{room}",
        trigger=trigger,
        publish_to_send_ms=p2s,
        trigger_to_send_ms=5.0,
        **kw,
    )


def enq(t: float, room: str, seq: int) -> dict:
    return ev("enqueued", t, room, seq, message_id=f"{room}-m{seq}", provider="whatsapp", published_at=at(t - 0.1))


def acked(t: float, room: str, seq: int, ms: float, attempt: int = 1) -> dict:
    return ev("acked", t, room, seq, attempt, component="webhook", status="delivered", send_to_ack_ms=ms)


def late_ack(t: float, room: str, seq: int, ms: float, attempt: int = 1) -> dict:
    return ev(
        "status_ignored",
        t,
        room,
        seq,
        attempt,
        component="webhook",
        status="delivered",
        reason="late_ack",
        send_to_ack_ms=ms,
    )


def timed_out(t: float, room: str, seq: int, attempt: int = 1) -> dict:
    return ev("timed_out", t, room, seq, attempt, component="timeout")


def scenario() -> list[dict]:
    """The hand-written log most tests share. Rooms:

    - `in-order`: seqs 1-3 sent one after another; 1 and 2 acked, 3 times out
      after 3 s and its ack comes late (4 s after the send);
    - `resend`: seq 1 sent (attempt 1), resent 3 s later (attempt 2), acked;
    - `lost`: seq 1 acked; seq 2 enqueued and never ended;
    - `two-in-flight`: seq 2 sent while seq 1 is still waiting for its ack;
    - `out-of-order`: seq 2 sent and acked before seq 1 is sent;
    - `gap`: seqs 1, 2 and 4 enqueued (3 missing), all acked in order;
    - `ends`: seq 1 fails on the platform (131026); seq 2's send fails and it is dead-lettered.
    Plus informational events that must change nothing.
    """
    r = "in-order"
    log = [
        enq(0.0, r, 1), enq(0.2, r, 2), enq(0.3, r, 3),
        sent(1.0, r, 1), ev("status_ignored", 1.1, r, 1, 1, component="webhook", status="sent", reason="sent_status"),
        acked(1.5, r, 1, 500.0),
        sent(1.6, r, 2, trigger="ack"), acked(2.0, r, 2, 400.0),
        sent(2.1, r, 3, trigger="ack"), timed_out(5.1, r, 3), late_ack(6.1, r, 3, 4000.0),
        ev("timeout_ignored", 2.5, r, 1, 1, component="timeout", reason="not_in_flight"),
    ]  # fmt: skip
    r = "resend"
    log += [
        enq(0.0, r, 1),
        sent(1.0, r, 1),
        sent(4.0, r, 1, attempt=2, trigger="resend"),
        acked(4.3, r, 1, 300.0, attempt=2),
    ]
    r = "lost"
    log += [enq(0.0, r, 1), sent(0.5, r, 1), acked(0.8, r, 1, 300.0), enq(0.9, r, 2)]
    r = "two-in-flight"
    log += [
        enq(0.0, r, 1),
        enq(0.1, r, 2),
        sent(1.0, r, 1),
        sent(1.5, r, 2),
        acked(2.0, r, 1, 1000.0),
        acked(3.0, r, 2, 1500.0),
    ]
    r = "out-of-order"
    log += [
        enq(0.0, r, 1),
        enq(0.1, r, 2),
        sent(1.0, r, 2),
        acked(1.5, r, 2, 500.0),
        sent(2.0, r, 1),
        acked(2.5, r, 1, 500.0),
    ]
    r = "gap"
    log += [enq(0.0, r, 1), enq(0.1, r, 2), enq(0.2, r, 4)]
    log += [sent(1.0, r, 1), acked(1.2, r, 1, 200.0), sent(1.3, r, 2), acked(1.5, r, 2, 200.0)]
    log += [sent(1.6, r, 4), acked(1.8, r, 4, 200.0)]
    r = "ends"
    log += [
        enq(0.0, r, 1), enq(0.1, r, 2), sent(1.0, r, 1),
        ev("failed", 1.4, r, 1, 1, component="webhook", status="failed", error_code=131026, error_title="Message undeliverable"),
        ev("send_failed", 1.5, r, 2, 1, reason="http_500"),
        ev("dead_lettered", 1.6, r, 2, 1, reason="send_attempts_exhausted"),
    ]  # fmt: skip
    log += [
        ev("duplicate_ignored", 0.05, "in-order", 1, message_id="in-order-m1"),
        ev("rejected", 0.06, None, reason="no_room_attribute"),
        ev("status_unknown", 0.07, None, component="webhook", status="delivered", reason="unknown_delivery"),
    ]
    return log
