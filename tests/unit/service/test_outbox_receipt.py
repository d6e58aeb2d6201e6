"""A Messenger or Instagram receipt's redelivery reaches the room whose last
write it made (issue 46; simulation seed 899).

A receipt names only its recipient; the webhook finds its rooms by the
recipient of their message in flight (`in_flight_to`). When the receipt
acked a room's last message (the room idle, `in_flight_to` null) and its
process died after the commit, before logging the `acked` line, the
platform's redelivery found no room, and the line stayed in the idle room's
outbox until TTL deleted it. Now the write stores the receipt's digest
(`outbox.RECEIPT`), the lookup is one query for either (`rooms_for_receipt`),
and the room's read logs that write's entry (`outbox.of_receipt`). Through
the service over the in-memory fakes (tests/unit/service/test_faults.py).
"""

from __future__ import annotations

import dataclasses
import json

from shared import outbox
from shared.events import DeliveryEvent, EventType
from shared.opcounts import begin_request
from shared.providers.whatsapp import sign
from shared.room import Enqueue, SendOutcome, SendReturned, decide
from shared.service import DeliveryService, ServiceCore
from shared.store import WRITE_ID
from tests.unit.service.test_echo_service import PSID, page
from tests.unit.service.test_faults import SECRET, Knobs, World, build_service, seams
from tools.sim.fakes import Crash

ROOM = "room-r"


def delivered(mids: list[str], watermark_ms: int) -> dict:
    return {"sender": {"id": PSID}, "recipient": {"id": "PAGE"}, "timestamp": watermark_ms + 5,
            "delivery": {"mids": mids, "watermark": watermark_ms}}


def messenger_world(messages: int = 1) -> tuple[World, DeliveryService]:
    """A Messenger room holding `messages` messages, the first sent and
    accepted as `mid.1` (made through the store, as test_echo_service)."""
    world = World(Knobs())
    world.settings = dataclasses.replace(world.settings, messenger_app_secret=SECRET)
    service = build_service(world)
    now = world.clock.now_us()
    for n in range(1, messages + 1):
        world.store.apply(ROOM, lambda s, n=n: decide(s, Enqueue(f"m{n}", "messenger", PSID, "hi", now, now),
                                                       world.policy, "t"))
    state = world.store.load_room(ROOM)
    world.store.apply(ROOM, lambda s: decide(s, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED,
                                                             now + 300_000, "c", provider_message_id="mid.1"),
                                             world.policy, "t"))
    return world, service


def webhook(service: DeliveryService, *items: dict) -> int:
    body = page(*items)
    return service.handle_status_webhook(body, sign(body, SECRET)).status


def lines(world: World, kind: EventType) -> list[DeliveryEvent]:
    return [e for e in world.events.events if e.event is kind and e.room_id == ROOM]


