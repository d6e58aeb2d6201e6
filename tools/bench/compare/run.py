"""The driver of `make bench-compare`: one workload, one fake platform
configuration, four systems, each in its own processes ((a)-(c) side by side,
or one after another with `--sequential`; then baton, alone), then the table,
the raw results and the plot.

Points: the main point (`--rooms` rooms, ack latency median `--main-latency`
ms) for all four systems; then the latency sweep (`--latencies`, with
`--sweep-rooms` rooms) for (b), (c) and (d). Every point gets its own plan
(same seed, so the same shape) and its own fake platform process for (a)-(c);
baton keeps one local stack for all its points, its fake platform reset and
reconfigured over HTTP between them (`POST /_fake/reset`, `/_fake/config`).

Every process is started in its own process group and stopped by its id at
the end, on failure and on Ctrl-C. Outputs: `--out` (raw fake-platform
records per run, results.json, table.md) and the PNG at `--plot`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import requests
from rich.console import Console
from rich.table import Table

from shared.events import TERMINAL_EVENTS
from tools.bench.compare import metrics
from tools.bench.compare.workload import Planned, make_plan, save_plan
from tools.local.audit import percentile, read_events
from tools.local.stack import PROJECT, ROOT, TOPIC, Stack, free_port, port_open, wait_until

SYSTEMS = {
    "fire": "(a) fire and forget",
    "delay": "(b) fixed delay",
    "actor": "(c) asyncio actors, one process",
    "baton": "(d) baton on the emulators",
}
ALTERNATIVES = ("fire", "delay", "actor")
# Issue 31's goal for baton (docs/compare.md): at least this share of the
# asyncio actors' per-room rate (median room), (d)/(c).
GOAL_BATON_OVER_ACTOR = 0.97
SWEEP_SYSTEMS = ("delay", "actor", "baton")


@dataclass(frozen=True)
class Point:
    """One workload at one ack latency median (ms)."""

    name: str
    latency_ms: float
    rooms: int
    burst: int
    window_s: float
    systems: tuple[str, ...]

    def plan(self, seed: int, system: str) -> list[Planned]:
        """The point's plan for `system` (room ids `{system}{point}-NNNNN`)."""
        return make_plan(self.rooms, self.burst, self.window_s, seed, f"{system}{self.name}")


def fake_config(args: argparse.Namespace, latency_ms: float) -> dict[str, Any]:
    """The fake platform's configuration for a point: its defaults (87% acks,
    log-normal latency with sigma `--ack-sigma`, 5% duplicated and 5%
    reordered webhooks, half the acked messages read) with the point's
    median and no `failed` messages (so every message reaches its device and
    its order is defined)."""
    return {"ack_median_ms": float(latency_ms), "ack_sigma": args.ack_sigma, "ack_prob": args.ack_prob,
            "fail_prob": 0.0, "seed": args.seed}


# ---------------------------------------------------------------- processes


class Processes:
    """Processes started by this run, each in its own group, stopped by id."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.pids: dict[str, int] = {}
        self.lock = threading.Lock()

    def spawn(self, name: str, argv: list[str]) -> int:
        """Start `argv` in a new process group, output to `log_dir/name.log`; returns its pid."""
        with open(self.log_dir / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
        with self.lock:
            self.pids[name] = proc.pid
        return proc.pid

    def exited(self, name: str) -> bool:
        """Whether the process `name` has ended (it is reaped if so)."""
        with self.lock:
            pid = self.pids.get(name)
        if pid is None:
            return True
        try:
            return os.waitpid(pid, os.WNOHANG)[0] != 0
        except ChildProcessError:
            return True

    def stop(self, name: str) -> None:
        """SIGTERM the group, SIGKILL it after 10 s, reap it."""
        with self.lock:
            pid = self.pids.pop(name, None)
        if pid is None:
            return
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break
            time.sleep(0.05)
        else:
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass

    def stop_all(self) -> None:
        for name in list(self.pids):
            self.stop(name)


def fake_stats(url: str) -> dict[str, Any]:
    """The fake platform's record (`GET /_fake/stats`, tools/sim/fake_platform/)."""
    return requests.get(f"{url}/_fake/stats", timeout=60).json()


