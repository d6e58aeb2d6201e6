"""`make bench-pipeline`'s goal verdicts and the day's hourly split, on
hand-made figures and a small file (no Spark run)."""

from __future__ import annotations

import pytest

from tools.bench.pipeline import goals
from tools.bench.pipeline_day import split_hours


def day(**kw: object) -> dict:
    base = {"events": 5_450_000, "report_lines": 5_450_000, "hourly_s": 12.0, "report_s": 48.0,
            "catchup_gib": 2.9, "hourly_gib": 1.6, "report_gib": 3.1, "rooms_agree": True}
    return {**base, **kw}


def size(tag: str, events: int, seconds: float, gib: float = 3.0) -> dict:
    return {"size": tag, "events": events, "raw_s": seconds, "pq_rooms_s": seconds / 3, "pq_s": seconds / 2,
            "raw_gib": gib, "pq_rooms_gib": gib, "pq_gib": gib, "rooms_agree": True}


def verdicts(results: list[dict], d: dict | None) -> dict[str, bool]:
    return {name.split(" <=")[0].split(" <")[0]: met for name, _, met in goals(results, d)}


def test_every_goal_is_met_by_figures_within_it():
    got = verdicts([size("10M", 10_000_000, 60), size("30M", 30_000_000, 150)], day())
    assert len(got) == 8 and all(got.values())


@pytest.mark.parametrize(("change", "broken"), [
    ({"hourly_s": 15.1}, "hourly make compact of 250,000 events, s"),
    ({"report_s": 61.0}, "the day's whole report from the compacted store, s"),
    ({"report_gib": 4.0}, "Spark peak RSS (process tree)"),
    ({"report_lines": 5_449_999}, "every line of the day in the day's report"),
    ({"rooms_agree": False}, "Spark's per-room tables equal DuckDB's, every run"),
])
def test_a_figure_past_its_goal_is_not_met_and_only_that_one(change, broken):
    got = verdicts([], day(**change))
    assert [name for name, met in got.items() if not met] == [broken]


def test_time_growing_faster_than_the_events_is_not_linear():
    got = verdicts([size("10M", 10_000_000, 60), size("30M", 30_000_000, 200)], None)
    assert [name for name, met in got.items() if not met] == [
        "Spark, whole job on the raw JSON (compaction to Parquet included), 10M -> 30M time",
        "Spark, per-room tables only, on the compacted Parquet, 10M -> 30M time",
        "Spark, whole job on the compacted Parquet, 10M -> 30M time",
    ]


def test_the_day_splits_into_23_hours_and_a_last_hour_of_exactly_its_lines(tmp_path):
    log = tmp_path / "day.jsonl"
    lines = [f'{{"n": {i}}}\n' for i in range(1_000)]
    log.write_text("".join(lines))
    last = split_hours(log, tmp_path / "hours", total=1_000, hour_events=100)
    hours = sorted((tmp_path / "hours").glob("hour-*.jsonl"))
    assert [h.name for h in hours] == [f"hour-{i:02d}.jsonl" for i in range(23)]
    assert "".join(h.read_text() for h in hours) + last.read_text() == "".join(lines)
    assert len(last.read_text().splitlines()) == 100
    with pytest.raises(ValueError):
        split_hours(log, tmp_path / "other", total=100, hour_events=100)


def test_a_step_that_failed_meets_no_goal_however_fast():
    got = verdicts([], day(hourly_rc=1, hourly_s=2.0))
    assert [name for name, met in got.items() if not met] == ["hourly make compact of 250,000 events, s"]


def test_nothing_measured_meets_no_goal_and_is_refused():
    """`0 of 0` runs agreeing is not a goal met (issue 43), and a run that
    would measure nothing is refused at once."""
    import pytest

    from tools.bench.pipeline import main

    assert [met for _, _, met in goals([], None)] == [False]
    with pytest.raises(SystemExit) as refused:
        main(["--sizes", "", "--no-day"])
    assert refused.value.code != 0
