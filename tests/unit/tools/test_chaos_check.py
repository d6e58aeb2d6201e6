"""The chaos checker itself, fed hand-made records: each violation it exists
to find makes it fail, and a clean run passes."""

from __future__ import annotations

from shared.room import make_delivery_id
from tools.local.chaos_check import check

INC = 1_700_000_000_000_000
T = 1_700_000_100.0  # epoch s


def did(seq: int, attempt: int = 1, room: str = "r") -> str:
    return make_delivery_id(room, INC, seq, attempt, INC)


def ev(event: str, seq: int, mid: str | None = None, room: str = "r") -> dict:
    return {"event": event, "room_id": room, "seq": seq, "message_id": mid or f"m{seq}"}


def clean_run() -> dict:
    """Two messages: #1 acked (device at T+0.1), #2 sent after that and timed out."""
    return {
        "published_ids": {"m1", "m2"},
        "events": [ev("enqueued", 1), ev("enqueued", 2), ev("acked", 1), ev("timed_out", 2)],
        "sends": [{"callback": did(1), "at": T}, {"callback": did(2), "at": T + 0.2}],
        "device": {"155": [{"callback": did(1), "at": T + 0.1}, {"callback": did(2), "at": T + 0.3}]},
        "rooms_holding": [],
        "ack_timeout_ms": 3000,
    }


def test_a_clean_run_passes():
    v = check(**clean_run())
    assert v.ok and v.send_calls == 2 and v.duplicates_sent == 0 and v.outcomes == {"acked": 1, "timed_out": 1}


def test_a_lost_message_fails():
    run = clean_run()
    run["published_ids"].add("m3")
    assert check(**run).lost == ["m3"]


def test_a_rejected_message_is_not_lost():
    run = clean_run()
    run["published_ids"].add("bad")
    run["events"].append({"event": "rejected", "room_id": "r", "seq": None, "message_id": "bad"})
    assert check(**run).ok


def test_a_message_ended_twice_fails():
    run = clean_run()
    run["events"].append(ev("timed_out", 1))
    assert check(**run).ended_twice == ["m1"]


def test_a_stuck_room_fails():
    run = clean_run()
    run["rooms_holding"] = ["r"]
    assert not check(**run).ok


def test_acked_messages_out_of_order_on_the_device_fail():
    run = clean_run()
    run["events"][-1] = ev("acked", 2)
    run["device"]["155"].reverse()
    v = check(**run)
    assert v.device_out_of_order and not v.ok


def test_a_late_second_copy_is_a_duplicate_not_a_reordering():
    # #1's first send had an unknown outcome; held to its deadline, resent, and the
    # resend acked; #2 went after that. The platform then delivered the first send
    # too: the user reads #1, #2, #1 again (the order of first copies holds).
    run = clean_run()
    run["events"][-1] = ev("acked", 2)
    run["sends"] = [{"callback": did(1), "at": T - 3.5}, {"callback": did(1, 2), "at": T},
                    {"callback": did(2), "at": T + 0.2}]
    run["device"]["155"] = [{"callback": did(1, 2), "at": T + 0.1}, {"callback": did(2), "at": T + 0.3},
                            {"callback": did(1), "at": T + 0.5}]
    v = check(**run)
    assert v.ok and v.device_out_of_order == [] and v.early_handover == []
    assert v.late_copies == ["r#1 again after #2"] and v.duplicates_sent == 1
    # The same copies with #2's first before #1's first is a reordering.
    run["device"]["155"] = [{"callback": did(2), "at": T + 0.3}, {"callback": did(1, 2), "at": T + 0.35},
                            {"callback": did(1), "at": T + 0.5}]
    v = check(**run)
    assert v.device_out_of_order == ["r#1 reached the device after #2"] and not v.ok


def test_a_send_inside_the_previous_ack_window_fails():
    run = clean_run()
    # #1 reached the device only at T+2, yet #2 went out at T+0.2 with no timeout passed.
    run["device"]["155"][0]["at"] = T + 2.0
    v = check(**run)
    assert v.early_handover and "#2" in v.early_handover[0]


