"""A finding of a check, and how the checks write a virtual time."""

from __future__ import annotations

from dataclasses import dataclass

from tools.sim.simulation.world import World


@dataclass(frozen=True)
class Finding:
    invariant: str
    room_id: str
    detail: str


def ms(world: World, us: int | None) -> str:
    return "never" if us is None else f"{(us - world.start_us) / 1000:.1f} ms"
