"""The checks of the paths simulated later (checks.py has the first ones):
the sender window's stamps and what reached the platform per number, in
arrival order; scheduled messages (never early, never when cancelled first);
and every end the room committed is in the log (the outbox keeps a line a
crash used to lose, shared/outbox.py). Each returns findings `(invariant, room_id or "-", detail)` and
counts in `exercised` the cases it judged.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from shared.events import TERMINAL_EVENTS, EventType
from shared.scheduled import ENTER_AT_ONCE_MS
from shared.sender_window import GUARD_US, WINDOW_US
from tools.sim.simulation.findings import Finding, logged_once, ms
from tools.sim.simulation.platforms import Call
from tools.sim.simulation.world import NUMBER_RATE, World

TERMINAL = frozenset(str(e) for e in TERMINAL_EVENTS)


def cancelled_first(world: World, room_id: str, message_id: str) -> bool:
    """Whether an operator's cancel of this room's scheduled message landed
    before anything brought it in (no claim, or its first claim found the
    cancel): then it must never be sent (its task deleted, or every copy
    dropped as `cancelled`)."""
    if not any(c.room_id == room_id and c.message_id == message_id for c in world.cancels):
        return False
    claims = sorted((c for c in world.claims if c.room_id == room_id and c.message_id == message_id),
                    key=lambda c: c.at_us)
    return not claims or claims[0].verdict != "not_cancelled"


def scheduled(world: World, calls: dict[str, list[Call]], exercised: Counter[str]) -> list[Finding]:
    """Scheduled messages (`deliver_at`): none reaches the platform before
    its time (ENTER_AT_ONCE_MS early at most); one whose room's record was
    cancelled before anything brought it in (its first claim found the
    cancel) never reaches it and ends once, `skipped` (its cancel ends it
    when it deletes its task, which then never comes); one that entered its
    room before the cancel is not also ended `skipped` by a later copy
    (nothing ended twice)."""
    found: list[Finding] = []
    logged = [e.event for e in logged_once(world)]
    for plan in world.rooms:
        for msg in plan.messages:
            if msg.deliver_at_ms is None:
                continue
            mine = [c for c in calls.get(plan.room_id, []) if c.text == msg.message_id and c.taken]
            due_us = world.start_us + msg.deliver_at_ms * 1000
            exercised["scheduled: not before its time"] += 1
            early = [c for c in mine if (c.taken_us or 0) < due_us - ENTER_AT_ONCE_MS * 1000]
            if early:
                found.append(Finding("scheduled: not before its time", plan.room_id,
                                     f"{msg.message_id} taken at {ms(world, early[0].taken_us)}, due "
                                     f"{ms(world, due_us)}"))
            claims = sorted((c for c in world.claims if c.room_id == plan.room_id
                             and c.message_id == msg.message_id), key=lambda c: c.at_us)
            if cancelled_first(world, plan.room_id, msg.message_id):
                exercised["scheduled: cancelled before its time, never sent"] += 1
                if mine:
                    found.append(Finding("scheduled: cancelled before its time, never sent", plan.room_id,
                                         f"{msg.message_id} cancelled before anything brought it in, yet taken at "
                                         f"{ms(world, mine[0].taken_us)}"))
                skips = [e for e in logged if e.room_id == plan.room_id and e.message_id == msg.message_id
                         and str(e.event) == EventType.SKIPPED]
                if len(skips) != 1:
                    found.append(Finding("scheduled: cancelled before its time, never sent", plan.room_id,
                                         f"{msg.message_id} cancelled before anything brought it in, ended "
                                         f"`skipped` {len(skips)} times (once expected)"))
            elif claims:
                exercised["nothing ended twice"] += 1
                skips = [e for e in logged if e.room_id == plan.room_id and e.message_id == msg.message_id
                         and e.seq is None and str(e.event) == EventType.SKIPPED]
                if skips and any(c.verdict != "not_cancelled" for c in claims):
                    found.append(Finding("nothing ended twice", plan.room_id,
                                         f"{msg.message_id} entered its room (at {ms(world, claims[0].at_us)}), "
                                         f"then a later copy ended it `skipped` ({skips[0].reason})"))
    return found


def sender_window(world: World, exercised: Counter[str]) -> list[Finding]:
    """At most NUMBER_RATE slots of a number stamped in any one-second window
    (the slot documents' record)."""
    found = []
    by_number: dict[str, list[int]] = defaultdict(list)
    for number, stamp in world.window.takes:
        by_number[number].append(stamp)
    for number, stamps in by_number.items():
        stamps.sort()
        for i, s in enumerate(stamps):
            exercised["sender window bound"] += 1
            j = i + NUMBER_RATE
            if j < len(stamps) and stamps[j] - s < WINDOW_US:
                found.append(Finding("sender window bound", "-", f"number {number}: {NUMBER_RATE + 1} slots "
                                     f"stamped within {(stamps[j] - s) / 1000:.0f} ms"))
                break
    return found


def arrivals(world: World, exercised: Counter[str]) -> list[Finding]:
    """What the platform counts (WhatsApp's 130429 is "per number, any
    second", on its side): the requests of each number, in the order they
    reached the platform, at most NUMBER_RATE in any one-second window.

    A send call that took no slot, or took it on another number than the
    one it went out from, is a finding wherever it lands. R + 1 arrivals
    within a second, each with its own slot, are a finding only when the
    window's own promise explains none of it: when every one of them
    reached the platform within GUARD_US of the others' delay from their
    slot stamp (shared/sender_window.py: a slot frees GUARD_US after its
    second, "the largest such difference this covers"); a larger spread of
    delays (a send call that stalled before the platform read it) is the
    documented limit, counted apart."""
    found: list[Finding] = []
    by_number: dict[str, list[Call]] = defaultdict(list)
    for c in world.platforms["whatsapp"].calls:
        if c.arrived_us is not None:
            by_number[c.number].append(c)
    for number, arrived in by_number.items():
        arrived.sort(key=lambda c: (c.arrived_us or 0, c.started_us))
        for c in arrived:
            exercised["platform throughput bound"] += 1
            if c.slot is None or c.slot[0] != number:
                found.append(Finding("platform throughput bound", c.room_id,
                                     f"{c.text} attempt {c.attempt} reached the platform from number {number} at "
                                     f"{ms(world, c.arrived_us)} with "
                                     + ("no slot taken" if c.slot is None else f"a slot of number {c.slot[0]}")))
        for i, first in enumerate(arrived):
            j = i + NUMBER_RATE
            if j >= len(arrived) or (arrived[j].arrived_us or 0) - (first.arrived_us or 0) >= WINDOW_US:
                continue
            group = arrived[i:j + 1]
            if any(c.slot is None or c.slot[0] != number for c in group):
                continue  # found above
            delays = [(c.arrived_us or 0) - c.slot[1] for c in group if c.slot is not None]
            if max(delays) - min(delays) > GUARD_US:
                exercised["platform throughput: arrivals closer than the slots, by send delays beyond GUARD_US"] += 1
                continue
            found.append(Finding("platform throughput bound", group[-1].room_id,
                                 f"number {number}: {len(group)} requests reached the platform within "
                                 f"{((arrived[j].arrived_us or 0) - (first.arrived_us or 0)) / 1000:.0f} ms: "
                                 + ", ".join(f"{c.text}#{c.attempt} at {ms(world, c.arrived_us)}" for c in group)))
            break
    return found


LOGGED_ENDS = "every committed end logged"


def logged_ends(world: World, exercised: Counter[str]) -> list[Finding]:
    """Every end a room committed is in the log: a process that dies
    between a room's commit and its event log lines used to lose them, so
    the analytics (pipeline/lifecycle.py) called a delivered message lost
    (255 of 2,000 seeds were excused as a known gap); the outbox
    (shared/outbox.py) keeps them with the room until a later transaction
    logs them. Judged from the room's own record (`ended`) against the log
    lines of its current life, and for each earlier life TTL ended (the
    room's `world.ended_before`, its deletions `world.deleted`), against the
    lines logged during that life: the outbox went with the document, so
    an end not logged before its room's deletion never is (seed 57: a
    sweep that died after ending an idle room's last message)."""
    found = []
    once = logged_once(world)
    for plan in world.rooms:
        deletions = sorted(t for t, r in world.deleted if r == plan.room_id)
        ends = [e for e in once if e.event.room_id == plan.room_id and str(e.event.event) in TERMINAL]
        # The earlier lives: [0, d1), [d1, d2), ...; an end of theirs (seq, message id)
        # counts as logged once per life that logged it.
        lives = list(zip([0, *deletions], deletions, strict=False))
        logged_in: Counter[tuple[int | None, str | None]] = Counter()
        for start, end in lives:
            logged_in.update({(e.event.seq, e.event.message_id) for e in ends if start <= e.at_us < end})
        for ended in world.ended_before.get(plan.room_id, []):
            exercised[LOGGED_ENDS] += 1
            key = (ended.seq, ended.message_id)
            if logged_in[key] > 0:
                logged_in[key] -= 1
                continue
            found.append(Finding(LOGGED_ENDS, plan.room_id, f"#{ended.seq} {ended.message_id} ended "
                                 f"{ended.outcome} in a life TTL ended; no end logged in it"))
        state = world.room_state(plan.room_id)
        if state is None:
            continue
        since = max(deletions, default=0)
        ended_logged = {e.event.seq for e in ends if e.at_us >= since}
        for ended in state.ended:
            exercised[LOGGED_ENDS] += 1
            if ended.seq not in ended_logged:
                found.append(Finding(LOGGED_ENDS, plan.room_id, f"#{ended.seq} {ended.message_id} ended "
                                     f"{ended.outcome} in the room; no end in the log"))
    return found
