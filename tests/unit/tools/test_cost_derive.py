"""`make cost`'s inputs from a bench run's event log (tools/bench/cost.py
`derive`): a room transaction's line the outbox logs again (shared/outbox.py)
counts once as an event, and its repeats are an item of their own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.bench import cost


def _line(event: str, room: str | None, event_id: str | None = None, **fields: object) -> dict[str, object]:
    line: dict[str, object] = {"log_type": "baton.delivery", "event": event, "room_id": room, **fields}
    if event_id is not None:
        line["event_id"] = event_id
    return line


def _derive(tmp_path: Path, lines: list[dict[str, object]]) -> dict[str, float]:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines))
    events: dict[str, float] = cost.derive({}, path, None)["events"]
    return events


def _two_messages() -> list[dict[str, object]]:
    """Two messages of room r, each enqueued, sent and acked; a timer fires
    on the first after its ack; the `sent` statuses are ignored."""
    lines = []
    for seq in (1, 2):
        lines += [_line("enqueued", "r", f"w{seq}a.0", seq=seq), _line("sent", "r", seq=seq, attempt=1),
                  _line("status_ignored", "r", seq=seq, reason="sent_status"),
                  _line("acked", "r", f"w{seq}b.0", seq=seq, attempt=1)]
    return [*lines, _line("timeout_ignored", "r", seq=1)]


def test_a_line_logged_again_counts_once_and_is_an_item_of_its_own(tmp_path: Path) -> None:
    """The code before counted ended messages as terminal lines: the
    re-logged `acked` lines made 4 messages of 2 and halved every
    per-message figure (bench-core 00:34 UTC: 5,852 for 3,822)."""
    once = _two_messages()
    again = [*once, _line("acked", "r", "w1b.0", seq=1, attempt=1), _line("enqueued", "r", "w2a.0", seq=2),
             _line("acked", "r", "w2b.0", seq=2, attempt=1)]
    plain, doubled = _derive(tmp_path, once), _derive(tmp_path, again)
    for key in ("timeout_ignored_per_message", "status_ignored_per_message", "routine_statuses_per_message",
                "rooms_per_message", "per_message", "mean_bytes"):
        assert doubled[key] == pytest.approx(plain[key]), key
    assert plain["timeout_ignored_per_message"] == 0.5 and plain["per_message"] == 9 / 2
    assert plain["relogged_per_message"] == 0 and doubled["relogged_per_message"] == 3 / 2
    assert doubled["relogged_mean_bytes"] > 0


def test_a_marked_line_is_re_logged_even_when_it_comes_first_or_alone(tmp_path: Path) -> None:
    """With the marker (`"relogged": true`), the marked lines are the ones
    infra keeps out of _Default, whichever comes first; a marked line whose
    first-hand line was lost (its process died after the commit) still
    counts as the event it is."""
    lines = _two_messages()
    acked_1 = next(i for i, e in enumerate(lines) if e["event"] == "acked")
    marked = dict(lines[acked_1], relogged=True)
    lines.insert(acked_1, marked)  # logged again by another request before its own process logged it
    crashed = [dict(e, relogged=True) if e["event"] == "acked" and e["seq"] == 2 else e for e in _two_messages()]
    first, alone = _derive(tmp_path, lines), _derive(tmp_path, crashed)
    assert first["relogged_per_message"] == 1 / 2 and first["per_message"] == 9 / 2
    assert alone["relogged_per_message"] == 1 / 2 and alone["per_message"] == 8 / 2
    assert alone["timeout_ignored_per_message"] == 0.5  # still two ended messages


def test_re_logged_lines_are_priced_in_default_only_when_infra_keeps_them_there(tmp_path: Path) -> None:
    lines = [*_two_messages(), _line("acked", "r", "w1b.0", seq=1, attempt=1, relogged=True)]
    inputs = {"counts": {"inv_webhook_per_message": 1.0}, "events": _derive(tmp_path, lines)}
    deploy = {"cpu": 1.0, "memory_gib": 0.5, "threads": 8, "keep_delivery_events": True, "keep_request_logs": False,
              "keep_routine_statuses": False, "keep_relogged_events": False}
    name = "Cloud Logging: re-logged outbox lines"
    out, kept = cost.cost(inputs, deploy, 20.0), cost.cost(inputs, {**deploy, "keep_relogged_events": True}, 20.0)
    row_out = next(r for r in out["items"] if r[0].startswith(name))
    row_kept = next(r for r in kept["items"] if r[0].startswith(name))
    assert row_out[3] == 0 and row_out[0].endswith("(excluded there)")
    assert row_kept[1] == row_out[1] == pytest.approx(inputs["events"]["relogged_per_message"] * (
        inputs["events"]["relogged_mean_bytes"] + cost.ASSUMED["log_overhead_bytes"][0]))
    assert kept["total"] - out["total"] == pytest.approx(row_kept[3]) and row_kept[3] > 0
    lever = cost.cost(inputs, deploy, 20.0, frozenset({"keep_relogged_events"}))
    assert lever["total"] == pytest.approx(kept["total"])
