"""Facts written outside the room's transaction (issue 45, item 3): a
WhatsApp send's acceptance and the platform's record of a send (an echo, a
WhatsApp `sent`), written blind into the room document, are read back as
room events (`AcceptanceRecorded`, `EchoRecorded`) that `decide` applies
through their own rows of `RULES`, before the event being decided
(`room_as_read`); the codec only decodes them. The rows decide exactly what
the fold in the codec did before: checked row by row and against a copy of
that fold. Pure: no I/O."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.room import (
    RULE_INDEX,
    RULES,
    WITHOUT_ROOM,
    AcceptanceRecorded,
    EchoRecorded,
    Enqueue,
    Park,
    Pause,
    Phase,
    Policy,
    RoomPhase,
    RoomState,
    RuleBroken,
    SendOutcome,
    SendReturned,
    StatusUpdate,
    decide,
    decided_without_room,
    room_phase,
    rule_for,
)
from shared.room.decide import check_without_room
from shared.room_document import acceptance_key, attempt_of_key, decode_room, room_as_read, room_to_doc
from tests.unit.room.steps import stepper

T0 = 1_700_000_000_000_000
MS = 1000
NUMBER, OTHER = "100000000000001", "100000000000002"
FACT_POLICY = Policy(ack_timeout_ms=3000, whatsapp_numbers=(NUMBER, OTHER), pacing=(("messenger", 6000, 1),))
step = stepper(FACT_POLICY)
READ_AT = T0 + 5 * MS


def push(mid: str = "m1", provider: str = "whatsapp", **kw: Any) -> Enqueue:
    return Enqueue(mid, provider, "15550001", "hi", T0, T0, sender=NUMBER if provider == "whatsapp" else None, **kw)


def returned(state: RoomState, outcome: SendOutcome, **kw: Any) -> SendReturned:
    return SendReturned(state.incarnation, 1, 1, outcome, T0 + 60 * MS, "c", **kw)


def room_in(phase: RoomPhase) -> RoomState:
    """A room in `phase`, its in-flight message (if any) seq 1, attempt 1."""
    sending, _ = step(RoomState("r"), push())
    idle, _ = step(sending, StatusUpdate(sending.incarnation, 1, 1, "delivered", T0, T0 + 80 * MS))
    rooms = {
        RoomPhase.SENDING: sending,
        RoomPhase.SENT: step(sending, returned(sending, SendOutcome.ACCEPTED))[0],
        RoomPhase.UNKNOWN: step(sending, returned(sending, SendOutcome.UNKNOWN))[0],
        RoomPhase.BACKOFF: step(sending, returned(sending, SendOutcome.REFUSED))[0],
        RoomPhase.PACED: step(sending, returned(sending, SendOutcome.REFUSED, sender_busy_until_us=T0 + 900 * MS))[0],
        RoomPhase.PREPARING: step(RoomState("r"), push(prepare="media", media_kind="image",
                                                       media_link="https://example.com/a.jpg"))[0],
        RoomPhase.IDLE: idle,
        RoomPhase.BLOCKED: step(idle, Park("m9", "whatsapp", "15550001", "hi", T0, T0 + 90 * MS, "dead-lettered"))[0],
        RoomPhase.PAUSED: step(idle, Pause("alice", "test", T0 + 90 * MS))[0],
    }
    room = rooms[phase]
    assert room_phase(room) is phase
    return room


def accepted(state: RoomState, deadline_us: int = T0 + 3_060 * MS, attempt: int = 1, inc: int = 0
             ) -> AcceptanceRecorded:
    return AcceptanceRecorded(state.incarnation + inc, 1, attempt, deadline_us, READ_AT)


def echo(state: RoomState, number: str | None = NUMBER, attempt: int = 1, mid: str | None = "wamid.1",
         ts: int = T0 + 20 * MS) -> EchoRecorded:
    return EchoRecorded(state.incarnation, 1, attempt, ts, mid, number, READ_AT)


def assert_silent(d: Any) -> None:
    """A fact logs nothing and asks for nothing (its write's request did)."""
    assert d.events == () and d.effects == () and d.dead_letters == () and d.refused is None


# -- the rows, one by one (through the shared `step`, which checks `then`)


def test_an_acceptance_of_the_sending_attempt_makes_it_sent_with_the_recorded_deadline():
    sending = room_in(RoomPhase.SENDING)
    after, d = step(sending, accepted(sending))
    assert_silent(d)
    assert after.in_flight.phase is Phase.SENT and after.in_flight.deadline_us == T0 + 3_060 * MS
    assert after == replace(sending, in_flight=replace(sending.in_flight, phase=Phase.SENT,
                                                       deadline_us=T0 + 3_060 * MS))


def test_an_acceptance_of_another_attempt_or_incarnation_changes_nothing_and_logs_nothing():
    sending = room_in(RoomPhase.SENDING)
    for fact in (accepted(sending, attempt=2), accepted(sending, inc=1)):
        after, d = step(sending, fact)
        assert d.state is None and after == sending
        assert_silent(d)


def test_an_acceptance_in_any_other_phase_is_stale_silently():
    for phase in RoomPhase:
        if phase is RoomPhase.SENDING:
            continue
        room = room_in(phase)
        after, d = step(room, accepted(room))
        assert d.state is None and after == room, phase
        assert_silent(d)


def test_an_echo_gives_the_attempt_its_stamp_and_id_and_proves_an_unknown_outcome():
    for phase in (RoomPhase.SENDING, RoomPhase.SENT, RoomPhase.UNKNOWN, RoomPhase.BACKOFF):
        room = room_in(phase)
        after, d = step(room, echo(room))
        assert_silent(d)
        assert after.in_flight.platform_ts_us == T0 + 20 * MS and after.in_flight.provider_message_id == "wamid.1"
        assert room_phase(after) is (RoomPhase.SENT if phase is RoomPhase.UNKNOWN else phase)
        assert after.in_flight.deadline_us == room.in_flight.deadline_us


def test_an_echo_keeps_an_id_already_recorded_and_a_second_echo_changes_nothing():
    sent = room_in(RoomPhase.SENT)
    sent = replace(sent, in_flight=replace(sent.in_flight, provider_message_id="wamid.0"))
    after, _ = step(sent, echo(sent))
    assert after.in_flight.provider_message_id == "wamid.0"
    again, d = step(after, echo(after, ts=T0 + 99 * MS, mid="wamid.2"))
    assert d.state is None and again == after
    assert_silent(d)


def test_an_echo_naming_another_number_or_attempt_proves_nothing():
    unknown = room_in(RoomPhase.UNKNOWN)
    for fact in (echo(unknown, number=OTHER), echo(unknown, attempt=2)):
        after, d = step(unknown, fact)
        assert d.state is None and after == unknown
        assert_silent(d)
    # No number named (a Messenger echo, a status without metadata): not checked.
    after, _ = step(unknown, echo(unknown, number=None))
    assert room_phase(after) is RoomPhase.SENT


def test_an_echo_with_nothing_in_flight_is_stale_silently():
    for phase in (RoomPhase.IDLE, RoomPhase.BLOCKED, RoomPhase.PAUSED):
        room = room_in(phase)
        after, d = step(room, echo(room))
        assert d.state is None and after == room
        assert_silent(d)


def test_every_phase_has_a_row_for_each_fact_with_an_exact_then():
    for phase in RoomPhase:
        acceptance = RULE_INDEX[(phase, "acceptance recorded")]
        record = RULE_INDEX[(phase, "echo recorded")]
        assert acceptance.then == ({phase, RoomPhase.SENT} if phase is RoomPhase.SENDING else {phase})
        assert record.then == ({phase, RoomPhase.SENT} if phase is RoomPhase.UNKNOWN else {phase})
    room = room_in(RoomPhase.SENDING)
    assert rule_for(room, accepted(room)).code.__name__ == "acceptance_recorded"
    assert rule_for(room, echo(room)).code.__name__ == "echo_recorded"


# -- the codec decodes; `room_as_read` applies


def test_the_codec_decodes_the_facts_without_applying_them():
    sending = room_in(RoomPhase.SENDING)
    doc = room_to_doc(sending)
    key = acceptance_key(sending.incarnation, 1, 1)
    doc["accepted"] = {key: T0 + 3_060 * MS, "not-a-key": 1}
    doc["echoes"] = {key: {"ts": T0 + 20 * MS, "mid": "wamid.1", "num": NUMBER},
                     acceptance_key(sending.incarnation, 1, 2): {"mid": "no stamp"}}
    state, facts = decode_room("r", doc, READ_AT)
    assert state == sending  # nothing folded
    assert facts == (AcceptanceRecorded(sending.incarnation, 1, 1, T0 + 3_060 * MS, READ_AT),
                     EchoRecorded(sending.incarnation, 1, 1, T0 + 20 * MS, "wamid.1", NUMBER, READ_AT))
    read = room_as_read("r", doc, READ_AT)
    assert read.in_flight.phase is Phase.SENT and read.in_flight.platform_ts_us == T0 + 20 * MS
    assert decode_room("r", None, READ_AT) == (RoomState("r"), ())


def test_an_acceptance_key_reads_back_as_its_attempt_and_nothing_else_does():
    assert attempt_of_key(acceptance_key(T0, 3, 2)) == (T0, 3, 2)
    assert attempt_of_key("a0_01_1") is None  # not one `acceptance_key` makes
    assert attempt_of_key("x") is None


# -- the same as the fold it replaces


def old_fold(room_id: str, d: dict[str, Any]) -> RoomState:
    """The fold the codec did before issue 45, item 3 (`room_from_doc` at a54f8e1)."""
    state = decode_room(room_id, d, 0)[0]
    flight = state.in_flight
    if flight is None:
        return state
    key = acceptance_key(state.incarnation, flight.message.seq, flight.attempt)
    if flight.phase is Phase.SENDING:
        deadline = (d.get("accepted") or {}).get(key)
        if deadline is not None:
            flight = replace(flight, phase=Phase.SENT, deadline_us=deadline)
    entry = (d.get("echoes") or {}).get(key)
    if isinstance(entry, dict) and entry.get("num") is not None and flight.number not in (None, entry["num"]):
        entry = None
    if isinstance(entry, dict) and isinstance(entry.get("ts"), int) and flight.platform_ts_us is None:
        flight = replace(flight, platform_ts_us=entry["ts"],
                         provider_message_id=flight.provider_message_id or entry.get("mid"))
        if flight.phase is Phase.UNKNOWN:
            flight = replace(flight, phase=Phase.SENT)
    return replace(state, in_flight=flight)


KEYS = st.tuples(st.integers(0, 1), st.integers(1, 2), st.integers(1, 2))  # (incarnation + i, seq, attempt)
ECHOES = st.fixed_dictionaries({"ts": st.one_of(st.integers(T0, T0 + 10**6), st.none()),
                                "mid": st.sampled_from([None, "", "wamid.9"]),
                                "num": st.sampled_from([None, NUMBER, OTHER])})


@settings(max_examples=300, deadline=None)
@given(phase=st.sampled_from(list(RoomPhase)), proven=st.booleans(), mid=st.sampled_from([None, "wamid.0"]),
       accepted_at=st.dictionaries(KEYS, st.integers(T0, T0 + 10**7), max_size=3),
       echoes=st.dictionaries(KEYS, ECHOES, max_size=3))
def test_room_as_read_decides_what_the_fold_did(phase, proven, mid, accepted_at, echoes):
    room = room_in(phase)
    if room.in_flight is not None:
        room = replace(room, in_flight=replace(room.in_flight, provider_message_id=mid,
                                               platform_ts_us=T0 if proven else None))
    doc = room_to_doc(room)
    doc["accepted"] = {acceptance_key(room.incarnation + i, s, a): v for (i, s, a), v in accepted_at.items()}
    doc["echoes"] = {acceptance_key(room.incarnation + i, s, a): {k: v for k, v in e.items() if v is not None}
                     for (i, s, a), e in echoes.items()}
    assert room_as_read("r", doc, READ_AT) == old_fold("r", doc)


# -- a `sent` status needs no room


def test_a_sent_status_decides_the_same_in_every_phase_as_against_an_empty_room():
    """The service decides a `sent` status against an empty `RoomState`, with
    no transaction (`WITHOUT_ROOM`): right only while every phase's row
    leaves the room as it is and logs the same, which this checks (and
    `shared/room/decide.py` checks the rows when it loads)."""
    assert WITHOUT_ROOM == {"status sent"}
    for phase in RoomPhase:
        room = room_in(phase)
        status = StatusUpdate(room.incarnation, 1, 1, "sent", T0, T0 + 70 * MS, "wamid.1", sender=OTHER)
        assert decided_without_room(status)
        d = decide(room, status, FACT_POLICY, "webhook")
        empty = decide(RoomState("r"), status, FACT_POLICY, "webhook")
        assert d.state is None and d == empty, phase
    delivered = StatusUpdate(1, 1, 1, "delivered", T0, T0)
    assert not decided_without_room(delivered)


def test_decide_refuses_to_load_a_table_whose_sent_rows_would_read_the_room():
    other = RULE_INDEX[(RoomPhase.SENDING, "status other")]
    for wrong in (replace(RULE_INDEX[(RoomPhase.SENDING, "status sent")], code=other.code),
                  replace(RULE_INDEX[(RoomPhase.SENDING, "status sent")], then=frozenset(RoomPhase))):
        rules = [wrong if (r.phase, r.kind) == (wrong.phase, wrong.kind) else r for r in RULES]
        with pytest.raises(RuleBroken, match="decided without the room"):
            check_without_room(rules)
    check_without_room(RULES)
