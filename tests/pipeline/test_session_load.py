"""The local JVM options (class archive) and how tables are written (one file, dictionary encoding)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import duckdb
import pytest

from pipeline import session
from pipeline.load import write_table


@pytest.fixture
def archive(monkeypatch, tmp_path):
    path = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(session, "LOCAL", dataclasses.replace(session.LOCAL, class_archive=str(path)))
    return path


def test_no_archive_no_cds_options(archive):
    assert session.local_java_options() == session.LOCAL.java_options


def test_an_existing_archive_is_mapped_with_its_log_off(archive):
    archive.write_bytes(b"not checked here: the JVM ignores an archive it does not match")
    opts = session.local_java_options().split()
    assert f"-XX:SharedArchiveFile={archive}" in opts
    assert "-Xlog:cds=off" in opts and session.LOCAL.java_options.split()[0] in opts


def test_recording_an_archive_does_not_read_the_old_one(archive, tmp_path):
    archive.write_bytes(b"old")
    opts = session.local_java_options(archive_at_exit=str(tmp_path / "new.jsa")).split()
    assert f"-XX:ArchiveClassesAtExit={tmp_path / 'new.jsa'}" in opts
    assert not any(o.startswith("-XX:SharedArchiveFile") for o in opts)


def _encodings(path: Path, column: str) -> set[str]:
    files = sorted(str(p) for p in path.glob("*.parquet"))
    rows = duckdb.sql(f"SELECT encodings FROM parquet_metadata({files!r}) WHERE path_in_schema = '{column}'").fetchall()
    return {e.strip() for (enc,) in rows for e in enc.split(",")}


def test_write_table_one_file_and_dictionary_off(spark, tmp_path):
    df = spark.range(0, 5000, numPartitions=3).selectExpr("concat('room-', id % 7) AS room_id", "id")
    write_table(df, str(tmp_path / "one"), files=1)
    write_table(df, str(tmp_path / "plain"), dictionary=False)
    assert len(list((tmp_path / "one").glob("*.parquet"))) == 1
    assert any("DICTIONARY" in e for e in _encodings(tmp_path / "one", "room_id"))
    assert not any("DICTIONARY" in e for e in _encodings(tmp_path / "plain", "room_id"))
    assert spark.read.parquet(str(tmp_path / "plain")).count() == 5000
