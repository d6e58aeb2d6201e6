"""`make chaos`: faults injected while rooms flow, invariants checked from outside.

Brings the local stack up, publishes ROOMS x MESSAGES, and while they flow:
- process faults: every `--kill-every-s` s a random function process
  (enqueue, deadletter, webhook, timeout, sweep) is SIGKILLed and restarted
  0.2-1.5 s later; every `--tasks-outage-every-s` s the Cloud Tasks emulator
  is killed for 2-4 s (it loses every task: the watchdog must find the rooms);
  now and then the webhook function is frozen (SIGSTOP) for 1-3 s, so status
  webhooks are answered slowly or time out and Meta's retries come;
- platform faults in the fake platform (`--fault-rate` scales them): HTTP 5xx
  on send, the connection dropped after the request was read, sends answered
  after 5 s, 130429 and 131056 errors; status webhooks duplicated, reordered,
  delayed past the ack timeout (long-tailed latency) or never sent;
- delivery faults: killed enqueue processes make Pub/Sub redeliver (and
  replay the room's later messages).
Faults go on until 90% of the messages have ended (and at least
`--fault-seconds`); the rest drains without faults. The checker (tools/local/chaos_check.py) judges it from the fake
platform's record, the event log and Firestore, and the exit code is 1 on any
violation: lost, ended twice, stuck, acked out of order on a device, or a send
inside the previous message's ack window. A table (rich), `chaos.json` and the
event log (for `make report EVENTS=...`) go to `--out`.

    python -m tools.local.chaos --rooms 1000 --messages 10 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import requests
from google.cloud import firestore
from rich.console import Console
from rich.table import Table

from shared.room_document import room_as_read
from tools.local.audit import make_workload, read_events
from tools.local.chaos_check import Verdict, check
from tools.local.demo import deliver
from tools.local.stack import FUNCTIONS, PROJECT, ROOT, Stack

# Short timeouts keep the run short; the watchdog looks every 2 s, 3 s late.
CHAOS_ENV = {"ACK_TIMEOUT_MS": "1500", "SEND_TIMEOUT_MS": "1000", "SEND_START_DEADLINE_MS": "1000",
             "SEND_RETRY_BASE_MS": "300", "WATCHDOG_GRACE_MS": "3000"}


def platform_faults(rate: float) -> dict[str, float]:
    """The fake platform's fault shares at `rate` (1.0: the defaults below)."""
    return {"http_5xx_prob": 0.01 * rate, "drop_after_read_prob": 0.01 * rate, "slow_send_prob": 0.005 * rate,
            "slow_send_prob_ms": 5000.0, "throughput_error_prob": 0.01 * rate, "pair_rate_limit_prob": 0.005 * rate,
            "duplicate_prob": min(1.0, 0.1 * rate), "reorder_prob": min(1.0, 0.1 * rate), "ack_prob": 0.87,
            "ack_sigma": 1.2}


class Injector(threading.Thread):
    """Kills, freezes and restarts the stack's processes until stopped; counts what it did."""

    def __init__(self, stack: Stack, rng: random.Random, kill_every_s: float, tasks_outage_every_s: float) -> None:
        super().__init__(name="chaos-injector", daemon=True)
        self.stack, self.rng = stack, rng
        self.kill_every_s, self.tasks_outage_every_s = kill_every_s, tasks_outage_every_s
        self.done = threading.Event()
        self.counts: Counter[str] = Counter()
        self.errors: list[str] = []

    def run(self) -> None:
        next_outage = time.monotonic() + self.tasks_outage_every_s
        while not self.done.wait(self.rng.uniform(0.5, 1.5) * self.kill_every_s):
            try:
                if time.monotonic() >= next_outage:
                    self.outage("tasks", self.rng.uniform(2, 4))
                    next_outage = time.monotonic() + self.tasks_outage_every_s
                elif self.rng.random() < 0.15:
                    self.freeze("webhook", self.rng.uniform(1, 3))
                else:
                    self.outage(self.rng.choice(FUNCTIONS), self.rng.uniform(0.2, 1.5))
            except Exception as exc:  # noqa: BLE001 - a failed injection is reported, the run goes on
                self.errors.append(f"{type(exc).__name__}: {exc}")

    def outage(self, name: str, seconds: float) -> None:
        self.stack.kill(name)
        self.counts[f"killed {name}"] += 1
        time.sleep(seconds)
        self.stack.restart(name)

    def freeze(self, name: str, seconds: float) -> None:
        pgid = self.stack.pids[name]
        os.killpg(pgid, signal.SIGSTOP)
        self.counts[f"froze {name}"] += 1
        try:
            time.sleep(seconds)
        finally:
            os.killpg(pgid, signal.SIGCONT)


