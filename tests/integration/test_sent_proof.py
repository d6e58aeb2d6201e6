"""WHATSAPP_SENT_PROOF on the emulators (issue 31, item 2): a send whose
connection was dropped after the platform read it is unknown; the platform's
`sent` status for that attempt, through the webhook, makes the room time the
message out instead of sending it a second time. With the switch off the
same status is only logged and the message is resent."""

from __future__ import annotations

import pytest
from google.cloud import firestore

from shared import config
from shared.opcounts import begin_request
from shared.providers.whatsapp import sign
from shared.store import RoomStore
from tests.conftest import room_events, wait_for
from tests.integration.test_functions import push_body, status_body
from tests.integration.test_guarantees import SECRET, platform_sends, service
from tools.local.stack import PROJECT


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project=PROJECT), retention_hours=1)


def unknown_send_then_sent_status(stack, store, room_id, fake_config, recipient: str, proof: str) -> list[str]:
    """Push one message to a recipient that never acks, drop the send's
    connection after the platform read it, hand the platform's `sent` status
    to a webhook with WHATSAPP_SENT_PROOF=`proof`, and wait for the message
    to end or be resent; the room's events."""
    fake_config({"silent_recipients": [recipient], "drop_after_read": {recipient: 1}})
    # A cold in-process service may take over a second to its first call: a
    # start deadline that cannot lapse here keeps this test about the proof.
    svc = service(stack, store, whatsapp_sent_proof=proof, send_start_deadline_ms=10_000)
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": recipient, "message_id": "m1"}
    assert svc.handle_push(push_body(attrs, b'{"type":"text","text":"hi"}', "5301")).status == 200
    assert [e.event for e in svc.events.events].count("send_unknown") == 1
    assert store.load_room(room_id).in_flight.phase == "unknown"
    sends = platform_sends(stack, room_id)
    assert len(sends) == 1  # the platform did take it
    body = status_body(sends[0]["callback"], "sent")
    assert svc.handle_status_webhook(body, sign(body, SECRET)).status == 200
    return wait_for(lambda: [e["event"] for e in room_events(stack, room_id)
                             if e["event"] in ("timed_out", "resent")] or None, 15, "timed out or resent")


def test_a_sent_status_turns_an_unknown_send_into_a_timeout_not_a_resend(stack, store, room_id, fake_config):
    # The deployed default (the session's stack runs `off`, TEST_ENV): were it flipped, this fails.
    default = config.ENV_VARS["WHATSAPP_SENT_PROOF"][0]
    assert unknown_send_then_sent_status(stack, store, room_id, fake_config, "15551110031", default) == ["timed_out"]
    assert store.load_room(room_id).in_flight is None
    assert len(platform_sends(stack, room_id)) == 1


def test_without_the_switch_the_same_sent_status_changes_nothing_and_the_message_is_resent(stack, store, room_id,
                                                                                            fake_config):
    assert unknown_send_then_sent_status(stack, store, room_id, fake_config, "15551110032", "off")[0] == "resent"
    wait_for(lambda: len(platform_sends(stack, room_id)) == 2, 10, "the second send")


def test_a_send_that_returned_accepted_writes_nothing_and_its_sent_status_one_echo(stack, store, room_id,
                                                                                    fake_config):
    # Issue 46: the acceptance rides on the attempt's ack timer (the task's
    # body), so the room is not written after the send; the `sent` status
    # then costs the first instance that checks it one read and one echo
    # write (the platform's record, for a timer lost or late), and any other
    # instance, or a redelivery, one read and no write.
    fake_config({"silent_recipients": ["15551110033"]})
    svc = service(stack, store, whatsapp_sent_proof="on", send_start_deadline_ms=10_000)
    armed = []
    schedule = svc.timers.schedule
    svc.timers.schedule = lambda timer: (armed.append(timer), schedule(timer))[1]
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": "15551110033", "message_id": "m1"}
    assert svc.handle_push(push_body(attrs, b'{"type":"text","text":"hi"}', "5302")).status == 200
    assert [t.accepted_deadline_us is not None for t in armed] == [True]  # the acceptance, in the task
    ref = store.room_ref(room_id)
    before = ref.get()
    assert not before.to_dict().get("accepted")  # no acceptance written into the room
    assert store.load_room(room_id).in_flight.phase == "sending"
    body = status_body(platform_sends(stack, room_id)[0]["callback"], "sent")
    counts = begin_request()  # what the entry point does: this request's counters
    assert svc.handle_status_webhook(body, sign(body, SECRET)).status == 200
    assert (counts.firestore_reads, counts.firestore_writes) == (1, 1)
    echoed = ref.get()
    assert len(echoed.to_dict().get("echoes") or {}) == 1
    assert store.load_room(room_id).in_flight.phase == "sending"  # the echo changes no phase
    other = service(stack, store, whatsapp_sent_proof="on", send_start_deadline_ms=10_000)
    counts = begin_request()
    assert other.handle_status_webhook(body, sign(body, SECRET)).status == 200
    assert (counts.firestore_reads, counts.firestore_writes) == (1, 0)
    assert ref.get().update_time == echoed.update_time
