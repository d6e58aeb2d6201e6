"""The Spark session, configured for a small machine when run locally."""

from __future__ import annotations

from pyspark.sql import SparkSession


def build_session(
    master: str | None = "local[*]",
    driver_memory: str = "4g",
    shuffle_partitions: int | None = 8,
    app_name: str = "baton-delivery-analytics",
) -> SparkSession:
    """A SparkSession in UTC with the console progress bar off.

    `master`: `local[*]` (default) or None to take the cluster's (Dataproc
    sets it). `driver_memory` (e.g. `4g`) applies only locally, where the
    driver is the executor and must be set before the JVM starts.
    `shuffle_partitions`: a small number suits 2 cores; None keeps Spark's
    default (and adaptive execution coalesces either way).
    """
    b = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "true")
        # local files without .crc side files: Hadoop's checksum FS cannot open
        # a file whose name has a colon (the Logging sink's `HH:00:00_...json`)
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        .config("spark.hadoop.fs.file.impl.disable.cache", "true")
    )
    if master:
        b = (
            b.master(master)
            .config("spark.driver.memory", driver_memory)
            .config("spark.ui.enabled", "false")
            .config("spark.sql.warehouse.dir", "/tmp/baton-spark-warehouse")
        )
    if shuffle_partitions:
        b = b.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
