"""Baton's ports as the simulation hands them to the service: every call
yields to the scheduler (it takes virtual time, and other invocations run
meanwhile) and may fail or crash, by seed.

`Port` wraps one fake (store, timers, sender window): before the call, a
latency or a stall, then possibly `Crash` (the process dies, nothing done) or
a transient error; the call; then possibly `Crash` again (it was done, its
answer lost with the process). The store's transaction also yields between
its read and its commit (`FakeRoomStore.between_read_and_commit`), so
concurrent invocations conflict for real and the store retries.

`SimSenderWindow` is `shared.sender_window.SenderWindow`'s algorithm over
in-memory slot documents, each read and write a port call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.api_core import exceptions as gexc

from shared.sender_window import CHOICES, GUARD_US, WINDOW_US, SlotTaken
from tools.sim.fakes import Crash
from tools.sim.simulation.faults import Faults
from tools.sim.simulation.scheduler import Scheduler


class Port:
    """A fake behind a yielding, failing proxy (see the module).

    Args:
        name: the port's name in the fault tallies (`firestore`, `cloud tasks`, ...).
        target: the fake.
        sched, faults: the run's scheduler and fault plan.
        before: per method, called before the real call (e.g. to arm one of
            the fake's own faults).
        after: per method, called with the result after the real call.
        errors: whether a transient `ServiceUnavailable` may replace a call.
        plain: methods that are no I/O (a client's path helpers): called as they are.
    """

    def __init__(self, name: str, target: Any, sched: Scheduler, faults: Faults,
                 before: dict[str, Callable[[], None]] | None = None,
                 after: dict[str, Callable[[Any], None]] | None = None, errors: bool = True,
                 plain: frozenset[str] = frozenset()) -> None:
        self._name, self._target, self._sched, self._faults = name, target, sched, faults
        self._before, self._after, self._errors, self._plain = before or {}, after or {}, errors, plain

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._target, attr)
        if not callable(value) or attr.startswith("_") or attr in self._plain:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            where = f"{self._name}.{attr}"
            self._sched.pause(self._faults.port_latency_us(where))
            if self._faults.chance("crash", f"crash before {where}"):
                raise Crash(f"injected: died before {where}")
            if self._errors and (self._faults.in_outage(self._sched.now_us())
                                 or self._faults.chance("store_error", f"error at {where}")):
                raise gexc.ServiceUnavailable(f"injected: {where} unavailable")
            if attr in self._before:
                self._before[attr]()
            result = value(*args, **kwargs)
            if attr in self._after:
                self._after[attr](result)
            self._sched.pause(self._faults.port_latency_us(where))
            if self._faults.chance("crash", f"crash after {where}"):
                raise Crash(f"injected: died after {where}")
            return result

        return call


class SimSenderWindow:
    """The sender window (shared/sender_window.py) in memory: CHOICES slots
    read one after another, the first free one taken by a conditional write;
    each read and write is a port call (latency, stalls, errors, crashes).
    `takes` records every slot taken: (number, stamp_us)."""

    def __init__(self, sched: Scheduler, faults: Faults) -> None:
        self._sched, self._faults = sched, faults
        self.slots: dict[str, tuple[int, int]] = {}  # document -> (last_us, version)
        self.takes: list[tuple[str, int]] = []

    def slot_of(self) -> tuple[str, int] | None:
        """The slot the calling invocation took last, given up as it is read
        (the platform records it on the send call that follows)."""
        inv = self._sched.current()
        if inv is None:
            return None
        slot, inv.slot = inv.slot, None
        return slot

    def _call(self, what: str) -> None:
        where = f"sender window {what}"
        self._sched.pause(self._faults.port_latency_us(where))
        if self._faults.chance("crash", f"crash at {where}"):
            raise Crash(f"injected: died at {where}")
        if self._faults.in_outage(self._sched.now_us()) or self._faults.chance("store_error", f"error at {where}"):
            raise gexc.ServiceUnavailable(f"injected: {where} unavailable")

    def take(self, phone_number_id: str, rate_per_s: int, now_us: int) -> SlotTaken | None:
        """As `SenderWindow.take`: None when a slot was taken, else when to try again."""
        if (inv := self._sched.current()) is not None:
            inv.slot = None  # a slot taken earlier and not used is not this send's
        if rate_per_s <= 0:
            return None
        entered = self._sched.now_us()
        ready = []
        for k in self._faults.rng.sample(range(rate_per_s), min(CHOICES, rate_per_s)):
            doc = f"{phone_number_id}-{k}"
            self._call("read")
            last, version = self.slots.get(doc, (None, 0))
            if last is not None and now_us - last < WINDOW_US + GUARD_US:
                ready.append(last + WINDOW_US + GUARD_US)
                continue
            stamp = now_us + (self._sched.now_us() - entered)
            self._call("write")
            if self.slots.get(doc, (None, 0))[1] != version:
                ready.append(stamp + WINDOW_US + GUARD_US)  # another send took it just now
                continue
            self.slots[doc] = (stamp, version + 1)
            self.takes.append((phone_number_id, stamp))
            if (inv := self._sched.current()) is not None:
                inv.slot = (phone_number_id, stamp)
            return None
        return SlotTaken(min(ready))
