"""Preparation in parallel, sending in order: the room's rules (shared/room/preparation.py),
pure, no I/O. The emulator tests are in tests/integration/test_prepare.py."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.events import TERMINAL_EVENTS
from shared.room import (
    Enqueue,
    Phase,
    Policy,
    Prepare,
    Prepared,
    PrepareFailed,
    Redrive,
    RoomState,
    ScheduleTimer,
    Send,
    SendOutcome,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    room_phase,
)
from shared.room_document import room_as_read, room_to_doc
from tests.unit.room.steps import make_event, stepper

POLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=2000, send_start_deadline_ms=1000, first_timer_slack_ms=250,
                max_send_attempts=3, send_retry_base_ms=1000, dedup_retention=50, max_queued_messages=100,
                prepare_ahead=2, prepare_timeout_ms=10_000, max_prepare_attempts=3, prepare_retry_base_ms=1000)
T0 = 1_700_000_000_000_000
MS = 1000


def media(mid: str, at: int = T0) -> Enqueue:
    return Enqueue(mid, "whatsapp", "15550001", "caption", at - 5 * MS, at, media_kind="image",
                   media_link=f"https://media.test/{mid}.png", prepare="media")


step = stepper(POLICY)


def prepares(d) -> list[tuple[int, int, int]]:
    return [(e.seq, e.attempt, e.due_at_us) for e in d.effects if isinstance(e, Prepare)]


def sends(d) -> list[tuple[int, str | None]]:
    return [(e.message.seq, e.message.prepared) for e in d.effects if isinstance(e, Send)]


def kinds(d) -> list[str]:
    return [str(e.event) for e in d.events]


def room_of(n: int, policy: Policy = POLICY) -> RoomState:
    state = RoomState("r1")
    for i in range(1, n + 1):
        state, _ = step(state, media(f"m{i}"), policy)
    return state


def done(state: RoomState, seq: int, attempt: int = 1, at: int = T0 + 800 * MS, media_id: str | None = None):
    return Prepared(state.incarnation, seq, attempt, media_id or f"media-{seq}", 750.0, at)


def test_preparation_is_asked_for_at_enqueue_for_the_head_and_the_window_behind_it():
    state, d = step(RoomState("r1"), media("m1"))
    assert prepares(d) == [(1, 1, T0)] and sends(d) == [] and kinds(d) == ["enqueued", "preparing"]
    assert state.in_flight.phase is Phase.PREPARING
    state, d2 = step(state, media("m2"))
    state, d3 = step(state, media("m3"))
    state, d4 = step(state, media("m4"))  # beyond PREPARE_AHEAD=2 behind the head
    assert [prepares(d) for d in (d2, d3, d4)] == [[(2, 1, T0)], [(3, 1, T0)], []]
    assert [m.prep_attempt for m in state.pending] == [1, 1, 0]


def test_results_in_reverse_order_still_send_in_publish_order_each_as_soon_as_its_turn_comes():
    state = room_of(3)
    state, d = step(state, done(state, 3))
    state, d2 = step(state, done(state, 2))
    assert sends(d) == sends(d2) == [] and state.in_flight.phase is Phase.PREPARING
    state, d = step(state, done(state, 1, at=T0 + 900 * MS))
    assert sends(d) == [(1, "media-1")] and state.in_flight.phase is Phase.SENDING
    assert [str(e.trigger) for e in d.effects if isinstance(e, Send)] == ["prepared"]
    state, d = step(state, StatusUpdate(state.incarnation, 1, 1, "delivered", T0, T0 + MS * 1000))
    assert sends(d) == [(2, "media-2")]  # prepared long ago: sent at the ack, no wait
    # the window slid: message 4 is not in it yet (3 is the only queued one)
    state, d = step(state, StatusUpdate(state.incarnation, 2, 1, "delivered", T0, T0 + MS * 1100))
    assert sends(d) == [(3, "media-3")]


def test_the_window_slides_as_the_head_moves_on():
    state = room_of(4)
    state, _ = step(state, done(state, 1))
    state, d = step(state, StatusUpdate(state.incarnation, 1, 1, "delivered", T0, T0 + 900 * MS))
    assert [(s, a) for s, a, _ in prepares(d)] == [(4, 1)]  # 2 and 3 were asked for already


def test_prepare_ahead_zero_prepares_one_message_after_another():
    policy = replace(POLICY, prepare_ahead=0)
    state, d = step(RoomState("r1"), media("m1"), policy)
    state, d2 = step(state, media("m2"), policy)
    assert prepares(d) == [(1, 1, T0)] and prepares(d2) == []
    state, _ = step(state, done(state, 1), policy)
    state, d = step(state, StatusUpdate(state.incarnation, 1, 1, "delivered", T0, T0 + 900 * MS), policy)
    assert sends(d) == [] and prepares(d) == [(2, 1, T0 + 900 * MS)]
    assert state.in_flight.phase is Phase.PREPARING


def test_a_second_result_is_ignored_and_the_first_is_kept():
    state = room_of(2)
    state, _ = step(state, done(state, 2, media_id="first"))
    state, d = step(state, done(state, 2, attempt=1, media_id="second"))
    assert d.state is None and kinds(d) == ["prepare_ignored"] and d.events[0].reason == "already_prepared"
    assert state.pending[0].prepared == "first"


def test_a_failed_preparation_is_retried_with_backoff_then_dead_lettered_and_the_room_moves_on():
    state = room_of(2)
    state, _ = step(state, done(state, 2))
    state, d = step(state, PrepareFailed(state.incarnation, 1, 1, "HTTP 500", False, T0 + 800 * MS))
    assert prepares(d) == [(1, 2, T0 + 1800 * MS)] and kinds(d)[0] == "prepare_failed"
    state, d = step(state, PrepareFailed(state.incarnation, 1, 1, "HTTP 500 again", False, T0 + 850 * MS))
    assert d.state is None and d.events[0].reason == "stale_prepare_attempt"
    state, d = step(state, PrepareFailed(state.incarnation, 1, 2, "HTTP 500", False, T0 + 2 * 1000 * MS))
    assert prepares(d) == [(1, 3, T0 + 6 * 1000 * MS)]
    state, d = step(state, PrepareFailed(state.incarnation, 1, 3, "HTTP 500", False, T0 + 7 * 1000 * MS))
    assert "dead_lettered" in kinds(d) and [k.message.seq for k in d.dead_letters] == [1]
    assert sends(d) == [(2, "media-2")] and state.counts == {"dead_lettered": 1}


def test_a_permanent_failure_of_a_queued_message_ends_it_only_when_its_turn_comes():
    state = room_of(3)
    state, d = step(state, PrepareFailed(state.incarnation, 2, 1, "HTTP 404 on the link", True, T0 + 500 * MS))
    assert "dead_lettered" not in kinds(d) and state.pending[0].prep_failed
    state, _ = step(state, done(state, 3))
    state, _ = step(state, done(state, 1))
    state, d = step(state, StatusUpdate(state.incarnation, 1, 1, "delivered", T0, T0 + 900 * MS))
    ends = [(e.event, e.seq) for e in d.events if e.event in TERMINAL_EVENTS]
    assert ends == [("acked", 1), ("dead_lettered", 2)] and sends(d) == [(3, "media-3")]


def test_park_policy_blocks_the_room_until_a_redrive_which_prepares_it_again():
    policy = replace(POLICY, prepare_poison="park")
    state = room_of(2, policy)
    state, d = step(state, PrepareFailed(state.incarnation, 1, 1, "unsupported type", True, T0 + 500 * MS), policy)
    assert room_phase(state).value == "blocked" and "blocked" in kinds(d) and sends(d) == []
    state, d = step(state, Redrive(1, "ops", "media fixed", T0 + 60_000 * MS), policy)
    # Preparation attempt 2, not 1 again: attempt 1's task name may still be
    # taken on Cloud Tasks, which would then silently create nothing.
    assert prepares(d) == [(1, 2, T0 + 60_000 * MS)] and state.in_flight.phase is Phase.PREPARING
    state, d = step(state, done(state, 1, at=T0 + 61_000 * MS), policy)
    assert sends(d) == [(1, "media-1")]


def test_a_late_success_releases_a_message_parked_for_its_preparation():
    policy = replace(POLICY, prepare_poison="park", max_prepare_attempts=1)
    state = room_of(1, policy)
    state, _ = step(state, PrepareFailed(state.incarnation, 1, 1, "HTTP 503", False, T0 + 500 * MS), policy)
    assert room_phase(state).value == "blocked"
    state, d = step(state, done(state, 1, at=T0 + 900 * MS), policy)
    assert sends(d) == [(1, "media-1")]


def test_a_lost_preparation_is_asked_for_again_at_the_timeout():
    state = room_of(1)
    flight = state.in_flight
    early = TimerFired(state.incarnation, 1, 1, flight.due_at_us, flight.due_at_us - 1000 * MS)
    state, d = step(state, early)
    assert prepares(d) == []
    state, d = step(state, TimerFired(state.incarnation, 1, 1, state.in_flight.due_at_us, state.in_flight.due_at_us))
    assert [(s, a) for s, a, _ in prepares(d)] == [(1, 2)] and state.in_flight.phase is Phase.PREPARING


def test_a_skipped_preparing_head_ends_at_once_and_the_next_one_goes():
    state = room_of(2)
    state, _ = step(state, done(state, 2))
    state, d = step(state, Skip(1, "ops", "wrong image", T0 + 100 * MS))
    assert sends(d) == [(2, "media-2")] and state.counts == {"skipped": 1}


def test_a_redelivered_push_asks_for_the_outstanding_preparation_again():
    state = room_of(2)
    _, d = step(state, media("m2", at=T0 + 10 * MS))
    assert kinds(d) == ["duplicate_ignored"] and [(s, a) for s, a, _ in prepares(d)] == [(2, 1)]


def test_preparation_fields_round_trip_through_the_room_document():
    state = room_of(3)
    state, _ = step(state, done(state, 2))
    state, _ = step(state, PrepareFailed(state.incarnation, 3, 1, "HTTP 404", True, T0 + MS))
    assert room_as_read("r1", room_to_doc(state), 0) == state


# ------------------------------------------------------------------ property


@dataclass
class PrepWorld:
    """One room of media messages; preparations finish in any order, fail,
    come twice or never (a lost task); sends, statuses and timers are
    duplicated and reordered as in test_room's World."""

    rng: random.Random
    n: int
    state: RoomState = field(default_factory=lambda: RoomState("r"))
    inbox: list = field(default_factory=list)
    published: int = 0
    first_sends: list[int] = field(default_factory=list)
    ended: dict[int, str] = field(default_factory=dict)
    clock: int = T0

    def apply(self, event) -> None:
        self.clock += 1000
        self.state, d = step(self.state, replace(event, at_us=self.clock))
        for ev in d.events:
            if ev.event in TERMINAL_EVENTS:
                assert ev.seq not in self.ended, f"seq {ev.seq} ended twice"
                self.ended[ev.seq] = str(ev.event)
        for eff in d.effects:
            if isinstance(eff, ScheduleTimer):
                self.inbox.append(TimerFired(eff.incarnation, eff.seq, eff.attempt, eff.due_at_us, 0))
            elif isinstance(eff, Prepare):
                fate = self.rng.random()
                if fate < 0.1:
                    continue  # the task was lost
                if fate < 0.3:
                    self.inbox.append(PrepareFailed(eff.incarnation, eff.seq, eff.attempt, "boom",
                                                    self.rng.random() < 0.2, 0))
                else:
                    self.inbox.append(Prepared(eff.incarnation, eff.seq, eff.attempt, f"id-{eff.seq}", 1.0, 0))
            elif isinstance(eff, Send):
                seq = eff.message.seq
                assert eff.message.prepared == f"id-{seq}", "sent without its preparation"
                assert all(s in self.ended for s in range(1, seq)), f"seq {seq} sent before an earlier one ended"
                if seq not in self.first_sends:
                    self.first_sends.append(seq)
                self.inbox.append(SendReturned(eff.incarnation, seq, eff.attempt, SendOutcome.ACCEPTED, 0,
                                               eff.cause))
                if self.rng.random() < 0.8:
                    self.inbox.append(StatusUpdate(eff.incarnation, seq, eff.attempt, "delivered", T0, 0))

    def run(self) -> None:
        for _ in range(20_000):
            if not self.inbox and self.published >= self.n:
                return
            if self.published < self.n and (not self.inbox or self.rng.random() < 0.3):
                self.published += 1
                self.apply(media(f"m{self.published}"))
                continue
            event = self.inbox.pop(self.rng.randrange(len(self.inbox)))
            if isinstance(event, TimerFired) and event.due_at_us > self.clock:
                self.clock = event.due_at_us - 1000
            if self.rng.random() < 0.1:
                self.inbox.append(event)
            self.apply(event)
        raise AssertionError("simulation did not settle")


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8))
def test_any_order_of_preparations_keeps_send_order_and_ends_every_message_once(seed, n):
    world = PrepWorld(random.Random(seed), n)
    world.run()
    assert world.first_sends == sorted(world.first_sends)
    assert sorted(world.ended) == list(range(1, n + 1))
    assert world.state.in_flight is None and world.state.pending == ()


