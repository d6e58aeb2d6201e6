"""The pipeline at the users' day: 25,000 rooms x 40 messages (about 1
million messages, 5.4 million events) in 24 files, the hourly compaction of
the last one and the day's report (issue 32, item 6).

1. Generate the day (`tools.bench.synth_log`) and split it by line count into 24
   files: 23 near-equal ones, and a last "hour" of exactly `HOUR_EVENTS`
   (250,000) lines, the size of one hourly file of the Logging sink at the
   users' day. The generator's lines are neither in time order nor spread
   over 24 hours (its rooms run for about 36 minutes of one UTC date): the
   split gives the hourly job its input size, not a real hour's mix.
2. Catch-up: compact the first 23 files into a store (`python -m
   pipeline.compact`).
3. The hourly run users have: the last file joins the folder and
   `pipeline.compact` runs again on the whole folder; it leaves out the 23
   files in its manifest and compacts the new one. Goal: at most 15 s.
4. The day's report from the store (`python -m pipeline.job --compacted
   --since DAY --until DAY`). Goal: at most 60 s.
5. DuckDB's per-room reference on the same store, for the ratio and for
   equality with Spark's per-room table.

Every step runs in its own process, timed by wall clock (JVM start-up
included), with the peak resident memory of its process tree; its output
goes to `DIR/day-<step>.log`.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tools.bench.synth_log import EVENTS_PER_MESSAGE, START, generate

#: Lines of the hour the hourly compaction is timed on (the issue's "about 250,000").
HOUR_EVENTS = 250_000
HOURS = 24
DAY = START[:10]


def split_hours(log: Path, folder: Path, total: int, hour_events: int = HOUR_EVENTS) -> Path:
    """Split `log` (`total` lines) into `folder`: `hour-00.jsonl` ..
    `hour-22.jsonl` holding the first `total - hour_events` lines in 23
    near-equal parts, and the last `hour_events` lines, returned as a separate
    file `folder/../last-hour.jsonl` (moved into `folder` when timed).

    Raises:
        ValueError: `total` is not above `hour_events`.
        subprocess.CalledProcessError: `head`, `split` or `tail` failed.
    """
    if total <= hour_events:
        raise ValueError(f"a day of {total:,} events is not more than one hour of {hour_events:,}")
    folder.mkdir(parents=True, exist_ok=True)
    first = total - hour_events
    per_file = -(-first // (HOURS - 1))
    head = subprocess.Popen(["head", "-n", str(first), str(log)], stdout=subprocess.PIPE)
    assert head.stdout is not None
    try:
        split = subprocess.Popen(["split", "-l", str(per_file), "-d", "-a", "2", "--additional-suffix=.jsonl", "-",
                                  str(folder / "hour-")], stdin=head.stdout)
        head.stdout.close()  # split holds the pipe now: head gets SIGPIPE if split dies
        if split.wait() != 0:
            raise subprocess.CalledProcessError(split.returncode, "split")
        if head.wait() != 0:
            raise subprocess.CalledProcessError(head.returncode, "head")
    finally:
        if head.poll() is None:
            head.kill()
            head.wait()
    last = folder.parent / "last-hour.jsonl"
    with last.open("wb") as fh:
        subprocess.run(["tail", "-n", str(hour_events), str(log)], stdout=fh, check=True)
    return last


def bench_day(rooms: int, messages_per_room: int, root: Path, driver_memory: str, keep: bool,
              run_measured: Callable[[list[str], Path], tuple[float, float, int]]) -> dict:
    """Run the day (module docstring) under `root/day`; returns `events`,
    `log_gib`, `<step>_s`, `<step>_gib` and `<step>_rc` (exit code) for
    `catchup`, `hourly`, `report` and `duck_pq`, `hourly_events`, `store_gib`, `report_vs_duck_pq` (ratio)
    and `rooms_agree`, `disagreements`. `run_measured(cmd, log_path)` returns
    (wall s, peak GiB, exit code), as `tools.bench.pipeline.run_measured`."""
    from tools.bench.duckdb_reference import compare_rooms

    base = root / "day"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    log, hours, store, report = base / "day.jsonl", base / "hours", base / "store", base / "report"
    duck = base / "rooms-duck-pq.parquet"
    target = round(rooms * messages_per_room * EVENTS_PER_MESSAGE)
    print(f"[day] generating {rooms:,} rooms x {messages_per_room} messages ...", flush=True)
    g = generate(str(log), target, rooms)
    r: dict = {"size": "day", "events": g["events"], "messages": g["messages"],
               "log_gib": round(log.stat().st_size / 2**30, 2), "hourly_events": HOUR_EVENTS}
    last = split_hours(log, hours, g["events"])
    log.unlink()
    py = sys.executable
    compact = [py, "-m", "pipeline.compact", "--input", str(hours), "--store", str(store),
               "--driver-memory", driver_memory]
    steps = {
        "catchup": compact,
        "hourly": compact,
        "report": [py, "-m", "pipeline.job", "--compacted", str(store), "--output", str(report),
                   "--since", DAY, "--until", DAY, "--driver-memory", driver_memory],
        "duck_pq": [py, "-m", "tools.bench.duckdb_reference", "--input", str(store), "--source", "parquet",
                    "--output", str(duck)],
    }  # fmt: skip
    ok = True
    for step, cmd in steps.items():
        if step == "hourly":
            last.rename(hours / "hour-23.jsonl")  # the new hour's file lands in the sink's folder
        wall, rss, rc = run_measured(cmd, root / f"day-{step}.log")
        print(f"[day] {step}: {wall:.1f} s, peak {rss:.2f} GiB (exit {rc})", flush=True)
        r[f"{step}_s"], r[f"{step}_gib"], r[f"{step}_rc"] = round(wall, 1), round(rss, 2), rc
        ok = ok and rc == 0
    r["store_gib"] = round(sum(f.stat().st_size for f in store.rglob("*") if f.is_file()) / 2**30, 2)
    r["report_vs_duck_pq"] = round(r["report_s"] / r["duck_pq_s"], 2)
    bad = {c: v for c, v in compare_rooms(str(report / "rooms"), str(duck)).items() if v} if ok else {"failed": 1}
    r["rooms_agree"], r["disagreements"] = not bad, bad
    if ok:
        summary = json.loads((report / "summary.json").read_text())
        r["report_lines"], r["report_messages"] = summary["lines"], summary["messages"]
    print(f"[day] {json.dumps(r)}", flush=True)
    if not keep:
        shutil.rmtree(base, ignore_errors=True)
    return r
