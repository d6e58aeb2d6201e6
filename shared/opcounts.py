"""Billable operations counted per request: Firestore reads and writes,
Cloud Tasks creates and deletes, send calls, status publishes.

The benchmarks' and the cost estimate's source (METRICS_LOG_PATH); counts
only, no I/O.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field


@dataclass
class OpCounts:
    """Billable operations made while handling one request."""

    firestore_reads: int = 0
    firestore_writes: int = 0
    tasks_created: int = 0
    tasks_deleted: int = 0  # DeleteTask calls for timers whose attempt ended first
    send_calls: int = 0
    status_publishes: int = 0  # messages published to the status queue or its error queue
    window_reads: int = 0  # of firestore_reads: the sender window's (shared/sender_window.py)
    window_writes: int = 0  # of firestore_writes: the sender window's
    proof_reads: int = 0  # of firestore_reads: WHATSAPP_SENT_PROOF's (shared/service/webhook.py)
    proof_writes: int = 0  # of firestore_writes: WHATSAPP_SENT_PROOF's
    # The sender window's slot uses: (number, document, slot, epoch us of the use), shared/sender_window.py.
    window_slots: list[tuple[str, int, int, int]] = field(default_factory=list)

_current: ContextVar[OpCounts | None] = ContextVar("baton_op_counts", default=None)

def op_counts() -> OpCounts:
    """The counters of the request being handled (a throwaway one outside a request)."""
    counts = _current.get()
    if counts is None:
        counts = OpCounts()
        _current.set(counts)
    return counts

def begin_request() -> OpCounts:
    """Start counting a new request's operations; returns its counters."""
    counts = OpCounts()
    _current.set(counts)
    return counts