def test_the_window_counts_from_the_last_send_of_the_previous_message():
    run = clean_run()
    run["device"] = {}  # nothing ever reached the device: #1 timed out
    run["events"][2] = ev("timed_out", 1)
    run["sends"] = [{"callback": did(1), "at": T}, {"callback": did(1, 2), "at": T + 1.0},
                    {"callback": did(2), "at": T + 3.5}]
    v = check(**run)
    assert v.early_handover and v.duplicates_sent == 1  # 3.5 s < 1.0 s + 3 s
    run["sends"][2]["at"] = T + 4.1
    assert check(**run).ok


def test_after_a_failed_message_the_next_may_go_at_once():
    run = clean_run()
    run["device"]["155"][0]["at"] = T + 2.0
    run["events"][2] = ev("failed", 1)
    assert check(**run).ok


def test_an_end_the_room_recorded_but_never_logged_is_not_lost_but_counted():
    run = clean_run()
    run["events"].remove(ev("timed_out", 2))
    assert check(**run).lost == ["m2"]
    v = check(**run, ended_in_rooms={"m2"})
    assert v.ok and v.unlogged_ends == ["m2"]


def test_a_duplicate_resent_after_a_status_of_the_first_attempt_is_counted_and_one_resent_before_is_not():
    # #1's first send had an unknown outcome; the platform took it and its
    # `sent` status was logged at 00:01, before (or, in the second run, after)
    # the resend of 00:03.
    def run_with(status_ts: str) -> list[str]:
        run = clean_run()
        run["sends"] = [{"callback": did(1), "at": T}, {"callback": did(1, 2), "at": T + 3},
                        {"callback": did(2), "at": T + 5}]
        run["events"] += [
            {**ev("status_ignored", 1), "attempt": 1, "status": "sent", "ts": status_ts},
            {**ev("resent", 1), "attempt": 2, "ts": "2026-11-25T10:00:03.000000Z"},
        ]
        return check(**run).resent_after_a_status
    assert run_with("2026-11-25T10:00:01.000000Z") == ["r#1 attempt 2"]
    assert run_with("2026-11-25T10:00:04.000000Z") == []


def test_a_resend_that_never_reached_the_platform_or_follows_a_status_that_proves_nothing_is_not_counted():
    def run_with(resend_reached: bool, reason: str) -> list[str]:
        run = clean_run()
        run["sends"] = [{"callback": did(1), "at": T}, {"callback": did(2), "at": T + 5}]
        if resend_reached:
            run["sends"].append({"callback": did(1, 2), "at": T + 3})
        run["events"] += [
            {**ev("status_ignored", 1), "attempt": 1, "status": "sent", "reason": reason,
             "ts": "2026-11-25T10:00:01.000000Z"},
            {**ev("resent", 1), "attempt": 2, "ts": "2026-11-25T10:00:03.000000Z"},
        ]
        return check(**run).resent_after_a_status
    assert run_with(True, "sent_status") == ["r#1 attempt 2"]
    assert run_with(False, "sent_status") == []  # refused: not a duplicate
    assert run_with(True, "wrong_sender: 100000000000002") == []


def test_a_timed_out_message_the_platform_never_received_is_lost():
    """Judged from the platform's record (issue 43): baton's `timed_out`
    proves nothing the platform did not receive."""
    run = clean_run()
    run["published_ids"].add("m3")
    run["events"] += [ev("enqueued", 3), ev("timed_out", 3)]
    v = check(**run)
    assert v.lost == ["m3"] and not v.ok


def test_a_message_that_failed_was_skipped_or_dead_lettered_needs_no_send():
    run = clean_run()
    for seq, end in ((3, "failed"), (4, "skipped"), (5, "dead_lettered")):
        run["published_ids"].add(f"m{seq}")
        run["events"] += [ev("enqueued", seq), ev(end, seq)]
    assert check(**run).ok


def test_an_end_without_its_log_line_is_judged_by_the_rooms_record_of_it():
    run = clean_run()
    run["published_ids"] |= {"m3", "m4"}
    run["events"] += [ev("enqueued", 3), ev("enqueued", 4)]  # both ended; the processes died before the lines
    assert check(**run, ended_in_rooms={"m3": "failed", "m4": "timed_out"}).lost == ["m4"]
    assert check(**run, ended_in_rooms={"m3", "m4"}).lost == ["m3", "m4"]  # outcome unknown: a send is needed
    run["sends"].append({"callback": did(4), "at": T + 0.5})
    assert check(**run, ended_in_rooms={"m3": "failed", "m4": "timed_out"}).ok
