"""The analytics against the simulation's ground truth: the delivery-analytics
pipeline's lifecycle and audit (pipeline/lifecycle.py, the same transforms
the Dataproc job runs) over the simulated event log, compared with what the
platforms' record says happened.

A room the audit calls lost, out of order, or ended twice must be one the
ground truth calls so too (checks.py's `nothing lost`, `device order`,
`nothing ended twice`); a message it calls acked must have been taken by the
platform. No room is excused: a line a crash would have lost is kept by the
room's outbox and logged by a later transaction, maybe twice (the pipeline
keeps one per `event_id`), and a room made again after TTL has events of
another `incarnation` (the pipeline keys a message by room, incarnation and
seq). Spark starts once per batch (tens of seconds), so the rooms of
every seed are judged together: each seed's room ids are prefixed `s{seed}.`.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from tools.sim.simulation.checks import Finding
from tools.sim.simulation.world import World


def records(world: World) -> list[str]:
    """The run's event log as the functions print it (JSON lines), room ids prefixed by the seed."""
    lines = []
    for logged in world.events.logged:
        record = logged.event.to_record()
        if record.get("room_id") is not None:
            record["room_id"] = f"s{world.seed}.{record['room_id']}"
        lines.append(json.dumps(record, separators=(",", ":")))
    return lines


def truth(world: World, findings: list[Finding]) -> dict[str, Any]:
    """Per prefixed room: the ground truth the audit is held to."""
    bad: dict[str, set[str]] = {}
    for f in findings:
        bad.setdefault(f"s{world.seed}.{f.room_id}", set()).add(f.invariant)
    taken = {(c.room_id, c.seq) for p in world.platforms.values() for c in p.calls if c.taken}
    return {"bad": bad, "taken": {(f"s{world.seed}.{room}", seq) for room, seq in taken}}


def judge(lines: list[str], truths: list[dict[str, Any]], exercised: Counter[str]) -> list[Finding]:
    """Run the pipeline's lifecycle and audit over `lines` (local Spark) and
    compare them with `truths` (one per seed). Findings name the prefixed room."""
    from pipeline import transforms as tf
    from pipeline.session import build_session

    bad: dict[str, set[str]] = {}
    taken: set[tuple[str, int]] = set()
    for t in truths:
        bad.update(t["bad"])
        taken |= t["taken"]
    spark = build_session("local[2]", driver_memory="1g", shuffle_partitions=4, app_name="baton-simulation")
    try:
        df = spark.createDataFrame([(v, "simulation.jsonl") for v in lines], "value string, source string")
        messages = tf.message_lifecycle(tf.valid_events(tf.parse_lines(df))).cache()
        audit = {r["room_id"]: r.asDict() for r in tf.ordering_audit(messages).collect()}
        rows = messages.select("room_id", "seq", "outcome", "multiple_ends").collect()
    finally:
        spark.stop()
    found: list[Finding] = []
    for room_id, a in audit.items():
        exercised["analytics = ground truth"] += 1
        truly = bad.get(room_id, set())
        for column, invariant in (("lost", "nothing lost"), ("ordering_violations", "device order"),
                                  ("multiple_ends", "nothing ended twice")):
            if a.get(column) and invariant not in truly:
                found.append(Finding("analytics = ground truth", room_id,
                                     f"the audit counts {a[column]} `{column}`; the platform's record shows none"))
    for r in rows:
        if r["outcome"] == "acked" and (r["room_id"], r["seq"]) not in taken:
            found.append(Finding("analytics = ground truth", r["room_id"],
                                 f"#{r['seq']} reported acked, but the platform never took it"))
    return found
