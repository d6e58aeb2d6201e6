"""Judging a run: what was published against what the event log and the fake
platform's devices saw. Used by the demo, the end-to-end test and the benchmark.

All latencies are in ms.
"""

from __future__ import annotations

import json
import random
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from shared.events import EVENT_FIELDS, TERMINAL_EVENTS
from shared.room import parse_delivery_id
from tools.local.publisher import OutboundMessage

# Every field of a delivery event line, null: what a line leaves out.
_ABSENT: dict[str, Any] = dict.fromkeys(EVENT_FIELDS)
# Each provider's recipients in a workload: a phone number, a PSID, an IGSID.
RECIPIENT_PREFIX = {"whatsapp": "1555", "messenger": "6", "instagram": "7"}


def make_workload(rooms: int, per_room: int, seed: int = 1, prefix: str = "room",
                  providers: tuple[str, ...] = ("whatsapp",)) -> list[OutboundMessage]:
    """Messages of `rooms` rooms interleaved as the users' queue has them:
    each room writes `per_room` messages with exponential gaps (mean 1 s)
    from a random start, and the queue is the merge of all rooms by time, so
    rooms interleave and a room sometimes bursts. Room r is on
    `providers[r % len(providers)]`."""
    rng = random.Random(seed)
    timed = []
    for r in range(rooms):
        t = rng.uniform(0, max(1.0, rooms / 50))
        provider = providers[r % len(providers)]
        recipient = f"{RECIPIENT_PREFIX[provider]}{r:07d}"
        for k in range(1, per_room + 1):
            t += rng.expovariate(1.0)
            room = f"{prefix}-{r:05d}"
            timed.append((t, OutboundMessage(room, provider, recipient, f"{room}-m{k}", f"message {k} of {room}")))
    timed.sort(key=lambda x: x[0])
    return [m for _, m in timed]


def read_events(path: Path) -> list[dict[str, Any]]:
    """The delivery event lines of a log file (other lines are skipped), one
    per (`room_id`, `event_id`): a room transaction's line may be logged
    twice (the room's outbox, shared/outbox.py)."""
    if not path.exists():
        return []
    out = []
    seen: set[tuple[Any, Any]] = set()
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("log_type") == "baton.delivery":
                if rec.get("event_id") is not None:
                    if (rec.get("room_id"), rec["event_id"]) in seen:
                        continue
                    seen.add((rec.get("room_id"), rec["event_id"]))
                out.append({**_ABSENT, **rec})  # a field left out of the line is null (shared/events.py)
    return out


def sender_waits(events: list[dict[str, Any]]) -> int:
    """Sends held back because their WhatsApp number was at its rate: the
    `paced` events whose reason says so (shared/room/flight.py,
    `send_returned`), not the pair-rate ones."""
    return sum(1 for e in events if e["event"] == "paced" and "at its rate" in (e.get("reason") or ""))


