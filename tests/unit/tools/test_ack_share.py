"""tools/local/ack_share.py: the acked share among the messages the platform
delivered and reported within the ack timeout, from a hand-made record."""

from __future__ import annotations

from tools.local.ack_share import acked_share


def test_only_messages_delivered_and_reported_in_time_count_and_acked_ones_are_matched_by_room_and_seq():
    stats = {
        "sends": [
            {"wamid": "a", "callback": "1.1.0.k.room-1", "at": 100.0, "provider": "messenger"},  # acked
            {"wamid": "b", "callback": "2.1.0.k.room-1", "at": 110.0, "provider": "messenger"},  # timed out
            {"wamid": "c", "callback": "1.1.0.k.room-2", "at": 100.0, "provider": "messenger"},  # delivered late
            {"wamid": "d", "callback": "1.1.0.k.room-3", "at": 100.0, "provider": "messenger"},  # never reported
            {"wamid": "e", "callback": "", "at": 100.0, "provider": "instagram"},  # no delivery id
        ],
        "device": {"p1": [{"wamid": "a", "at": 100.5}, {"wamid": "b", "at": 110.2}],
                   "p2": [{"wamid": "c", "at": 104.0}], "p3": [{"wamid": "d", "at": 100.1}]},
        "acked_wamids": ["a", "b", "c"],
    }
    events = [{"event": "acked", "room_id": "room-1", "seq": 1}, {"event": "timed_out", "room_id": "room-1", "seq": 2}]
    assert acked_share(events, stats, ack_timeout_ms=3000) == {"messenger": (1, 2)}
