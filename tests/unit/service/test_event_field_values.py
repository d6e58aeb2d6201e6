"""An event's field values (shared/events.py `DeliveryEvent.field_values`,
taken for every event line and outbox record) are `dataclasses.asdict`'s, in
its order, and the line and the record hold what it gave."""

from __future__ import annotations

from dataclasses import asdict, fields

from shared import outbox
from shared.events import DeliveryEvent, EventType

EVENTS = [
    DeliveryEvent(EventType.SENT, "2026-11-28T07:00:00.123456Z", "enqueue", "room-1", seq=1, attempt=2,
                  message_id="m-1", provider="whatsapp", delivery_id="a.b.1.c.2", trigger="ack", published_at="x",
                  publish_to_send_ms=12.5, trigger_to_send_ms=0.0, incarnation=5, event_id="w0123.0"),
    DeliveryEvent(EventType.ACKED, "2026-11-28T07:00:01.000000Z", "webhook", "room-é", seq=3, attempt=1,
                  status="read", send_to_ack_ms=84.2, relogged=True, error_code=0, error_title=""),
    DeliveryEvent(EventType.STATUS_UNKNOWN, "2026-11-28T07:00:02.000000Z", "webhook", None, reason="no such delivery",
                  delivery_id="a.b.1.zz.2"),
    *(DeliveryEvent(kind, "2026-11-28T07:00:03.000000Z", "timeout", "r", seq=9, actor="ops", reason="why")
      for kind in EventType),
]


def test_field_values_are_asdict_in_its_order():
    for event in EVENTS:
        assert list(event.field_values().items()) == list(asdict(event).items())
        assert list(event.field_values()) == [f.name for f in fields(DeliveryEvent)]


def test_the_line_and_the_outbox_record_hold_asdicts_set_fields():
    # The line's header (severity, message, log type, schema version) and an
    # incarnation derived from the delivery id are built beside the fields.
    for event in EVENTS:
        set_fields = {k: v for k, v in asdict(event).items() if v is not None}
        line = event.to_record()
        assert {k: line[k] for k in set_fields if k != "event"} == {k: v for k, v in set_fields.items() if k != "event"}
        assert "room_id" in line and line["event"] == str(event.event)
        stored = outbox._record(event)
        assert stored == {**{k: v for k, v in set_fields.items() if k != "event_id"}, "event": str(event.event)}
