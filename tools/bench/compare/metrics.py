"""Every figure of the comparison, computed from the fake platform's own
record of a run (`GET /_fake/stats` of tools/sim/fake_platform/: `sends`,
`device`, `acked_wamids`), never from what the system under test claims.

Pure: no I/O. Times in the fake's records are epoch seconds; every `*_ms`
figure is in milliseconds, every rate in messages per second.

A message is identified by the delivery id it was sent with
(`biz_opaque_callback_data`, the format of `shared.room.make_delivery_id`,
which every system of the comparison uses): `(room, seq)`. For (a)-(c) `seq`
is the message's publish position `k` in its room; for baton it is the
position in which the message entered its room, mapped back to `k` through
`seq_to_k` (from baton's `enqueued` events; the fake does not record the
message text, so nothing else names the message).

Definitions (per room, in publish order k = 1..n):
- acked: a `delivered` or `read` webhook was posted for one of its sends;
  acked in time: that ack came within the ack timeout of its first send (the
  rule by which an ordered sender moves on: a later ack is, to the sender, a
  message that timed out);
- violation: a message the device received after a later message of its room
  (first receipts only); among acked messages: the same, counting only
  messages acked in time on both sides;
- received while the previous was undelivered: message k >= 2 received
  before message k-1 was (or k-1 never was);
- acked in order: acked in time and not a violation;
- per-room messages/s: (n - 1) / (last first-send - first first-send) over
  the room's distinct messages (the send cadence; rooms with n >= 2);
- hold of message k: what an ordered sender must wait before sending k+1,
  with no overhead at all: its ack latency (device receipt of the acked send
  - its first send) capped at the ack timeout, or the ack timeout when no ack
  came. Physical limit of a room: (n - 1) / sum of holds of k = 1..n-1;
- timeout-to-next-send: for a message not acked in time, its first send plus
  the ack timeout, to the first send of k+1 (the timeout counts from the
  send call's return, so this includes the send call's answer time);
- ack-to-next-send: device receipt (= the ack webhook's scheduled time) of an
  acked message k whose ack came within the timeout, to the first send of
  k+1, when that send came after it: the hand-over as the platform sees it.
"""

from __future__ import annotations

import math
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from shared.room import parse_delivery_id
from tools.bench.compare.workload import Planned
from tools.local.audit import percentile

Key = tuple[str, int]  # (room, k)


@dataclass
class Figures:
    """The figures of one system at one point (see the module docstring)."""

    planned: int = 0
    sent: int = 0  # distinct messages the platform accepted
    send_calls: int = 0
    duplicates_sent: int = 0  # send calls beyond one per message
    received: int = 0  # distinct messages a device received
    acked: int = 0
    acked_in_time: int = 0
    acked_in_order: int = 0
    violations: int = 0
    violations_acked: int = 0
    received_before_previous: int = 0
    unknown_callbacks: int = 0  # platform records that name no planned message
    total_msgs_per_s: float | None = None
    per_room_rates: list[float] = field(default_factory=list)
    per_room_limits: list[float] = field(default_factory=list)
    ack_to_next_send_ms: list[float] = field(default_factory=list)
    timeout_to_next_send_ms: list[float] = field(default_factory=list)

    @property
    def acked_in_order_share(self) -> float | None:
        return self.acked_in_order / self.planned if self.planned else None

    def summary(self) -> dict[str, Any]:
        """The figures as a flat JSON-able dict (lists reduced to quantiles)."""
        rates, limits, gaps = self.per_room_rates, self.per_room_limits, self.ack_to_next_send_ms
        return {
            "planned": self.planned, "sent": self.sent, "send_calls": self.send_calls,
            "duplicates_sent": self.duplicates_sent, "received": self.received, "acked": self.acked,
            "acked_in_time": self.acked_in_time,
            "acked_in_order": self.acked_in_order, "acked_in_order_share": self.acked_in_order_share,
            "violations": self.violations, "violations_acked": self.violations_acked,
            "received_before_previous": self.received_before_previous,
            "unknown_callbacks": self.unknown_callbacks,
            "total_msgs_per_s": self.total_msgs_per_s,
            "rooms_measured": len(rates),
            "per_room_msgs_per_s_p50": percentile(rates, 0.5),
            "per_room_msgs_per_s_p10": percentile(rates, 0.1),
            "per_room_limit_msgs_per_s_p50": percentile(limits, 0.5),
            "per_room_limit_msgs_per_s_p10": percentile(limits, 0.1),
            "ack_to_next_send_samples": len(gaps),
            "ack_to_next_send_p50_ms": percentile(gaps, 0.5),
            "ack_to_next_send_p99_ms": percentile(gaps, 0.99),
            "timeout_to_next_send_samples": len(self.timeout_to_next_send_ms),
            "timeout_to_next_send_p50_ms": percentile(self.timeout_to_next_send_ms, 0.5),
            "timeout_to_next_send_p99_ms": percentile(self.timeout_to_next_send_ms, 0.99),
        }


