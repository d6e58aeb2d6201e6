"""The per-sender window on the Firestore emulator (shared/sender_window.py):
a number of rate R lets at most R sends through in one second, however many
instances ask at once, and its slots free a second and a guard after they
were taken."""

from __future__ import annotations

import random
import threading
import uuid

from google.cloud import firestore

from shared.opcounts import begin_request
from shared.sender_window import (
    GUARD_US,
    LEASE_MAX_US,
    SENDER_WINDOWS,
    SLOTS_PER_DOCUMENT,
    WINDOW_US,
    WRITE_GRACE_US,
    SenderWindow,
    SlotTaken,
)

T0 = 1_800_000_000_000_000


def test_a_number_lets_at_most_its_rate_through_per_second_and_frees_its_slots(stack):
    window = SenderWindow(firestore.Client(project="baton-local"), random.Random(7))
    number = f"9{uuid.uuid4().int % 10**12}"
    results = [window.take(number, 4, T0 + i) for i in range(12)]
    taken = [r for r in results if r is None]
    assert 1 <= len(taken) <= 4
    busy = [r for r in results if isinstance(r, SlotTaken)]
    # Stamped T0 + i plus the time the take spent (well under 4 s here).
    assert busy and all(T0 + WINDOW_US + GUARD_US <= r.ready_at_us <= T0 + 5 * WINDOW_US for r in busy)
    # Long after (the first call to a fresh emulator can take seconds, and a
    # slot may be leased), every slot is free again: 4 more get through, not a fifth.
    later = [window.take(number, 4, T0 + 20 * WINDOW_US + i) for i in range(40)]
    assert sum(r is None for r in later) == 4


def test_a_slot_frees_for_other_instances_a_second_and_the_guard_after_its_stamp(stack):
    client = firestore.Client(project="baton-local")
    number = f"6{uuid.uuid4().int % 10**12}"
    window = SenderWindow(client)
    assert window.take(number, 1, T0) is None
    stamp = client.collection(SENDER_WINDOWS).document(window.document_id(number, 0)).get().to_dict()["last_us"]
    # The decision time plus the time the take spent, plus its lease: 1 s of
    # rate 1, less the WRITE_GRACE_US the second keeps for slow writes.
    assert T0 + WINDOW_US - WRITE_GRACE_US <= stamp < T0 + 5 * WINDOW_US
    # Until a second and the guard after its stamp, it is busy for another
    # instance: the slot's last send may reach the platform later than the
    # next one would (asked 300 ms before: a take's own ms count too).
    other = SenderWindow(client)
    assert other.take(number, 1, stamp + WINDOW_US + GUARD_US - 300_000) == SlotTaken(stamp + WINDOW_US + GUARD_US)
    assert other.take(number, 1, stamp + WINDOW_US + GUARD_US) is None


