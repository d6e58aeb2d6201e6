"""The last hour of delivery, as the console's overview charts it: messages
ended per outcome (acked, timed out, failed, dead-lettered, skipped), their
acked share, and the head-of-line hand-over latency (`trigger_to_send_ms` of
`sent` events: the request that freed a room to its next send call), in
BUCKET_S buckets, overall and per provider. Read from the delivery event
log (docs/event-log.md), the same source as the room timeline.

`RecentActivity` folds events one at a time into buckets of fixed size: it
keeps counts and a latency histogram per bucket (the log-based metric's own
buckets: 1 ms x 1.5^i, infra/operations.tf), never the events, so an hour
at 1,000 messages/s costs the same few kilobytes as a quiet one. Quantiles
are read from the histogram (the upper edge of the bucket that holds them:
at most 1.5 x the true value).

The local event log feeds it as it indexes new lines
(shared/admin/timeline.py); in the cloud, the last WINDOW_S of terminal and
`sent` lines are read from Cloud Logging up to a cap, and the answer says
`sampled` when the cap was reached.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

WINDOW_S = 3600
BUCKET_S = 300
# The hand-over histogram: upper edges 1 ms x GROWTH^i, i < EDGES (about 10 min), then one overflow bucket.
GROWTH = 1.5
EDGES = 34
OUTCOMES = ("acked", "timed_out", "failed", "dead_lettered", "skipped")
HANDOVER_FIELD = "trigger_to_send_ms"
# The newest endings kept per outcome (the overview's counts link to them).
LATEST = 100


def ts_us(ts: Any) -> int | None:
    """An event's `ts` (RFC 3339 UTC, e.g. 2026-11-22T11:25:17.123456Z) in epoch us, or None if it is not one."""
    if not isinstance(ts, str):
        return None
    try:
        moment = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp() * 1_000_000)


def _edge(i: int) -> float:
    return GROWTH ** i


def histogram_index(ms: float) -> int:
    """The histogram bucket of a latency `ms`: the first i with ms <= 1.5^i (EDGES: past the last edge)."""
    if ms <= 1.0:
        return 0
    return min(EDGES, math.ceil(math.log(ms) / math.log(GROWTH) - 1e-9))


def quantile(hist: list[int], q: float) -> float | None:
    """The `q` quantile (0..1) of a histogram, as the upper edge (ms) of the
    bucket holding it (the overflow bucket: its lower edge); None if empty."""
    total = sum(hist)
    if total == 0:
        return None
    rank = max(1, math.ceil(q * total))
    seen = 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= rank:
            return _edge(min(i, EDGES - 1))
    return _edge(EDGES - 1)


@dataclass
class _Bucket:
    ended: Counter[str] = field(default_factory=Counter)
    by_provider: dict[str, Counter[str]] = field(default_factory=dict)
    handover: list[int] = field(default_factory=lambda: [0] * (EDGES + 1))


@dataclass
class RecentActivity:
    """Ended messages and hand-over latencies folded into `bucket_s` buckets
    (epoch-aligned), keeping those of the last `window_s` before the newest
    event seen (older ones are dropped as newer ones come)."""

    window_s: int = WINDOW_S
    bucket_s: int = BUCKET_S
    _buckets: dict[int, _Bucket] = field(default_factory=dict, repr=False)
    _newest: int = 0
    _latest: dict[str, deque[dict[str, Any]]] = field(default_factory=dict, repr=False)

    def add(self, event: dict[str, Any]) -> None:
        """Fold one delivery event in; anything but a terminal event or a
        `sent` with a hand-over latency, or without a readable `ts`, is ignored."""
        kind = event.get("event")
        handover = event.get(HANDOVER_FIELD) if kind == "sent" else None
        if kind not in OUTCOMES and not isinstance(handover, int | float):
            return
        at = ts_us(event.get("ts"))
        if at is None:
            return
        key = at // (self.bucket_s * 1_000_000)
        if key > self._newest:
            self._newest = key
            keep = self.window_s // self.bucket_s + 1
            for old in [k for k in self._buckets if k <= key - keep]:
                del self._buckets[old]
        elif key <= self._newest - (self.window_s // self.bucket_s + 1):
            return
        bucket = self._buckets.setdefault(key, _Bucket())
        if kind in OUTCOMES:
            bucket.ended[kind] += 1
            provider = event.get("provider")
            provider = provider if isinstance(provider, str) else "?"
            bucket.by_provider.setdefault(provider, Counter())[kind] += 1
            self._latest.setdefault(kind, deque(maxlen=LATEST)).append(
                {"at_us": at, "ts": event.get("ts"), "room_id": event.get("room_id"), "seq": event.get("seq"),
                 "message_id": event.get("message_id"), "provider": provider, "reason": event.get("reason")})
        if isinstance(handover, int | float) and handover >= 0:
            bucket.handover[histogram_index(float(handover))] += 1

    def summary(self, now_us: int) -> dict[str, Any]:
        """The last `window_s` before `now_us` as JSON: `buckets` (oldest
        first, each `start` UTC, the outcomes' counts, `handover_p50_ms`,
        `handover_p95_ms`), `totals` (the same over the window, with
        `acked_share`: acked / ended, None if nothing ended) and `by_provider`
        (outcome counts per provider)."""
        size = self.bucket_s * 1_000_000
        last = now_us // size
        first = last - self.window_s // self.bucket_s + 1
        rows, total, all_hist = [], Counter[str](), [0] * (EDGES + 1)
        by_provider: dict[str, Counter[str]] = {}
        for key in range(first, last + 1):
            b = self._buckets.get(key) or _Bucket()
            total.update(b.ended)
            all_hist = [x + y for x, y in zip(all_hist, b.handover, strict=True)]
            for provider, counts in b.by_provider.items():
                by_provider.setdefault(provider, Counter()).update(counts)
            rows.append({"start": _hhmm(key * self.bucket_s),
                         **{o: b.ended[o] for o in OUTCOMES},
                         "handover_p50_ms": quantile(b.handover, 0.5), "handover_p95_ms": quantile(b.handover, 0.95)})
        ended = sum(total.values())
        return {"window_s": self.window_s, "bucket_s": self.bucket_s, "buckets": rows,
                "totals": {**{o: total[o] for o in OUTCOMES}, "ended": ended,
                           "acked_share": total["acked"] / ended if ended else None,
                           "handover_p50_ms": quantile(all_hist, 0.5), "handover_p95_ms": quantile(all_hist, 0.95),
                           "handovers": sum(all_hist)},
                "by_provider": {p: {o: c[o] for o in OUTCOMES} for p, c in sorted(by_provider.items())}}


    def latest(self, outcome: str, now_us: int, provider: str | None = None) -> list[dict[str, Any]]:
        """The newest endings (at most LATEST kept) with `outcome` in the last
        `window_s` before `now_us`, of `provider` if given, newest first: each
        `ts`, `room_id`, `seq`, `message_id`, `provider`, `reason`."""
        since = now_us - self.window_s * 1_000_000
        rows = [r for r in reversed(self._latest.get(outcome, ())) if r["at_us"] >= since
                and (provider is None or r["provider"] == provider)]
        return [{k: v for k, v in r.items() if k != "at_us"} for r in rows]


def _hhmm(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%H:%M")
