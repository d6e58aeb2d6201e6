"""The job's "faults and operations" stage: the `pipeline.operations` tables
written under the output directory, and the small results the report and
summary.json show (`OperationsResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pipeline import operations as ops
from pipeline.load import join_path, write_table

#: Rows of a listing the report shows (the tables hold every row).
REPORT_ROWS = 50


@dataclass
class OperationsResult:
    """What the report shows of the faults and operations (rows as dicts;
    `*_ms` in ms, `*_s` in s).

    - `faults`: `ops.faults` rows (first 200); `waits`: `ops.wait_summary` rows;
    - `trail`: the first `REPORT_ROWS` operator actions, `trail_n` their count;
    - `room_faults`: the `REPORT_ROWS` rooms with most faults;
    - `gaps`: the first `REPORT_ROWS` sequence gaps, `gaps_n` their count;
    - `sends`: `ops.sends_per_message` rows;
    - `rescues`: `ops.rescue_summary` rows (watchdog rescues by phase, how
      overdue the rooms were);
    - `prepared_n`, `prepare_p50_ms`, `prepare_p99_ms`: preparations that
      finished and how long they took; `prepare_share_of_hol`: the share
      (0..1) of all head-of-line wait spent waiting for a preparation.
    """

    faults: list[dict[str, Any]] = field(default_factory=list)
    waits: list[dict[str, Any]] = field(default_factory=list)
    trail: list[dict[str, Any]] = field(default_factory=list)
    trail_n: int = 0
    room_faults: list[dict[str, Any]] = field(default_factory=list)
    gaps: list[dict[str, Any]] = field(default_factory=list)
    gaps_n: int = 0
    sends: list[dict[str, Any]] = field(default_factory=list)
    rescues: list[dict[str, Any]] = field(default_factory=list)
    prepared_n: int = 0
    prepare_p50_ms: float | None = None
    prepare_p99_ms: float | None = None
    prepare_share_of_hol: float | None = None

    def summary(self) -> dict[str, Any]:
        """The figures summary.json keeps (`operations`)."""
        return {
            "operator_actions": self.trail_n,
            "sequence_gaps": self.gaps_n,
            "waits": {f"{r['kind']}/{r['provider']}": {k: r[k] for k in ("episodes", "open", "total_s", "max_ms")}
                      for r in self.waits},
            "faults": {f"{r['event']}: {r['cause']}": r["events"] for r in self.faults},
            "rescues": {r["phase"]: {k: r[k] for k in ("rescues", "overdue_p50_ms", "overdue_max_ms")}
                        for r in self.rescues},
            "prepared": self.prepared_n,
            "prepare_p50_ms": self.prepare_p50_ms,
            "prepare_share_of_hol": self.prepare_share_of_hol,
        }  # fmt: skip


def _rows(df: DataFrame, n: int | None = None) -> list[dict[str, Any]]:
    return [r.asDict() for r in (df.limit(n) if n else df).collect()]


def run_operations(events: DataFrame, messages: DataFrame, out: str) -> OperationsResult:
    """Write `faults/`, `waits/`, `operator_actions/`, `room_faults/`,
    `sequence_gaps/`, `preparations/` and `rescues/` under `out` from the valid `events`,
    and read back what the report shows. `messages`: the written
    `message_lifecycle` table (for duplicates per message and the
    head-of-line wait)."""
    spark = events.sparkSession
    tables = {
        "faults": ops.faults(events),
        "waits": ops.waits(events),
        "operator_actions": ops.operator_actions(events),
        "room_faults": ops.room_faults(events),
        "sequence_gaps": ops.sequence_gaps(events),
        "preparations": ops.preparation_times(events),
        "rescues": ops.rescues(events),
    }
    read: dict[str, DataFrame] = {}
    for name, df in tables.items():
        write_table(df, join_path(out, name), files=1)
        read[name] = spark.read.parquet(join_path(out, name))
    waits = read["waits"]
    prep = (
        read["preparations"]
        .agg(F.count("took_ms").alias("n"), F.percentile_approx("took_ms", [0.5, 0.99], 10000).alias("p"))
        .first()
    )
    prep_wait_ms = waits.where(F.col("kind") == "preparing").agg(F.sum("wait_ms")).first()[0]
    hol_ms = messages.agg(F.sum("head_of_line_wait_ms")).first()[0]
    p = prep["p"] or [None, None]
    return OperationsResult(
        faults=_rows(read["faults"].orderBy("event", F.desc("events"), "cause"), 200),
        waits=_rows(ops.wait_summary(waits)),
        trail=_rows(read["operator_actions"].orderBy("ts", "room_id", "seq"), REPORT_ROWS),
        trail_n=read["operator_actions"].count(),
        room_faults=_rows(read["room_faults"].orderBy(F.desc("total"), "room_id"), REPORT_ROWS),
        gaps=_rows(read["sequence_gaps"].orderBy("room_id", "ts"), REPORT_ROWS),
        gaps_n=read["sequence_gaps"].count(),
        sends=_rows(ops.sends_per_message(messages)),
        rescues=_rows(ops.rescue_summary(read["rescues"])),
        prepared_n=int(prep["n"] or 0),
        prepare_p50_ms=p[0],
        prepare_p99_ms=p[1],
        prepare_share_of_hol=(prep_wait_ms / hol_ms) if prep_wait_ms is not None and hol_ms else None,
    )
