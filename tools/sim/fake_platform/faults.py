"""Fault injection of the send call: refusals (Graph errors, the pair rate
limit, HTTP 5xx) and faults after the message went out (a dropped
connection, a slow or trickled answer).

Faults of the send call itself, each for chosen recipients (their next
sends) or as a share of all sends (drawn from the seeded rng):
- a Graph error answer (HTTP 400, nothing sent): `send_errors`, and 130429
  (throughput) or 131056 (pair rate limit) at random;
- `http_5xx`: HTTP 500/503 with a Graph error body, nothing sent;
- `drop_after_read`: the whole request is read and the message sent (the
  device receives it, webhooks follow), then the connection is closed with no
  HTTP answer at all: the sender cannot know it went out;
- `slow_send_ms`: the message is sent when the request is read, the answer
  comes only that many ms later (past the sender's timeout, typically);
- `answer_without_id`: sent, but answered 200 with an empty `messages` list;
- `trickle_answer_ms`: sent, and the answer written one byte every that many ms.
`GET /_fake/stats` counts each fault injected, by kind (`faults`).
With `pair_rate_interval_ms` set, the fake enforces a pair rate per
recipient as Meta does (a token bucket of `pair_rate_burst`): a send to a
person whose bucket is empty is answered 131056 and not sent. With
`number_rate_per_s` set, a WhatsApp number's sends past that many in any
one-second window are answered 130429 (throughput) and not sent, counted
by when each request reached the fake (its arrival, as the platform
counts at its edge), not when the fake's loaded threads got to it.

Decides whether a send is refused or its answer spoiled; must not touch
any wire format of a successful send (whatsapp.py, meta_messaging.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tools.sim.fake_platform.core import PlatformCore, _error

# Graph error bodies of the faults (https://developers.facebook.com/docs/whatsapp/cloud-api/support/error-codes).
RANDOM_SEND_ERRORS = {130429: ("throughput_error", "(#130429) Rate limit hit"),
                      131056: ("pair_rate_limit", "(#131056) (Business Account, Consumer Account) pair rate limit hit")}
HTTP_5XX_ERRORS = {500: (1, "An unknown error occurred"), 503: (2, "Service temporarily unavailable")}


def over_rate(sends: list[float], at: float, rate: int) -> bool:
    """Whether one more send at `at` (epoch s) would put more than `rate`
    of `sends` and it in some one-second window [s, s + 1). Arrivals are
    counted in the order of their stamps, not of their handling: a request
    stamped on arrival may reach the check after one that came later (the
    fake's threads), so every window holding `at` is checked, not only the
    second before it."""
    near = sorted(t for t in sends if at - 1.0 < t < at + 1.0)
    starts = [t for t in near if t <= at] + [at]
    return any(sum(1 for t in near if s <= t < s + 1.0) + (s <= at < s + 1.0) > rate for s in starts)


@dataclass(frozen=True)
class TrickledAnswer:
    """An answer the handler writes one byte every `ms_per_byte` ms."""

    body: dict[str, Any]
    ms_per_byte: float


class FaultInjection(PlatformCore):
    """The faults a send call can meet, drawn under the lock."""

    def _chance(self, prob: float) -> bool:
        """A draw from the seeded rng, made only for a non-zero share (so the
        other draws do not shift when no fault is asked for)."""
        return prob > 0 and self.rng.random() < prob

    def _refusal(self, recipient: str, sender: str = "", now: float | None = None,
                 note: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]] | None:
        """A fault answered instead of sending, if any; `sender` is the
        sending number's id (WhatsApp; empty: no throughput limit), its send
        counted at `now` (epoch s: the request's arrival; the clock's now when
        None); a refusal for its rate is kept in `throughput_refusals` with
        `note`. Lock held."""
        cfg = self.config
        if sender and cfg.number_rate_per_s > 0:
            now = time.time() if now is None else now
            kept = [t for t in self.number_sends.get(sender, []) if t > now - 2.0]
            if over_rate(kept, now, cfg.number_rate_per_s):
                self.number_sends[sender] = kept
                kind, message = RANDOM_SEND_ERRORS[130429]
                self.send_errors_returned += 1
                self.faults[kind] += 1
                self.throughput_refusals.append({"sender": sender, "counted": now, **(note or {})})
                return 400, _error(130429, message, "OAuthException")
            self.number_sends[sender] = [*kept, now]
        queued_errors = cfg.send_errors.get(recipient)
        if queued_errors:
            code = queued_errors.pop(0)
            self.send_errors_returned += 1
            self.faults["send_error"] += 1
            return 400, _error(code, f"simulated error {code}", "OAuthException")
        if cfg.pair_rate_interval_ms > 0:
            now = time.time()
            tokens, at = self.pair_buckets.get(recipient, (float(cfg.pair_rate_burst), now))
            tokens = min(float(cfg.pair_rate_burst), tokens + (now - at) * 1000 / cfg.pair_rate_interval_ms)
            if tokens < 1.0:
                self.pair_buckets[recipient] = (tokens, now)
                kind, message = RANDOM_SEND_ERRORS[131056]
                self.send_errors_returned += 1
                self.faults[kind] += 1
                return 400, _error(131056, message, "OAuthException")
            self.pair_buckets[recipient] = (tokens - 1.0, now)
        queued_5xx = cfg.http_5xx.get(recipient)
        if queued_5xx:
            return self._http_5xx(queued_5xx.pop(0))
        for code, prob in ((130429, cfg.throughput_error_prob), (131056, cfg.pair_rate_limit_prob)):
            if self._chance(prob):
                kind, message = RANDOM_SEND_ERRORS[code]
                self.send_errors_returned += 1
                self.faults[kind] += 1
                return 400, _error(code, message, "OAuthException")
        if self._chance(cfg.http_5xx_prob):
            return self._http_5xx(self.rng.choice(sorted(HTTP_5XX_ERRORS)))
        return None

    def _http_5xx(self, status: int) -> tuple[int, dict[str, Any]]:
        self.faults["http_5xx"] += 1
        code, message = HTTP_5XX_ERRORS.get(status, HTTP_5XX_ERRORS[500])
        return status, _error(code, message, "OAuthException")

    def _after_send_faults(self, recipient: str) -> tuple[bool, float]:
        """Whether to drop the answer of a send that goes out, and how many ms
        to hold it back. Lock held."""
        cfg = self.config
        drop = False
        if cfg.drop_after_read.get(recipient, 0) > 0:
            cfg.drop_after_read[recipient] -= 1
            drop = True
        elif self._chance(cfg.drop_after_read_prob):
            drop = True
        slow_ms = 0.0
        queued_slow = cfg.slow_send_ms.get(recipient)
        if queued_slow:
            slow_ms = float(queued_slow.pop(0))
        elif self._chance(cfg.slow_send_prob):
            slow_ms = cfg.slow_send_prob_ms
        self.faults["drop_after_read"] += drop
        self.faults["slow_send"] += slow_ms > 0
        return drop, slow_ms
