"""How the fake platform behaves (`FakeConfig`) and the check of a change to it.

Decides the knobs and their types; must not touch the platform's state
(core.py applies a checked change under its lock).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from typing import Any


@dataclass
class FakeConfig:
    """How the fake platform behaves. Probabilities (`*_prob`) are shares in
    [0, 1] of all sends; times in ms. Per-recipient faults apply to that
    recipient's next sends, one list item (or one count) per send."""

    ack_prob: float = 0.87  # messages that ever get a delivered/read webhook
    ack_median_ms: float = 80.0  # log-normal delivery latency, median
    ack_sigma: float = 1.0  # log-normal shape: the long tail
    read_prob: float = 0.5  # acked messages that are also read
    read_delay_ms: float = 400.0  # median delay from delivered to read
    read_without_delivered_prob: float = 0.03  # acks that come as `read` only
    fail_prob: float = 0.01  # messages that end with a `failed` webhook
    duplicate_prob: float = 0.05  # webhooks posted twice
    reorder_prob: float = 0.05  # webhooks whose statuses come in swapped order
    send_latency_ms: float = 0.0  # time the send call takes to answer
    silent_recipients: list[str] = field(default_factory=list)  # never ack these
    slow_recipients: dict[str, float] = field(default_factory=dict)  # recipient -> fixed ack latency ms
    send_errors: dict[str, list[int]] = field(default_factory=dict)  # recipient -> error codes for its next sends
    throughput_error_prob: float = 0.0  # sends answered with error 130429 (throughput limit), not sent
    pair_rate_limit_prob: float = 0.0  # sends answered with error 131056 (pair rate limit), not sent
    http_5xx: dict[str, list[int]] = field(default_factory=dict)  # recipient -> HTTP 5xx for its next sends, not sent
    http_5xx_prob: float = 0.0  # sends answered HTTP 500 or 503, not sent
    drop_after_read: dict[str, int] = field(default_factory=dict)  # recipient -> how many next sends to drop
    drop_after_read_prob: float = 0.0  # sends sent, then the connection closed with no answer
    slow_send_ms: dict[str, list[float]] = field(default_factory=dict)  # recipient -> answer delays of its next sends
    slow_send_prob: float = 0.0  # sends whose answer comes `slow_send_prob_ms` after they were sent
    slow_send_prob_ms: float = 5000.0
    answer_without_id: dict[str, int] = field(default_factory=dict)  # recipient -> next sends sent, answered 200 with no id
    trickle_answer_ms: dict[str, list[float]] = field(default_factory=dict)  # recipient -> ms between answer bytes
    pair_rate_interval_ms: float = 0.0  # enforce a pair rate per recipient: one token per this many ms (0: off)
    pair_rate_burst: int = 45  # tokens a recipient's bucket holds; a send with none gets 131056, not sent
    # A WhatsApp business number's throughput, messages/s (80 by default at Meta,
    # https://developers.facebook.com/docs/whatsapp/throughput): a send past it in any
    # one-second window gets 130429 and is not sent. 0: not enforced.
    number_rate_per_s: int = 0
    messenger_mids_prob: float = 0.7  # Messenger delivery receipts that carry `mids` (the watermark always comes)
    watermark_after_ms: float = 1.0  # a watermark lies this far past the latest covered message's stamp
    media_latency_ms: float = 750.0  # time a media upload takes to answer
    media_max_bytes: int = 5 * 1024 * 1024  # largest file the media endpoint takes (WhatsApp's images: 5 MB)
    upload_http_5xx: int = 0  # the next this many uploads are answered HTTP 500, no media made
    upload_errors: list[int] = field(default_factory=list)  # Graph error codes of the next uploads (HTTP 400)
    # Recipients whose 24-hour customer service window is closed: WhatsApp
    # refuses any type but `template` (131047), Messenger any message without
    # MESSAGE_TAG (code 10, subcode 2018278), Instagram any (code 10, 2018278).
    closed_window: list[str] = field(default_factory=list)
    reply_every: int = 0  # every N-th send gets a reply and a reaction from its recipient (replies.py); 0: none
    record_bodies: bool = False  # keep each send call's JSON body in `sends` (tests of the wire formats)
    seed: int = 7


def _conforms(value: Any, hint: Any) -> bool:
    """Whether a JSON value fits a FakeConfig field's type."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list:
        return isinstance(value, list) and all(_conforms(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(isinstance(k, str) and _conforms(v, args[1]) for k, v in value.items())
    if isinstance(value, bool):
        return hint is bool
    if hint is float:
        return isinstance(value, int | float)
    return isinstance(value, hint)
