"""The cost model's inputs (`make cost`, tools/bench/cost.py): the counts per
message a `make bench-core` run measured, and the deployment they are priced
for. `deployment` reads the size, concurrency and log switches from the
defaults in infra/variables*.tf; `derive` turns one run's files
(out/bench/core-MODE.json, its event log out/bench/core-events-MODE.jsonl and
its invocation records run/bench-MODE/invocations.jsonl) into per-message
figures; `load_inputs` picks the live run or the committed snapshot
docs/cost-inputs.json, which `snapshot` writes. Held apart from the pricing
(cost_model.py) because this is the only part that reads files. Standard
library only.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SNAPSHOT = ROOT / "docs" / "cost-inputs.json"
BENCH = ROOT / "out" / "bench"
RUNS = ROOT / "run"
# The root module's variables files (variables.tf, variables_<concern>.tf).
VARIABLE_FILES = sorted((ROOT / "infra").glob("variables*.tf"))
TERMINAL = {"acked", "timed_out", "failed", "dead_lettered", "skipped"}


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
    size = re.fullmatch(r"(\d+)(Mi|Gi)", memory)
    if not size:
        raise ValueError(f"infra/variables*.tf: function_memory {memory!r} is not <n>Mi or <n>Gi")
    number, unit = size.groups()
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


def split_lines(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
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
    distinct: dict[tuple[Any, Any], dict[str, Any]] = {}
    unmarked: set[tuple[Any, Any]] = set()
    first_hand: list[dict[str, Any]] = []
    relogged: list[dict[str, Any]] = []
    for i, e in enumerate(events):
        key = (e.get("room_id"), e["event_id"]) if e.get("event_id") is not None else (None, i)
        distinct.setdefault(key, e)
        if e.get("relogged") is True or key in unmarked:
            relogged.append(e)
        else:
            unmarked.add(key)
            first_hand.append(e)
    return list(distinct.values()), first_hand, relogged


def derive(counts: dict[str, Any], events_path: Path | None, invocations_path: Path | None) -> dict[str, Any]:
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

        def size(e: dict[str, Any]) -> int:
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
        by_function: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for line in invocations_path.open():
            row = json.loads(line)
            by_function[row["function"]].append(row)
        inputs["functions"] = {
            fn: {op: statistics.mean(r.get(key, 0) for r in rows) for op, key in (
                ("reads", "firestore_reads"), ("writes", "firestore_writes"), ("tasks", "tasks_created"),
                ("deletes", "tasks_deleted"), ("sends", "send_calls"), ("publishes", "status_publishes"))}
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
    out.write_text(json.dumps({
        "measured": f"make bench-core, {datetime.fromtimestamp(stamp, UTC):%Y-%m-%d %H:%M} UTC, default options "
                    "(1,000 rooms, both WEBHOOK_MODEs), on the local emulator stack",
        "default_mode": deployment()["webhook_mode"],
        "modes": modes,
    }, indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")
