"""The sender window's leases over an in-memory document store (the
emulator tests are tests/integration/test_sender_window.py): a slot's next
send through the same instance is timed from when its write returned, since
its send leaves only then."""

from __future__ import annotations

import itertools
import random
import time

from google.api_core import exceptions as gexc

from shared.opcounts import begin_request
from shared.sender_window import GUARD_US, SLOTS_PER_DOCUMENT, WINDOW_US, WRITE_GRACE_US, SenderWindow, SlotTaken

T0 = 1_800_000_000_000_000


class _Snap:
    def __init__(self, doc: tuple[dict, int] | None) -> None:
        self.exists = doc is not None
        self.update_time = doc[1] if doc else None
        self._data = dict(doc[0]) if doc else None

    def to_dict(self) -> dict | None:
        return self._data


class _Written:
    def __init__(self, update_time: int) -> None:
        self.update_time = update_time


class SlowStore:
    """Documents in memory; every write takes `write_s` (s) of wall time."""

    def __init__(self, write_s: float) -> None:
        self.docs: dict[str, tuple[dict, int]] = {}
        self.write_s = write_s
        self._times = itertools.count(1)

    def collection(self, _name: str) -> SlowStore:
        return self

    def document(self, key: str) -> _Ref:
        return _Ref(self, key)

    def write_option(self, last_update_time: int) -> int:
        return last_update_time


class _Ref:
    def __init__(self, store: SlowStore, key: str) -> None:
        self.store, self.key = store, key

    def get(self) -> _Snap:
        return _Snap(self.store.docs.get(self.key))

    def create(self, data: dict) -> _Written:
        time.sleep(self.store.write_s)
        if self.key in self.store.docs:
            raise gexc.AlreadyExists(self.key)
        return self._put(data)

    def update(self, data: dict, option: int | None = None) -> _Written:
        time.sleep(self.store.write_s)
        if option is not None and self.store.docs[self.key][1] != option:
            raise gexc.FailedPrecondition(self.key)
        return self._put(data)

    def _put(self, data: dict) -> _Written:
        stamp = next(self.store._times)
        self.store.docs[self.key] = (data, stamp)
        return _Written(stamp)


def test_a_slow_write_delays_the_slots_next_send_by_as_much():
    # The write that takes the slot took 150 ms, more than the guard: its
    # send left 150 ms after the stamp, so a send through the same slot a
    # second and guard after the stamp would reach the platform within a
    # second of it.
    window = SenderWindow(SlowStore(write_s=0.15), random.Random(1))  # type: ignore[arg-type]
    assert window.take("1001", 1, T0) is None
    again = window.take("1001", 1, T0 + WINDOW_US + GUARD_US + 10_000)
    assert isinstance(again, SlotTaken) and again.ready_at_us >= T0 + 150_000 + WINDOW_US + GUARD_US


def test_a_leased_slot_is_used_again_from_memory_and_renewed_by_one_write():
    store = SlowStore(write_s=0.0)
    window = SenderWindow(store, random.Random(2), slots_per_document=1)  # type: ignore[arg-type]
    assert window.take("1001", 5, T0) is None
    (key, (doc, version)), = store.docs.items()
    # A lease of one second of rate 5, less the graces' share (WRITE_GRACE_US a slot), within its cap.
    assert doc["last_us"] >= T0 + 5 * (WINDOW_US - WRITE_GRACE_US) - 100_000
    step = WINDOW_US + GUARD_US + 50_000
    assert [window.take("1001", 5, T0 + i * step) for i in range(1, 4)] == [None] * 3
    assert store.docs[key][1] == version  # no write while the lease lasts
    assert window.take("1001", 5, doc["last_us"] + step) is None
    assert store.docs[key][1] != version and len(store.docs) == 1  # renewed, no other slot taken


def ops(fn):
    """Run `fn`; its result and the sender window's (reads, writes) it made."""
    counts = begin_request()
    result = fn()
    return result, (counts.window_reads, counts.window_writes)


def test_a_document_lets_its_instance_send_through_each_of_its_slots_after_one_write():
    k = SLOTS_PER_DOCUMENT
    assert k > 1
    store = SlowStore(write_s=0.0)
    window = SenderWindow(store, random.Random(3))  # type: ignore[arg-type]
    assert ops(lambda: window.take("1001", 75, T0)) == (None, (1, 1))
    # The document's other k - 1 slots in the same second: from memory.
    assert [ops(lambda i=i: window.take("1001", 75, T0 + i)) for i in range(1, k)] == [(None, (0, 0))] * (k - 1)
    # Its slots all used within the second: the next send takes another document.
    assert ops(lambda: window.take("1001", 75, T0 + k)) == (None, (1, 1))
    assert len(store.docs) == 2


