"""Billable operations counted per request: Firestore reads and writes,
Cloud Tasks creates and deletes, send calls, status publishes.

The benchmarks' and the cost estimate's source (METRICS_LOG_PATH); counts
only, no I/O. The counts are taken where the calls leave baton, by the
counting wrappers the adapters call through: shared/firestore_calls.py
(Firestore), shared/tasks.py `CountedTasks` (Cloud Tasks),
shared/counted.py (status publishes, send calls). A caller whose
Firestore calls are also a share of their own (the sender window's, the
`sent` proof's) runs them inside `counted_as(tag)`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal


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


# Whose share the Firestore calls made now also are: `window_*` or `proof_*`.
Tag = Literal["window", "proof"]
_tag: ContextVar[Tag | None] = ContextVar("baton_op_counts_tag", default=None)


@contextmanager
def counted_as(tag: Tag) -> Iterator[None]:
    """The Firestore calls made inside the block are also counted as `tag`'s
    (`window_reads`/`window_writes` or `proof_reads`/`proof_writes`, as
    well as `firestore_reads`/`firestore_writes`)."""
    token = _tag.set(tag)
    try:
        yield
    finally:
        _tag.reset(token)


def current_tag() -> Tag | None:
    """The tag of the enclosing `counted_as` block, or None."""
    return _tag.get()


def note_slot_use(phone_number_id: str, document: int, slot: int, at_us: int) -> None:
    """Note a send let through `slot` of the sender window's `document` at
    `at_us` (epoch us, the slot's stamp) in this request's record
    (`window_slots`; shared/sender_window.py)."""
    op_counts().window_slots.append((phone_number_id, document, slot, at_us))


def invocation_counts() -> dict[str, Any]:
    """This request's counts as its invocation record carries them
    (METRICS_LOG_PATH, shared/service/core.py `record_invocation`; the
    benchmarks and the cost estimate read these keys)."""
    c = op_counts()
    return {"firestore_reads": c.firestore_reads, "firestore_writes": c.firestore_writes,
            "tasks_created": c.tasks_created, "tasks_deleted": c.tasks_deleted, "send_calls": c.send_calls,
            "status_publishes": c.status_publishes,
            "window_reads": c.window_reads, "window_writes": c.window_writes,
            "proof_reads": c.proof_reads, "proof_writes": c.proof_writes, "window_slots": c.window_slots}
