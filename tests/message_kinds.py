"""One message of every kind the contract takes, the wire body each must
become (Meta's documented shapes, written out by hand), and a broken copy
of each: shared by the unit tests of the contract and the adapters and by
the integration test that publishes them all through the client.

The wire bodies leave out what the adapter adds per send
(`biz_opaque_callback_data` / `metadata`: the delivery id; `to` /
`recipient`: the message's recipient); `wire_of` adds them.
"""

from __future__ import annotations

from typing import Any

from baton_client import (
    Audio,
    Button,
    Buttons,
    Contacts,
    Document,
    File,
    Image,
    ListMessage,
    Location,
    QuickReply,
    Reaction,
    Row,
    Section,
    Sticker,
    Template,
    Text,
    Video,
)

WA = {"messaging_product": "whatsapp", "recipient_type": "individual"}
LINK = "https://x.test/assets/"

# (name, provider, content, wire body without recipient and delivery id)
KINDS: list[tuple[str, str, Any, dict[str, Any]]] = [
    ("wa-text", "whatsapp", Text("Hello!", preview_url=True),
     {**WA, "type": "text", "text": {"preview_url": True, "body": "Hello!"}}),
    ("wa-image", "whatsapp", Image(link=LINK + "a.png", caption="An aloe"),
     {**WA, "type": "image", "image": {"link": LINK + "a.png", "caption": "An aloe"}}),
    ("wa-video", "whatsapp", Video(link=LINK + "v.mp4", caption="Unboxing"),
     {**WA, "type": "video", "video": {"link": LINK + "v.mp4", "caption": "Unboxing"}}),
    ("wa-audio", "whatsapp", Audio(link=LINK + "a.ogg"), {**WA, "type": "audio", "audio": {"link": LINK + "a.ogg"}}),
    ("wa-document", "whatsapp", Document(link=LINK + "invoice.pdf", caption="Your invoice", filename="invoice.pdf"),
     {**WA, "type": "document", "document": {"link": LINK + "invoice.pdf", "caption": "Your invoice",
                                             "filename": "invoice.pdf"}}),
    ("wa-sticker", "whatsapp", Sticker(link=LINK + "s.webp"),
     {**WA, "type": "sticker", "sticker": {"link": LINK + "s.webp"}}),
    ("wa-location", "whatsapp", Location(52.52, 13.405, name="Store", address="Unter den Linden 1"),
     {**WA, "type": "location", "location": {"latitude": 52.52, "longitude": 13.405, "name": "Store",
                                             "address": "Unter den Linden 1"}}),
    ("wa-contacts", "whatsapp", Contacts([{"name": {"formatted_name": "Ada Lovelace", "first_name": "Ada"},
                                           "phones": [{"phone": "+1 555 0100", "type": "WORK"}]}]),
     {**WA, "type": "contacts", "contacts": [{"name": {"formatted_name": "Ada Lovelace", "first_name": "Ada"},
                                              "phones": [{"phone": "+1 555 0100", "type": "WORK"}]}]}),
    ("wa-buttons", "whatsapp", Buttons("Was this helpful?", [Button("yes", "Yes"), Button("no", "No")],
                                       header="Quick question", footer="Tap one"),
     {**WA, "type": "interactive", "interactive": {
         "type": "button", "body": {"text": "Was this helpful?"},
         "action": {"buttons": [{"type": "reply", "reply": {"id": "yes", "title": "Yes"}},
                                {"type": "reply", "reply": {"id": "no", "title": "No"}}]},
         "header": {"type": "text", "text": "Quick question"}, "footer": {"text": "Tap one"}}}),
    ("wa-list", "whatsapp", ListMessage("Pick a slot", "Slots", [
        Section([Row("mon", "Monday", "9-12"), Row("tue", "Tuesday")], title="This week")]),
     {**WA, "type": "interactive", "interactive": {
         "type": "list", "body": {"text": "Pick a slot"},
         "action": {"button": "Slots", "sections": [{"title": "This week", "rows": [
             {"id": "mon", "title": "Monday", "description": "9-12"}, {"id": "tue", "title": "Tuesday"}]}]}}}),
    ("wa-reaction", "whatsapp", Reaction("wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI", "\N{THUMBS UP SIGN}"),
     {**WA, "type": "reaction", "reaction": {"message_id": "wamid.HBgLMTY1MDM4Nzk0MzkVAgARGBI",
                                             "emoji": "\N{THUMBS UP SIGN}"}}),
    ("wa-template", "whatsapp", Template("order_update", "en_US", body=["Ada", "#42"], header="Shipped",
                                         buttons={0: "stop-promos"}, url_buttons={1: "track/42"}),
     {**WA, "type": "template", "template": {"name": "order_update", "language": {"code": "en_US"}, "components": [
         {"type": "header", "parameters": [{"type": "text", "text": "Shipped"}]},
         {"type": "body", "parameters": [{"type": "text", "text": "Ada"}, {"type": "text", "text": "#42"}]},
         {"type": "button", "sub_type": "quick_reply", "index": 0,
          "parameters": [{"type": "payload", "payload": "stop-promos"}]},
         {"type": "button", "sub_type": "url", "index": 1, "parameters": [{"type": "text", "text": "track/42"}]}]}}),
    ("ms-text", "messenger", Text("Pick a colour", quick_replies=[QuickReply("Red", "RED"), QuickReply("Blue", "BLUE")]),
     {"messaging_type": "RESPONSE", "message": {"text": "Pick a colour", "quick_replies": [
         {"content_type": "text", "title": "Red", "payload": "RED"},
         {"content_type": "text", "title": "Blue", "payload": "BLUE"}]}}),
    ("ms-tagged", "messenger", Text("An agent answers you", tag="HUMAN_AGENT"),
     {"messaging_type": "MESSAGE_TAG", "tag": "HUMAN_AGENT", "message": {"text": "An agent answers you"}}),
    ("ms-image", "messenger", Image(link=LINK + "m.png"),
     {"messaging_type": "RESPONSE", "message": {"attachment": {"type": "image", "payload": {"url": LINK + "m.png"}}}}),
    ("ms-video", "messenger", Video(link=LINK + "m.mp4"),
     {"messaging_type": "RESPONSE", "message": {"attachment": {"type": "video", "payload": {"url": LINK + "m.mp4"}}}}),
    ("ms-audio", "messenger", Audio(link=LINK + "m.mp3"),
     {"messaging_type": "RESPONSE", "message": {"attachment": {"type": "audio", "payload": {"url": LINK + "m.mp3"}}}}),
    ("ms-file", "messenger", File(id="1857777774821032"),
     {"messaging_type": "RESPONSE",
      "message": {"attachment": {"type": "file", "payload": {"attachment_id": "1857777774821032"}}}}),
    ("ig-text", "instagram", Text("Hi from Instagram", quick_replies=[QuickReply("Yes", "Y")]),
     {"message": {"text": "Hi from Instagram", "quick_replies": [{"content_type": "text", "title": "Yes",
                                                                   "payload": "Y"}]}}),
    ("ig-image", "instagram", Image(link=LINK + "i.png"),
     {"message": {"attachment": {"type": "image", "payload": {"url": LINK + "i.png"}}}}),
    ("ig-video", "instagram", Video(link=LINK + "i.mp4"),
     {"message": {"attachment": {"type": "video", "payload": {"url": LINK + "i.mp4"}}}}),
    ("ig-audio", "instagram", Audio(link=LINK + "i.mp3"),
     {"message": {"attachment": {"type": "audio", "payload": {"url": LINK + "i.mp3"}}}}),
    ("ig-file", "instagram", File(link=LINK + "i.pdf"),
     {"message": {"attachment": {"type": "file", "payload": {"url": LINK + "i.pdf"}}}}),
]

