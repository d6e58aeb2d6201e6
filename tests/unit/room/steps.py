"""The room tests' one `step`: `decide` one event on a room, check that the
phase the room leaves for is among the `then` of the rulebook row the event
went through (`rule_for`), and return the room after it with the decision.

Each test module binds its own default policy once:
`step = stepper(POLICY)`, then `state, d = step(state, event)` or
`step(state, event, other_policy)`.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.room import Decision, Policy, RoomEvent, RoomState, decide, room_phase, rule_for

Step = Callable[..., tuple[RoomState, Decision]]


def step(state: RoomState, event: RoomEvent, policy: Policy) -> tuple[RoomState, Decision]:
    """`decide(state, event, policy)` as the service calls it (the effects'
    idempotency prefix "test"), checked against its row's `then`.

    Returns: the room after the event (the same room when `decide` left it
    unchanged) and the decision (its events, effects and state)."""
    rule = rule_for(state, event)
    d = decide(state, event, policy, "test")
    after = d.state if d.state is not None else state
    assert room_phase(after) in rule.then, (rule, room_phase(after))
    return after, d


def stepper(default: Policy) -> Step:
    """`step` with `default` as the policy when a call names none."""

    def bound(state: RoomState, event: RoomEvent, policy: Policy | None = None) -> tuple[RoomState, Decision]:
        return step(state, event, default if policy is None else policy)

    return bound
