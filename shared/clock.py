"""The wall clock, as the `Clock` port (shared/ports.py) gives the time:
epoch microseconds. Tests and the simulation pass a simulated one instead
(`tools.sim.fakes.SimClock`)."""

from __future__ import annotations

import time


class SystemClock:
    """The machine's clock (`time.time_ns`), epoch microseconds."""

    def now_us(self) -> int:
        """Now, epoch microseconds."""
        return time.time_ns() // 1000


SYSTEM_CLOCK = SystemClock()
