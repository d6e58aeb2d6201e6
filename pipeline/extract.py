"""Extract: read delivery log files, local or `gs://`.

`read_events` reads them with Spark's JSON data source and a declared schema
of only the fields the job uses (`pipeline.schema.LINE_SCHEMA`); the checks
and typing are a pure transform (`pipeline.transforms.parse_json_rows`).
`read_lines` gives the raw text lines (for `pipeline.transforms.parse_lines`).

The Logging sink names its files `HH:00:00_HH:59:59_S0.json`. Hadoop's glob
expansion cannot build paths from names with a colon, so local globs are
expanded here in Python; on `gs://`, pass directories (read recursively)
rather than globs.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipeline.schema import CORRUPT_COLUMN, LINE_SCHEMA

_GLOB_CHARS = set("*?[")


def resolve_paths(paths: str | Sequence[str]) -> list[str]:
    """Expand local globs to the files they match; leave directories, files
    and URIs (`gs://...`) as they are. Raises FileNotFoundError when a local
    path or glob matches nothing."""
    if isinstance(paths, str):
        paths = [paths]
    out: list[str] = []
    for p in paths:
        if "://" in p and not p.startswith("file://"):
            out.append(p)
            continue
        local = p.removeprefix("file://")
        if _GLOB_CHARS & set(local):
            matches = sorted(m for m in glob.glob(local, recursive=True) if os.path.isfile(m))
            if not matches:
                raise FileNotFoundError(f"no file matches {p}")
            out.extend(os.path.abspath(m) for m in matches)
        elif os.path.exists(local):
            out.append(os.path.abspath(local))
        else:
            raise FileNotFoundError(f"no such file or directory: {p}")
    return out


def read_lines(spark: SparkSession, paths: str | Sequence[str]) -> DataFrame:
    """Every line of the files at `paths` (a file, a directory, a local glob,
    a `gs://` URI, or a list of them), in either format: plain event lines or
    Cloud Logging LogEntry lines. Directories are read recursively; `.gz`
    files are decompressed.

    Output: `value` (string, the line without its newline) and `source`
    (string, the file's URI). Lazy: nothing is read until an action. Raises
    FileNotFoundError for a local path that matches nothing (see
    `resolve_paths`), pyspark's AnalysisException for a missing URI.
    """
    return (
        spark.read.option("recursiveFileLookup", "true")
        .text(resolve_paths(paths))
        .select("value", F.col("_metadata.file_path").alias("source"))
    )


def read_events(spark: SparkSession, paths: str | Sequence[str]) -> DataFrame:
    """The lines of the files at `paths` (as in `read_lines`), read by Spark's
    JSON data source with the declared `LINE_SCHEMA`: one row per non-blank
    line with the `LINE_SCHEMA` columns (the event's fields at the top level
    for a plain line, under `jsonPayload` for a LogEntry), the raw text in
    `_corrupt_record` when the line is not JSON or has a field of the wrong
    type (PERMISSIVE mode), and `source` (the file's URI).

    The reader tokenises each line once and builds values only for the
    declared fields; keys not in the schema are skipped. Options used
    (`schema`, `mode`, `columnNameOfCorruptRecord`, `recursiveFileLookup`):
    https://spark.apache.org/docs/latest/sql-data-sources-json.html and
    https://spark.apache.org/docs/latest/sql-data-sources-generic-options.html.
    Lazy; raises like `read_lines` for a missing path.
    """
    return (
        spark.read.schema(LINE_SCHEMA)
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT_COLUMN)
        .option("recursiveFileLookup", "true")
        .json(resolve_paths(paths))
        .select("*", F.col("_metadata.file_path").alias("source"))
    )


def list_files(spark: SparkSession, paths: str | Sequence[str]) -> list[tuple[str, int, int]]:
    """Every file under `paths` (files, directories walked recursively, local
    globs, `gs://` URIs), as (path, size in bytes, modification time in ms
    since the epoch), sorted by path. Names starting with `.` or `_` (Hadoop's
    hidden and marker files) are left out. Uses Hadoop's FileSystem, so
    `gs://` works wherever the GCS connector is installed (Dataproc).
    Raises FileNotFoundError for a local path that matches nothing."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    out: dict[str, tuple[str, int, int]] = {}
    for p in resolve_paths(paths):
        hpath = jvm.org.apache.hadoop.fs.Path(p)
        fs = hpath.getFileSystem(conf)
        it = fs.listFiles(hpath, True)
        while it.hasNext():
            st = it.next()
            name = st.getPath().getName()
            if name.startswith((".", "_")):
                continue
            path = st.getPath().toString()
            if p.startswith("/") and path.startswith("file:"):
                path = jvm.org.apache.hadoop.fs.Path(path).toUri().getPath()  # the plain local path back
            out[path] = (path, int(st.getLen()), int(st.getModificationTime()))
    return [out[k] for k in sorted(out)]
