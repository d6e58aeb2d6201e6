"""The delivery-analytics job: extract -> transform -> load, then the report.

    python -m pipeline.job --input out/demo/events.jsonl --output out/report
    python -m pipeline.job --compacted out/compacted --since 2026-11-01 --output out/report
    python -m pipeline.job --input gs://LOGS/run.googleapis.com/stdout/ --compact-to gs://REPORTS/compacted \
        --output gs://REPORTS/run-1 --master cluster

With `--input`, the JSON is first compacted to Parquet (`pipeline.compact`:
into `--compact-to`, incrementally, or into a fresh `OUTPUT/events/`); the
report always reads Parquet. Writes under `--output`: Parquet tables
`messages/`, `rooms/`, `audit/`, `hourly/`, `providers/`,
`timeout_tradeoff/`, `rejects/`, and the faults and operations (`faults/`,
`waits/`, `operator_actions/`, `room_faults/`, `sequence_gaps/`,
`preparations/`, `rescues/`); `summary.json`;
`report.html` (self-contained) and `timeout_tradeoff.png`. Logs each stage
with row counts to stderr and prints a summary table at the end.
Exit status: 0 on success (bad lines included), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime
from typing import Any

from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F

from pipeline import advice as adv
from pipeline import transforms as tf
from pipeline.compact import compact, read_store
from pipeline.load import delete_path, join_path, write_bytes, write_table
from pipeline.operations_stage import OperationsResult, run_operations
from pipeline.session import LOCAL, session_for

log = logging.getLogger("pipeline")

BUCKETS_S = (1, 5, 10, 30, 60, 300, 600, 900, 1800, 3600, 3 * 3600, 6 * 3600, 86400)
#: The main figures summary.json gives per provider (`totals_by_provider` columns).
PROVIDER_FIGURES = (
    "messages", "acked_share", "timed_out", "timed_out_share", "late_acks",
    "send_to_ack_p50_ms", "send_to_ack_p90_ms", "send_to_ack_p99_ms",
)  # fmt: skip
CHECKS = ("sends_in_order", "single_in_flight", "none_lost", "no_gaps", "one_end_each")
#: The probabilities at which the report draws the ack-latency CDF.
CDF_PROBS = tuple(i / 200 for i in range(1, 200)) + (0.995, 0.999)


def _day(text: str) -> date:
    try:
        return date.fromisoformat(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a date (YYYY-MM-DD): {text}") from e


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pipeline.job", description=__doc__.split("\n")[0])
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--input", nargs="+", help="JSON event log file(s), directory or glob; gs:// on Dataproc")
    src.add_argument("--compacted", help="read a compacted store (`make compact`) instead of JSON")
    p.add_argument(
        "--compact-to",
        help="with --input: compact new files into this store (incrementally) and report from it; "
        "default: a fresh store at OUTPUT/events",
    )
    p.add_argument("--since", type=_day, help="first UTC day to report on (YYYY-MM-DD); default: all")
    p.add_argument("--until", type=_day, help="last UTC day to report on (YYYY-MM-DD, inclusive); default: all")
    p.add_argument("--output", required=True, help="output directory (local or gs://)")
    p.add_argument("--target-share", type=float, default=0.99, help="share of arriving acks X must let in (0..1)")
    p.add_argument("--confidence", type=float, default=0.95, help="confidence of the interval on X (0..1)")
    p.add_argument("--master", default=LOCAL.master, help="Spark master, or 'cluster' to take the cluster's (Dataproc)")
    p.add_argument("--driver-memory", default=LOCAL.driver_memory, help="local driver (= executor) memory")
    p.add_argument(
        "--shuffle-partitions", type=int, default=LOCAL.shuffle_partitions, help="locally; 0 keeps Spark's default"
    )
    p.add_argument("--no-report", action="store_true", help="tables only: skip the HTML/PNG report")
    p.add_argument(
        "--rooms-only",
        action="store_true",
        help="only rejects, messages, audit and rooms (no totals, advice or report): the benchmark's like-for-like run",
    )
    args = p.parse_args(argv)
    if not 0 < args.target_share < 1 or not 0 < args.confidence < 1:
        p.error("--target-share and --confidence must be between 0 and 1")
    if args.compact_to and not args.input:
        p.error("--compact-to needs --input")
    if args.since and args.until and args.since > args.until:
        p.error("--since is after --until")
    return args


#: Seconds each stage of the last `run` took, by stage name (summary.json's `stage_s`).
#: Stages that run side by side overlap, so these may add up to more than the run.
STAGE_SECONDS: dict[str, float] = {}


class Stage:
    """Logs a stage's start, its end and its duration (s), and records it in `STAGE_SECONDS`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> Stage:
        self.t0 = time.perf_counter()
        log.info("stage %s ...", self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        seconds = time.perf_counter() - self.t0
        STAGE_SECONDS[self.name] = round(seconds, 2)
        log.info("stage %s done in %.1f s", self.name, seconds)


def _rows(df: DataFrame) -> list[dict[str, Any]]:
    return [r.asDict() for r in df.collect()]


def pick_bucket_s(span_s: float, max_buckets: int = 60) -> int:
    """The smallest standard bucket width (s) giving at most `max_buckets` buckets over `span_s` seconds."""
    for b in BUCKETS_S:
        if span_s / b <= max_buckets:
            return b
    return BUCKETS_S[-1]


def _rejects_stage(lines_df: DataFrame, out: str) -> tuple[dict[str | None, int], DataFrame]:
    """Lines by reject reason (None: valid events), and the rejects written to `out/rejects` and read back."""
    with Stage("rejects"):
        spark = lines_df.sparkSession
        path = join_path(out, "rejects")
        # neither pass reads the events' columns: the rejects' filter skips the
        # Parquet row groups whose reject_reason is all null (their statistics),
        # and the count reads no column at all
        write_table(tf.rejected_lines(lines_df), path, files=1)
        rejects = spark.read.parquet(path)
        by_reason = {r["reject_reason"]: r["count"] for r in rejects.groupBy("reject_reason").count().collect()}
        by_reason[None] = lines_df.count() - sum(by_reason.values())
        return by_reason, rejects


def _rooms_stage(messages: DataFrame, out: str) -> tuple[DataFrame, Row]:
    """`rooms` and `audit` written to `out`; the rooms read back, and their totals (one Row)."""
    with Stage("audit+rooms"):
        spark = messages.sparkSession
        write_table(tf.room_summary(messages), join_path(out, "rooms"), files=1)
        rooms = spark.read.parquet(join_path(out, "rooms"))
        write_table(rooms.select("room_id", *tf.AUDIT_COLUMNS), join_path(out, "audit"), files=1)
        agg = rooms.agg(
            F.count("*").alias("rooms"),
            *[F.count(F.when(~F.col(c), 1)).alias(c) for c in CHECKS],
            F.sum("duplicates_sent").alias("duplicates_sent"),
            F.sum("ordering_violations").alias("ordering_violations"),
            F.sum("in_flight_violations").alias("in_flight_violations"),
            F.sum("gaps").alias("gaps"),
            F.max("longest_head_of_line_wait_ms").alias("longest_head_of_line_wait_ms"),
            F.percentile_approx("messages_per_s", 0.5, 10000).alias("room_messages_per_s_p50"),
            F.min("first_sent_at").alias("first"),
            F.max("last_ended_at").alias("last"),
            F.sum("messages").alias("messages"),
            F.sum("late_acks").alias("late_acks"),
            *[F.sum(o).alias(f"_{o}") for o in tf.OUTCOMES],
        ).first()
        return rooms, agg


def _totals_stage(messages: DataFrame, out: str) -> tuple[DataFrame, DataFrame]:
    """`hourly` and `providers` written to `out`, and read back in order."""
    with Stage("totals"):
        spark = messages.sparkSession
        # one aggregate for both tables; its result (a row per hour and per provider) is cached
        both = tf.totals_by_time_and_provider(messages, 3600).cache()
        by_hour, by_provider = tf.split_totals(both)
        write_table(by_hour, join_path(out, "hourly"), files=1)
        write_table(by_provider, join_path(out, "providers"), files=1)
        both.unpersist()
        hourly = spark.read.parquet(join_path(out, "hourly")).orderBy("bucket_start")
        providers = spark.read.parquet(join_path(out, "providers")).orderBy("provider")
        return hourly, providers


def _advice_stage(messages: DataFrame, out: str, args: argparse.Namespace) -> tuple[adv.TimeoutAdvice, DataFrame]:
    """The timeout advice, and `timeout_tradeoff` written to `out` and read back in order."""
    with Stage("timeout advice"):
        spark = messages.sparkSession
        # the report's CDF quantiles come from the advice's own pass over the latencies
        cdf_probs = () if args.no_report else CDF_PROBS
        advice = adv.recommend_timeout(messages, args.target_share, args.confidence, cdf_probs)
        path = join_path(out, "timeout_tradeoff")
        write_table(tf.timeout_tradeoff(messages, adv.candidate_timeouts(advice)), path, files=1)
        return advice, spark.read.parquet(path).orderBy("timeout_ms")


def _operations_stage(events: DataFrame, messages: DataFrame, out: str) -> OperationsResult:
    """The faults and operations tables written to `out`, and what the report shows of them."""
    with Stage("faults and operations"):
        return run_operations(events, messages, out)


def _import_report() -> None:
    """Import `pipeline.report` (and matplotlib); an ImportError shows again where the report is built."""
    try:
        import pipeline.report  # noqa: F401
    except ImportError:
        pass


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the job; returns the summary figures (also written to summary.json).

    Nothing large is cached: the lines are parsed once into a compacted
    Parquet store (or read from one), the per-message table is computed once
    and written, and every later stage reads the written Parquet back; only
    the totals' aggregate (a row per hour and per provider) is cached for the
    two tables it fills.

    Stages that depend only on written tables run side by side, each in a
    thread of its own submitting Spark jobs to the one session: the rejects
    beside the messages, then the rooms, the totals and the advice together.
    A failure in any of them is raised here.
    """
    t_start = time.perf_counter()
    STAGE_SECONDS.clear()
    if not (args.no_report or args.rooms_only):
        # matplotlib takes about 0.4 s to import; done while the JVM starts, it costs no wall time
        threading.Thread(target=_import_report, name="import-report", daemon=True).start()
    spark = session_for(args.master, args.driver_memory, args.shuffle_partitions)
    out = args.output

    store = args.compacted
    if args.input:
        with Stage("compact"):
            store = args.compact_to or join_path(out, "events")
            if not args.compact_to:
                delete_path(spark, store)  # a fresh store: the input files may have grown since
            compact(spark, args.input, store)

    lines_df = read_store(spark, store, args.since, args.until)
    # side by side (see above): their tasks fill the cores another stage leaves
    # idle while its driver plans, compiles or collects
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="stage") as pool:
        rejects_done = pool.submit(_rejects_stage, lines_df, out)
        with Stage("messages"):
            write_table(tf.message_lifecycle(tf.valid_events(lines_df)), join_path(out, "messages"), dictionary=False)
            messages = spark.read.parquet(join_path(out, "messages"))
        rooms_done = pool.submit(_rooms_stage, messages, out)
        if not args.rooms_only:
            totals_done = pool.submit(_totals_stage, messages, out)
            advice_done = pool.submit(_advice_stage, messages, out, args)
            # one line per event id (a line the room's outbox logged twice counts once)
            operations_done = pool.submit(_operations_stage, tf.distinct_events(tf.valid_events(lines_df)), messages,
                                          out)
        by_reason, rejects = rejects_done.result()
        rooms, agg = rooms_done.result()
        if not args.rooms_only:
            hourly, providers = totals_done.result()
            advice, tradeoff = advice_done.result()
            operations = operations_done.result()

    lines = sum(by_reason.values())
    events_n = by_reason.pop(None, 0)
    rejects_n = sum(by_reason.values())
    log.info("lines=%d valid events=%d rejected=%d %s", lines, events_n, rejects_n, dict(sorted(by_reason.items())))
    # each room counts its messages by outcome: no second pass over the messages
    messages_n = int(agg["messages"] or 0)
    outcome_counts = {o: int(agg[f"_{o}"] or 0) for o in tf.OUTCOMES}
    log.info("messages=%d %s", messages_n, outcome_counts)
    audit_checks = {c: int(agg[c]) for c in CHECKS}
    log.info("rooms=%d failing checks %s", agg["rooms"], audit_checks)

    if args.rooms_only:
        summary = {"lines": lines, "rejected_lines": rejects_n, "rooms": int(agg["rooms"]), "messages": messages_n}
        summary["elapsed_s"] = round(time.perf_counter() - t_start, 2)
        summary["stage_s"] = dict(STAGE_SECONDS)
        write_bytes(spark, join_path(out, "summary.json"), json.dumps(summary, indent=2).encode())
        return summary

    log.info("advice %s", advice.as_dict())
    acked = outcome_counts.get("acked", 0)
    summary: dict[str, Any] = {
        "lines": lines,
        "valid_events": events_n,
        "rejected_lines": rejects_n,
        "rooms": int(agg["rooms"]),
        "messages": messages_n,
        **{o: outcome_counts.get(o, 0) for o in tf.OUTCOMES},
        "acked_share": acked / messages_n if messages_n else None,
        # each room counts its late acks (timed out, then acked): no pass over the messages
        "late_acks": int(agg["late_acks"] or 0),
        "duplicates_sent": int(agg["duplicates_sent"] or 0),
        "ordering_violations": int(agg["ordering_violations"] or 0),
        "in_flight_violations": int(agg["in_flight_violations"] or 0),
        "gaps": int(agg["gaps"] or 0),
        "rooms_failing_audit": {k: v for k, v in audit_checks.items()},
        "longest_head_of_line_wait_ms": agg["longest_head_of_line_wait_ms"],
        "room_messages_per_s_p50": agg["room_messages_per_s_p50"],
        "advice": advice.as_dict(),
        "operations": operations.summary(),
    }
    summary["providers"] = {
        r["provider"]: {k: r[k] for k in PROVIDER_FIGURES}
        for r in providers.select("provider", *PROVIDER_FIGURES).collect()
    }

    if not args.no_report:
        with Stage("report"):
            try:
                from pipeline.report import build_report
            except ImportError as e:  # matplotlib missing on the cluster: the tables are written all the same
                log.warning("no HTML report: %s", e)
            else:
                data = _report_data(
                    args,
                    summary,
                    audit_checks,
                    advice,
                    messages,
                    rooms,
                    tradeoff,
                    hourly,
                    providers,
                    rejects,
                    by_reason,
                    agg,
                    operations,
                )
                html_text, png = build_report(data)
                write_bytes(spark, join_path(out, "report.html"), html_text.encode())
                write_bytes(spark, join_path(out, "timeout_tradeoff.png"), png)

    summary["elapsed_s"] = round(time.perf_counter() - t_start, 2)
    summary["stage_s"] = dict(STAGE_SECONDS)
    write_bytes(spark, join_path(out, "summary.json"), json.dumps(summary, indent=2, default=str).encode())
    return summary


def _report_data(
    args,
    summary,
    audit_checks,
    advice,
    messages,
    rooms,
    tradeoff,
    hourly,
    providers,
    rejects,
    by_reason,
    agg,
    operations,
):
    from pipeline.report import ReportData

    latencies = advice.latencies
    cdf = [(x, p) for x, p in zip(latencies.overall, latencies.probs, strict=True) if x is not None]
    provider_cdf = {
        name: [(x, p) for x, p in zip(xs, latencies.probs, strict=True) if x is not None]
        for name, xs in latencies.by_provider.items()
    }
    span = (agg["last"] - agg["first"]).total_seconds() if agg["first"] and agg["last"] else 3600
    bucket = pick_bucket_s(span)
    top = (
        rooms.where(F.col("longest_head_of_line_wait_ms").isNotNull())
        .orderBy(F.desc("longest_head_of_line_wait_ms"))
        .limit(20)
        .select("room_id", "longest_head_of_line_wait_ms")
    )
    failing = (
        rooms.where(~F.col("audit_ok"))
        .orderBy(F.desc("ordering_violations"), F.desc("in_flight_violations"), F.desc("lost"), "room_id")
        .select(
            "room_id",
            "messages",
            "ordering_violations",
            "max_in_flight",
            "in_flight_violations",
            "lost",
            "gaps",
            "multiple_ends",
        )
        .limit(20)
    )
    queries = {
        "timeline": tf.totals_by_time(messages, bucket).select("bucket_start", "messages", *tf.OUTCOMES),
        "rates": rooms.where(F.col("messages_per_s").isNotNull()).select("messages_per_s"),
        "top": top,
        "failing": failing,
        "tradeoff": tradeoff,
        "providers": providers,
        "hourly": hourly,
    }
    if by_reason:
        queries["samples"] = rejects.select("reject_reason", F.substring("line", 1, 160).alias("line"), "source").limit(
            10
        )
    # the queries are small: each one's time is mostly the driver's planning and
    # scheduling, which overlap when they run side by side
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="report") as pool:
        got = dict(zip(queries, pool.map(_rows, queries.values()), strict=True))
    flat = {k: v for k, v in summary.items() if not isinstance(v, dict)}
    return ReportData(
        summary=flat,
        audit_checks=audit_checks,
        advice=advice.as_dict(),
        cdf=cdf,
        provider_cdf=provider_cdf,
        timeline=got["timeline"],
        timeline_bucket_s=bucket,
        room_rates=[r["messages_per_s"] for r in got["rates"]],
        top_hol=[(r["room_id"], r["longest_head_of_line_wait_ms"]) for r in got["top"]],
        tradeoff=got["tradeoff"],
        providers=got["providers"],
        hourly=got["hourly"],
        failing_rooms=got["failing"],
        reject_reasons=dict(sorted(by_reason.items())),
        reject_samples=got.get("samples", []),
        operations=operations,
        generated_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
        input_desc=" ".join(args.input) if args.input else f"compacted store {args.compacted}",
    )


def print_summary(summary: dict[str, Any], output: str) -> None:
    """A short table of the key figures on stdout (rich if installed, else plain)."""
    a = summary["advice"]
    failing = summary["rooms_failing_audit"]

    def ms(v: Any) -> str:
        return "–" if v is None else f"{v:,.0f} ms"

    ci = f"[{ms(a['ci_low_ms'])}, {ms(a['ci_high_ms'])}] at {a['confidence']:.0%}"
    rows = [
        ("lines read / rejected", f"{summary['lines']:,} / {summary['rejected_lines']:,}"),
        ("rooms / messages", f"{summary['rooms']:,} / {summary['messages']:,}"),
        ("acked / timed out / failed", f"{summary['acked']:,} / {summary['timed_out']:,} / {summary['failed']:,}"),
        (
            "dead-lettered / skipped / lost",
            f"{summary['dead_lettered']:,} / {summary['skipped']:,} / {summary['lost']:,}",
        ),
        ("acked share", "–" if summary["acked_share"] is None else f"{summary['acked_share']:.1%}"),
        ("late acks / duplicates sent", f"{summary['late_acks']:,} / {summary['duplicates_sent']:,}"),
        ("audit: rooms out of order", f"{failing['sends_in_order']:,} ({summary['ordering_violations']:,} sends)"),
        ("audit: rooms >1 in flight", f"{failing['single_in_flight']:,} ({summary['in_flight_violations']:,} sends)"),
        ("audit: rooms with lost / gaps", f"{failing['none_lost']:,} / {failing['no_gaps']:,}"),
        ("longest head-of-line wait", ms(summary["longest_head_of_line_wait_ms"])),
        (
            "operator actions / sequence gaps",
            f"{summary['operations']['operator_actions']:,} / {summary['operations']['sequence_gaps']:,}",
        ),
        ("X in force (observed)", ms(a["observed_timeout_ms"])),
        (f"recommended X ({a['target_share']:.1%} of acks)", f"{ms(a['recommended_ms'])} {ci}"),
        ("elapsed", f"{summary['elapsed_s']:.1f} s"),
    ]
    for name, f in sorted(summary.get("providers", {}).items()):
        share = "–" if f["acked_share"] is None else f"{f['acked_share']:.1%}"
        rows.insert(
            5,
            (f"  {name}: acked / timed out / ack p50", f"{share} / {f['timed_out']:,} / {ms(f['send_to_ack_p50_ms'])}"),
        )
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        width = max(len(k) for k, _ in rows)
        print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
        print(f"report: {join_path(output, 'report.html')}")
        return
    t = Table(title="baton delivery analytics", show_header=False)
    t.add_column(style="bold")
    t.add_column()
    for k, v in rows:
        t.add_row(k, v)
    Console().print(t)
    print(f"report: {join_path(output, 'report.html')}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    summary = run(args)
    if args.rooms_only:
        print(json.dumps(summary))
    else:
        print_summary(summary, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
