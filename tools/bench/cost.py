"""`make cost`: what one million delivered messages cost on Google Cloud, and
what each lever would save. The one cost model of the project (docs/cost.md
is its output; README and docs/deploy.md quote its total).

    cost per message = sum over items of (count per message x list price)

Counts come from `make bench-core` (the local stack, per ended message):
out/bench/core-MODE.json (or core.json), with the same run's event log
(out/bench/core-events-MODE.jsonl) and invocation records
(run/bench-MODE/invocations.jsonl) when present; otherwise from the committed
snapshot docs/cost-inputs.json (`--snapshot` writes it from those files).
Compute time is not measured here (the emulators are not the cloud): each
invocation's duration is built from its measured operation counts and the
per-operation latencies in ASSUMED, and billed as Cloud Run bills request-
based instances (LOAD below). The deployment's size and concurrency are read
from infra/variables*.tf (variables_functions.tf, variables_analytics.tf).

Usage: python tools/bench/cost.py [--mode direct|queued] [--rate MSGS_PER_S]
       [--inputs FILE] [--json] [--markdown] [--snapshot FILE]
Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "docs" / "cost-inputs.json"
BENCH = ROOT / "out" / "bench"
RUNS = ROOT / "run"
# The root module's variables files (variables.tf, variables_<concern>.tf).
VARIABLE_FILES = sorted((ROOT / "infra").glob("variables*.tf"))
MILLION = 1_000_000
MONTH_S = 30 * 24 * 3600
TERMINAL = {"acked", "timed_out", "failed", "dead_lettered", "skipped"}
# Function invocations that are not per message: Cloud Scheduler calls sweep
# once a minute whatever the traffic (a fixed monthly cost, below).
FIXED_FUNCTIONS = {"sweep"}


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


# --------------------------------------------------------------- inputs --


def deployment() -> dict[str, Any]:
    """function_cpu, function_memory (GiB), function_threads, min_instances and
    the log switches, as their defaults in infra/variables*.tf.

    Raises ValueError if a default is missing or unreadable."""
    text = "\n".join(path.read_text() for path in VARIABLE_FILES)

    def default(name: str) -> str:
        block = re.search(rf'variable "{name}" \{{(.*?)\n\}}', text, re.S)
        match = block and re.search(r"^\s*default\s*=\s*(.+)$", block.group(1), re.M)
        if not match:
            raise ValueError(f"infra/variables*.tf: no default for {name}")
        return match.group(1).strip().strip('"')

    memory = default("function_memory")
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", memory).groups()
    return {
        "cpu": float(default("function_cpu")),
        "memory_gib": int(number) / (1024 if unit == "Mi" else 1),
        "threads": int(default("function_threads")),
        "min_instances": {k: int(v) for k, v in re.findall(r"(\w+)\s*=\s*(\d+)", default("min_instances"))},
        "keep_delivery_events": default("keep_delivery_events_in_default_bucket") == "true",
        "keep_request_logs": default("keep_request_logs_in_default_bucket") == "true",
        "keep_routine_statuses": default("keep_routine_statuses_in_default_bucket") == "true",
        "keep_relogged_events": default("keep_relogged_events_in_default_bucket") == "true",
        "webhook_mode": default("webhook_mode"),
    }


# `status_ignored` reasons of the routine statuses: the `sent` of every
# WhatsApp message and the statuses after its ack (`read` after `delivered`,
# duplicates). infra/analytics.tf keeps these out of _Default
# (keep_routine_statuses_in_default_bucket, its filter names the same).
ROUTINE_STATUS_REASONS = ("sent_status", "after_acked")


def split_lines(events: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    """(distinct events, first-hand lines, re-logged lines) of an event log.

    A room transaction's event may be logged more than once (the room's
    outbox, shared/outbox.py): after its commit, and again by a later
    transaction of the room that found it left. Distinct: one per
    (`room_id`, `event_id`), and every line without an `event_id` (`sent`,
    `status_ignored`, `timeout_ignored`, ...): what ends and happens to the
    messages. Re-logged: the lines marked `"relogged": true` (what the outbox
    logs for an earlier write: infra/analytics.tf keeps them out of _Default
    unless keep_relogged_events_in_default_bucket), and an unmarked line
    repeating an id an unmarked line had (a log written before the marker).
    First-hand: the other lines, those that reach _Default by default. A
    re-logged line whose first-hand one was lost (a crash between the commit
    and its logging) is distinct but not first-hand."""
    distinct: dict[tuple[Any, Any], dict] = {}
    unmarked: set[tuple[Any, Any]] = set()
    first_hand, relogged = [], []
    for i, e in enumerate(events):
        key = (e.get("room_id"), e["event_id"]) if e.get("event_id") is not None else (None, i)
        distinct.setdefault(key, e)
        if e.get("relogged") is True or key in unmarked:
            relogged.append(e)
        else:
            unmarked.add(key)
            first_hand.append(e)
    return list(distinct.values()), first_hand, relogged


def derive(counts: dict, events_path: Path | None, invocations_path: Path | None) -> dict[str, Any]:
    """One mode's inputs: the bench figures, plus what the same run's event
    log and invocation records say (events per message and their size,
    timers that fired on an already-ended message, operations per invocation
    of each function). Messages and events are counted once per event
    (`split_lines`); the lines logged again are an item of their own
    (`relogged_per_message`, `relogged_mean_bytes`), first-hand lines
    `per_message` and `mean_bytes`."""
    inputs: dict[str, Any] = {"counts": counts}
    if events_path and events_path.exists():
        lines = [json.loads(line) for line in events_path.open()]
        events, first_hand, relogged = split_lines(lines)
        kinds = Counter(e["event"] for e in events)
        ended = sum(kinds[k] for k in TERMINAL)

        def size(e: dict) -> int:
            return len(json.dumps(e, separators=(",", ":")))

        inputs["events"] = {
            "per_message": len(first_hand) / ended,
            "mean_bytes": statistics.mean(size(e) for e in first_hand),
            "relogged_per_message": len(relogged) / ended,
            "relogged_mean_bytes": statistics.mean(size(e) for e in relogged) if relogged else 0.0,
            "timeout_ignored_per_message": kinds["timeout_ignored"] / ended,
            "status_ignored_per_message": kinds["status_ignored"] / ended,
            # The statuses infra/analytics.tf keeps out of _Default by default.
            "routine_statuses_per_message": sum(1 for e in events if e["event"] == "status_ignored"
                                                and e.get("reason") in ROUTINE_STATUS_REASONS) / ended,
            "rooms_per_message": len({e["room_id"] for e in events if e.get("room_id")}) / ended,
        }
    if invocations_path and invocations_path.exists():
        by_function: dict[str, list[dict]] = defaultdict(list)
        for line in invocations_path.open():
            row = json.loads(line)
            by_function[row["function"]].append(row)
        inputs["functions"] = {
            fn: {op: statistics.mean(r.get(key, 0) for r in rows) for op, key in (
                ("reads", "firestore_reads"), ("writes", "firestore_writes"), ("tasks", "tasks_created"),
                ("sends", "send_calls"), ("publishes", "status_publishes"))}
            for fn, rows in sorted(by_function.items())}
    return inputs


def load_inputs(mode: str | None, path: Path | None = None) -> tuple[dict[str, Any], str]:
    """(inputs of one mode, where they came from): the live bench output
    when it has this mode, else the snapshot (or `path`)."""
    if path is None:
        live = BENCH / f"core-{mode}.json" if mode else BENCH / "core.json"
        if not live.exists() and mode and (BENCH / "core.json").exists():
            if json.loads((BENCH / "core.json").read_text()).get("webhook_mode") == mode:
                live = BENCH / "core.json"
        if live.exists():
            counts = json.loads(live.read_text())
            m = counts.get("webhook_mode", mode or "direct")
            snap = json.loads(SNAPSHOT.read_text())["modes"].get(m, {}) if SNAPSHOT.exists() else {}
            inputs = derive(counts, BENCH / f"core-events-{m}.jsonl", RUNS / f"bench-{m}" / "invocations.jsonl")
            for key in ("events", "functions"):  # the snapshot's, when the live run left no files
                if key not in inputs and key in snap:
                    inputs[key] = snap[key]
            return inputs, f"{live.relative_to(ROOT)} (make bench-core)"
        path = SNAPSHOT
    snapshot = json.loads(path.read_text())
    m = mode or snapshot["default_mode"]
    return snapshot["modes"][m], f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} ({snapshot['measured']})"


# ---------------------------------------------------------------- model --


def invocation_seconds(ops: dict[str, float]) -> float:
    """Mean duration (s) of one invocation doing `ops` (operations per invocation)."""
    a = {k: v for k, (v, _) in ASSUMED.items()}
    ms = (a["base_ms"] + ops.get("reads", 0) * a["read_ms"] + ops.get("writes", 0) * a["write_ms"]
          + ops.get("tasks", 0) * a["task_ms"] + ops.get("publishes", 0) * a["publish_ms"]
          + ops.get("sends", 0) * a["send_ms"] + ops.get("deletes", 0) * a["task_ms"]
          + ops.get("uploads", 0) * a["upload_ms"])
    return ms / 1000


def billed_seconds_per_second(rate: float, seconds: float, concurrency: int) -> float:
    """Billed instance-seconds per second for requests arriving at `rate` per
    second that take `seconds` each, on instances serving up to
    `concurrency` at once: the time at least one request is in flight (the
    M/G/inf busy fraction 1 - exp(-rate x seconds)), each busy period rounded
    up (to 100 ms at least, half of 100 ms on average beyond), and never less
    than the total request time shared at the autoscaler's target
    concurrency."""
    if rate <= 0:
        return 0.0
    load = rate * seconds
    busy = 1 - math.exp(-load)
    periods = rate * math.exp(-load)
    rounding = LOAD["rounding_s"]
    single = max(periods * rounding, busy + periods * rounding / 2)
    return max(single, load / (concurrency * LOAD["target_utilization"]))


def cost(inputs: dict[str, Any], deploy: dict[str, Any], rate: float,
         levers: frozenset[str] = frozenset(), in_code: frozenset[str] = frozenset({"delete_timer_on_ack"})
         ) -> dict[str, Any]:
    """Cost of one million ended messages at `rate` msgs/s: {"items": [(name,
    quantity per message, unit, USD per million)], "total": USD per million,
    "compute_s": billed instance-seconds per message}. `levers` applies
    changes the model can price (LEVERS). `in_code` are levers the code has
    made but the emulators cannot show, always applied: `delete_timer_on_ack`
    (shared/tasks.py deletes an ended attempt's timer; the Cloud Tasks
    emulator does not implement DeleteTask, so the measured counts still hold
    the timers that fire for nothing)."""
    levers = levers | in_code
    c = dict(inputs["counts"])
    ev = dict(inputs.get("events", {}))
    fns = {fn: dict(ops) for fn, ops in inputs.get("functions", {}).items()}
    cpu, mem, threads = deploy["cpu"], deploy["memory_gib"], deploy["threads"]
    keep_events, keep_requests = deploy["keep_delivery_events"], deploy["keep_request_logs"]
    keep_routine = deploy.get("keep_routine_statuses", True)
    keep_relogged = deploy.get("keep_relogged_events", True)
    inv = {k[4:-12]: v for k, v in c.items() if k.startswith("inv_") and k.endswith("_per_message")}
    inv = {fn: n for fn, n in inv.items() if fn not in FIXED_FUNCTIONS}
    reads, writes = c.get("firestore_reads_per_message", 0), c.get("firestore_writes_per_message", 0)
    tasks_created = c.get("tasks_created_per_message", 0)
    publishes = c.get("status_publishes_per_message", 0)
    deletes = 0.0
    stale = ev.get("timeout_ignored_per_message", 0.0)
    events_per_message = ev.get("per_message", 0.0)

    if "delete_timer_on_ack" in levers:
        # Each timer that fires on an already-ended message (timeout_ignored)
        # is deleted by the ack that ended it instead: one DeleteTask call in
        # the ack's invocation, one timeout invocation, its read and its log
        # line fewer. The dispatch it saves and the call it adds are both one
        # Cloud Tasks operation.
        timeout_reads = fns.get("timeout", {}).get("reads", 1.0)
        inv["timeout"] = max(0.0, inv.get("timeout", 0) - stale)
        reads -= stale * timeout_reads
        deletes = stale
        events_per_message -= stale
        for fn in ("webhook", "status"):
            if inv.get(fn):
                share = stale / sum(inv.get(f, 0) for f in ("webhook", "status"))
                fns.setdefault(fn, {})["deletes"] = fns.get(fn, {}).get("deletes", 0) + share
    if "sender_window_off" in levers:
        # WHATSAPP_SENDER_RATE=0: no slot reads or writes (their compute and
        # the rare waits' timers are left in: under 1% of the total).
        reads -= c.get("window_reads_per_message", 0)
        writes -= c.get("window_writes_per_message", 0)
    if "sent_proof_off" in levers:
        # WHATSAPP_SENT_PROOF=off: none of the proof's reads of a room and
        # blind writes, as measured (`proof_reads`, `proof_writes`: only for
        # a `sent` the webhook instance does not know to be settled), in the
        # webhook invocations that make them.
        proof_reads = c.get("proof_reads_per_message", 0)
        reads -= proof_reads
        writes -= c.get("proof_writes_per_message", 0)
        if inv.get("webhook"):
            hook = fns.setdefault("webhook", {})
            hook["reads"] = max(0.0, hook.get("reads", 0) - proof_reads / inv["webhook"])
            hook["writes"] = max(0.0, hook.get("writes", 0) - c.get("proof_writes_per_message", 0) / inv["webhook"])
    routine = ev.get("routine_statuses_per_message", 0.0)
    if "quiet_ignored_events" in levers:
        events_per_message -= ev.get("status_ignored_per_message", 0) + (
            0 if "delete_timer_on_ack" in levers else stale)
        routine = 0.0  # not written at all
    if "keep_routine_statuses" in levers:
        keep_routine = True
    if "keep_relogged_events" in levers:
        keep_relogged = True
    if "exclude_delivery_events" in levers:
        keep_events = False
    if "keep_request_logs" in levers:
        keep_requests = True
    if "fractional_cpu" in levers:
        cpu, threads = 0.5, 1
    if "concurrency_16" in levers:
        threads = 16

    compute_s = 0.0
    for fn, n in inv.items():
        seconds = invocation_seconds(fns.get(fn, {}))
        compute_s += billed_seconds_per_second(rate * n, seconds, threads) / rate
    timer_dispatches = inv.get("timeout", 0)
    pubsub_messages = 2 * (1 + publishes)  # each publish and each push delivery, 1,000 bytes billed at least
    entry_bytes = ev.get("mean_bytes", 0) + ASSUMED["log_overhead_bytes"][0]
    event_bytes = (events_per_message - routine) * entry_bytes
    routine_bytes = routine * entry_bytes
    # The outbox's lines logged again (shared/outbox.py, `"relogged": true`), at their own measured size.
    relogged_bytes = ev.get("relogged_per_message", 0.0) * (
        ev.get("relogged_mean_bytes", 0.0) + ASSUMED["log_overhead_bytes"][0])
    request_bytes = sum(inv.values()) * ASSUMED["request_log_bytes"][0]
    p = PRICES
    items = [
        ("Firestore document reads", reads, p["firestore_read"]),
        ("Firestore document writes", writes, p["firestore_write"]),
        ("Firestore TTL deletes (one room document per room)", ev.get("rooms_per_message", 1.0), p["firestore_delete"]),
        ("function requests", sum(inv.values()), p["run_request"]),
        (f"function CPU, {cpu:g} vCPU x billed instance time", compute_s * cpu, p["run_cpu"]),
        (f"function memory, {mem:g} GiB x billed instance time", compute_s * mem, p["run_memory"]),
        ("Cloud Tasks operations (creates, deletes, dispatches)", tasks_created + deletes + timer_dispatches,
         p["tasks_operation"]),
        ("Pub/Sub throughput (publishes and push deliveries)", pubsub_messages * 1000, p["pubsub_byte"]),
        # OUTCOMES=on (shared/outcomes.py): one publish per ended message and one delivery to one subscriber.
        ("Pub/Sub: delivery outcomes (a publish and a delivery per ended message)",
         0 if "outcomes_off" in levers else 2 * 1000, p["pubsub_byte"]),
        ("Cloud Logging: delivery events into _Default", event_bytes, p["logging_byte"], keep_events),
        ("Cloud Logging: routine statuses (`sent`, after the ack) into _Default", routine_bytes, p["logging_byte"],
         keep_events and keep_routine),
        ("Cloud Logging: re-logged outbox lines (`relogged`) into _Default", relogged_bytes, p["logging_byte"],
         keep_events and keep_relogged),
        ("Cloud Logging: Cloud Run request logs into _Default", request_bytes, p["logging_byte"], keep_requests),
    ]
    rows = []
    for name, qty, price, *kept in items:
        if kept and not kept[0]:
            rows.append((f"{name} (excluded there)", qty, price.unit, 0.0))
        else:
            rows.append((name, qty, price.unit, qty * price.usd * MILLION))
    return {"items": rows, "total": sum(r[3] for r in rows), "compute_s": compute_s}


# Preparation (issue 14): what one prepared message (a `prepare` attribute,
# e.g. a media upload) adds to its delivery. Not measured yet (bench-core
# publishes no such message): the operations of the design. One prepare task,
# created by whichever function applies the room transition that asks for it
# (its ~30 ms counted in the `prepare` invocation below) and dispatched once;
# one `prepare` invocation that reads the room, fetches and uploads the file,
# then runs one transaction that reads the room again and writes the result;
# one `prepared` event. A preparation that fails and is retried costs this
# again; the send that follows is the delivery's, priced above.
PREPARE_OPS = {"reads": 2.0, "writes": 1.0, "tasks": 1.0, "uploads": 1.0}
PREPARE_TASK_OPERATIONS = 2.0  # the create and the dispatch
PREPARE_EVENTS = 1.0


def prepare_cost(inputs: dict[str, Any], deploy: dict[str, Any], rate: float) -> dict[str, Any]:
    """Cost of one million prepared messages, at `rate` prepared messages a
    second, on top of their delivery: the same shape as cost()."""
    cpu, mem, threads = deploy["cpu"], deploy["memory_gib"], deploy["threads"]
    seconds = invocation_seconds(PREPARE_OPS)
    compute_s = billed_seconds_per_second(rate, seconds, threads) / rate
    event_bytes = PREPARE_EVENTS * (inputs.get("events", {}).get("mean_bytes", 0) + ASSUMED["log_overhead_bytes"][0])
    p = PRICES
    items = [
        ("Cloud Tasks operations (the prepare task's create and dispatch)", PREPARE_TASK_OPERATIONS,
         p["tasks_operation"], True),
        ("function requests (one `prepare` call)", 1.0, p["run_request"], True),
        (f"function CPU, {cpu:g} vCPU x billed instance time ({seconds * 1000:.0f} ms a call)", compute_s * cpu,
         p["run_cpu"], True),
        (f"function memory, {mem:g} GiB x billed instance time", compute_s * mem, p["run_memory"], True),
        ("Firestore document reads (the room, then in the transaction)", PREPARE_OPS["reads"], p["firestore_read"], True),
        ("Firestore document writes (the transaction's)", PREPARE_OPS["writes"], p["firestore_write"], True),
        ("Cloud Logging: the `prepared` event into _Default", event_bytes, p["logging_byte"],
         deploy["keep_delivery_events"]),
        ("Cloud Logging: the Cloud Run request log into _Default", ASSUMED["request_log_bytes"][0], p["logging_byte"],
         deploy["keep_request_logs"]),
    ]
    rows = [(name if kept else f"{name} (excluded there)", qty, price.unit,
             qty * price.usd * MILLION if kept else 0.0) for name, qty, price, kept in items]
    return {"items": rows, "total": sum(r[3] for r in rows), "compute_s": compute_s, "seconds": seconds}


def fixed_monthly(deploy: dict[str, Any]) -> list[tuple[str, float]]:
    """Costs that do not grow with traffic, USD per month."""
    p = PRICES
    idle = sum(deploy["min_instances"].values())
    return [
        (f"{idle} warm instances (min_instances) at the idle rate",
         idle * MONTH_S * (deploy["cpu"] * p["run_idle_cpu"].usd + deploy["memory_gib"] * p["run_idle_memory"].usd)),
        ("the watchdog: 1 Cloud Scheduler job (free within 3 per billing account)", p["scheduler_job"].usd),
        ("the watchdog: 43,200 sweep calls (requests, 0.1 s billed each, one query)",
         43_200 * (p["run_request"].usd + 0.1 * (deploy["cpu"] * p["run_cpu"].usd + deploy["memory_gib"] * p["run_memory"].usd)
                   + p["firestore_read"].usd)),
    ]


# The levers: (key, what changes, where it is changed, cumulative). The
# cumulative ones are applied one after the other in this order; the others
# are priced alone. keep_request_logs is the default's opposite: its
# "saving" is negative, the price of turning the default exclusion off.
LEVERS: list[tuple[str, str, str, bool]] = [
    ("quiet_ignored_events", "log no event for statuses that change nothing (status_ignored: `sent`, "
     "statuses after the ack)", "code: shared/room/flight.py (not done: the late acks feed the analytics)", True),
    ("exclude_delivery_events", "keep the delivery events only in the sink's bucket (not in Logs Explorer)",
     "infra: keep_delivery_events_in_default_bucket = false", True),
    ("keep_routine_statuses", "keep the routine statuses (`sent`, statuses after the ack) in the _Default log bucket "
     "too (the default keeps them only in the sink's bucket)", "infra: keep_routine_statuses_in_default_bucket = true",
     False),
    ("keep_relogged_events", "keep the outbox's re-logged lines (`relogged`: a room's later transaction logs the "
     "lines an earlier write left, most often a second time) in the _Default log bucket too (the default keeps them "
     "only in the sink's bucket)", "infra: keep_relogged_events_in_default_bucket = true", False),
    ("keep_request_logs", "keep Cloud Run's request logs in the _Default log bucket (the default drops them)",
     "infra: keep_request_logs_in_default_bucket = true", False),
    ("fractional_cpu", "0.5 vCPU at one request per instance (Cloud Run allows concurrency only from 1 vCPU)",
     "infra: function_cpu = \"0.5\", function_threads = 1", False),
    ("concurrency_16", "16 requests per instance instead of 8", "infra: function_threads = 16", False),
    ("sender_window_off", "no per-number send window (a number's sends past its rate meet 130429 and retry)",
     "infra: whatsapp_sender_rate = 0", False),
    ("outcomes_off", "publish no delivery outcomes (producers follow the event log instead)",
     "infra: publish_outcomes = false", False),
    ("sent_proof_off", "a WhatsApp `sent` status is only logged: none of the proof's reads and writes (for a "
     "`sent` its webhook instance does not know to be settled), and more resends after an unknown send outcome",
     "infra: whatsapp_sent_proof = \"off\"", False),
]


# -------------------------------------------------------------- output --


def money(usd: float) -> str:
    return f"${usd:,.2f}"


def signed(usd: float) -> str:
    return ("+" if usd > 0.005 else "-" if usd < -0.005 else "") + money(abs(usd))


def report(inputs: dict[str, Any], source: str, deploy: dict[str, Any], rate: float, mode: str) -> dict[str, Any]:
    base = cost(inputs, deploy, rate)
    by_rate = {r: cost(inputs, deploy, r)["total"] for r in RATES}
    levers = []
    applied: frozenset[str] = frozenset()
    for key, what, where, cumulative in LEVERS:
        alone = cost(inputs, deploy, rate, frozenset({key}))["total"]
        total = None
        if cumulative:
            applied = applied | {key}
            total = cost(inputs, deploy, rate, applied)["total"]
        levers.append((key, what, where, base["total"] - alone, total))
    return {"mode": mode, "source": source, "rate": rate, "deployment": deploy, "base": base, "by_rate": by_rate,
            "fixed": fixed_monthly(deploy), "levers": levers,
            "prepare": prepare_cost(inputs, deploy, rate),
            "prepare_by_rate": {r: prepare_cost(inputs, deploy, r)["total"] for r in RATES}}


def render_text(r: dict[str, Any]) -> str:
    d = r["deployment"]
    lines = [f"baton: cost of 1,000,000 delivered messages, WEBHOOK_MODE={r['mode']}, at {r['rate']:g} msgs/s",
             f"counts: {r['source']}; deployment: {d['cpu']:g} vCPU, {d['memory_gib']:g} GiB, "
             f"{d['threads']} requests per instance (infra/variables_functions.tf)", ""]
    width = max(len(name) for name, *_ in r["base"]["items"])
    for name, qty, _unit, usd in r["base"]["items"]:
        lines.append(f"  {name:<{width}}  {qty:>10.3f} per message  {money(usd):>8}")
    lines.append(f"  {'total':<{width}}  {'':>10}              {money(r['base']['total']):>8} per million")
    lines += ["", "by sustained load (billed compute shrinks as requests share instances):"]
    lines += [f"  {rate:>6g} msgs/s ({rate * MONTH_S / MILLION:>5.1f} M/month): {money(total)} per million"
              for rate, total in r["by_rate"].items()]
    lines += ["", "fixed, per month whatever the traffic:"]
    lines += [f"  {name}: {money(usd)}" for name, usd in r["fixed"]]
    lines += ["", f"levers at {r['rate']:g} msgs/s (what each saves alone; for the first ones, the total with it "
                  "and those above it):"]
    for _, what, where, saving, total in r["levers"]:
        after = f" -> {money(total)}" if total is not None else ""
        lines.append(f"  {signed(-saving)}{after}: {what} [{where}]")
    prep = r["prepare"]
    lines += ["", f"preparation (a `prepare` attribute, e.g. a media upload), per prepared message on top of its "
                  f"delivery, at {r['rate']:g} prepared msgs/s:"]
    width = max(len(name) for name, *_ in prep["items"])
    for name, qty, _unit, usd in prep["items"]:
        lines.append(f"  {name:<{width}}  {qty:>10.3f} per message  {money(usd):>8}")
    lines.append(f"  {'total':<{width}}  {'':>10}              {money(prep['total']):>8} per million prepared")
    lines += [f"  {rate:>6g} prepared msgs/s: {money(total)} per million prepared"
              for rate, total in r["prepare_by_rate"].items()]
    return "\n".join(lines)


def render_markdown(r: dict[str, Any]) -> str:
    d = r["deployment"]
    out = [f"Counts from `{r['source']}`, WEBHOOK_MODE={r['mode']}; deployment {d['cpu']:g} vCPU, "
           f"{d['memory_gib']:g} GiB, {d['threads']} requests per instance; a sustained {r['rate']:g} msgs/s.", "",
           "| item | per message | unit | USD per million |", "|---|---:|---|---:|"]
    for name, qty, unit, usd in r["base"]["items"]:
        out.append(f"| {name} | {qty:.3f} | {unit} | {money(usd)} |")
    out += [f"| **total** | | | **{money(r['base']['total'])}** |", "",
            "| sustained load | messages a month | USD per million |", "|---:|---:|---:|"]
    out += [f"| {rate:g} msgs/s | {rate * MONTH_S / MILLION:.1f} M | {money(total)} |" for rate, total in r["by_rate"].items()]
    out += ["", "| fixed cost | USD per month |", "|---|---:|"]
    out += [f"| {name} | {money(usd)} |" for name, usd in r["fixed"]]
    out += ["", f"| lever (at {r['rate']:g} msgs/s) | where | change alone | total with it and those above |",
            "|---|---|---:|---:|"]
    for _, what, where, saving, total in r["levers"]:
        out.append(f"| {what} | {where} | {signed(-saving)} | {money(total) if total is not None else '-'} |")
    prep = r["prepare"]
    out += ["", f"Preparation, per prepared message on top of its delivery; a sustained {r['rate']:g} prepared "
                "msgs/s:", "", "| item | per prepared message | unit | USD per million prepared |", "|---|---:|---|---:|"]
    for name, qty, unit, usd in prep["items"]:
        out.append(f"| {name} | {qty:.3f} | {unit} | {money(usd)} |")
    out += [f"| **total** | | | **{money(prep['total'])}** |", "",
            "| sustained preparations | USD per million prepared |", "|---:|---:|"]
    out += [f"| {rate:g} prepared msgs/s | {money(total)} |" for rate, total in r["prepare_by_rate"].items()]
    return "\n".join(out)


def snapshot(out: Path) -> None:
    """Write the committed inputs from the last `make bench-core` run."""
    modes = {}
    for mode in ("direct", "queued"):
        path = BENCH / f"core-{mode}.json"
        if path.exists():
            modes[mode] = derive(json.loads(path.read_text()), BENCH / f"core-events-{mode}.jsonl",
                                 RUNS / f"bench-{mode}" / "invocations.jsonl")
    if not modes:
        raise SystemExit("no out/bench/core-*.json: run `make bench-core` first")
    stamp = max((BENCH / f"core-{m}.json").stat().st_mtime for m in modes)
    from datetime import UTC, datetime

    out.write_text(json.dumps({
        "measured": f"make bench-core, {datetime.fromtimestamp(stamp, UTC):%Y-%m-%d %H:%M} UTC, default options "
                    "(1,000 rooms, both WEBHOOK_MODEs), on the local emulator stack",
        "default_mode": deployment()["webhook_mode"],
        "modes": modes,
    }, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("direct", "queued"), help="WEBHOOK_MODE (default: infra/variables_webhook.tf)")
    parser.add_argument("--rate", type=float, default=REFERENCE_RATE, help="sustained msgs/s (default %(default)s)")
    parser.add_argument("--inputs", type=Path, help="a cost-inputs.json to read instead of out/bench")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--markdown", action="store_true", help="print the tables of docs/cost.md")
    parser.add_argument("--snapshot", type=Path, help="write the inputs of the last bench-core run here")
    args = parser.parse_args(argv)
    if args.snapshot:
        snapshot(args.snapshot)
        return
    deploy = deployment()
    mode = args.mode or deploy["webhook_mode"]
    inputs, source = load_inputs(mode, args.inputs)
    r = report(inputs, source, deploy, args.rate, mode)
    if args.json:
        print(json.dumps(r, indent=2, default=str))
    elif args.markdown:
        print(render_markdown(r))
    else:
        print(render_text(r))


if __name__ == "__main__":
    main(sys.argv[1:])
