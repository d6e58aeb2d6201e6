"""The simulation's workload, by seed: rooms, their messages and producers,
and the per-seed settings (webhook mode, sweep, room capacity, sequence gap,
TTL, a scheduled campaign and its cancel). Every kind added after the first
draws from a random stream of its own (`random.Random(f"{kind}-{seed}")`),
so adding one leaves every seed's other draws as they were; and a shrunk
run (`only_rooms`) keeps the same messages for the rooms it keeps.
Units: `*_ms` ms from the run's start (published, deliver_at), as noted.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Message:
    """One producer message of the workload (the ground truth)."""

    room_id: str
    index: int  # its place in its room's publish order
    message_id: str
    published_us: int
    pubsub_id: str
    skipped: bool = False  # an operator skipped it (confirmed by the room)
    deliver_at_ms: int | None = None  # scheduled: its `deliver_at` (ms from the start)
    media: bool = False  # an image, prepared (uploaded) before its turn: `prepare` = media


@dataclass
class RoomPlan:
    room_id: str
    provider: str
    recipient: str
    messages: list[Message] = field(default_factory=list)
    head: int = 0  # the index of Pub/Sub's outstanding push
    pushing: bool = False
    failures: int = 0
    sequenced: bool = False  # the producer numbers its messages (`sequence` attribute: index + 1)
    unordered: bool = False  # ... and publishes them without an ordering key (several publishers)


def workload(seed: int, only_rooms: frozenset[str] | None) -> list[RoomPlan]:
    """The seed's rooms and messages (its own random stream, so a shrunk run,
    with `only_rooms`, keeps the same messages for the rooms it keeps)."""
    rng = random.Random(f"workload-{seed}")
    instagram = random.Random(f"instagram-{seed}")  # its own stream: the seeds' other draws are as before
    plans = []
    for r in range(rng.randint(2, 7)):
        room_id = f"room-{r}"
        provider = "messenger" if rng.random() < 0.35 else "whatsapp"
        if provider == "messenger" and instagram.random() < 0.4:
            provider = "instagram"
        plan = RoomPlan(room_id, provider, f"1555{seed % 100000:05d}{r:03d}")
        t = rng.randint(0, 5000)
        for i in range(rng.randint(1, 6)):
            t += rng.choice((0, 0, 50, 500, 3000, 8000))
            plan.messages.append(Message(room_id, i, f"{room_id}-m{i}", t, f"ps-{r}-{i}"))
        if only_rooms is None or room_id in only_rooms:
            plans.append(plan)
    _campaign(seed, plans)
    media = random.Random(f"media-{seed}")  # its own stream, as each kind added later
    for plan in plans:
        for msg in plan.messages:
            msg.media = plan.provider == "whatsapp" and msg.deliver_at_ms is None and media.random() < 0.2
    # Producer `sequence` from a stream of its own (a seed's other draws are
    # as they were before it was simulated): some rooms' producers number
    # their messages, some of those publish them without an ordering key.
    seq_rng = random.Random(f"sequence-{seed}")
    for plan in plans:
        plan.sequenced = seq_rng.random() < 0.3
        plan.unordered = plan.sequenced and seq_rng.random() < 0.5
    return plans


CAMPAIGN_ID = "promo-1"


def campaign(seed: int) -> tuple[int, int] | None:
    """A seed's campaign (30% of the seeds, a stream of its own): every room
    schedules message `promo-1` for the same moment, `deliver_at` (ms from
    the start), published some seconds before it: (publish_ms, deliver_at_ms)."""
    rng = random.Random(f"campaign-{seed}")
    if rng.random() >= 0.3:
        return None
    due = rng.randint(8000, 50_000)
    return due - rng.randint(500, 7000), due


def _campaign(seed: int, plans: list[RoomPlan]) -> None:
    plan_of = campaign(seed)
    if plan_of is None:
        return
    published, due = plan_of
    for plan in plans:
        last = plan.messages[-1].published_us if plan.messages else 0
        plan.messages.append(Message(plan.room_id, len(plan.messages), CAMPAIGN_ID, max(published, last),
                                     f"ps-{plan.room_id}-promo", deliver_at_ms=due))


def campaign_cancel(seed: int, rooms: list[str]) -> tuple[str, int] | None:
    """An operator's `baton scheduled cancel` of one room's `promo-1` (60% of
    the campaign seeds): (room, at ms from the start), from 6 s before its
    time (it must never be sent) to 3 s after (it may have entered)."""
    plan_of = campaign(seed)
    rng = random.Random(f"campaign-cancel-{seed}")
    if plan_of is None or not rooms or rng.random() >= 0.6:
        return None
    return rng.choice(sorted(rooms)), max(0, plan_of[1] + rng.randint(-6000, 3000))


def room_settings(seed: int) -> dict[str, int]:
    """The seed's MAX_QUEUED_MESSAGES and SEQUENCE_GAP_TIMEOUT_MS, from a
    stream of its own: a third of the seeds have rooms that fill at 2 or 3
    messages (back-pressure: refusals, placeholders, parked copies), some
    give up a producer's sequence gap after 5 s."""
    rng = random.Random(f"capacity-{seed}")
    settings = {"sequence_gap_timeout_ms": rng.choice((5000, 30_000))}
    if rng.random() < 1 / 3:
        settings["max_queued_messages"] = rng.choice((2, 3))
    return settings


def webhook_mode(seed: int) -> str:
    """The seed's WEBHOOK_MODE, from its own random stream (a seed in
    `direct` mode runs as it did before `queued` was simulated)."""
    return "queued" if random.Random(f"mode-{seed}").random() < 0.4 else "direct"


def sweep_settings(seed: int) -> dict[str, int]:
    """The seed's SWEEP_CONCURRENCY and SWEEP_BATCH_SIZE, from its own random
    stream: a third of the seeds sweep one room at a time, the others 2 or
    the deployed default (16) at once, in the default pages or in pages of
    2 rooms (the cursor's paging under concurrency)."""
    rng = random.Random(f"sweep-{seed}")
    if rng.random() < 1 / 3:
        return {"sweep_concurrency": 1}
    return {"sweep_concurrency": rng.choice((2, 16)), "sweep_batch_size": rng.choice((2, 500))}


def ttl_ms(seed: int) -> int | None:
    """The seed's room retention (ms) when Firestore's TTL deletes rooms in
    the run (a quarter of the seeds, from a stream of its own): 15-40 s, so
    rooms are deleted and made again (a new incarnation) while late pushes,
    timers and webhooks of the old one still come. None: an hour (never)."""
    rng = random.Random(f"ttl-{seed}")
    return rng.randint(15_000, 40_000) if rng.random() < 0.25 else None
