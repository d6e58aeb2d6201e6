"""Preparation rules: which messages are prepared (the window behind the
head), their results and failures, and the head waiting for its own.

Decides preparation only; must not send or end a message except by the
PREPARE_POISON rule.
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType
from shared.room.effects import Decision, KeepDeadLetter, Prepare
from shared.room.inputs import (
    Prepared,
    PrepareFailed,
)
from shared.room.state import (
    PREPARE_PARK_REASON,
    IgnoreReason,
    InFlight,
    Phase,
    QueuedMessage,
    RoomState,
    Trigger,
)
from shared.room.transition import TransitionCore


class PreparationRules(TransitionCore):
    """Preparing messages ahead of their turn (media uploads)."""

    def preparation_window(self, state: RoomState) -> list[QueuedMessage]:
        """The messages whose preparation may run now: the head of line (in
        flight, or the first queued) and the `prepare_ahead` queued behind it."""
        if state.in_flight is not None:
            return [state.in_flight.message, *state.pending[:self.policy.prepare_ahead]]
        return list(state.pending[:self.policy.prepare_ahead + 1])

    def request_preparations(self, state: RoomState) -> RoomState:
        """Ask once for the preparation of every message of the window that
        needs one and was not asked for since its (re)entry, as its next
        preparation attempt (a number never used for it, so a task name never
        used before). Placeholders and parked messages wait (a redrive
        releases them)."""
        fresh = {m.seq: m.prep_attempt + 1 for m in self.preparation_window(state)
                 if m.needs_preparation and not m.preparation_asked and m.text is not None and not m.parked
                 and m.prep_failed is None}
        if not fresh:
            return state
        for seq, attempt in sorted(fresh.items()):
            self.effects.append(Prepare(state.room_id, state.incarnation, seq, attempt, self.now_us))

        def asked(m: QueuedMessage) -> QueuedMessage:
            return replace(m, prep_attempt=fresh[m.seq]) if m.seq in fresh else m

        flight = state.in_flight
        if flight is not None and flight.message.seq in fresh:
            flight = replace(flight, message=asked(flight.message))
        return replace(state, in_flight=flight, pending=tuple(asked(m) for m in state.pending))

    def wait_for_preparation(self, state: RoomState, msg: QueuedMessage, cause: str) -> RoomState:
        """The head of line holds the baton unsent until its preparation's
        result comes (PREPARING), with a timer at PREPARE_TIMEOUT_MS that asks
        for it again should the result never come."""
        self.log(EventType.PREPARING, msg,
                 reason=f"preparation attempt {max(msg.prep_floor + 1, msg.prep_attempt)} under way")
        due = self.now_us + self.policy.prepare_timeout_ms * 1000
        return self.arm(state, InFlight(msg, msg.next_attempt, self.now_us, Phase.PREPARING, due, cause))

    def poison(self, state: RoomState, msg: QueuedMessage) -> RoomState:
        """The queued head whose preparation was given up ends by PREPARE_POISON
        (`dead_letter`; `park` parks it at once when the preparation is given up)."""
        assert state.pending and state.pending[0] is msg
        if self.policy.prepare_poison == "park":
            parked = replace(msg, parked=f"{PREPARE_PARK_REASON}: {msg.prep_failed}")
            self.log(EventType.PARKED, parked, reason=parked.parked)
            return replace(state, pending=(parked, *state.pending[1:]))
        reason = f"{PREPARE_PARK_REASON}: {msg.prep_failed}"
        self.dead_letters.append(KeepDeadLetter(state.room_id, state.incarnation, msg, 0, reason))
        self.log(EventType.DEAD_LETTERED, msg, reason=reason)
        return replace(self.record_end(state, msg, EventType.DEAD_LETTERED, msg.attempts), pending=state.pending[1:])

    def ask_again_if_replay(self, message_id: str) -> None:
        """A redelivered push of a message whose preparation is asked for and
        not done asks for it again (same task name, so idempotent on the real
        service): its first delivery may have died before the task was made."""
        window = self.preparation_window(self.state)
        for m in window:
            if m.message_id == message_id and m.needs_preparation and m.preparation_asked and m.prep_failed is None:
                self.effects.append(Prepare(self.state.room_id, self.state.incarnation, m.seq, m.prep_attempt,
                                            self.now_us))

    def prepared(self, ev: Prepared) -> Decision:
        """A preparation's result: stored with its message (the first result
        wins). The head waiting for it (PREPARING) starts at once, unless the
        room is paused (it then goes back to the head of the queue)."""
        ids = {"seq": ev.seq, "attempt": ev.attempt}
        found = self.state.message(ev.seq) if ev.incarnation == self.state.incarnation else None
        if found is None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.NOT_HELD, **ids)
        msg, index = found
        if msg.prepared is not None or msg.prepare is None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.ALREADY_PREPARED, **ids)
        done = replace(msg, prepared=ev.media_id, prep_failed=None)
        if done.parked is not None and done.parked.startswith(PREPARE_PARK_REASON):
            done = replace(done, parked=None)  # parked for want of this result: it has come
        self.log(EventType.PREPARED, done, attempt=ev.attempt, provider_message_id=ev.media_id,
                 reason=f"attempt {ev.attempt} took {ev.took_ms:.0f} ms")
        state = self.put(self.state, done, index)
        flight = state.in_flight
        if index is None:
            assert flight is not None
            if flight.phase is not Phase.PREPARING:
                return self.done(state)
            self.cancel_pending_timer(state, flight)
            if state.paused is not None:
                return self.done(replace(state, in_flight=None, pending=(done, *state.pending)))
            return self.done(self.start(replace(state, in_flight=None), done, flight.attempt, Trigger.PREPARED,
                                        ev.idempotency_key))
        if flight is None and index == 0 and msg.parked is not None and done.parked is None:
            state = self.advance(state, Trigger.PREPARED, ev.idempotency_key)
        return self.done(state)

    def prepare_failed(self, ev: PrepareFailed) -> Decision:
        """A failed preparation attempt: retried after PREPARE_RETRY_BASE_MS x
        4^(n-1), until MAX_PREPARE_ATTEMPTS (or at once, for a permanent
        failure) the preparation is given up and PREPARE_POISON applies."""
        ids = {"seq": ev.seq, "attempt": ev.attempt}
        found = self.state.message(ev.seq) if ev.incarnation == self.state.incarnation else None
        if found is None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.NOT_HELD, **ids)
        msg, index = found
        if not msg.needs_preparation or msg.prep_failed is not None:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.ALREADY_PREPARED, **ids)
        if ev.attempt != msg.prep_attempt:
            return self.ignore(EventType.PREPARE_IGNORED, IgnoreReason.STALE_PREPARE_ATTEMPT, **ids)
        return self.done(self.preparation_failed(msg, index, ev.error, ev.permanent, ev.idempotency_key))

    def preparation_failed(self, msg: QueuedMessage, index: int | None, error: str, permanent: bool,
                           cause: str) -> RoomState:
        """Attempt `msg.prep_attempt` of `msg`'s preparation failed (or never
        answered): ask again after a backoff, or give the preparation up."""
        state = self.state
        attempt = msg.prep_attempt
        tries = attempt - msg.prep_floor  # since its (re)entry: what MAX_PREPARE_ATTEMPTS bounds
        if permanent or tries >= self.policy.max_prepare_attempts:
            why = f"{error} (attempt {attempt}{', permanent' if permanent else ''})"
            self.log(EventType.PREPARE_FAILED, msg, attempt=attempt, error_title=error[:300],
                     reason="given up: " + ("permanent" if permanent else f"MAX_PREPARE_ATTEMPTS={tries}"))
            return self.give_up_preparation(state, msg, index, why, cause)
        delay_ms = self.policy.prepare_retry_base_ms * 4 ** (tries - 1)
        retry_at = self.now_us + delay_ms * 1000
        self.log(EventType.PREPARE_FAILED, msg, attempt=attempt, error_title=error[:300],
                 reason=f"retry as attempt {attempt + 1} in {delay_ms} ms")
        again = replace(msg, prep_attempt=attempt + 1)
        self.effects.append(Prepare(state.room_id, state.incarnation, msg.seq, attempt + 1, retry_at))
        state = self.put(state, again, index)
        flight = state.in_flight
        if index is None and flight is not None and flight.phase is Phase.PREPARING:
            wake = max(flight.due_at_us, retry_at + self.policy.prepare_timeout_ms * 1000)
            state = self.wait_until(state, flight, wake)
        return state

    def give_up_preparation(self, state: RoomState, msg: QueuedMessage, index: int | None, why: str,
                            cause: str) -> RoomState:
        """PREPARE_POISON for a message whose preparation was given up: `park`
        parks it at once (it blocks its room when it reaches the head);
        `dead_letter` ends it when it reaches the head (at once if it is the
        head), so messages still end in their order."""
        failed = replace(msg, prep_failed=why[:500])
        if index is not None:
            if self.policy.prepare_poison == "park":
                failed = replace(failed, parked=f"{PREPARE_PARK_REASON}: {why}"[:500])
                self.log(EventType.PARKED, failed, reason=failed.parked)
            return self.put(state, failed, index)
        flight = state.in_flight
        assert flight is not None
        self.cancel_pending_timer(state, flight)
        state = replace(state, in_flight=None, pending=(failed, *state.pending))
        if state.paused is not None:
            return state
        return self.advance(state, Trigger.DEAD_LETTERED, cause)
