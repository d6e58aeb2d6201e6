"""The queued webhook (WEBHOOK_MODE=queued, served beside the default direct
one as `webhook-queued`) on the emulators:
the webhook answers without the `status` function, statuses wait in Pub/Sub
and are applied in order once it is back; a status whose processing raises
goes to the error queue and a replay applies it once; duplicates and
reordered payloads never double-advance a room, in both modes."""

from __future__ import annotations

import json
import time

import pytest
import requests
from google.cloud import firestore

from baton_cli.error_queue import ErrorQueue
from shared.providers.whatsapp import sign
from shared.room import Enqueue, Policy, decide, make_delivery_id
from shared.store import RoomStore
from tests.conftest import room_events, wait_for
from tests.integration.test_cli import baton
from tools.local.stack import PROJECT, STATUS_TOPIC

SECRET = "local-app-secret"
# The rooms below are made through the store alone, with an ack deadline far
# away: no timer, no send and no watchdog can change them, only the statuses.
FAR = Policy(ack_timeout_ms=600_000, send_timeout_ms=1000, send_start_deadline_ms=1000)

pytestmark = pytest.mark.emulators


def status_entry(callback: str, status: str, error_code: int | None = None) -> dict:
    entry = {"id": "wamid.Q", "status": status, "timestamp": "1700000000", "recipient_id": "15550001",
             "biz_opaque_callback_data": callback}
    if error_code is not None:
        entry["errors"] = [{"code": error_code, "title": "Message undeliverable"}]
    return entry


def webhook_body(*entries: dict) -> bytes:
    return json.dumps({"object": "whatsapp_business_account", "entry": [{"id": "1", "changes": [{"field": "messages",
        "value": {"messaging_product": "whatsapp", "statuses": list(entries)}}]}]}).encode()


def post(url: str, body: bytes) -> requests.Response:
    return requests.post(url, data=body, headers={"X-Hub-Signature-256": sign(body, SECRET)}, timeout=15)


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project=PROJECT), retention_hours=1)


@pytest.fixture(scope="module")
def error_queue(stack) -> ErrorQueue:
    return ErrorQueue(PROJECT, STATUS_TOPIC, pull_timeout_s=2.0)


def in_flight_room(store: RoomStore, room_id: str, messages: int = 1) -> list[str]:
    """A room with `messages` queued and the first in flight; returns the
    delivery id of each message's first attempt as it would be sent."""
    now = time.time_ns() // 1000
    for i in range(1, messages + 1):
        store.apply(room_id, lambda s, i=i: decide(s, Enqueue(f"m{i}", "whatsapp", "15550001", f"hi {i}", now, now),
                                                   FAR, "test"))
    doc = store.room_ref(room_id).get().to_dict()
    return [make_delivery_id(room_id, doc["incarnation"], 1, 1, doc["in_flight"]["started_at_us"])]


def counts(store: RoomStore, room_id: str) -> dict:
    room = store.load_room(room_id)
    return dict(room.counts) if room else {}


def test_webhook_answers_200_while_the_status_function_is_down_and_the_statuses_apply_in_order_after(
        stack, store, room_id):
    (delivery,) = in_flight_room(store, room_id)
    stack.kill("status")
    try:
        before = store.room_ref(room_id).get().to_dict()
        # `failed` (undeliverable) first, then `delivered`: applied in that
        # order the message fails and the late `delivered` changes nothing;
        # the other way round it would be acked.
        first = post(stack.url("webhook-queued"), webhook_body(status_entry(delivery, "failed", 131026)))
        second = post(stack.url("webhook-queued"), webhook_body(status_entry(delivery, "delivered")))
        assert (first.status_code, second.status_code) == (200, 200)
        assert first.json()["queued"] == 1 and second.json()["queued"] == 1
        time.sleep(3)  # Pub/Sub tries the dead endpoint meanwhile
        assert store.room_ref(room_id).get().to_dict() == before
    finally:
        stack.restart("status")
    wait_for(lambda: counts(store, room_id).get("failed"), 60, "the queued statuses applied")
    wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "status_ignored"], 30,
             "the late `delivered` ignored")
    assert counts(store, room_id) == {"failed": 1}