WALK_KINDS = ["media", "prepared", "prepare_failed", "prepare_failed_for_good", "sequenced", "gap_timer",
              "timer", "ack", "accepted", "skip", "redrive", "pause", "resume", "watchdog"]


def walk_event(what: str, state: RoomState, n: int, now: int):
    """An event of kind `what` for `state` (the in-flight message when `n` is odd)."""
    f = state.in_flight
    seq = f.message.seq if f is not None and n % 2 else n
    attempt = next((m.prep_attempt for m in (*([f.message] if f else []), *state.pending) if m.seq == seq), 1)
    if what == "media":
        return media(f"m{n}", at=now)
    if what == "prepared":
        return Prepared(state.incarnation, seq, max(1, attempt), f"id-{seq}", 1.0, now)
    if what in ("prepare_failed", "prepare_failed_for_good"):
        return PrepareFailed(state.incarnation, seq, max(1, attempt), "boom", what.endswith("good"), now)
    if what == "sequenced":
        return Enqueue(f"q{n}", "whatsapp", "15550001", "t", now, now, sequence=n)
    if what == "gap_timer":
        return TimerFired(state.incarnation, 0, 0, state.gap_due_us or now, now)
    return make_event(what, state, n, now)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(WALK_KINDS), st.integers(1, 6), st.integers(0, 40)), max_size=60),
       st.sampled_from(["dead_letter", "park"]))