def _key(callback: str, seq_to_k: dict[Key, int] | None) -> Key | None:
    try:
        room, _, seq, _, _ = parse_delivery_id(callback)
    except ValueError:
        return None
    if seq_to_k is None:
        return room, seq
    k = seq_to_k.get((room, seq))
    return None if k is None else (room, k)


def compute(plan: list[Planned], stats: dict[str, Any], ack_timeout_ms: float, start_epoch_s: float,
            seq_to_k: dict[Key, int] | None = None) -> Figures:
    """All figures of one run.

    Args:
        plan: what was published (tools.bench.compare.workload).
        stats: the fake platform's `GET /_fake/stats` answer after the run.
        ack_timeout_ms: the ordered systems' ack timeout, ms (for the holds).
        start_epoch_s: when the plan's offset 0 was, epoch s (for total msgs/s).
        seq_to_k: baton's (room, seq) -> publish position k; None: seq is k.
    """
    fig = Figures(planned=len(plan))
    planned = {(p.room, p.k) for p in plan}
    timeout_s = ack_timeout_ms / 1000
    acked_wamids = set(stats.get("acked_wamids", []))

    send_at: dict[str, float] = {}  # wamid -> send time
    first_send: dict[Key, float] = {}
    calls: dict[Key, int] = defaultdict(int)
    acked_keys: set[Key] = set()
    for rec in stats.get("sends", []):
        key = _key(rec["callback"], seq_to_k)
        if key is None or key not in planned:
            fig.unknown_callbacks += 1
            continue
        send_at[rec["wamid"]] = rec["at"]
        first_send[key] = min(first_send.get(key, rec["at"]), rec["at"])
        calls[key] += 1
        if rec["wamid"] in acked_wamids:
            acked_keys.add(key)
    fig.sent = len(first_send)
    fig.send_calls = sum(calls.values())
    fig.duplicates_sent = sum(n - 1 for n in calls.values())
    fig.acked = len(acked_keys)

    first_recv: dict[Key, float] = {}
    ack_at: dict[Key, float] = {}  # receipt time of the message's first acked send
    for received in stats.get("device", {}).values():
        for item in received:
            key = _key(item["callback"], seq_to_k)
            if key is None or key not in planned:
                fig.unknown_callbacks += 1
                continue
            first_recv[key] = min(first_recv.get(key, item["at"]), item["at"])
            if item["wamid"] in acked_wamids:
                ack_at[key] = min(ack_at.get(key, item["at"]), item["at"])
    fig.received = len(first_recv)
    in_time = {key for key, at in ack_at.items() if at - first_send[key] <= timeout_s}
    fig.acked_in_time = len(in_time)

    by_room: dict[str, int] = defaultdict(int)
    for room, k in planned:
        by_room[room] = max(by_room[room], k)

    late: set[Key] = set()
    for room, n in by_room.items():
        keys = [(room, k) for k in range(1, n + 1)]
        arrivals = sorted((first_recv[key], key[1]) for key in keys if key in first_recv)
        seen_max = seen_max_acked = 0
        for _, k in arrivals:
            if k < seen_max:
                late.add((room, k))
            seen_max = max(seen_max, k)
            if (room, k) in in_time:
                fig.violations_acked += k < seen_max_acked
                seen_max_acked = max(seen_max_acked, k)
        for k in range(2, n + 1):
            if (room, k) in first_recv and first_recv.get((room, k - 1), math.inf) > first_recv[(room, k)]:
                fig.received_before_previous += 1

        sends = [first_send[key] for key in keys if key in first_send]
        if len(sends) >= 2 and max(sends) > min(sends):
            fig.per_room_rates.append((len(sends) - 1) / (max(sends) - min(sends)))
        if all(key in first_send for key in keys) and n >= 2:
            holds = []
            for key in keys[:-1]:
                latency = ack_at[key] - first_send[key] if key in ack_at else math.inf
                holds.append(min(max(latency, 0.0), timeout_s))
            if sum(holds) > 0:
                fig.per_room_limits.append((n - 1) / sum(holds))
        for key, nxt in zip(keys, keys[1:], strict=False):
            if nxt not in first_send or key not in first_send:
                continue
            if key in ack_at and ack_at[key] - first_send[key] < timeout_s:
                if first_send[nxt] >= ack_at[key]:
                    fig.ack_to_next_send_ms.append((first_send[nxt] - ack_at[key]) * 1000)
            elif first_send[nxt] >= first_send[key] + timeout_s:
                fig.timeout_to_next_send_ms.append((first_send[nxt] - first_send[key] - timeout_s) * 1000)
    fig.violations = len(late)
    fig.acked_in_order = len(in_time - late)
    if first_send:
        span = max(first_send.values()) - start_epoch_s
        fig.total_msgs_per_s = len(first_send) / span if span > 0 else None
    return fig