def wait_drained(url: str, cap_s: float) -> dict[str, Any]:
    """Wait until the fake platform has nothing scheduled (every device
    receipt and webhook done) or `cap_s` s passed; returns its stats."""
    deadline = time.monotonic() + cap_s
    while True:
        stats = fake_stats(url)
        if stats["pending_actions"] == 0 or time.monotonic() > deadline:
            return stats
        time.sleep(1.0)


def drain_cap_s(latency_ms: float) -> float:
    """How long to wait for a fake platform's late receipts, s: the
    log-normal tail (sigma 1: 1 in 10^4 draws is over 40x the median)."""
    return 10 + 40 * latency_ms / 1000


# ---------------------------------------------------------------- (a)-(c)


def run_alternative(system: str, point: Point, args: argparse.Namespace, procs: Processes,
                    out: Path) -> dict[str, Any]:
    """One of (a)-(c) at one point: its own fake platform and its own
    process; returns the figures (and keeps the raw records in `out`)."""
    plan = point.plan(args.seed, system)
    tag = f"{system}-{point.name}"
    plan_path = out / f"plan-{tag}.json"
    save_plan(plan, plan_path)
    result_path = out / f"{tag}.result.json"
    result_path.unlink(missing_ok=True)
    fake_port, port = free_port(), free_port()
    fake_url = f"http://127.0.0.1:{fake_port}"
    py = sys.executable
    try:
        procs.spawn(f"fake-{tag}", [py, "-m", "tools.sim.fake_platform", "--port", str(fake_port),
                                    "--webhook-url", f"http://127.0.0.1:{port}/",
                                    "--config", json.dumps(fake_config(args, point.latency_ms))])
        wait_until(lambda: port_open(fake_port), 30, f"fake platform of {tag}")
        procs.spawn(tag, [py, "-m", "tools.bench.compare.alternatives", "--system", system,
                          "--fake-url", fake_url, "--port", str(port), "--plan", str(plan_path),
                          "--result", str(result_path), "--ack-timeout-ms", str(args.ack_timeout_ms),
                          "--delay-ms", str(args.delay_ms)])
        limit_s = point.window_s + 120 + point.burst * args.ack_timeout_ms / 1000 * 2
        def finished() -> bool:
            if result_path.exists():
                return True
            if procs.exited(tag):
                raise RuntimeError(f"{tag} ended without a result: see {out / (tag + '.log')}")
            return False

        wait_until(finished, limit_s, f"{tag} to finish")
        stats = wait_drained(fake_url, drain_cap_s(point.latency_ms))
    finally:
        procs.stop(tag)
        procs.stop(f"fake-{tag}")
    own = json.loads(result_path.read_text())
    (out / f"{tag}.fake.json").write_text(json.dumps(stats))
    fig = metrics.compute(plan, stats, args.ack_timeout_ms, own["started_at"])
    return {"system": system, "point": point.name, "latency_ms": point.latency_ms, "rooms": point.rooms,
            "start_epoch_s": own["started_at"], **fig.summary(), "own_counts": own["counts"],
            "own_handover_p50_ms": percentile(own["handover_ms"], 0.5),
            "own_handover_p99_ms": percentile(own["handover_ms"], 0.99),
            "pending_actions_left": stats["pending_actions"]}


# ---------------------------------------------------------------- (d)


def timer_dispatches(events: list[dict[str, Any]]) -> int:
    """Cloud Tasks timers that reached baton's `timeout` function, counted
    from its event lines (each dispatch logs exactly one of these)."""
    return sum(1 for e in events if e["component"] == "timeout"
               and e["event"] in ("timed_out", "timeout_ignored", "timer_rearmed"))


