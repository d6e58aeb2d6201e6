"""The sender window's leases over an in-memory document store (the
emulator tests are tests/integration/test_sender_window.py): a slot's next
send through the same instance is timed from when its write returned, since
its send leaves only then."""

from __future__ import annotations

import itertools
import random
import time

from google.api_core import exceptions as gexc

from shared.sender_window import GUARD_US, WINDOW_US, SenderWindow, SlotTaken

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
    window = SenderWindow(store, random.Random(2))  # type: ignore[arg-type]
    assert window.take("1001", 5, T0) is None
    (key, (doc, version)), = store.docs.items()
    assert doc["last_us"] >= T0 + 5 * WINDOW_US - 100_000  # a lease of one second of rate 5, within its cap
    step = WINDOW_US + GUARD_US + 50_000
    assert [window.take("1001", 5, T0 + i * step) for i in range(1, 4)] == [None] * 3
    assert store.docs[key][1] == version  # no write while the lease lasts
    assert window.take("1001", 5, doc["last_us"] + step) is None
    assert store.docs[key][1] != version and len(store.docs) == 1  # renewed, no other slot taken
