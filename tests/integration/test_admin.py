"""The admin function on the emulators (issue 44, items 1-3, 6 and 7): a
call without a valid token, or from a caller who is not an operator, is
refused and changes nothing; a malformed request is a 400 and changes
nothing; the incident switch holds every new send while pushes and statuses
are still taken, and sends resume in order; an event line carries its
request's trace."""

from __future__ import annotations

import json
import time

import pytest
import requests
from google.cloud import firestore

from shared.admin.identity import local_token
from shared.admin.incident import IncidentSwitch
from shared.admin.service import AdminService
from shared.config import AdminSettings
from shared.operators import OperatorEventLog
from shared.providers.whatsapp import sign
from shared.room import Phase, make_delivery_id
from tests.conftest import room_events, wait_for
from tests.integration.test_cli import SILENT, baton, sent_seqs
from tests.integration.test_functions import SECRET, post_push, push_body, status_body
from tests.integration.test_guarantees import platform_sends, service
from tools.local.stack import PROJECT


@pytest.fixture(scope="module")
def store(stack):
    from shared.store import RoomStore

    return RoomStore(firestore.Client(project=PROJECT), retention_hours=1)


@pytest.fixture
def silent(fake_config):
    fake_config({"silent_recipients": [SILENT]})
    return SILENT


def admin_post(stack, body: object, token: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return requests.post(stack.url("admin"), data=data, headers=headers, timeout=60)


def paused(stack, room: str) -> bool:
    return any(e["event"] == "paused" for e in room_events(stack, room))


def test_an_admin_call_without_a_valid_token_is_refused_and_changes_nothing(stack, room_id, silent):
    assert post_push(stack, room_id, "m1", silent).status_code == 200
    pause = {"action": "rooms.pause", "args": {"room": room_id, "reason": "by an intruder"}}
    for token in (None, "", "not-a-token", local_token("another-key", "mallory@example.com"),
                  local_token(stack.admin_key, "mallory@example.com", now_s=time.time() - 3600)):
        r = admin_post(stack, pause, token)
        assert r.status_code == 401, (token, r.text)
        assert "unauthenticated" in r.json()["error"]
    assert not paused(stack, room_id)
    assert baton(stack, "rooms", "show", room_id)["paused"] is None


def test_a_caller_who_is_not_an_operator_is_refused_and_changes_nothing(stack, store, room_id, silent):
    assert post_push(stack, room_id, "m1", silent).status_code == 200
    svc = service(stack, store)
    svc.core.incident = None
    admin = AdminService.build(svc, store, AdminSettings("local", ("alice@example.com",), (), "k"))
    pause = json.dumps({"action": "rooms.pause", "args": {"room": room_id, "reason": "hold"}}).encode()
    refused = admin.handle(pause, f"Bearer {local_token('k', 'mallory@example.com')}", stack.url("admin"))
    assert refused.status == 403 and "mallory@example.com" in refused.body["error"]
    assert store.load_room(room_id).paused is None
    done = admin.handle(pause, f"Bearer {local_token('k', 'alice@example.com')}", stack.url("admin"))
    assert done.status == 200 and done.body["actor"] == "alice@example.com"
    [result] = done.body["result"]
    assert result["changed"] and result["events"][0]["actor"] == "alice@example.com"
    assert store.load_room(room_id).paused.actor == "alice@example.com"
    assert isinstance(admin.admin.operators.service.events, OperatorEventLog)


def test_a_malformed_admin_request_is_a_400_and_changes_nothing(stack, room_id, silent):
    assert post_push(stack, room_id, "m1", silent).status_code == 200
    token = local_token(stack.admin_key, "tester")
    for body in (b"not json", b"[]", {"args": {}}, {"action": "rooms.explode"}, {"action": "rooms.pause"},
                 {"action": "rooms.pause", "args": {"room": room_id}},
                 {"action": "rooms.pause", "args": "room"},
                 {"action": "rooms.skip", "args": {"room": room_id, "seq": "1", "reason": "x"}},
                 {"action": "rooms.list", "args": {"kind": "everything"}},
                 {"action": "dead_letters.redrive", "args": {"id": "nonsense", "reason": "x"}},
                 {"action": "dead_letters.redrive", "args": {"room": room_id, "all": True, "reason": "x"}}):
        r = admin_post(stack, body, token)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]
    assert not paused(stack, room_id) and sent_seqs(stack, room_id) == [1]
    assert admin_post(stack, {"action": "rooms.show", "args": {"room": room_id + "-none"}}, token).status_code == 404


