"""Entry rules: a push (enqueue), producer sequence and its gap timer,
back-pressure placeholders, and parking of dead-letter copies.

Decides how a message enters its room; must not touch sends' outcomes,
statuses or timers of the in-flight message (flight.py).
"""

from __future__ import annotations

from dataclasses import replace

from shared.events import EventType, utc_iso
from shared.providers.registry import has_numbers
from shared.room.context import (
    Transition,
    log,
    with_incarnation,
)
from shared.room.effects import Decision, ScheduleTimer
from shared.room.inputs import (
    Enqueue,
    Park,
    TimerFired,
)
from shared.room.state import (
    IgnoreReason,
    QueuedMessage,
    RoomState,
    Trigger,
)
from shared.room.transition import advance, done, ignore, rearm_if_replay
from shared.room.window import ask_again_if_replay
from shared.senders import sent_from


def enqueue(t: Transition, ev: Enqueue) -> Decision:
    """A push: fills its placeholder, or is a duplicate, or enters the
    queue (held outside it while its producer sequence is ahead), or is
    refused when the room is full; the head starts if nothing is in flight."""
    for i, m in enumerate(t.state.pending):
        if m.message_id == ev.message_id and m.text is None:
            return done(t, fill_placeholder(t, t.state, i, ev))
    if ev.message_id in t.state.message_ids() or any(e.message_id == ev.message_id for e in t.state.ended):
        rearm_if_replay(t, ev.idempotency_key)
        ask_again_if_replay(t, ev.message_id)
        return ignore(t, EventType.DUPLICATE_IGNORED, IgnoreReason.DUPLICATE_PUSH,
                      message_id=ev.message_id, provider=ev.provider)
    state = _after_awaited(t, ev)
    msg = QueuedMessage(state.next_seq, ev.message_id, ev.provider, ev.recipient, ev.text,
                        ev.published_at_us, t.now_us, media_kind=ev.media_kind, media_link=ev.media_link,
                        prepare=ev.prepare, sequence=ev.sequence, sender=sender_for(t, state, ev),
                        payload=ev.payload)
    ahead = ev.sequence is not None and ev.sequence > state.expected_sequence
    if ahead:
        # Its producer's earlier messages have not come yet: it waits outside the queue.
        msg = replace(msg, seq=0)
        candidate = replace(state, sequence_held=tuple(sorted((*state.sequence_held, msg), key=lambda m: m.sequence or 0)))
    else:
        candidate = replace(state, next_seq=state.next_seq + 1, pending=(*state.pending, msg))
    full = _full(t, state, candidate)
    if full is not None:
        return refuse(t, state, ev, full)
    if ahead:
        return done(t, _held_for_sequence(t, state, candidate, msg))
    late = ev.sequence is not None and ev.sequence < state.expected_sequence
    log(t, EventType.ENQUEUED, msg, published_at=utc_iso(ev.published_at_us),
        reason=f"producer sequence {ev.sequence} came after its gap was given up" if late else None)
    if ev.sequence == state.expected_sequence:
        candidate = admit_sequence_held(t, replace(candidate, expected_sequence=state.expected_sequence + 1))
    if candidate.in_flight is None and candidate.pending and candidate.pending[0] is msg:
        candidate = advance(t, candidate, Trigger.ENQUEUE, ev.idempotency_key)
    return done(t, candidate)


def _after_awaited(t: Transition, ev: Enqueue) -> RoomState:
    """The room a new push enters: with an incarnation, and a placeholder
    for each push it awaited (refused while full) other than this one: a
    later message of the room arrived, so Pub/Sub, which delivers one
    message of an ordering key at a time, has given up on them. Each gets
    its place now, ahead of this message."""
    state = with_incarnation(t)
    awaited = [a for a in state.awaiting if a[0] != ev.message_id]
    if len(awaited) < len(state.awaiting):
        state = replace(state, awaiting=tuple(awaited))  # it got in after all
    return replace(hold_places(t, state, tuple(awaited), ev.provider, ev.recipient), awaiting=())


def _full(t: Transition, state: RoomState, candidate: RoomState) -> str | None:
    """Why the room cannot take one more message (`candidate` is the room
    with it), or None. Placeholders are not counted: they are tiny and
    never refused."""
    kept = sum(m.text is not None for m in state.pending) + (state.in_flight is not None) + len(state.sequence_held)
    if kept >= t.policy.max_queued_messages:
        return f"room holds {kept} messages (MAX_QUEUED_MESSAGES={t.policy.max_queued_messages})"
    if t.policy.room_bytes is not None and t.policy.room_bytes(candidate) > t.policy.max_room_bytes:
        return f"room document would exceed MAX_ROOM_BYTES={t.policy.max_room_bytes}"
    return None


