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

from shared.events import TERMINAL_EVENTS, EventType
from tools.sim.simulation.checks_paths import (
    LOGGED_ENDS,
    arrivals,
    cancelled_first,
    logged_ends,
    scheduled,
    sender_window,
)
from tools.sim.simulation.findings import Finding, logged_once
from tools.sim.simulation.findings import ms as _ms
from tools.sim.simulation.platforms import Call
from tools.sim.simulation.world import ACK_TIMEOUT_MS, BROKEN_ROOM, SEND_TIMEOUT_MS, World

TERMINAL = frozenset(str(e) for e in TERMINAL_EVENTS)
INVARIANTS = ("nothing lost", "nothing ended twice", "no stuck room", "device order", "no early hand-over",
              "never two in flight", "attempt numbers never reused", "sender window bound",
              "platform throughput bound", "pacing bound", "no 500", "media sent by the number that uploaded it", "scheduled: not before its time",
              "scheduled: cancelled before its time, never sent", LOGGED_ENDS)


def check(world: World, exercised: Counter[str]) -> list[Finding]:
    """Every invariant over one finished run (see the module)."""
    found: list[Finding] = []
    calls: dict[str, list[Call]] = defaultdict(list)
    for platform in world.platforms.values():
        for c in platform.calls:
            calls[c.room_id].append(c)
    by_room_logged = defaultdict(list)
    for logged in logged_once(world):
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
    found += scheduled(world, calls, exercised)
    for c in world.platforms["whatsapp"].calls:
        if c.media_id is None:
            continue
        exercised["media sent by the number that uploaded it"] += 1
        if c.fault == "131053":
            found.append(Finding("media sent by the number that uploaded it", c.room_id,
                                 f"{c.text} attempt {c.attempt} sent {c.media_id} from {c.number}; uploaded by "
                                 f"{world.uploads.get(c.media_id, 'no number (never uploaded)')}"))
    found += _attempts(calls, exercised)
    found += sender_window(world, exercised)
    found += arrivals(world, exercised)
    found += logged_ends(world, exercised)
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
    cancelled = {m.message_id for m in plan.messages if cancelled_first(world, plan.room_id, m.message_id)}
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
    # What the room committed (whether or not its log line has been written yet).
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
    # The life of the room each message was first sent in, whatever its call's
    # outcome: a message refused (131047) in one life and sent again after TTL
    # deleted the room is the same documented case as one delivered twice.
    first_life: dict[str, int] = {}
    for c in sorted(room_calls, key=lambda c: c.started_us):
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


__all__ = ["BROKEN_ROOM", "INVARIANTS", "Finding", "check", "trace"]
