"""Synthetic delivery event logs for the benchmark, written by DuckDB SQL.

A realistic mix, in the exact line format of `shared.events` (every key
present, nulls included): `rooms` rooms, each sending its messages one at a
time in seq order; 87% of messages get an ack (lognormal send-to-ack latency,
median 800 ms), those slower than the 3 s timeout end as `timed_out` followed
by a late ack; the other 13% time out with no ack at all; about 0.8% fail on
the platform, 0.2% are dead-lettered after a failed send, 0.5% are resent
(attempt 2) and 1% get a push redelivery (`duplicate_ignored`). Operators
act on a few: 0.2% are skipped in flight, 0.15% are dead-lettered and
redriven (sent again and acked), 0.1% enter parked and are released. Each message
also logs the `sent` status webhook (ignored) and, when acked, the timeout
task that finds nothing in flight, and for 60% a later `read` (ignored): about
5.5 events per message, as in `make demo`.

Deterministic: every random draw is a hash of the message number and a salt.

    python -m tools.bench.synth_log --events 1000000 --rooms 25000 --out out/bench/events-1M.jsonl
"""

from __future__ import annotations

import argparse
import time

EVENTS_PER_MESSAGE = 5.45
TIMEOUT_MS = 3000.0
START = "2026-11-22 10:00:00"

_SQL = """
CREATE OR REPLACE TEMP TABLE msg AS
WITH base AS (
  SELECT i,
         'room-' || lpad(CAST(i % {rooms} AS VARCHAR), 5, '0') AS room_id,
         CAST(i // {rooms} + 1 AS BIGINT) AS seq,
         CAST(hash(i % {rooms}, 'start') % 1800000000 AS BIGINT) AS room_start_us,
         (hash(i, 'u1') % 1000000 + 0.5) / 1000000.0 AS u1,
         (hash(i, 'u2') % 1000000 + 0.5) / 1000000.0 AS u2,
         (hash(i, 'kind') % 10000) / 10000.0 AS uk,
         (hash(i, 'p2s') % 1000000) / 1000000.0 AS up,
         (hash(i, 'x') % 1000) / 1000.0 AS ux
  FROM range({messages}) t(i)
)
SELECT *,
       -- lognormal latency: median 800 ms, sigma 0.8 (Box-Muller)
       exp(ln(800) + 0.8 * sqrt(-2 * ln(u1)) * cos(2 * pi() * u2)) AS lat_ms,
       CASE WHEN uk < 0.008 THEN 'failed'
            WHEN uk < 0.010 THEN 'dead'
            WHEN uk < 0.140 THEN 'noack'
            WHEN uk < 0.142 THEN 'skip'
            WHEN uk < 0.1435 THEN 'redrive'
            ELSE 'ack' END AS kind,
       hash(i, 'park') % 1000 = 0 AS parked,
       -- each room starts within the first 30 min, then one message per 8 s slot, in seq order
       TIMESTAMP '{start}' + to_microseconds(room_start_us) + to_microseconds((seq - 1) * 8000000) AS slot
FROM base;

CREATE OR REPLACE TEMP TABLE m AS
SELECT room_id, seq, kind, ux, parked,
       CASE WHEN kind = 'ack' AND lat_ms > {timeout} THEN 'late' ELSE kind END AS outcome,
       round(lat_ms, 3) AS lat_ms,
       slot - to_microseconds(CAST(up * 1500000 AS BIGINT)) AS t_enq,
       slot + to_microseconds(CAST(20000 + up * 200000 AS BIGINT)) AS t_sent,
       round(150 + up * 1700 + 20, 3) AS p2s_ms,
       slot - to_microseconds(CAST(up * 1500000 AS BIGINT)) - INTERVAL 150 MILLISECOND AS t_pub
FROM msg;
"""