def _held_for_sequence(t: Transition, state: RoomState, candidate: RoomState, msg: QueuedMessage) -> RoomState:
    """`msg` waits outside the queue for its producer's earlier sequence
    numbers (logged); the gap timer starts if none runs."""
    sequence = msg.sequence or 0
    log(t, EventType.SEQUENCE_HELD, msg,
        reason=f"producer sequence {sequence} waits for {state.expected_sequence}"
               f"{'' if sequence == state.expected_sequence + 1 else f'..{sequence - 1}'}")
    return start_gap_timer(t, candidate) if candidate.gap_due_us is None else candidate


def sender_for(t: Transition, state: RoomState, ev: Enqueue | Park) -> str | None:
    """The WhatsApp number a message entering the room is sent from: the
    producer's `sender` attribute; else the number the room's latest
    WhatsApp message (in flight, queued or sequence-held) goes out from
    (a recipient sees one conversation, in order, from one number, even
    when a number is added meanwhile): its `sender`, or, for one stored
    with none (kept while the deployment had one number), the number
    `sent_from` sends it from; else the room's number by rendezvous hash
    (`default_sender`). None for other platforms (one sender each)."""
    if not has_numbers(ev.provider):
        return None
    if ev.sender is not None:
        return ev.sender
    numbers = t.policy.whatsapp_numbers
    messages = (*([state.in_flight.message] if state.in_flight is not None else []), *state.pending, *state.sequence_held)
    for m in reversed(messages):
        if m.provider == ev.provider and m.text is not None:  # a placeholder's number is not known yet
            # One number: every message is its (None); several: the one it goes out from.
            return sent_from(m.sender, numbers) if len(numbers) > 1 else m.sender
    return ev.default_sender


def fill_placeholder(t: Transition, state: RoomState, i: int, ev: Enqueue) -> RoomState:
    """The push of placeholder `state.pending[i]` came after all. Its place
    was kept and nothing after it was sent, so it goes in its turn; unless
    its producer `sequence` is ahead of the room's: then it leaves the
    place (logged `sequence_held` under the placeholder's seq) and waits
    outside the queue like any message whose predecessors have not come."""
    m = state.pending[i]
    # A lower producer sequence queued behind the place (its publishers
    # use no one ordering key, so the place says nothing): the place is
    # given up too, and it enters at the tail (simulation seed 39).
    jumps = ev.sequence is not None and any(p.sequence is not None and p.sequence < ev.sequence
                                            for p in state.pending[i + 1:])
    if ev.sequence is not None and (ev.sequence > state.expected_sequence or jumps):
        state = _place_given_up(t, state, i, ev, ev.sequence)
    else:
        filled = replace(m, **ev.content, parked=None, sender=sender_for(t, state, ev))
        late = ev.sequence is not None and ev.sequence < state.expected_sequence
        log(t, EventType.ENQUEUED, filled, published_at=utc_iso(ev.published_at_us),
            reason=f"producer sequence {ev.sequence} came after its gap was given up" if late else None)
        state = replace(state, pending=(*state.pending[:i], filled, *state.pending[i + 1:]))
        if ev.sequence is not None and ev.sequence == state.expected_sequence:
            state = admit_sequence_held(t, replace(state, expected_sequence=state.expected_sequence + 1))
    if state.in_flight is None and i == 0:
        state = advance(t, state, Trigger.ENQUEUE, ev.idempotency_key)
    return state


