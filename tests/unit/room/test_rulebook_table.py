"""`RULES` drives `decide` (issue 45, item 2): one row per (room phase,
event kind), each naming the one function that decides it, short enough to
read, and `decide` refusing a rule that leaves the room in a phase its row
does not list. Pure: no I/O."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import replace

import pytest

from shared.room import (
    RULE_INDEX,
    RULES,
    Enqueue,
    RoomPhase,
    RoomState,
    RuleBroken,
    StatusUpdate,
    decide,
    decide_by,
    room_phase,
    rulebook,
)
from tests.unit.room.steps import POLICY

T0 = 1_700_000_000_000_000
MAX_RULE_LINES = 40


def push(mid: str) -> Enqueue:
    return Enqueue(mid, "whatsapp", "15550001", "hi", T0 - 5_000, T0)


def test_every_phase_has_exactly_one_row_for_every_event_kind():
    kinds = {r.kind for r in RULES}
    assert len(RULE_INDEX) == len(RULES), "two rows for one (phase, kind)"
    for phase in RoomPhase:
        assert {r.kind for r in RULES if r.phase is phase} == kinds, phase


def test_every_row_names_one_function_of_at_most_40_lines():
    long = {}
    for rule in RULES:
        assert inspect.isfunction(rule.code), rule
        lines = len(inspect.getsourcelines(rule.code)[0])
        if lines > MAX_RULE_LINES:
            long[f"{rule.code.__module__}.{rule.code.__name__}"] = lines
    assert not long, f"split these rules (lines): {long}"


def test_decide_dispatches_on_the_table_alone():
    """No private table beside `RULES`: the old `_HANDLERS` (by event type)
    and `EVENT_OF_KIND` are gone."""
    decide_module = importlib.import_module("shared.room.decide")  # `shared.room.decide` is the function
    assert not hasattr(decide_module, "_HANDLERS")
    assert not hasattr(rulebook, "EVENT_OF_KIND")
    assert decide_module.RULE_INDEX is RULE_INDEX


def test_decide_refuses_a_rule_that_leaves_a_phase_its_row_does_not_list():
    room = RoomState("r1")
    state = decide(room, push("m1"), POLICY, "test").state
    assert state is not None and room_phase(state) is RoomPhase.SENDING
    # The same rule, its row claiming the push keeps the room idle.
    wrong = dict(RULE_INDEX)
    wrong[(RoomPhase.IDLE, "push")] = replace(RULE_INDEX[(RoomPhase.IDLE, "push")], then=frozenset({RoomPhase.IDLE}))
    with pytest.raises(RuleBroken, match="'push' in phase idle led to sending"):
        decide_by(wrong, room, push("m1"), POLICY, "test")


def test_decide_refuses_an_event_no_row_covers():
    wrong = {k: r for k, r in RULE_INDEX.items() if k != (RoomPhase.IDLE, "push")}
    with pytest.raises(TypeError, match="no rule for 'push' in phase idle"):
        decide_by(wrong, RoomState("r1"), push("m1"), POLICY, "test")


def test_then_names_preparing_only_where_a_message_can_start():
    """The blanket rule that added `preparing` wherever `sending` was listed
    is gone: a push while a message is being sent keeps the room sending,
    and a paced attempt's timer sends it (or pauses), never prepares it."""
    assert RULE_INDEX[(RoomPhase.SENDING, "push")].then == {RoomPhase.SENDING}
    assert RoomPhase.PREPARING not in RULE_INDEX[(RoomPhase.PACED, "timer")].then
    assert RoomPhase.PREPARING not in RULE_INDEX[(RoomPhase.BLOCKED, "prepared")].then
    # A message starting may be paced: wherever one starts, `paced` is listed.
    starts = [r for r in RULES if RoomPhase.SENDING in r.then and r.phase is not RoomPhase.SENDING]
    assert starts and all(RoomPhase.PACED in r.then for r in starts)


def test_a_status_baton_does_not_know_is_ignored_in_every_phase_it_can_reach():
    state = decide(RoomState("r1"), push("m1"), POLICY, "test").state
    assert state is not None
    d = decide(state, StatusUpdate(state.incarnation, 1, 1, "deleted", T0, T0 + 1000, "wamid.1"), POLICY, "test")
    assert d.state is None and [str(e.event) for e in d.events] == ["status_ignored"]
    assert d.events[0].reason == "unknown_status"


def test_the_room_reads_no_clock_and_does_no_io():
    """The room's only time is the event's (`at_us`, given by the caller):
    no module of shared/room/ imports a clock, I/O or the service."""
    import ast
    from pathlib import Path

    allowed = {"__future__", "collections.abc", "dataclasses", "enum", "math", "typing", "shared", "shared.events",
               "shared.senders", "shared.config",  # config: the Settings type only
               # The platforms' facts and the send interface, pure (test_provider_registry: they load no client).
               "shared.providers.registry", "shared.providers.base"}
    room = Path(__file__).resolve().parents[3] / "shared" / "room"
    found = {}
    for path in sorted(room.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            bad = [n for n in names if n not in allowed and not n.startswith("shared.room")]
            if bad:
                found[path.name] = bad
    assert not found, f"the room must stay pure: {found}"
