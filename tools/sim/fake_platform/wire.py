"""What Meta's send endpoints refuse, as JSON Schemas of the request bodies:
the fake platform answers a body that breaks one the way Meta does (HTTP
400, a Graph error), so a wrong wire format fails a test here instead of in
production.

Written from Meta's pages, independently of baton's own message contract
(shared/contract), which it checks from the other side:
- WhatsApp: https://developers.facebook.com/docs/whatsapp/cloud-api/reference/messages
  (text body 1-4096 characters, media `id` or `link`, caption at most 1024,
  interactive reply buttons 1-3 with titles of at most 20 characters and ids
  of at most 256, lists of at most 10 sections and 10 rows in all, row titles
  24, descriptions 72, a template's `name` and `language.code`); a missing
  required parameter is error 131008, any other invalid one error 100
  (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
- Messenger and Instagram: https://developers.facebook.com/docs/messenger-platform/reference/send-api
  (`message` has `text` or `attachment`, text at most 2000 characters on
  Messenger and 1000 on Instagram, attachment types image, video, audio, file
  by `url` or `attachment_id`, at most 13 quick replies with titles of at
  most 20 characters, `messaging_type` MESSAGE_TAG needs a `tag`); error 100.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft7Validator

_LINK_OR_ID = {"type": "object", "minProperties": 1,
               "properties": {"id": {"type": "string", "minLength": 1},
                              "link": {"type": "string", "pattern": "^https?://"},
                              "caption": {"type": "string", "maxLength": 1024},
                              "filename": {"type": "string"}},
               "oneOf": [{"required": ["id"]}, {"required": ["link"]}]}
_NO_CAPTION = {**_LINK_OR_ID, "properties": {"id": _LINK_OR_ID["properties"]["id"],
                                             "link": _LINK_OR_ID["properties"]["link"]},
               "additionalProperties": False}

_INTERACTIVE = {
    "type": "object", "required": ["type", "body", "action"],
    "properties": {
        "type": {"enum": ["button", "list"]},
        "body": {"type": "object", "required": ["text"], "properties": {"text": {"type": "string", "minLength": 1,
                                                                                  "maxLength": 1024}}},
        "footer": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 60}}},
        "header": {"type": "object", "required": ["type"], "properties": {"text": {"type": "string", "maxLength": 60}}},
        "action": {"type": "object"},
    },
    "allOf": [
        {"if": {"properties": {"type": {"const": "button"}}},
         "then": {"properties": {"action": {"required": ["buttons"], "properties": {"buttons": {
             "type": "array", "minItems": 1, "maxItems": 3,
             "items": {"type": "object", "required": ["type", "reply"], "properties": {
                 "type": {"const": "reply"},
                 "reply": {"type": "object", "required": ["id", "title"],
                           "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 256},
                                          "title": {"type": "string", "minLength": 1, "maxLength": 20}}}}}}}}}}},
        {"if": {"properties": {"type": {"const": "list"}}},
         "then": {"properties": {"action": {"required": ["button", "sections"], "properties": {
             "button": {"type": "string", "minLength": 1, "maxLength": 20},
             "sections": {"type": "array", "minItems": 1, "maxItems": 10, "items": {
                 "type": "object", "required": ["rows"], "properties": {
                     "title": {"type": "string", "maxLength": 24},
                     "rows": {"type": "array", "minItems": 1, "items": {
                         "type": "object", "required": ["id", "title"],
                         "properties": {"id": {"type": "string", "minLength": 1, "maxLength": 200},
                                        "title": {"type": "string", "minLength": 1, "maxLength": 24},
                                        "description": {"type": "string", "maxLength": 72}}}}}}}}}}}},
    ],
}

_TEMPLATE = {
    "type": "object", "required": ["name", "language"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 512},
        "language": {"type": "object", "required": ["code"], "properties": {"code": {"type": "string", "minLength": 2}}},
        "components": {"type": "array", "items": {
            "type": "object", "required": ["type"],
            "properties": {"type": {"enum": ["header", "body", "button"]},
                           "parameters": {"type": "array", "items": {"type": "object", "required": ["type"]}}}}},
    },
}

WHATSAPP_KINDS = ("text", "image", "video", "audio", "document", "sticker", "location", "contacts", "interactive",
                  "reaction", "template")
WHATSAPP_SEND = Draft7Validator({
    "type": "object", "required": ["messaging_product", "to", "type"],
    "properties": {"messaging_product": {"const": "whatsapp"}, "to": {"type": "string", "minLength": 1},
                   "type": {"enum": list(WHATSAPP_KINDS)}},
    "allOf": [{"if": {"properties": {"type": {"const": kind}}}, "then": {"required": [kind], "properties": {kind: obj}}}
              for kind, obj in (
                  ("text", {"type": "object", "required": ["body"],
                            "properties": {"body": {"type": "string", "minLength": 1, "maxLength": 4096}}}),
                  ("image", _LINK_OR_ID), ("video", _LINK_OR_ID), ("document", _LINK_OR_ID),
                  ("audio", _NO_CAPTION), ("sticker", _NO_CAPTION),
                  ("location", {"type": "object", "required": ["latitude", "longitude"],
                                "properties": {"latitude": {"type": "number", "minimum": -90, "maximum": 90},
                                               "longitude": {"type": "number", "minimum": -180, "maximum": 180}}}),
                  ("contacts", {"type": "array", "minItems": 1, "items": {
                      "type": "object", "required": ["name"],
                      "properties": {"name": {"type": "object", "required": ["formatted_name"]}}}}),
                  ("interactive", _INTERACTIVE),
                  ("reaction", {"type": "object", "required": ["message_id", "emoji"],
                                "properties": {"message_id": {"type": "string", "minLength": 1},
                                               "emoji": {"type": "string"}}}),
                  ("template", _TEMPLATE))],
})

_QUICK_REPLIES = {"type": "array", "minItems": 1, "maxItems": 13, "items": {
    "type": "object", "required": ["content_type"],
    "properties": {"content_type": {"enum": ["text", "user_phone_number", "user_email"]},
                   "title": {"type": "string", "maxLength": 20}, "payload": {"type": "string", "maxLength": 1000}},
    "if": {"properties": {"content_type": {"const": "text"}}}, "then": {"required": ["title", "payload"]}}}


def _meta_send(text_limit: int, messenger: bool) -> Draft7Validator:
    message = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "maxLength": text_limit},
            "attachment": {"type": "object", "required": ["type", "payload"], "properties": {
                "type": {"enum": ["image", "video", "audio", "file"]},
                "payload": {"type": "object", "oneOf": [{"required": ["url"]}, {"required": ["attachment_id"]}],
                            "properties": {"url": {"type": "string", "pattern": "^https?://"},
                                           "attachment_id": {"type": "string", "minLength": 1}}}}},
            "quick_replies": _QUICK_REPLIES,
            "metadata": {"type": "string", "maxLength": 1000},
        },
        "oneOf": [{"required": ["text"]}, {"required": ["attachment"]}],
    }
    schema: dict[str, Any] = {"type": "object", "required": ["recipient", "message"],
                              "properties": {"recipient": {"type": "object", "required": ["id"]}, "message": message}}
    if messenger:
        schema["required"].append("messaging_type")
        schema["properties"]["messaging_type"] = {"enum": ["RESPONSE", "UPDATE", "MESSAGE_TAG"]}
        schema["properties"]["tag"] = {"enum": ["ACCOUNT_UPDATE", "CONFIRMED_EVENT_UPDATE", "CUSTOMER_FEEDBACK",
                                                "HUMAN_AGENT", "POST_PURCHASE_UPDATE"]}
        schema["if"] = {"properties": {"messaging_type": {"const": "MESSAGE_TAG"}}}
        schema["then"] = {"required": ["tag"]}
    return Draft7Validator(schema)


MESSENGER_SEND = _meta_send(2000, messenger=True)
INSTAGRAM_SEND = _meta_send(1000, messenger=False)


def refusal(validator: Draft7Validator, body: Any) -> tuple[int, str] | None:
    """(Graph error code, message) for the first thing Meta would refuse in
    `body`, or None: 131008 for a missing required parameter (WhatsApp), 100
    for any other invalid one."""
    error = next(iter(sorted(validator.iter_errors(body), key=lambda e: list(e.absolute_path))), None)
    if error is None:
        return None
    where = ".".join(str(p) for p in error.absolute_path) or "body"
    if validator is WHATSAPP_SEND and error.validator == "required":
        return 131008, f"(#131008) Required parameter is missing: {where}: {error.message[:200]}"
    return 100, f"(#100) Invalid parameter: {where}: {error.message[:200]}"


def list_rows(body: dict[str, Any]) -> int:
    """Rows across a WhatsApp list message's sections (Meta takes at most 10 in all)."""
    sections = ((body.get("interactive") or {}).get("action") or {}).get("sections") or []
    return sum(len(s.get("rows") or []) for s in sections if isinstance(s, dict))
