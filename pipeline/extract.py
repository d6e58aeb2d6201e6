"""Extract: read delivery log lines from files, local or `gs://`.

Reading is kept apart from parsing (`pipeline.transforms.parse_lines`) so the
parse is a pure transform that tests feed with hand-written lines.

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
