"""A finding of a check, and how the checks write a virtual time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tools.sim.simulation.world import World


@dataclass(frozen=True)
class Finding:
    invariant: str
    room_id: str
    detail: str


def logged_once(world: World) -> list[Any]:
    """The run's event log with one line per (room, `event_id`): an event a
    room transaction decided may be logged twice (after its commit, and by
    a later transaction that found it in the outbox, shared/outbox.py);
    readers of the log keep one, as the pipeline does."""
    seen: set[tuple[str | None, str]] = set()
    once = []
    for logged in world.events.logged:
        key = logged.event.event_id
        if key is not None:
            if (logged.event.room_id, key) in seen:
                continue
            seen.add((logged.event.room_id, key))
        once.append(logged)
    return once


def ms(world: World, us: int | None) -> str:
    return "never" if us is None else f"{(us - world.start_us) / 1000:.1f} ms"
