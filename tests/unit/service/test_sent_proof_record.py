"""The webhook instance's own record of settled attempts and waiting `sent`
proofs (shared/service/sent_proofs.py): what it lets through to a read, in
what order, and its bound."""

from __future__ import annotations

from shared.service.sent_proofs import PendingProof, SentProofRecord


def proof(room: str, seq: int = 1, attempt: int = 1, due_us: int = 100) -> PendingProof:
    return PendingProof((room, 1, seq, attempt), 5, f"wamid.{room}", "1001", due_us)


def test_only_due_and_unsettled_proofs_come_out_once_in_arrival_order():
    record = SentProofRecord()
    for p in (proof("b"), proof("a"), proof("late", due_us=300), proof("acked"), proof("failed")):
        record.wait(p)
    record.settle_message("acked", 1, 1)  # a delivered or read of any attempt of it
    record.settle(("failed", 1, 1, 1))  # a failed of this attempt
    assert [p.attempt[0] for p in record.take_due(100)] == ["b", "a"]
    assert record.take_due(100) == [] and record.pending() == 1
    assert [p.attempt[0] for p in record.take_due(300)] == ["late"]


def test_a_failed_settles_its_attempt_only_and_an_ack_every_attempt_of_its_message():
    record = SentProofRecord()
    record.settle(("r", 1, 1, 1))
    assert record.is_settled(("r", 1, 1, 1)) and not record.is_settled(("r", 1, 1, 2))
    record.settle_message("r", 1, 2)
    assert record.is_settled(("r", 1, 2, 1)) and record.is_settled(("r", 1, 2, 7))
    assert not record.is_settled(("r", 2, 2, 1))  # another incarnation


def test_a_repeated_sent_keeps_its_first_and_the_record_is_bounded():
    record = SentProofRecord(max_entries=3)
    record.wait(proof("r", due_us=100))
    record.wait(proof("r", due_us=999))
    assert [p.due_us for p in record.take_due(100)] == [100]
    for i in range(5):
        record.wait(proof(f"r{i}"))
        record.settle((f"s{i}", 1, 1, 1))
    assert record.pending() == 3  # the oldest dropped
    assert [p.attempt[0] for p in record.take_due(100)] == ["r2", "r3", "r4"]
    assert not record.is_settled(("s0", 1, 1, 1)) and record.is_settled(("s4", 1, 1, 1))
