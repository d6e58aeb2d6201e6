"""The webhook records a Messenger echo's platform stamp in its room, and a
receipt without mids whose delivery watermark is past that stamp acks the
message (issue 34; strictly past: issue 43, bug 5), through the service over the in-memory fakes."""

from __future__ import annotations

import dataclasses
import json

from shared.providers.whatsapp import sign
from shared.room import Enqueue, SendOutcome, SendReturned, decide, make_delivery_id
from tests.fakes import FakeStatusQueue
from tests.unit.service.test_faults import SECRET, Knobs, World, build_service

PSID = "2400000077"


def messenger_room(world: World, room: str) -> str:
    """A Messenger room whose message was sent and accepted (made through the store); its delivery id."""
    now = world.clock.now_us()
    world.store.apply(room, lambda s: decide(s, Enqueue("m1", "messenger", PSID, "hi", now, now), world.policy, "t"))
    state = world.store.load_room(room)
    world.store.apply(room, lambda s: decide(s, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED,
                                                             now + 300_000, "c", provider_message_id="mid.1"),
                                             world.policy, "t"))
    return make_delivery_id(room, state.incarnation, 1, 1, state.in_flight.started_at_us)


def page(*items: dict) -> bytes:
    return json.dumps({"object": "page", "entry": [{"id": "PAGE", "time": 1, "messaging": list(items)}]}).encode()


def echo(delivery_id: str, stamp_ms: int) -> dict:
    return {"sender": {"id": "PAGE"}, "recipient": {"id": PSID}, "timestamp": stamp_ms,
            "message": {"mid": "mid.1", "is_echo": True, "metadata": delivery_id, "text": "hi"}}


def delivery(watermark_ms: int) -> dict:  # an older client: no mids
    return {"sender": {"id": PSID}, "recipient": {"id": "PAGE"}, "timestamp": watermark_ms + 5,
            "delivery": {"watermark": watermark_ms}}


def run(watermark_offset_ms: int) -> dict:
    world = World(Knobs())
    world.settings = dataclasses.replace(world.settings, messenger_app_secret=SECRET)
    service = build_service(world)
    delivery_id = messenger_room(world, "room-e")
    stamp_ms = world.clock.now_us() // 1000 + 100  # the platform stamped it before our send call returned
    for body in (page(echo(delivery_id, stamp_ms)), page(delivery(stamp_ms + watermark_offset_ms))):
        assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
    return world.store.load_room("room-e").counts


def test_a_delivery_watermark_after_the_echoed_stamp_acks_the_message():
    assert run(1) == {"acked": 1}


def test_a_delivery_watermark_at_the_echoed_stamp_acks_nothing():
    # "All messages that were sent before this timestamp were delivered" (issue 43, bug 5).
    assert run(0) == {}


def test_a_watermark_one_ms_before_the_echoed_stamp_acks_nothing():
    assert run(-1) == {}


def run_receipt_before_return_and_echo(watermark_offset_ms: int, mode: str = "direct") -> tuple[dict, int]:
    """A watermark-only receipt comes while the send call is under way and
    before the echo (issue 43): kept, then judged when the echo's stamp
    comes. Returns the room's counts and how many receipts were queued."""
    world = World(Knobs())
    world.settings = dataclasses.replace(world.settings, messenger_app_secret=SECRET, webhook_mode=mode)
    service = build_service(world)
    queue = FakeStatusQueue()
    service.core._status_queue = queue
    room = "room-k"
    now = world.clock.now_us()
    world.store.apply(room, lambda s: decide(s, Enqueue("m1", "messenger", PSID, "hi", now, now), world.policy, "t"))
    state = world.store.load_room(room)
    delivery_id = make_delivery_id(room, state.incarnation, 1, 1, state.in_flight.started_at_us)
    stamp_ms = now // 1000 + 100
    body = page(delivery(stamp_ms + watermark_offset_ms))  # before the return and the echo
    assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
    if mode == "queued":
        for published in list(queue.published):
            service.statuses.apply_receipt_events(list(published.events()), "status")
        queue.published.clear()
    world.store.apply(room, lambda s: decide(s, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED,
                                                             now + 300_000, "c", provider_message_id="mid.1"),
                                             world.policy, "t"))
    assert world.store.load_room(room).counts == {}  # no echo yet: nothing proven
    body = page(echo(delivery_id, stamp_ms))
    assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
    queued = len(queue.published)
    for published in list(queue.published):
        service.statuses.apply_receipt_events(list(published.events()), "status")
    return world.store.load_room(room).counts, queued


def test_a_receipt_before_the_return_and_the_echo_is_judged_when_the_echo_comes():
    assert run_receipt_before_return_and_echo(1) == ({"acked": 1}, 0)
    assert run_receipt_before_return_and_echo(0) == ({}, 0)  # a delivery watermark at the stamp: strictly before


def test_queued_mode_the_kept_receipt_is_queued_again_with_the_echo():
    assert run_receipt_before_return_and_echo(1, "queued") == ({"acked": 1}, 1)