def test_a_status_whose_processing_raises_goes_to_the_error_queue_and_a_replay_applies_it_once(
        stack, store, room_id, error_queue):
    (delivery,) = in_flight_room(store, room_id)
    good = store.room_ref(room_id).get().to_dict()
    # A room document the code cannot read: every attempt of the `status`
    # function raises (a bug, not a transient failure).
    store.room_ref(room_id).update({"in_flight": "corrupted"})
    r = post(stack.url("webhook-queued"), webhook_body(status_entry(delivery, "delivered")))
    assert r.status_code == 200
    kept = wait_for(lambda: error_queue.list(room=room_id), 60, "the status in the error queue")
    assert len(kept) == 1 and kept[0].statuses == 1
    assert kept[0].delivery_attempts == 5 and "TypeError" in kept[0].reason  # STATUS_MAX_ATTEMPTS, the error
    assert [e["event"] for e in room_events(stack, room_id)][-1] == "status_dead_lettered"
    listed = baton(stack, "statuses", "list", "--room", room_id)
    assert [(x["room_id"], x["statuses"], x["delivery_attempts"]) for x in listed] == [(room_id, 1, 5)]
    store.room_ref(room_id).set(good)  # the fix
    assert baton(stack, "statuses", "replay", "--room", room_id, "--yes")["replayed"] == 1
    wait_for(lambda: counts(store, room_id).get("acked"), 30, "the replayed status applied")
    assert error_queue.list(room=room_id) == []
    # The replay is in the audit trail, with who did it (issue 32, item 5).
    (replayed,) = [e for e in room_events(stack, room_id) if e["event"] == "statuses_replayed"]
    assert replayed["actor"] == "tester" and replayed["reason"].startswith("1 status message(s)")
    # Replaying again, or Meta sending the same status again, changes nothing.
    assert error_queue.replay(room=room_id)["replayed"] == 0
    assert post(stack.url("webhook-queued"), webhook_body(status_entry(delivery, "delivered"))).status_code == 200
    wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "status_ignored"], 30,
             "the duplicate ignored")
    assert counts(store, room_id) == {"acked": 1}
    assert [e["event"] for e in room_events(stack, room_id)].count("acked") == 1


def test_a_status_without_a_baton_delivery_id_is_answered_200_and_kept_with_its_reason(stack, error_queue):
    marker = f"wamid.{time.time_ns()}"
    body = webhook_body({**status_entry("not-a-delivery-id", "delivered"), "id": marker})
    r = post(stack.url("webhook-queued"), body)
    assert r.status_code == 200 and r.json()["unroutable"] == 1
    kept = wait_for(lambda: [x for x in error_queue.list() if marker in x.data], 20, "the unroutable status kept")
    assert kept[0].kind == "unroutable" and kept[0].reason == "no baton delivery id"
    # Never replayed (there is no room to send it to), never consumed.
    assert error_queue.replay()["unroutable"] >= 1
    assert [x for x in error_queue.list() if marker in x.data]


def test_a_status_queue_message_that_does_not_parse_is_kept_and_acked(stack, error_queue):
    marker = f"garbage-{time.time_ns()}"
    envelope = {"message": {"data": "bm90IGpzb24=", "attributes": {"room_id": marker}, "messageId": "1"},
                "subscription": "projects/baton-local/subscriptions/x"}
    r = requests.post(stack.url("status"), data=json.dumps(envelope).encode(), timeout=10)
    assert r.status_code == 200 and r.json()["result"] == "kept"
    kept = wait_for(lambda: [x for x in error_queue.list() if marker in x.data], 20, "the bad message kept")
    assert "not a status-queue message" in kept[0].reason


@pytest.mark.parametrize("mode", ["queued", "direct"])
def test_duplicated_and_reordered_payloads_never_double_advance(stack, store, fake_config, mode):
    url = stack.url("webhook-queued") if mode == "queued" else stack.url("webhook")
    room_id = f"t-dup-{mode}-{time.time_ns()}"
    fake_config({"ack_prob": 0.0})  # the platform acks nothing itself: every ack below is ours
    (d1,) = in_flight_room(store, room_id, messages=2)
    # `read` before `delivered`, each twice, one payload with both, and a
    # status naming another attempt of the same message: one ack in all.
    bodies = [webhook_body(status_entry(d1, "read")), webhook_body(status_entry(d1, "delivered")),
              webhook_body(status_entry(d1, "read"), status_entry(d1, "delivered")),
              webhook_body(status_entry(d1.replace("1.1.", "1.2.", 1), "delivered"))]
    for body in bodies:
        assert post(url, body).status_code == 200
    # The second message is sent after the first is acked, never acked, and
    # ends by its ack timeout: a duplicate that advanced the room twice would
    # have acked it instead.
    wait_for(lambda: counts(store, room_id).get("timed_out"), 30, "the second message timed out")
    events = room_events(stack, room_id)
    assert [(e["event"], e["seq"]) for e in events if e["event"] in ("acked", "timed_out")] == [("acked", 1),
                                                                                              ("timed_out", 2)]
    assert counts(store, room_id) == {"acked": 1, "timed_out": 1}


