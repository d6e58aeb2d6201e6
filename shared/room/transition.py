"""The primitives every rule uses: start a message, advance the baton, end a
message, arm a timer, log, and build the decision.

Pure: effects and log lines are data until the service runs them after the
commit. Must not hold any rule of its own concern (those are in entry,
flight, preparation and operator_actions).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shared.events import DeliveryEvent, EventType, utc_iso
from shared.room.codec import make_delivery_id
from shared.room.effects import CancelTimer, Decision, Effect, KeepDeadLetter, Prepare, ScheduleTimer, Send
from shared.room.pacing import bucket_now, token_ready_at_us
from shared.room.state import Ended, IgnoreReason, InFlight, Phase, Policy, QueuedMessage, RoomState, Trigger
from shared.senders import sent_from


class TransitionCore:
    """One `decide` call being applied: the room before it, and the effects
    and log events it accumulates. The rules of each concern are mixins on
    it (shared/room/decide.py puts them together)."""

    def __init__(self, state: RoomState, policy: Policy, component: str, now_us: int) -> None:
        self.state = state
        self.policy = policy
        self.component = component
        self.now_us = now_us
        self.effects: list[Effect] = []
        self.events: list[DeliveryEvent] = []
        self.dead_letters: list[KeepDeadLetter] = []

    def log(self, event: EventType, msg: QueuedMessage | None = None, **fields: object) -> None:
        if msg is not None:
            fields.setdefault("seq", msg.seq)
            fields.setdefault("message_id", msg.message_id)
            fields.setdefault("provider", msg.provider)
        self.events.append(DeliveryEvent(event=event, ts=utc_iso(self.now_us), component=self.component,
                                         room_id=self.state.room_id, **fields))  # type: ignore[arg-type]

    def done(self, state: RoomState | None, refused: str | None = None) -> Decision:
        if state is not None:
            state = self.request_preparations(state)
        asked: set[tuple[int, int]] = set()
        effects = []
        for effect in self.effects:  # one request per preparation attempt, however many rules asked
            if isinstance(effect, Prepare):
                if (effect.seq, effect.attempt) in asked:
                    continue
                asked.add((effect.seq, effect.attempt))
            effects.append(effect)
        return Decision(state, tuple(effects), tuple(self.events), refused, tuple(self.dead_letters))

    def ignore(self, event: EventType, reason: IgnoreReason, **fields: object) -> Decision:
        """Log an event that changes nothing, keeping the current state."""
        self.log(event, reason=str(reason), **fields)
        return self.done(None)

    def arm(self, state: RoomState, flight: InFlight) -> RoomState:
        self.effects.append(ScheduleTimer(state.room_id, state.incarnation, flight.message.seq, flight.attempt,
                                          flight.due_at_us))
        return replace(state, in_flight=flight)

    def start(self, state: RoomState, msg: QueuedMessage, attempt: int, trigger: Trigger, cause: str) -> RoomState:
        """Give `msg` the baton as `attempt`: arm its first timer, then send it;
        or, when the room's pair-rate bucket has no token, wait for one
        (PACED, a timer due when it comes) without sending."""
        interval_ms, burst = self.policy.pace(msg.provider)
        if interval_ms:
            tokens = bucket_now(state.pace_tokens, state.pace_at_us, self.now_us, interval_ms, burst)
            if tokens < 1.0:
                ready = token_ready_at_us(tokens, self.now_us, interval_ms)
                self.log(EventType.PACED, msg, attempt=attempt,
                         reason=f"pair rate: next token in {(ready - self.now_us) / 1000:.0f} ms")
                state = replace(state, pace_tokens=tokens, pace_at_us=self.now_us)
                return self.arm(state, InFlight(msg, attempt, self.now_us, Phase.PACED, ready, cause))
            state = replace(state, pace_tokens=tokens - 1.0, pace_at_us=self.now_us)
        due = self.now_us + (self.policy.ack_timeout_ms + self.policy.first_timer_slack_ms) * 1000
        number = sent_from(msg.sender, self.policy.whatsapp_numbers) if msg.provider == "whatsapp" else None
        flight = InFlight(msg, attempt, self.now_us, Phase.SENDING, due, cause, number=number)
        state = self.arm(state, flight)
        self.effects.append(Send(
            state.room_id, state.incarnation, msg, attempt,
            make_delivery_id(state.room_id, state.incarnation, msg.seq, attempt, self.now_us),
            trigger, self.now_us, self.now_us + self.policy.send_start_deadline_ms * 1000, cause, number))
        return state

    def advance(self, state: RoomState, trigger: Trigger, cause: str) -> RoomState:
        """With nothing in flight, start the head of the queue unless it is parked."""
        assert state.in_flight is None
        if not state.pending or state.paused is not None:
            return state  # paused: the pause was logged; nothing starts until the resume
        while state.pending and state.pending[0].prep_failed is not None and not state.pending[0].parked:
            state = self.poison(state, state.pending[0])
        if not state.pending:
            return state
        head = state.pending[0]
        if head.parked:
            self.log(EventType.BLOCKED, head, reason=head.parked)
            return state
        state = replace(state, pending=state.pending[1:])
        if head.needs_preparation:
            return self.wait_for_preparation(state, head, cause)
        return self.start(state, head, head.next_attempt, trigger, cause)

    def record_end(self, state: RoomState, msg: QueuedMessage, outcome: EventType, attempts: int = 0) -> RoomState:
        """Count the end and remember it (de-duplication, late statuses); a
        dead letter also keeps the attempt numbers it took (`attempts`)."""
        counts = dict(state.counts)
        counts[str(outcome)] = counts.get(str(outcome), 0) + 1
        kept = attempts if outcome == EventType.DEAD_LETTERED else 0
        ended = (*state.ended, Ended(msg.seq, msg.message_id, str(outcome), kept))[-self.policy.dedup_retention:]
        return replace(state, counts=counts, ended=ended)

    def cancel_pending_timer(self, state: RoomState, flight: InFlight) -> None:
        """An attempt ending before its wake-up leaves a timer task that can
        only be ignored: ask for it to be deleted (after the next send)."""
        if flight.due_at_us > self.now_us:
            self.effects.append(CancelTimer(state.room_id, state.incarnation, flight.message.seq, flight.attempt,
                                            flight.due_at_us))

    def end(self, state: RoomState, outcome: EventType, trigger: Trigger, cause: str, **fields: object) -> RoomState:
        """End the in-flight message as `outcome` and pass the baton to the head
        of the queue, if any (same transaction: no lost wake-up)."""
        flight = state.in_flight
        assert flight is not None
        # What its outcome message tells (shared/outcomes.py): the platform's id, the publish time.
        fields.setdefault("provider_message_id", flight.provider_message_id)
        fields.setdefault("published_at", utc_iso(flight.message.published_at_us))
        self.log(outcome, flight.message, attempt=flight.attempt, **fields)
        self.cancel_pending_timer(state, flight)
        state = replace(self.record_end(state, flight.message, outcome, flight.attempt), in_flight=None)
        return self.advance(state, trigger, cause)

    def release(self, state: RoomState, trigger: Trigger, cause: str) -> RoomState:
        """Pass the baton of an in-flight message that has already ended
        (skipped while its send could still go out) to the head of the queue."""
        assert state.in_flight is not None
        self.cancel_pending_timer(state, state.in_flight)
        return self.advance(replace(state, in_flight=None), trigger, cause)

    def give_up(self, state: RoomState, reason: str, cause: str) -> RoomState:
        flight = state.in_flight
        assert flight is not None
        self.dead_letters.append(KeepDeadLetter(state.room_id, state.incarnation,
                                                replace(flight.message, attempts=flight.attempt), flight.attempt,
                                                reason))
        return self.end(state, EventType.DEAD_LETTERED, Trigger.DEAD_LETTERED, cause, reason=reason)

    def resend(self, state: RoomState, trigger: Trigger, reason: str, cause: str) -> RoomState:
        """Send the in-flight message again as the next attempt, or dead-letter
        it once `max_send_attempts` is used up."""
        flight = state.in_flight
        assert flight is not None
        tries = self.tries(flight)
        if tries >= self.policy.max_send_attempts:
            return self.give_up(state, f"no confirmed send after {tries} attempts; last: {reason}", cause)
        self.log(EventType.RESENT, flight.message, attempt=flight.attempt + 1, trigger=str(trigger), reason=reason)
        return self.start(state, flight.message, flight.attempt + 1, trigger, cause)

    @staticmethod
    def tries(flight: InFlight) -> int:
        """Sends of the in-flight message since its (re)entry: what
        MAX_SEND_ATTEMPTS bounds (a redrive starts a new count, never a new
        attempt number)."""
        return flight.attempt - flight.message.attempt_floor

    def current(self, incarnation: int, seq: int, attempt: int | None = None) -> InFlight | None:
        """The in-flight attempt if it is (incarnation, seq[, attempt]), else None."""
        flight = self.state.in_flight
        if flight is None or incarnation != self.state.incarnation or flight.message.seq != seq:
            return None
        if attempt is not None and flight.attempt != attempt:
            return None
        return flight

    def rearm_if_replay(self, key: str) -> None:
        """A redelivered request that started the in-flight attempt re-arms its
        timer and asks again for the preparations of the window it slid (same
        task names, so idempotent on the real service): its first delivery
        may have died after the commit and before they were made."""
        flight = self.state.in_flight
        if flight is not None and flight.idempotency_key == key:
            self.effects.append(ScheduleTimer(self.state.room_id, self.state.incarnation, flight.message.seq,
                                              flight.attempt, flight.due_at_us))
            # The same request slid the preparation window: the prepare tasks it
            # asked for may not have been made either (same names: idempotent).
            for m in self.preparation_window(self.state):
                if m.needs_preparation and m.preparation_asked and m.prep_failed is None and not m.parked:
                    self.effects.append(Prepare(self.state.room_id, self.state.incarnation, m.seq, m.prep_attempt,
                                                self.now_us))

    def wait_until(self, state: RoomState, flight: InFlight, wake_us: int, **changes: Any) -> RoomState:
        """Keep waiting: the attempt's wake-up moves to `wake_us` (a new timer)."""
        flight = replace(flight, due_at_us=wake_us, **changes)
        if wake_us > self.now_us:
            self.log(EventType.TIMER_REARMED, flight.message, attempt=flight.attempt, reason=str(flight.phase))
        return self.arm(state, flight)

    def with_incarnation(self) -> RoomState:
        """The state, with an incarnation if this event creates the document."""
        if self.state.incarnation:
            return self.state
        return replace(self.state, incarnation=self.now_us)

    def put(self, state: RoomState, msg: QueuedMessage, index: int | None) -> RoomState:
        """`state` with message `msg` replacing the one at `index` (None: in flight)."""
        if index is None:
            assert state.in_flight is not None
            return replace(state, in_flight=replace(state.in_flight, message=msg))
        return replace(state, pending=(*state.pending[:index], msg, *state.pending[index + 1:]))
