"""The operator day (issue 32): an on-call engineer's actions on the
emulators, then the delivery report of that log. Its own stack, started
and stopped here (tools/local/operator_day.py's settings: timeouts of seconds,
a pacing bucket a burst of 8 runs through, 3 send attempts)."""

from __future__ import annotations

import duckdb

from tools.local import operator_day
from tools.local.stack import Stack


def test_an_operator_day_gives_a_clean_audit_and_shows_every_action_in_the_report(tmp_path):
    log = tmp_path / "events.jsonl"
    stack = Stack(tmp_path / "run", env=operator_day.OPERATOR_DAY_ENV, fake_config=operator_day.FAKE_CONFIG,
                  sweep_interval_s=1.0, event_log=log).start()
    try:
        day = operator_day.run(stack)
    finally:
        stack.stop()
    job_dir = operator_day.report(day, tmp_path / "out")

    checks = operator_day.judge(day, job_dir, tmp_path / "out" / "duckdb-rooms.parquet")
    assert [(name, found) for name, ok, found in checks if not ok] == []
    # The trail itself, read here from the job's Parquet: each action once, by
    # the operator, in the room it was done to, in time order.
    r = day.rooms
    trail = duckdb.sql(f"SELECT action, room_id, actor FROM read_parquet('{job_dir}/operator_actions/*.parquet') "
                       "ORDER BY ts").fetchall()
    assert sorted(trail) == sorted([("paused", r["paused"], "operator-day"), ("skipped", r["skipped"], "operator-day"),
                                    ("redriven", r["redriven"], "operator-day"),
                                    ("resumed", r["paused"], "operator-day")])
    assert trail[0][0] == "paused" and trail[-1][0] == "resumed"
    outcomes = dict(duckdb.sql(f"SELECT room_id || ':' || seq, outcome FROM read_parquet('{job_dir}/messages/*.parquet')"
                               ).fetchall())
    assert outcomes[f"{r['skipped']}:1"] == "skipped" and outcomes[f"{r['redriven']}:1"] == "acked"
    assert len(outcomes) == len(day.messages) == 16 and "lost" not in outcomes.values()
    paced = duckdb.sql(f"SELECT count(*) FROM read_parquet('{job_dir}/waits/*.parquet') "
                       f"WHERE kind = 'paced' AND room_id = '{r['paced']}'").fetchone()[0]
    # 8 messages, a bucket of 3 tokens, one more per second: message 4 waits
    # for a token unless the first three send-to-ack cycles took a second in all.
    assert paced >= 1
