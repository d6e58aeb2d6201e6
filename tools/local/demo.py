"""`make demo`: the whole delivery path on the local emulator stack.

Brings the stack up, publishes through the client (baton-client, client/) a
workload that interleaves rooms the way the users' queue does, each room a
mix of kinds (WhatsApp: a template, a document, reply buttons, a text, a
list; Messenger and Instagram: quick replies, a text, an image attachment), shows
progress, waits until every message has ended,
brings the stack down and prints a summary. Then the operator day
(tools/local/operator_day.py) on a stack of its own, and the delivery report of
its log. Exits 1 if a message was lost or ended twice, if two acked
messages of one room reached the device in the wrong order, or if the
operator day's report misses one of its checks.

    python -m tools.local.demo --rooms 1000 --messages 5
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import requests
from baton_client import Button, Buttons, Document, Image, ListMessage, QuickReply, Row, Section, Template, Text
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from shared.events import TERMINAL_EVENTS
from tools.local import operator_day
from tools.local.ack_share import acked_share
from tools.local.audit import RECIPIENT_PREFIX, Summary, make_workload, read_events, summarize
from tools.local.demo_topics import TopicCheck
from tools.local.demo_topics import check as check_topics
from tools.local.publisher import OutboundMessage, Publisher
from tools.local.stack import PROJECT, ROOT, TOPIC, Stack


class EndedTracker:
    """Follows a growing event log and collects the message ids that ended
    (terminal event) or were rejected. Reads only what was appended since
    the last poll."""

    def __init__(self, path: Path, want: set[str]) -> None:
        self.path = path
        self.want = want
        self.offset = 0
        self.partial = b""
        self.ended: set[str] = set()

    def poll(self) -> int:
        """How many of the wanted message ids have ended so far."""
        if self.path.exists():
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read()
            self.offset += len(chunk)
            *lines, self.partial = (self.partial + chunk).split(b"\n")
            for line in lines:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("event") in TERMINAL_EVENTS or rec.get("event") == "rejected":
                    if rec.get("message_id") in self.want:
                        self.ended.add(rec["message_id"])
        return len(self.ended)


def deliver(stack: Stack, messages: list[OutboundMessage], stall_s: float = 90.0,
            on_progress: Callable[[str, int], None] | None = None, max_outstanding: int = 2000) -> float:
    """Publish `messages` in order and wait until each has ended (or was rejected).

    At most `max_outstanding` messages are published and not yet ended at any
    time: the Pub/Sub emulator keeps a thread per ordering key with pending
    messages, and tens of thousands at once swamp this machine.

    Returns the wall time in s from the first publish to the last end.
    Raises:
        TimeoutError: nothing ended for `stall_s` s while messages were left.
        google.api_core.exceptions.GoogleAPICallError: a publish failed.
    """
    os.environ.update(stack.client_env())
    assert stack.event_log is not None
    want = {m.message_id for m in messages}
    tracker = EndedTracker(stack.event_log, want)
    started = time.monotonic()
    publisher = Publisher(PROJECT, TOPIC)
    futures = []
    done, last_change = 0, time.monotonic()

    def progress() -> None:
        nonlocal done, last_change
        now_done = tracker.poll()
        if on_progress:
            on_progress("ended", now_done)
        if now_done != done:
            done, last_change = now_done, time.monotonic()
        if time.monotonic() - last_change > stall_s:
            raise TimeoutError(f"{len(want) - done} messages not ended after {stall_s:.0f} s without progress")

    for i, msg in enumerate(messages):
        while i - done >= max_outstanding:
            progress()
            time.sleep(0.2)
        futures.append(publisher.publish(msg))
        if on_progress and ((i + 1) % 100 == 0 or i + 1 == len(messages)):
            on_progress("published", i + 1)
    for fut in futures:
        fut.result(timeout=120)
    progress()
    while done < len(want):
        time.sleep(0.5)
        progress()
    return time.monotonic() - started


# Rooms the local Pub/Sub emulator handles on this kind of machine (see main).
EMULATOR_KEY_LIMIT = 10_000


def _kind_mix(provider: str, k: int, room: str) -> dict | None:
    """The `data` of message `k` (from 1) of a demo room: a campaign's mix of
    kinds, by provider (None: keep the workload's text)."""
    if provider == "whatsapp":
        kinds = [Template("order_update", "en_US", body=[room, f"#{k}"], buttons={0: "stop"}),
                 Document(link=f"https://example.com/invoices/{room}-{k}.pdf", caption=f"Invoice {k}",
                          filename=f"invoice-{k}.pdf"),
                 Buttons(f"Message {k}: was this helpful?", [Button("yes", "Yes"), Button("no", "No")]),
                 None,
                 ListMessage(f"Message {k}: pick a slot", "Slots",
                             [Section([Row("mon", "Monday"), Row("tue", "Tuesday", "afternoon")])])]
    else:
        kinds = [Text(f"Message {k}: which colour?", quick_replies=[QuickReply("Red", "RED"),
                                                                   QuickReply("Blue", "BLUE")]),
                 None, Image(link=f"https://example.com/pictures/{room}-{k}.png")]
    content = kinds[(k - 1) % len(kinds)]
    return content.to_data() if content is not None else None


def mix_kinds(messages: list[OutboundMessage]) -> list[OutboundMessage]:
    """The workload with each room's messages turned into a mix of kinds
    (`_kind_mix`), in the same order."""
    out = []
    for m in messages:
        k = int(m.message_id.rsplit("-m", 1)[1])
        data = _kind_mix(m.provider, k, m.room_id)
        out.append(m if data is None else OutboundMessage(m.room_id, m.provider, m.recipient, m.message_id,
                                                          m.text, data=data))
    return out


def kinds_received(stats: dict) -> str:
    """What the fake platform accepted, by message kind (its `sends`)."""
    counts: dict[str, int] = {}
    for s in stats.get("sends", []):
        key = f"{s.get('provider', 'whatsapp')} {s.get('kind', 'text')}"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {n:,}" for k, n in sorted(counts.items()))


def fake_stats(stack: Stack) -> dict:
    return requests.get(f"{stack.fake_url}/_fake/stats", timeout=30).json()


def print_summary(console: Console, summary: Summary, title: str) -> None:
    table = Table(title=title, show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in summary.rows():
        table.add_row(name, value)
    console.print(table)


def print_topics(console: Console, topics: TopicCheck) -> None:
    """Beside the delivery table: what the outcomes and inbound topics carried."""
    table = Table(title="what baton told the company's services (outcomes and inbound topics)", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in topics.rows():
        table.add_row(name, value)
    console.print(table)


def show_operator_commands(console: Console, stack: Stack, room_id: str) -> None:
    """Run, and print with their output, the `baton` commands that inspect
    the demo's rooms (docs/operations.md, "Operating baton"), while its stack
    is still up. A failing command is shown, never fatal to the demo."""
    prefix = operator_day.baton_command()
    run_dir = os.path.relpath(stack.run_dir, ROOT)
    console.rule("inspect the rooms with `baton` (docs/operations.md, Operating baton)")
    for args in (["rooms", "show", room_id, "--events", "5"], ["rooms", "list", "--lag", "--limit", "5"],
                 ["rooms", "list", "--stuck", "--older-than", "1m"], ["dead-letters", "list", "--limit", "5"]):
        console.print(f"[bold]$ baton --stack {run_dir} {' '.join(args)}[/]")
        try:
            proc = subprocess.run([*prefix, "--stack", str(stack.run_dir), *args], capture_output=True, text=True,
                                  timeout=120, cwd=ROOT, env={**os.environ, "COLUMNS": "120"})
            print(proc.stdout.rstrip() or proc.stderr.rstrip(), flush=True)  # already laid out: no re-wrapping
        except (OSError, subprocess.TimeoutExpired) as exc:
            console.print(f"[yellow]could not run it[/]: {exc}")
    console.print("The same commands work on a stack you keep up: `make up`, then `baton --stack run/local ...`; "
                  "and on a project: `baton --project P ...` (pause, resume, skip, redrive: docs/operations.md).")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=5, help="messages per room")
    parser.add_argument("--out", default=str(ROOT / "out" / "demo"), help="event log and summary go here")
    parser.add_argument("--run-dir", default=str(ROOT / "run" / "demo"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--providers", default="whatsapp",
                        help="comma-separated providers, rooms spread over them (whatsapp,messenger,instagram)")
    parser.add_argument("--fake", default="{}",
                        help='the fake platform\'s settings, JSON (e.g. \'{"messenger_mids_prob": 0}\')')
    parser.add_argument("--keep", action="store_true",
                        help="leave the demo's stack up (make demo KEEP=1): its console address is in the summary; "
                             "stop it with `python -m tools.local.stack down --run-dir RUN_DIR`")
    parser.add_argument("--no-operator-day", action="store_true",
                        help="skip the operator day after the workload (tools/local/operator_day.py: its own stack, "
                             "then the delivery report; about 70 s)")
    args = parser.parse_args()
    # Every 50th message gets a reply and a reaction from its end user: baton forwards them (inbound topic).
    fake = {"reply_every": 50, **json.loads(args.fake)}
    providers = tuple(p.strip() for p in args.providers.split(",") if p.strip())
    if not providers or set(providers) - set(RECIPIENT_PREFIX):
        parser.error(f"--providers: each one of {', '.join(RECIPIENT_PREFIX)}")
    if not 1 <= args.rooms <= 25_000:
        parser.error("--rooms must be 1..25000 (the users' peak)")
    console = Console()
    if args.rooms > EMULATOR_KEY_LIMIT:
        console.print(
            f"[yellow]warning[/]: the Pub/Sub emulator keeps a thread per ordering key and never frees it; "
            f"on 2 cores it thrashed past about 13,000 rooms (measured: 12,838 of 25,000 messages ended, "
            f"then 14,885 threads and a load average over 1,000). Expect {args.rooms:,} rooms to stall here.")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    event_log = out / "events.jsonl"
    event_log.unlink(missing_ok=True)
    messages = mix_kinds(make_workload(args.rooms, args.messages, seed=args.seed, providers=providers))
    console.print(f"[bold]baton demo[/]: {args.rooms:,} rooms x {args.messages} messages = {len(messages):,}"
                  f" ({', '.join(providers)})")
    stack = Stack(Path(args.run_dir), event_log=event_log, fake_config=fake)
    with console.status("starting the local stack (emulators, functions, fake WhatsApp)..."):
        stack.start()
    try:
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      console=console) as progress:
            bars = {"published": progress.add_task("published", total=len(messages)),
                    "ended": progress.add_task("ended", total=len(messages))}
            wall = deliver(stack, messages, on_progress=lambda k, n: progress.update(bars[k], completed=n))
        time.sleep(1.0)  # let the last webhooks land in the device log
        stats = fake_stats(stack)
        with console.status("reading the outcomes and inbound topics..."):
            topics = check_topics(read_events(event_log), stats)
        show_operator_commands(console, stack, messages[0].room_id)
    finally:
        if not args.keep:
            with console.status("stopping the local stack..."):
                stack.stop()
    summary = summarize(messages, read_events(event_log), stats, wall)
    print_summary(console, summary, f"baton demo: {args.rooms:,} rooms x {args.messages} messages")
    console.print(f"kinds the platform received (send calls): {kinds_received(stats)}")
    ack_timeout_ms = int(os.environ.get("ACK_TIMEOUT_MS", "3000"))
    for provider, (acked, eligible) in sorted(acked_share(read_events(event_log), stats, ack_timeout_ms).items()):
        console.print(f"{provider}: acked {acked:,} of {eligible:,} messages the platform delivered and reported "
                      f"within the ack timeout ({acked / max(eligible, 1):.1%})")
    print_topics(console, topics)
    (out / "summary.txt").write_text("\n".join(f"{k}: {v}" for k, v in [*summary.rows(), *topics.rows()]) + "\n")
    console.print(f"event log: {event_log}")
    if args.keep:
        console.print(f"console: {stack.console_url} (the stack stays up; stop it: "
                      f"python -m tools.local.stack down --run-dir {os.path.relpath(stack.run_dir, ROOT)})")
    if not summary.ok:
        console.print(f"[red]FAILED[/]: lost {summary.lost[:5]}, ended twice {summary.ended_twice[:5]}, "
                      f"acked out of order {summary.acked_out_of_order[:5]}")
        return 1
    if not topics.ok:
        console.print(f"[red]FAILED[/]: outcomes missing {topics.outcomes_missing[:5]}, twice "
                      f"{topics.outcomes_twice[:5]}, wrong {topics.outcomes_wrong[:5]}; inbound posts not "
                      f"forwarded {topics.inbound_missing[:5]}")
        return 1
    console.print("[green]OK[/]: every message ended once; acked messages reached each device in order; "
                  "each end published once to the outcomes topic; every reply and reaction forwarded unchanged")
    if args.no_operator_day:
        return 0
    console.rule("the operator day: pause, skip in flight, redrive a dead letter, a paced burst, an image; "
                 "then the report")
    return operator_day.show(console, out.parent / "operator-day", Path(args.run_dir).parent / "operator-day")


if __name__ == "__main__":
    sys.exit(main())
