"""The Spark session: the one place the job's Spark settings come from.

Locally (`local[*]`, the driver is the only executor) the settings suit a
small machine: `LOCAL` below, overridden by the job's flags, which the
Makefile fills from `SPARK_MASTER`, `SPARK_DRIVER_MEMORY` and
`SHUFFLE_PARTITIONS`. On a cluster (`--master cluster`, Dataproc
Serverless) the job sets no resource, shuffle or adaptive-execution
property and leaves them to the platform, which sizes executors itself and
refuses some shuffle-related properties
(https://cloud.google.com/dataproc-serverless/docs/concepts/properties).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession


@dataclass(frozen=True)
class LocalSettings:
    """Spark settings for a local run.

    - `master`: `local[*]` uses every core.
    - `driver_memory`: the driver's heap (`spark.driver.memory`), which is
      also the executor's locally; it must be set before the JVM starts. The
      parallel collector grows the heap towards this cap in some runs and not
      in others, whatever the input, and the process's memory with it: at 4g
      the whole job on a 10M-event store peaked at 5.26-5.28 GiB in two runs,
      at 3g at 2.56-2.63 GiB, in the same time (33.0 s; per-room 21.4-22.4 s
      against 21.6-22.0 s; raw JSON 61.9 / 67.4 s against 63.9 / 68.0 s;
      measured alternated, `tools.bench.pipeline.run_measured`).
    - `shuffle_partitions`: `spark.sql.shuffle.partitions`, the partitions a
      shuffle starts with (Spark's default, 200, is made for clusters); adaptive
      execution (`spark.sql.adaptive.enabled`, on) coalesces small ones
      (https://spark.apache.org/docs/latest/sql-performance-tuning.html#adaptive-query-execution).
    - `max_partition_bytes`: `spark.sql.files.maxPartitionBytes`, the most
      bytes of a file one read task takes (same page, "Other Configuration Options").
    - `java_options`: `spark.driver.extraJavaOptions`
      (https://spark.apache.org/docs/latest/configuration.html#runtime-environment):
      the throughput collector, about 8% faster than the default G1 for this
      batch job on 2 cores (measured: per-room tables at 10M events); and
      smaller C2 inlining limits (`MaxInlineLevel=9`, the default until JDK 14
      raised it to 15, https://bugs.openjdk.org/browse/JDK-8234863;
      `InlineSmallCode=1000`, against 2500: this JDK's defaults as
      `java -XX:+PrintFlagsFinal` prints them), because the JIT compilers
      take about a quarter of the job's CPU time on 2 cores (C2 about 30 and C1
      about 6 of about 140 CPU-s in a whole run on raw JSON at 10M events, read
      per thread from /proc) and smaller
      compilations leave more of it to the tasks (measured, alternated:
      per-room tables at 10M 21.5-22.7 s against 23.0-23.5 s; the whole job on
      raw JSON 72.1-73.3 s against 72.2-76.2 s).
    - `class_archive`: a JVM class archive (AppCDS, JDK 13+:
      https://docs.oracle.com/en/java/javase/17/vm/class-data-sharing.html)
      of the classes a run of the job loads, which `make spark-cds`
      (`tools.bench.spark_class_archive`) writes into the virtualenv. When it
      exists the driver maps it instead of loading and verifying Spark's
      classes one by one: start-up and the first query take about 3 s less
      (measured: 3.7 s instead of 6.6 s to start a session and run a first
      query). A JVM or classpath it does not match makes the JVM ignore it,
      silently (its `cds` log is off), so a stale archive only loses the gain.
    """

    master: str = "local[*]"
    driver_memory: str = "3g"
    shuffle_partitions: int = 4 * max(1, os.cpu_count() or 1)
    max_partition_bytes: str = "128m"
    java_options: str = "-XX:+UseParallelGC -XX:MaxInlineLevel=9 -XX:InlineSmallCode=1000"
    class_archive: str = str(Path(sys.prefix) / "spark-classes.jsa")


LOCAL = LocalSettings()


#: The JVM's class-archive log off: a missing or mismatched archive is not an error here.
_CDS_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def local_java_options(archive_at_exit: str | None = None) -> str:
    """The local driver's JVM options: `LOCAL.java_options`, plus the class
    archive when it exists; with `archive_at_exit` (a path), no archive is
    read and the JVM writes one there when it exits (`-XX:ArchiveClassesAtExit`)."""
    opts = LOCAL.java_options
    if archive_at_exit:
        return f"{opts} -XX:ArchiveClassesAtExit={archive_at_exit} {_CDS_QUIET}"
    if os.path.exists(LOCAL.class_archive):
        return f"{opts} -XX:SharedArchiveFile={LOCAL.class_archive} {_CDS_QUIET}"
    return opts


def build_session(
    master: str | None = LOCAL.master,
    driver_memory: str = LOCAL.driver_memory,
    shuffle_partitions: int | None = LOCAL.shuffle_partitions,
    app_name: str = "baton-delivery-analytics",
    archive_at_exit: str | None = None,
) -> SparkSession:
    """A SparkSession in UTC with the console progress bar off.

    `master`: `local[*]` (default) or None to take the cluster's (Dataproc
    sets it): then only the time zone and the local-file settings are set,
    and `driver_memory` and `shuffle_partitions` are ignored. Locally,
    `driver_memory` (e.g. `3g`) sizes the heap and `shuffle_partitions`
    (None: Spark's default) the shuffles, with adaptive execution on.
    `archive_at_exit`: see `local_java_options` (only `make spark-cds` sets it).
    """
    b = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        # timestamps as Parquet's standard INT64 microseconds, not Spark's default
        # INT96, which is converted value by value (spark.sql.parquet.outputTimestampType,
        # https://spark.apache.org/docs/latest/sql-data-sources-parquet.html#configuration):
        # compacting 10M events took about 5 CPU-s less, into 120 MB instead of 147 MB.
        # Files written before keep INT96 and read alongside (one Spark type).
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .config("spark.ui.showConsoleProgress", "false")
        # local files without .crc side files: Hadoop's checksum FS cannot open
        # a file whose name has a colon (the Logging sink's `HH:00:00_...json`)
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        .config("spark.hadoop.fs.file.impl.disable.cache", "true")
    )
    if master:
        b = (
            b.master(master)
            .config("spark.driver.memory", driver_memory)
            .config("spark.driver.extraJavaOptions", local_java_options(archive_at_exit))
            .config("spark.ui.enabled", "false")
            .config("spark.sql.warehouse.dir", "/tmp/baton-spark-warehouse")
            .config("spark.sql.adaptive.enabled", "true")
            .config("spark.sql.adaptive.coalescePartitions.enabled", "true")
            .config("spark.sql.files.maxPartitionBytes", LOCAL.max_partition_bytes)
        )
        if shuffle_partitions:
            b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def session_for(master_arg: str, driver_memory: str, shuffle_partitions: int | None = LOCAL.shuffle_partitions):
    """`build_session` from the command line's `--master` (`cluster` or ''
    means the cluster's own), `--driver-memory` and `--shuffle-partitions`
    (0 or None: Spark's default)."""
    master = None if master_arg in ("", "cluster") else master_arg
    return build_session(master, driver_memory, shuffle_partitions or None)