def ended_message_ids(events: list[dict[str, Any]]) -> Counter[str]:
    """How many terminal events each message id has."""
    return Counter(e["message_id"] for e in events if e["event"] in TERMINAL_EVENTS)


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile (0..1) of `values`, None when empty."""
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[max(0, min(998, round(q * 1000) - 1))]


@dataclass
class Summary:
    published: int
    enqueued: int = 0
    sent: int = 0
    acked: int = 0
    timed_out: int = 0
    failed: int = 0
    dead_lettered: int = 0
    rejected: int = 0
    lost: list[str] = field(default_factory=list)
    ended_twice: list[str] = field(default_factory=list)
    send_calls: int = 0
    duplicates_sent: int = 0
    out_of_order_on_device: int = 0
    acked_out_of_order: list[str] = field(default_factory=list)
    publish_to_send_p50_ms: float | None = None
    publish_to_send_p99_ms: float | None = None
    ack_to_next_send_p50_ms: float | None = None
    ack_to_next_send_p99_ms: float | None = None
    per_room_msgs_per_s_median: float | None = None
    wall_s: float = 0.0
    by_provider: dict[str, Counter[str]] = field(default_factory=dict)  # provider -> terminal event -> count

    @property
    def ok(self) -> bool:
        return not self.lost and not self.ended_twice and not self.acked_out_of_order

    def rows(self) -> list[tuple[str, str]]:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:,.1f} ms"

        return [
            ("published", f"{self.published:,}"),
            ("enqueued", f"{self.enqueued:,}"),
            ("sent (messages)", f"{self.sent:,}"),
            ("acked", f"{self.acked:,}"),
            ("timed out", f"{self.timed_out:,}"),
            ("failed (platform)", f"{self.failed:,}"),
            ("dead-lettered", f"{self.dead_lettered:,}"),
            ("rejected pushes", f"{self.rejected:,}"),
            ("lost", f"{len(self.lost):,}"),
            ("duplicates sent", f"{self.duplicates_sent:,} of {self.send_calls:,} send calls"),
            ("out of order on devices", f"{self.out_of_order_on_device:,}"),
            ("acked pairs out of order", f"{len(self.acked_out_of_order):,}"),
            ("publish-to-send p50 / p99", f"{ms(self.publish_to_send_p50_ms)} / {ms(self.publish_to_send_p99_ms)}"),
            ("ack-to-next-send p50 / p99", f"{ms(self.ack_to_next_send_p50_ms)} / {ms(self.ack_to_next_send_p99_ms)}"),
            ("per-room messages/s (median)", "-" if self.per_room_msgs_per_s_median is None
             else f"{self.per_room_msgs_per_s_median:.2f}"),
            ("wall time", f"{self.wall_s:,.1f} s"),
        ] + [(f"{provider}: acked / timed out / failed / other", " / ".join(
            f"{ends[k]:,}" for k in ("acked", "timed_out", "failed"))
            + f" / {sum(ends.values()) - ends['acked'] - ends['timed_out'] - ends['failed']:,}")
            for provider, ends in sorted(self.by_provider.items())]


# Ends that need no send the platform accepted: refused by it, skipped by an
# operator, or given up and kept by baton (a dead letter).
ENDS_WITHOUT_A_SEND = frozenset({"failed", "skipped", "dead_lettered"})


def summarize(published: list[OutboundMessage], events: list[dict[str, Any]], fake_stats: dict[str, Any],
              wall_s: float) -> Summary:
    """Compare a run's outcome with what was published.

    - lost, judged from the platform's record (DESIGN.md invariant 13):
      published (and not rejected) message ids with no terminal event, or
      whose last one is not `failed`, `skipped` or `dead_lettered` while the
      platform accepted no send of them (a `timed_out` or `acked` in baton's
      log proves nothing the platform did not receive);
    - out of order on devices: messages a device received after a later
      message of the same room;
    - acked pairs out of order: two acked messages of a room that the device
      received in the wrong order (must never happen).

    Only the published rooms' send calls and device records count: the fake
    platform's `/_fake/stats` spans every run against one stack, and a test
    after another (a redrive resends the same seq) would see its duplicates.
    """
    s = Summary(published=len(published), wall_s=wall_s)
    rooms = {m.room_id for m in published}
    by_type = Counter(e["event"] for e in events)
    s.enqueued, s.acked, s.timed_out = by_type["enqueued"], by_type["acked"], by_type["timed_out"]
    s.failed, s.dead_lettered, s.rejected = by_type["failed"], by_type["dead_lettered"], by_type["rejected"]
    ended = ended_message_ids(events)
    rejected_ids = {e["message_id"] for e in events if e["event"] == "rejected"}
    s.ended_twice = sorted(mid for mid, n in ended.items() if n > 1)
    for e in events:
        if e["event"] in TERMINAL_EVENTS:
            s.by_provider.setdefault(e.get("provider") or "?", Counter())[e["event"]] += 1
    # Instagram's wire format carries no delivery id: its device records are
    # known by the platform's message id, which the `sent` events name.
    delivery_of = {e["provider_message_id"]: e["delivery_id"] for e in events
                   if e["event"] == "sent" and e.get("provider_message_id") and e.get("delivery_id")}

    def delivery_id(rec: dict[str, Any]) -> str:
        return rec.get("callback") or delivery_of.get(rec.get("wamid", ""), "")

    sent_events = [e for e in events if e["event"] == "sent"]
    s.sent = len({(e["room_id"], e["seq"]) for e in sent_events})
    firsts = [e["publish_to_send_ms"] for e in sent_events if e["attempt"] == 1 and e["trigger"] == "enqueue"]
    s.publish_to_send_p50_ms, s.publish_to_send_p99_ms = percentile(firsts, 0.5), percentile(firsts, 0.99)
    handovers = [e["trigger_to_send_ms"] for e in sent_events if e["trigger"] == "ack"]
    s.ack_to_next_send_p50_ms, s.ack_to_next_send_p99_ms = percentile(handovers, 0.5), percentile(handovers, 0.99)

    # Duplicates: send calls the platform accepted beyond one per message.
    per_message = Counter()
    for rec in fake_stats.get("sends", []):
        try:
            room, _, seq, _, _ = parse_delivery_id(delivery_id(rec))
        except ValueError:
            continue
        if room in rooms:
            s.send_calls += 1
            per_message[(room, seq)] += 1
    s.duplicates_sent = sum(n - 1 for n in per_message.values())
    mid_of = {(e["room_id"], e["seq"]): e["message_id"] for e in events
              if e.get("seq") is not None and e.get("message_id") is not None}
    received = {(room, mid_of[(room, seq)]) for room, seq in per_message if (room, seq) in mid_of}
    last_end = {(e["room_id"], e["message_id"]): e["event"] for e in events if e["event"] in TERMINAL_EVENTS}
    s.lost = sorted(m.message_id for m in published if m.message_id not in rejected_ids and (
        not ended[m.message_id] or (last_end.get((m.room_id, m.message_id)) not in ENDS_WITHOUT_A_SEND
                                    and (m.room_id, m.message_id) not in received)))

    acked = {(e["room_id"], e["seq"]) for e in events if e["event"] == "acked"}
    for received in fake_stats.get("device", {}).values():
        seen_max: dict[str, int] = {}
        last_acked: dict[str, int] = {}
        for item in received:
            try:
                room, _, seq, _, _ = parse_delivery_id(delivery_id(item))
            except ValueError:
                continue
            if room not in rooms:
                continue
            if seq < seen_max.get(room, 0):
                s.out_of_order_on_device += 1
            seen_max[room] = max(seen_max.get(room, 0), seq)
            if (room, seq) in acked:
                if seq < last_acked.get(room, 0):
                    s.acked_out_of_order.append(f"{room}#{seq}")
                last_acked[room] = max(last_acked.get(room, 0), seq)

    # Per-room throughput: messages ended / time from its first send to its last end.
    first_send: dict[str, float] = {}
    last_end: dict[str, float] = {}
    count: dict[str, int] = defaultdict(int)
    for e in events:
        t = epoch_s(e["ts"])
        room = e["room_id"]
        if e["event"] == "sent":
            first_send[room] = min(first_send.get(room, t), t)
        elif e["event"] in TERMINAL_EVENTS:
            last_end[room] = max(last_end.get(room, t), t)
            count[room] += 1
    rates = [count[r] / (last_end[r] - first_send[r]) for r in last_end
             if r in first_send and last_end[r] > first_send[r] and count[r] > 1]
    s.per_room_msgs_per_s_median = statistics.median(rates) if rates else None
    return s


def epoch_s(ts: str) -> float:
    """Epoch seconds of an event's RFC 3339 `ts`."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