def seq_map(events: list[dict[str, Any]], plan: list[Planned]) -> dict[tuple[str, int], int]:
    """baton's (room, seq) -> publish position k, from its `enqueued` events."""
    k_of = {p.message_id: p.k for p in plan}
    return {(e["room_id"], e["seq"]): k_of[e["message_id"]] for e in events
            if e["event"] == "enqueued" and e["message_id"] in k_of}


def publish_plan(plan: list[Planned], started: float) -> None:
    """Publish to the stack's topic at the plan's offsets from `started`
    (time.monotonic), ordering key = room (tools/local/publisher.py)."""
    from tools.local.publisher import OutboundMessage, Publisher

    publisher = Publisher(PROJECT, TOPIC)
    futures = []
    for p in plan:
        delay = started + p.offset_s - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        futures.append(publisher.publish(OutboundMessage(p.room, "whatsapp", p.recipient, p.message_id,
                                                         f"message {p.k} of {p.room}")))
    for f in futures:
        f.result(timeout=120)


def run_baton(points: list[Point], args: argparse.Namespace, out: Path, console: Console) -> list[dict[str, Any]]:
    """(d) at every point, on one local stack (tools/local/stack.py)."""
    from tools.local.demo import EndedTracker

    event_log = out / "baton-events.jsonl"
    event_log.unlink(missing_ok=True)
    env = {"ACK_TIMEOUT_MS": str(int(args.ack_timeout_ms)),
           "SEND_TIMEOUT_MS": str(int(min(2000, args.ack_timeout_ms / 2)))}
    stack = Stack(ROOT / "run" / "compare", env=env, event_log=event_log,
                  fake_config=fake_config(args, points[0].latency_ms))
    results = []
    with console.status("(d) starting the local stack (emulators, functions, fake platform)..."):
        stack.start()
    try:
        os.environ.update(stack.client_env())
        invocations = stack.run_dir / "invocations.jsonl"
        for point in points:
            plan = point.plan(args.seed, "baton")
            requests.post(f"{stack.fake_url}/_fake/config", json=fake_config(args, point.latency_ms),
                          timeout=10).raise_for_status()
            requests.post(f"{stack.fake_url}/_fake/reset", timeout=10).raise_for_status()
            inv_offset = invocations.stat().st_size if invocations.exists() else 0
            want = {p.message_id for p in plan}
            tracker = EndedTracker(event_log, want)
            start_epoch, started = time.time(), time.monotonic()
            publisher = threading.Thread(target=publish_plan, args=(plan, started), daemon=True)
            publisher.start()
            done, last_change = 0, time.monotonic()
            with console.status("") as status:
                while done < len(want):
                    now_done = tracker.poll()
                    if now_done != done:
                        done, last_change = now_done, time.monotonic()
                    status.update(f"(d) baton, {point.name}: {done:,}/{len(want):,} messages ended, "
                                  f"{time.monotonic() - started:.0f} s")
                    if time.monotonic() - last_change > args.stall_s and not publisher.is_alive():
                        console.print(f"[yellow](d) {point.name}: {len(want) - done} messages not ended after "
                                      f"{args.stall_s:.0f} s without progress; figures cover what ended[/]")
                        break
                    time.sleep(0.5)
                publisher.join()
                stats = wait_drained(stack.fake_url, drain_cap_s(point.latency_ms))
            tag = f"baton-{point.name}"
            (out / f"{tag}.fake.json").write_text(json.dumps(stats))
            events = [e for e in read_events(event_log) if e.get("message_id") in want
                      or (e.get("room_id") or "").startswith(f"baton{point.name}-")]
            seq_to_k = seq_map(events, plan)
            seq_mismatch = sum(1 for (_, seq), k in seq_to_k.items() if seq != k)
            fig = metrics.compute(plan, stats, args.ack_timeout_ms, start_epoch, seq_to_k)
            with invocations.open("rb") as fh:
                fh.seek(inv_offset)
                inv = [json.loads(line) for line in fh.read().splitlines() if line.strip()]
            ended = sum(1 for e in events if e["event"] in TERMINAL_EVENTS)
            totals: dict[str, float] = {}
            for rec in inv:
                for k in ("firestore_reads", "firestore_writes", "tasks_created", "send_calls"):
                    totals[k] = totals.get(k, 0) + rec[k]
            handovers = [e["trigger_to_send_ms"] for e in events if e["event"] == "sent" and e["trigger"] == "ack"]
            by_trigger: dict[str, int] = {}
            for e in events:
                if e["event"] == "sent":
                    by_trigger[e["trigger"]] = by_trigger.get(e["trigger"], 0) + 1
            outcome = {t: sum(1 for e in events if e["event"] == t) for t in sorted(TERMINAL_EVENTS)}
            results.append({
                "system": "baton", "point": point.name, "latency_ms": point.latency_ms, "rooms": point.rooms,
                "start_epoch_s": start_epoch, **fig.summary(), "seq_not_publish_order": seq_mismatch,
                "timer_dispatches_per_message": timer_dispatches(events) / ended if ended else None, "ended": ended, "outcomes": outcome,
                "sends_by_trigger": by_trigger,
                "own_handover_p50_ms": percentile(handovers, 0.5), "own_handover_p99_ms": percentile(handovers, 0.99),
                "invocations": len(inv),
                **{f"{k}_per_message": (v / ended if ended else None) for k, v in totals.items()},
                "pending_actions_left": stats["pending_actions"],
            })
            console.print(f"(d) baton, {point.name}: done, per-room p50 "
                          f"{_num(results[-1]['per_room_msgs_per_s_p50'])} msgs/s")
    finally:
        with console.status("(d) stopping the local stack..."):
            stack.stop()
    return results


