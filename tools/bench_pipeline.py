"""Benchmark: the Spark job against DuckDB on synthetic logs of several sizes.

For each size: generate the log (`tools.synth_log`), run the whole Spark job
(`python -m pipeline.job`, every table and the report) and DuckDB's per-room
reference (`tools.duckdb_reference`), each in its own process, timing the
wall clock and sampling the resident memory of the process tree (Python +
JVM) from /proc every 0.2 s. Then check the two per-room tables agree.

    python -m tools.bench_pipeline --sizes 1000000,10000000 --dir out/bench

Generated logs are deleted after each size unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from tools.duckdb_reference import compare_rooms
from tools.synth_log import generate


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out.extend(int(c) for c in fh.read().split())
    except OSError:
        pass
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for ln in fh:
                if ln.startswith("VmRSS:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(pid: int) -> int:
    """Resident memory (KiB) of `pid` and all its descendants, from /proc."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += _rss_kib(p)
        stack.extend(_children(p))
    return total


def run_measured(cmd: list[str], log_path: Path) -> tuple[float, float, int]:
    """Run `cmd`, output to `log_path`. Returns (wall s, peak tree RSS in GiB,
    exit code)."""
    peak = 0
    with log_path.open("w") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, tree_rss_kib(proc.pid))
                done.wait(0.2)

        th = threading.Thread(target=sample, daemon=True)
        th.start()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        done.set()
        th.join()
    return wall, peak / 1024 / 1024, rc


def _label(n: int) -> str:
    return f"{n // 1_000_000}M" if n % 1_000_000 == 0 else f"{n // 1000}k" if n % 1000 == 0 else str(n)


def bench(sizes: list[int], rooms: int, root: Path, keep: bool, driver_memory: str) -> list[dict]:
    """Run the benchmark for each size; returns one result dict per size."""
    root.mkdir(parents=True, exist_ok=True)
    py = sys.executable
    results = []
    for n in sizes:
        tag = _label(n)
        events = root / f"events-{tag}.jsonl"
        report = root / f"report-{tag}"
        duck = root / f"rooms-duckdb-{tag}.parquet"
        print(f"[{tag}] generating ...", flush=True)
        g = generate(str(events), n, rooms)
        size_gib = events.stat().st_size / 2**30
        print(
            f"[{tag}] {g['events']:,} events, {size_gib:.2f} GiB, generated in {g['seconds']:.1f} s; Spark job ...",
            flush=True,
        )
        s_wall, s_rss, s_rc = run_measured(
            [
                py,
                "-m",
                "pipeline.job",
                "--input",
                str(events),
                "--output",
                str(report),
                "--driver-memory",
                driver_memory,
            ],
            root / f"spark-{tag}.log",
        )
        print(f"[{tag}] Spark {s_wall:.1f} s (exit {s_rc}); Spark rooms only ...", flush=True)
        r_wall, r_rss, r_rc = run_measured(
            [py, "-m", "pipeline.job", "--input", str(events), "--output", str(report) + "-rooms", "--rooms-only",
             "--driver-memory", driver_memory],
            root / f"spark-rooms-{tag}.log",
        )  # fmt: skip
        print(f"[{tag}] Spark rooms only {r_wall:.1f} s (exit {r_rc}); DuckDB ...", flush=True)
        d_wall, d_rss, d_rc = run_measured(
            [py, "-m", "tools.duckdb_reference", "--input", str(events), "--output", str(duck)],
            root / f"duckdb-{tag}.log",
        )
        ok = s_rc == 0 and r_rc == 0 and d_rc == 0
        mismatch = compare_rooms(str(report / "rooms"), str(duck)) if ok else {"failed": 1}
        bad = {k: v for k, v in mismatch.items() if v}
        r = {
            "size": tag,
            "events": g["events"],
            "log_gib": round(size_gib, 2),
            "spark_s": round(s_wall, 1),
            "spark_events_per_s": round(g["events"] / s_wall),
            "spark_peak_gib": round(s_rss, 2),
            "spark_rooms_s": round(r_wall, 1),
            "spark_rooms_peak_gib": round(r_rss, 2),
            "duckdb_s": round(d_wall, 1),
            "duckdb_events_per_s": round(g["events"] / d_wall),
            "duckdb_peak_gib": round(d_rss, 2),
            "ratio": round(s_wall / d_wall, 2),
            "rooms_ratio": round(r_wall / d_wall, 2),
            "rooms_agree": not bad,
            "disagreements": bad,
        }
        print(f"[{tag}] {json.dumps(r)}", flush=True)
        results.append(r)
        if not keep:
            events.unlink(missing_ok=True)
            duck.unlink(missing_ok=True)
            shutil.rmtree(report, ignore_errors=True)
            shutil.rmtree(str(report) + "-rooms", ignore_errors=True)
    return results


def print_table(results: list[dict]) -> None:
    cols = [
        ("size", "events", "{:>5}"),
        ("events", "lines", "{:>11,}"),
        ("log_gib", "GiB", "{:>5.2f}"),
        ("spark_s", "Spark s", "{:>8.1f}"),
        ("spark_events_per_s", "Spark ev/s", "{:>10,}"),
        ("spark_peak_gib", "Spark GiB", "{:>9.2f}"),
        ("duckdb_s", "DuckDB s", "{:>8.1f}"),
        ("duckdb_events_per_s", "DuckDB ev/s", "{:>11,}"),
        ("duckdb_peak_gib", "DuckDB GiB", "{:>10.2f}"),
        ("spark_rooms_s", "Spark rooms-only s", "{:>8.1f}"),
        ("ratio", "full/DuckDB", "{:>12.2f}"),
        ("rooms_ratio", "rooms-only/DuckDB", "{:>12.2f}"),
        ("rooms_agree", "rooms agree", "{!s:>11}"),
    ]
    print("| " + " | ".join(h for _, h, _ in cols) + " |")
    print("|" + "|".join("---:" for _ in cols) + "|")
    for r in results:
        print("| " + " | ".join(f.format(r[k]).strip() for k, _, f in cols) + " |")
    if len(results) > 1:
        a, b = results[0], results[-1]
        for key, name in (("spark_s", "Spark full job"), ("spark_rooms_s", "Spark rooms only"), ("duckdb_s", "DuckDB")):
            growth = (b[key] / a[key]) / (b["events"] / a["events"])
            print(f"{name}: time per event at {b['size']} = x{growth:.2f} of {a['size']} (1.00 = linear)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench_pipeline", description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1000000,10000000,30000000", help="comma-separated event counts")
    p.add_argument("--rooms", type=int, default=25_000)
    p.add_argument("--dir", default="out/bench")
    p.add_argument("--driver-memory", default="6g")
    p.add_argument("--keep", action="store_true", help="keep the generated logs and outputs")
    a = p.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s.strip()]
    results = bench(sizes, a.rooms, Path(a.dir), a.keep, a.driver_memory)
    (Path(a.dir) / "results.json").write_text(json.dumps(results, indent=2))
    print()
    print_table(results)
    return 0 if all(r["rooms_agree"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
