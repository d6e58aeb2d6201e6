"""A delivery event line leaves out the fields that do not apply (issue 46:
each line is paid for by its bytes in Cloud Logging), and the readers take
what is left out as null."""

from __future__ import annotations

import json
from pathlib import Path

from shared.events import EVENT_FIELDS, DeliveryEvent, EventType, JsonLineWriter
from tools.local.audit import read_events


def test_a_line_has_no_null_field_but_room_id_and_readers_see_every_field(tmp_path: Path) -> None:
    acked = DeliveryEvent(EventType.ACKED, "2026-11-27T21:00:00.000000Z", "webhook", "room-7", seq=3, attempt=1,
                          message_id="m-1", provider="whatsapp", status="delivered", send_to_ack_ms=84.2)
    unknown = DeliveryEvent(EventType.STATUS_UNKNOWN, "2026-11-27T21:00:01.000000Z", "webhook", None,
                            reason="no such delivery")
    for event in (acked, unknown):
        record = event.to_record()
        assert [k for k, v in record.items() if v is None] == (["room_id"] if event.room_id is None else [])
        assert list(record)[:8] == ["severity", "message", "log_type", "schema_version", "event", "ts", "component",
                                    "room_id"]
    assert "trigger" not in acked.to_record() and acked.to_record()["send_to_ack_ms"] == 84.2
    log = tmp_path / "events.jsonl"
    writer = JsonLineWriter(str(log), stdout=False)
    for event in (acked, unknown):
        writer.write(event.to_record())
    full = {**dict.fromkeys(EVENT_FIELDS), **json.loads(log.read_text().splitlines()[0])}
    first, second = read_events(log)
    assert first == full and set(second) == set(EVENT_FIELDS) and second["reason"] == "no such delivery"
