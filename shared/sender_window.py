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

Layout: `sender_windows/{phone_number_id}-{k}` (k in 0..R-1) holds `last_us`,
the last time (epoch us) its holder may start a send through it. Every
instance counts the slot busy until `last_us + WINDOW_US + GUARD_US` (SPAN),
and takes a free one by a conditional write (the document's update time as
precondition, or create-if-absent), so no two instances hold one slot.

A lease: the write that takes a slot sets `last_us` to now plus a lease of
L (0 to LEASE_MAX_US). Until then its instance sends through it again,
once per SPAN, from memory: no read, no write. When the lease is over and it
needs the slot again it renews it by the same conditional write with the
update time of its own last write (no read), which fails if another
instance took the slot meanwhile (then it looks for another). Any one slot
is thus used at most once in any SPAN, by one instance at a time: at most R
sends of a number in any sliding second, and at most one write a second on
a document. An instance uses its leased slots first, lowest first, so the
slots it no longer needs lapse.

What a crash costs: a dead instance's slots stay busy, past the SPAN their
last sends hold anyway (as without leases), for what is left of their
leases. Each lease is granted so that this sum, over the slots the instance
holds of that number, stays within R x 1 s: a crash holding leases wastes at
most one second of the number's rate (`_lease_us`). A slot taken
after finding another busy gets no lease (L = 0: the number is busy, and a
lease would keep capacity from instances that need it); so does one whose
lease would not fit.

Cost: an instance holding n slots of a number renews each once per lease,
and those leases share R x 1 s (above), so they last about 2R/n s and it
writes about n^2/(2R) times a second; at x sends/s it holds a little more
slots than x (its busiest second). Reads only to find a slot it does not
hold. Measured (`make bench-core`, 2026-11-27, docs/benchmarks.md): 0 reads
and 0.16 writes a send in the half-capacity run (a number at a seventh of
its rate, three processes sending), 0.04 and 0.28 over the whole run,
against 2.44 and 1.02 before leases. Documents of k slots each would divide
the writes by k (not done: one taken for a single send strands k - 1 of the
rate, which hurts when many instances each send rarely from a number).
Many instances each sending from a number less than once per lease pay a
write per send and no read (a renewal), or, on a busy number, a read and a
write (a take without lease).

A slot's clock is the function's wall clock, stamped just before the write
that takes it; the platform counts the request when it arrives, after that
write and the call's connection. One slot's two sends can therefore arrive
closer than a second apart when the first was slower to go out than the
second, and the platform would see R + 1 in a second. So a slot frees only
`GUARD_US` after its second is over (the largest such difference this
covers). Measured with `python -m tools.demo_senders --rooms 300 --rate 5`
(2026-11-25, 2-core machine): 16 x 130429 in 600 sends with the slot stamped
at the send's decision and no guard, 0 with both. `make demo-senders` on
2026-11-27 16:36-16:47 UTC, the machine loaded by other sessions (its
emulator ran at a third of its speed): 2 x 130429 in 2,000 sends with
leases, 5 with the slots of f16701a in the same conditions: on a machine
this loaded, sends arrive more than GUARD_US apart from when they left.
A slot's next send through its holder is timed from when the write that
took it returned, since its send leaves only then.

Whatever takes a slot comes before the send's last deadline check, with no
I/O between that check and the platform call (shared/service/core.py).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.opcounts import op_counts

SENDER_WINDOWS = "sender_windows"
WINDOW_US = 1_000_000  # one slot lets one send through per this many us (1 s)
GUARD_US = 50_000  # and frees this much later (50 ms): see the module docstring
SPAN_US = WINDOW_US + GUARD_US
LEASE_MAX_US = 10_000_000  # the longest lease (10 s): how long an unused slot can stay held
CHOICES = 6  # slots read, one after another, to find a free one


@dataclass(frozen=True)
class SlotTaken:
    """No slot was free: the sooner of the tried slots frees at `ready_at_us` (epoch us)."""

    ready_at_us: int


@dataclass
class _Held:
    """A slot this instance took: its lease end (epoch us, `last_us` as
    written), the document's update time after our write (the precondition
    of a renewal) and our last send through it (epoch us)."""

    until_us: int
    update_time: Any
    last_use_us: int
    writing: bool = False  # a renewal of it is under way (another thread's)


@dataclass
class _Number:
    held: dict[int, _Held] = field(default_factory=dict)
    taking: set[int] = field(default_factory=set)  # slots another thread of ours is taking


