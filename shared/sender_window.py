"""Per-sender throughput, shared by every function instance without a hot
document and, at a number's usual load, without a Firestore call per send:
a sender's rate R (messages/s) is R slot documents, each of which lets one
send through per second, and a function instance leases the slots it keeps
using for a few seconds at a time.

Limits this is argued against:
- WhatsApp: 80 messages/s per business number by default (up to 1,000),
  130429 above it, counted over the number's sends in any second
  (https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput).
  The rate to configure is a little below it (75, docs/configuration.md).
- Firestore: one document sustains about one write per second
  (https://firebase.google.com/docs/firestore/best-practices#updates_to_a_single_document).

Layout: a number of rate R has ceil(R/k) documents of k slots
(SLOTS_PER_DOCUMENT, 4; the last holds what is left),
`sender_windows/{phone_number_id}-{k}x{d}` (`{phone_number_id}-{d}` when
k is 1), each holding `last_us`, the last time (epoch us) its holder may
start a send through any of its slots. Every instance counts a document
busy until `last_us + WINDOW_US + GUARD_US` (SPAN), and takes a free one by
a conditional write (the document's update time as precondition, or
create-if-absent), so no two instances hold one document.

A lease: the write that takes a document sets `last_us` to now plus a lease
of L (0 to LEASE_MAX_US). Until then its instance sends through each of its
slots again, once per SPAN a slot, from memory: no read, no write. When the
lease is over and it needs the document again it renews it by the same
conditional write with the update time of its own last write (no read),
which fails if another instance took it meanwhile (then it looks for
another). Any one slot is thus used at most once in any SPAN, by one
instance at a time: at most R sends of a number in any sliding second, and
at most one write a second on a document. An instance uses its leased
documents first, lowest first, so those it no longer needs lapse.

What a crash costs: each slot of a dead instance's documents stays busy,
past the SPAN its last send holds anyway (as without leases), until the
lease's end. Each lease is granted so that this sum, over every slot the
instance holds of that number, stays within R x 1 s: a crash holding leases
wastes at most one second of the number's rate (`_lease_us`; a slot of the
document not used just now counts the lease and what of SPAN its last send
no longer holds). A document taken after finding another busy gets no lease
(L = 0: the number is busy, and a lease would keep capacity from instances
that need it); so does one whose lease would not fit.

Cost: an instance holding n slots of a number, in n/k documents, renews
each document once per lease; the leases share R x 1 s (above), a
document's costing k times its length, so they last about 2R/n s and it
writes about n^2/(2Rk) times a second; at x sends/s it holds a little more
slots than x (its busiest second). Reads only to find a document it does not
hold. Measured with one slot a document (`make bench-core`, 2026-11-27
16:27 UTC): 0.04 reads and 0.28 writes a message, against 2.44 and 1.02
before leases; with k = 4, docs/benchmarks.md. The model (`make
scale-model` at bench-core's load, 2026-11-27): 0.27, 0.17, 0.10 and 0.07
writes a message at k = 1, 2, 4 and 8. What k costs: a document taken for
one send holds k - 1 more slots (for SPAN, or for its lease): near a
number's rate, or with many instances each sending rarely from a number,
sends wait more (the model's default load, numbers 68% busy at the peak:
1.15 timer tasks a message at k = 4 against 1.10 at k = 1, window writes
0.19 against 0.47). Many instances each sending from a number less than
once per lease pay a write per send and no read (a renewal), or, on a busy
number, a read and a write (a take without lease).

A change of k renames the documents: during a deployment's switch from one
layout to the other, old and new instances each see only their own layout,
so the number can pass its rate for as long as both send (seconds).

A slot's clock is the function's wall clock, stamped just before the write
that takes it; the platform counts the request when it arrives, after that
write and the call's connection. One slot's two sends can therefore arrive
closer than a second apart when the first was slower to go out than the
second, and the platform would see R + 1 in a second. So a slot frees only
`GUARD_US` after its second is over (the largest such difference this
covers). Measured with `python -m tools.local.demo_senders --rooms 300 --rate 5`
(2026-11-25, 2-core machine): 16 x 130429 in 600 sends with the slot stamped
at the send's decision and no guard, 0 with both. `make demo-senders` on
2026-11-27 16:36-16:47 UTC, the machine loaded by other sessions (its
emulator ran at a third of its speed): 2 x 130429 in 2,000 sends with
leases, 5 with the slots of f16701a in the same conditions: on a machine
this loaded, sends arrive more than GUARD_US apart from when they left.
With the write grace below, 2026-11-27 19:19-19:23 UTC (load average
about 40): 2 x 130429 in 2,000 sends, baton's own call starts never above
a number's rate in any sliding second, a call's start to the fake
platform's record p50 4 ms, p99 148 ms, max 480 ms (`make demo-senders`
prints both): the delay, not the window. Again 20:01-20:04 UTC (load
average 3 to 10): 3 x 130429, delay p99 101 ms, max 407 ms, and one number
with 11 call starts within 997 ms by the events' stamps, which are taken
after the slot: a thread delay of over 53 ms between a slot and its call
would show so, and so would a slot used twice. Each slot use is now
recorded with its stamp (`window_slots` of the invocation record) and the
fake stamps each call's arrival: 2026-11-27 21:42-21:45 UTC (load 10 to
29), 0 x 130429, at most the rate by the slots' stamps and by arrivals,
no slot used twice within 1,050 ms (SPAN), and the fake's own handling up
to 156 ms after an arrival (p99 21 ms): the time it then counted the rate
by, so a first call handled late made a second one, a SPAN after it,
look under a second apart. The fake now counts arrivals (as the
platform's edge does); what is left between a slot and the platform, a
thread's delay to its call and the transport, is what GUARD_US covers:
22:09-22:11 UTC (load 12 to 25), 0 x 130429, the same maxima, a call's
start to its arrival p50 3 ms, p99 79 ms, max 422 ms. Past GUARD_US that
delay can still put R + 1 arrivals in a second on a machine this loaded.
A slot's next send through its holder is timed from when the write that
took it returned, since its send leaves only then. Other instances judge a
document by the `last_us` written, so the write's own send must not leave
after it: the write sets `last_us` to its stamp plus the lease, or plus
WRITE_GRACE_US when the lease is shorter, and when the write returns later
than that (Firestore slow) its send does not go (`SlotTaken`: the room
waits and asks again). The leases' share of a crash's cost leaves R x
WRITE_GRACE_US of the second for these graces (`_lease_us`). Without
it, a document taken with no lease (a busy number) by a write that took
longer than GUARD_US let its send leave after `last_us`, and another
instance's sends through the same document a SPAN after `last_us` reached
the platform less than a second after it (`make demo-senders` on a loaded
machine, 2026-11-27: 130429s). Until `last_us` the holder may also send
through the document's other slots from memory.

Whatever takes a slot comes before the send's last deadline check, with no
I/O between that check and the platform call (shared/service/core.py).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.firestore_calls import FirestoreCalls
from shared.opcounts import counted_as, note_slot_use

SENDER_WINDOWS = "sender_windows"
WINDOW_US = 1_000_000  # one slot lets one send through per this many us (1 s)
GUARD_US = 50_000  # and frees this much later (50 ms): see the module docstring
SPAN_US = WINDOW_US + GUARD_US
LEASE_MAX_US = 10_000_000  # the longest lease (10 s): how long an unused slot can stay held
# A write that takes a document holds it at least this long (us) past its
# stamp, and its send goes only if the write returned by its `last_us`
# (100 ms): see the module docstring.
WRITE_GRACE_US = 100_000
CHOICES = 6  # documents read, one after another, to find a free one
SLOTS_PER_DOCUMENT = 4  # slots k of a number's window one document holds (see the module docstring)


def _record_use(phone_number_id: str, d: int, slot: int, at_us: int) -> None:
    """Note a send let through `slot` of document `d` at `at_us` (epoch us,
    the slot's stamp) in this request's operation record (METRICS_LOG_PATH:
    `make demo-senders` compares the stamps with the platform's arrivals)."""
    note_slot_use(phone_number_id, d, slot, at_us)


@dataclass(frozen=True)
class SlotTaken:
    """No slot was free: the sooner of the tried slots frees at `ready_at_us` (epoch us)."""

    ready_at_us: int


@dataclass
class _Held:
    """A document of slots this instance took: its lease end (epoch us,
    `last_us` as written), the document's update time after our write (the
    precondition of a renewal) and our last send through each of its slots
    (epoch us; 0: none)."""

    until_us: int
    update_time: Any
    last_use_us: list[int]
    writing: bool = False  # a renewal of it is under way (another thread's)

    def free_slot(self, now_us: int, slots: int) -> int | None:
        """The first of its first `slots` slots free at `now_us`, or None."""
        return next((i for i, last in enumerate(self.last_use_us[:slots]) if last + SPAN_US <= now_us), None)


@dataclass
class _Number:
    held: dict[int, _Held] = field(default_factory=dict)
    taking: set[int] = field(default_factory=set)  # documents another thread of ours is taking


class SenderWindow:
    """Takes send slots of a sender's per-second window in Firestore, keeping
    leased documents of slots in memory (one object per process: thread-safe).

    Args:
        client: a `google.cloud.firestore.Client`.
        rng: the document chooser (tests seed it).
        slots_per_document: slots k a document holds (SLOTS_PER_DOCUMENT;
            tests use 1 to look at single slots).
        monotonic_ns: this process's monotonic clock, ns: what a take's
            own calls spend is added to its `now_us` (a virtual-time world,
            such as the scale model, passes its simulated clock).
    """

    def __init__(self, client: firestore.Client, rng: random.Random | None = None,
                 slots_per_document: int = 0, monotonic_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._client = client
        # Its reads and writes, counted as Firestore's and as the window's
        # (`take` runs in `counted_as("window")`); a write counts whatever its
        # answer, a refused take or renewal included.
        self._fs = FirestoreCalls(client, {}, writes_tried=True)
        self._monotonic_ns = monotonic_ns
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._numbers: dict[str, _Number] = {}
        self._k = slots_per_document or SLOTS_PER_DOCUMENT

    def document_id(self, phone_number_id: str, d: int) -> str:
        """The id of document `d` of a number: the layout (k) is in the id,
        so windows of two layouts never read each other's documents as theirs."""
        return f"{phone_number_id}-{d}" if self._k == 1 else f"{phone_number_id}-{self._k}x{d}"

    def _slots(self, d: int, rate_per_s: int) -> int:
        """Slots of document `d` at `rate_per_s`: k, fewer in the last one."""
        return max(0, min(self._k, rate_per_s - d * self._k))

    def take(self, phone_number_id: str, rate_per_s: int, now_us: int) -> SlotTaken | None:
        """Take one send slot of `phone_number_id` at `now_us` (epoch us):
        None when taken (the send may go now), else `SlotTaken` with when to
        try again. From a document this instance leases when one of its slots
        is free (no I/O), else by renewing a lapsed one of ours (one write),
        else by reading up to CHOICES others and taking the first free one
        (reads and one write). A document taken by a write is stamped
        `now_us` plus the time this call spent before that write.
        `rate_per_s` 0: not limited (always None).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore failed
                (the caller's request answers 503 and is redelivered).
        """
        if rate_per_s <= 0:
            return None
        with counted_as("window"):
            return self._take(phone_number_id, rate_per_s, now_us)

    def _take(self, phone_number_id: str, rate_per_s: int, now_us: int) -> SlotTaken | None:
        """`take`, for a limited rate, its Firestore calls counted as the window's."""
        entered_ns = self._monotonic_ns()
        documents = -(-rate_per_s // self._k)

        def clock() -> int:
            return now_us + (self._monotonic_ns() - entered_ns) // 1000

        ready: list[int] = []
        renewals_tried: set[int] = set()
        while True:
            with self._lock:
                number = self._numbers.setdefault(phone_number_id, _Number())
                for d in [d for d in number.held if d >= documents]:
                    del number.held[d]  # the rate was lowered
                t = clock()
                own = sorted(number.held.items())
                for d, h in own:
                    if not h.writing and t <= h.until_us:
                        i = h.free_slot(t, self._slots(d, rate_per_s))
                        if i is not None:
                            h.last_use_us[i] = t
                            _record_use(phone_number_id, d, i, t)
                            return None  # a leased slot: no I/O
                renewable = next(((d, i) for d, h in own if not h.writing and d not in renewals_tried
                                  and (i := h.free_slot(t, self._slots(d, rate_per_s))) is not None), None)
                renew = None if renewable is None else renewable[0]
                if renewable is not None:
                    renew, slot = renewable
                    held = number.held[renew]
                    held.writing = True
                    lease = self._lease_us(number, renew, slot, rate_per_s, t)
                else:
                    ready.extend(last + SPAN_US for d, h in own
                                 for last in h.last_use_us[:self._slots(d, rate_per_s)] if last + SPAN_US > t)
                    candidates = [d for d in range(documents) if d not in number.held and d not in number.taking]
                    picked = self._rng.sample(candidates, min(CHOICES, len(candidates)))
                    number.taking.update(picked)
            if renew is not None:
                renewals_tried.add(renew)
                renewed = self._renew(phone_number_id, number, renew, slot, held, lease, clock)
                if renewed:
                    return None
                if renewed is None:
                    return SlotTaken(clock())  # Firestore is slow: ask again, not another write now
                continue  # taken by another instance meanwhile: look further
            try:
                return self._take_free(phone_number_id, number, picked, rate_per_s, clock, ready)
            finally:
                with self._lock:
                    number.taking.difference_update(picked)

    def _renew(self, phone_number_id: str, number: _Number, d: int, slot: int, held: _Held, lease_us: int,
               clock: Callable[[], int]) -> bool | None:
        """Renew our lapsed document `d` by a conditional write on our own
        last update time (no read), for a send through its `slot`: True.
        False, the document dropped, if another instance wrote it since;
        None, kept but not sent through, if the write returned after the
        `last_us` it wrote."""
        ref = self._client.collection(SENDER_WINDOWS).document(self.document_id(phone_number_id, d))
        stamp = clock()
        until = stamp + max(lease_us, WRITE_GRACE_US)
        try:
            result = self._fs.update(ref, {"last_us": until}, last_update_time=held.update_time)
        except (gexc.FailedPrecondition, gexc.Conflict, gexc.NotFound):
            with self._lock:
                number.held.pop(d, None)
            return False
        except BaseException:
            with self._lock:
                held.writing = False
            raise
        with self._lock:
            held.until_us, held.update_time, held.writing = until, result.update_time, False
            # Its send leaves after this write: its next one through this
            # slot a SPAN after now, not after the stamp (the write may be slow).
            t = clock()
            if t > until:
                return None  # the write came back too late to send by `last_us`
            held.last_use_us[slot] = t
        _record_use(phone_number_id, d, slot, t)
        return True

    def _take_free(self, phone_number_id: str, number: _Number, picked: list[int], rate_per_s: int,
                   clock: Callable[[], int], ready: list[int]) -> SlotTaken | None:
        """Read documents `picked` one after another and take the first free
        one (a lease only if it was the first read), sending through its
        first slot; SlotTaken when none was free."""
        for i, d in enumerate(picked):
            ref = self._client.collection(SENDER_WINDOWS).document(self.document_id(phone_number_id, d))
            snap = self._fs.get(ref)
            last = (snap.to_dict() or {}).get("last_us") if snap.exists else None
            t = clock()
            if last is not None and t - last < SPAN_US:
                ready.append(last + SPAN_US)
                continue
            # Free: its holder's last send through any of its slots started by `last`.
            fresh = _Held(0, None, [0] * self._slots(d, rate_per_s))
            with self._lock:
                # A document found busy first: the number is busy, no lease.
                lease = 0 if i > 0 else self._lease_us(number, d, 0, rate_per_s, t, fresh)
            stamp = clock()  # the reads came first
            until = stamp + max(lease, WRITE_GRACE_US)
            try:
                if snap.exists:
                    result = self._fs.update(ref, {"last_us": until}, since=snap)
                else:
                    result = self._fs.create(ref, {"last_us": until})
            except (gexc.FailedPrecondition, gexc.Conflict, gexc.AlreadyExists):
                ready.append(stamp + SPAN_US)  # another send took it just now
                continue
            with self._lock:
                fresh.until_us, fresh.update_time = until, result.update_time
                number.held[d] = fresh
                t = clock()
                if t > until:
                    return SlotTaken(t)  # as in `_renew`: held, not sent through
                fresh.last_use_us[0] = t  # as in `_renew`
            _record_use(phone_number_id, d, 0, t)
            return None
        return SlotTaken(min(ready)) if ready else SlotTaken(clock() + SPAN_US)

    def _lease_us(self, number: _Number, d: int, slot: int, rate_per_s: int, now_us: int,
                  held: _Held | None = None) -> int:
        """The lease document `d` may get when its `slot` is used at
        `now_us`: what keeps a crash's cost within one second of the rate.
        After a crash, each slot of a document we hold stays busy until the
        lease's end and SPAN, past what its last send holds anyway (SPAN
        after it): over every slot we hold of the number, this document's
        new lease included, at most `rate_per_s` x WINDOW_US (slot-us). A
        lease L costs the used slot L and each other slot of the document L
        plus what of SPAN its last send no longer holds; each lease at most
        LEASE_MAX_US, 0 when none fits. `held`: the document's record when it
        is not ours yet."""
        def cost(h: _Held, until_us: int, slots: int) -> int:
            return sum(max(0, until_us + SPAN_US - max(now_us, last + SPAN_US)) for last in h.last_use_us[:slots])

        others = sum(cost(h, h.until_us, self._slots(j, rate_per_s)) for j, h in number.held.items() if j != d)
        mine = held if held is not None else number.held[d]
        slots = self._slots(d, rate_per_s)
        # Its cost at a lease of 0, the used slot's last send taken as now.
        fixed = sum(min(SPAN_US, max(0, now_us - last)) for i, last in enumerate(mine.last_use_us[:slots])
                    if i != slot)
        # R x WRITE_GRACE_US of the second is kept for the documents that
        # get less lease than that grace (their `last_us` is the grace's).
        budget = rate_per_s * (WINDOW_US - WRITE_GRACE_US)
        return max(0, min(LEASE_MAX_US, (budget - others - fixed) // slots))
