"""The platforms of the simulation: WhatsApp Cloud API and Messenger, as
baton's `Sender` port sees them, and the outside record every check reads.

Each send call is one entry of `Platform.calls` (the platform's record, not
baton's): when it started, when the request reached the platform (what the
platform counts against a number's throughput, in arrival order), the
sender-window slot its invocation had taken, whether the platform took the
message (and when),
what the caller was answered, when the answer came back. A taken message
reaches the user's device later (or never), and the platform posts its
webhooks through `post` (the world schedules them: late, duplicated,
reordered, possibly before the send call returned):

- WhatsApp: `sent`, `delivered`, `read` statuses naming the attempt's wamid
  and our delivery id (`biz_opaque_callback_data`), signed with the app secret.
- Instagram: the echo of our send (`object` = `instagram`), no delivery
  receipt, and `messaging_seen` (`read.mid`: one message) when the user
  reads it; baton acks Instagram on read (ACK_LEVEL_INSTAGRAM).
- Messenger (Meta's "Webhook Events Reference"): the echo of our send
  (`metadata` = our delivery id, `timestamp` = the platform's stamp, ms), and
  receipts by recipient: `delivery.watermark` (every message stamped strictly
  before it was delivered), `read.watermark` (stamped at or before it was
  read), `mids` sometimes absent, and stragglers (the current watermark posted
  again later). Watermarks are the largest the documentation allows, or
  smaller, by the seed: an equal-to-the-stamp delivery watermark of a message
  not yet delivered is legal, and must not ack it.

Faults by seed: stalls before and after the platform reads the request, the
connection dropped after the platform read it (taken, the caller sees
UNKNOWN), 5xx with or without the message taken, 130429 (throughput),
131056 (pair rate), 131047 (outside the 24 h window, permanent).
Units: `*_us` epoch us of the virtual clock, `*_ms` ms.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shared.providers import SendOutcome, SendResult
from shared.providers.whatsapp import sign
from shared.room import parse_delivery_id
from tools.sim.fakes import Crash
from tools.sim.simulation.faults import Faults
from tools.sim.simulation.scheduler import Scheduler

WHATSAPP_SECRET = "local-app-secret"
MESSENGER_SECRET = "local-messenger-secret"
INSTAGRAM_SECRET = "local-instagram-secret"

# What a send call ends as: (taken by the platform, outcome the caller sees, error code, permanent, rate limited)
SEND_FAULTS: dict[str, tuple[bool, SendOutcome, int | None, bool, bool]] = {
    "ok": (True, SendOutcome.ACCEPTED, None, False, False),
    "drop_after_read": (True, SendOutcome.UNKNOWN, None, False, False),
    "5xx_taken": (True, SendOutcome.UNKNOWN, 131000, False, False),
    "5xx_lost": (False, SendOutcome.UNKNOWN, 131000, False, False),
    "no_connection": (False, SendOutcome.REFUSED, None, False, False),
    "130429": (False, SendOutcome.REFUSED, 130429, False, False),
    "131056": (False, SendOutcome.REFUSED, 131056, False, True),
    "131047": (False, SendOutcome.REFUSED, 131047, True, False),
    # Not injected: a media id sent from another number than the one that uploaded it (media.py).
    "131053": (False, SendOutcome.REFUSED, 131053, True, False),
}


@dataclass
class Call:
    """One send call as the platform saw it (times epoch us)."""

    provider: str
    number: str
    recipient: str
    text: str  # the simulation's message id: what the user's device shows
    delivery_id: str
    room_id: str
    incarnation: int
    seq: int
    attempt: int
    decided_us: int
    started_us: int
    fault: str = "ok"
    taken_us: int | None = None
    returned_us: int | None = None  # None: the caller never got the answer (its process died)
    outcome: str = ""
    mid: str | None = None
    stamp_ms: int | None = None  # Messenger: the platform's stamp of the message (ms)
    delivered_us: int | None = None  # when the device got it (None: not yet, or never)
    read_us: int | None = None
    arrived_us: int | None = None  # when the platform read the request (None: it never did)
    slot: tuple[str, int] | None = None  # the sender-window slot the calling invocation took: (number, stamp_us)
    media_id: str | None = None  # a prepared message: the media id it named

    @property
    def taken(self) -> bool:
        return self.taken_us is not None

    @property
    def permanent_refusal(self) -> bool:
        return SEND_FAULTS[self.fault][3]


class Platform:
    """One platform (`whatsapp`, `messenger` or `instagram`) for every number and
    recipient; the `Sender` of each of baton's numbers is `sender(number)`.

    Args:
        provider: `whatsapp` or `messenger`.
        sched: the scheduler (clock, pauses).
        faults: the seed's fault plan.
        post: schedules a webhook post: `post(at_us, raw, signature, label)`.
        budget_ms: the adapter's send budget (SEND_TIMEOUT_MS): a call cut
            off there returns UNKNOWN.
    """

    def __init__(self, provider: str, sched: Scheduler, faults: Faults,
                 post: Callable[[int, bytes, str, str], None], budget_ms: int) -> None:
        self.provider = provider
        self.sched = sched
        self.faults = faults
        self.post = post
        self.budget_ms = budget_ms
        self.calls: list[Call] = []
        self._mids = 0
        self.uploads: dict[str, str] = {}  # media id -> the number that uploaded it (media.py)
        # The slot the calling invocation took last (SimSenderWindow.slot_of), recorded on each call.
        self.slot_of: Callable[[], tuple[str, int] | None] | None = None

    def sender(self, number: str) -> _NumberSender:
        return _NumberSender(self, number)

    def taken(self) -> list[Call]:
        return [c for c in self.calls if c.taken]

    # -- the send call

    def send(self, number: str, recipient: str, text: str, delivery_id: str, media: Any = None) -> SendResult:
        room_id, incarnation, seq, attempt, decided_us = parse_delivery_id(delivery_id)
        call = Call(self.provider, number, recipient, text, delivery_id, room_id, incarnation, seq, attempt,
                    decided_us, self.sched.now_us())
        self.calls.append(call)
        fault = self.faults.send_fault(self.provider)
        if media is not None and media.media_id is not None:
            call.media_id = media.media_id
            if self.uploads.get(media.media_id) != number:
                fault = "131053"  # uploaded with another number (or never): the platform refuses it
        call.fault = fault
        taken, outcome, code, permanent, rate_limited = SEND_FAULTS[fault]
        before_ms, after_ms = self.faults.send_latency_ms()
        cut = before_ms + after_ms > self.budget_ms
        if cut:
            self.faults.count("send cut off at the budget")
            before_ms = min(before_ms, self.budget_ms)
            after_ms = self.budget_ms - before_ms
            outcome, code, permanent, rate_limited = SendOutcome.UNKNOWN, None, False, False
        call.slot = self.slot_of() if self.slot_of is not None else None
        self.sched.pause(before_ms * 1000)
        if self.faults.chance("crash", "crash during a send call, before the platform read it"):
            raise Crash("injected: died during the send call")
        if fault != "no_connection":
            call.arrived_us = self.sched.now_us()  # what the platform counts against the number's throughput
        if taken:
            self._take(call)
        self.sched.pause(after_ms * 1000)
        if self.faults.chance("crash", "crash during a send call, after the platform read it"):
            raise Crash("injected: died before the send call's answer")
        call.returned_us = self.sched.now_us()
        call.outcome = str(outcome)
        if outcome is SendOutcome.ACCEPTED:
            return SendResult(SendOutcome.ACCEPTED, provider_message_id=call.mid)
        if outcome is SendOutcome.UNKNOWN:
            return SendResult(SendOutcome.UNKNOWN, error_code=code, error_title=f"possibly sent: {fault}")
        return SendResult(SendOutcome.REFUSED, permanent=permanent, rate_limited=rate_limited, error_code=code,
                          error_title=f"refused: {fault}")

    def _take(self, call: Call) -> None:
        now = self.sched.now_us()
        self._mids += 1
        call.taken_us = now
        call.mid = f"{ {'whatsapp': 'wamid', 'messenger': 'm'}.get(self.provider, 'ig')}.{self._mids}"
        call.stamp_ms = now // 1000
        delivery_ms = self.faults.delivery_delay_ms()
        if delivery_ms is not None:
            self.sched.at(now + delivery_ms * 1000, lambda: self._deliver(call))
        if self.provider == "whatsapp":
            if not self.faults.chance("no_sent_status", "no `sent` status"):
                self._status(call, "sent", now)
        else:
            self._echo(call, now)

    def _deliver(self, call: Call) -> None:
        now = self.sched.now_us()
        call.delivered_us = now
        if self.provider == "whatsapp":
            self._status(call, "delivered", now)
        elif self.provider == "messenger":
            self._receipt(call.recipient, "delivery", now)
        # Instagram posts no delivery receipt: only `messaging_seen` when read.
        read_ms = self.faults.read_delay_ms()
        if read_ms is not None:
            self.sched.at(now + read_ms * 1000, lambda: self._read(call))

    def _read(self, call: Call) -> None:
        now = self.sched.now_us()
        call.read_us = now
        if self.provider == "whatsapp":
            self._status(call, "read", now)
        elif self.provider == "messenger":
            self._receipt(call.recipient, "read", now)
        else:
            self._seen(call, now)

    # -- webhooks

    def _schedule_post(self, payload: dict[str, Any], secret: str, at_us: int, label: str) -> None:
        raw = json.dumps(payload).encode()
        for delay_ms in self.faults.webhook_delays_ms():
            self.post(at_us + delay_ms * 1000, raw, sign(raw, secret), label)

    def _status(self, call: Call, status: str, at_us: int) -> None:
        item = {"id": call.mid, "status": status, "timestamp": str(at_us // 1_000_000), "recipient_id": call.recipient,
                "biz_opaque_callback_data": call.delivery_id}
        value = {"messaging_product": "whatsapp", "metadata": {"phone_number_id": call.number}, "statuses": [item]}
        payload = {"object": "whatsapp_business_account",
                   "entry": [{"id": "1", "changes": [{"field": "messages", "value": value}]}]}
        self._schedule_post(payload, WHATSAPP_SECRET, at_us, f"whatsapp {status} {call.text}#{call.attempt}")

    def _echo(self, call: Call, at_us: int) -> None:
        item = {"sender": {"id": "200000000000002"}, "recipient": {"id": call.recipient}, "timestamp": call.stamp_ms,
                "message": {"mid": call.mid, "is_echo": True, "metadata": call.delivery_id, "text": call.text}}
        obj, secret = ("page", MESSENGER_SECRET) if self.provider == "messenger" else ("instagram", INSTAGRAM_SECRET)
        self._schedule_post({"object": obj, "entry": [{"id": "p", "time": at_us // 1000, "messaging": [item]}]},
                            secret, at_us, f"{self.provider} echo {call.text}#{call.attempt}")

    def _seen(self, call: Call, at_us: int) -> None:
        """Instagram's `messaging_seen`: one message, by its mid, read
        (https://developers.facebook.com/docs/instagram-platform/webhooks/examples)."""
        item = {"sender": {"id": call.recipient}, "recipient": {"id": "200000000000003"}, "timestamp": at_us // 1000,
                "read": {"mid": call.mid}}
        self._schedule_post({"object": "instagram", "entry": [{"id": "i", "time": at_us // 1000, "messaging": [item]}]},
                            INSTAGRAM_SECRET, at_us, f"instagram seen {call.text}#{call.attempt}")

    def _receipt(self, recipient: str, kind: str, at_us: int) -> None:
        """A Messenger receipt for `recipient` now, and (by seed) stragglers:
        the watermark of the moment, posted again later."""
        self._post_receipt(recipient, kind, at_us)
        for later_ms in self.faults.straggler_delays_ms():
            self.sched.at(at_us + later_ms * 1000, lambda: self._post_receipt(recipient, kind, self.sched.now_us()))

    def _post_receipt(self, recipient: str, kind: str, at_us: int) -> None:
        mine = [c for c in self.calls if c.taken and c.recipient == recipient]
        now_ms = at_us // 1000
        if kind == "delivery":
            # Every message stamped strictly before the watermark is delivered.
            undelivered = [c.stamp_ms for c in mine if c.delivered_us is None or c.delivered_us > at_us]
            legal = min([now_ms, *undelivered])
            done = [c.stamp_ms + 1 for c in mine if c.delivered_us is not None and c.delivered_us <= at_us
                    and c.stamp_ms + 1 <= legal]
        else:
            # Every message stamped at or before the watermark is read.
            unread = [c.stamp_ms - 1 for c in mine if c.read_us is None or c.read_us > at_us]
            legal = min([now_ms, *unread])
            done = [c.stamp_ms for c in mine if c.read_us is not None and c.read_us <= at_us and c.stamp_ms <= legal]
        if not done:
            return
        watermark = self.faults.watermark(legal, max(done))
        if kind == "delivery" and any(c.stamp_ms == watermark and (c.delivered_us is None or c.delivered_us > at_us)
                                      for c in mine):
            self.faults.count("delivery watermark equal to an undelivered message's stamp")
        body: dict[str, Any] = {"watermark": watermark}
        if kind == "delivery" and self.faults.with_mids():
            body["mids"] = [c.mid for c in mine if c.delivered_us is not None and c.delivered_us <= at_us
                            and c.stamp_ms < watermark]
        elif kind == "delivery":
            self.faults.count("delivery receipt without mids")
        item = {"sender": {"id": recipient}, "recipient": {"id": "200000000000002"}, kind: body}
        self._schedule_post({"object": "page", "entry": [{"id": "p", "time": now_ms, "messaging": [item]}]},
                            MESSENGER_SECRET, at_us, f"messenger {kind} {recipient} <= {watermark}")


@dataclass
class _NumberSender:
    """baton's `Sender` port for one number of a platform."""

    platform: Platform
    number: str

    def send(self, recipient: str, text: str, delivery_id: str, media: object = None, **_kind: Any) -> SendResult:
        return self.platform.send(self.number, recipient, text, delivery_id, media)
