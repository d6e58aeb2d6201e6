"""Operator actions through the service (the `baton` CLI uses shared/operators.py,
which applies the same room events).

Applies an operator's event to a room; must not decide anything itself.
"""

from __future__ import annotations

from shared.room import (
    Decision,
    Redrive,
    Skip,
)
from shared.service import core
from shared.service.core import ServiceCore


class OperatorHandlers(ServiceCore):
    """Redrive and skip, as the service applies them."""

    def redrive(self, room_id: str, seq: int, actor: str, reason: str) -> Decision:
        """Release the parked message `seq` of a room: it is sent in its turn."""
        return self.apply(room_id, Redrive(seq, actor, reason, core.now_us()), "operator")

    def skip(self, room_id: str, seq: int, actor: str, reason: str) -> Decision:
        """End message `seq` of a room (in flight or queued) as `skipped`."""
        return self.apply(room_id, Skip(seq, actor, reason, core.now_us()), "operator")
