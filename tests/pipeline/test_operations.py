"""Faults and operations from a hand-made log (expected values by hand)."""

from __future__ import annotations

import pytest

from pipeline import operations as ops
from pipeline import transforms as tf
from tests.pipeline.conftest import acked, at, enq, ev, line, lines_df, sent

OPS = "ops@example.com"


def operator_day() -> list[dict]:
    """Room `p` paused 10 s; room `k` has seq 2 parked and skipped after 4 s;
    room `q` paced 0.5 s then sent; room `i` prepares an image (1.2 s at the
    head); room `s` holds producer sequence 3 for 2 s behind a gap of 2, and a
    scheduled message that enters 0.3 s after its time; room `b` refused twice
    (back-pressure) and rescued once by the watchdog; an operator replays
    room `k`'s statuses from the status error queue."""
    log = [
        ev("paused", 1, "p", component="operator", actor=OPS, reason="maintenance"),
        ev("resumed", 11, "p", component="operator", actor=OPS, reason="done"),
        enq(0, "k", 1), ev("parked", 0.5, "k", 2, message_id="k-m2", provider="whatsapp", reason="refused while full"),
        ev("skipped", 4.5, "k", 2, component="operator", actor=OPS, reason="stale offer"),
        enq(0, "q", 1), ev("paced", 1, "q", 1, 1, provider="whatsapp", reason="pair rate: next token in 500 ms"),
        sent(1.5, "q", 1, trigger="paced"), acked(2, "q", 1, 500),
        enq(0, "i", 1), ev("preparing", 0.2, "i", 1, 1, provider="whatsapp"),
        ev("prepared", 1.4, "i", 1, 1, provider="whatsapp", reason="attempt 1 took 1180 ms"), sent(1.4, "i", 1),
        ev("sequence_held", 1, "s", 0, message_id="s-p3", provider="whatsapp", reason="producer sequence 3 waits for 2"),
        ev("sequence_gap", 3, "s", reason="producer sequence 2 missing after 2000 ms: given up"),
        ev("enqueued", 3, "s", 1, message_id="s-p3", provider="whatsapp"),
        ev("scheduled", 5, "s", message_id="s-late", provider="whatsapp", reason=f"enters its room at {at(10)}"),
        ev("enqueued", 10.3, "s", 2, message_id="s-late", provider="whatsapp"),
        ev("backpressure", 1, "b", message_id="b-m9", provider="whatsapp", reason="room holds 100 messages"),
        ev("backpressure", 2, "b", message_id="b-m9", provider="whatsapp", reason="room holds 100 messages"),
        ev("watchdog_rescued", 3, "b", 1, 1, component="sweep", reason="sent, overdue 65000 ms"),
        ev("skipped", 6, "c", None, component="enqueue", message_id="c-s1", actor=OPS, reason="cancelled"),
        ev("statuses_replayed", 8, "k", component="operator", actor=OPS,
           reason="2 status message(s) replayed from the status error queue"),
    ]  # fmt: skip
    return log


@pytest.fixture(scope="module")
def events(spark):
    return tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in operator_day()]))).cache()


def test_each_wait_has_its_kind_its_duration_and_who(events):
    got = {(r["kind"], r["room_id"]): r for r in ops.waits(events).collect()}
    assert got[("paused", "p")]["wait_ms"] == 10_000 and got[("paused", "p")]["actor"] == OPS
    assert got[("parked", "k")]["wait_ms"] == 4_000 and got[("parked", "k")]["seq"] == 2
    assert got[("paced", "q")]["wait_ms"] == 500 and got[("paced", "q")]["cause"] == "pair rate: next token in N ms"
    assert got[("preparing", "i")]["wait_ms"] == 1_200
    assert got[("sequence_held", "s")]["wait_ms"] == 2_000 and got[("sequence_held", "s")]["seq"] is None
    late = got[("scheduled", "s")]
    assert (late["wait_ms"], late["late_ms"]) == (5_300, pytest.approx(300))
    assert len(got) == 6


