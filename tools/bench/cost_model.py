"""The cost model's arithmetic (`make cost`, tools/bench/cost.py): the items
of one million delivered messages, each a count per message (cost_inputs.py)
times its list price (cost_prices.py); the compute time, built from each
invocation's operations and billed as Cloud Run bills request-based
instances; what the levers (cost_report.py `LEVERS`) change in those counts;
what a preparation adds; and the costs that do not grow with traffic. Pure
functions of their arguments: no file is read here. Standard library only.
"""

from __future__ import annotations

import math
from typing import Any

from tools.bench.cost_prices import ASSUMED, LOAD, MILLION, MONTH_S, PRICES

# Function invocations that are not per message: Cloud Scheduler calls sweep
# once a minute whatever the traffic (a fixed monthly cost, below).
FIXED_FUNCTIONS = {"sweep"}


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
         levers: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Cost of one million ended messages at `rate` msgs/s: {"items": [(name,
    quantity per message, unit, USD per million)], "total": USD per million,
    "compute_s": billed instance-seconds per message}. `levers` applies
    changes the model can price (cost_report.py LEVERS). The Cloud Tasks
    operations are the measured creates, deletes (an acked attempt's timer,
    shared/tasks.py; the local stand-in answers DeleteTask as the service
    does: tools/local/tasks_emulator.py) and dispatches (`timeout`
    invocations)."""
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
    deletes = c.get("tasks_deleted_per_message", 0.0)
    stale = ev.get("timeout_ignored_per_message", 0.0)  # timers that came after their attempt ended
    events_per_message = ev.get("per_message", 0.0)

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
        events_per_message -= ev.get("status_ignored_per_message", 0) + stale
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
    items: list[tuple[Any, ...]] = [  # (name, count, price[, kept in _Default])
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
    rows: list[tuple[str, float, str, float]] = []
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
