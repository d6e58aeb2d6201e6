"""Per-sender throughput, shared by every function instance without a hot
document: a sender's rate R (messages/s) is R window documents, each of which
lets one send through per second (and a guard, below).

`sender_windows/{phone_number_id}-{k}` (k in 0..R-1) holds `last_us`, when its
slot was last taken. A send takes a slot by a conditional write (the
document's update time as precondition, or create-if-absent): at most one
send per slot per second, so at most R sends in any one-second window over the
whole sender, and each document takes at most 1 write/s, Firestore's
sustained rate for one document
(https://firebase.google.com/docs/firestore/best-practices#updates_to_a_single_document).
A send reads up to CHOICES slots chosen at random, one after another, and
takes the first free one (load spreads without coordination); when all are
taken the room waits for the soonest, as a paced room waits
(shared/room/flight.py, `send_returned`). A slot stays taken for a second,
so at a number's load of u x its rate a slot is busy with chance about u:
with two choices u^2 of the sends waited, 15% in `make bench-core`
(2026-11-25) at a third of the rate; with six, u^6.

Cost per WhatsApp send: 1 write and about 1 / (1 - u) reads (1.9 measured
at a third of the rate, docs/benchmarks.md), up to CHOICES when the number
is at its rate: about $1.50 per million sends at docs/cost.md's list
prices ($0.09 per 100,000 writes, $0.03 per 100,000 reads).

A slot's clock is the function's wall clock, stamped just before the write
that takes it; the platform counts the request when it arrives, after that
write and the call's connection. One slot's two sends can therefore arrive
closer than a second apart when the first was slower to go out than the
second, and the platform would see R + 1 in a second. So a slot frees only
`GUARD_US` after its second is over (the largest such difference this
covers), and the rate to configure is still a little below the platform's
(75 of WhatsApp's 80, docs/configuration.md). Measured with
`python -m tools.demo_senders --rooms 300 --rate 5` (baton and the fake
platform both at 5/s, 2026-11-25, 2-core machine): 16 x 130429 in 600 sends
with the slot stamped at the send's decision and no guard, 0 with both.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from google.api_core import exceptions as gexc
from google.cloud import firestore

from shared.opcounts import op_counts

SENDER_WINDOWS = "sender_windows"
WINDOW_US = 1_000_000  # one slot lets one send through per this many us (1 s)
GUARD_US = 50_000  # and frees this much later (50 ms): see the module docstring
CHOICES = 6


@dataclass(frozen=True)
class SlotTaken:
    """No slot was free: the sooner of the tried slots frees at `ready_at_us` (epoch us)."""

    ready_at_us: int


class SenderWindow:
    """Takes send slots of a sender's per-second window in Firestore.

    Args:
        client: a `google.cloud.firestore.Client`.
        rng: the slot chooser (tests seed it).
    """

    def __init__(self, client: firestore.Client, rng: random.Random | None = None) -> None:
        self._client = client
        self._rng = rng or random.Random()

    def take(self, phone_number_id: str, rate_per_s: int, now_us: int) -> SlotTaken | None:
        """Take one send slot of `phone_number_id` at `now_us` (epoch us):
        None when taken (the send may go), else `SlotTaken` with when to try
        again. A slot is stamped `now_us` plus the time this call spent
        before the write that takes it, and frees `WINDOW_US + GUARD_US`
        after its stamp. `rate_per_s` 0: not limited (always None).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore failed
                (the caller's request answers 503 and is redelivered).
        """
        if rate_per_s <= 0:
            return None
        entered_ns = time.monotonic_ns()
        slots = self._rng.sample(range(rate_per_s), min(CHOICES, rate_per_s))
        ready = []
        for k in slots:
            ref = self._client.collection(SENDER_WINDOWS).document(f"{phone_number_id}-{k}")
            snap = ref.get()
            op_counts().firestore_reads += 1
            op_counts().window_reads += 1
            last = (snap.to_dict() or {}).get("last_us") if snap.exists else None
            if last is not None and now_us - last < WINDOW_US + GUARD_US:
                ready.append(last + WINDOW_US + GUARD_US)
                continue
            # `now_us` advanced by the time spent here: the reads came first.
            stamp = now_us + (time.monotonic_ns() - entered_ns) // 1000
            try:
                if snap.exists:
                    ref.update({"last_us": stamp}, option=self._client.write_option(last_update_time=snap.update_time))
                else:
                    ref.create({"last_us": stamp})
            except (gexc.FailedPrecondition, gexc.Conflict, gexc.AlreadyExists):
                ready.append(stamp + WINDOW_US + GUARD_US)  # another send took it just now
                continue
            finally:
                op_counts().firestore_writes += 1
                op_counts().window_writes += 1
            return None
        return SlotTaken(min(ready))
