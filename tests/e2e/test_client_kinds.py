"""Every kind through the client, the whole local stack and the fake
platform: the platform receives exactly each kind's wire format (Meta's
shapes, tests/message_kinds.py), and a message outside the 24-hour window
fails at once with its reason, never resent, while a template (WhatsApp) or
a tagged message (Messenger) still goes.

Judged from outside (invariant 13): the fake platform's record of what it
received, and the delivery event log.
"""

from __future__ import annotations

import itertools
import uuid

from baton_client import Message, Publisher, Template, Text

from tests.conftest import room_events, wait_for
from tests.message_kinds import KINDS, wire_of
from tools.local.demo import fake_stats
from tools.local.stack import PROJECT, TOPIC

ENDS = ("acked", "failed", "timed_out", "dead_lettered")
_numbers = itertools.count(1)


def recipient_for(provider: str) -> str:
    return {"whatsapp": "1557", "messenger": "6200", "instagram": "7200"}[provider] + f"{next(_numbers):07d}"


def ended(stack, room: str) -> list[dict]:
    return [e for e in room_events(stack, room) if e["event"] in ENDS]


def test_one_message_of_every_kind_reaches_the_platform_in_its_exact_wire_format(stack, fake_config):
    fake_config({"record_bodies": True, "read_prob": 1.0})  # Instagram acks on a read only
    run = uuid.uuid4().hex[:8]
    sent = []
    publisher = Publisher(PROJECT, TOPIC)
    for name, provider, content, body in KINDS:
        room, to = f"kinds-{run}-{name}", recipient_for(provider)
        report = publisher.publish_many([Message(room, provider, to, f"{room}-m1", content)])
        assert report.ok, report.failed
        sent.append((room, provider, to, body))
    for room, *_ in sent:
        wait_for(lambda room=room: ended(stack, room), timeout_s=60, what=f"{room} to end")
    received = {s["recipient"]: s for s in fake_stats(stack)["sends"] if s["body"] is not None}
    for room, provider, to, body in sent:
        assert [e["event"] for e in ended(stack, room)] == ["acked"], room
        got = received[to]
        delivery_id = got["callback"] if provider != "instagram" else None
        expected = wire_of(provider, body, to, delivery_id)
        if provider == "instagram":
            assert got["body"] == expected, room
        else:
            assert got["body"] == expected and delivery_id.endswith(room), room


def test_outside_the_window_a_message_fails_at_once_and_a_template_or_a_tag_still_goes(stack, fake_config):
    wa_to, ms_to = recipient_for("whatsapp"), recipient_for("messenger")
    fake_config({"closed_window": [wa_to, ms_to]})
    run = uuid.uuid4().hex[:8]
    wa_room, ms_room = f"window-{run}-wa", f"window-{run}-ms"
    report = Publisher(PROJECT, TOPIC).publish_many([
        Message(wa_room, "whatsapp", wa_to, f"{wa_room}-m1", Text("Are you there?")),
        Message(wa_room, "whatsapp", wa_to, f"{wa_room}-m2", Template("order_update", "en_US", body=["Ada", "#1"])),
        Message(ms_room, "messenger", ms_to, f"{ms_room}-m1", Text("Are you there?")),
        Message(ms_room, "messenger", ms_to, f"{ms_room}-m2", Text("An agent answers you", tag="HUMAN_AGENT")),
    ])
    assert report.ok
    for room in (wa_room, ms_room):
        wait_for(lambda room=room: len(ended(stack, room)) == 2, timeout_s=60, what=f"{room}'s two messages to end")
    for room, code, advice in ((wa_room, 131047, "send one"), (ms_room, 10, "message tag")):
        events = room_events(stack, room)
        first, second = (e for e in ended(stack, room))
        assert (first["seq"], first["event"], first["error_code"]) == (1, "failed", code), first
        assert "outside the 24-hour customer service window" in first["error_title"] and advice in first["error_title"]
        # One send call only: refused for good, never resent.
        assert [e["event"] for e in events if e["seq"] == 1 and e["event"] in ("sent", "send_failed")] == \
            ["send_failed"], room
        assert (second["seq"], second["event"]) == (2, "acked"), second