def test_instances_with_documents_of_slots_never_pass_the_rate_in_any_sliding_second():
    # Rate 6 over documents of k slots (the last one holds fewer), three
    # instances asking at random times: never more than 6 sends in a second.
    store = SlowStore(write_s=0.0)
    rate = 6
    windows = [SenderWindow(store, random.Random(10 + i)) for i in range(3)]  # type: ignore[arg-type]
    rng = random.Random(99)
    asks = sorted((rng.randrange(0, 20 * WINDOW_US), rng.randrange(3)) for _ in range(600))
    through = [t for t, w in asks if windows[w].take("1001", rate, T0 + t) is None]
    assert len(through) >= 10 * rate  # the documents' leases do not starve the others
    for i, t in enumerate(through):
        assert sum(1 for u in through[i:] if u - t < WINDOW_US) <= rate


def test_a_crash_holding_documents_wastes_at_most_one_second_of_the_rate():
    # One instance takes all it can within a second, then dies: every slot of
    # each document it holds stays busy until the document's lease end and a
    # SPAN; past the SPAN that the slot's own last send holds anyway, that is
    # at most one second of the rate in all.
    store = SlowStore(write_s=0.0)
    rate = 20
    window = SenderWindow(store, random.Random(4))  # type: ignore[arg-type]
    sends = [T0 + i for i in range(rate) if window.take("1001", rate, T0 + i) is None]
    assert len(sends) == rate
    now = T0 + rate
    k = SLOTS_PER_DOCUMENT
    leases = {key: doc["last_us"] for key, (doc, _) in store.docs.items()}
    assert len(leases) == rate // k and max(leases.values()) > now  # leases were granted
    # Each slot was used once, at most `now`: beyond its own SPAN it wastes its document's lease end - now.
    assert sum(k * max(0, last - now) for last in leases.values()) <= rate * WINDOW_US


class InOrder:
    """A document chooser that reads the documents in id order."""

    def sample(self, population, k):
        return sorted(population)[:k]


def busy_first_document(write_s: float) -> tuple[SlowStore, SenderWindow]:
    """A number of rate 2k whose first document another instance has just
    taken: a take reads it busy, then takes the second with no lease by a
    write of `write_s` s."""
    store = SlowStore(write_s)
    window = SenderWindow(store, InOrder())  # type: ignore[arg-type]
    store.docs[window.document_id("1001", 0)] = ({"last_us": T0}, 0)
    return store, window


def test_a_take_never_sends_after_the_last_us_it_wrote_however_slow_its_write():
    # Other instances count a document busy until `last_us` + SPAN: a send
    # leaving after `last_us` could reach the platform within a second of
    # theirs. With no lease, `last_us` was the stamp before the write, and a
    # write slower than the guard let the send leave after it.
    k = SLOTS_PER_DOCUMENT
    store, window = busy_first_document(write_s=WRITE_GRACE_US / 2e6)
    entered = time.monotonic_ns()
    assert window.take("1001", 2 * k, T0 + 10) is None
    left = T0 + 10 + (time.monotonic_ns() - entered) // 1000  # the send leaves now, by the window's clock
    assert store.docs[window.document_id("1001", 1)][0]["last_us"] >= left
    # A write slower than the grace: held, but its send does not go.
    store, window = busy_first_document(write_s=2 * WRITE_GRACE_US / 1e6)
    taken = window.take("1001", 2 * k, T0 + 10)
    assert isinstance(taken, SlotTaken)
    assert store.docs[window.document_id("1001", 1)][0]["last_us"] < T0 + 10 + 2 * WRITE_GRACE_US


def test_each_send_let_through_is_recorded_with_its_slot_and_stamp():
    # `make demo-senders` compares these stamps with the platform's arrivals.
    store = SlowStore(write_s=0.0)
    window = SenderWindow(store, random.Random(5))  # type: ignore[arg-type]
    counts = begin_request()
    assert window.take("1001", 75, T0) is None  # a document taken: its first slot
    assert window.take("1001", 75, T0 + 7) is None  # its next slot, from memory
    (number, d, slot, at), (_, d2, slot2, at2) = counts.window_slots
    assert (number, d2, slot, slot2) == ("1001", d, 0, 1)
    assert T0 <= at < T0 + 1_000_000 and at2 >= T0 + 7
