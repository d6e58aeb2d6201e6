"""Pure parsing: the Pub/Sub push envelope, WhatsApp webhooks and signatures."""

from __future__ import annotations

import base64
import json

import pytest

from shared.providers.whatsapp import handshake_challenge, parse_statuses, sign, signature_valid
from shared.push import Accepted, Rejected, parse_push

NOW = 1_700_000_000_000_000
ATTRS = {"room_id": "room-1", "provider": "whatsapp", "recipient": "15551234567", "message_id": "m-1"}


def envelope(attrs=ATTRS, data=b'{"type": "text", "text": "hello"}', message_id="123") -> bytes:
    return json.dumps({"message": {"data": base64.b64encode(data).decode(), "attributes": attrs,
                                   "messageId": message_id, "publishTime": "2026-11-22T10:00:00.123456789Z"},
                       "subscription": "s"}).encode()


def test_a_valid_push_becomes_an_enqueue_event():
    parsed = parse_push(envelope(), NOW)
    assert isinstance(parsed, Accepted)
    assert parsed.room_id == "room-1"
    ev = parsed.event
    assert (ev.message_id, ev.provider, ev.recipient, ev.text) == ("m-1", "whatsapp", "15551234567", "hello")
    # 2026-11-22T10:00:00.123456Z in epoch microseconds (nanoseconds truncated).
    assert ev.published_at_us == 1795341600_123456


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not JSON"),
        (b'{"nomessage": 1}', "no `message`"),
        (envelope({**ATTRS, "room_id": ""}), "attributes.room_id: must be 1 to 256"),
        (envelope({**ATTRS, "room_id": "a/b"}), "room_id"),
        (envelope({**ATTRS, "room_id": "__x__"}), "room_id"),
        (envelope({k: v for k, v in ATTRS.items() if k != "message_id"}), "message_id"),
        (envelope({**ATTRS, "provider": "telegram"}), "provider"),
        (envelope({**ATTRS, "recipient": "call me"}), "recipient"),
        (envelope(data=b"\xff\xfe"), "base64-encoded JSON"),
        (envelope(data=b'{"type": "image"}'), "data: needs exactly one of `link`"),
        (envelope(data=b'{"type": "movie", "link": "https://x.test/a.mp4"}'), "data.type: is 'movie'; must be one of text"),
        (envelope(data=b'{"type": "image", "link": "ftp://x.test/a.png"}'), "data.link: must be an http(s) URL"),
        (envelope(data=b'{"type": "image", "link": "https://x.test/a.png", "caption": 7}'), "data.caption: must be of type"),
        (envelope(data=json.dumps({"type": "image", "link": "https://x.test/a.png", "caption": "c" * 1025}).encode()),
         "data.caption: longer than 1024 characters"),
        (envelope({**ATTRS, "provider": "messenger"}, data=b'{"type": "sticker", "link": "https://x.test/a.png"}'),
         "data.type: is 'sticker'; must be one of text, image, video, audio, file"),
        (envelope({**ATTRS, "prepare": "render"}), "attributes.prepare: is 'render'; must be one of media"),
        (envelope({**ATTRS, "prepare": "media"}), "`prepare=media` needs a media message"),
        (envelope({**ATTRS, "sequence": "0"}), "attributes.sequence: must be a whole number"),
        (envelope({**ATTRS, "sequence": "1.5"}), "attributes.sequence: must be a whole number"),
        (envelope({**ATTRS, "sequence": "９"}), "attributes.sequence: must be a whole number"),
        (envelope({**ATTRS, "sequence": str(2**53)}), "attributes.sequence: must be a whole number"),
        (envelope(data=b'{"text": "   "}'), "data.text: must be text of 1 to 4096 characters"),
        (envelope({**ATTRS, "room_id": "room-1\n"}), "attributes.room_id"),
        (envelope(data=json.dumps({"text": "x" * 4097}).encode()), "data.text: must be text of 1 to 4096 characters"),
    ],
)
def test_a_push_that_can_never_be_valid_is_rejected_with_its_reason(body, reason):
    parsed = parse_push(body, NOW)
    assert isinstance(parsed, Rejected)
    assert reason in parsed.reason
    assert parsed.key  # it can be kept under a key


