"""Write the JVM class archive the local Spark job starts faster with (`make spark-cds`).

    python -m tools.bench.spark_class_archive            # into pipeline.session.LOCAL.class_archive
    python -m tools.bench.spark_class_archive --out PATH

Runs the whole job (compaction, every table, the report) once on a small
synthetic log (`tools.bench.synth_log`) in a JVM started with
`-XX:ArchiveClassesAtExit`, so the archive holds the classes a real run
loads; then waits for that JVM to exit, which is when it writes the archive,
and moves it into place. About 30 s. The archive belongs to this virtualenv's
pyspark and this JDK (see `pipeline.session.LocalSettings.class_archive`):
a new virtualenv records a new one; delete the file to record it again.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

#: The log the archive is recorded on: big enough to run every stage, small enough to take seconds.
EVENTS = 20_000
ROOMS = 200


def build(out: str) -> float:
    """Record the archive at `out` (replacing it); returns its size in MiB.
    Raises RuntimeError if the JVM wrote no archive."""
    from pyspark import SparkContext

    from pipeline import job
    from pipeline.session import build_session
    from tools.bench.synth_log import generate

    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="baton-cds-") as tmp:
        events = os.path.join(tmp, "events.jsonl")
        generate(events, EVENTS, ROOMS)
        spark = build_session(archive_at_exit=str(partial))
        # the job finds this session (getOrCreate) and runs in this JVM
        job.run(job.parse_args(["--input", events, "--output", os.path.join(tmp, "report")]))
        jvm = SparkContext._gateway.proc  # the JVM spark-submit exec'd into
        spark.stop()
        SparkContext._gateway.shutdown()
        jvm.stdin.close()  # pyspark's JVM exits when its stdin closes
        jvm.wait(timeout=300)
    if not partial.exists():
        raise RuntimeError(f"the JVM wrote no class archive at {partial}")
    partial.replace(target)
    return target.stat().st_size / 2**20


def main(argv: list[str] | None = None) -> int:
    from pipeline.session import LOCAL

    p = argparse.ArgumentParser(prog="python -m tools.bench.spark_class_archive", description=__doc__.split("\n")[0])
    p.add_argument("--out", default=LOCAL.class_archive, help="where to write the archive")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    mib = build(a.out)
    print(f"class archive: {a.out} ({mib:.0f} MiB) in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
