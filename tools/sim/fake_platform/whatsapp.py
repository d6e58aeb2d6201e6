"""The WhatsApp Cloud API's wire format: the send call, the media upload and
the signed status webhooks (`sent`, `delivered`, `read`, `failed`).

Media (WhatsApp; shared/providers/whatsapp.py has the shapes and their
sources): `POST /{version}/{phone-number-id}/media`, a multipart form with
`messaging_product=whatsapp`, `type` (a MIME type WhatsApp takes) and `file`
(at most `media_max_bytes`), is answered `{"id": MEDIA-ID}` after
`media_latency_ms`, or with the Graph error Meta gives for a missing field,
a type it does not take or a file too large; the ids are remembered per phone
number id. A send of every message type is checked as Meta checks it (wire.py:
refused with HTTP 400, error 131008 or 100); a media message (`image`,
`video`, `audio`, `document`, `sticker`) names `<type>.id` (one uploaded
with that phone number id, else HTTP 400, code 100, "(#100) Param image.id
is not a valid whatsapp business account media attachment ID") or
`<type>.link`; then it goes like a text (faults, device, webhooks). To a
recipient in `closed_window`, any type but `template` is refused with
131047 (outside the 24-hour customer service window). Faults of uploads:
`upload_http_5xx` (the next N answered HTTP 500, no media made) and
`upload_errors` (Graph error codes of the next uploads, HTTP 400).

Decides each WhatsApp message's fate (`_plan`) and every WhatsApp body;
must not touch Messenger/Instagram (meta_messaging.py) nor draw faults (faults.py).
"""

from __future__ import annotations

import email.parser
import email.policy
import hashlib
import json
import math
import time
from typing import Any

from tools.sim.fake_platform import wire
from tools.sim.fake_platform.core import SendRecord, _error
from tools.sim.fake_platform.faults import FaultInjection, TrickledAnswer
from tools.sim.fake_platform.replies import reply_plan

# The MIME types the media endpoint takes (images, stickers, audio, video,
# documents; https://developers.facebook.com/docs/whatsapp/cloud-api/reference/media,
# "Supported Media Types"; documents abridged).
UPLOAD_TYPES = ("audio/aac", "audio/amr", "audio/mp4", "audio/mpeg", "audio/ogg", "text/plain",
                "application/pdf", "image/jpeg", "image/png", "image/webp", "video/3gpp", "video/mp4")
UNKNOWN_MEDIA_ID = "(#100) Param {kind}.id is not a valid whatsapp business account media attachment ID"
MEDIA_KINDS = ("image", "video", "audio", "document", "sticker")
# Meta's title of 131047 (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
WINDOW_CLOSED_TITLE = "Re-engagement message"
UPLOAD_ERRORS = {130429: "(#130429) Rate limit hit", 80007: "(#80007) Rate limit issues",
                 4: "(#4) Application request limit reached", 131053: "(#131053) Media upload error"}


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]] | None:
    """The fields of a `multipart/form-data` body: name -> (the part's
    Content-Type, its bytes); None when the body is not such a form."""
    if not content_type.lower().startswith("multipart/form-data"):
        return None
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + raw)
    if not message.is_multipart():
        return None
    out: dict[str, tuple[str | None, bytes]] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if isinstance(name, str):
            payload = part.get_payload(decode=True)
            out[name] = (part.get_content_type() if part.get("Content-Type") else None, payload or b"")
    return out