def sent_by_platform(stack, room: str) -> list[int]:
    """The seqs of the room's messages the fake platform received, in order (judged from outside)."""
    return [int(s["callback"].split(".")[0]) for s in platform_sends(stack, room)]


def test_the_incident_switch_holds_every_new_send_takes_pushes_and_sends_resume_in_order(stack, room_id, silent):
    try:
        switched = baton(stack, "pause", "--all", "--reason", "Meta is down")
        assert switched["changed"] and switched["incident"]["actor"] == "tester"
        assert baton(stack, "status", "--skip-error-queue")["incident"]["on"]
        assert not baton(stack, "pause", "--all", "--reason", "again")["changed"]
        time.sleep(2.5)  # every instance's cached switch has expired (CACHE_US)
        for mid in ("m1", "m2", "m3"):
            assert post_push(stack, room_id, mid, silent).status_code == 200  # taken while held
        wait_for(lambda: any(e["event"] == "paced" and e["seq"] == 1 for e in room_events(stack, room_id)),
                 what="m1 held")
        time.sleep(2)
        assert sent_by_platform(stack, room_id) == []
        shown = baton(stack, "rooms", "show", room_id)
        assert shown["queued"] == 2 and shown["in_flight_detail"]["phase"] == "paced"
    finally:
        resumed = baton(stack, "resume", "--all", "--reason", "Meta is back")
    assert resumed["changed"] and not resumed["incident"]["on"]
    wait_for(lambda: sent_by_platform(stack, room_id) == [1, 2, 3], timeout_s=60, what="m1-m3 sent after the resume")
    wait_for(lambda: len([e for e in room_events(stack, room_id) if e["event"] == "timed_out"]) == 3,
             what="each message ended")
    ends = [e["seq"] for e in room_events(stack, room_id) if e["event"] in ("acked", "timed_out")]
    assert ends == [1, 2, 3]  # once each, in order


def test_a_status_that_comes_while_the_switch_is_on_still_acks_and_the_next_message_waits(stack, store, room_id,
                                                                                          silent):
    """In-process (an ack timeout of 30 s, so the status surely comes before it), on the emulators."""
    svc = service(stack, store, ack_timeout_ms=30_000)
    svc.core.incident = IncidentSwitch(firestore.Client(project=PROJECT))
    assert svc.handle_push(_push(room_id, "m1", silent)).status == 200
    assert sent_by_platform(stack, room_id) == [1]
    try:
        baton(stack, "pause", "--all", "--reason", "Meta is down")
        assert svc.handle_push(_push(room_id, "m2", silent)).status == 200
        time.sleep(2.1)  # past this instance's cached switch
        state = store.load_room(room_id)
        delivery_id = make_delivery_id(room_id, state.incarnation, 1, 1, state.in_flight.started_at_us)
        body = status_body(delivery_id)
        assert svc.handle_status_webhook(body, sign(body, SECRET)).status == 200
        state = store.load_room(room_id)
        assert state.counts.get("acked") == 1  # the status acked m1
        assert state.in_flight.message.message_id == "m2" and state.in_flight.phase is Phase.PACED
        assert sent_by_platform(stack, room_id) == [1]  # and m2 waits
    finally:
        baton(stack, "resume", "--all")
    wait_for(lambda: sent_by_platform(stack, room_id) == [1, 2], timeout_s=45, what="m2 sent after the resume")


def _push(room: str, mid: str, recipient: str) -> bytes:
    attrs = {"room_id": room, "provider": "whatsapp", "recipient": recipient, "message_id": mid}
    return push_body(attrs, b'{"type":"text","text":"hi"}', f"{room}-{mid}")


def test_each_event_line_carries_the_trace_of_the_request_that_wrote_it(stack, room_id):
    trace = "105445aa7843bc8bf206b12000100000"
    attrs = {"room_id": room_id, "provider": "whatsapp", "recipient": "15550001", "message_id": "m1"}
    r = requests.post(stack.url("enqueue"), data=push_body(attrs, b'{"type":"text","text":"hi"}', "77"),
                      headers={"X-Cloud-Trace-Context": f"{trace}/12345;o=1"}, timeout=30)
    assert r.status_code == 200
    lines = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] in ("enqueued", "sent")][1:],
                     what="enqueued and sent")
    assert {e.get("logging.googleapis.com/trace") for e in lines} == {f"projects/baton-local/traces/{trace}"}
    acked = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "acked"], what="acked")
    assert acked[0].get("logging.googleapis.com/trace") != f"projects/baton-local/traces/{trace}"  # another request
