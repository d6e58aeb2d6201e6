"""bench-prepare's verdict: the figures it computes from event lines."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tools.bench.prepare import ROOM, figures, message_ids

T0 = 1_800_000_000.0


def ev(event: str, mid: str, at: float, seq: int, **extra: Any) -> dict[str, Any]:
    ts = datetime.fromtimestamp(T0 + at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"event": event, "room_id": ROOM, "message_id": mid, "seq": seq, "ts": ts, "trigger": extra.get("trigger"),
            "publish_to_send_ms": extra.get("publish_to_send_ms")}


def run(order: list[int], acks: dict[int, int]) -> dict[str, Any]:
    ids = message_ids(3)
    events = []
    for k, i in enumerate(order):
        events.append(ev("sent", ids[i], 1.0 + k, i + 1, publish_to_send_ms=100.0 * (k + 1)))
    for i, n in acks.items():
        events += [ev("acked", ids[i], 1.5 + order.index(i), i + 1)] * n
    return figures(events, ids, [T0 + 0.1 * i for i in range(3)])


def test_sends_in_publish_order_each_acked_once_pass():
    f = run([0, 1, 2], {0: 1, 1: 1, 2: 1})
    assert f["in_order"] and f["acked_exactly_once"] and f["lost"] == 0
    assert f["queue_worst_ms"] == 300.0 and f["queue_p50_ms"] == 200.0
    assert abs(f["throughput_per_s"] - 3 / 2.5) < 1e-6  # first send at 1.0 s, last ack at 3.5 s
    assert abs(f["wall_s"] - 3.5) < 1e-6


def test_an_overtaking_send_a_lost_message_and_a_double_ack_are_caught():
    f = run([0, 2, 1], {0: 1, 1: 1, 2: 1})
    assert not f["in_order"]
    f = run([0, 1, 2], {0: 1, 1: 1})
    assert f["lost"] == 1 and not f["acked_exactly_once"]
    f = run([0, 1, 2], {0: 1, 1: 2, 2: 1})
    assert f["lost"] == 0 and not f["acked_exactly_once"]
