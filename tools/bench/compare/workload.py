"""The workload every system of the comparison replays: bursts of messages
per room, the bursts' start times spread over a window.

Pure: no I/O. Times are seconds from the start of the run.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Planned:
    """One message of the plan: published `offset_s` s after the run starts,
    the `k`-th (from 1) of its room in publish order."""

    offset_s: float
    room: str
    k: int
    recipient: str
    message_id: str


def make_plan(rooms: int, burst: int, window_s: float, seed: int, prefix: str) -> list[Planned]:
    """`rooms` rooms, each publishing `burst` messages back to back at one
    instant drawn uniformly from [0, `window_s`) s (seeded), sorted by
    offset then room then k. Room ids `{prefix}-{r:05d}`; each room has its
    own recipient (device) `1557{r:07d}`.

    Raises:
        ValueError: rooms or burst below 1, or a negative window.
    """
    if rooms < 1 or burst < 1 or window_s < 0:
        raise ValueError("rooms and burst must be >= 1 and window_s >= 0")
    rng = random.Random(seed)
    plan = []
    for r in range(rooms):
        start = rng.uniform(0, window_s) if window_s else 0.0
        room = f"{prefix}-{r:05d}"
        for k in range(1, burst + 1):
            plan.append(Planned(round(start, 6), room, k, f"1557{r:07d}", f"{room}-m{k}"))
    plan.sort(key=lambda p: (p.offset_s, p.room, p.k))
    return plan


def save_plan(plan: list[Planned], path: Path) -> None:
    """Write the plan as one JSON list (the alternatives' processes read it)."""
    path.write_text(json.dumps([asdict(p) for p in plan]))


def load_plan(path: Path) -> list[Planned]:
    """Read a plan written by `save_plan`."""
    return [Planned(**p) for p in json.loads(path.read_text())]
