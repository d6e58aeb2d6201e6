"""The invariants, judged after a run from the outside: the platforms' record
of every send call (platforms.py), the devices' deliveries, the answers the
callers got, and the stored rooms; baton's own event log only where the
invariant is about the log (nothing ended twice) or names an operator's act.

Each check returns findings `(invariant, room_id or "-", detail)`;
`exercised` counts, per check, the cases it judged (a check that judged
nothing in a whole run of seeds proves nothing, and the summary shows it).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from shared.events import TERMINAL_EVENTS, EventType
from shared.scheduled import ENTER_AT_ONCE_MS
from shared.sender_window import GUARD_US, WINDOW_US
from tools.simulation.platforms import Call
from tools.simulation.world import ACK_TIMEOUT_MS, BROKEN_ROOM, NUMBER_RATE, SEND_TIMEOUT_MS, World

TERMINAL = frozenset(str(e) for e in TERMINAL_EVENTS)
INVARIANTS = ("nothing lost", "nothing ended twice", "no stuck room", "device order", "no early hand-over",
              "never two in flight", "attempt numbers never reused", "sender window bound",
              "platform throughput bound", "pacing bound", "no 500", "media sent by the number that uploaded it", "scheduled: not before its time",
              "scheduled: cancelled before its time, never sent")


@dataclass(frozen=True)
class Finding:
    invariant: str
    room_id: str
    detail: str


def _ms(world: World, us: int | None) -> str:
    return "never" if us is None else f"{(us - world.start_us) / 1000:.1f} ms"


def check(world: World, exercised: Counter[str]) -> list[Finding]:
    """Every invariant over one finished run (see the module)."""
    found: list[Finding] = []
    calls: dict[str, list[Call]] = defaultdict(list)
    for platform in world.platforms.values():
        for c in platform.calls:
            calls[c.room_id].append(c)
    by_room_logged = defaultdict(list)
    for logged in world.events.logged:
        by_room_logged[logged.event.room_id].append(logged)
    for plan in world.rooms:
        room_calls = sorted(calls.get(plan.room_id, []), key=lambda c: c.started_us)
        events = [e.event for e in by_room_logged.get(plan.room_id, [])]
        # Which life of the room (0, then one more after each TTL deletion) logged each event.
        deletions = [t for t, r in world.deleted if r == plan.room_id]
        lives = [sum(t <= e.at_us for t in deletions) for e in by_room_logged.get(plan.room_id, [])]
        found += _lost_and_ends(world, plan, room_calls, events, lives, exercised)
        found += _order_and_flight(world, plan, room_calls, events, exercised)
        found += _stuck(world, plan.room_id, exercised)
    found += _scheduled(world, calls, exercised)
    for c in world.platforms["whatsapp"].calls:
        if c.media_id is None:
            continue
        exercised["media sent by the number that uploaded it"] += 1
        if c.fault == "131053":
            found.append(Finding("media sent by the number that uploaded it", c.room_id,
                                 f"{c.text} attempt {c.attempt} sent {c.media_id} from {c.number}; uploaded by "
                                 f"{world.uploads.get(c.media_id, 'no number (never uploaded)')}"))
    found += _attempts(calls, exercised)
    found += _window(world, exercised)
    found += _arrivals(world, exercised)
    for answer in world.errors_500:
        exercised["no 500"] += 1
        if "injected: a bug of a bad revision" in answer.error:
            continue  # the injected bad revision's own failures: the status function answers 500 to be redelivered
        found.append(Finding("no 500", answer.rooms[0] if answer.rooms else "-",
                             f"{answer.function} ({answer.label}) answered 500 at {_ms(world, answer.ended_us)}: "
                             f"{answer.error}"))
    exercised["no 500"] += len(world.answers)
    return found


def _skipped(events: list, message_id: str) -> bool:
    seqs = {e.seq for e in events if e.message_id == message_id and e.seq is not None}
    return any(str(e.event) == EventType.SKIPPED and e.seq in seqs for e in events)


def _lost_and_ends(world: World, plan, room_calls: list[Call], events: list, lives: list[int],
                   exercised: Counter[str]) -> list[Finding]:
    found = []
    state = world.room_state(plan.room_id)
    # The room's own durable record of how its messages ended (an operator's
    # skip whose process died before logging it is still a skip).
    ended = [*world.ended_before.get(plan.room_id, []), *(state.ended if state else ())]
    outcomes = {e.message_id: e.outcome for e in ended}
    cancelled = {m.message_id for m in plan.messages if _cancelled_first(world, plan.room_id, m.message_id)}
    for msg in plan.messages:
        exercised["nothing lost"] += 1
        mine = [c for c in room_calls if c.text == msg.message_id]
        if msg.message_id in cancelled:
            continue  # an operator cancelled it before its time (judged by `_scheduled`)
        if any(c.taken for c in mine) or any(c.permanent_refusal for c in mine) or _skipped(events, msg.message_id) \
                or outcomes.get(msg.message_id) in ("skipped", "dead_lettered"):
            continue
        seqs = {e.seq for e in events if e.message_id == msg.message_id and e.seq is not None}
        if any(str(e.event) == EventType.DEAD_LETTERED and e.seq in seqs and e.reason for e in events) or any(
                d.room_id == plan.room_id and d.message.message_id == msg.message_id and d.reason
                for d in world.store.dead_letters.values()):
            continue  # dead-lettered by baton, with its reason (invariant 3): its log line or its stored record
        found.append(Finding("nothing lost", plan.room_id,
                             f"{msg.message_id}: the platform never took it ({len(mine)} calls), no operator "
                             f"skipped it, baton did not dead-letter it"))
    # A seq per life of the room: a room deleted by TTL starts again at seq 1.
    seq_events: dict[tuple[int, int], list] = defaultdict(list)
    for e, life in zip(events, lives, strict=True):
        if e.seq is not None:
            seq_events[(life, e.seq)].append(e)
    for (_life, seq), evs in seq_events.items():
        exercised["nothing ended twice"] += 1
        ends = 0
        for e in evs:
            if str(e.event) == EventType.REDRIVEN:
                ends = 0
            elif str(e.event) in TERMINAL:
                ends += 1
                if ends == 2:
                    found.append(Finding("nothing ended twice", plan.room_id,
                                         f"#{seq} ended twice: {[str(x.event) for x in evs if str(x.event) in TERMINAL]}"))
    return found


def _order_and_flight(world: World, plan, room_calls: list[Call], events: list,
                      exercised: Counter[str]) -> list[Finding]:
    found = []
    state = world.room_state(plan.room_id)
    ended = [*world.ended_before.get(plan.room_id, []), *(state.ended if state else ())]
    outcomes = {e.message_id: e.outcome for e in ended}
    index = {m.message_id: m.index for m in plan.messages}
    # What the room committed (a log line may be lost with its process: the known gap).
    decided = [e for room, e in world.committed if room == plan.room_id]
    redriven = {e.message_id for e in decided if str(e.event) == EventType.REDRIVEN}
    redriven_seqs = {e.seq for e in decided if str(e.event) == EventType.REDRIVEN}
    redriven |= {e.message_id for e in decided if e.seq in redriven_seqs and e.message_id}
    # A producer `sequence` that came after its gap was given up goes where
    # it is put (SEQUENCE_GAP_TIMEOUT_MS: the documented relaxation).
    late = {e.message_id for room, e in world.committed if room == plan.room_id
            and str(e.event) == EventType.ENQUEUED and e.reason and "came after its gap was given up" in e.reason}
    exercised["device order: a producer sequence after its gap was given up"] += len(late)
    redriven |= late
    taken = sorted((c for c in room_calls if c.taken), key=lambda c: c.taken_us or 0)
    first_life: dict[str, int] = {}
    for c in taken:
        first_life.setdefault(c.text, c.incarnation)
    highest: Call | None = None
    for c in taken:
        exercised["device order"] += 1
        if c.text in redriven:
            continue  # a released dead letter goes where the operator put it
        if c.incarnation != first_life[c.text]:
            # A push that came again after its room was deleted (TTL, past
            # RETENTION_HOURS): de-duplication is per room document, so it
            # is sent again (the documented at-least-once beyond retention).
            exercised["device order: sent again in a new incarnation after TTL (documented)"] += 1
            continue
        if highest is not None and index[c.text] < index[highest.text]:
            found.append(Finding("device order", plan.room_id,
                                 f"{c.text} attempt {c.attempt} taken at {_ms(world, c.taken_us)}, after "
                                 f"{highest.text} attempt {highest.attempt} (taken at {_ms(world, highest.taken_us)})"))
        if highest is None or index[c.text] > index[highest.text]:
            highest = c
    firsts: dict[str, Call] = {}
    for c in taken:
        firsts.setdefault(c.text, c)
    for text, first in firsts.items():
        earlier = [c for c in room_calls if c.started_us < first.started_us and c.text != text
                   and index[c.text] < index[text]]
        if not earlier or text in redriven:
            continue
        exercised["no early hand-over"] += 1
        prev = earlier[-1]
        if prev.outcome == "refused" or _skipped(events, prev.text) or outcomes.get(prev.text) == "skipped":
            continue
        t = first.taken_us or 0
        delivered = [c.delivered_us for c in room_calls if c.text == prev.text and c.delivered_us is not None]
        returned = prev.returned_us if prev.returned_us is not None else prev.started_us + SEND_TIMEOUT_MS * 1000
        if (delivered and min(delivered) <= t) or t - returned >= ACK_TIMEOUT_MS * 1000:
            continue
        found.append(Finding("no early hand-over", plan.room_id,
                             f"{text} taken at {_ms(world, t)}, while {prev.text} attempt {prev.attempt} (returned "
                             f"{_ms(world, prev.returned_us)}) was not delivered (delivered "
                             f"{_ms(world, min(delivered) if delivered else None)}) and its ack timeout had not passed"))
    for a, b in zip(room_calls, room_calls[1:], strict=False):
        exercised["never two in flight"] += 1
        if a.text == b.text or a.returned_us is None or b.started_us >= a.returned_us:
            continue
        # An ack that comes while the call is under way ends the message (the hand-over on an early ack).
        if not any(c.text == a.text and c.delivered_us is not None and c.delivered_us <= b.started_us
                   for c in room_calls):
            found.append(Finding("never two in flight", plan.room_id,
                                 f"{b.text} #{b.attempt} started at {_ms(world, b.started_us)} while {a.text} "
                                 f"#{a.attempt}'s call was under way (returned {_ms(world, a.returned_us)})"))
    if plan.provider == "whatsapp":
        interval, burst = world.settings.pacing["whatsapp"]
        if interval and len(taken) > 1:
            exercised["pacing bound"] += 1
            span = (taken[-1].taken_us or 0) - (taken[0].taken_us or 0)
            if len(taken) > burst + span // (interval * 1000) + 1:
                found.append(Finding("pacing bound", plan.room_id, f"{len(taken)} sends in {span / 1000:.0f} ms"))
    return found


def _cancelled_first(world: World, room_id: str, message_id: str) -> bool:
    """Whether an operator's cancel of this room's scheduled message landed
    before anything brought it in (no claim, or its first claim found the
    cancel): then it must never be sent (its task deleted, or every copy
    dropped as `cancelled`)."""
    if not any(c.room_id == room_id and c.message_id == message_id for c in world.cancels):
        return False
    claims = sorted((c for c in world.claims if c.room_id == room_id and c.message_id == message_id),
                    key=lambda c: c.at_us)
    return not claims or claims[0].verdict != "not_cancelled"


def _scheduled(world: World, calls: dict[str, list[Call]], exercised: Counter[str]) -> list[Finding]:
    """Scheduled messages (`deliver_at`): none reaches the platform before
    its time (ENTER_AT_ONCE_MS early at most); one whose room's record was
    cancelled before anything brought it in (its first claim found the
    cancel) never reaches it; one that entered its room before the cancel
    is not also ended `skipped` by a later copy (nothing ended twice)."""
    found: list[Finding] = []
    logged = [e.event for e in world.events.logged]
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
                                     f"{msg.message_id} taken at {_ms(world, early[0].taken_us)}, due "
                                     f"{_ms(world, due_us)}"))
            claims = sorted((c for c in world.claims if c.room_id == plan.room_id
                             and c.message_id == msg.message_id), key=lambda c: c.at_us)
            if _cancelled_first(world, plan.room_id, msg.message_id):
                exercised["scheduled: cancelled before its time, never sent"] += 1
                if mine:
                    found.append(Finding("scheduled: cancelled before its time, never sent", plan.room_id,
                                         f"{msg.message_id} cancelled before anything brought it in, yet taken at "
                                         f"{_ms(world, mine[0].taken_us)}"))
            elif claims:
                exercised["nothing ended twice"] += 1
                skips = [e for e in logged if e.room_id == plan.room_id and e.message_id == msg.message_id
                         and e.seq is None and str(e.event) == EventType.SKIPPED]
                if skips and any(c.verdict != "not_cancelled" for c in claims):
                    found.append(Finding("nothing ended twice", plan.room_id,
                                         f"{msg.message_id} entered its room (at {_ms(world, claims[0].at_us)}), "
                                         f"then a later copy ended it `skipped` ({skips[0].reason})"))
    return found


def _stuck(world: World, room_id: str, exercised: Counter[str]) -> list[Finding]:
    exercised["no stuck room"] += 1
    state = world.room_state(room_id)
    if state is None or not state.holds_messages:
        return []
    flight = state.in_flight
    what = f"in flight #{flight.message.seq} attempt {flight.attempt}" if flight else "nothing in flight"
    pending = [(m.seq, m.message_id, "parked" if m.parked else "queued") for m in state.pending]
    return [Finding("no stuck room", room_id,
                    f"still holds messages {DRAIN_NOTE}: {what}, pending {pending}, "
                    f"wake_at {_ms(world, world.store.docs[room_id].get('wake_at_us'))}, "
                    f"blocked {world.store.docs[room_id].get('blocked_reason')!r}")]


DRAIN_NOTE = "after the drain (no faults, operators skipping every parked message, timers, sweeps)"


def _attempts(calls: dict[str, list[Call]], exercised: Counter[str]) -> list[Finding]:
    found = []
    decided: dict[tuple[str, int, int, int], set[int]] = defaultdict(set)
    for room_calls in calls.values():
        for c in room_calls:
            decided[(c.room_id, c.incarnation, c.seq, c.attempt)].add(c.decided_us)
    for (room_id, incarnation, seq, attempt), decisions in decided.items():
        exercised["attempt numbers never reused"] += 1
        if len(decisions) > 1:
            found.append(Finding("attempt numbers never reused", room_id,
                                 f"#{seq} attempt {attempt} (incarnation {incarnation}) sent for {len(decisions)} "
                                 f"different decisions"))
    return found


def _window(world: World, exercised: Counter[str]) -> list[Finding]:
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


def _arrivals(world: World, exercised: Counter[str]) -> list[Finding]:
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
                                     f"{_ms(world, c.arrived_us)} with "
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
                                 + ", ".join(f"{c.text}#{c.attempt} at {_ms(world, c.arrived_us)}" for c in group)))
            break
    return found


KNOWN_GAP = "known gap: an end committed, its log line lost"


def known_gaps(world: World, exercised: Counter[str]) -> list[Finding]:
    """The known gap (docs/architecture.md, "The simulation"): a process
    that dies between a room's commit and its event log lines loses those
    lines, so the log (and the analytics, pipeline/lifecycle.py) lacks the
    end of a message the room durably ended: a correctly delivered message
    is reported lost. Judged from the room's own record (`ended`) against
    the log lines of its current life. Not a failing seed: listed apart
    until the event lines are written with the room (an outbox)."""
    found = []
    for plan in world.rooms:
        state = world.room_state(plan.room_id)
        if state is None:
            continue
        deletions = [t for t, r in world.deleted if r == plan.room_id]
        since = max(deletions, default=0)
        ended_logged = {e.event.seq for e in world.events.logged
                        if e.event.room_id == plan.room_id and e.at_us >= since and str(e.event.event) in TERMINAL}
        for ended in state.ended:
            exercised[KNOWN_GAP] += 1
            if ended.seq not in ended_logged:
                found.append(Finding(KNOWN_GAP, plan.room_id, f"#{ended.seq} {ended.message_id} ended "
                                     f"{ended.outcome} in the room; no end in the log"))
    return found


def trace(world: World, room_id: str) -> list[str]:
    """The room's story, by virtual time: invocations, platform calls and
    deliveries, and baton's events."""
    lines: list[tuple[int, str]] = []
    recipient = next((p.recipient for p in world.rooms if p.room_id == room_id), room_id)
    for a in world.answers:
        if room_id in a.rooms or room_id in a.label or recipient in a.label or a.function == "sweep":
            lines.append((a.started_us, f"{a.function} {a.label}: answered {a.status} at {_ms(world, a.ended_us)}"
                                        f"{' ' + a.error if a.error else ''}"))
    for p in world.platforms.values():
        for c in p.calls:
            if c.room_id != room_id:
                continue
            lines.append((c.started_us, f"platform: {c.text} attempt {c.attempt} call ({c.fault}) from "
                                        f"{c.number}, arrived {_ms(world, c.arrived_us)}; taken "
                                        f"{_ms(world, c.taken_us)}, returned {_ms(world, c.returned_us)} "
                                        f"({c.outcome or 'no answer'})"))
            if c.delivered_us is not None:
                lines.append((c.delivered_us, f"device: {c.text} attempt {c.attempt} delivered"))
    for e in world.events.logged:
        if e.event.room_id == room_id:
            ev = e.event
            lines.append((e.at_us, f"baton: {ev.event} #{ev.seq} attempt {ev.attempt} ({ev.component})"
                                   f"{' ' + ev.reason if ev.reason else ''}"))
    lines.sort(key=lambda x: x[0])
    return [f"{(t - world.start_us) / 1000:>10.1f} ms  {text}" for t, text in lines]


__all__ = ["BROKEN_ROOM", "INVARIANTS", "KNOWN_GAP", "Finding", "check", "known_gaps", "trace"]