def _place_given_up(t: Transition, state: RoomState, i: int, ev: Enqueue, sequence: int) -> RoomState:
    """`fill_placeholder` when the message cannot take its placeholder's
    place (`state.pending[i]`, logged `sequence_held` under its seq): its
    producer `sequence` is ahead of the room's (it waits outside the queue,
    under the gap timer), or a lower sequence is queued behind the place
    (it enters at the tail, as a push that never had a place)."""
    m = state.pending[i]
    rest = (*state.pending[:i], *state.pending[i + 1:])
    ahead = sequence > state.expected_sequence
    log(t, EventType.SEQUENCE_HELD, m,
        reason=f"producer sequence {sequence} " + (f"waits for {state.expected_sequence}" if ahead else
                                                   "is behind a lower sequence queued after it")
               + f": its placeholder's place (seq {m.seq}) is given up")
    waiting = replace(m, **ev.content, parked=None, seq=0, sender=sender_for(t, state, ev))
    if ahead:
        state = replace(state, pending=rest, sequence_held=tuple(sorted((*state.sequence_held, waiting), key=lambda h: h.sequence or 0)))
        return state if state.gap_due_us is not None else start_gap_timer(t, state)
    entered = replace(waiting, seq=state.next_seq, enqueued_at_us=t.now_us)
    late = sequence < state.expected_sequence
    log(t, EventType.ENQUEUED, entered, published_at=utc_iso(ev.published_at_us),
        reason=f"producer sequence {sequence} came after its gap was given up" if late else None)
    state = replace(state, pending=(*rest, entered), next_seq=state.next_seq + 1)
    return state if late else admit_sequence_held(t, replace(state, expected_sequence=state.expected_sequence + 1))


def start_gap_timer(t: Transition, state: RoomState) -> RoomState:
    """Wait at most SEQUENCE_GAP_TIMEOUT_MS for the missing producer
    sequence numbers: a timer task (seq 0, attempt 0) due then."""
    due = t.now_us + t.policy.sequence_gap_timeout_ms * 1000
    t.effects.append(ScheduleTimer(state.room_id, state.incarnation, 0, 0, due))
    return replace(state, gap_due_us=due)


def admit_sequence_held(t: Transition, state: RoomState) -> RoomState:
    """Held messages whose turn has come (their `sequence` is the next
    expected, or below it) enter the queue in sequence order, with seqs.
    If some still wait, a new gap starts now (its own timer)."""
    admitted = 0
    while state.sequence_held and (state.sequence_held[0].sequence or 0) <= state.expected_sequence:
        admitted += 1
        m = state.sequence_held[0]
        entered = replace(m, seq=state.next_seq, enqueued_at_us=t.now_us)
        log(t, EventType.ENQUEUED, entered, published_at=utc_iso(m.published_at_us))
        state = replace(state, sequence_held=state.sequence_held[1:], next_seq=state.next_seq + 1,
                        expected_sequence=max(state.expected_sequence, (m.sequence or 0) + 1),
                        pending=(*state.pending, entered))
    if not state.sequence_held:
        return replace(state, gap_due_us=None)
    # The gap waited on is filled and another remains: it is timed from now.
    return start_gap_timer(t, state) if admitted or state.gap_due_us is None else state


def gap_timer(t: Transition, ev: TimerFired) -> Decision:
    """The gap timer: past SEQUENCE_GAP_TIMEOUT_MS, the missing producer
    sequence numbers are given up (logged), the held messages enter the
    queue, and the room moves on."""
    state = t.state
    if ev.incarnation != state.incarnation or state.gap_due_us is None or not state.sequence_held \
            or ev.due_at_us < state.gap_due_us:
        return ignore(t, EventType.TIMEOUT_IGNORED, IgnoreReason.SUPERSEDED_TIMER, seq=0)
    if t.now_us < state.gap_due_us:
        t.effects.append(ScheduleTimer(state.room_id, state.incarnation, 0, 0, state.gap_due_us))
        return done(t, state)
    return done(t, give_up_gap(t, state, ev.idempotency_key))


def give_up_gap(t: Transition, state: RoomState, cause: str) -> RoomState:
    first = state.sequence_held[0].sequence or 0
    missing = f"{state.expected_sequence}" + ("" if first == state.expected_sequence + 1 else f"..{first - 1}")
    log(t, EventType.SEQUENCE_GAP, None, reason=f"producer sequence {missing} missing after "
                                                  f"{t.policy.sequence_gap_timeout_ms} ms: given up")
    state = admit_sequence_held(t, replace(state, expected_sequence=first, gap_due_us=None))
    if state.in_flight is None:
        state = advance(t, state, Trigger.ENQUEUE, cause)
    return state


def refuse(t: Transition, state: RoomState, ev: Enqueue, reason: str) -> Decision:
    """Push back on a full room, remembering the message's place (written
    once: a redelivery of the same refused push writes nothing)."""
    log(t, EventType.BACKPRESSURE, None, message_id=ev.message_id, provider=ev.provider, reason=reason)
    marked = replace(state, awaiting=(*state.awaiting, (ev.message_id, ev.published_at_us)))
    return done(t, None if marked == t.state else marked, refused=reason)


