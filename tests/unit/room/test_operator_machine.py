"""Operator actions interleaved with late, duplicated and reordered statuses
of every earlier attempt (issue 28): a hypothesis state machine over the pure
rulebook. Pause, resume, skip and redrive meet send outcomes, timers, paced
waits and statuses for any attempt ever sent, and after every step:

- no attempt number is used twice for a message (the fencing token);
- sends of a message stay within MAX_SEND_ATTEMPTS per entry (its first,
  and one more entry per redrive);
- no send is decided while an earlier send may still be under way (not
  returned, inside its send window, and not itself acked or failed by the
  platform): a copy of the earlier message could then follow it;
- a message ends at most once per entry, and exactly once after the room
  is drained at the end.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from shared.events import TERMINAL_EVENTS
from shared.room import (
    Enqueue,
    KeepDeadLetter,
    Pause,
    Phase,
    Policy,
    Redrive,
    Resume,
    RoomState,
    ScheduleTimer,
    Send,
    SendOutcome,
    SendReturned,
    Skip,
    StatusUpdate,
    TimerFired,
    WatchdogSweep,
    decide,
)
from shared.room_document import room_as_read, room_to_doc

POLICY = Policy(ack_timeout_ms=3000, send_timeout_ms=2000, send_start_deadline_ms=1000, first_timer_slack_ms=250,
                max_send_attempts=2, send_retry_base_ms=500, dedup_retention=100, max_queued_messages=100,
                watchdog_grace_ms=60_000, pacing=(("whatsapp", 2000, 2),))
T0 = 1_700_000_000_000_000
MS = 1000
WINDOW_US = POLICY.send_window_ms * MS


@dataclass
class SendRecord:
    send: Send
    over: bool = False  # returned, window passed, or the platform acked / failed this very attempt

    def may_run_at(self, now_us: int) -> bool:
        return not self.over and now_us < self.send.trigger_at_us + WINDOW_US


class OperatorsAndLateStatuses(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.state = RoomState("room")
        self.now = T0
        self.sends: list[SendRecord] = []
        self.timers: list[TimerFired] = []
        self.dead_letters: dict[str, KeepDeadLetter] = {}
        self.entries: Counter[str] = Counter()  # message id -> times it entered (push, then each redrive)
        self.ends: Counter[str] = Counter()
        self.published = 0

    # -- applying one event, with the checks on what it decided

    def apply(self, event) -> None:
        d = decide(self.state, event, POLICY, "machine")
        if d.state is not None:
            self.state = room_as_read("room", room_to_doc(d.state), 0)
        for ev in d.events:
            if ev.event in TERMINAL_EVENTS:
                self.ends[ev.message_id] += 1
                assert self.ends[ev.message_id] <= self.entries[ev.message_id], f"{ev.message_id} ended twice"
            if ev.event == "redriven":
                self.entries[ev.message_id] += 1
        for kept in d.dead_letters:
            self.dead_letters[kept.message.message_id] = kept
        for effect in d.effects:
            if isinstance(effect, ScheduleTimer):
                self.timers.append(TimerFired(effect.incarnation, effect.seq, effect.attempt, effect.due_at_us,
                                              effect.due_at_us))
            elif isinstance(effect, Send):
                self.check_send(effect)

    def check_send(self, send: Send) -> None:
        mid = send.message.message_id
        used = [r.send.attempt for r in self.sends if r.send.message.message_id == mid]
        assert send.attempt not in used, f"attempt {send.attempt} of {mid} used again ({used})"
        assert len(used) + 1 <= POLICY.max_send_attempts * self.entries[mid], \
            f"{mid} sent {len(used) + 1} times over {self.entries[mid]} entries"
        running = [r.send.delivery_id for r in self.sends if r.may_run_at(send.trigger_at_us)]
        assert not running, f"{send.delivery_id} decided while {running} may still be under way"
        self.sends.append(SendRecord(send))

    def tick(self, ms: int) -> None:
        self.now += ms * MS
        for r in self.sends:
            if self.now >= r.send.trigger_at_us + WINDOW_US:
                r.over = True

    def returnable(self) -> list[SendRecord]:
        return [r for r in self.sends if r.may_run_at(self.now)]

    # -- traffic

    @rule()
    def push(self) -> None:
        self.published += 1
        mid = f"m{self.published}"
        self.entries[mid] += 1
        self.apply(Enqueue(mid, "whatsapp", "15550001", "hi", self.now, self.now))

    @rule(ms=st.integers(1, 4000))
    def time_passes(self, ms: int) -> None:
        self.tick(ms)

    @precondition(lambda self: bool(self.returnable()))
    @rule(outcome=st.sampled_from([SendOutcome.ACCEPTED, SendOutcome.UNKNOWN, SendOutcome.REFUSED]),
          permanent=st.booleans(), ms=st.integers(0, 1500))
    def send_returns(self, outcome: SendOutcome, permanent: bool, ms: int) -> None:
        record = self.returnable()[0]
        self.now = min(self.now + ms * MS, record.send.trigger_at_us + WINDOW_US - 1)
        record.over = True
        s = record.send
        self.apply(SendReturned(s.incarnation, s.message.seq, s.attempt, outcome, self.now, s.cause,
                                permanent=permanent and outcome is SendOutcome.REFUSED))

    @precondition(lambda self: bool(self.sends))
    @rule(pick=st.integers(0, 10_000), status=st.sampled_from(["sent", "delivered", "read", "failed"]))
    def status_of_any_earlier_attempt(self, pick: int, status: str) -> None:
        """Late, duplicated, reordered: any attempt ever sent, any number of times."""
        record = self.sends[pick % len(self.sends)]
        s = record.send
        if status != "sent":
            record.over = True  # the platform has it: this call delivers nothing more
        self.apply(StatusUpdate(s.incarnation, s.message.seq, s.attempt, status, s.trigger_at_us, self.now,
                                f"wamid.{s.delivery_id}"))

    @precondition(lambda self: bool(self.timers))
    @rule(pick=st.integers(0, 10_000))
    def a_timer_fires(self, pick: int) -> None:
        """Any timer ever armed, at or after its due time (Cloud Tasks may run one twice)."""
        timer = self.timers[pick % len(self.timers)]
        if timer.due_at_us > self.now:
            self.tick((timer.due_at_us - self.now) // MS + 1)
        self.apply(TimerFired(timer.incarnation, timer.seq, timer.attempt, timer.due_at_us, self.now))

    @rule()
    def watchdog(self) -> None:
        self.tick(POLICY.watchdog_grace_ms + 1)
        self.apply(WatchdogSweep(self.now))

    # -- operators

    @rule()
    def pause(self) -> None:
        self.apply(Pause("ops", "look", self.now))

    @rule()
    def resume(self) -> None:
        self.apply(Resume("ops", "go", self.now))

    @rule(seq=st.integers(1, 8))
    def skip(self, seq: int) -> None:
        self.apply(Skip(seq, "ops", "not needed", self.now))

    @precondition(lambda self: bool(self.dead_letters))
    @rule(pick=st.integers(0, 100))
    def redrive(self, pick: int) -> None:
        kept = list(self.dead_letters.values())[pick % len(self.dead_letters)]
        self.apply(Redrive(kept.message.seq, "ops", "platform back", self.now, kept.message, kept.incarnation))

    # -- checks

    @invariant()
    def a_waiting_room_has_a_wake_up(self) -> None:
        flight = self.state.in_flight
        if flight is not None:
            assert any(t.seq == flight.message.seq and t.attempt == flight.attempt and t.due_at_us == flight.due_at_us
                       for t in self.timers), "in flight with no timer armed"

    def teardown(self) -> None:
        """Drain: resume, then let every send return accepted and every
        message be acked or time out; each entry must have ended once."""
        self.apply(Resume("ops", "drain", self.now))
        for _ in range(400):
            flight = self.state.in_flight
            if flight is None:
                break
            self.tick(1)
            if flight.phase is Phase.SENDING and self.returnable():
                self.send_returns(SendOutcome.ACCEPTED, False, 0)
            elif flight.phase in (Phase.SENT, Phase.UNKNOWN) and flight.deadline_us is not None:
                self.tick(max(0, (flight.deadline_us - self.now) // MS) + 1)
                self.apply(TimerFired(self.state.incarnation, flight.message.seq, flight.attempt, flight.due_at_us,
                                      max(self.now, flight.due_at_us)))
            else:
                self.tick(max(0, (flight.due_at_us - self.now) // MS) + 1)
                self.apply(TimerFired(self.state.incarnation, flight.message.seq, flight.attempt, flight.due_at_us,
                                      self.now))
        assert self.state.in_flight is None and not self.state.pending, "the room did not drain"
        assert self.ends == self.entries, (self.ends, self.entries)


OperatorsAndLateStatuses.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, derandomize=True, database=None,
    suppress_health_check=[HealthCheck.too_slow])
test_operators_and_late_statuses = OperatorsAndLateStatuses.TestCase
