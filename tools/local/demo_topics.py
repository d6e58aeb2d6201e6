"""What `make demo` reads besides its delivery table: the outcomes baton
published (shared/outcomes.py) and the end users' replies and reactions it
forwarded (shared/service/inbound.py), each from the stack's ordered pull
subscription (tools/local/stack.py), checked against the event log and the fake
platform's record of what it posted (tools/sim/fake_platform/replies.py)."""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tools.local.stack import INBOUND_SUBSCRIPTION, OUTCOMES_SUBSCRIPTION, PROJECT

CANCELLED = "scheduled message cancelled"


def pull_all(subscription: str, until: Any = None, quiet_s: float = 3.0, limit_s: float = 60.0) -> list[Any]:
    """Pull and ack every message of `subscription` (a stack's), until
    `until(messages)` holds, or nothing came for `quiet_s` s, or `limit_s` s."""
    from google.api_core import exceptions as gexc
    from google.cloud import pubsub_v1

    client = pubsub_v1.SubscriberClient()
    path = client.subscription_path(PROJECT, subscription)
    got: list[Any] = []
    started = last = time.monotonic()
    while time.monotonic() - started < limit_s and time.monotonic() - last < quiet_s:
        try:
            batch = client.pull(request={"subscription": path, "max_messages": 1000}, timeout=2).received_messages
        except (gexc.DeadlineExceeded, gexc.RetryError):
            batch = []
        if batch:
            client.acknowledge(request={"subscription": path, "ack_ids": [m.ack_id for m in batch]})
            got.extend(m.message for m in batch)
            last = time.monotonic()
            if until is not None and until(got):
                break
        else:
            time.sleep(0.2)
    return got


def expected_outcomes(events: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(room, message id) -> the outcome its end event in the log calls for."""
    out = {}
    for e in events:
        if e.get("event") in ("acked", "failed", "timed_out", "dead_lettered", "skipped") and e.get("message_id"):
            kind = "cancelled" if e["event"] == "skipped" and (e.get("reason") or "").startswith(CANCELLED) \
                else e["event"]
            out[(e["room_id"], e["message_id"])] = kind
    return out


@dataclass
class TopicCheck:
    """The outcomes and inbound posts received, against what was expected."""

    outcomes: Counter[str] = field(default_factory=Counter)
    outcomes_missing: list[str] = field(default_factory=list)
    outcomes_twice: list[str] = field(default_factory=list)
    outcomes_wrong: list[str] = field(default_factory=list)
    inbound_posted: int = 0
    inbound_received: int = 0
    inbound_missing: list[str] = field(default_factory=list)
    inbound_by_field: Counter[str] = field(default_factory=Counter)

    @property
    def ok(self) -> bool:
        return not (self.outcomes_missing or self.outcomes_twice or self.outcomes_wrong or self.inbound_missing)

    def rows(self) -> list[tuple[str, str]]:
        kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(self.outcomes.items())) or "none"
        fields = ", ".join(f"{k} {n:,}" for k, n in sorted(self.inbound_by_field.items())) or "none"
        return [("outcomes received (outcomes topic)", kinds),
                ("outcomes missing / twice / wrong kind",
                 f"{len(self.outcomes_missing)} / {len(self.outcomes_twice)} / {len(self.outcomes_wrong)}"),
                ("replies and reactions the platform posted", f"{self.inbound_posted:,}"),
                ("forwarded byte for byte (inbound topic)", f"{self.inbound_received:,} ({fields})"),
                ("inbound posts missing", f"{len(self.inbound_missing)}")]


def check(events: list[dict[str, Any]], stats: dict[str, Any]) -> TopicCheck:
    """Drain both subscriptions and compare (see TopicCheck)."""
    want = expected_outcomes(events)
    outcome_msgs = pull_all(OUTCOMES_SUBSCRIPTION, until=lambda got: len(got) >= len(want))
    result = TopicCheck()
    seen: Counter[tuple[str, str]] = Counter()
    for m in outcome_msgs:
        o = json.loads(m.data)
        key = (o["room_id"], o["message_id"])
        seen[key] += 1
        result.outcomes[o["outcome"]] += 1
        if key in want and want[key] != o["outcome"]:
            result.outcomes_wrong.append(f"{key[0]}/{key[1]}: {o['outcome']}, log says {want[key]}")
    result.outcomes_missing = [f"{r}/{m}" for (r, m) in want if not seen[(r, m)]]
    result.outcomes_twice = [f"{r}/{m}" for (r, m), n in seen.items() if n > 1]
    posted = stats.get("inbound_posted", [])
    result.inbound_posted = len(posted)
    inbound_msgs = pull_all(INBOUND_SUBSCRIPTION, until=lambda got: len(got) >= len(posted))
    received = {hashlib.sha256(m.data).hexdigest(): m for m in inbound_msgs}
    for p in posted:
        m = received.get(p["sha256"])
        if m is None:
            result.inbound_missing.append(f"{p['provider']}:{p['user']}")
        else:
            result.inbound_received += 1
            result.inbound_by_field[f"{m.attributes.get('provider')} {m.attributes.get('field')}"] += 1
    return result