def recompute(rows: list[dict[str, Any]], points: list[Point], args: argparse.Namespace,
              out: Path) -> list[dict[str, Any]]:
    """The figures of `rows` (a saved results.json) computed again from the
    raw records in `out`: the fake platform's records per run, the plans
    (regenerated from the seed), baton's event log. What only the run knew
    (its own counts, baton's operation counts) is kept."""
    by_name = {p.name: p for p in points}
    events = read_events(out / "baton-events.jsonl") if any(r["system"] == "baton" for r in rows) else []
    fresh = []
    for row in rows:
        point = by_name[row["point"]]
        plan = point.plan(args.seed, row["system"])
        stats = json.loads((out / f"{row['system']}-{point.name}.fake.json").read_text())
        start = row.get("start_epoch_s")
        if start is None and row["system"] != "baton":
            start = json.loads((out / f"{row['system']}-{point.name}.result.json").read_text())["started_at"]
        extra: dict[str, Any] = {}
        seq_to_k = None
        if row["system"] == "baton":
            mine = [e for e in events if (e.get("room_id") or "").startswith(f"baton{point.name}-")]
            seq_to_k = seq_map(mine, plan)
            ended = sum(1 for e in mine if e["event"] in TERMINAL_EVENTS)
            extra["timer_dispatches_per_message"] = timer_dispatches(mine) / ended if ended else None
        summary = metrics.compute(plan, stats, args.ack_timeout_ms, start or 0.0, seq_to_k).summary()
        if start is None:
            summary.pop("total_msgs_per_s")  # the run's start was not kept: keep the run's figure
        fresh.append({**row, **summary, **extra})
    return fresh


# ---------------------------------------------------------------- report


