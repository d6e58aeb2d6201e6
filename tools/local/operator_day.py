"""The operator day: what an on-call engineer does to rooms, on the emulators,
then the delivery report of that log (issue 32's "operator day").

On its own local stack (`OPERATOR_DAY_ENV`: timeouts of seconds, WhatsApp pacing
of 3 messages then one per second, 3 send attempts), five rooms:

- `paused`: paused with `baton rooms pause` before its 3 messages come,
  resumed 3 s later;
- `skipped`: its recipient never acks; message 1 is skipped in flight
  (`baton rooms skip`), message 2 then times out;
- `redriven`: the platform refuses message 1 three times (Graph error
  131000, transient), so baton dead-letters it and sends message 2; then
  `baton dead-letters redrive` sends it again and it is acked;
- `paced`: a burst of 8 messages to one recipient, paced by the room's
  pair-rate bucket;
- `prepared`: an image whose upload (`prepare=media`) precedes its send.

Every action goes through the stack's `admin` function, as in the cloud: the
`baton` CLI (`--stack`) calls it with a stand-in token for the identity
`operator-day` (shared/admin/identity.py), and the function runs the action
and records that verified identity as the actor. Then
`python -m pipeline.job` reports on the log, and `judge` checks that the
audit is clean and that "Faults and operations" shows each of the above,
and that the per-room table equals DuckDB's recomputation
(`tools.bench.duckdb_reference`) on every compared column.

    python -m tools.local.operator_day --out out/operator-day   # its own stack, then the report
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.local.audit import read_events
from tools.local.stack import PROJECT, ROOT, TOPIC, Stack, wait_until

ACTOR = "operator-day"
SILENT = "15553330000"  # the fake platform never acks this recipient
REFUSING = "15553330001"  # the fake refuses its next 3 sends (Graph error 131000, transient)
RECIPIENT = "15553330002"
#: The stack's settings: timeouts of seconds, not minutes; a pair-rate bucket
#: a burst of 8 runs through (3, then one per second); 3 send attempts.
OPERATOR_DAY_ENV = {
    # An ack timeout long enough for the skip to reach the silent room's message
    # in flight (a `baton` process on a loaded machine), send windows that a
    # slow emulator does not turn into unknown outcomes.
    "ACK_TIMEOUT_MS": "10000", "SEND_TIMEOUT_MS": "3000", "SEND_START_DEADLINE_MS": "2000",
    "SEND_RETRY_BASE_MS": "200", "MAX_SEND_ATTEMPTS": "3", "WATCHDOG_GRACE_MS": "5000",
    "PACE_INTERVAL_MS_WHATSAPP": "1000", "PACE_BURST_WHATSAPP": "3",
    "PREPARE_TIMEOUT_MS": "4000", "MEDIA_TIMEOUT_MS": "3500",
}  # fmt: skip
#: The fake platform: acks every message (but SILENT's) in about 40 ms.
FAKE_CONFIG = {
    "ack_prob": 1.0, "fail_prob": 0.0, "duplicate_prob": 0.0, "reorder_prob": 0.0,
    "read_without_delivered_prob": 0.0, "ack_median_ms": 40.0, "ack_sigma": 0.3,
    "silent_recipients": [SILENT], "send_errors": {REFUSING: [131000, 131000, 131000]},
}  # fmt: skip
KINDS = ("paused", "skipped", "redriven", "paced", "prepared")
PAUSE_S = 3.0


@dataclass
class OperatorDay:
    """What was done: `rooms` (kind -> room id), `messages` (message ids
    published), `event_log` (the stack's event log) and `wall_s` (s)."""

    rooms: dict[str, str]
    messages: list[str]
    event_log: Path
    wall_s: float


def baton_command() -> list[str]:
    """How to run the `baton` CLI from this virtualenv: its entry point, or the module."""
    exe = Path(sys.executable).parent / "baton"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "baton_cli.main"]


