"""`python -m tools.sim.simulation`: run seeds of the deterministic simulation
(`make simulate SEEDS=N`), or replay one (`--seed S`).

Exit status 1 when any seed fails; each failure prints one command that
replays it exactly and the failing room's trace. The summary gives seeds/s
(wall clock) and how often each fault kind was injected and each invariant
check judged something.
"""

from __future__ import annotations

import argparse
import sys

from tools.sim.simulation.checks import INVARIANTS
from tools.sim.simulation.run import SeedResult, replay_command, report_failure, run_batch, run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.sim.simulation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=200, help="how many seeds to run (default 200)")
    parser.add_argument("--first", type=int, default=1, help="the first seed (default 1)")
    parser.add_argument("--seed", type=int, help="replay this one seed, with its trace")
    parser.add_argument("--only-room", action="append", help="with --seed: only this room's messages (shrunk)")
    parser.add_argument("--without", action="append", default=[],
                        help="leave out a fault kind (unreadable-doc, ...): which fault a bug needs")
    parser.add_argument("--no-analytics", action="store_true",
                        help="skip judging the event logs with the pipeline's lifecycle (local Spark)")
    parser.add_argument("--stop-after", type=int, default=None, help="stop after this many failing seeds")
    args = parser.parse_args(argv)
    if args.seed is not None:
        result = run_seed(args.seed, frozenset(args.only_room) if args.only_room else None, frozenset(args.without))
        if not result.findings:
            print(f"seed {args.seed}: ok ({len(result.world.answers)} invocations, "
                  f"{sum(len(p.calls) for p in result.world.platforms.values())} send calls)")
            return 0
        print(report_failure(result))
        return 1

    def on_failure(result: SeedResult) -> None:
        print(report_failure(result), flush=True)

    batch = run_batch(range(args.first, args.first + args.seeds), args.stop_after, on_failure, frozenset(args.without),
                      analytics=not args.no_analytics)
    for f in batch.analytics_findings:
        seed = int(f.room_id.split(".", 1)[0][1:])
        print(f"seed {seed}: [{f.invariant}] {f.room_id}: {f.detail}\n  replay: {replay_command(seed)}")
    failing = sorted({r.seed for r in batch.failed} | {int(f.room_id.split(".", 1)[0][1:])
                                                         for f in batch.analytics_findings})
    print(f"\n{batch.seeds} seeds in {batch.seconds:.1f} s: {batch.seeds / max(batch.seconds, 1e-9):.2f} seeds/s "
          f"(wall clock){f', then the analytics in {batch.analytics_seconds:.0f} s' if batch.analytics_seconds else ''}"
          f"; {len(failing)} failing: {failing}")
    print("injected (times, over all seeds):")
    for kind, n in sorted(batch.faults.items()):
        print(f"  {n:>8}  {kind}")
    print("invariant checks (cases judged, over all seeds):")
    known = sorted(k for k in batch.exercised if k not in INVARIANTS and k != "analytics = ground truth")
    for inv in (*INVARIANTS, "analytics = ground truth", *known):
        print(f"  {batch.exercised.get(inv, 0):>8}  {inv}")
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
