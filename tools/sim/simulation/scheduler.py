"""One seeded scheduler for the whole simulated deployment, on a virtual clock.

Every function invocation (a push, a webhook post, a timer, a sweep, an
operator's action) runs in its own thread, but only one thread runs at a
time: the scheduler hands the turn to one invocation, which runs until its
next port call (`Scheduler.pause`), where it gives the turn back. The
scheduler keeps one queue of what happens next, ordered by virtual time
(epoch us) and, among equal times, by a draw from the seed: invocations
waking from a port call, and the world's own events (Pub/Sub delivering a
push, Cloud Tasks running a task, Meta posting a webhook). So a seed fixes
every interleaving, and a run is replayed exactly by its seed.

Units: every `*_us` is epoch microseconds of the virtual clock.
"""

from __future__ import annotations

import heapq
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tools.sim.fakes import T0_US


class Aborted(BaseException):
    """Raised in an invocation still under way when the run ends: its thread unwinds."""


@dataclass
class Invocation:
    """One function invocation in its own thread. `result`: what its body
    returned, or the exception it raised (a `BaseException`, `Crash`
    included); set when `done`."""

    name: str
    body: Callable[[], Any]
    on_done: Callable[[Invocation], None]
    go: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    thread: threading.Thread | None = None
    done: bool = False
    result: Any = None
    abort: bool = False
    slot: tuple[str, int] | None = None  # the sender-window slot it took last: (number, stamp_us)


class Scheduler:
    """The virtual clock and the one queue of what runs next (see the module).

    Args:
        rng: the seed's random source: tie-breaks among equal times.
        start_us: the clock's start (epoch us).
    """

    def __init__(self, rng: random.Random, start_us: int = T0_US) -> None:
        self.rng = rng
        self._now_us = start_us
        self._queue: list[tuple[int, float, int, Any]] = []
        self._order = 0
        self._back = threading.Semaphore(0)
        self._local = threading.local()
        self.live: set[int] = set()  # ids of invocations started, not done
        self._invocations: dict[int, Invocation] = {}
        self.switches = 0

    # -- the clock (the `SimClock` shape the fakes use)

    def now_us(self) -> int:
        """The virtual time, epoch us."""
        return self._now_us

    def advance_ms(self, ms: int) -> None:
        """A fake that takes time: the calling invocation waits `ms` ms."""
        self.pause(ms * 1000)

    def advance_to_us(self, at_us: int) -> None:
        self.pause(max(0, at_us - self._now_us))

    def sleep_s(self, seconds: float) -> None:
        """`time.sleep` for the service's retries: virtual time passes."""
        self.pause(round(seconds * 1_000_000))

    def monotonic(self) -> float:
        """`time.monotonic` for the service's budgets: the virtual clock, in s."""
        return self._now_us / 1_000_000

    # -- queueing

    def at(self, at_us: int, action: Callable[[], None]) -> None:
        """Run `action` in the scheduler's thread at `at_us` (it may `spawn`)."""
        self._push(max(at_us, self._now_us), action)

    def _push(self, at_us: int, item: Any) -> None:
        self._order += 1
        heapq.heappush(self._queue, (at_us, self.rng.random(), self._order, item))

    def spawn(self, name: str, body: Callable[[], Any], on_done: Callable[[Invocation], None],
              delay_us: int = 0) -> Invocation:
        """Start an invocation `delay_us` from now; `on_done(inv)` runs in the
        scheduler's thread when its body returned or raised."""
        inv = Invocation(name, body, on_done)
        self._push(self._now_us + delay_us, inv)
        return inv

    def current(self) -> Invocation | None:
        """The invocation whose thread calls this, or None (the scheduler's thread)."""
        return getattr(self._local, "inv", None)

    def pause(self, us: int) -> None:
        """Called by an invocation at a port call: it waits `us` (>= 0) of
        virtual time while the others run. No-op outside an invocation."""
        inv = self.current()
        if inv is None:
            return
        self._push(self._now_us + max(0, us), inv)
        self._back.release()
        inv.go.acquire()
        if inv.abort:
            raise Aborted(inv.name)

    # -- running

    def _run_thread(self, inv: Invocation) -> None:
        self._local.inv = inv
        inv.go.acquire()
        try:
            if inv.abort:
                raise Aborted(inv.name)
            inv.result = inv.body()
        except BaseException as exc:  # noqa: BLE001 (a crash, or a bug the checks report)
            inv.result = exc
        inv.done = True
        self._back.release()

    def _resume(self, inv: Invocation) -> None:
        if inv.thread is None:
            inv.thread = threading.Thread(target=self._run_thread, args=(inv,), name=inv.name, daemon=True)
            self.live.add(id(inv))
            self._invocations[id(inv)] = inv
            inv.thread.start()
        self.switches += 1
        inv.go.release()
        self._back.acquire()
        if inv.done:
            self.live.discard(id(inv))
            self._invocations.pop(id(inv), None)
            inv.thread.join()
            inv.on_done(inv)

    def run_until(self, end_us: int) -> None:
        """Run everything queued up to `end_us`; the clock ends at `end_us`."""
        while self._queue and self._queue[0][0] <= end_us:
            at_us, _, _, item = heapq.heappop(self._queue)
            self._now_us = max(self._now_us, at_us)
            if isinstance(item, Invocation):
                self._resume(item)
            else:
                item()
        self._now_us = max(self._now_us, end_us)

    def idle(self) -> bool:
        """Nothing queued and no invocation under way."""
        return not self._queue and not self.live

    def pool(self, max_workers: int) -> SimPool:
        """A `ThreadPoolExecutor` for the service's own fan-out (the sweep's
        SWEEP_CONCURRENCY): see `SimPool`."""
        return SimPool(self, max_workers)

    def close(self) -> None:
        """End every invocation still under way (`Aborted` in its thread)."""
        for inv in list(self._invocations.values()):
            inv.abort = True
            inv.on_done = lambda _inv: None
            self._resume(inv)
        self._queue.clear()