@pytest.mark.parametrize("mode", ["webhook", "webhook-queued"])
def test_a_messenger_receipt_by_recipient_acks_the_room_in_both_modes(stack, store, room_id, mode):
    """A Messenger receipt names the person, not the room: the direct webhook
    finds the rooms sending to them; the queued one publishes the receipt keyed
    by recipient and the `status` function does. A receipt naming another
    message changes nothing; the one naming ours acks it."""
    from shared.room import SendOutcome, SendReturned

    psid = f"6{abs(hash(room_id)) % 10**9:09d}"
    now = time.time_ns() // 1000
    store.apply(room_id, lambda s: decide(s, Enqueue("m1", "messenger", psid, "hi", now, now), FAR, "test"))
    doc = store.room_ref(room_id).get().to_dict()
    assert doc["in_flight_to"] == f"messenger:{psid}"
    store.apply(room_id, lambda s: decide(s, SendReturned(doc["incarnation"], 1, 1, SendOutcome.ACCEPTED,
                                                          time.time_ns() // 1000, "push:m1",
                                                          provider_message_id="m_ours"), FAR, "test"))

    def receipt(mids: list[str]) -> bytes:
        return json.dumps({"object": "page", "entry": [{"id": "200000000000002", "time": 1, "messaging": [
            {"sender": {"id": psid}, "recipient": {"id": "200000000000002"},
             "delivery": {"mids": mids, "watermark": 1}}]}]}).encode()

    for mids in (["m_other"], ["m_ours"]):
        body = receipt(mids)
        r = requests.post(stack.url(mode), data=body, timeout=15,
                          headers={"X-Hub-Signature-256": sign(body, "local-messenger-secret")})
        assert r.status_code == 200, r.text
    acked = wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "acked"],
                     what="the receipt's ack")
    assert len(acked) == 1 and acked[0]["provider_message_id"] == "m_ours"
    ignored = [e for e in room_events(stack, room_id) if e["event"] == "status_ignored"]
    # The other message's receipt came before our message's echo: its
    # watermark is kept to be judged against the echo's stamp (issue 43, bug 5).
    assert [e["reason"] for e in ignored] == ["receipt_covers_nothing_in_flight: kept until the echo's stamp"]


def test_receipts_by_recipient_moved_to_the_error_queue_are_replayed_and_ack_their_room(stack, store, room_id,
                                                                                         error_queue):
    """A Messenger recipient's receipts that the `status` function kept
    failing on land in the error queue (as `StatusQueue.dead_letter` moves
    them); `baton statuses replay` publishes them again as receipts of that
    recipient, and the room they prove delivered is acked (issue 28, item 8)."""
    from shared.room import RecipientReceipt, SendOutcome, SendReturned
    from shared.room_document import recipient_key
    from shared.status_queue import KIND_RECIPIENT_RECEIPTS, RecipientReceipts, StatusQueue
    from tools.local.stack import STATUS_ERROR_TOPIC

    recipient = str(int(time.time() * 1000))[-12:]  # a recipient of this test's room only
    now = time.time_ns() // 1000
    store.apply(room_id, lambda s: decide(s, Enqueue("m1", "messenger", recipient, "hi", now, now), FAR, "test"))
    inc = store.load_room(room_id).incarnation
    store.apply(room_id, lambda s: decide(s, SendReturned(inc, 1, 1, SendOutcome.ACCEPTED, now + 50_000, "c",
                                                          provider_message_id="mid.R1"), FAR, "test"))
    key = recipient_key("messenger", recipient)
    batch = RecipientReceipts.of(key, now + 100_000,
                                 [RecipientReceipt("messenger", recipient, "delivered", None, ("mid.R1",), now)])
    StatusQueue(PROJECT, STATUS_TOPIC, STATUS_ERROR_TOPIC).dead_letter(
        batch.encode(), key, "RuntimeError: a bug, fixed since", 5, kind=KIND_RECIPIENT_RECEIPTS)
    kept = wait_for(lambda: error_queue.list(room=key), 30, "the receipts in the error queue")
    assert [(x.kind, x.recipient_key, x.statuses) for x in kept] == [(KIND_RECIPIENT_RECEIPTS, key, 1)]
    assert baton(stack, "statuses", "replay", "--room", key, "--yes")["replayed"] == 1
    wait_for(lambda: counts(store, room_id).get("acked"), 30, "the replayed receipt applied")
    assert error_queue.list(room=key) == []
    assert [(e["event"], e["actor"]) for e in room_events(stack, key)] == [("statuses_replayed", "tester")]