# one SELECT per event kind; every key of shared.events.EVENT_FIELDS, in order
_EVENT = """
SELECT '{severity}' AS severity, '{event} ' || room_id || '#' || seq AS message,
       'baton.delivery' AS log_type, 1 AS schema_version, '{event}' AS event,
       strftime({ts}, '%Y-%m-%dT%H:%M:%S.%fZ') AS ts, {component} AS component,
       room_id, seq, {attempt} AS attempt, {message_id} AS message_id, {provider} AS provider,
       {delivery_id} AS delivery_id, {pmid} AS provider_message_id, {status} AS status,
       {trigger} AS trigger, {reason} AS reason, {error_code} AS error_code, {error_title} AS error_title,
       {published_at} AS published_at, {p2s} AS publish_to_send_ms, {s2a} AS send_to_ack_ms,
       {t2s} AS trigger_to_send_ms, {actor} AS actor
FROM m WHERE {where}
"""

_NULL = "CAST(NULL AS VARCHAR)"
_NUM_NULL = "CAST(NULL AS DOUBLE)"


def _ev(event: str, ts: str, where: str, **kw: str) -> str:
    d = {
        "severity": "INFO",
        "component": "'enqueue'",
        "attempt": "CAST(NULL AS BIGINT)",
        "message_id": _NULL,
        "provider": _NULL,
        "delivery_id": _NULL,
        "pmid": _NULL,
        "status": _NULL,
        "trigger": _NULL,
        "reason": _NULL,
        "error_code": "CAST(NULL AS BIGINT)",
        "error_title": _NULL,
        "published_at": _NULL,
        "p2s": _NUM_NULL,
        "s2a": _NUM_NULL,
        "t2s": _NUM_NULL,
        "actor": _NULL,
    }
    d.update(kw)
    return _EVENT.format(event=event, ts=ts, where=where, **d)


def _ms(col: str, expr: str) -> str:
    return f"{col} + to_microseconds(CAST(({expr}) * 1000 AS BIGINT))"


