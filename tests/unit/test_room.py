"""Unit tests of the pure room state machine (no I/O)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.events import TERMINAL_EVENTS
from shared.room import (
    Enqueue,
    KeepDeadLetter,
    Phase,
    Policy,
    Receipt,
    RoomState,
    ScheduleTimer,
    Send,
    SendFailed,
    StatusUpdate,
    TimerFired,
    TimerKind,
    decide,
    make_delivery_id,
    parse_delivery_id,
)

POLICY = Policy(ack_timeout_ms=3000, max_send_attempts=3, send_retry_base_ms=1000, dedup_window=50)
T0 = 1_700_000_000_000_000


def enqueue(mid: str, at: int = T0, text: str = "hi") -> Enqueue:
    return Enqueue(mid, "whatsapp", "15550001", text, at - 5_000, at)


def step(state: RoomState, event):
    d = decide(state, event, POLICY, "test")
    return (d.state if d.state is not None else state), d


def sends(d) -> list[tuple[int, int]]:
    return [(e.message.seq, e.attempt) for e in d.effects if isinstance(e, Send)]


def timers(d) -> list[tuple[int, int, TimerKind]]:
    return [(e.seq, e.attempt, e.kind) for e in d.effects if isinstance(e, ScheduleTimer)]


def kinds(d) -> list[str]:
    return [str(e.event) for e in d.events]


def ack(seq: int, attempt: int = 1, status: str = "delivered", at: int = T0 + 80_000) -> StatusUpdate:
    return StatusUpdate(seq, attempt, status, T0, at, f"wamid.{seq}.{attempt}")


# ------------------------------------------------------------------ scenarios


def test_idle_room_sends_the_first_message_at_once_and_arms_its_timer():
    state, d = step(RoomState("r1"), enqueue("m1"))
    assert sends(d) == [(1, 1)]
    assert timers(d) == [(1, 1, TimerKind.ACK_TIMEOUT)]
    # The timer is armed before the send: a send that dies is still covered.
    assert isinstance(d.effects[0], ScheduleTimer) and isinstance(d.effects[1], Send)
    assert d.effects[0].due_at_us == T0 + 3_000_000
    assert kinds(d) == ["enqueued"]
    assert state.in_flight is not None and state.in_flight.message.seq == 1


def test_busy_room_queues_and_the_ack_passes_the_baton_in_publish_order():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, d2 = step(state, enqueue("m2"))
    state, d3 = step(state, enqueue("m3"))
    assert sends(d2) == [] and sends(d3) == []
    assert [m.seq for m in state.pending] == [2, 3]
    state, d = step(state, ack(1))
    assert kinds(d) == ["acked"]
    assert sends(d) == [(2, 1)]
    send = next(e for e in d.effects if isinstance(e, Send))
    assert send.trigger == "ack"
    state, d = step(state, ack(2, status="read"))
    assert sends(d) == [(3, 1)]
    state, d = step(state, ack(3))
    assert sends(d) == [] and state.in_flight is None and state.pending == ()
    assert state.counts == {"acked": 3}


def test_duplicate_push_is_ignored_and_keeps_its_seq():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state2, d = step(state, enqueue("m1"))
    assert kinds(d) == ["duplicate_ignored"]
    assert d.state is None and state2 == state


def test_duplicate_push_of_the_in_flight_message_rearms_its_timer_but_does_not_resend():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    _, d = step(state, enqueue("m1", at=T0 + 10))
    assert sends(d) == []
    assert timers(d) == [(1, 1, TimerKind.ACK_TIMEOUT)]
    assert d.effects[0].due_at_us == T0 + 3_000_000  # the original deadline


def test_duplicate_and_reordered_statuses_never_advance_twice():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, _ = step(state, enqueue("m3"))
    # `read` before `delivered`, then `delivered`, then `read` again.
    state, d = step(state, ack(1, status="read"))
    assert sends(d) == [(2, 1)]
    state, d = step(state, ack(1, status="delivered"))
    assert sends(d) == [] and kinds(d) == ["status_ignored"] and d.events[0].reason == "after_acked"
    state, d = step(state, ack(1, status="read"))
    assert sends(d) == [] and d.state is None
    assert state.in_flight.message.seq == 2


def test_sent_status_changes_nothing():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    _, d = step(state, ack(1, status="sent"))
    assert d.state is None and sends(d) == [] and d.events[0].reason == "sent_status"


def test_late_ack_after_timeout_is_logged_with_its_latency_and_skips_nothing():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, d = step(state, TimerFired(1, 1, TimerKind.ACK_TIMEOUT, T0 + 3_000_000, Receipt.CONFIRMED))
    assert kinds(d) == ["timed_out"] and sends(d) == [(2, 1)]
    state, d = step(state, ack(1, at=T0 + 4_500_000))
    assert d.state is None and sends(d) == []
    assert d.events[0].reason == "late_ack"
    assert d.events[0].send_to_ack_ms == pytest.approx(4500.0)
    assert state.in_flight.message.seq == 2


def test_timeout_applies_only_to_its_exact_attempt():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, _ = step(state, ack(1))
    # The timer of seq 1 fires after seq 1 was acked: nothing happens.
    _, d = step(state, TimerFired(1, 1, TimerKind.ACK_TIMEOUT, T0 + 3_000_000, Receipt.CONFIRMED))
    assert d.state is None and kinds(d) == ["timeout_ignored"]
    # A timer of an attempt that never existed for the in-flight seq: nothing.
    _, d = step(state, TimerFired(2, 7, TimerKind.ACK_TIMEOUT, T0 + 3_000_000, Receipt.CONFIRMED))
    assert d.state is None


def test_duplicated_timeout_task_does_not_advance_twice():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    for m in ("m2", "m3"):
        state, _ = step(state, enqueue(m))
    fired = TimerFired(1, 1, TimerKind.ACK_TIMEOUT, T0 + 3_000_000, Receipt.CONFIRMED)
    state, d1 = step(state, fired)
    state, d2 = step(state, fired)
    assert sends(d1) == [(2, 1)] and sends(d2) == []
    assert state.in_flight.message.seq == 2


def test_timeout_without_receipt_resends_the_same_message_then_dead_letters():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, d = step(state, TimerFired(1, 1, TimerKind.ACK_TIMEOUT, T0 + 3_000_000, Receipt.MISSING))
    assert sends(d) == [(1, 2)] and d.events == ()
    state, d = step(state, TimerFired(1, 2, TimerKind.ACK_TIMEOUT, T0 + 6_000_000, Receipt.MISSING))
    assert sends(d) == [(1, 3)]
    state, d = step(state, TimerFired(1, 3, TimerKind.ACK_TIMEOUT, T0 + 9_000_000, Receipt.MISSING))
    assert kinds(d) == ["dead_lettered"]
    assert any(isinstance(e, KeepDeadLetter) for e in d.effects)
    assert sends(d) == [(2, 1)]


def test_an_ack_of_an_earlier_attempt_acks_the_message():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, TimerFired(1, 1, TimerKind.ACK_TIMEOUT, T0 + 3_000_000, Receipt.MISSING))
    state, d = step(state, ack(1, attempt=1))
    assert kinds(d) == ["acked"] and state.in_flight is None


def test_failed_status_ends_the_message_with_the_platform_error_and_advances():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    failed = StatusUpdate(1, 1, "failed", T0, T0 + 50_000, "wamid.1", 131026, "Message undeliverable")
    state, d = step(state, failed)
    assert kinds(d) == ["failed"]
    assert d.events[0].error_code == 131026 and d.events[0].error_title == "Message undeliverable"
    assert sends(d) == [(2, 1)]


def test_transient_send_failure_backs_off_then_retries_with_the_next_attempt():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, d = step(state, SendFailed(1, 1, False, T0 + 1000, 130429, "Rate limit hit"))
    assert state.in_flight.phase is Phase.BACKOFF
    assert timers(d) == [(1, 1, TimerKind.RETRY)]
    assert d.effects[0].due_at_us == T0 + 1000 + 1_000_000
    # The ack timeout of the failed attempt leaves it to the retry timer.
    _, d = step(state, TimerFired(1, 1, TimerKind.ACK_TIMEOUT, T0 + 3_000_000, Receipt.MISSING))
    assert d.state is None and d.events[0].reason == "in_backoff"
    state, d = step(state, TimerFired(1, 1, TimerKind.RETRY, T0 + 1_100_000))
    assert sends(d) == [(1, 2)] and state.in_flight.phase is Phase.SENDING


def test_transient_send_failure_honours_the_platform_wait():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    _, d = step(state, SendFailed(1, 1, False, T0, 131056, "pair rate limit", retry_after_ms=4000))
    assert d.effects[0].due_at_us == T0 + 4_000_000


def test_permanent_send_failure_ends_as_failed_and_advances():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    state, _ = step(state, enqueue("m2"))
    state, d = step(state, SendFailed(1, 1, True, T0, 131047, "Re-engagement message"))
    assert kinds(d) == ["failed"] and sends(d) == [(2, 1)]


def test_backlog_over_the_limit_is_refused_without_a_state_change():
    policy = replace(POLICY, max_pending_bytes=500)
    state = decide(RoomState("r1"), enqueue("m1"), policy, "t").state
    state = decide(state, enqueue("m2", text="x" * 300), policy, "t").state
    d = decide(state, enqueue("m3", text="y" * 300), policy, "t")
    assert d.refused and d.state is None and d.effects == ()


def test_status_for_a_seq_the_room_never_had_is_unknown():
    state, _ = step(RoomState("r1"), enqueue("m1"))
    _, d = step(state, ack(9))
    assert kinds(d) == ["status_unknown"] and d.state is None


def test_enqueue_while_the_last_ack_is_applied_is_not_lost():
    """Both orders of a concurrent enqueue and ack leave the new message sent."""
    start, _ = step(RoomState("r1"), enqueue("m1"))
    # ack first, then enqueue: the room is idle, so the enqueue sends.
    s, _ = step(start, ack(1))
    s, d = step(s, enqueue("m2"))
    assert sends(d) == [(2, 1)]
    # enqueue first, then ack: the ack passes the baton to m2.
    s, _ = step(start, enqueue("m2"))
    s, d = step(s, ack(1))
    assert sends(d) == [(2, 1)]


def test_delivery_id_round_trip_and_rejects():
    did = make_delivery_id("room:a.b", 12, 3, T0 + 123_456)
    assert parse_delivery_id(did) == ("room:a.b", 12, 3, (T0 + 123_456) // 1000 * 1000)
    for bad in ("", "1.2", "x.1.2.r", "0.1.2.r", "1.1.5."):
        with pytest.raises(ValueError):
            parse_delivery_id(bad)


# ------------------------------------------------------------------ property


@dataclass
class World:
    """A room with an adversarial network: every request may be duplicated,
    delayed and reordered; sends may fail or the sender may crash."""

    rng: random.Random
    n_messages: int
    state: RoomState = field(default_factory=lambda: RoomState("r"))
    inbox: list = field(default_factory=list)
    next_publish: int = 1
    send_log: list[tuple[int, int]] = field(default_factory=list)
    receipts: set[tuple[int, int]] = field(default_factory=set)
    ended: dict[int, str] = field(default_factory=dict)
    clock: int = T0

    def apply(self, event) -> None:
        self.clock += 1000
        if isinstance(event, TimerFired) and event.kind is TimerKind.ACK_TIMEOUT:
            confirmed = (event.seq, event.attempt) in self.receipts
            event = replace(event, receipt=Receipt.CONFIRMED if confirmed else Receipt.MISSING)
        d = decide(self.state, event, POLICY, "sim")
        if d.state is not None:
            self.state = d.state
        for ev in d.events:
            if ev.event in TERMINAL_EVENTS:
                assert ev.seq not in self.ended, f"seq {ev.seq} ended twice"
                self.ended[ev.seq] = str(ev.event)
        for eff in d.effects:
            if isinstance(eff, ScheduleTimer):
                self.inbox.append(TimerFired(eff.seq, eff.attempt, eff.kind, 0))
            elif isinstance(eff, Send):
                self.on_send(eff)

    def on_send(self, send: Send) -> None:
        seq, attempt = send.message.seq, send.attempt
        # Invariant 2: nothing else of this room is in flight.
        assert all(s <= seq for s, _ in self.send_log), "send of an earlier seq after a later one"
        assert all(s in self.ended for s in range(1, seq)), f"seq {seq} sent before an earlier seq ended"
        self.send_log.append((seq, attempt))
        fate = self.rng.random()
        if fate < 0.1:
            return  # the sender crashed: no receipt, no status
        if fate < 0.2:
            self.inbox.append(SendFailed(seq, attempt, self.rng.random() < 0.3, 0, 130429, "throughput"))
            return
        self.receipts.add((seq, attempt))
        for status in self.rng.sample(["sent", "delivered", "read", "failed"], k=self.rng.randint(0, 3)):
            for _ in range(self.rng.randint(1, 2)):  # duplicated webhooks
                self.inbox.append(StatusUpdate(seq, attempt, status, T0, 0))

    def run(self) -> None:
        for _ in range(10_000):
            can_publish = self.next_publish <= self.n_messages
            if not self.inbox and not can_publish:
                return
            if can_publish and (not self.inbox or self.rng.random() < 0.3):
                self.apply(enqueue(f"m{self.next_publish}", at=self.clock))
                self.next_publish += 1
                continue
            event = self.inbox.pop(self.rng.randrange(len(self.inbox)))
            if self.rng.random() < 0.1:
                self.inbox.append(event)  # delivered again later
            if self.rng.random() < 0.05 and self.next_publish > 1:
                self.inbox.append(enqueue(f"m{self.rng.randint(1, self.next_publish - 1)}", at=self.clock))
            self.apply(event)
        raise AssertionError("simulation did not settle")


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 8))
def test_any_interleaving_keeps_order_and_ends_every_message_once(seed, n):
    world = World(random.Random(seed), n)
    world.run()
    # Invariant 1: sends in publish order; repeats only of the same message.
    firsts = [seq for i, (seq, _) in enumerate(world.send_log) if seq not in {s for s, _ in world.send_log[:i]}]
    assert firsts == sorted(firsts) == list(range(1, len(firsts) + 1))
    # Invariant 3: every accepted message ended exactly once; nothing left.
    assert sorted(world.ended) == list(range(1, n + 1))
    assert world.state.in_flight is None and world.state.pending == ()
    assert sum(world.state.counts.values()) == n