def baton(stack: Stack, *args: str) -> Any:
    """Run `baton --stack RUN_DIR --actor operator-day ARGS --json` (through
    the stack's admin function); its JSON.

    Raises:
        RuntimeError: the command failed (its stderr says why).
    """
    proc = subprocess.run([*baton_command(), "--stack", str(stack.run_dir), "--actor", ACTOR, *args, "--json"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT, env={**os.environ, "BATON_ACTOR": ""})
    if proc.returncode != 0:
        raise RuntimeError(f"baton {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def run(stack: Stack) -> OperatorDay:
    """Play the operator day on a started `stack` (whose functions run with
    `OPERATOR_DAY_ENV` and whose fake platform with `FAKE_CONFIG`); returns
    when every message has ended and the redriven one is acked.

    The emulators' addresses are set in the environment while it runs and
    put back after.

    Raises:
        TimeoutError: a step did not happen within 60 s.
        RuntimeError: a `baton` command failed or changed nothing.
        subprocess.TimeoutExpired: a `baton` command took over 120 s.
    """
    saved = dict(os.environ)
    os.environ.update(stack.client_env())
    try:
        return _play(stack)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _changed(result: Any, what: str) -> None:
    """Raise unless a `baton` action's JSON says every result changed its room."""
    if not result or not all(r.get("changed") for r in result):
        raise RuntimeError(f"operator day: {what} changed nothing: {result}")


def _play(stack: Stack) -> OperatorDay:
    from google.cloud import pubsub_v1

    assert stack.event_log is not None
    log = stack.event_log
    tag = uuid.uuid4().hex[:6]
    rooms = {kind: f"od-{kind}-{tag}" for kind in KINDS}
    client = pubsub_v1.PublisherClient(publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
    topic = client.topic_path(PROJECT, TOPIC)
    published: list[str] = []

    def publish(kind: str, n: int, recipient: str = RECIPIENT, body: dict | None = None, **attrs: str) -> None:
        for i in range(1, n + 1):
            mid = f"{rooms[kind]}-m{i}"
            data = body or {"type": "text", "text": f"{kind} {i}"}
            client.publish(topic, json.dumps(data).encode(), ordering_key=rooms[kind], room_id=rooms[kind],
                           provider="whatsapp", recipient=recipient, message_id=mid, **attrs).result(timeout=30)
            published.append(mid)

    def events(kind: str, event: str) -> list[dict]:
        return [e for e in read_events(log) if e["room_id"] == rooms[kind] and e["event"] == event]

    started = time.monotonic()
    _changed(baton(stack, "rooms", "pause", rooms["paused"], "--reason", "customer asked us to hold"), "pause")
    paused_at = time.monotonic()
    publish("paused", 3)
    publish("skipped", 2, SILENT)
    publish("redriven", 2, REFUSING)
    publish("paced", 8)
    image = {"type": "image", "link": f"{stack.fake_url}/assets/od-{tag}.png?delay_ms=300", "caption": "menu"}
    publish("prepared", 1, body=image, prepare="media")
    wait_until(lambda: events("skipped", "sent"), 60, "the silent room's first send")
    _changed(baton(stack, "rooms", "skip", rooms["skipped"], "--seq", "1", "--reason", "wrong text"), "skip")
    wait_until(lambda: events("redriven", "dead_lettered"), 60, "the refused message dead-lettered")
    _changed(baton(stack, "dead-letters", "redrive", "--room", rooms["redriven"], "--reason", "platform back", "--yes"),
             "redrive")
    time.sleep(max(0.0, PAUSE_S - (time.monotonic() - paused_at)))
    _changed(baton(stack, "rooms", "resume", rooms["paused"], "--reason", "customer ready"), "resume")
    terminal = {"acked", "failed", "timed_out", "dead_lettered", "skipped"}

    def all_ended() -> bool:
        ended = {e["message_id"] for e in read_events(log) if e["event"] in terminal}
        return set(published) <= ended and bool(events("redriven", "acked")[1:])

    wait_until(all_ended, 60, "every message ended and the redriven one acked")
    return OperatorDay(rooms, published, log, time.monotonic() - started)


def report(day: OperatorDay, out: Path) -> Path:
    """Run the delivery report (`python -m pipeline.job`) on the day's log
    into `out/report`, and DuckDB's per-room reference into
    `out/duckdb-rooms.parquet`; returns the report directory.

    Raises:
        RuntimeError: the job failed (its output is in `out/report.log`).
    """
    from tools.bench.duckdb_reference import compute_rooms

    out.mkdir(parents=True, exist_ok=True)
    job_dir = out / "report"
    with (out / "report.log").open("w") as fh:
        rc = subprocess.run([sys.executable, "-m", "pipeline.job", "--input", str(day.event_log), "--output",
                             str(job_dir)], stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, timeout=900).returncode
    if rc != 0:
        raise RuntimeError(f"pipeline.job exited {rc}: see {out / 'report.log'}")
    compute_rooms(str(day.event_log), str(out / "duckdb-rooms.parquet"), 2, "json")
    return job_dir


def judge(day: OperatorDay, job_dir: Path, duck_rooms: Path) -> list[tuple[str, bool, str]]:
    """What the report must show of the day: `(check, ok, what was found)`
    per check. Reads the job's Parquet tables and summary.json with DuckDB."""
    import duckdb

    from tools.bench.duckdb_reference import compare_rooms

    r = day.rooms
    con = duckdb.connect()

    def rows(table: str, sql: str) -> list[tuple]:
        return con.execute(sql.format(t=f"read_parquet('{job_dir / table}/*.parquet')")).fetchall()

    summary = json.loads((job_dir / "summary.json").read_text())
    failing = sum(summary["rooms_failing_audit"].values())
    outcome = dict(((room, seq), (o, by, n)) for room, seq, o, by, n in
                   rows("messages", "SELECT room_id, seq, outcome, skipped_by, redrives FROM {t}"))
    actions = set(rows("operator_actions", "SELECT action, room_id, actor FROM {t}"))
    waits = rows("waits", "SELECT kind, room_id FROM {t} WHERE wait_ms > 0")
    prepared = rows("preparations", "SELECT took_ms FROM {t} WHERE room_id = '" + r["prepared"] + "'")
    faults = dict(rows("faults", "SELECT event, sum(events) FROM {t} GROUP BY event"))
    html = (job_dir / "report.html").read_text()
    differ = {c: n for c, n in compare_rooms(str(job_dir / "rooms"), str(duck_rooms)).items() if n}
    con.close()

    def act(action: str, kind: str) -> bool:
        return (action, r[kind], ACTOR) in actions

    return [
        ("audit clean, nothing lost", failing == 0 and summary["lost"] == 0,
         f"{failing} room checks failing, {summary['lost']} lost, {summary['messages']} messages"),
        ("pause and resume in the trail, with a paused wait",
         act("paused", "paused") and act("resumed", "paused") and ("paused", r["paused"]) in waits,
         f"{sorted(a for a, room, _ in actions if room == r['paused'])}"),
        ("in-flight message skipped: outcome skipped, by the operator",
         outcome.get((r["skipped"], 1), (None,) * 3)[:2] == ("skipped", ACTOR) and act("skipped", "skipped"),
         f"seq 1: {outcome.get((r['skipped'], 1))}"),
        ("dead letter redriven, then acked",
         outcome.get((r["redriven"], 1)) == ("acked", None, 1) and act("redriven", "redriven")
         and faults.get("dead_lettered", 0) >= 1, f"seq 1: {outcome.get((r['redriven'], 1))}"),
        ("paced burst: a paced wait", ("paced", r["paced"]) in waits,
         f"{sum(1 for k, room in waits if k == 'paced' and room == r['paced'])} paced wait(s) of 8 messages"),
        ("prepared image: a preparation and its wait", bool(prepared) and ("preparing", r["prepared"]) in waits,
         f"took {prepared[0][0] if prepared else None} ms"),
        ("report has the Faults and operations part", "Faults and operations" in html and r["paused"] in html,
         f"{len(html):,} bytes of report.html"),
        ("per-room table equals DuckDB's recomputation", not differ, f"columns differing: {differ or 'none'}"),
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    p = argparse.ArgumentParser(prog="python -m tools.local.operator_day", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=str(ROOT / "out" / "operator-day"), help="event log, report and tables go here")
    p.add_argument("--run-dir", default=str(ROOT / "run" / "operator-day"))
    a = p.parse_args(argv)
    return show(Console(), Path(a.out), Path(a.run_dir))


def show(console: Any, out: Path, run_dir: Path) -> int:
    """Start a stack in `run_dir`, play the day, stop the stack, report into
    `out` and print the checks; 0 if every check holds, else 1."""
    from rich.table import Table

    out.mkdir(parents=True, exist_ok=True)
    event_log = out / "events.jsonl"
    event_log.unlink(missing_ok=True)
    stack = Stack(run_dir, env=OPERATOR_DAY_ENV, fake_config=FAKE_CONFIG, sweep_interval_s=1.0, event_log=event_log)
    with console.status("operator day: starting its own stack..."):
        stack.start()
    try:
        with console.status("operator day: pause, skip in flight, redrive a dead letter, a paced burst, an image..."):
            day = run(stack)
    finally:
        with console.status("operator day: stopping its stack..."):
            stack.stop()
    with console.status("operator day: the delivery report (Spark) and DuckDB's recomputation..."):
        t0 = time.monotonic()
        job_dir = report(day, out)
        report_s = time.monotonic() - t0
    checks = judge(day, job_dir, out / "duckdb-rooms.parquet")
    table = Table(title=f"operator day: {len(day.messages)} messages in {len(day.rooms)} rooms "
                        f"({day.wall_s:.0f} s), report in {report_s:.0f} s")
    for column in ("check", "holds", "found"):
        table.add_column(column)
    for name, ok, found in checks:
        table.add_row(name, "[green]yes[/]" if ok else "[red]NO[/]", found)
    console.print(table)
    console.print(f"report: {job_dir / 'report.html'} (section 'Faults and operations')")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