def test_rejected_push_keeps_its_pubsub_id_and_room():
    parsed = parse_push(envelope({**ATTRS, "provider": "x"}, message_id="987"), NOW)
    assert (parsed.key, parsed.room_id, parsed.message_id) == ("pubsub-987", "room-1", "m-1")


def webhook(*statuses) -> dict:
    return {"object": "whatsapp_business_account",
            "entry": [{"id": "1", "changes": [{"field": "messages", "value": {"statuses": list(statuses)}}]}]}


def test_statuses_are_parsed_in_order_with_errors():
    payload = webhook(
        {"id": "wamid.A", "status": "delivered", "timestamp": "1700000000", "recipient_id": "1555",
         "biz_opaque_callback_data": "1.1.5.r"},
        {"id": "wamid.B", "status": "failed", "timestamp": "1700000001",
         "errors": [{"code": 131026, "title": "Message undeliverable"}]},
    )
    a, b = parse_statuses(payload)
    assert (a.provider_message_id, a.status, a.callback_data, a.timestamp_s) == ("wamid.A", "delivered", "1.1.5.r", 1700000000)
    assert (b.status, b.error_code, b.error_title, b.callback_data) == ("failed", 131026, "Message undeliverable", None)


def test_inbound_messages_carry_no_statuses():
    payload = {"entry": [{"changes": [{"value": {"messages": [{"from": "1555", "text": {"body": "hi"}}]}}]}]}
    assert parse_statuses(payload) == []


@pytest.mark.parametrize("payload", [[], {"entry": 1}, {"entry": [{"changes": [{"value": 3}]}]},
                                     {"entry": [{"changes": [{"value": {"statuses": [{"status": "read"}]}}]}]}])
def test_webhooks_of_the_wrong_shape_raise(payload):
    with pytest.raises(ValueError):
        parse_statuses(payload)


def test_signature_is_hmac_sha256_of_the_raw_body():
    body = b'{"a": 1}'
    # Known answer: HMAC-SHA256(key="secret", msg='{"a": 1}'), computed with openssl dgst -sha256 -hmac.
    assert sign(body, "secret") == "sha256=9efa14a18410a57a432fbf0ce38d4bc33339036a64e57b8c86da0bb1e122d972"
    assert signature_valid(body, sign(body, "secret"), "secret")
    assert not signature_valid(body, sign(body, "other"), "secret")
    assert not signature_valid(body + b" ", sign(body, "secret"), "secret")
    assert not signature_valid(body, None, "secret")
    assert not signature_valid(body, sign(body, "secret").replace("sha256=", "sha1="), "secret")


def test_handshake_echoes_the_challenge_only_for_the_right_token():
    args = {"hub.mode": "subscribe", "hub.verify_token": "tok", "hub.challenge": "42"}
    assert handshake_challenge(args, "tok") == "42"
    assert handshake_challenge({**args, "hub.verify_token": "bad"}, "tok") is None
    assert handshake_challenge({**args, "hub.mode": "unsubscribe"}, "tok") is None


def test_an_image_to_prepare_with_a_producer_sequence_is_accepted_with_every_field():
    data = b'{"type": "image", "link": "https://media.test/cat.png", "caption": "a cat"}'
    parsed = parse_push(envelope({**ATTRS, "prepare": "media", "sequence": "42"}, data=data), 1)
    assert isinstance(parsed, Accepted), parsed
    e = parsed.event
    assert (e.media_kind, e.media_link, e.text, e.prepare, e.sequence) == \
        ("image", "https://media.test/cat.png", "a cat", "media", 42)


def test_an_image_without_caption_or_preparation_is_sent_by_link_with_an_empty_caption():
    parsed = parse_push(envelope(data=b'{"type": "image", "link": "https://media.test/cat.png"}'), 1)
    assert isinstance(parsed, Accepted), parsed
    assert (parsed.event.text, parsed.event.prepare, parsed.event.sequence) == ("", None, None)