# (name, provider, content, a piece of the reason): one broken message of every kind.
BROKEN: list[tuple[str, str, Any, str]] = [
    ("wa-text", "whatsapp", Text("x" * 4097), "data.text: must be text of 1 to 4096"),
    ("wa-image", "whatsapp", Image(link=LINK + "a.png", caption="c" * 1025), "data.caption: longer than 1024"),
    ("wa-video", "whatsapp", Video(link="ftp://x.test/v.mp4"), "data.link: must be an http(s) URL"),
    ("wa-audio", "whatsapp", Audio(link=LINK + "a.ogg", caption="no"), "data: unexpected field caption"),
    ("wa-document", "whatsapp", Document(caption="no file"), "data: needs exactly one of `link`"),
    ("wa-sticker", "whatsapp", Sticker(link=LINK + "s.webp", id="1"), "data: needs exactly one of `link`"),
    ("wa-location", "whatsapp", Location(91.0, 13.4), "data.latitude: must be at most 90"),
    ("wa-contacts", "whatsapp", Contacts([{"name": {"first_name": "Ada"}}]),
     "data.contacts.0.name: 'formatted_name' is a required property"),
    ("wa-buttons", "whatsapp", Buttons("?", [Button(str(i), f"B{i}") for i in range(4)]),
     "data.interactive.action.buttons: must have at most 3 items"),
    ("wa-list", "whatsapp", ListMessage("Pick", "Slots", [Section([Row(str(i), "r") for i in range(6)], "a"),
                                                          Section([Row(f"b{i}", "r") for i in range(6)], "b")]),
     "data.interactive.action.sections: 12 rows; a list has at most 10 in all"),
    ("wa-reaction", "whatsapp", Reaction("", "x"), "data.message_id: must be the WhatsApp message id"),
    ("wa-template", "whatsapp", Template("Order Update", "en_US"), "data.template.name: must be an approved"),
    ("ms-text", "messenger", Text("x" * 2001), "data.text: must be text of 1 to 2000 characters"),
    ("ms-tagged", "messenger", Text("hi", tag="PROMOTION"), "data.tag: is 'PROMOTION'; must be one of"),
    ("ms-image", "messenger", Image(link=LINK + "m.png", caption="no"), "data: unexpected field caption"),
    ("ms-video", "messenger", Video(link=LINK + "m.mp4", quick_replies=[QuickReply("x" * 21, "p")]),
     "data.quick_replies.0.title: longer than 20 characters"),
    ("ms-audio", "messenger", Audio(), "data: needs exactly one of `link`"),
    ("ms-file", "messenger", Sticker(link=LINK + "s.webp"), "data.type: is 'sticker'; must be one of"),
    ("ig-text", "instagram", Text("x" * 1001), "data.text: must be text of 1 to 1000 characters"),
    ("ig-image", "instagram", Image(link=LINK + "i.png", tag="HUMAN_AGENT"), "data: unexpected field tag"),
    ("ig-video", "instagram", Video(link="https://x.test/ a.mp4"), "data.link: must be an http(s) URL"),
    ("ig-audio", "instagram", Audio(id="not an id!"), "data.id: must be a media id the platform gave"),
    ("ig-text-replies", "instagram", Text("hi", quick_replies=[QuickReply("a", "b")] * 14),
     "data.quick_replies: must have at most 13 items"),
    ("ig-file", "instagram", Template("t", "en"), "data.type: is 'template'; must be one of"),
]


def wire_of(provider: str, body: dict[str, Any], recipient: str, delivery_id: str) -> dict[str, Any]:
    """The full wire body of a `KINDS` entry sent to `recipient` with `delivery_id`."""
    if provider == "whatsapp":
        return {**{k: v for k, v in body.items()}, "to": recipient, "biz_opaque_callback_data": delivery_id}
    out = {"recipient": {"id": recipient}, **body}
    if provider == "messenger":
        out["message"] = {**body["message"], "metadata": delivery_id}
    return out
