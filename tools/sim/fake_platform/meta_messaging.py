"""The Messenger Send API and Instagram messaging: the send call, Messenger's
delivery and read receipts (watermarks), Instagram's `messaging_seen` and echoes.

Messenger and Instagram (`POST /{version}/{PAGE-ID or IG-ID}/messages`, told
apart by the id in the path; shared/providers/meta_messaging.py has the
shapes and their sources): the answer is `{"recipient_id", "message_id"}`;
no asynchronous failure. Messenger posts `message_deliveries` receipts (with
`mids` for a share `messenger_mids_prob`, the watermark always) and
`message_reads` for read messages; each watermark is what Meta documents:
every message to that person stamped before it has been delivered (read).
Instagram posts no delivery receipt: `messaging_seen` naming one message, for
read messages only, and an echo (`is_echo`) of every send. Each app signs
with its own secret.

Decides each Messenger/Instagram message's fate (`_meta_plan`) and every
body of theirs; must not touch WhatsApp (whatsapp.py) nor draw faults (faults.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

from tools.sim.fake_platform import wire
from tools.sim.fake_platform.core import MetaApp, SendRecord, _error
from tools.sim.fake_platform.faults import FaultInjection, TrickledAnswer
from tools.sim.fake_platform.replies import reply_plan

# Messenger's message for code 10, subcode 2018278
# (https://developers.facebook.com/docs/messenger-platform/error-codes).
WINDOW_CLOSED_TITLE = "(#10) This message is sent outside of allowed window."

class MetaMessagingWire(FaultInjection):
    """Messenger and Instagram: sends, receipts, reads and echoes."""

    def handle_meta_send(self, app: MetaApp, auth: str | None,
                         body: dict[str, Any]) -> tuple[int | None, dict[str, Any] | TrickledAnswer]:
        """A Messenger or Instagram send call: `{"recipient": {"id"}, "message": {"text"} or
        {"attachment"}}` (Messenger also `messaging_type`), checked as Meta
        checks it (wire.py), answered `{"recipient_id", "message_id"}`. To a
        recipient in `closed_window`: refused with code 10, subcode 2018278,
        unless a Messenger message has `messaging_type` MESSAGE_TAG."""
        if auth != f"Bearer {app.access_token}":
            return 401, _error(190, "Invalid OAuth access token.", "OAuthException")
        refused = wire.refusal(wire.MESSENGER_SEND if app.provider == "messenger" else wire.INSTAGRAM_SEND, body)
        if refused is not None:
            return 400, _error(refused[0], refused[1], "OAuthException")
        recipient, message = str(body["recipient"]["id"]), body["message"]
        if recipient in self.config.closed_window and body.get("messaging_type") != "MESSAGE_TAG":
            with self.lock:
                self.faults["window_closed"] += 1
            return 400, {"error": {**_error(10, WINDOW_CLOSED_TITLE, "OAuthException")["error"],
                                   "error_subcode": 2018278}}
        with self.lock:
            refusal = self._refusal(recipient)
            if refusal is not None:
                return refusal
            drop, slow_ms = self._after_send_faults(recipient)
        if self.config.send_latency_ms:
            time.sleep(self.config.send_latency_ms / 1000)
        now = time.time()
        mid = ("m_" if app.provider == "messenger" else "aWdf") + \
            hashlib.sha1(f"{now}{next(self.counter)}".encode()).hexdigest()[:24]
        callback = message.get("metadata") if app.provider == "messenger" else ""
        kind = (message.get("attachment") or {}).get("type") or "text"
        record = SendRecord(recipient, mid, str(callback or ""), now, app.provider, kind=kind,
                            body=body if self.config.record_bodies else None)
        with self.lock:
            self.sends.append(record)
            self.conversations.setdefault((app.provider, recipient), []).append([now, False, False])
            plan = self._meta_plan(app, record)
        for when, action in plan:
            self.at(when, action)
        if slow_ms:
            time.sleep(slow_ms / 1000)
        if drop:
            return None, {}
        return 200, {"recipient_id": recipient, "message_id": mid}

    def _meta_plan(self, app: MetaApp, rec: SendRecord) -> list[tuple[float, Any]]:
        """A Messenger or Instagram message's fate. Lock held."""
        cfg, rng = self.config, self.rng
        fixed = cfg.slow_recipients.get(rec.recipient)
        latency_ms = fixed if fixed is not None else cfg.ack_median_ms * math.exp(cfg.ack_sigma * rng.gauss(0, 1))
        t_delivered = rec.at + latency_ms / 1000
        plan: list[tuple[float, Any]] = [(t_delivered, lambda: self.receive(rec))]
        # Meta echoes every message a Page or account sends (Messenger's
        # `message_echoes` carry the send's `metadata`), stamped with the
        # message's own time.
        plan.append((rec.at + 0.005, lambda: self.post_meta(app, rec, "echo")))
        plan.extend(reply_plan(self, rec, app))  # the person answers (replies.py, `reply_every`)
        if rec.recipient in cfg.silent_recipients or rng.random() >= cfg.ack_prob:
            return plan
        read = rng.random() < cfg.read_prob
        t_read = t_delivered + cfg.read_delay_ms * math.exp(0.5 * rng.gauss(0, 1)) / 1000
        if app.provider == "messenger":
            with_mids = rng.random() < cfg.messenger_mids_prob
            plan.append((t_delivered, lambda: self.post_meta(app, rec, "delivery", with_mids)))
            if read:
                plan.append((t_read, lambda: self.post_meta(app, rec, "read")))
            if rng.random() < cfg.duplicate_prob:
                plan.append((t_delivered + 0.05, lambda: self.post_meta(app, rec, "delivery", with_mids)))
        elif read:
            plan.append((t_read, lambda: self.post_meta(app, rec, "seen")))
        return plan

    def _mark(self, rec: SendRecord, index: int) -> None:
        """Mark `rec` delivered (index 1) or read (2, which implies delivered). Lock held."""
        for m in self.conversations.get((rec.provider, rec.recipient), []):
            if m[0] == rec.at:
                m[index] = True
                m[1] = True

    def _watermark_ms(self, rec: SendRecord, index: int) -> int:
        """The watermark of a delivery (index 1) or read (2) receipt to `rec`'s
        person, as Meta documents it: every message to them stamped before it
        is delivered (read). It lies just after the stamp of the latest such
        message (`watermark_after_ms`, as in Meta's example payload: a mid
        stamped at ...218 ms, the watermark at ...253 ms), and never past
        the stamp of one that is not. Lock held."""
        conversation = self.conversations.get((rec.provider, rec.recipient), [])
        pending = [m[0] for m in conversation if not m[index]]
        done = [m[0] for m in conversation if m[index]]
        after = self.config.watermark_after_ms / 1000
        mark = (max(done) + after) if done else time.time()
        if pending:
            mark = min(mark, min(pending))
        return int(mark * 1000)

    def post_meta(self, app: MetaApp, rec: SendRecord, kind: str, with_mids: bool = True, attempt: int = 1) -> None:
        """Post one Messenger/Instagram webhook about `rec`, signed with the app's secret."""
        page = {"id": app.account_id}
        person = {"id": rec.recipient}
        now_ms = int(time.time() * 1000)
        with self.lock:
            if kind == "delivery":
                item = {"sender": person, "recipient": page, "timestamp": now_ms,
                        "delivery": {"watermark": self._watermark_ms(rec, 1)}}
                if with_mids:
                    item["delivery"]["mids"] = [rec.wamid]
            elif kind == "read":
                self._mark(rec, 2)
                item = {"sender": person, "recipient": page, "timestamp": now_ms,
                        "read": {"watermark": self._watermark_ms(rec, 2)}}
            elif kind == "seen":
                self._mark(rec, 2)
                item = {"sender": person, "recipient": page, "timestamp": now_ms, "read": {"mid": rec.wamid}}
            else:  # echo of our own send, stamped with the message's time
                message = {"mid": rec.wamid, "is_echo": True, "text": "(echo)"}
                if rec.callback:
                    message["metadata"] = rec.callback
                item = {"sender": page, "recipient": person, "timestamp": int(rec.at * 1000), "message": message}
            if kind in ("delivery", "read", "seen"):
                self.acked.add(rec.wamid)
        payload = {"object": "page" if app.provider == "messenger" else "instagram",
                   "entry": [{"id": app.account_id, "time": now_ms, "messaging": [item]}]}
        self._post_signed(json.dumps(payload).encode(), app.app_secret.encode(),
                          lambda: self.post_meta(app, rec, kind, with_mids, attempt + 1), attempt)