def lognormal_capped_mean(median_ms: float, sigma: float, cap_ms: float) -> float:
    """E[min(L, cap)] in ms for L log-normal with the given median (ms) and
    shape `sigma` (the fake platform's ack latency, tools/sim/fake_platform/)."""
    if sigma <= 0:
        return min(median_ms, cap_ms)
    mu = math.log(median_ms)
    z = (math.log(cap_ms) - mu) / sigma
    phi = 0.5 * (1 + math.erf((z - sigma) / math.sqrt(2)))
    tail = 1 - 0.5 * (1 + math.erf(z / math.sqrt(2)))
    return math.exp(mu + sigma**2 / 2) * phi + cap_ms * tail


def mean_limit_msgs_per_s(median_ms: float, sigma: float, ack_prob: float, timeout_ms: float) -> float:
    """An ordered sender's long-run messages/s with zero overhead: one over the
    mean hold (an acked message holds min(latency, timeout), an unacked one
    the timeout). Messages/s."""
    hold_ms = ack_prob * lognormal_capped_mean(median_ms, sigma, timeout_ms) + (1 - ack_prob) * timeout_ms
    return 1000 / hold_ms


def simulated_room_limits(median_ms: float, sigma: float, ack_prob: float, timeout_ms: float, burst: int,
                          rooms: int = 20000, seed: int = 3) -> list[float]:
    """Per-room physical limits (messages/s, the module's definition) of
    `rooms` simulated bursts of `burst` messages: the same statistic as the
    measured `per_room_limits`, drawn from the fake platform's latency model
    instead of one run's draws. For the plot's limit line."""
    rng = random.Random(seed)
    out = []
    for _ in range(rooms):
        total = 0.0
        for _ in range(burst - 1):
            if rng.random() < ack_prob:
                total += min(median_ms * math.exp(sigma * rng.gauss(0, 1)), timeout_ms)
            else:
                total += timeout_ms
        out.append((burst - 1) * 1000 / total)
    return out


def median_or_none(values: list[float]) -> float | None:
    """The median, None when empty."""
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None when either is missing or b is 0."""
    return None if a is None or not b else a / b
