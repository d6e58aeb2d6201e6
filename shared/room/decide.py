"""The rulebook's entry point: `decide(state, event, policy, component)`.

Finds the event's row of `RULES` by (room phase, event kind), applies its
function, and checks the room ends in a phase the row allows; must not
hold rules itself.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from shared.room.context import Transition
from shared.room.effects import Decision
from shared.room.inputs import RoomEvent
from shared.room.rulebook import RULE_INDEX, RULES, RoomPhase, Rule, event_kind, room_phase
from shared.room.state import Policy, RoomState


class RuleBroken(RuntimeError):
    """A rule left the room in a phase its row of `RULES` does not list
    (the table and the code disagree: a bug, never a platform's fault)."""


def decide(state: RoomState, event: RoomEvent, policy: Policy, component: str) -> Decision:
    """Apply one event to one room.

    Args:
        state: the room as stored (a fresh `RoomState(room_id)` for a new room).
        event: what happened.
        policy: timeouts (ms) and limits.
        component: the function handling the event, for the log.

    Returns:
        A `Decision`. Never raises on a stale, duplicate or late event: those
        yield no state change and an `*_ignored` log event (a stale fact
        written outside the transaction, `RoomFact`: no log event at all).

    Raises:
        TypeError: an event of no kind the rulebook knows.
        RuleBroken: the rule left the room in a phase its row does not list.
    """
    return decide_by(RULE_INDEX, state, event, policy, component)


def decide_by(rules: Mapping[tuple[RoomPhase, str], Rule], state: RoomState, event: RoomEvent, policy: Policy,
              component: str) -> Decision:
    """`decide` over the table `rules` ((phase, kind) -> row): the row of
    the room's phase and the event's kind decides; the phase the room is
    left in must be one of the row's `then`.

    Raises:
        TypeError: no row for the event's kind in the room's phase.
        RuleBroken: as `decide`.
    """
    phase, kind = room_phase(state), event_kind(event)
    rule = rules.get((phase, kind))
    if rule is None:
        raise TypeError(f"no rule for {kind!r} in phase {phase}: {event!r}")
    decision = rule.code(Transition(state, policy, component, event.at_us), event)
    after = room_phase(decision.state if decision.state is not None else state)
    if after not in rule.then:
        raise RuleBroken(f"room {state.room_id}: {kind!r} in phase {phase} led to {after}, but its rule "
                         f"({rule.code.__module__}.{rule.code.__name__}) allows only "
                         f"{', '.join(sorted(rule.then))}")
    return decision


WITHOUT_ROOM = frozenset({"status sent"})
"""Event kinds decided without reading the room: in every phase their row
names one function, which leaves the room as it is (a WhatsApp `sent`
status: only delivered/read ack), so the service decides them against an
empty `RoomState` with no transaction (`ServiceCore.apply_without_state`).
Checked when this module loads (`RuleBroken` otherwise)."""


def decided_without_room(event: RoomEvent) -> bool:
    """Whether `event` is of a kind in `WITHOUT_ROOM`."""
    return event_kind(event) in WITHOUT_ROOM


def check_without_room(rules: Sequence[Rule]) -> None:
    """Raise `RuleBroken` unless every kind of `WITHOUT_ROOM` has, in every
    phase of `rules`, a row naming one and the same function that leaves the
    room in its phase."""
    for kind in WITHOUT_ROOM:
        rows = [r for r in rules if r.kind == kind]
        if {r.phase for r in rows} != set(RoomPhase) or len({r.code for r in rows}) != 1 \
                or any(r.then != {r.phase} for r in rows):
            raise RuleBroken(f"{kind!r} is decided without the room, but its rows differ by phase: {rows}")


check_without_room(RULES)
