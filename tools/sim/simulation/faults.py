"""What a seed injects, and how often each kind was injected.

A seed draws a profile first (how likely each family of faults is in this
run: some runs calm, some stormy in one place), then every decision of the
run draws from the same `random.Random`. `count(kind)` tallies each fault
kind actually injected; `make simulate` prints the tallies over all seeds.
Units: `*_ms` milliseconds, `*_us` microseconds.
"""

from __future__ import annotations

import random
from collections import Counter

SEND_FAULT_KINDS = ("drop_after_read", "5xx_taken", "5xx_lost", "no_connection", "130429", "131056", "131047")


class Faults:
    """The seed's fault plan (see the module). `calm()` stops every fault
    (the drain at the end of a run: what is left must finish by itself)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.counts: Counter[str] = Counter()
        self.calm_now = False
        self.outages: list[tuple[int, int]] = []
        level = rng.choice((0.0, 0.02, 0.05, 0.15, 0.3))
        self.p = {
            "stall": rng.choice((0.0, 0.02, 0.08, 0.2)),  # a port call that takes seconds
            "window_stall": rng.choice((0.0, 0.05, 0.3)),  # the sender window's reads and writes (retries)
            "crash": rng.choice((0.0, 0.005, 0.02)),  # the process dies at a port call
            "store_error": rng.choice((0.0, 0.01, 0.04)),
            "arm_error": rng.choice((0.0, 0.02, 0.1)),
            "lost_task": rng.choice((0.0, 0.02, 0.1)),
            "send_fault": level,
            "permanent": rng.choice((0.0, 0.02)),
            "never_delivered": rng.choice((0.05, 0.15, 0.4)),
            "late_delivery": rng.choice((0.0, 0.1, 0.3)),
            "dup": rng.choice((0.0, 0.05, 0.2)),  # duplicated pushes, webhooks, tasks
            "no_sent_status": rng.choice((0.0, 0.2, 0.6)),  # WhatsApp posts no `sent` (only `delivered`/`read` may come)
            "webhook_lag": rng.choice((0.0, 0.1, 0.5)),  # Meta's webhooks lag (an incident on their side)
            "straggler": rng.choice((0.0, 0.3, 0.7)),
            "no_mids": rng.choice((0.0, 0.5, 1.0)),
            "max_watermark": rng.choice((0.5, 0.9)),
        }

    def calm(self) -> None:
        self.calm_now = True

    def in_outage(self, now_us: int) -> bool:
        """Whether Firestore is down at `now_us` (an outage the world set,
        `outages`: (start, end) epoch us); counts each refused call."""
        if any(start <= now_us < end for start, end in self.outages):
            self.count("call refused in a Firestore outage")
            return True
        return False

    def count(self, kind: str, n: int = 1) -> None:
        self.counts[kind] += n

    def chance(self, key: str, kind: str | None = None) -> bool:
        """True with the profile's probability of `key` (never when calm);
        counts `kind` (default `key`) when true."""
        if self.calm_now or not self.rng.random() < self.p[key]:
            return False
        self.count(kind or key)
        return True

    # -- port calls

    def port_latency_us(self, port: str) -> int:
        """How long a port call takes: usually a few ms, sometimes a stall of seconds."""
        key = "window_stall" if port.startswith("sender window") else "stall"
        if self.chance(key, f"stall at {port}"):
            return self.stall_ms() * 1000
        return self.rng.randint(200, 15_000)

    def stall_ms(self) -> int:
        """A stall's length (ms): most land just past one of the service's
        deadlines (send start, send budget, ack timeout, their sums), where a
        check made before the stall and not after it goes wrong."""
        if self.rng.random() < 0.3:
            return self.rng.randint(300, 8000)
        return self.rng.choice((2000, 3000, 4000, 5000, 7000)) + self.rng.randint(-200, 1500)

    # -- the platforms

    def send_fault(self, provider: str) -> str:
        if self.calm_now:
            return "ok"
        if self.rng.random() < self.p["permanent"]:
            self.count("send 131047")
            return "131047"
        if self.rng.random() < self.p["send_fault"]:
            kind = self.rng.choice(SEND_FAULT_KINDS[:-1])
            self.count(f"send {kind}")
            return kind
        return "ok"

    def send_latency_ms(self) -> tuple[int, int]:
        """(before the platform reads the request, after): ms."""
        if self.chance("stall", "stall at send"):
            stall = self.stall_ms()
            return (stall, self.rng.randint(10, 100)) if self.rng.random() < 0.5 else (self.rng.randint(20, 150), stall)
        return self.rng.randint(20, 150), self.rng.randint(10, 100)

    def delivery_delay_ms(self) -> int | None:
        """When the device gets a taken message (ms after), or None: never."""
        if self.chance("never_delivered", "message never delivered"):
            return None
        if self.chance("late_delivery", "late delivery (after the ack timeout)"):
            return self.rng.randint(3000, 20_000)
        return self.rng.randint(30, 2500)

    def read_delay_ms(self) -> int | None:
        return self.rng.randint(100, 8000) if self.rng.random() < 0.5 else None

    def webhook_delays_ms(self) -> list[int]:
        """One post (ms after the event), or duplicates; sometimes far late."""
        if self.chance("webhook_lag", "webhook late by seconds"):
            first = self.rng.randint(2000, 12_000)
        else:
            first = self.rng.randint(5, 400) if self.rng.random() < 0.9 else self.rng.randint(400, 15_000)
        delays = [first]
        if self.chance("dup", "duplicated webhook"):
            delays.append(self.rng.randint(5, 20_000))
        return delays

    def straggler_delays_ms(self) -> list[int]:
        if self.chance("straggler", "straggler receipt"):
            return [self.rng.randint(1, 4000)]
        return []

    def watermark(self, legal_ms: int, least_ms: int) -> int:
        """A watermark between the least that covers the news and the largest
        the documentation allows."""
        if self.rng.random() < self.p["max_watermark"]:
            return legal_ms
        return self.rng.randint(least_ms, legal_ms)

    def with_mids(self) -> bool:
        return self.rng.random() >= self.p["no_mids"]

    # -- Pub/Sub, Cloud Tasks

    def redelivery_ms(self) -> int:
        return self.rng.randint(100, 10_000)

    def dispatch_delay_ms(self) -> int:
        return self.rng.randint(0, 600) if self.rng.random() < 0.95 else self.rng.randint(600, 5000)
