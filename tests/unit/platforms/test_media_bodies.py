"""Media messages on the wire: the send bodies of an image by media id and by
link (Meta's image-message examples), Messenger/Instagram attachments, and
preparation refused for them without a call."""

from __future__ import annotations

import pytest

from shared.providers import Media, SendOutcome
from shared.providers.meta_messaging import PREPARE_REFUSAL, InstagramClient, MessengerClient
from shared.providers.whatsapp import WhatsAppClient


def test_an_image_by_media_id_carries_the_text_as_its_caption():
    # https://developers.facebook.com/docs/whatsapp/cloud-api/messages/image-messages
    body = WhatsAppClient.request_body("15551234567", "The best succulent ever?", "d-1",
                                       Media("image", media_id="1479537139650973"))
    assert body == {"messaging_product": "whatsapp", "recipient_type": "individual", "to": "15551234567",
                    "type": "image", "image": {"id": "1479537139650973", "caption": "The best succulent ever?"},
                    "biz_opaque_callback_data": "d-1"}


def test_an_image_by_link_without_text_has_no_caption():
    body = WhatsAppClient.request_body("15551234567", "", "d-2", Media("image", link="https://x.test/aloe.png"))
    assert body["type"] == "image" and body["image"] == {"link": "https://x.test/aloe.png"}
    assert "text" not in body


def test_a_media_id_wins_over_a_link_and_a_text_message_is_unchanged():
    body = WhatsAppClient.request_body("1", "c", "d", Media("image", media_id="42", link="https://x.test/a.png"))
    assert body["image"] == {"id": "42", "caption": "c"}
    assert WhatsAppClient.request_body("1", "hi", "d")["text"] == {"preview_url": False, "body": "hi"}


def test_a_media_without_id_or_link_is_refused_for_good_without_a_call():
    # Port 9 (discard) is never called: the body cannot be built.
    client = WhatsAppClient("http://127.0.0.1:9", "v21.0", "1", "t", 500)
    result = client.send("1", "c", "d", Media("image"))
    assert result.outcome is SendOutcome.REFUSED and result.permanent
    with pytest.raises(ValueError):
        WhatsAppClient.request_body("1", "c", "d", Media("image"))


@pytest.mark.parametrize("cls", [MessengerClient, InstagramClient])
def test_messenger_and_instagram_send_media_as_an_attachment_and_prepare_nothing(cls):
    # https://developers.facebook.com/docs/messenger-platform/reference/send-api (attachment by url / id)
    by_link = cls.request_body("7001", "", "d", Media("image", link="https://x.test/a.png"))
    assert by_link["message"]["attachment"] == {"type": "image", "payload": {"url": "https://x.test/a.png"}}
    by_id = cls.request_body("7001", "", "d", Media("file", media_id="1"))
    assert by_id["message"]["attachment"] == {"type": "file", "payload": {"attachment_id": "1"}}
    client = cls("http://127.0.0.1:9", "v21.0", "200000000000002", "t", 500)
    prepared = client.prepare_media("image", "https://x.test/a.png")
    assert not prepared.ok and prepared.permanent and prepared.error == PREPARE_REFUSAL
    with pytest.raises(ValueError):
        cls.request_body("7001", "c", "d", Media("sticker", media_id="1"))


def test_an_unsupported_kind_or_a_non_http_link_fails_for_good_without_a_call():
    client = WhatsAppClient("http://127.0.0.1:9", "v21.0", "1", "t", 500)
    for kind, link in (("location", "https://x.test/a.mp4"), ("image", "file:///etc/passwd"), ("image", "")):
        result = client.prepare_media(kind, link)
        assert not result.ok and result.permanent, (kind, link, result)
