"""Scheduled delivery on the emulators: a message published with `delay_s`
or `deliver_at` enters its room at its time, not before, and once; a
cancelled one never enters; a past time enters at once; a malformed time is
kept as rejected with its reason."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from google.cloud import pubsub_v1

from tests.conftest import room_events, stack_settings, wait_for
from tests.integration.test_cli import baton
from tools.local.stack import PROJECT, TOPIC


def publish(room: str, mid: str, **attrs: str) -> float:
    """Publish one message to the outbound topic; returns when (epoch s)."""
    client = pubsub_v1.PublisherClient(publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
    data = json.dumps({"type": "text", "text": f"text of {mid}"}).encode()
    at = time.time()
    client.publish(client.topic_path(PROJECT, TOPIC), data, ordering_key=room, room_id=room, provider="whatsapp",
                   recipient="15557770001", message_id=mid, **attrs).result(timeout=30)
    return at


def epoch_s(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def events_of(stack, room: str, mid: str) -> list[dict]:
    return [e for e in room_events(stack, room) if e.get("message_id") == mid]


def test_a_delayed_message_enters_its_room_at_its_time_behind_what_came_meanwhile_and_once(stack, room_id):
    published = publish(room_id, "later", delay_s="3")
    publish(room_id, "later", delay_s="3")  # the producer publishes it again: still one entry
    publish(room_id, "now")
    wait_for(lambda: any(e["event"] == "enqueued" for e in events_of(stack, room_id, "later")), timeout_s=30,
             what="the delayed message's entry")
    time.sleep(2.0)  # time for a second copy to come, were there one
    later = events_of(stack, room_id, "later")
    entered = [e for e in later if e["event"] == "enqueued"]
    assert len(entered) == 1
    assert epoch_s(entered[0]["ts"]) >= published + 3.0 - 0.05  # never before its time (publish clock, 50 ms slack)
    assert any(e["event"] == "scheduled" for e in later)
    now_entry = [e for e in events_of(stack, room_id, "now") if e["event"] == "enqueued"]
    assert now_entry and now_entry[0]["seq"] == 1 and entered[0]["seq"] == 2  # behind what came meanwhile


def test_a_cancelled_scheduled_message_never_enters_and_ends_as_skipped(stack, room_id):
    # 10 s: room for the listing and the cancel (each a CLI process: seconds
    # on a loaded 2-core machine; 4 s was once too short there).
    published = time.time()
    publish(room_id, "doomed", delay_s="10")
    wait_for(lambda: [m for m in baton(stack, "scheduled", "list", "--room", room_id)
                      if m["message_id"] == "doomed"], what="the message listed as waiting")
    result = baton(stack, "scheduled", "cancel", room_id, "doomed", "--reason", "campaign withdrawn")
    assert result["was_waiting"] and result["actor"] == "tester"
    skipped = wait_for(lambda: [e for e in events_of(stack, room_id, "doomed") if e["event"] == "skipped"],
                       timeout_s=30, what="the cancelled message's end")
    assert skipped[0]["actor"] == "tester" and "campaign withdrawn" in skipped[0]["reason"]
    time.sleep(max(1.0, published + 10 + 1.5 - time.time()))  # past its time: it would have entered by now
    assert not [e for e in events_of(stack, room_id, "doomed") if e["event"] == "enqueued"]


def test_a_past_time_enters_at_once_and_a_malformed_one_is_kept_with_its_reason(stack, room_id):
    publish(room_id, "past", deliver_at="2020-01-01T00:00:00Z")
    publish(room_id, "bad", deliver_at="tomorrow at nine")
    wait_for(lambda: [e for e in events_of(stack, room_id, "past") if e["event"] == "enqueued"],
             what="the past-time message's entry")
    assert not [e for e in events_of(stack, room_id, "past") if e["event"] == "scheduled"]
    rejected = wait_for(lambda: [e for e in events_of(stack, room_id, "bad") if e["event"] == "rejected"],
                        what="the malformed time's rejection")
    assert "deliver_at" in rejected[0]["reason"] or "RFC 3339" in rejected[0]["reason"]


def test_deliver_at_is_an_rfc_3339_time_with_a_zone():
    from shared.push import deliver_at_of, parse_time_us

    assert parse_time_us("2026-11-23T09:00:00Z") == int(datetime(2026, 11, 23, 9, tzinfo=UTC).timestamp() * 1e6)
    assert deliver_at_of({"delay_s": "2.5"}, "2026-11-23T09:00:00.000000000Z") == \
        int(datetime(2026, 11, 23, 9, 0, 2, 500000, tzinfo=UTC).timestamp() * 1e6)
    assert deliver_at_of({}, None) is None
    for attrs in ({"deliver_at": "2026-11-23T09:00:00"}, {"deliver_at": "soon"}, {"delay_s": "-1"},
                  {"delay_s": "nan"}, {"delay_s": "1", "deliver_at": "2026-11-23T09:00:00Z"}):
        try:
            deliver_at_of(attrs, "2026-11-23T09:00:00Z")
        except ValueError:
            continue
        raise AssertionError(f"accepted {attrs}")


def test_a_cancellation_is_kept_until_the_messages_time_plus_the_retention_and_its_task_deleted_by_name(stack,
                                                                                                        room_id):
    """A message due in 40 days (two hops): its record, and so its
    cancellation, is kept by TTL at least until its time plus RETENTION_HOURS
    (it used to expire after about 31 days); cancel names its task without
    listing the queue (issue 28, item 7)."""
    from google.cloud import firestore

    from shared.records import SCHEDULED_CANCELS, _doc_id, scheduled_key

    published = publish(room_id, "far-away", delay_s=str(40 * 24 * 3600))
    ref = firestore.Client(project=PROJECT).collection(SCHEDULED_CANCELS).document(_doc_id(scheduled_key(room_id, "far-away")))
    doc = wait_for(lambda: (ref.get().to_dict() or {}).get("task") and ref.get().to_dict(), 30, "the hold recorded")
    due = published + 40 * 24 * 3600
    retention_s = stack_settings().retention_hours * 3600
    assert doc["expire_at"].timestamp() >= due + retention_s - 60
    result = baton(stack, "scheduled", "cancel", room_id, "far-away", "--reason", "withdrawn")
    assert result["was_waiting"] and result["task"] == doc["task"]
    kept = ref.get().to_dict()
    assert kept["actor"] == "tester" and kept["expire_at"].timestamp() >= due + retention_s - 60
