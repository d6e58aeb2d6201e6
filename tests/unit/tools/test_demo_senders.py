"""The judge of `make demo-senders` (tools/local/demo_senders.py) on hand-made
records of the fake platform: it must catch a number over its rate in a
sliding second and a room sent from two numbers."""

from __future__ import annotations

from shared.room import make_delivery_id
from shared.senders import rendezvous_sender
from tools.local.demo_senders import judge_overshoot, judge_senders

NUMBERS = ("1001", "1002")


def rec(room: str, seq: int, at: float, sender: str | None = None) -> dict:
    return {"callback": make_delivery_id(room, 1, seq, 1, 1_700_000_000_000_000), "at": at,
            "sender": sender or rendezvous_sender(room, NUMBERS)}


def test_the_busiest_sliding_second_is_counted_not_the_calendar_second():
    room = "room-a"
    # 3 sends within 0.6 s that straddle a calendar second: one window holds all 3.
    verdict = judge_senders([rec(room, 1, 10.7), rec(room, 2, 11.1), rec(room, 3, 11.3), rec(room, 4, 12.4)], NUMBERS)
    number = rendezvous_sender(room, NUMBERS)
    assert verdict.max_in_any_second[number] == 3
    assert verdict.over_rate({number: 2}) == {number: 3} and verdict.over_rate({number: 3}) == {}
    assert verdict.rooms_on_several_numbers == [] and verdict.rooms_off_their_hash == []


def test_a_room_sent_from_two_numbers_is_caught():
    room = "room-b"
    other = next(n for n in NUMBERS if n != rendezvous_sender(room, NUMBERS))
    verdict = judge_senders([rec(room, 1, 1.0), rec(room, 2, 2.0, sender=other)], NUMBERS)
    assert verdict.rooms_on_several_numbers == [room] and verdict.rooms_off_their_hash == [room]


def sent(room: str, seq: int, at: float, event: str = "sent", **fields) -> dict:
    from datetime import UTC, datetime

    return {"event": event, "room_id": room, "provider": "whatsapp", "ts": datetime.fromtimestamp(at, UTC).isoformat(),
            "delivery_id": make_delivery_id(room, 1, seq, 1, 1_700_000_000_000_000), **fields}


def test_baton_s_own_call_starts_tell_a_real_overshoot_from_a_late_arrival():
    room = "room-a"
    number = rendezvous_sender(room, NUMBERS)
    # Baton started calls 1.05 s apart; the first reached the platform 0.2 s late.
    events = [sent(room, 1, 10.0), sent(room, 2, 11.05, "send_failed", error_title="(#130429) Rate limit hit")]
    sends = [rec(room, 1, 10.2), rec(room, 2, 11.1)]
    o = judge_overshoot(sends, events, NUMBERS)
    assert judge_senders(sends, NUMBERS).over_rate({number: 1}) == {number: 2}  # the platform counts 2 in 1 s
    assert o.starts_in_any_second == {number: 1}  # baton's clock: within the rate
    assert round(o.delay_max_ms) == 200 and o.delay_p50_ms < o.delay_max_ms
    # Timed to the call's arrival at the platform when the fake stamped it, not to its record.
    arrived = [{**sends[0], "received": 10.05}, sends[1]]
    assert round(judge_overshoot(arrived, events, NUMBERS).delay_max_ms) == 50
    # A refusal without a call is no start; two starts in 1 s are baton's overshoot.
    events += [sent(room, 3, 11.5, "send_failed", error_title="send not started within SEND_START_DEADLINE_MS"),
               sent(room, 4, 11.9, "send_unknown")]
    assert judge_overshoot(sends, events, NUMBERS).starts_in_any_second == {number: 2}


def test_the_clocks_tell_the_window_the_transport_and_the_fake_apart():
    from tools.local.demo_senders import judge_clocks

    # One slot of one number, used 1.05 s apart: the window holds (1 in any second, gap SPAN).
    uses = {"1001": [(0, 0, 10.0), (0, 0, 11.05)]}
    # The first call reached the fake 0.1 s late, the second at once: 2 arrivals within 1 s.
    sends = [{"sender": "1001", "received": 10.1, "counted": 10.1, "at": 10.12}]
    refusals = [{"sender": "1001", "received": 11.06, "counted": 11.06}]
    c = judge_clocks(uses, sends, refusals)
    assert c.window == {"1001": 1} and round(c.min_slot_gap_ms) == 1050
    assert c.received == {"1001": 2} and c.counted == {"1001": 1}
    assert round(c.count_delay_ms[2]) == 20  # the fake's arrival -> its record
    # A slot used twice within its span is the window's own overshoot.
    assert judge_clocks({"1001": [(0, 0, 10.0), (0, 0, 10.5)]}, [], []).window == {"1001": 2}


def test_the_platform_s_busiest_second_is_counted_by_arrival_not_by_its_record():
    # Two sends that arrived 1.05 s apart, the first recorded 0.1 s late: within a rate of 1.
    room = "room-a"
    sends = [{**rec(room, 1, 10.1), "received": 10.0}, {**rec(room, 2, 11.06), "received": 11.05}]
    assert judge_senders(sends, NUMBERS).over_rate({rendezvous_sender(room, NUMBERS): 1}) == {}