def hold_places(t: Transition, state: RoomState, awaited: tuple[tuple[str, int], ...], provider: str,
                recipient: str) -> RoomState:
    """Placeholders, in order, for awaited pushes that Pub/Sub has given up
    on: each keeps its message's place until its dead-letter copy fills it."""
    for mid, pub in awaited:
        state = place(t, state, QueuedMessage(
            state.next_seq, mid, provider, recipient, None, pub, t.now_us,
            parked="refused while the room was full and dead-lettered by Pub/Sub; "
                   "its copy from the dead-letter topic fills this place"))
    return state


def place(t: Transition, state: RoomState, msg: QueuedMessage) -> RoomState:
    """Append a parked message (or placeholder) to the queue with the next seq."""
    log(t, EventType.PARKED, msg, reason=msg.parked)
    return replace(state, next_seq=state.next_seq + 1, pending=(*state.pending, msg))


def park(t: Transition, ev: Park) -> Decision:
    """A dead-letter copy (a push Pub/Sub gave up on): fills its placeholder
    (parked), or is a duplicate, or is parked at its place (at the tail if
    its room never saw it); the room blocks on it when it is the head."""
    state = t.state
    for i, m in enumerate(state.pending):
        if m.message_id == ev.message_id:
            if m.text is not None:
                return ignore(t, EventType.DUPLICATE_IGNORED, IgnoreReason.DUPLICATE_PUSH,
                              message_id=ev.message_id, provider=ev.provider)
            filled = replace(m, **ev.content, parked=ev.reason, sender=sender_for(t, state, ev))
            log(t, EventType.PARKED, filled, reason=ev.reason)
            state = replace(state, pending=(*state.pending[:i], filled, *state.pending[i + 1:]))
            return done(t, sequence_came(t, state, ev.sequence))
    if ev.message_id in state.message_ids() or any(e.message_id == ev.message_id for e in state.ended):
        # Pub/Sub dead-letters best-effort, sometimes more than once, and a
        # push may have got in on a late retry.
        return ignore(t, EventType.DUPLICATE_IGNORED, IgnoreReason.DUPLICATE_PUSH,
                      message_id=ev.message_id, provider=ev.provider)
    state = with_incarnation(t)
    reason = _park_reason(state, ev)
    # Pushes awaited before this one came earlier in the room's order
    # (Pub/Sub delivers a key's messages one at a time): their places come
    # first. Those awaited after it stay awaited.
    ids = [mid for mid, _ in state.awaiting]
    cut = ids.index(ev.message_id) if ev.message_id in ids else len(ids)
    before, after = state.awaiting[:cut], state.awaiting[cut + 1:]
    was_empty = state.in_flight is None and not state.pending
    state = replace(hold_places(t, state, before, ev.provider, ev.recipient), awaiting=after)
    state = place(t, state, QueuedMessage(state.next_seq, ev.message_id, ev.provider, ev.recipient,
                                          ev.text, ev.published_at_us, t.now_us, parked=reason,
                                          media_kind=ev.media_kind, media_link=ev.media_link,
                                          prepare=ev.prepare, sequence=ev.sequence,
                                          sender=sender_for(t, state, ev), payload=ev.payload))
    state = sequence_came(t, state, ev.sequence)
    if was_empty:
        state = advance(t, state, Trigger.ENQUEUE, ev.idempotency_key)  # logs `blocked`
    return done(t, state)


def _park_reason(state: RoomState, ev: Park) -> str:
    """Why a dead-letter copy is parked: Pub/Sub's reason, and, if it was
    refused without a marker (Firestore unreachable or contended for the
    whole retry budget), that messages published after it may already have
    been sent (it is parked at the tail)."""
    if not any(mid == ev.message_id for mid, _ in state.awaiting) and state.next_seq > 1:
        return ev.reason + "; it was never seen by its room, so later messages may have been sent before it"
    return ev.reason


def sequence_came(t: Transition, state: RoomState, sequence: int | None) -> RoomState:
    """A message with producer `sequence` took its place (parked counts:
    it holds its place): if it is the one the room expects, the next is
    expected and the held ones whose turn has come enter, as for a push
    (no false gap, no wait for the gap timer)."""
    if sequence is None or sequence != state.expected_sequence:
        return state
    return admit_sequence_held(t, replace(state, expected_sequence=state.expected_sequence + 1))
