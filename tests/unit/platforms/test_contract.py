"""The message contract: one schema for the client and push.py, the same
reason from both, every kind's wire format, and the fake platform refusing
what Meta refuses."""

from __future__ import annotations

import base64
import json

import baton_client.contract
import pytest
from baton_client import InvalidMessage, Message, Text
from jsonschema import Draft7Validator

import shared.contract
from shared.providers import Media
from shared.providers.meta_messaging import InstagramClient, MessengerClient
from shared.providers.whatsapp import WhatsAppClient
from shared.push import Accepted, Rejected, parse_push
from tests.message_kinds import BROKEN, KINDS, wire_of
from tools.sim.fake_platform import wire

NOW = 1_700_000_000_000_000
RECIPIENT = "15551234567"
CLIENTS = {"whatsapp": WhatsAppClient, "messenger": MessengerClient, "instagram": InstagramClient}
FAKE_CHECK = {"whatsapp": wire.WHATSAPP_SEND, "messenger": wire.MESSENGER_SEND, "instagram": wire.INSTAGRAM_SEND}


def push_of(message: Message) -> bytes:
    """The push envelope Pub/Sub would bring for `message` (published without the client's check)."""
    data = json.dumps(message.content.to_data()).encode()
    return json.dumps({"message": {"data": base64.b64encode(data).decode(), "attributes": message.attributes(),
                                   "messageId": "42", "publishTime": "2026-11-27T10:00:00Z"}}).encode()


def message(provider: str, content, message_id: str = "m-1") -> Message:
    return Message("room-1", provider, RECIPIENT, message_id, content)


def test_the_client_and_push_py_read_one_schema_file():
    assert baton_client.contract.SCHEMA_PATH.resolve() == shared.contract.SCHEMA_PATH.resolve()
    assert baton_client.contract.SCHEMA == shared.contract.SCHEMA
    Draft7Validator.check_schema(shared.contract.SCHEMA)


@pytest.mark.parametrize(("name", "provider", "content", "body"), KINDS, ids=[k[0] for k in KINDS])
def test_every_kind_passes_the_client_and_push_py_and_becomes_its_wire_format(name, provider, content, body):
    m = message(provider, content)
    assert m.errors() == []
    parsed = parse_push(push_of(m), NOW)
    assert isinstance(parsed, Accepted), parsed
    ev = parsed.event
    media = Media(ev.media_kind, link=ev.media_link) if ev.media_kind else None
    sent = CLIENTS[provider].request_body(RECIPIENT, ev.text, "d-1", media, ev.payload)
    assert sent == wire_of(provider, body, RECIPIENT, "d-1")
    assert wire.refusal(FAKE_CHECK[provider], sent) is None


@pytest.mark.parametrize(("name", "provider", "content", "reason"), BROKEN, ids=[k[0] for k in BROKEN])
def test_a_broken_message_of_every_kind_is_refused_by_the_client_with_push_pys_reason(name, provider, content,
                                                                                      reason):
    m = message(provider, content)
    with pytest.raises(InvalidMessage) as refused:
        m.encode()
    parsed = parse_push(push_of(m), NOW)
    assert isinstance(parsed, Rejected)
    assert refused.value.reason == parsed.reason
    assert reason in parsed.reason, parsed.reason


def test_every_error_comes_at_once():
    m = Message("room 1", "whatsap", "call me", "m-1", Text("x" * 5000), deliver_at="tomorrow")
    with pytest.raises(InvalidMessage) as refused:
        m.encode()
    assert [e.split(":")[0] for e in refused.value.errors] == [
        "attributes.room_id", "attributes.provider", "attributes.recipient", "attributes.deliver_at"]


@pytest.mark.parametrize("case", [*KINDS, *BROKEN], ids=[f"{'ok' if len(c[3]) and isinstance(c[3], dict) else 'bad'}-{c[0]}"
                                                         for c in [*KINDS, *BROKEN]])
def test_the_fast_verdict_is_the_full_validators_verdict(case):
    m = message(case[1], case[2])
    attrs, data = m.attributes(), m.content.to_data()
    full = not list(shared.contract._explain({"attributes": attrs, "data": data}))
    assert shared.contract._valid_fast(attrs, data) is full


def test_a_pattern_matches_the_whole_value_as_json_schema_means_it():
    # Python's `$` also matches before a final newline; the schema's patterns must not.
    m = Message("room-1\n", "whatsapp", RECIPIENT + "\n", "m-1", Text("hi"))
    assert [e.split(":")[0] for e in m.errors()] == ["attributes.room_id", "attributes.recipient"]


def test_prepare_is_for_a_whatsapp_media_link():
    ok = Message("room-1", "whatsapp", RECIPIENT, "m-1", KINDS[2][2], prepare=True)
    assert ok.errors() == []
    assert "`prepare=media` needs a media message" in Message("room-1", "whatsapp", RECIPIENT, "m-1", Text("hi"),
                                                              prepare=True).errors()[0]
    assert "for WhatsApp messages only" in Message("room-1", "messenger", RECIPIENT, "m-1", KINDS[14][2],
                                                   prepare=True).errors()[0]


def test_the_fake_platform_refuses_what_meta_refuses():
    too_many_rows = {"messaging_product": "whatsapp", "to": "1", "type": "interactive", "interactive": {
        "type": "list", "body": {"text": "b"}, "action": {"button": "x", "sections": [
            {"title": "a", "rows": [{"id": str(i), "title": "t"} for i in range(11)]}]}}}
    assert wire.list_rows(too_many_rows) == 11
    assert wire.refusal(wire.WHATSAPP_SEND, {"messaging_product": "whatsapp", "to": "1", "type": "template",
                                             "template": {"name": "x"}})[0] == 131008
    assert wire.refusal(wire.WHATSAPP_SEND, {"messaging_product": "whatsapp", "to": "1", "type": "text",
                                             "text": {"body": "x" * 4097}})[0] == 100
    assert wire.refusal(wire.MESSENGER_SEND, {"recipient": {"id": "1"}, "messaging_type": "MESSAGE_TAG",
                                              "message": {"text": "hi"}})[0] == 100
    assert wire.refusal(wire.INSTAGRAM_SEND, {"recipient": {"id": "1"}, "message": {"text": "x" * 1001}})[0] == 100


def test_the_clients_cancel_writes_the_record_baton_reads():
    """The client's cancel names the same document as baton's own record of
    that room's scheduled message, and another room's not (ids are unique
    per room only)."""
    from baton_client import publisher

    from shared import records

    assert publisher.SCHEDULED_CANCELS == records.SCHEDULED_CANCELS
    ours = records._doc_id(records.scheduled_key("room-1", "m-1"))
    assert publisher.scheduled_cancel_id("room-1", "m-1") == ours
    assert publisher.scheduled_cancel_id("room-2", "m-1") != ours