def final_rooms(prefix: str) -> tuple[list[str], dict[str, str]]:
    """Of this run's rooms in Firestore: those whose document still holds a
    message (in flight, queued or awaited), and every message id they record
    as ended, with its outcome."""
    db = firestore.Client(project=PROJECT)
    held: list[str] = []
    ended: dict[str, str] = {}
    for snap in db.collection("rooms").stream():
        if snap.id.startswith(prefix):
            room = room_as_read(snap.id, snap.to_dict(), time.time_ns() // 1000)
            if room.holds_messages:
                held.append(snap.id)
            ended.update({e.message_id: e.outcome for e in room.ended})
    return held, ended


def run(args: argparse.Namespace, console: Console) -> tuple[Verdict, dict]:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    event_log = out / "events.jsonl"
    event_log.unlink(missing_ok=True)
    rng = random.Random(args.seed)
    fake = {**platform_faults(args.fault_rate), "seed": args.seed}
    env = {**CHAOS_ENV, **({"WEBHOOK_MODE": args.webhook_mode} if args.webhook_mode else {})}
    stack = Stack(Path(args.run_dir), env=env, fake_config=fake, event_log=event_log, sweep_interval_s=2.0)
    prefix = f"chaos{args.seed}-"
    messages = make_workload(args.rooms, args.messages, seed=args.seed, prefix=prefix)
    with console.status("starting the local stack..."):
        stack.start()
    injector = Injector(stack, rng, args.kill_every_s, args.tasks_outage_every_s)
    try:
        started = time.monotonic()
        injector.start()
        def on_progress(what: str, n: int) -> None:
            # Faults go on while messages flow: until 90% have ended (and at
            # least --fault-seconds); the rest drains without faults.
            if what == "ended" and n >= 0.9 * len(messages) and time.monotonic() - started >= args.fault_seconds:
                injector.done.set()

        with console.status(f"{len(messages):,} messages under faults..."):
            try:
                deliver(stack, messages, stall_s=args.drain_s, on_progress=on_progress)
            except TimeoutError as exc:  # waiting rooms or missing log lines: the rooms tell below
                console.print(f"no end logged for {args.drain_s:.0f} s ({exc}); asking the rooms")
        injector.done.set()
        injector.join(30)
        with console.status("draining: waiting until no room holds a message..."):
            # A room may legitimately wait minutes: a pair rate limit (131056)
            # backs off 4^n s. Wait for the rooms themselves, up to a bound.
            deadline = time.monotonic() + args.max_drain_s
            while True:
                time.sleep(2)  # late webhooks and timers land
                holding, ended_in_rooms = final_rooms(prefix)
                if not holding or time.monotonic() > deadline:
                    break
            # A stall with nothing held means only log lines were missing.
            drained = not holding
            stats = requests.get(f"{stack.fake_url}/_fake/stats", timeout=60).json()
        wall_s = time.monotonic() - started
    finally:
        injector.done.set()
        with console.status("stopping the local stack..."):
            stack.stop()
    events = [e for e in read_events(event_log) if (e["room_id"] or "").startswith(prefix) or e["room_id"] is None]
    verdict = check({m.message_id for m in messages}, events, stats["sends"], stats["device"], holding,
                    int(CHAOS_ENV["ACK_TIMEOUT_MS"]), ended_in_rooms)
    kinds = Counter(e["event"] for e in events)
    report = {
        "rooms": args.rooms, "messages": len(messages), "seed": args.seed, "fault_rate": args.fault_rate,
        "wall_s": round(wall_s, 1), "ok": verdict.ok, "drained": drained,
        "faults": {**{f"platform {k}": v for k, v in stats["faults"].items()}, **dict(injector.counts),
                   "webhook posts that failed (retried by the platform)": stats["webhooks_failed"]},
        "injector_errors": injector.errors,
        "outcomes": dict(verdict.outcomes),
        "send_calls": verdict.send_calls, "duplicates_sent": verdict.duplicates_sent,
        "max_sends_per_message": verdict.max_sends_per_message,
        "unlogged_ends": verdict.unlogged_ends,
        "late_copies": verdict.late_copies,
        "resent_after_a_status": verdict.resent_after_a_status,
        "send_unknown": kinds["send_unknown"], "resent": kinds["resent"],
        "watchdog_rescued": kinds["watchdog_rescued"], "timer_arm_failed": kinds["timer_arm_failed"],
        "violations": verdict.violations(),
        "event_log": str(event_log),
    }
    (out / "chaos.json").write_text(json.dumps(report, indent=2))
    return verdict, report


def print_report(console: Console, report: dict, max_attempts: int) -> None:
    table = Table(title=f"chaos: {report['rooms']:,} rooms x {report['messages'] // report['rooms']} messages, "
                        f"seed {report['seed']}, fault rate {report['fault_rate']}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for kind, n in sorted(report["faults"].items()):
        table.add_row(f"fault: {kind}", f"{n:,}")
    for outcome, n in sorted(report["outcomes"].items()):
        table.add_row(f"messages {outcome}", f"{n:,}")
    table.add_row("send calls / duplicates sent", f"{report['send_calls']:,} / {report['duplicates_sent']:,}")
    table.add_row("of them resent after a status of the earlier attempt had come",
                  f"{len(report['resent_after_a_status']):,}")
    table.add_row("most sends of one message (bound: MAX_SEND_ATTEMPTS)",
                  f"{report['max_sends_per_message']} (<= {max_attempts})")
    table.add_row("sends with an unknown outcome / resends", f"{report['send_unknown']:,} / {report['resent']:,}")
    table.add_row("rooms rescued by the watchdog", f"{report['watchdog_rescued']:,}")
    table.add_row("timers that could not be armed", f"{report['timer_arm_failed']:,}")
    table.add_row("ends the room recorded whose log line a kill lost", f"{len(report['unlogged_ends']):,}")
    table.add_row("second copies on a device after a later message (a resent send delivered late)",
                  f"{len(report['late_copies']):,}")
    for name, found in report["violations"].items():
        table.add_row(f"violations: {name}", f"{len(found):,}", style="red" if found else None)
    table.add_row("wall time (publish to last end)", f"{report['wall_s']:,.1f} s")
    console.print(table)
    for name, found in report["violations"].items():
        for line in found[:10]:
            console.print(f"[red]{name}[/red]: {line}")
    if report["injector_errors"]:
        console.print(f"injector errors: {report['injector_errors'][:5]}")


def main() -> None:
    parser = argparse.ArgumentParser(description="Faults during a run, invariants checked from outside.")
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=10, help="messages per room")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--fault-rate", type=float, default=1.0, help="scales the platform's fault shares")
    parser.add_argument("--kill-every-s", type=float, default=3.0, help="mean seconds between process faults")
    parser.add_argument("--tasks-outage-every-s", type=float, default=40.0)
    parser.add_argument("--fault-seconds", type=float, default=0.0,
                        help="inject at least this long (s), even after 90%% of the messages ended")
    parser.add_argument("--drain-s", type=float, default=45.0,
                        help="stop waiting when nothing has ended for this long (s), then check")
    parser.add_argument("--max-drain-s", type=float, default=300.0,
                        help="then wait at most this long (s) for every room to end its messages")
    parser.add_argument("--webhook-mode", choices=["direct", "queued"], default=None,
                        help="WEBHOOK_MODE of the run (default: the configured default)")
    parser.add_argument("--run-dir", default=str(ROOT / "run" / "chaos"))
    parser.add_argument("--out", default=str(ROOT / "out" / "chaos"))
    args = parser.parse_args()
    console = Console()
    verdict, report = run(args, console)
    print_report(console, report, max_attempts=5)
    console.print(f"figures: {Path(args.out) / 'chaos.json'}; event log: {report['event_log']}")
    if not verdict.ok:
        console.print("[red]FAILED[/red]: invariants violated (see above)")
        sys.exit(1)
    console.print("OK: nothing lost, nothing stuck, acked messages in order, no early hand-over")


if __name__ == "__main__":
    main()