def _num(v: float | None, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def main_table(rows: dict[str, dict[str, Any]], args: argparse.Namespace) -> list[tuple[str, list[str]]]:
    """(figure, one cell per system) of the main point."""
    systems = [s for s in SYSTEMS if s in rows]

    def line(label: str, fn) -> tuple[str, list[str]]:
        return label, [fn(rows[s], s) for s in systems]

    ordered = {"actor", "baton"}
    return [
        line("messages sent / published", lambda r, s: f"{r['sent']:,} / {r['planned']:,}"),
        line("acked in time and in order on the device, % of published",
             lambda r, s: _num(100 * r["acked_in_order_share"] if r["acked_in_order_share"] is not None else None,
                               "{:.1f}")),
        line("acked at all / within the ack timeout",
             lambda r, s: f"{r['acked']:,} / {r['acked_in_time']:,}"),
        line("device-order violations, all messages / acked in time only",
             lambda r, s: f"{r['violations']:,} / {r['violations_acked']:,}"),
        line("received while the previous was undelivered", lambda r, s: f"{r['received_before_previous']:,}"),
        line("total messages/s (first publish to last send)", lambda r, s: _num(r["total_msgs_per_s"], "{:.1f}")),
        line("per-room messages/s, median / p10",
             lambda r, s: f"{_num(r['per_room_msgs_per_s_p50'])} / {_num(r['per_room_msgs_per_s_p10'])}"),
        line("physical limit per room (same run), median / p10",
             lambda r, s: (f"{_num(r['per_room_limit_msgs_per_s_p50'])} / {_num(r['per_room_limit_msgs_per_s_p10'])}"
                           if s in ordered else "-")),
        line("per-room median / physical limit",
             lambda r, s: _num(metrics.ratio(r["per_room_msgs_per_s_p50"], r["per_room_limit_msgs_per_s_p50"]))
             if s in ordered else "-"),
        line("ack -> next send p50 / p99, ms (platform's clock)",
             lambda r, s: f"{_ms(r['ack_to_next_send_p50_ms'])} / {_ms(r['ack_to_next_send_p99_ms'])}"
             if s in ordered else "-"),
        line("timeout -> next send p50 / p99, ms (platform's clock, past the ack timeout)",
             lambda r, s: f"{_ms(r.get('timeout_to_next_send_p50_ms'))} / {_ms(r.get('timeout_to_next_send_p99_ms'))}"
             if s in ordered else "-"),
        line("ack -> next send p50 / p99, ms (system's own clock)",
             lambda r, s: f"{_ms(r['own_handover_p50_ms'])} / {_ms(r['own_handover_p99_ms'])}"
             if s in ordered else "-"),
        line("duplicate sends", lambda r, s: f"{r['duplicates_sent']:,}"),
        line("Firestore reads / writes per message",
             lambda r, s: f"{_num(r.get('firestore_reads_per_message'))} / {_num(r.get('firestore_writes_per_message'))}"
             if s == "baton" else "-"),
        line("Cloud Tasks creates per message",
             lambda r, s: _num(r.get("tasks_created_per_message")) if s == "baton" else "-"),
        line("Cloud Tasks dispatches (timer calls) per message",
             lambda r, s: _num(r.get("timer_dispatches_per_message")) if s == "baton" else "-"),
    ]


def markdown(header: list[str], body: list[list[str]]) -> str:
    """A markdown table (first column left-aligned, the others right)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(out)


def report(results: list[dict[str, Any]], args: argparse.Namespace, meta: dict[str, Any], out: Path,
           console: Console) -> None:
    """Print the main table, the ratios and the sweep table; write
    `out/table.md`, `out/results.json` and the plot."""
    main_rows = {r["system"]: r for r in results if r["point"] == "main"}
    systems = [s for s in SYSTEMS if s in main_rows]
    labels = [SYSTEMS[s] + (f" {args.delay_ms:.0f} ms" if s == "delay" else "") for s in systems]
    rows = main_table(main_rows, args)
    title = (f"bench-compare: {args.rooms:,} rooms x {args.burst}, bursts over {args.window_s:.0f} s, "
             f"ack median {args.main_latency:.0f} ms, sigma {args.ack_sigma}, {args.ack_prob:.0%} acks, "
             f"ack timeout {args.ack_timeout_ms:.0f} ms")
    table = Table(title=title)
    table.add_column("figure")
    for label in labels:
        table.add_column(label, justify="right")
    for label, cells in rows:
        table.add_row(label, *cells)
    console.print(table)

    c, d = main_rows.get("actor"), main_rows.get("baton")
    ratios = {}
    if c and d:
        ratios = {
            "baton_over_actor_p50": metrics.ratio(d["per_room_msgs_per_s_p50"], c["per_room_msgs_per_s_p50"]),
            "baton_over_actor_p10": metrics.ratio(d["per_room_msgs_per_s_p10"], c["per_room_msgs_per_s_p10"]),
            "baton_over_limit_p50": metrics.ratio(d["per_room_msgs_per_s_p50"], d["per_room_limit_msgs_per_s_p50"]),
            "actor_over_limit_p50": metrics.ratio(c["per_room_msgs_per_s_p50"], c["per_room_limit_msgs_per_s_p50"]),
        }
        console.print(f"per-room messages/s at {args.main_latency:.0f} ms: (d)/(c) median "
                      f"{_num(ratios['baton_over_actor_p50'])} (goal >= {GOAL_BATON_OVER_ACTOR:.2f}), p10 {_num(ratios['baton_over_actor_p10'])}; "
                      f"(d)/physical limit {_num(ratios['baton_over_limit_p50'])}, "
                      f"(c)/physical limit {_num(ratios['actor_over_limit_p50'])}")

    sweep = sorted({(r["latency_ms"], r["system"]): r for r in results if r["system"] in SWEEP_SYSTEMS}.items())
    sweep_header = ["ack latency median", *[SYSTEMS[s] for s in SWEEP_SYSTEMS], "limit (model)", "(d)/(c)"]
    sweep_rows = []
    for latency in sorted({lat for (lat, _), _ in sweep}):
        cells = {s: r for (lat, s), r in sweep if lat == latency}
        model = percentile(metrics.simulated_room_limits(latency, args.ack_sigma, args.ack_prob, args.ack_timeout_ms,
                                                         args.burst), 0.5)
        row = [f"{latency:.0f} ms"]
        for s in SWEEP_SYSTEMS:
            r = cells.get(s)
            row.append("-" if r is None else f"{_num(r['per_room_msgs_per_s_p50'])} / {_num(r['per_room_msgs_per_s_p10'])}"
                       f" ({r['rooms']} rooms)")
        row.append(_num(model))
        dc = (metrics.ratio(cells["baton"]["per_room_msgs_per_s_p50"], cells["actor"]["per_room_msgs_per_s_p50"])
              if "baton" in cells and "actor" in cells else None)
        row.append(_num(dc))
        sweep_rows.append(row)
    sweep_table = Table(title="per-room messages/s, median / p10, against ack latency median")
    for h in sweep_header:
        sweep_table.add_column(h, justify="right")
    for row in sweep_rows:
        sweep_table.add_row(*row)
    console.print(sweep_table)

    md = [f"Run {meta['date']} on {meta['machine']}: `{meta['command']}`", "",
          markdown(["figure", *labels], [[label, *cells] for label, cells in rows]), "",
          markdown(sweep_header, sweep_rows)]
    (out / "table.md").write_text("\n".join(md) + "\n")
    (out / "results.json").write_text(json.dumps({"meta": meta, "ratios": ratios, "results": results}, indent=2))
    if args.plot:
        from tools.bench.compare.plot import plot

        plot(results, args, Path(args.plot))
        console.print(f"plot: {args.plot}")
    console.print(f"raw records and results: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=300, help="rooms of the main point")
    parser.add_argument("--burst", type=int, default=10, help="messages per room, published back to back")
    parser.add_argument("--window-s", type=float, default=180.0, help="the main point's bursts start over this many s")
    parser.add_argument("--main-latency", type=float, default=100.0, help="ack latency median of the main point, ms")
    parser.add_argument("--latencies", default="50,100,300,1000", help="ack latency medians of the sweep, ms")
    parser.add_argument("--sweep-rooms", type=int, default=60, help="rooms of each sweep point")
    parser.add_argument("--sweep-window-s", type=float, default=40.0, help="a sweep point's bursts start over this many s")
    parser.add_argument("--delay-ms", type=float, default=300.0, help="(b)'s delay between two sends of a room, ms")
    parser.add_argument("--ack-timeout-ms", type=float, default=3000.0, help="(c)'s and (d)'s ack timeout, ms")
    parser.add_argument("--ack-sigma", type=float, default=1.0, help="log-normal shape of the ack latency")
    parser.add_argument("--ack-prob", type=float, default=0.87, help="share of messages that get an ack")
    parser.add_argument("--systems", default="fire,delay,actor,baton")
    parser.add_argument("--sequential", action="store_true",
                        help="run (a)-(c) of a point one after another (default: side by side; baton always alone)")
    parser.add_argument("--stall-s", type=float, default=90.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", default=str(ROOT / "out" / "compare"))
    parser.add_argument("--recompute", action="store_true",
                        help="run nothing: recompute every figure from the raw records of a run in --out "
                             "(after a change of definitions), then print, write and plot as a run does")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "img" / "compare-per-room.png"), help="PNG; '' for none")
    args = parser.parse_args()
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        parser.error(f"unknown systems {sorted(unknown)}")
    console = Console(width=150)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points = [Point("main", args.main_latency, args.rooms, args.burst, args.window_s, systems)]
    for latency in (float(x) for x in args.latencies.split(",") if x.strip()):
        if latency != args.main_latency:
            points.append(Point(f"l{latency:g}", latency, args.sweep_rooms, args.burst, args.sweep_window_s,
                                tuple(s for s in systems if s in SWEEP_SYSTEMS)))
    meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, "
                       f"load average at start {os.getloadavg()[0]:.1f}",
            "command": "python -m tools.bench.compare.run " + " ".join(sys.argv[1:]),
            "args": vars(args)}
    if args.recompute:
        saved = json.loads((out / "results.json").read_text())
        results = recompute(saved["results"], points, args, out)
        report(results, args, saved["meta"] | {"recomputed": meta["date"]}, out, console)
        return
    procs = Processes(out)
    results: list[dict[str, Any]] = []
    started = time.monotonic()

    def terminated(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # SIGTERM: stop every process of this run, as Ctrl-C does

    signal.signal(signal.SIGTERM, terminated)
    try:
        for point in points:
            alts = [s for s in point.systems if s in ALTERNATIVES]
            with console.status(f"{point.name} ({point.latency_ms:.0f} ms, {point.rooms:,} rooms): "
                                f"{', '.join(SYSTEMS[s] for s in alts)}..."):
                if not args.sequential:
                    # No `with`: on Ctrl-C or SIGTERM the pool must not wait for its
                    # runs; the processes are stopped below and the runs then end.
                    pool = ThreadPoolExecutor(len(alts) or 1)
                    try:
                        results += list(pool.map(lambda s, p=point: run_alternative(s, p, args, procs, out), alts))
                    finally:
                        pool.shutdown(wait=False, cancel_futures=True)
                else:
                    for s in alts:
                        results.append(run_alternative(s, point, args, procs, out))
            for r in results[-len(alts):] if alts else []:
                console.print(f"{SYSTEMS[r['system']]}, {point.name}: per-room p50 "
                              f"{_num(r['per_room_msgs_per_s_p50'])} msgs/s, violations {r['violations']}")
        baton_points = [p for p in points if "baton" in p.systems]
        if baton_points:
            results += run_baton(baton_points, args, out, console)
    except KeyboardInterrupt:
        console.print("[red]interrupted[/]: stopping every process of this run")
        raise
    finally:
        procs.stop_all()
    meta["wall_s"] = time.monotonic() - started
    report(results, args, meta, out, console)


if __name__ == "__main__":
    main()
