"""`baton status`: the deployment at a glance, as `rq info` or Sidekiq's
dashboard show a queue system: rooms holding messages, in flight (per
provider), paused, with parked messages, overdue (past the watchdog's
grace), dead letters and rejected pushes kept, scheduled messages waiting,
the status error queue's depth, and the incident switch; the rooms in
flight per WhatsApp sending number (shared/admin/numbers.py).

Every room figure is a Firestore count aggregation over an index (no scan;
one read per 1,000 entries counted), all of them asked at once; the scheduled messages and
the error queue are listed up to a cap (`SCHEDULED_CAP`, `ERROR_QUEUE_CAP`)
and shown as "at least" when they reach it.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from shared.records import DEAD_LETTERS, REJECTED

SCHEDULED_CAP = 10_000
# The overview's queries asked at once (threads of one request).
OVERVIEW_CONCURRENCY = 8
ERROR_QUEUE_CAP = 1_000


def _capped(n: int, cap: int) -> dict[str, Any]:
    return {"count": n, "at_least": n >= cap}


def overview(admin: Any, with_error_queue: bool = True, now_us: int | None = None) -> dict[str, Any]:
    """The overview as JSON: counts, the incident switch, the settings that
    shape them (index shards, providers, webhook mode). `admin` is a
    `shared.admin.actions.Admin`.

    Raises:
        google.api_core.exceptions.GoogleAPICallError: a query failed.
    """
    store = admin.operators.store
    from shared.admin.numbers import sending_numbers

    s = admin.settings
    now = time.time_ns() // 1000 if now_us is None else now_us
    providers = sorted(s.enabled_providers)
    asks: dict[str, Callable[[], Any]] = {
        "holding": lambda: store.count_rooms("lag"),
        "paused": lambda: store.count_rooms("paused"),
        "with_parked": lambda: store.count_rooms("parked"),
        "overdue": lambda: store.count_rooms("stuck", before_us=now - s.watchdog_grace_ms * 1000),
        "dead_letters_kept": lambda: store.count_collection(DEAD_LETTERS),
        "rejected_pushes_kept": lambda: store.count_collection(REJECTED),
        "scheduled": lambda: len(admin.scheduled_factory().list(None, SCHEDULED_CAP)),
        "incident": lambda: admin.incident.read().to_json(),
    }
    for p in providers:
        asks[f"in_flight:{p}"] = functools.partial(store.count_in_flight, p)
    numbers = sending_numbers(s)
    if numbers:  # one count aggregation per WhatsApp number, asked at once
        asks["in_flight:numbers"] = functools.partial(store.numbers.count_sending_from, numbers)
    # Independent queries, asked at once (each in the request's context: its reads are counted).
    with ThreadPoolExecutor(max_workers=OVERVIEW_CONCURRENCY) as pool:
        futures = {name: pool.submit(contextvars.copy_context().run, ask) for name, ask in asks.items()}
        got = {name: future.result() for name, future in futures.items()}
    in_flight = {p: got[f"in_flight:{p}"] for p in providers}
    out: dict[str, Any] = {
        "rooms": {
            "holding": got["holding"],
            "in_flight": sum(in_flight.values()),
            "paused": got["paused"],
            "with_parked": got["with_parked"],
            "overdue": got["overdue"],
        },
        "in_flight_by_provider": in_flight,
        "in_flight_by_number": got.get("in_flight:numbers", {}),
        "dead_letters_kept": got["dead_letters_kept"],
        "rejected_pushes_kept": got["rejected_pushes_kept"],
        "scheduled": _capped(got["scheduled"], SCHEDULED_CAP),
        "incident": got["incident"],
        "deployment": {"project": s.project, "index_shards": s.index_shards, "providers": providers,
                       "webhook_mode": s.webhook_mode, "watchdog_grace_ms": s.watchdog_grace_ms},
    }
    if with_error_queue:
        out["status_error_queue"] = _capped(len(admin.error_queue_factory().list(None, ERROR_QUEUE_CAP)),
                                            ERROR_QUEUE_CAP)
    return out


def activity_recent(admin: Any, args: Any, actor: str) -> dict[str, Any]:
    """`activity.recent`: the last hour's outcomes, acked share and hand-over
    latency, in buckets and per provider (shared/admin/recent.py), from the
    delivery event log; `available` False when the deployment has no event
    reader (then nothing else)."""
    source = admin.operators.event_source
    if source is None or not hasattr(source, "recent"):
        return {"available": False}
    return {"available": True, **source.recent(time.time_ns() // 1000)}


def activity_ended(admin: Any, args: Any, actor: str) -> dict[str, Any]:
    """`activity.ended`: the last hour's newest messages that ended with
    `outcome` (one of shared/admin/recent.py's OUTCOMES), of `provider` if
    given, newest first, from the delivery event log.

    Raises:
        BadRequest: an unknown outcome.
    """
    from shared.admin.actions import BadRequest
    from shared.admin.recent import OUTCOMES

    outcome = args.text("outcome", required=True) or ""
    if outcome not in OUTCOMES:
        raise BadRequest(f"`outcome` must be one of {', '.join(OUTCOMES)}")
    source = admin.operators.event_source
    if source is None or not hasattr(source, "ended"):
        return {"available": False, "outcome": outcome, "messages": []}
    provider = args.text("provider")
    return {"available": True, "outcome": outcome, "provider": provider,
            "messages": source.ended(outcome, time.time_ns() // 1000, provider)}