def test_a_wait_with_no_end_in_the_log_is_open(spark):
    log = [ev("paused", 1, "p", component="operator", actor=OPS, reason="x")]
    events = tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in log])))
    (row,) = ops.waits(events).collect()
    assert (row["kind"], row["ended_at"], row["wait_ms"]) == ("paused", None, None)
    (summary,) = ops.wait_summary(ops.waits(events)).collect()
    assert (summary["episodes"], summary["open"]) == (1, 1)


def test_the_operator_trail_lists_every_action_with_its_actor_in_time_order(events):
    rows = [(r["action"], r["room_id"], r["actor"]) for r in ops.operator_actions(events).collect()]
    assert rows == [
        ("paused", "p", OPS),
        ("skipped", "k", OPS),
        ("scheduled_cancelled", "c", OPS),
        ("statuses_replayed", "k", OPS),
        ("resumed", "p", OPS),
    ]


def test_faults_count_by_cause_and_rooms_by_fault(events):
    faults = {(r["event"], r["cause"]): r["events"] for r in ops.faults(events).collect()}
    assert faults[("backpressure", "room holds N messages")] == 2
    assert faults[("watchdog_rescued", "sent, overdue N ms")] == 1
    assert ("sent", "-") not in faults and ("acked", "-") not in faults  # the normal path is per message
    rooms = {r["room_id"]: r for r in ops.room_faults(events).collect()}
    assert (rooms["b"]["backpressure"], rooms["b"]["watchdog_rescued"], rooms["b"]["total"]) == (2, 1, 3)
    assert rooms["s"]["sequence_gap"] == 1 and "p" not in rooms


def test_sequence_gaps_and_preparation_times(events):
    assert [(r["room_id"], r["missing"]) for r in ops.sequence_gaps(events).collect()] == [("s", "2")]
    assert [r["took_ms"] for r in ops.preparation_times(events).collect()] == [1180.0]


def test_rescues_say_how_overdue_each_room_was_by_phase(spark):
    log = [
        ev("watchdog_rescued", 3, "b", 1, 1, component="sweep", reason="sent, overdue 65000 ms"),
        ev("watchdog_rescued", 4, "c", 1, 1, component="sweep", reason="sent, overdue 61000 ms"),
        ev("watchdog_rescued", 5, "d", component="sweep", reason="sequence gap, overdue 90500 ms"),
        ev("watchdog_rescued", 6, "e", 2, 1, component="sweep", reason="sending"),  # a line from before the figure
    ]
    events = tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in log])))
    rows = {r["room_id"]: (r["phase"], r["overdue_ms"]) for r in ops.rescues(events).collect()}
    assert rows == {"b": ("sent", 65000.0), "c": ("sent", 61000.0), "d": ("sequence gap", 90500.0),
                    "e": ("sending", None)}
    summary = {r["phase"]: r for r in ops.rescue_summary(ops.rescues(events)).collect()}
    assert (summary["sent"]["rescues"], summary["sent"]["rooms"], summary["sent"]["overdue_max_ms"]) == (2, 2, 65000)
    assert summary["sent"]["overdue_p50_ms"] == 61000 and summary["sending"]["overdue_max_ms"] is None


def test_duplicates_per_message_count_unknown_attempts(spark):
    log = [enq(0, "r", 1), sent(1, "r", 1), sent(2, "r", 1, 2), acked(2.5, "r", 1, 500, 2)]
    log += [enq(0, "r", 2), ev("send_unknown", 3, "r", 2, 1), sent(4, "r", 2, 2), acked(4.5, "r", 2, 500, 2)]
    log += [enq(0, "r", 3), sent(5, "r", 3), acked(5.5, "r", 3, 500)]
    messages = tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in log]))))
    assert [(r["extra_sends"], r["messages"]) for r in ops.sends_per_message(messages).collect()] == [(0, 1), (1, 2)]
