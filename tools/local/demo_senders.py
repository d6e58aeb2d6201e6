"""`make demo-senders`: several WhatsApp numbers on the local stack, each at
its rate (issue 33).

Starts the stack with WHATSAPP_SENDERS = NUMBERS numbers at RATE messages/s
each and the fake platform refusing (130429) any number's send past RATE in
a one-second window, publishes ROOMS rooms x MESSAGES messages at once, and
judges from the fake platform's own record of what it sent:

- every room sent from one number, the one its rendezvous hash names;
- no number above its rate in any one-second window (sliding);
- 0 x 130429, and nothing lost, ended twice or acked out of order.

The default rate is 10 messages/s, not WhatsApp's 80: the emulators carry
about 40 messages/s on 2 cores (docs/benchmarks.md), so at 3 x 80/s no
number would ever be held back here and the run would prove nothing. Run
`python -m tools.local.demo_senders --help` for the knobs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from shared.room import parse_delivery_id
from shared.sender_window import GUARD_US, SPAN_US
from shared.senders import rendezvous_sender
from tools.local.audit import epoch_s, make_workload, percentile, read_events, sender_waits, summarize
from tools.local.demo import deliver, fake_stats
from tools.local.stack import ROOT, Stack

FIRST_NUMBER = 100000000000101


@dataclass
class SenderVerdict:
    """What the fake platform's record shows, per number (phone-number id)."""

    sends: dict[str, int] = field(default_factory=dict)
    max_in_any_second: dict[str, int] = field(default_factory=dict)
    rooms_on_several_numbers: list[str] = field(default_factory=list)
    rooms_off_their_hash: list[str] = field(default_factory=list)

    def over_rate(self, rates: dict[str, int]) -> dict[str, int]:
        """Numbers whose busiest one-second window passed their rate: {id: sends in it}."""
        return {n: m for n, m in self.max_in_any_second.items() if m > rates.get(n, 0)}


