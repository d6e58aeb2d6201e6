"""One seed's run, and a batch of seeds with their summary.

`run_seed(seed)` builds a `World` (its services take the scheduler's virtual
clock, retry sleeps, time budgets and sweep pool as arguments: world.py),
runs it, and judges it (checks.py). A failing seed is run again
with only the room that failed (`shrink`): when that still fails, its trace
is the shorter one, and its replay command names the room.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tools.sim.simulation import lifecycle
from tools.sim.simulation.checks import Finding, check, trace
from tools.sim.simulation.world import World


@dataclass
class SeedResult:
    seed: int
    findings: list[Finding]
    world: World
    exercised: Counter[str] = field(default_factory=Counter)
    without: frozenset[str] = frozenset()


def run_seed(seed: int, only_rooms: frozenset[str] | None = None, without: frozenset[str] = frozenset(),
             store_options: dict[str, Any] | None = None) -> SeedResult:
    """Run and judge one seed (see the module); `without`: fault kinds left
    out; `store_options`: attributes set on the fake store (World)."""
    world = World(seed, only_rooms, without, store_options)
    with contextlib.redirect_stdout(None):  # the service's logs
        world.run()
    exercised: Counter[str] = Counter()
    findings = check(world, exercised)
    return SeedResult(seed, findings, world, exercised, without)


def replay_command(seed: int, room: str | None = None, without: frozenset[str] = frozenset()) -> str:
    return (f".venv/bin/python -m tools.sim.simulation --seed {seed}" + (f" --only-room {room}" if room else "")
            + "".join(f" --without {w}" for w in sorted(without)))


def report_failure(result: SeedResult, max_trace: int = 200) -> str:
    """What a failing seed prints: its findings, one replay command, and the
    failing room's trace, shrunk to that room alone when it still fails so."""
    first = result.findings[0]
    lines = [f"seed {result.seed}: {len(result.findings)} finding(s)"]
    lines += [f"  [{f.invariant}] {f.room_id}: {f.detail}" for f in result.findings[:10]]
    shown, room = result, None
    if first.room_id not in ("-", ""):
        small = run_seed(result.seed, frozenset({first.room_id}), result.without)
        if any(f.invariant == first.invariant for f in small.findings):
            shown, room = small, first.room_id
            lines.append(f"  shrunk: still fails with only {first.room_id}:")
            lines += [f"  [{f.invariant}] {f.room_id}: {f.detail}" for f in small.findings[:10]]
    lines.append(f"  replay: {replay_command(result.seed, room, result.without)}")
    target = first.room_id if first.room_id not in ("-", "") else None
    if target is None:
        found = [f for f in shown.findings if f.room_id not in ("-", "")]
        target = found[0].room_id if found else None
    story = trace(shown.world, target) if target else [
        f"{a.function} {a.label}: {a.status} {a.error}" for a in shown.world.answers if a.status == 500][:20]
    lines.append(f"  trace of {target or 'the failing invocations'} (virtual ms from the start):")
    if len(story) > max_trace:
        story = story[:max_trace] + [f"... {len(story) - max_trace} more lines"]
    lines += ["    " + s for s in story]
    return "\n".join(lines)


@dataclass
class Batch:
    seeds: int = 0
    failed: list[SeedResult] = field(default_factory=list)
    faults: Counter[str] = field(default_factory=Counter)
    exercised: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    analytics_findings: list[Finding] = field(default_factory=list)
    analytics_seconds: float = 0.0


def run_batch(seeds: range, stop_after: int | None = None, on_failure: Callable[[SeedResult], None] | None = None,
              without: frozenset[str] = frozenset(), analytics: bool = False) -> Batch:
    """Run `seeds`, summing what was injected and checked; stop after
    `stop_after` failing seeds (None: run them all). With `analytics`, then
    judge every seed's event log with the pipeline's lifecycle and audit
    (lifecycle.py; local Spark, once for the batch): a room it judges
    wrongly fails its seed (`analytics_findings`)."""
    batch = Batch()
    started = time.perf_counter()
    lines: list[str] = []
    truths: list[dict] = []
    for seed in seeds:
        result = run_seed(seed, without=without)
        batch.seeds += 1
        batch.faults.update(result.world.faults.counts)
        batch.exercised.update(result.exercised)
        if analytics:
            lines += lifecycle.records(result.world)
            truths.append(lifecycle.truth(result.world, result.findings))
        if result.findings:
            batch.failed.append(result)
            if on_failure is not None:
                on_failure(result)
            if stop_after is not None and len(batch.failed) >= stop_after:
                break
    batch.seconds = time.perf_counter() - started
    if analytics and lines:
        analytics_started = time.perf_counter()
        batch.analytics_findings = lifecycle.judge(lines, truths, batch.exercised)
        batch.analytics_seconds = time.perf_counter() - analytics_started
    return batch
