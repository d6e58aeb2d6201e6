"""The webhook signature check on hostile headers, and the push's room id
against its ordering key."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest

from shared.providers.whatsapp import signature_valid
from shared.push import Accepted, Rejected, parse_push

SECRET = "app-secret"
BODY = b'{"object": "whatsapp_business_account", "entry": []}'
# Computed here, independently of the code under test.
GOOD = "sha256=" + hmac.new(SECRET.encode(), BODY, hashlib.sha256).hexdigest()
NOW = 1_700_000_000_000_000
ATTRS = {"room_id": "room-1", "provider": "whatsapp", "recipient": "15551234567", "message_id": "m-1"}


def test_the_right_signature_is_valid():
    assert signature_valid(BODY, GOOD, SECRET) is True


@pytest.mark.parametrize(
    "header",
    [
        "",
        "sha256=",
        "sha256",
        "sha1=" + GOOD.removeprefix("sha256="),
        "SHA256=" + GOOD.removeprefix("sha256="),
        GOOD.removeprefix("sha256="),  # no prefix at all
        GOOD[:-1],  # one hex digit short
        GOOD + "0",  # one hex digit too many
        GOOD[:-1] + "é",  # right length in characters, non-ASCII
        "sha256=" + "é" * 64,
        "sha256=" + "\udcff" * 64,  # a lone surrogate (undecodable bytes smuggled into a str)
        "sha256=" + "\x00" * 64,
        GOOD.replace("sha256=", "sha256=\u200b"),  # a zero-width space inside
        "sha256=" + "z" * 64,
    ],
)
def test_a_wrong_or_odd_signature_header_is_invalid_without_raising(header):
    assert signature_valid(BODY, header, SECRET) is False


def test_a_missing_signature_header_is_invalid():
    assert signature_valid(BODY, None, SECRET) is False


def test_the_signature_covers_the_raw_body():
    assert signature_valid(BODY + b" ", GOOD, SECRET) is False


def envelope(ordering_key: object = None, attrs: dict = ATTRS) -> bytes:
    message = {"data": base64.b64encode(b'{"type": "text", "text": "hello"}').decode(), "attributes": attrs,
               "messageId": "123", "publishTime": "2026-11-22T10:00:00.123456789Z"}
    if ordering_key is not None:
        message["orderingKey"] = ordering_key
    return json.dumps({"message": message, "subscription": "s"}).encode()


def test_a_push_whose_room_id_disagrees_with_its_ordering_key_is_rejected():
    parsed = parse_push(envelope("room-2"), NOW)
    assert isinstance(parsed, Rejected)
    assert "orderingKey" in parsed.reason and "room-1" in parsed.reason and "room-2" in parsed.reason
    assert (parsed.key, parsed.room_id, parsed.message_id) == ("pubsub-123", "room-1", "m-1")
    assert parsed.record["ordering_key"] == "room-2"


def test_a_push_whose_room_id_matches_its_ordering_key_is_accepted():
    parsed = parse_push(envelope("room-1"), NOW)
    assert isinstance(parsed, Accepted) and parsed.room_id == "room-1"


def test_a_push_without_ordering_key_is_accepted_as_from_the_emulator():
    parsed = parse_push(envelope(), NOW)
    assert isinstance(parsed, Accepted) and parsed.room_id == "room-1"


def test_a_push_without_room_id_attribute_takes_its_room_from_the_ordering_key():
    attrs = {k: v for k, v in ATTRS.items() if k != "room_id"}
    parsed = parse_push(envelope("room-3", attrs), NOW)
    assert isinstance(parsed, Accepted) and parsed.room_id == "room-3"


def test_a_push_whose_ordering_key_is_not_a_string_is_rejected():
    parsed = parse_push(envelope(["room-1"]), NOW)
    assert isinstance(parsed, Rejected) and "orderingKey" in parsed.reason