class SimPool:
    """`concurrent.futures.ThreadPoolExecutor(max_workers)` as the sweep uses
    it (`map`, `shutdown`), on the scheduler: each item runs as a child
    invocation, at most `max_workers` at a time, interleaved with every
    other invocation at its port calls, while the caller waits in virtual
    time. A child that dies (`Crash`) takes the process with it: the other
    children are ended, and the caller raises that `Crash` (nothing after
    the death runs)."""

    POLL_US = 1000  # the caller looks at its children this often (virtual time)

    def __init__(self, sched: Scheduler, max_workers: int) -> None:
        self._sched, self._max = sched, max(1, max_workers)

    def map(self, fn: Callable[[Any], Any], items: Any) -> Iterator[Any]:
        parent = self._sched.current()
        todo = list(items)
        results: list[Any] = [None] * len(todo)
        children: list[Invocation] = []
        died: list[BaseException] = []
        running = 0
        nxt = 0

        def finished(child: Invocation, k: int) -> None:
            nonlocal running
            running -= 1
            results[k] = child.result
            if isinstance(child.result, BaseException) and not isinstance(child.result, Aborted | Exception):
                died.append(child.result)

        while nxt < len(todo) or running:
            while nxt < len(todo) and running < self._max and not died:
                k = nxt
                nxt += 1
                running += 1
                children.append(self._sched.spawn(f"{parent.name if parent else 'pool'} [{k}]",
                                                  lambda k=k: fn(todo[k]), lambda c, k=k: finished(c, k)))
            if died:
                for c in children:
                    if not c.done:
                        c.abort = True
                if not running:
                    break
            self._sched.pause(self.POLL_US)
        if died:
            raise died[0]
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return iter(results)

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Nothing left: `map` returns when its children are done."""