def test_concurrent_instances_never_share_a_slot(stack):
    number = f"8{uuid.uuid4().int % 10**12}"
    clients = [SenderWindow(firestore.Client(project="baton-local"), random.Random(i)) for i in range(8)]
    through: list[int] = []
    lock = threading.Lock()

    def ask(window: SenderWindow) -> None:
        for i in range(10):
            if window.take(number, 5, T0 + i) is None:
                with lock:
                    through.append(i)

    threads = [threading.Thread(target=ask, args=(w,)) for w in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert 1 <= len(through) <= 5  # 80 asks within 10 us: never more than the rate


def test_rate_zero_is_not_limited(stack):
    window = SenderWindow(firestore.Client(project="baton-local"))
    assert all(window.take("7001", 0, T0) is None for _ in range(10))


def test_a_number_below_its_rate_never_makes_a_send_wait(stack):
    # Six sends in one second at rate 6: each reads until it finds a free
    # slot, so all go; with two random choices a send waited while slots
    # were free.
    window = SenderWindow(firestore.Client(project="baton-local"), random.Random(3))
    number = f"5{uuid.uuid4().int % 10**12}"
    assert [window.take(number, 6, T0 + i) for i in range(6)] == [None] * 6
    assert isinstance(window.take(number, 6, T0 + 6), SlotTaken)


def ops(fn):
    """Run `fn`; its result and the sender window's (reads, writes) it made."""
    counts = begin_request()
    result = fn()
    return result, (counts.window_reads, counts.window_writes)


def test_a_leased_slot_lets_its_instance_send_again_without_a_firestore_call(stack):
    window = SenderWindow(firestore.Client(project="baton-local"), random.Random(5))
    number = f"4{uuid.uuid4().int % 10**12}"
    assert ops(lambda: window.take(number, 75, T0)) == (None, (1, 1))
    # Once per second and guard (and the ms the first take spent), within the
    # lease (LEASE_MAX_US at this rate): from memory.
    step = WINDOW_US + GUARD_US + 200_000
    assert [ops(lambda i=i: window.take(number, 75, T0 + i * step)) for i in range(1, 7)] == [(None, (0, 0))] * 6
    # Past the lease: renewed by one write, no read.
    assert ops(lambda: window.take(number, 75, T0 + LEASE_MAX_US + 2 * WINDOW_US)) == (None, (0, 1))


def test_a_slot_leased_by_one_instance_is_never_taken_by_another_before_its_lease_and_second_are_over(stack):
    client = firestore.Client(project="baton-local")
    # One slot a document, to look at single slots.
    holder, other = (SenderWindow(client, random.Random(seed), slots_per_document=1) for seed in (1, 2))
    number = f"2{uuid.uuid4().int % 10**12}"
    span = WINDOW_US + GUARD_US
    assert holder.take(number, 3, T0) is None
    leased = [s.to_dict()["last_us"] for s in client.collection(SENDER_WINDOWS).stream() if s.id.startswith(number)]
    # 3 slot-seconds (one second of rate 3), less each slot's WRITE_GRACE_US.
    assert len(leased) == 1 and T0 + 3 * (WINDOW_US - WRITE_GRACE_US) <= leased[0] < T0 + 6 * WINDOW_US
    until = leased[0]
    # Shortly before the lease and a second are over, the other instance takes the two other slots, not ours.
    assert [other.take(number, 3, until + span - 300_000) for _ in range(3)] == [None, None, SlotTaken(until + span)]
    assert other.take(number, 3, until + span) is None
    # Its holder's renewal now fails (another instance wrote it), and no slot is free for it.
    assert isinstance(holder.take(number, 3, until + span + 1), SlotTaken)


def test_instances_with_leases_never_pass_the_rate_in_any_sliding_second(stack):
    client = firestore.Client(project="baton-local")
    number = f"1{uuid.uuid4().int % 10**12}"
    rate = 4
    windows = [SenderWindow(client, random.Random(10 + i)) for i in range(3)]
    rng = random.Random(99)
    asks = sorted((rng.randrange(0, 6 * WINDOW_US), rng.randrange(3)) for _ in range(90))
    through = [t for t, w in asks if windows[w].take(number, rate, T0 + t) is None]
    assert len(through) >= 2 * rate  # leases do not starve the others
    for i, t in enumerate(through):
        assert sum(1 for u in through[i:] if u - t < WINDOW_US) <= rate


def test_a_crash_holding_leases_wastes_at_most_one_second_of_the_rate(stack):
    client = firestore.Client(project="baton-local")
    number = f"7{uuid.uuid4().int % 10**12}"
    rate = 20
    crashed = SenderWindow(client, random.Random(4))
    crashed.take(f"7{uuid.uuid4().int % 10**12}", 1, T0)  # a fresh emulator's first call can take seconds
    for i in range(rate):  # as many slots as it can take, within a second
        crashed.take(number, rate, T0 + i)
    now = T0 + rate
    stamps = [s.to_dict()["last_us"] for s in client.collection(SENDER_WINDOWS).stream()
              if s.id.startswith(f"{number}-")]
    k = SLOTS_PER_DOCUMENT
    assert len(stamps) == rate // k
    # After the crash each slot of a document stays busy until its lease's
    # end plus a second and guard: past the second and guard its last send
    # (just now) holds anyway, at most one second of the rate in all.
    assert max(stamps) > now  # leases were granted
    assert sum(k * max(0, last - now) for last in stamps) <= rate * (WINDOW_US + 50_000)  # and each take's own ms
