"""The room's pair-rate bucket (Policy.pacing): property tests over random
rates, bursts and ack latencies, through `decide` itself."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.room import (
    Enqueue,
    Phase,
    Policy,
    RoomState,
    Send,
    SendOutcome,
    SendReturned,
    StatusUpdate,
    TimerFired,
    bucket_now,
    decide,
    token_ready_at_us,
)

T0 = 1_700_000_000_000_000
MS = 1000


def run(interval_ms: int, burst: int, arrivals_ms: list[int], ack_ms: list[int],
        paced: list[bool] | None = None, waits: list[float] | None = None) -> tuple[list[int], list[float]]:
    """Drive one WhatsApp room: messages arrive at T0 + arrivals_ms, each send
    is accepted 1 ms later and acked `ack_ms` after; PACED waits end by their
    timer at its due time. Returns the send times (us) and the bucket's tokens
    left right after each send; fills `paced` (whether each send had waited
    for its token) and `waits` (the bucket's tokens whenever the head was made
    to wait)."""
    policy = Policy(ack_timeout_ms=600_000, send_timeout_ms=1000, send_start_deadline_ms=1000,
                    pacing=(("whatsapp", interval_ms, burst),), max_queued_messages=1000)
    state = RoomState("r1")
    sends: list[int] = []
    left: list[float] = []
    # Pending inputs: (time, order, event factory).
    inputs: list[tuple[int, int, object]] = [(T0 + a * MS, i, ("push", i)) for i, a in enumerate(sorted(arrivals_ms))]
    order = len(inputs)
    while inputs:
        inputs.sort(key=lambda x: (x[0], x[1]))
        at, _, what = inputs.pop(0)
        kind = what[0]
        if kind == "push":
            event = Enqueue(f"m{what[1]}", "whatsapp", "15550001", "hi", at, at)
        elif kind == "returned":
            event = SendReturned(state.incarnation, what[1], what[2], SendOutcome.ACCEPTED, at, "c")
        elif kind == "ack":
            event = StatusUpdate(state.incarnation, what[1], what[2], "delivered", at, at)
        else:
            event = TimerFired(state.incarnation, what[1], what[2], what[3], at)
        d = decide(state, event, policy, "test")
        state = d.state if d.state is not None else state
        if waits is not None and any(str(e.event) == "paced" for e in d.events):
            waits.append(state.pace_tokens)
        for effect in d.effects:
            if isinstance(effect, Send):
                sends.append(at)
                if paced is not None:
                    paced.append(str(effect.trigger) == "paced")
                left.append(state.pace_tokens if state.pace_tokens is not None else float(burst))
                order += 1
                inputs.append((at + MS, order, ("returned", effect.message.seq, effect.attempt)))
                order += 1
                inputs.append((at + MS + ack_ms[len(sends) % len(ack_ms)] * MS, order,
                               ("ack", effect.message.seq, effect.attempt)))
        flight = state.in_flight
        if flight is not None and flight.phase is Phase.PACED and not any(w[2][0] == "timer" for w in inputs):
            order += 1
            inputs.append((flight.due_at_us, order, ("timer", flight.message.seq, flight.attempt, flight.due_at_us)))
    return sends, left


@settings(max_examples=150, deadline=None)
@given(interval_ms=st.integers(50, 10_000), burst=st.integers(1, 12),
       arrivals_ms=st.lists(st.integers(0, 20_000), min_size=1, max_size=40),
       ack_ms=st.lists(st.integers(1, 3000), min_size=1, max_size=10))
def test_sends_never_exceed_the_rate_and_never_wait_while_a_token_and_a_message_are_there(
        interval_ms, burst, arrivals_ms, ack_ms):
    paced: list[bool] = []
    waits: list[float] = []
    sends, left = run(interval_ms, burst, arrivals_ms, ack_ms, paced, waits)
    assert len(sends) == len(arrivals_ms)  # every message went out
    # Never above the rate over any window: k sends within [t_i, t_j] need burst + (t_j - t_i) / interval tokens.
    for i in range(len(sends)):
        for j in range(i, len(sends)):
            assert j - i + 1 <= burst + (sends[j] - sends[i]) / (interval_ms * MS) + 1e-9
    # Never idle: the head is made to wait only when no whole token is there,
    # and a send that waited went at the first moment its token was whole (the
    # us rounding of the timer leaves at most a sliver over).
    assert all(t < 1.0 for t in waits)
    assert all(t >= -1e-9 for t in left)
    assert all(left[k] < 1e-3 for k in range(len(sends)) if paced[k])


def test_a_paced_head_goes_out_exactly_when_its_token_is_ready():
    # Burst 2, one token per second: the third of three messages waits for its token.
    sends, left = run(1000, 2, [0, 0, 0], [10])
    assert len(sends) == 3
    # m1 at T0 (bucket full), m2 after m1's ack (11 ms), m3 when the bucket holds a whole token again.
    assert sends[0] == T0 and sends[1] == T0 + 11 * MS
    tokens_after_m2 = left[1]
    assert sends[2] == token_ready_at_us(tokens_after_m2, sends[1], 1000)
    assert abs(left[2]) < 1e-6  # taken the moment it was whole


def test_the_bucket_refills_to_its_burst_and_no_further():
    assert bucket_now(None, 0, T0, 6000, 45) == 45.0
    assert bucket_now(0.0, T0, T0 + 3000 * MS, 6000, 45) == 0.5
    assert bucket_now(44.5, T0, T0 + 60_000 * MS, 6000, 45) == 45.0
    assert token_ready_at_us(0.5, T0, 6000) == T0 + 3000 * MS
    assert token_ready_at_us(1.0, T0, 6000) == T0