def test_every_transition_with_preparation_and_sequence_is_one_the_rulebook_lists(script, poison):
    """Random events in any phase: `decide` never raises, and the room's next
    phase is one `RULES` allows (`step` checks it)."""
    policy = replace(POLICY, prepare_poison=poison, max_queued_messages=5)
    state, now = RoomState("r"), T0
    for what, n, dt_s in script:
        now += dt_s * 1000 * MS
        state, _ = step(state, walk_event(what, state, n, now), policy)


def test_the_poison_policy_and_the_window_are_read_from_the_environment(monkeypatch):
    import pytest

    from shared import config
    from shared.room import policy_from_settings

    monkeypatch.setenv("PREPARE_POISON", "park")
    monkeypatch.setenv("PREPARE_AHEAD", "0")
    policy = policy_from_settings(config.load())
    assert (policy.prepare_poison, policy.prepare_ahead) == ("park", 0)
    monkeypatch.setenv("PREPARE_POISON", "retry_forever")
    with pytest.raises(ValueError, match="PREPARE_POISON"):
        config.load()


def test_a_redelivered_ack_asks_again_for_the_preparation_its_window_slide_requested():
    """The ack that passes the baton slides the window over m4, whose prepare
    task Cloud Tasks may refuse (the request answers 503). Its redelivery must
    ask again at once, not leave m4 to wait until it is the head plus
    PREPARE_TIMEOUT_MS (issue 28, item 9)."""
    state = room_of(4)
    state, _ = step(state, done(state, 1))
    state, _ = step(state, done(state, 2))
    state, _ = step(state, done(state, 3))
    ack = StatusUpdate(state.incarnation, 1, 1, "delivered", T0, T0 + 2000 * MS)
    state, d = step(state, ack)
    assert prepares(d) == [(4, 1, T0 + 2000 * MS)]  # this request's Prepare effect is the one that failed
    state, d = step(state, replace(ack, at_us=T0 + 2500 * MS))  # the webhook's redelivery
    assert prepares(d) == [(4, 1, T0 + 2500 * MS)]
