"""The per-sender window on the Firestore emulator (shared/sender_window.py):
a number of rate R lets at most R sends through in one second, however many
instances ask at once, and its slots free a second and a guard after they
were taken."""

from __future__ import annotations

import random
import threading
import uuid

from google.cloud import firestore

from shared.sender_window import GUARD_US, SENDER_WINDOWS, WINDOW_US, SenderWindow, SlotTaken

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
    # Long after, every slot is free again: 4 more get through, not a fifth.
    later = [window.take(number, 4, T0 + 6 * WINDOW_US + i) for i in range(40)]
    assert sum(r is None for r in later) == 4


def test_a_slot_frees_a_second_and_the_guard_after_its_stamp(stack):
    client = firestore.Client(project="baton-local")
    window = SenderWindow(client)
    number = f"6{uuid.uuid4().int % 10**12}"
    assert window.take(number, 1, T0) is None
    stamp = client.collection(SENDER_WINDOWS).document(f"{number}-0").get().to_dict()["last_us"]
    assert T0 <= stamp < T0 + 4 * WINDOW_US  # the decision time plus the time the take spent
    # A second after its stamp the guard still holds it: the slot's first send
    # may reach the platform later than a second one would.
    assert window.take(number, 1, stamp + WINDOW_US + GUARD_US // 2) == SlotTaken(stamp + WINDOW_US + GUARD_US)
    assert window.take(number, 1, stamp + WINDOW_US + GUARD_US) is None


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
