"""The whole job on files of both formats, with bad lines: tables, rejects, report."""

from __future__ import annotations

import json

import pytest
from pyspark.testing import assertDataFrameEqual

from pipeline import job
from pipeline.extract import read_lines
from tests.pipeline.conftest import line, log_entry, scenario

BAD = [
    "not json at all",
    '{"log_type":"baton.delivery","event":"sent"',
    json.dumps({"log_type": "other", "event": "sent"}),
]


@pytest.fixture(scope="module")
def run(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("job")
    records = scenario()
    half = len(records) // 2
    # plain lines as the functions write them, with bad lines among them ...
    (root / "logs").mkdir()
    (root / "logs" / "events.jsonl").write_text("\n".join([line(r) for r in records[:half]] + BAD) + "\n")
    # ... and the rest as the Logging sink exports them (note the colons in the file name)
    sink = root / "logs" / "run.googleapis.com" / "stdout" / "2026" / "11" / "22"
    sink.mkdir(parents=True)
    (sink / "10:00:00_10:59:59_S0.json").write_text("\n".join(log_entry(r) for r in records[half:]) + "\n")
    out = root / "report"
    assert job.main(["--input", str(root / "logs"), "--output", str(out), "--master", "local[2]"]) == 0
    return out, len(records)


def test_tables_are_written(spark, run):
    out, n_events = run
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["lines"], summary["valid_events"], summary["rejected_lines"]) == (n_events + 3, n_events, 3)
    assert (summary["rooms"], summary["messages"], summary["lost"], summary["duplicates_sent"]) == (7, 15, 1, 1)
    assert summary["rooms_failing_audit"] == {
        "sends_in_order": 1,
        "single_in_flight": 1,
        "none_lost": 1,
        "no_gaps": 1,
        "one_end_each": 0,
    }
    messages = spark.read.parquet(str(out / "messages"))
    assert messages.count() == 15
    # late acks are summed from the rooms table: the same figure as counted over the messages
    late = messages.where("outcome = 'timed_out' and late_ack_ms is not null").count()
    assert summary["late_acks"] == late == 1
    rooms = spark.read.parquet(str(out / "rooms"))
    assert sorted(r["room_id"] for r in rooms.where("not audit_ok").collect()) == [
        "gap",
        "lost",
        "out-of-order",
        "two-in-flight",
    ]
    assert spark.read.parquet(str(out / "audit")).count() == 7
    assert spark.read.parquet(str(out / "providers")).count() == 1
    assert spark.read.parquet(str(out / "hourly")).count() == 1
    assert spark.read.parquet(str(out / "timeout_tradeoff")).count() >= 13


def test_rejects_keep_line_and_reason(spark, run):
    out, _ = run
    rejects = {r["line"]: r["reject_reason"] for r in spark.read.parquet(str(out / "rejects")).collect()}
    # lines that are not JSON keep their raw text; a JSON line failing a check keeps the fields read
    wrong_type = {k: v for k, v in rejects.items() if v == "wrong_log_type"}
    assert {k: v for k, v in rejects.items() if v == "not_json"} == {BAD[0]: "not_json", BAD[1]: "not_json"}
    assert [json.loads(k) for k in wrong_type] == [json.loads(BAD[2])]


def test_report_from_the_compacted_store_matches_the_json_run(spark, run, tmp_path):
    """The job on the store the JSON run compacted (OUTPUT/events) gives the same tables."""
    out, _ = run
    again = tmp_path / "again"
    args = ["--compacted", str(out / "events"), "--output", str(again), "--master", "local[2]", "--rooms-only"]
    assert job.main(args) == 0
    for table in ("rooms", "rejects"):
        assertDataFrameEqual(spark.read.parquet(str(again / table)), spark.read.parquet(str(out / table)))
    assertDataFrameEqual(spark.read.parquet(str(again / "messages")), spark.read.parquet(str(out / "messages")))


def test_a_failing_stage_beside_others_fails_the_run(run, tmp_path, monkeypatch):
    """The advice runs in a thread beside the rooms and the totals: its error
    reaches the caller, after the stages beside it have finished."""
    out, _ = run

    def broken(*_args, **_kwargs):
        raise RuntimeError("trade-off broke")

    monkeypatch.setattr(job.tf, "timeout_tradeoff", broken)
    again = tmp_path / "again"
    with pytest.raises(RuntimeError, match="trade-off broke"):
        job.main(["--compacted", str(out / "events"), "--output", str(again), "--master", "local[2]"])
    assert set(job.STAGE_SECONDS) == {
        "rejects",
        "messages",
        "audit+rooms",
        "totals",
        "timeout advice",
        "faults and operations",
    }
    assert (again / "rooms" / "_SUCCESS").exists() and (again / "hourly" / "_SUCCESS").exists()
    assert not (again / "summary.json").exists()


def test_summary_breaks_main_figures_down_by_provider(run):
    out, _ = run
    providers = json.loads((out / "summary.json").read_text())["providers"]
    # the scenario: 15 messages on whatsapp, 10 acked (one of them late: timed out), 1 failed ...
    assert set(providers) == {"whatsapp"}
    w = providers["whatsapp"]
    assert (w["messages"], w["timed_out"], w["late_acks"]) == (15, 1, 1)
    assert w["acked_share"] == pytest.approx(11 / 15)
    html = (out / "report.html").read_text()
    assert "<h2>By provider</h2>" in html and "timed_out_share" in html


def test_report_is_self_contained(run):
    out, _ = run
    html = (out / "report.html").read_text()
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert html.count("data:image/png;base64,") == 6  # five charts and the waits by cause
    assert "<h2>Faults and operations</h2>" in html
    assert html.count("<table>") == html.count("<div class=scroll><table>")  # wide tables scroll, not the page
    assert "Ordering audit found problems" in html
    assert "not json at all" in html  # a sample of the rejected lines
    assert (out / "timeout_tradeoff.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_input_is_a_clear_error(spark, tmp_path):
    with pytest.raises(FileNotFoundError):
        read_lines(spark, str(tmp_path / "nothing-*.jsonl"))


def test_bad_arguments_exit_2(tmp_path):
    with pytest.raises(SystemExit) as e:
        job.parse_args(["--input", "x", "--output", str(tmp_path), "--target-share", "1.2"])
    assert e.value.code == 2


def test_pick_bucket():
    assert (
        job.pick_bucket_s(84) == 5
        and job.pick_bucket_s(3600) == 60
        and job.pick_bucket_s(10 * 86400) == 6 * 3600
        and job.pick_bucket_s(30 * 86400) == 86400
    )
