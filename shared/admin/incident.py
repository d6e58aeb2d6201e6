"""The incident switch: one deployment-wide flag that holds every new send.

`baton pause --all --reason R` sets it (through the admin function),
`baton resume --all` clears it. It is one Firestore document,
`baton_control/incident`: `{on, actor, reason, at_us}`.

What it does, in the service's send path (shared/service/core.py, `_send`,
one line): before a send call, an instance asks `hold_until(now)`. While the
switch is on, no call is made; the room records its head of line as waiting
exactly as for a WhatsApp number at its rate (`SendReturned` with
`sender_busy_until_us`, shared/room/flight.py): the same attempt, never
sent, its timer armed for `now + HOLD_RECHECK_US` (plus up to
`HOLD_JITTER_US`, so a fleet does not come back in one instant). Nothing
else changes: pushes are stored in their rooms, statuses and acks apply
(an ack ends its message; the next one is then held), timers fire, the
watchdog runs. When the timer comes and the switch is off, the send goes;
every room resumes with its own head of line, in order. A message in flight
when the switch goes on ends normally (ack or timeout).

How fast: an instance re-reads the flag at most every `CACHE_US` (2 s), so a
send may still start up to 2 s after the switch is set (plus a call already
under way). A held room tries again after 15-20 s, so sends come back within
about 20 s of `resume --all`. Cost while on: one timer task and one room
transaction per holding room every 15-20 s (25,000 rooms: about 1,400/s,
within Cloud Tasks' 500/s per queue times TASKS_QUEUE_COUNT; raise the
recheck for more rooms).

If the flag cannot be read (Firestore unavailable), the last value read is
kept; an instance that never read it sends (the room transaction that
follows needs Firestore anyway).
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from typing import Any

CONTROL = "baton_control"
INCIDENT_DOC = "incident"
CACHE_US = 2_000_000  # an instance re-reads the switch at most this often (us)
HOLD_RECHECK_US = 15_000_000  # a held send tries again this much later (us)
HOLD_JITTER_US = 5_000_000  # plus up to this much (us), spread at random


@dataclass(frozen=True)
class Incident:
    """The switch as stored: `on`, who set it (`actor`, a verified identity),
    why, and when (`at_us`, epoch us)."""

    on: bool
    actor: str | None = None
    reason: str | None = None
    at_us: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


class IncidentSwitch:
    """Reads (cached per instance) and sets the switch.

    Args:
        client: a `google.cloud.firestore.Client`.
        clock_us: the wall clock, epoch us (tests inject one).
        rng: the jitter's chooser.
    """

    def __init__(self, client: Any, clock_us: Any = None, rng: random.Random | None = None) -> None:
        self._ref = client.collection(CONTROL).document(INCIDENT_DOC)
        self._clock = clock_us or (lambda: time.time_ns() // 1000)
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._known: Incident = Incident(False)
        self._read_at_us: int | None = None

    def read(self) -> Incident:
        """The switch as Firestore has it now (off when never set).

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore failed.
        """
        snap = self._ref.get()
        doc = snap.to_dict() if snap.exists else None
        if not doc:
            return Incident(False)
        return Incident(bool(doc.get("on")), doc.get("actor"), doc.get("reason"), doc.get("at_us"))

    def set(self, on: bool, actor: str, reason: str) -> tuple[Incident, bool]:
        """Turn the switch on or off; returns (the switch now, whether it
        changed). Setting what is already set changes nothing.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: Firestore failed.
        """
        before = self.read()
        if before.on == on:
            return before, False
        now = Incident(on, actor, reason, self._clock())
        self._ref.set(now.to_json())
        with self._lock:
            self._known, self._read_at_us = now, now.at_us
        return now, True

    def hold_until(self, now_us: int) -> int | None:
        """None when a send may go now; else when (epoch us) the held send
        should try again. Reads Firestore at most once per CACHE_US."""
        with self._lock:
            fresh = self._read_at_us is not None and now_us - self._read_at_us < CACHE_US
            known = self._known
        if not fresh:
            try:
                known = self.read()
            except Exception:  # noqa: BLE001 - keep the last value read (module docstring)
                pass
            with self._lock:
                self._known, self._read_at_us = known, now_us
        if not known.on:
            return None
        return now_us + HOLD_RECHECK_US + self._rng.randrange(HOLD_JITTER_US)
