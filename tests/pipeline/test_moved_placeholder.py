"""The audit of a room whose placeholder gave up its place (issue 43, bug 3).

A message refused while its room was full gets a placeholder (`parked`);
when its own push comes with a producer `sequence` ahead of the room's, the
room moves it out of the queue (`sequence_held` under the placeholder's
seq) and it enters later under a new seq. The log is made by the room's own
rules (`decide`), not by hand, and every message is acked: the audit must
pass, with no message lost and no gap."""

from __future__ import annotations

from pipeline import transforms as tf
from shared.room import (
    Enqueue,
    Policy,
    RoomState,
    Send,
    SendOutcome,
    SendReturned,
    StatusUpdate,
    TimerFired,
    decide,
)
from tests.pipeline.conftest import T0, line, lines_df

S = 1_000_000


class Room:
    """One room driven through `decide`, its log kept as the functions write it."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.state = RoomState("room-moved")
        self.now = T0 * S
        self.records: list[dict] = []
        self.sends: list[Send] = []

    def apply(self, event: object) -> None:
        self.now += 10_000
        d = decide(self.state, event, self.policy, "test")  # type: ignore[arg-type]
        if d.state is not None:
            self.state = d.state
        self.records += [e.to_record() for e in d.events]
        self.sends += [e for e in d.effects if isinstance(e, Send)]

    def push(self, mid: str, sequence: int) -> None:
        self.apply(Enqueue(mid, "whatsapp", "15550001", f"text {mid}", self.now, self.now + 10_000,
                           sequence=sequence))

    def ack_in_flight(self) -> None:
        send = self.sends.pop(0)
        self.apply(SendReturned(send.incarnation, send.message.seq, send.attempt, SendOutcome.ACCEPTED,
                                self.now + 10_000, send.cause))
        self.apply(StatusUpdate(send.incarnation, send.message.seq, send.attempt, "delivered", send.trigger_at_us,
                                self.now + 10_000))


def moved_placeholder_log() -> list[dict]:
    """The records of one room (`room-moved`) whose placeholder (seq 3) gave
    up its place; its message and every other one acked (5 seqs, 4 messages)."""
    room = Room(Policy(max_queued_messages=2, sequence_gap_timeout_ms=1000))
    room.push("m1", 1)  # in flight
    room.push("m2", 2)  # queued
    room.push("m3", 4)  # the room is full: refused, its place remembered
    room.ack_in_flight()  # m2 in flight
    room.push("m4", 5)  # m3's place becomes a placeholder (seq 3); m4 waits for sequence 3
    room.push("m3", 4)  # m3's push again: sequence 4 is ahead of 3, so it leaves its place
    assert any(r["event"] == "sequence_held" and r["seq"] == 3 for r in room.records)
    room.ack_in_flight()  # m2 acked: nothing queued
    due = room.state.gap_due_us
    assert due is not None
    room.now = due
    room.apply(TimerFired(room.state.incarnation, 0, 0, due, due))  # sequence 3 given up: m3, m4 enter
    room.ack_in_flight()
    room.ack_in_flight()
    assert room.state.counts == {"acked": 4} and not room.state.holds_messages
    return room.records


def test_a_placeholder_that_moved_to_a_later_seq_is_not_lost(spark):
    records = moved_placeholder_log()
    messages = tf.message_lifecycle(tf.valid_events(tf.parse_lines(lines_df(spark, [line(r) for r in records]))))
    by_seq = {r["seq"]: r["outcome"] for r in messages.collect()}
    assert by_seq == {1: "acked", 2: "acked", 3: "moved", 4: "acked", 5: "acked"}
    audit = tf.room_summary(messages).collect()[0].asDict()
    assert (audit["messages"], audit["acked"], audit["lost"], audit["gaps"]) == (4, 4, 0, 0)
    assert audit["audit_ok"]
