"""Google's documented limits the scale model checks, each with its source.

A limit is per second, per the unit it names. `soft` limits are documented
as guidance that short bursts may pass; the model reports them and fails
only on a sustained excess (its window is 60 s, not 10 s).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """One documented limit: `per_s` in its unit per second, over
    `window_s` (s) windows; `source`: the documentation page."""

    name: str
    per_s: float
    window_s: int
    source: str
    soft: bool = False


SEQUENTIAL_INDEX_RANGE = Limit(
    "Firestore writes to one range of a sequential index", 500, 10,
    "https://cloud.google.com/firestore/docs/solutions/shard-timestamp")
DOCUMENT_WRITES = Limit(
    "Firestore sustained writes to one document", 1, 60,
    "https://cloud.google.com/firestore/quotas#soft_limits", soft=True)
QUEUE_DISPATCHES = Limit(
    "Cloud Tasks dispatches per queue", 500, 10,
    "https://cloud.google.com/tasks/docs/quotas")
# Creates: a queue past 500 created or dispatched tasks/s is high-TPS, and a
# cold one should ramp past 500 ops/s (500/50/5).
QUEUE_CREATES = Limit(
    "Cloud Tasks creates per queue", 500, 10,
    "https://cloud.google.com/tasks/docs/manage-cloud-task-scaling")
# Cloud Run: a service's instance limit may be set up to 1000 without a quota
# increase; each instance serves function_threads requests at once.
MAX_INSTANCES = Limit(
    "Cloud Run instances per service (requests in flight / threads / 0.6)", 1000, 10,
    "https://cloud.google.com/run/docs/configuring/max-instances")
# Pub/Sub: ordered delivery keeps one ordering key to about 1 MB/s.
ORDERING_KEY_BYTES = Limit(
    "Pub/Sub publish throughput per ordering key (bytes)", 1_000_000, 10,
    "https://cloud.google.com/pubsub/quotas#resource_limits")
