"""The webhook records a Messenger echo's platform stamp in its room, and a
receipt without mids whose watermark reaches that stamp acks the message
(issue 34), through the service over the in-memory fakes."""

from __future__ import annotations

import dataclasses
import json

from shared.providers.whatsapp import sign
from shared.room import Enqueue, SendOutcome, SendReturned, decide, make_delivery_id
from tests.unit.test_faults import SECRET, Knobs, World, build_service, service_time

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
    with service_time(world):
        for body in (page(echo(delivery_id, stamp_ms)), page(delivery(stamp_ms + watermark_offset_ms))):
            assert service.handle_status_webhook(body, sign(body, SECRET)).status == 200
    return world.store.load_room("room-e").counts


def test_a_watermark_at_the_echoed_stamp_acks_the_message():
    assert run(0) == {"acked": 1}


def test_a_watermark_one_ms_before_the_echoed_stamp_acks_nothing():
    assert run(-1) == {}
