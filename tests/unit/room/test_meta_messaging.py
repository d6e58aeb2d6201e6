"""Messenger and Instagram: the adapters' shapes against Meta's documented
examples, and the room's rules for receipts that name the recipient."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shared.providers.meta_messaging import InstagramClient, MessengerClient, parse_messaging
from shared.room import (
    Enqueue,
    Phase,
    Policy,
    RecipientReceipt,
    RoomState,
    SendOutcome,
    SendReturned,
    StatusUpdate,
)
from tests.unit.room.steps import stepper

T0 = 1_700_000_000_000_000
MS = 1000  # one ms in us
S_ = 1_000_000  # one second in us
POLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=2000, send_start_deadline_ms=1000,
                ack_levels=(("whatsapp", "delivered"), ("messenger", "delivered"), ("instagram", "read")))
PSID = "6000000000000001"  # a Page-scoped id: 15-17 digits


# ------------------------------------------------------------------ wire formats


def test_messenger_send_body_and_answer_follow_the_send_api_example():
    body = MessengerClient.request_body(PSID, "hello, world", "1.1.1700000000000.abc.room-1")
    # https://developers.facebook.com/docs/messenger-platform/reference/send-api
    assert body == {"recipient": {"id": PSID}, "messaging_type": "RESPONSE",
                    "message": {"text": "hello, world", "metadata": "1.1.1700000000000.abc.room-1"}}
    assert MessengerClient.answer_id({"recipient_id": PSID, "message_id": "AG5Hz2U"}) == "AG5Hz2U"
    assert MessengerClient.answer_id({"recipient_id": PSID}) is None
    assert MessengerClient.answer_id({"messages": [{"id": "wamid.X"}]}) is None  # WhatsApp's shape is not Messenger's
    assert InstagramClient.request_body("7001", "hi", "d") == {"recipient": {"id": "7001"}, "message": {"text": "hi"}}


def test_messenger_delivery_and_read_receipts_parse_as_documented():
    # The message_deliveries and message_reads examples of Meta's webhook reference.
    payload = {"object": "page", "entry": [{"id": "PAGE", "time": 1458668856463, "messaging": [
        {"sender": {"id": PSID}, "recipient": {"id": "PAGE"},
         "delivery": {"mids": ["mid.1458668856218:ed81099e15d3f4f233"], "watermark": 1458668856253}},
        {"sender": {"id": PSID}, "recipient": {"id": "PAGE"}, "delivery": {"watermark": 1458668856300}},
        {"sender": {"id": PSID}, "recipient": {"id": "PAGE"}, "timestamp": 1458668856463,
         "read": {"watermark": 1458668856253}},
        {"sender": {"id": "PAGE"}, "recipient": {"id": PSID}, "message": {"mid": "m-echo", "is_echo": True}},
        {"sender": {"id": PSID}, "recipient": {"id": "PAGE"}, "message": {"mid": "m-in", "text": "hi"}},
    ]}]}
    items = parse_messaging(payload)
    assert [(i.kind, i.user_id, i.watermark_ms, i.mids) for i in items] == [
        ("delivery", PSID, 1458668856253, ("mid.1458668856218:ed81099e15d3f4f233",)),
        ("delivery", PSID, 1458668856300, ()),
        ("read", PSID, 1458668856253, ()),
        ("echo", PSID, None, ("m-echo",)),
        ("incoming", PSID, None, ("m-in",)),
    ]
    assert {i.provider for i in items} == {"messenger"}


def test_instagram_seen_names_one_message():
    payload = {"object": "instagram", "entry": [{"id": "IG", "time": 1, "messaging": [
        {"sender": {"id": "7001"}, "recipient": {"id": "IG"}, "timestamp": 1, "read": {"mid": "aWdf"}}]}]}
    (item,) = parse_messaging(payload)
    assert (item.provider, item.kind, item.user_id, item.watermark_ms, item.mids) == \
        ("instagram", "read", "7001", None, ("aWdf",))


@pytest.mark.parametrize("payload", [
    {"object": "whatsapp_business_account", "entry": []},
    {"object": "page"},
    {"object": "page", "entry": [{"messaging": [{"sender": {"id": PSID}, "recipient": {"id": "P"},
                                                 "delivery": {"watermark": "soon"}}]}]},
    {"object": "page", "entry": [{"messaging": [{"sender": {"id": PSID}, "recipient": {"id": "P"},
                                                 "delivery": {"watermark": 1, "mids": [3]}}]}]},
    {"object": "page", "entry": [{"messaging": [{"recipient": {"id": "P"}, "read": {"watermark": 1}}]}]},
    {"object": "instagram", "entry": [{"messaging": [{"sender": {"id": "1"}, "recipient": {"id": "P"},
                                                      "read": {}}]}]},
])
def test_a_malformed_messaging_webhook_is_refused_with_a_reason(payload):
    with pytest.raises(ValueError):
        parse_messaging(payload)


# ------------------------------------------------------------------ the room's rules


step = stepper(POLICY)


def kinds(d) -> list[str]:
    return [str(e.event) for e in d.events]


def sending(provider: str = "messenger", *more: str) -> RoomState:
    """A room whose first message (to PSID) is being sent at T0, others queued."""
    state, _ = step(RoomState("r1"), Enqueue("m1", provider, PSID, "hi", T0 - 5 * MS, T0))
    for mid in more:
        state, _ = step(state, Enqueue(mid, provider, PSID, "next", T0, T0 + MS))
    return state


def accepted(state: RoomState, at: int, pmid: str | None = "mid.A") -> RoomState:
    state, _ = step(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, at, "push:m1",
                                        provider_message_id=pmid))
    return state


def receipt(status: str, watermark_us: int | None, mids: tuple[str, ...] = (), at: int = T0 + 200 * MS,
            provider: str = "messenger", recipient: str = PSID) -> RecipientReceipt:
    return RecipientReceipt(provider, recipient, status, watermark_us, mids, at)


def test_a_watermark_at_the_sends_return_acks_and_one_before_it_covers_nothing():
    returned = T0 + 40 * MS
    state = accepted(sending("messenger", "m2"), returned)
    assert state.in_flight.phase is Phase.SENT and state.in_flight.returned_at_us == returned
    # A watermark stamped before our send returned may be the previous message's: it proves nothing
    # now; it is kept until the echo's stamp comes (issue 43).
    same, d = step(state, receipt("delivered", returned - MS))
    assert kinds(d) == ["status_ignored"] and "acked" not in kinds(d)
    assert d.events[0].reason.startswith("receipt_covers_nothing_in_flight")
    assert same.in_flight.early_watermark_us == returned - MS and same.in_flight.message.message_id == "m1"
    # A delivery watermark covers what was sent strictly before it (issue 43, bug 5).
    _, d = step(state, receipt("delivered", returned))
    assert kinds(d) == ["status_ignored"]
    after, d = step(state, receipt("delivered", returned + 1))
    assert kinds(d)[0] == "acked" and d.events[0].message_id == "m1"
    assert after.in_flight.message.message_id == "m2"  # the baton passed


def test_the_watermark_margin_is_honoured_on_both_sides():
    returned = T0 + 40 * MS
    policy = replace(POLICY, watermark_margin_ms=500)
    state = accepted(sending(), returned)
    _, d = step(state, receipt("delivered", returned + 499 * MS), policy)
    assert kinds(d) == ["status_ignored"]
    _, d = step(state, receipt("delivered", returned + 500 * MS), policy)
    assert kinds(d) == ["status_ignored"]  # a delivery watermark: strictly after
    _, d = step(state, receipt("delivered", returned + 500 * MS + 1), policy)
    assert kinds(d) == ["acked"]
    _, d = step(state, receipt("read", returned + 500 * MS), policy)
    assert kinds(d) == ["acked"]  # a read watermark: at or after


def test_mids_naming_the_message_ack_it_and_other_mids_do_not():
    state = accepted(sending(), T0 + 40 * MS, pmid="mid.A")
    _, d = step(state, receipt("delivered", T0 - 10 * S_, ("mid.OLD",)))
    assert kinds(d) == ["status_ignored"]
    _, d = step(state, receipt("delivered", T0 - 10 * S_, ("mid.OLD", "mid.A")))
    assert kinds(d) == ["acked"] and d.events[0].provider_message_id == "mid.A"



def test_a_receipt_before_the_send_returned_acks_only_by_its_mids_and_only_at_the_return():
    state = sending("messenger", "m2")
    assert state.in_flight.phase is Phase.SENDING
    # A watermark alone, before the return and the echo: cannot tell our message from the ones
    # before it yet; kept until the echo's stamp comes (issue 43).
    kept, d = step(state, receipt("delivered", T0 + 30 * MS))
    assert kinds(d) == ["status_ignored"] and kept.in_flight.early_watermark_us == T0 + 30 * MS
    # With mids: remembered; the return that names one of them acks at once.
    state, d = step(state, receipt("delivered", T0 + 30 * MS, ("mid.A",)))
    assert state.in_flight.early_mids == ("mid.A",) and state.in_flight.phase is Phase.SENDING
    acked, d = step(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, T0 + 40 * MS, "push:m1",
                                        provider_message_id="mid.A"))
    assert kinds(d)[0] == "acked" and acked.in_flight.message.message_id == "m2"
    # A return with another id is held as usual.
    held, d = step(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, T0 + 40 * MS, "push:m1",
                                       provider_message_id="mid.B"))
    assert kinds(d) == [] and held.in_flight.phase is Phase.SENT


def test_a_receipt_for_another_recipient_or_provider_changes_nothing():
    state = accepted(sending(), T0 + 40 * MS)
    for other in (receipt("delivered", T0 + S_, recipient="9999"),
                  receipt("delivered", T0 + S_, provider="instagram")):
        _, d = step(state, other)
        assert d.state is None and kinds(d) == ["status_ignored"]


def test_instagram_acks_on_seen_by_default_and_on_the_send_with_level_accepted():
    state = accepted(sending("instagram"), T0 + 40 * MS, pmid="aWdf")
    _, d = step(state, receipt("read", None, ("aWdf",), provider="instagram"))
    assert kinds(d) == ["acked"] and d.events[0].status == "read"
    fast = replace(POLICY, ack_levels=(("instagram", "accepted"),))
    state = sending("instagram", "m2")
    after, d = step(state, SendReturned(state.incarnation, 1, 1, SendOutcome.ACCEPTED, T0 + 40 * MS, "push:m1",
                                        provider_message_id="aWdf"), fast)
    assert kinds(d)[0] == "acked" and d.events[0].status == "accepted"
    assert after.in_flight.message.message_id == "m2"


def test_a_delivered_status_does_not_ack_under_ack_level_read():
    policy = replace(POLICY, ack_levels=(("whatsapp", "read"),))
    state = sending("whatsapp")
    state = accepted(state, T0 + 40 * MS, pmid=None)
    delivered = StatusUpdate(state.incarnation, 1, 1, "delivered", T0, T0 + 90 * MS, "wamid.1")
    _, d = step(state, delivered, policy)
    assert kinds(d) == ["status_ignored"] and d.events[0].reason == "below_ack_level"
    _, d = step(state, replace(delivered, status="read"), policy)
    assert kinds(d) == ["acked"]


# ------------------------------------------------------------------ PROVIDERS


def test_a_push_for_a_platform_this_deployment_does_not_enable_is_kept_as_rejected():
    import base64
    import json

    from shared.push import Accepted, Rejected, parse_push

    def body(provider: str) -> bytes:
        attrs = {"room_id": "r1", "provider": provider, "recipient": PSID, "message_id": "m1"}
        data = base64.b64encode(json.dumps({"type": "text", "text": "hi"}).encode()).decode()
        return json.dumps({"message": {"data": data, "attributes": attrs, "messageId": "1"}}).encode()

    assert isinstance(parse_push(body("messenger"), T0), Accepted)
    rejected = parse_push(body("messenger"), T0, frozenset({"whatsapp"}))
    assert isinstance(rejected, Rejected) and "not enabled" in rejected.reason


def test_configuration_refuses_an_unknown_platform_or_ack_level(monkeypatch):
    from shared import config

    monkeypatch.setenv("PROVIDERS", "whatsapp,telegram")
    with pytest.raises(ValueError, match="PROVIDERS"):
        config.load()
    monkeypatch.setenv("PROVIDERS", "whatsapp")
    monkeypatch.setenv("ACK_LEVEL_INSTAGRAM", "seen")
    with pytest.raises(ValueError, match="ACK_LEVEL_INSTAGRAM"):
        config.load()
    monkeypatch.setenv("ACK_LEVEL_INSTAGRAM", "accepted")
    assert config.load().ack_levels["instagram"] == "accepted" and config.load().enabled_providers == {"whatsapp"}