def most_in_any_second(times: list[float]) -> int:
    """The most of `times` (s) in any half-open window of 1 s (sliding)."""
    ts, start, most = sorted(times), 0, 0
    for end, t in enumerate(ts):
        while t - ts[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


# Events stamped with a send call's start (shared/service/core.py, `_send`),
# and a refusal made without a call (its start deadline passed).
CALL_EVENTS = ("sent", "send_unknown", "send_failed")
NO_CALL = "send not started"


def call_starts(events: list[dict[str, Any]], numbers: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """{number: {delivery id: epoch s}}: when baton started each WhatsApp
    send call, by its own clock (the `ts` of `sent`, `send_unknown` and
    `send_failed`, which is the call's start, after its slot was taken),
    by the number the room's hash names."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    for e in events:
        if e["event"] in CALL_EVENTS and e.get("delivery_id") and e.get("provider") == "whatsapp" \
                and not (e.get("error_title") or "").startswith(NO_CALL):
            out[rendezvous_sender(e["room_id"], numbers)][e["delivery_id"]] = epoch_s(e["ts"])
    return out


@dataclass(frozen=True)
class Overshoot:
    """Whether a number's busiest second is baton's or the transport's: the
    most call starts in any sliding second by baton's own clock, per number
    (over its rate: the window let too many through, or a thread took more
    than GUARD_US from its slot to its call: the stamps are the calls'), and
    how long a send took from its call's start to its arrival at the fake
    platform (`received`, else its record; p50, p99, max, ms: when baton's starts stay within the
    rate and the platform still counts more, calls spaced by SPAN reached
    it closer than a second apart: a delay beyond the window's GUARD_US,
    which a loaded machine makes)."""

    starts_in_any_second: dict[str, int]
    delay_p50_ms: float | None
    delay_p99_ms: float | None
    delay_max_ms: float | None


def judge_overshoot(sends: list[dict[str, Any]], events: list[dict[str, Any]],
                    numbers: tuple[str, ...]) -> Overshoot:
    """`Overshoot` from the fake platform's `sends` records and baton's event log."""
    starts = call_starts(events, numbers)
    at = {d: start for by_id in starts.values() for d, start in by_id.items()}
    delays = sorted(((rec.get("received") or rec["at"]) - at[rec["callback"]]) * 1000
                    for rec in sends if rec.get("callback") in at)
    return Overshoot({n: most_in_any_second(list(by_id.values())) for n, by_id in starts.items()},
                     percentile(delays, 0.5), percentile(delays, 0.99), delays[-1] if delays else None)


def judge_senders(sends: list[dict[str, Any]], numbers: tuple[str, ...]) -> SenderVerdict:
    """Judge the fake platform's `sends` records (`sender`, `received`, its
    arrival, else `at`, in epoch s, `callback` = our delivery id) against `numbers`, in order of
    WHATSAPP_SENDERS. Records without a baton delivery id are left out."""
    v = SenderVerdict()
    times: dict[str, list[float]] = defaultdict(list)
    used: dict[str, set[str]] = defaultdict(set)
    for rec in sends:
        try:
            room = parse_delivery_id(rec.get("callback"))[0]
        except ValueError:
            continue
        times[rec["sender"]].append(rec.get("received") or rec["at"])  # its arrival, as the platform counts
        used[room].add(rec["sender"])
    for number, ts in times.items():
        v.sends[number] = len(ts)
        v.max_in_any_second[number] = most_in_any_second(ts)
    v.rooms_on_several_numbers = sorted(r for r, s in used.items() if len(s) > 1)
    v.rooms_off_their_hash = sorted(r for r, s in used.items() if s != {rendezvous_sender(r, numbers)})
    return v


def slot_uses(invocations: Path) -> dict[str, list[tuple[int, int, float]]]:
    """{number: [(document, slot, epoch s)]}: every send the sender window let
    through, by its slot's stamp, from the functions' invocation records
    (METRICS_LOG_PATH, `window_slots`)."""
    out: dict[str, list[tuple[int, int, float]]] = defaultdict(list)
    if not invocations.exists():
        return out
    for line in invocations.open(encoding="utf-8"):
        for number, d, slot, at_us in json.loads(line).get("window_slots", []):
            out[number].append((d, slot, at_us / 1e6))
    return out


@dataclass(frozen=True)
class Clocks:
    """A number's busiest sliding second by each clock a send passes, in
    order: the window's slot stamps (`window`), the fake platform's
    arrival of the request, refused or not (`received`), and the stamp its
    rate check counted a sent one at (`counted`, within the rate by
    construction), {number: most}; the shortest time between two
    uses of one slot (ms, at least SPAN when the window holds), and how long
    the fake took from a request's arrival to its record of the send (p50,
    p99, max, ms: its own threads' delay, which it counted the rate by
    before it counted arrivals).
    Over the rate by `window`: the window let too many through; within it
    by `window` but over by `received`: the transport (a delay between the
    slot and the call's arrival beyond GUARD_US); 130429s while within it
    by `received`: the fake's own queueing before its count."""

    window: dict[str, int]
    received: dict[str, int]
    counted: dict[str, int]
    min_slot_gap_ms: float | None
    count_delay_ms: tuple[float | None, float | None, float | None]


def judge_clocks(uses: dict[str, list[tuple[int, int, float]]], sends: list[dict[str, Any]],
                 refusals: list[dict[str, Any]]) -> Clocks:
    """`Clocks` from the window's slot uses and the fake platform's `sends`
    and `throughput_refusals` (a refused call arrived too: it counts by
    `received`, not by `counted`, which it was refused at)."""
    gaps: list[float] = []
    for rows in uses.values():
        by_slot: dict[tuple[int, int], list[float]] = defaultdict(list)
        for d, slot, at in rows:
            by_slot[(d, slot)].append(at)
        for stamps in by_slot.values():
            stamps.sort()
            gaps += [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)]
    received: dict[str, list[float]] = defaultdict(list)
    counted: dict[str, list[float]] = defaultdict(list)
    for rec in sends:
        if rec.get("received"):
            counted[rec["sender"]].append(rec["counted"])
    for rec in [*sends, *refusals]:
        if rec.get("received"):
            received[rec["sender"]].append(rec["received"])
    delays = sorted((rec["at"] - rec["received"]) * 1000 for rec in sends if rec.get("received"))
    return Clocks({n: most_in_any_second([at for _, _, at in rows]) for n, rows in uses.items()},
                  {n: most_in_any_second(ts) for n, ts in received.items()},
                  {n: most_in_any_second(ts) for n, ts in counted.items()},
                  min(gaps) if gaps else None,
                  (percentile(delays, 0.5), percentile(delays, 0.99), delays[-1] if delays else None))


@dataclass
class SendersRun:
    """One run on the local stack: the numbers and their rates (messages/s),
    what was published, the audit of the event log against the fake
    platform's record (`summary`), the per-number verdict, the fake's 130429
    count (`refusals`), the sends held back for their number's rate
    (`paced`) and whether a busiest second is baton's or the transport's
    (`overshoot`)."""

    numbers: tuple[str, ...]
    rates: dict[str, int]
    messages: list[Any]
    summary: Any
    verdict: SenderVerdict
    refusals: int
    paced: int
    wall_s: float
    overshoot: Overshoot
    clocks: Clocks

    @property
    def ok(self) -> bool:
        """Nothing lost, ended twice or acked out of order; no 130429; no
        number above its rate; each room from the one number its hash names."""
        return (self.summary.ok and self.refusals == 0 and not self.verdict.over_rate(self.rates)
                and not self.verdict.rooms_on_several_numbers and not self.verdict.rooms_off_their_hash)


def run(rooms: int, messages_per_room: int, numbers: int, rate: int, out: Path, run_dir: Path,
        fake_config: dict[str, Any] | None = None, console: Console | None = None) -> SendersRun:
    """Start a stack of its own in `run_dir` with `numbers` WhatsApp numbers
    at `rate` messages/s each in baton's WHATSAPP_SENDERS, the fake platform
    refusing (130429) a number's sends past `rate` in any one second of its
    own clock, publish `rooms` x `messages_per_room` at once,
    wait until every message ended (a stall of 120 s fails), stop the
    stack, and judge. `fake_config`: more fake-platform settings
    (tools/sim/fake_platform/config.py). The event log is `out/events.jsonl`.

    Raises:
        TimeoutError: nothing ended for 120 s while messages were left.
        What `Stack.start` raises when the stack does not come up.
    """
    ids = tuple(str(FIRST_NUMBER + i) for i in range(numbers))
    out.mkdir(parents=True, exist_ok=True)
    event_log = out / "events.jsonl"
    event_log.unlink(missing_ok=True)
    messages = make_workload(rooms, messages_per_room, seed=5, prefix="senders")
    stack = Stack(run_dir, event_log=event_log, fake_config={"number_rate_per_s": rate, **(fake_config or {})},
                  env={"WHATSAPP_SENDERS": ",".join(f"{n}:{rate}" for n in ids)})
    with console.status("starting the local stack...") if console is not None else nullcontext():
        stack.start()
    try:
        wall = deliver(stack, messages, stall_s=120)
        time.sleep(1.0)
        stats = fake_stats(stack)
    finally:
        stack.stop()
    (out / "fake-stats.json").write_text(json.dumps(stats))  # what the judges read, for a closer look
    events = read_events(event_log)
    return SendersRun(ids, {n: rate for n in ids}, messages, summarize(messages, events, stats, wall),
                      judge_senders(stats["sends"], ids), stats["faults"].get("throughput_error", 0),
                      sender_waits(events), wall, judge_overshoot(stats["sends"], events, ids),
                      judge_clocks(slot_uses(run_dir / "invocations.jsonl"), stats["sends"],
                                   stats.get("throughput_refusals", [])))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=2, help="messages per room")
    parser.add_argument("--numbers", type=int, default=3, help="WhatsApp numbers")
    parser.add_argument("--rate", type=int, default=10, help="messages/s per number (baton's and the fake's)")
    parser.add_argument("--out", default=str(ROOT / "out" / "demo-senders"))
    parser.add_argument("--run-dir", default=str(ROOT / "run" / "demo-senders"))
    args = parser.parse_args()
    console = Console()
    console.print(f"[bold]baton demo-senders[/]: {args.rooms:,} rooms x {args.messages} messages from "
                  f"{args.numbers} numbers at {args.rate} messages/s each")
    r = run(args.rooms, args.messages, args.numbers, args.rate, Path(args.out), Path(args.run_dir), console=console)
    table = Table(title="sends per number (the fake platform's record)")
    for col in ("number", "rate /s", "sends", "most in any 1 s", "most call starts in any 1 s (baton's clock)",
                "rooms"):
        table.add_column(col, justify="right")
    rooms_of: dict[str, int] = defaultdict(int)
    for m in {m.room_id for m in r.messages}:
        rooms_of[rendezvous_sender(m, r.numbers)] += 1
    for n in r.numbers:
        table.add_row(n, str(r.rates[n]), f"{r.verdict.sends.get(n, 0):,}", str(r.verdict.max_in_any_second.get(n, 0)),
                      str(r.overshoot.starts_in_any_second.get(n, 0)), f"{rooms_of[n]:,}")
    console.print(table)
    console.print(f"130429 refusals: {r.refusals}; sends held back for their number's rate (`paced`): {r.paced:,}; "
                  f"rooms sent from more than one number: {len(r.verdict.rooms_on_several_numbers)}; "
                  f"wall time {r.wall_s:.1f} s")
    o = r.overshoot

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f}"
    console.print(f"call start -> its arrival at the platform: p50 {ms(o.delay_p50_ms)} / p99 {ms(o.delay_p99_ms)} / max "
                  f"{ms(o.delay_max_ms)} ms (the window's guard covers {GUARD_US // 1000} ms of difference)")
    c = r.clocks
    console.print(f"most in any sliding second, per number: by the window's slot stamps {c.window}, by the "
                  f"platform's arrivals {c.received}, by its rate check's stamps {c.counted}; shortest gap "
                  f"between two uses of a slot {ms(c.min_slot_gap_ms)} ms (SPAN {SPAN_US // 1000}); the fake's "
                  f"arrival -> its record p50 {ms(c.count_delay_ms[0])} / p99 {ms(c.count_delay_ms[1])} / max "
                  f"{ms(c.count_delay_ms[2])} ms")
    if not r.ok:
        console.print(f"[red]FAILED[/]: lost {r.summary.lost[:5]}, over rate {r.verdict.over_rate(r.rates)}, "
                      f"130429 x {r.refusals}, rooms on several numbers {r.verdict.rooms_on_several_numbers[:5]}")
        baton_over = {n: m for n, m in o.starts_in_any_second.items() if m > r.rates[n]}
        if r.refusals or r.verdict.over_rate(r.rates):
            console.print(f"baton started more calls than the rate in a second: {baton_over} (by the events' "
                          "stamps, taken after the slot: a slot used twice, or a thread delayed past GUARD_US "
                          "between its slot and its call)"
                          if baton_over else "baton's own call starts stayed within each rate: the calls reached the "
                          "platform closer together than they left (a delay beyond the guard: machine load)")
        return 1
    console.print("[green]OK[/]: each room from one number, no number above its rate, 0 x 130429, nothing lost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
