"""The lifecycle over lines the room's outbox logs twice (the same `event_id`,
shared/outbox.py) and over a room made again after TTL (another
`incarnation`, its seqs from 1 again): each fails on the lifecycle keyed by
(room, seq) without de-duplication (the simulation counted them as known
gaps: 255 and 38 of 2,000 seeds)."""

from __future__ import annotations

from pipeline import transforms as tf
from shared.room import make_delivery_id
from tests.pipeline.conftest import ev, line, lines_df

INC1, INC2 = 1_795_341_000_000_000, 1_795_341_900_000_000


def _sent(t: float, room: str, seq: int, inc: int, **kw):
    delivery_id = make_delivery_id(room, inc, seq, 1, round(t * 1e6))  # its incarnation: the line's (to_record)
    return ev("sent", t, room, seq, 1, provider="whatsapp", delivery_id=delivery_id, trigger="enqueue",
              publish_to_send_ms=10.0, trigger_to_send_ms=1.0, **kw)


def _messages(spark, records):
    return tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in records]))))


def test_a_line_logged_twice_with_one_event_id_counts_once(spark):
    inc = INC1
    dup_end = ev("acked", 2.0, "r", 1, 1, incarnation=inc, event_id="a1b2c3d4e5f6.0", send_to_ack_ms=900.0)
    records = [
        ev("enqueued", 0.0, "r", 1, incarnation=inc, event_id="000000000001.0"),
        _sent(1.0, "r", 1, inc),
        dup_end,
        # logged again by the next transaction that found it in the outbox (a later time, the same id),
        # as EventLog.emit_again writes it: no null keys, marked `relogged` (shared/outbox.py)
        {**{k: v for k, v in dup_end.items() if v is not None}, "relogged": True},
        # the marked copy first (another request logged it before its own process did)
        {**ev("enqueued", 3.0, "r", 2, incarnation=inc, event_id="000000000002.0"), "relogged": True},
        ev("enqueued", 3.0, "r", 2, incarnation=inc, event_id="000000000002.0"),
    ]
    rows = {r["seq"]: r for r in _messages(spark, records).collect()}
    assert rows[1]["terminal_events"] == 1 and not rows[1]["multiple_ends"] and rows[1]["outcome"] == "acked"
    assert rows[2]["enqueues"] == 1
    audit = tf.ordering_audit(_messages(spark, records)).collect()[0]
    assert audit["multiple_ends"] == 0 and audit["audit_ok"] is False  # seq 2 never ended: lost, as it is
    assert audit["lost"] == 1


def test_events_without_an_id_are_all_kept(spark):
    records = [ev("enqueued", 0.0, "r", 1), ev("acked", 1.0, "r", 1, 1), ev("acked", 1.5, "r", 1, 1)]
    (row,) = _messages(spark, records).collect()
    assert row["terminal_events"] == 2 and row["multiple_ends"]


def test_a_room_made_again_after_ttl_is_a_new_life_of_each_seq(spark):
    records = []
    for inc, t0 in ((INC1, 0.0), (INC2, 100.0)):
        for seq in (1, 2):
            t = t0 + seq * 10
            records += [
                ev("enqueued", t, "r", seq, incarnation=inc),
                ev("sent", t + 1, "r", seq, 1, incarnation=inc, trigger="enqueue"),
                ev("acked", t + 2, "r", seq, 1, incarnation=inc, send_to_ack_ms=1000.0),
            ]
    rows = _messages(spark, records).collect()
    assert sorted((r["incarnation"], r["seq"], r["outcome"], r["multiple_ends"]) for r in rows) == [
        (INC1, 1, "acked", False), (INC1, 2, "acked", False), (INC2, 1, "acked", False), (INC2, 2, "acked", False)]
    (audit,) = tf.ordering_audit(_messages(spark, records)).collect()
    assert (audit["multiple_ends"], audit["ordering_violations"], audit["gaps"], audit["lost"]) == (0, 0, 0, 0)
    assert audit["audit_ok"]


def test_a_gap_within_one_incarnation_is_still_a_gap(spark):
    records = [ev("enqueued", 0.0, "r", 1, incarnation=INC1), ev("enqueued", 1.0, "r", 3, incarnation=INC1),
               ev("enqueued", 50.0, "r", 1, incarnation=INC2)]
    (audit,) = tf.ordering_audit(_messages(spark, records)).collect()
    assert audit["gaps"] == 1


def test_the_incarnation_of_a_send_comes_from_its_delivery_id():
    from shared.events import DeliveryEvent, EventType

    record = DeliveryEvent(EventType.SENT, "t", "enqueue", "room-7", 3, 1,
                           delivery_id="3.1.1763810717123.hd7v4lrwu8.room-7").to_record()
    assert record["incarnation"] == int("hd7v4lrwu8", 36)
    assert DeliveryEvent(EventType.SENT, "t", "enqueue", "r", 3, 1, delivery_id="3.1.x.r").to_record()[
        "incarnation"] is None