class SenderWindow:
    """Takes send slots of a sender's per-second window in Firestore, keeping
    leased slots in memory (one object per process: thread-safe).

    Args:
        client: a `google.cloud.firestore.Client`.
        rng: the slot chooser (tests seed it).
    """

    def __init__(self, client: firestore.Client, rng: random.Random | None = None) -> None:
        self._client = client
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._numbers: dict[str, _Number] = {}

    def take(self, phone_number_id: str, rate_per_s: int, now_us: int) -> SlotTaken | None:
        """Take one send slot of `phone_number_id` at `now_us` (epoch us):
        None when taken (the send may go now), else `SlotTaken` with when to
        try again. From a slot this instance leases when one is free (no
        I/O), else by renewing a lapsed one of ours (one write), else by
        reading up to CHOICES others and taking the first free one (reads and
        one write). A slot taken by a write is stamped `now_us` plus the time
        this call spent before that write. `rate_per_s` 0: not limited
        (always None).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore failed
                (the caller's request answers 503 and is redelivered).
        """
        if rate_per_s <= 0:
            return None
        entered_ns = time.monotonic_ns()

        def clock() -> int:
            return now_us + (time.monotonic_ns() - entered_ns) // 1000

        ready: list[int] = []
        renewals_tried: set[int] = set()
        while True:
            with self._lock:
                number = self._numbers.setdefault(phone_number_id, _Number())
                for k in [k for k in number.held if k >= rate_per_s]:
                    del number.held[k]  # the rate was lowered
                t = clock()
                own = sorted(number.held.items())
                for _, h in own:
                    if not h.writing and h.last_use_us + SPAN_US <= t <= h.until_us:
                        h.last_use_us = t
                        return None  # a leased slot: no I/O
                renew = next((k for k, h in own if not h.writing and k not in renewals_tried
                              and h.last_use_us + SPAN_US <= t), None)
                if renew is not None:
                    held = number.held[renew]
                    held.writing = True
                    lease = self._lease_us(number, renew, rate_per_s, t)
                else:
                    ready.extend(h.last_use_us + SPAN_US for _, h in own if h.last_use_us + SPAN_US > t)
                    candidates = [k for k in range(rate_per_s) if k not in number.held and k not in number.taking]
                    slots = self._rng.sample(candidates, min(CHOICES, len(candidates)))
                    number.taking.update(slots)
            if renew is not None:
                renewals_tried.add(renew)
                if self._renew(phone_number_id, number, renew, held, lease, clock):
                    return None
                continue  # taken by another instance meanwhile: look further
            try:
                return self._take_free(phone_number_id, number, slots, rate_per_s, clock, ready)
            finally:
                with self._lock:
                    number.taking.difference_update(slots)

    def _renew(self, phone_number_id: str, number: _Number, k: int, held: _Held, lease_us: int, clock) -> bool:
        """Renew our lapsed slot `k` by a conditional write on our own last
        update time (no read). False, the slot dropped, if another instance
        wrote it since."""
        ref = self._client.collection(SENDER_WINDOWS).document(f"{phone_number_id}-{k}")
        stamp = clock()
        try:
            result = ref.update({"last_us": stamp + lease_us},
                                option=self._client.write_option(last_update_time=held.update_time))
        except (gexc.FailedPrecondition, gexc.Conflict, gexc.NotFound):
            with self._lock:
                number.held.pop(k, None)
            return False
        except BaseException:
            with self._lock:
                held.writing = False
            raise
        finally:
            op_counts().firestore_writes += 1
            op_counts().window_writes += 1
        with self._lock:
            # Its send leaves after this write: its next one through this
            # slot a SPAN after now, not after the stamp (the write may be slow).
            held.until_us, held.update_time, held.last_use_us, held.writing = (
                stamp + lease_us, result.update_time, clock(), False)
        return True

    def _take_free(self, phone_number_id: str, number: _Number, slots: list[int], rate_per_s: int, clock,
                   ready: list[int]) -> SlotTaken | None:
        """Read `slots` one after another and take the first free one (a
        lease only if it was the first read); SlotTaken when none was."""
        for i, k in enumerate(slots):
            ref = self._client.collection(SENDER_WINDOWS).document(f"{phone_number_id}-{k}")
            snap = ref.get()
            op_counts().firestore_reads += 1
            op_counts().window_reads += 1
            last = (snap.to_dict() or {}).get("last_us") if snap.exists else None
            t = clock()
            if last is not None and t - last < SPAN_US:
                ready.append(last + SPAN_US)
                continue
            with self._lock:
                # A slot found busy first: the number is busy, no lease.
                lease = 0 if i > 0 else self._lease_us(number, k, rate_per_s, t)
            stamp = clock()  # the reads came first
            try:
                if snap.exists:
                    result = ref.update({"last_us": stamp + lease},
                                        option=self._client.write_option(last_update_time=snap.update_time))
                else:
                    result = ref.create({"last_us": stamp + lease})
            except (gexc.FailedPrecondition, gexc.Conflict, gexc.AlreadyExists):
                ready.append(stamp + SPAN_US)  # another send took it just now
                continue
            finally:
                op_counts().firestore_writes += 1
                op_counts().window_writes += 1
            with self._lock:
                number.held[k] = _Held(stamp + lease, result.update_time, clock())  # as in `_renew`
            return None
        return SlotTaken(min(ready)) if ready else SlotTaken(clock() + SPAN_US)

    @staticmethod
    def _lease_us(number: _Number, k: int, rate_per_s: int, now_us: int) -> int:
        """The lease slot `k` may get when used at `now_us`: what keeps a
        crash's cost within one second of the rate. After a crash, a slot we
        hold stays busy past what its last send holds anyway (SPAN after it)
        for as long as its lease had left: over every slot we hold of the
        number, this one's new lease included, at most `rate_per_s` x
        WINDOW_US (slot-us); each lease at most LEASE_MAX_US, 0 when none fits."""
        others = sum(max(0, h.until_us + SPAN_US - max(now_us, h.last_use_us + SPAN_US))
                     for j, h in number.held.items() if j != k)
        return max(0, min(LEASE_MAX_US, rate_per_s * WINDOW_US - others))
