"""The cost model's list prices and assumptions (`make cost`,
tools/bench/cost.py): what each billed unit costs on Google Cloud, with the
page each price was read from; the per-operation latencies and log sizes
that stand in for cloud measurements; Cloud Run's request-based billing
rules; and the sustained loads (msgs/s) the model is priced at. Held apart
so a price change or a new measurement is one edit in one place, next to its
source, and the arithmetic (cost_model.py) holds no price or latency of its
own. Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

MILLION = 1_000_000
MONTH_S = 30 * 24 * 3600


@dataclass(frozen=True)
class Price:
    usd: float
    unit: str
    source: str


# List prices in USD, before free tiers and discounts, read 2026-11-22 from
# the pages named (and rechecked 2026-11-23). Firestore: a regional location
# of the lowest price tier (e.g. us-central1); other regions are priced per
# the location table of the page, multi-regions (nam5, eur3) at twice these.
# Cloud Run: Tier 1 regions (europe-west1 is one), request-based billing.
PRICES: dict[str, Price] = {
    "firestore_read": Price(0.03 / 100_000, "document read", "https://cloud.google.com/firestore/pricing"),
    "firestore_write": Price(0.09 / 100_000, "document write", "https://cloud.google.com/firestore/pricing"),
    "firestore_delete": Price(0.01 / 100_000, "TTL delete", "https://cloud.google.com/firestore/pricing"),
    "run_request": Price(0.40 / MILLION, "request", "https://cloud.google.com/run/pricing"),
    "run_cpu": Price(0.000024, "vCPU-second", "https://cloud.google.com/run/pricing"),
    "run_memory": Price(0.0000025, "GiB-second", "https://cloud.google.com/run/pricing"),
    "run_idle_cpu": Price(0.0000025, "idle vCPU-second (min instances)", "https://cloud.google.com/run/pricing"),
    "run_idle_memory": Price(0.0000025, "idle GiB-second (min instances)", "https://cloud.google.com/run/pricing"),
    "tasks_operation": Price(0.40 / MILLION, "API call or push attempt", "https://cloud.google.com/tasks/pricing"),
    "pubsub_byte": Price(40 / 2**40, "byte (1,000 billed at least per publish and per delivery)",
                         "https://cloud.google.com/pubsub/pricing"),
    "logging_byte": Price(0.50 / 2**30, "byte ingested into a log bucket", "https://cloud.google.com/stackdriver/pricing"),
    "scheduler_job": Price(0.10, "job-month (3 free per billing account)", "https://cloud.google.com/scheduler/pricing"),
}

# Assumptions, each to be replaced by a cloud measurement when there is one:
# the latencies by Cloud Monitoring's run.googleapis.com/request_latencies per
# service, the log sizes by the Logs Explorer's entry sizes.
ASSUMED: dict[str, tuple[float, str]] = {
    "base_ms": (3.0, "framework, parsing, signature check and log lines of one request (local p50 of a webhook "
                     "request that touches nothing: about 4 ms)"),
    "read_ms": (10.0, "one Firestore document read, same region"),
    "write_ms": (20.0, "one Firestore commit (a room write with its update_time precondition)"),
    "task_ms": (30.0, "one Cloud Tasks CreateTask (or DeleteTask) call"),
    "publish_ms": (15.0, "one Pub/Sub publish (status queue)"),
    "send_ms": (300.0, "one WhatsApp Cloud API send call, Graph API round trip"),
    "upload_ms": (750.0, "one preparation's media fetch and upload (WhatsApp POST /{phone-number-id}/media), "
                         "mostly waiting on the network"),
    "log_overhead_bytes": (400.0, "LogEntry fields around a delivery event's JSON payload (resource labels, "
                                  "timestamps, insertId, logName, instance label)"),
    "request_log_bytes": (1000.0, "one Cloud Run request log entry (httpRequest, resource, trace, labels)"),
}

# Cloud Run request-based billing (https://cloud.google.com/run/pricing):
# an instance is billed while it serves at least one request, rounded up to
# 100 ms; concurrent requests share that time; the autoscaler adds instances
# at about 60% of the maximum concurrency
# (https://cloud.google.com/run/docs/about-instance-autoscaling).
LOAD = {"rounding_s": 0.1, "target_utilization": 0.6}
REFERENCE_RATE = 20.0  # msgs/s: the headline's sustained load (about 52 million a month)
RATES = (0.4, 1.0, 5.0, 20.0, 100.0, 1_000.0, 10_000.0)