class WhatsAppWire(FaultInjection):
    """The WhatsApp Cloud API: sends, media uploads and status webhooks."""

    # ------------------------------------------------------------ sends

    def handle_whatsapp_send(self, phone_id: str, auth: str | None, body: dict[str, Any],
                             received: float | None = None) -> tuple[int | None, dict[str, Any] | TrickledAnswer]:
        """Answer one WhatsApp send call: `(HTTP status, JSON body)` (a
        `TrickledAnswer` to write it slowly), or `(None, {})` to close the
        connection without any answer. `received`: when the request reached
        the handler (epoch s; now when not given)."""
        received = time.time() if received is None else received
        if auth != f"Bearer {self.access_token}":
            return 401, _error(190, "Invalid OAuth access token.", "OAuthException")
        refused = wire.refusal(wire.WHATSAPP_SEND, body)
        if refused is None and body.get("type") == "interactive" and wire.list_rows(body) > 10:
            refused = (100, "(#100) Invalid parameter: interactive.action.sections: more than 10 rows")
        if refused is not None:
            return 400, _error(refused[0], refused[1], "OAuthException")
        recipient, kind, media_id = body["to"], body["type"], None
        if kind in MEDIA_KINDS:
            refusal, media_id = self._check_media(phone_id, kind, body[kind])
            if refusal is not None:
                return refusal
        if kind != "template" and recipient in self.config.closed_window:
            with self.lock:
                self.faults["window_closed"] += 1
            return 400, _error(131047, WINDOW_CLOSED_TITLE, "OAuthException")
        cfg = self.config
        with self.lock:
            # The throughput limit counts the request's arrival, as the platform's edge does:
            # not when this thread got the lock (up to 156 ms later under load, `make demo-senders`).
            counted = received
            refusal = self._refusal(recipient, sender=phone_id, now=counted, note={
                "received": received, "callback": str(body.get("biz_opaque_callback_data", ""))})
            if refusal is not None:
                return refusal
            drop, slow_ms = self._after_send_faults(recipient)
        if cfg.send_latency_ms:
            time.sleep(cfg.send_latency_ms / 1000)
        now = time.time()
        wamid = "wamid." + hashlib.sha1(f"{now}{next(self.counter)}".encode()).hexdigest()[:24].upper()
        record = SendRecord(recipient, wamid, str(body.get("biz_opaque_callback_data", "")), now,
                            kind=kind, media_id=media_id, sender=phone_id,
                            body=body if cfg.record_bodies else None, received=received, counted=counted)
        with self.lock:
            self.sends.append(record)
            if kind != "text":
                self.media_counts["sends_by_media_id" if media_id else "sends_by_link"] += 1
            plan = self._plan(record)
        for when, action in plan:
            self.at(when, action)
        if slow_ms:
            time.sleep(slow_ms / 1000)
        if drop:
            return None, {}
        answer: dict[str, Any] = {
            "messaging_product": "whatsapp",
            "contacts": [{"input": recipient, "wa_id": recipient.lstrip("+")}],
            "messages": [{"id": wamid}],
        }
        with self.lock:
            if cfg.answer_without_id.get(recipient, 0) > 0:
                cfg.answer_without_id[recipient] -= 1
                self.faults["answer_without_id"] += 1
                answer["messages"] = []
            trickle = cfg.trickle_answer_ms.get(recipient)
            ms_per_byte = float(trickle.pop(0)) if trickle else 0.0
            self.faults["trickle_answer"] += ms_per_byte > 0
        return 200, TrickledAnswer(answer, ms_per_byte) if ms_per_byte else answer

    def _check_media(self, phone_id: str, kind: str,
                     media: dict[str, Any]) -> tuple[tuple[int, dict[str, Any]] | None, str | None]:
        """Check a media object (its shape already checked, wire.py): `(refusal
        or None, the media id it names or None)`. An id must be one uploaded
        with this phone number id."""
        media_id = media.get("id")
        if media_id is None:
            return None, None
        with self.lock:
            known = isinstance(media_id, str) and media_id in self.media.get(phone_id, {})
            self.media_counts["unknown_media_id"] += not known
        if not known:
            return (400, _error(100, UNKNOWN_MEDIA_ID.format(kind=kind), "OAuthException")), None
        return None, media_id

    def handle_upload(self, phone_id: str, auth: str | None, content_type: str,
                      raw: bytes) -> tuple[int, dict[str, Any]]:
        """Answer one media upload (multipart `messaging_product`, `type`,
        `file`): `(HTTP status, JSON body)`, after `media_latency_ms`."""
        cfg = self.config
        if cfg.media_latency_ms:
            time.sleep(cfg.media_latency_ms / 1000)
        if phone_id in self.meta_apps:
            return 400, _error(100, "(#100) Unsupported post request", "GraphMethodException")
        if auth != f"Bearer {self.access_token}":
            return 401, _error(190, "Invalid OAuth access token.", "OAuthException")
        fields_ = _multipart(content_type, raw)
        with self.lock:
            if cfg.upload_http_5xx > 0:
                cfg.upload_http_5xx -= 1
                self.media_counts["upload_http_5xx"] += 1
                return 500, _error(1, "An unknown error occurred", "OAuthException")
            if cfg.upload_errors:
                code = cfg.upload_errors.pop(0)
                self.media_counts["upload_errors"] += 1
                return 400, _error(code, UPLOAD_ERRORS.get(code, f"(#{code}) simulated error {code}"),
                                   "OAuthException")
        refusal = self._upload_refusal(fields_)
        if refusal is not None:
            with self.lock:
                self.media_counts["upload_refused"] += 1
            return 400, refusal
        mime, data = fields_["type"][1].decode(), fields_["file"][1]
        with self.lock:
            media_id = str(1_000_000_000_000_000 + next(self.counter))
            self.media.setdefault(phone_id, {})[media_id] = {
                "type": mime, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            self.media_counts["uploads"] += 1
        return 200, {"id": media_id}

    def _upload_refusal(self, form: dict[str, tuple[str | None, bytes]] | None) -> dict[str, Any] | None:
        """The Graph error of an upload form Meta would refuse, or None."""
        if form is None:
            return _error(100, "(#100) The parameter messaging_product is required.", "OAuthException")
        for name in ("messaging_product", "file", "type"):
            if name not in form:
                return _error(100, f"(#100) The parameter {name} is required.", "OAuthException")
        if form["messaging_product"][1] != b"whatsapp":
            return _error(100, "(#100) Param messaging_product must be one of {WHATSAPP} - got "
                               f"\"{form['messaging_product'][1].decode(errors='replace')}\".", "OAuthException")
        mime = form["type"][1].decode(errors="replace")
        if mime not in UPLOAD_TYPES:
            return _error(100, "(#100) Param file must be a file with one of the following types: "
                               f"{', '.join(UPLOAD_TYPES)}. Received file of type '{mime}'.", "OAuthException")
        if len(form["file"][1]) > self.config.media_max_bytes:
            return _error(100, "(#100) Invalid parameter: File Too Large", "OAuthException")
        if not form["file"][1]:
            return _error(100, "(#100) Invalid parameter: the file is empty", "OAuthException")
        return None

    def _plan(self, rec: SendRecord) -> list[tuple[float, Any]]:
        """Decide this message's fate: when the device receives it and which
        webhooks are posted when. Called with the lock held."""
        cfg, rng = self.config, self.rng
        t0 = rec.at
        fixed = cfg.slow_recipients.get(rec.recipient)
        latency_ms = fixed if fixed is not None else cfg.ack_median_ms * math.exp(cfg.ack_sigma * rng.gauss(0, 1))
        plan: list[tuple[float, Any]] = [(t0 + 0.005, lambda: self.post(rec, "sent"))]
        plan.extend(reply_plan(self, rec))  # the person answers (replies.py, `reply_every`)
        if rng.random() < cfg.fail_prob:
            plan.append((t0 + latency_ms / 1000, lambda: self.post(rec, "failed")))
            return plan
        plan.append((t0 + latency_ms / 1000, lambda: self.receive(rec)))
        if rec.recipient in cfg.silent_recipients or rng.random() >= cfg.ack_prob:
            return plan
        statuses = []
        if rng.random() < cfg.read_without_delivered_prob:
            statuses.append((latency_ms, "read"))
        else:
            statuses.append((latency_ms, "delivered"))
            if rng.random() < cfg.read_prob:
                statuses.append((latency_ms + cfg.read_delay_ms * math.exp(0.5 * rng.gauss(0, 1)), "read"))
        if len(statuses) == 2 and rng.random() < cfg.reorder_prob:
            (t1, s1), (t2, s2) = statuses
            statuses = [(t1, s2), (t2, s1)]
        for delay_ms, status in statuses:
            plan.append((t0 + delay_ms / 1000, lambda s=status: self.post(rec, s)))
            if rng.random() < cfg.duplicate_prob:
                plan.append((t0 + (delay_ms + 50) / 1000, lambda s=status: self.post(rec, s)))
        return plan

    def status_payload(self, rec: SendRecord, status: str) -> dict[str, Any]:
        st: dict[str, Any] = {
            "id": rec.wamid,
            "status": status,
            "timestamp": str(int(time.time())),
            "recipient_id": rec.recipient.lstrip("+"),
            "biz_opaque_callback_data": rec.callback,
        }
        if status == "failed":
            st["errors"] = [{"code": 131026, "title": "Message undeliverable", "message": "Message undeliverable",
                             "error_data": {"details": "Message Undeliverable."}}]
        else:
            st["conversation"] = {"id": "conv-" + rec.recipient, "origin": {"type": "service"}}
            st["pricing"] = {"billable": True, "pricing_model": "PMP", "category": "service"}
        return {
            "object": "whatsapp_business_account",
            "entry": [{"id": "102290129340398", "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550000000",
                             "phone_number_id": rec.sender or "100000000000001"},
                "statuses": [st]}}]}],
        }

    def post(self, rec: SendRecord, status: str, attempt: int = 1) -> None:
        raw = json.dumps(self.status_payload(rec, status)).encode()
        if status in ("delivered", "read"):
            with self.lock:
                self.acked.add(rec.wamid)
        self._post_signed(raw, self.app_secret, lambda: self.post(rec, status, attempt + 1), attempt)
