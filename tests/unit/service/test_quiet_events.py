"""QUIET_EVENTS leaves the chattiest lines out of the event log (issue 33,
item 4): only the named event types or event:reason pairs, nothing else."""

from __future__ import annotations

import pytest

from shared import config
from shared.events import DeliveryEvent, EventLog, EventType, quiet_rules


def line(event: EventType, reason: str | None = None) -> DeliveryEvent:
    return DeliveryEvent(event, "2026-11-24T00:00:00.000000Z", "webhook", "r1", reason=reason)


def test_named_lines_are_left_out_and_every_other_one_is_kept():
    log = EventLog(keep=True, quiet=quiet_rules("status_ignored:sent_status, timeout_ignored"))
    for e in (line(EventType.STATUS_IGNORED, "sent_status"), line(EventType.STATUS_IGNORED, "late_ack"),
              line(EventType.TIMEOUT_IGNORED, "superseded_timer"), line(EventType.ACKED)):
        log.emit(e)
    assert [(str(e.event), e.reason) for e in log.events] == [("status_ignored", "late_ack"), ("acked", None)]


def test_an_unknown_event_name_is_refused_at_start(monkeypatch):
    monkeypatch.setenv("QUIET_EVENTS", "status_ignored:sent_status,no_such_event")
    with pytest.raises(ValueError, match="no_such_event"):
        config.load()
