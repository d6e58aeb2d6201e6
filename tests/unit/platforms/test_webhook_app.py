"""The webhook picks the platform from the payload's `object`, then checks the
signature with that platform's app secret (issue 28, item 6): one Meta app
for WhatsApp and Messenger has one secret, and its Messenger receipts must
not be refused because WhatsApp's secret verified first."""

from __future__ import annotations

import dataclasses
import json

from shared.providers.whatsapp import sign
from tests.unit.service.test_faults import Knobs, World, build_service

SHARED_SECRET = "one-meta-app-secret"


def receipt_body() -> bytes:
    return json.dumps({"object": "page", "entry": [{"id": "PAGE", "time": 1, "messaging": [
        {"sender": {"id": "2400001"}, "recipient": {"id": "PAGE"}, "timestamp": 1,
         "delivery": {"watermark": 1700000000000, "mids": ["mid.1"]}}]}]}).encode()


def service_with(**secrets: str):
    world = World(Knobs())
    world.settings = dataclasses.replace(world.settings, **secrets)
    return world, build_service(world)


def test_one_app_secret_for_whatsapp_and_messenger_lets_messenger_receipts_in():
    world, service = service_with(whatsapp_app_secret=SHARED_SECRET, messenger_app_secret=SHARED_SECRET)
    raw = receipt_body()
    reply = service.handle_status_webhook(raw, sign(raw, SHARED_SECRET))
    assert reply.status == 200 and reply.body["receipts"] == 1, reply


def test_a_messenger_payload_signed_with_another_apps_secret_is_refused_401_and_changes_nothing():
    world, service = service_with(whatsapp_app_secret="whatsapp-secret", messenger_app_secret="messenger-secret")
    raw = receipt_body()
    reply = service.handle_status_webhook(raw, sign(raw, "whatsapp-secret"))
    assert reply.status == 401
    assert world.events.events == []