def events_sql() -> str:
    """The SELECT that yields every event line of table `m` (one per event)."""
    sent_kw = dict(
        attempt="1",
        provider="'whatsapp'",
        delivery_id="seq || '.1.x.' || room_id",
        pmid="'wamid.' || md5(room_id || seq)[:24]",
        trigger="CASE WHEN seq = 1 THEN 'enqueue' ELSE 'ack' END",
        p2s="p2s_ms",
        t2s="round(5 + ux * 40, 3)",
        published_at="strftime(t_pub, '%Y-%m-%dT%H:%M:%S.%fZ')",
    )
    dead = "outcome IN ('dead', 'redrive')"
    sending = f"NOT ({dead})"
    operator = dict(
        actor="'ops@example.com'", component="'operator'", message_id="room_id || '-m' || seq", provider="'whatsapp'"
    )
    end_ack = _ms("t_sent", "lat_ms")
    end_timeout = _ms("t_sent", f"{TIMEOUT_MS} + 55")
    parts = [
        _ev(
            "enqueued",
            "t_enq",
            "NOT parked",
            message_id="room_id || '-m' || seq",
            provider="'whatsapp'",
            published_at="strftime(t_pub, '%Y-%m-%dT%H:%M:%S.%fZ')",
        ),
        # entered parked (a placeholder's dead-letter copy), released by an operator before its send
        _ev(
            "parked",
            "t_enq",
            "parked",
            severity="ERROR",
            message_id="room_id || '-m' || seq",
            provider="'whatsapp'",
            reason="'refused while the room was full and dead-lettered by Pub/Sub'",
        ),
        _ev("redriven", _ms("t_enq", "5"), "parked", **operator, reason="'room unblocked'"),
        _ev("duplicate_ignored", _ms("t_enq", "300"), "ux < 0.01", message_id="room_id || '-m' || seq"),
        _ev("sent", "t_sent", sending, **sent_kw),
        # a resend after a crash: same seq, attempt 2, 1.5 s later (before any end)
        _ev(
            "sent",
            _ms("t_sent", "1500"),
            f"{sending} AND ux >= 0.995 AND outcome = 'noack'",
            **{**sent_kw, "attempt": "2", "trigger": "'resend'"},
        ),
        _ev(
            "status_ignored",
            _ms("t_sent", "30"),
            sending,
            component="'webhook'",
            attempt="1",
            status="'sent'",
            reason="'sent_status'",
        ),
        _ev(
            "acked", end_ack, "outcome = 'ack'", component="'webhook'", attempt="1", status="'delivered'", s2a="lat_ms"
        ),
        _ev(
            "status_ignored",
            _ms("t_sent", "lat_ms + 4000"),
            "outcome = 'ack' AND ux < 0.6",
            component="'webhook'",
            attempt="1",
            status="'read'",
            reason="'after_acked'",
        ),
        _ev(
            "timeout_ignored",
            end_timeout,
            "outcome = 'ack'",
            component="'timeout'",
            attempt="1",
            reason="'not_in_flight'",
        ),
        _ev("timed_out", end_timeout, "outcome IN ('late', 'noack')", component="'timeout'", attempt="1"),
        _ev(
            "status_ignored",
            end_ack,
            "outcome = 'late'",
            component="'webhook'",
            attempt="1",
            status="'delivered'",
            reason="'late_ack'",
            s2a="lat_ms",
        ),
        _ev(
            "failed",
            _ms("t_sent", "least(lat_ms / 4, 2000)"),
            "outcome = 'failed'",
            severity="WARNING",
            component="'webhook'",
            attempt="1",
            status="'failed'",
            error_code="131026",
            error_title="'Message undeliverable'",
        ),
        # an operator skips the message in flight, 2 s after its send
        _ev(
            "skipped",
            _ms("t_sent", "2000"),
            "outcome = 'skip'",
            severity="WARNING",
            attempt="1",
            **{**operator, "reason": "'customer asked'"},
        ),
        # a dead letter (the rows below) an operator redrives 1 s later: sent again as attempt 2, acked
        _ev("redriven", _ms("t_sent", "1000"), "outcome = 'redrive'", **operator, reason="'platform fixed'"),
        _ev(
            "sent", _ms("t_sent", "1200"), "outcome = 'redrive'", **{**sent_kw, "attempt": "2", "trigger": "'redrive'"}
        ),
        _ev(
            "acked",
            _ms("t_sent", "1500"),
            "outcome = 'redrive'",
            component="'webhook'",
            attempt="2",
            status="'delivered'",
            s2a="300.0",
        ),
        # dead-lettered after a failed send; a `redrive` message is one first
        _ev("send_failed", "t_sent", dead, severity="WARNING", attempt="1", reason="'http_500'"),
        _ev(
            "dead_lettered",
            _ms("t_sent", "100"),
            dead,
            severity="ERROR",
            attempt="1",
            reason="'send_attempts_exhausted'",
        ),
    ]
    return "\nUNION ALL\n".join(parts)


def generate(out_path: str, events: int, rooms: int = 25_000, threads: int = 2) -> dict:
    """Write about `events` event lines for `rooms` rooms to `out_path` (JSON
    lines). Returns {"events": exact count, "messages": n, "seconds": s}.
    Raises ValueError for non-positive sizes."""
    import duckdb

    if events < 1 or rooms < 1:
        raise ValueError(f"events and rooms must be >= 1, got {events}, {rooms}")
    messages = max(1, round(events / EVENTS_PER_MESSAGE))
    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"SET threads = {threads}; SET preserve_insertion_order = false;")
    con.execute(_SQL.format(rooms=rooms, messages=messages, start=START, timeout=TIMEOUT_MS))
    path = out_path.replace("'", "''")
    con.execute(f"COPY ({events_sql()}) TO '{path}' (FORMAT JSON)")
    n = con.execute(
        f"SELECT count(*) FROM read_json('{path}', format = 'newline_delimited', columns = {{'event': 'VARCHAR'}})"
    ).fetchone()[0]
    con.close()
    return {"events": int(n), "messages": messages, "seconds": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.synth_log", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, required=True)
    p.add_argument("--rooms", type=int, default=25_000)
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    r = generate(a.out, a.events, a.rooms)
    print(f"{r['events']:,} events ({r['messages']:,} messages) in {r['seconds']:.1f} s -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