def crash_after_the_ack_then_redeliver(world: World, service: DeliveryService) -> None:
    """The receipt acks m1, the room's last message; the process dies after
    the commit, before its lines; Meta redelivers the same webhook."""
    receipt = delivered(["mid.1"], world.clock.now_us() // 1000)
    world.store.crash_after_next_commit()
    try:
        webhook(service, receipt)
        raise AssertionError("the process did not die")
    except Crash:
        pass
    assert world.store.load_room(ROOM).counts == {"acked": 1} and not lines(world, EventType.ACKED)
    assert world.store.load_doc(ROOM)["in_flight_to"] is None  # idle: no longer found by its recipient
    begin_request()  # a new process
    assert webhook(build_service(world), receipt) == 200


def test_the_redelivery_of_a_receipt_that_acked_the_last_message_logs_the_ack_its_process_died_with():
    world, service = messenger_world()
    crash_after_the_ack_then_redeliver(world, service)
    (acked,) = lines(world, EventType.ACKED)
    assert (acked.seq, acked.relogged, acked.event_id is not None) == (1, True, True)


def test_before_the_fix_the_redelivery_found_no_room_and_the_ack_stayed_unlogged():
    """The lookup by `in_flight_to` alone (the code before): the check above fails."""
    world, service = messenger_world()
    world.store.finds_by_receipt = False
    crash_after_the_ack_then_redeliver(world, service)
    assert not lines(world, EventType.ACKED)
    assert [e.reason for e in world.events.events if e.event is EventType.STATUS_UNKNOWN] == [
        "no room has a message in flight to this recipient"]


def test_the_write_that_applied_the_receipt_stores_its_digest_and_no_other_write_does():
    """The ack's write stores the receipt's digest, beside its entry with
    the `acked` line (the process dies right after it); the next message's
    send outcome, a later transaction of the same request, stores none: it
    did not apply the receipt."""
    for crash in (True, False):
        world, service = messenger_world(messages=2)
        service = DeliveryService(ServiceCore(world.settings, world.policy, world.store, world.timers,
                                              {"whatsapp": world.platform, "messenger": world.platform},
                                              world.events, **seams(world)))
        receipt = delivered(["mid.1"], world.clock.now_us() // 1000)
        if crash:
            world.store.crash_after_next_commit()
            try:
                webhook(service, receipt)
                raise AssertionError("the process did not die")
            except Crash:
                pass
        else:
            assert webhook(service, receipt) == 200
        doc = world.store.load_doc(ROOM)
        if crash:  # the ack's write: m2 not sent yet
            assert doc[outbox.RECEIPT] == outbox.receipt_digest(json_receipt_key(receipt))
            assert doc[outbox.OUTBOX][outbox.write_key(doc[WRITE_ID])][0]["event"] == "acked"
        else:  # m2's send outcome, the request's last write
            assert doc["in_flight"]["message"]["id"] == "m2" and doc["in_flight"]["phase"] == "sent"
            assert doc[outbox.RECEIPT] is None


def test_another_receipt_for_the_idle_room_finds_nothing_and_reads_no_room():
    """A read receipt after the delivery receipt acked the room's last
    message: another receipt, another digest; one query finds nothing, as
    before (no room read, `status_unknown`)."""
    world, service = messenger_world()
    now_ms = world.clock.now_us() // 1000
    assert webhook(service, delivered(["mid.1"], now_ms)) == 200
    decided = len(world.decided_rooms)
    read = {"sender": {"id": PSID}, "recipient": {"id": "PAGE"}, "timestamp": now_ms + 9, "read": {"watermark": now_ms + 5}}
    assert webhook(service, read) == 200
    assert len(world.decided_rooms) == decided  # no room transaction
    assert world.events.events[-1].event is EventType.STATUS_UNKNOWN


def test_a_receipt_found_again_logs_nothing_new_when_its_process_logged_the_ack():
    """The redelivery of a receipt whose process lived: the read finds the
    room again and logs its ack once more (marked `relogged`, which readers
    drop as a copy), and changes nothing."""
    world, service = messenger_world()
    receipt = delivered(["mid.1"], world.clock.now_us() // 1000)
    assert webhook(service, receipt) == 200
    commits = world.store.commits
    begin_request()  # another invocation (the functions' entry points begin one)
    assert webhook(build_service(world), receipt) == 200
    assert world.store.commits == commits
    assert [e.relogged for e in lines(world, EventType.ACKED)] == [None, True]


def json_receipt_key(item: dict) -> str:
    """The idempotency key the webhook gives this Messenger delivery item
    (`RecipientReceipt.idempotency_key`)."""
    delivery = item["delivery"]
    return f"receipt:messenger:{PSID}:delivered:{delivery['watermark'] * 1000}:{','.join(delivery['mids'])}"


def test_the_key_the_test_derives_is_the_webhooks():
    from shared.room import RecipientReceipt

    item = delivered(["mid.1", "mid.2"], 1_700_000_000_123)
    receipt = RecipientReceipt("messenger", PSID, "delivered", 1_700_000_000_123_000, ("mid.1", "mid.2"), 1)
    assert json_receipt_key(item) == receipt.idempotency_key
    assert json.dumps(item)  # a plain payload
