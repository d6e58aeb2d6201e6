"""The arithmetic of a room's pair-rate token bucket (per provider).

Pure numbers: the rules that pace a send use them (shared/room/transition.py,
`start`). Must not touch the room's state or any I/O.
"""

from __future__ import annotations

import math


def bucket_now(tokens: float | None, at_us: int, now_us: int, interval_ms: int, burst: int) -> float:
    """Tokens of a pair-rate bucket at `now_us`: `tokens` at `at_us` (None:
    full) plus one per `interval_ms` since, at most `burst`."""
    if tokens is None:
        return float(burst)
    return min(float(burst), tokens + max(0, now_us - at_us) / (interval_ms * 1000))

def token_ready_at_us(tokens: float, now_us: int, interval_ms: int) -> int:
    """The first moment (epoch us) the bucket holds a whole token, given
    `tokens` at `now_us` (now if it already does)."""
    if tokens >= 1.0:
        return now_us
    return now_us + math.ceil((1.0 - tokens) * interval_ms * 1000)
