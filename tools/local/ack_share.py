"""The share of messages baton acked among those the platform delivered and
reported within the ack timeout, per provider: what a receipt rule can at
best reach (issue 34's measure). Read from the fake platform's record
(`GET /_fake/stats`: each send's stamp, each device's delivery time, the
messages it posted a delivery or read receipt for) and baton's event log.
"""

from __future__ import annotations

from typing import Any


def acked_share(events: list[dict[str, Any]], stats: dict[str, Any], ack_timeout_ms: int) -> dict[str, tuple[int, int]]:
    """provider -> (acked, eligible): `eligible` counts the messages the fake
    delivered within `ack_timeout_ms` (ms) of its stamp and reported; `acked`
    those of them baton ended as `acked`. A message is named by its room and
    seq, from the delivery id the fake recorded."""
    delivered_at: dict[str, float] = {}
    for entries in stats["device"].values():
        for entry in entries:
            delivered_at.setdefault(entry["wamid"], entry["at"])
    reported = set(stats["acked_wamids"])
    acked = {(e["room_id"], e["seq"]) for e in events if e.get("event") == "acked"}
    out: dict[str, list[int]] = {}
    for send in stats["sends"]:
        parts = (send.get("callback") or "").split(".", 4)
        if len(parts) != 5 or send["wamid"] not in reported or send["wamid"] not in delivered_at:
            continue
        if (delivered_at[send["wamid"]] - send["at"]) * 1000 > ack_timeout_ms:
            continue
        counts = out.setdefault(send.get("provider", "whatsapp"), [0, 0])
        key = (parts[4], int(parts[0]))
        counts[1] += 1
        counts[0] += key in acked
    return {p: (c[0], c[1]) for p, c in out.items()}
