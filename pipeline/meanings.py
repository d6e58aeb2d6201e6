"""What the job does with each event type of `shared.events.EventType`.

`EVENT_MEANINGS` maps every event type to the outputs it feeds and what it
means there; tests/pipeline/test_meanings.py fails when an event type is
added to shared/events.py without an entry here, and docs/analytics.md
("Every event, and where it goes") is this table in prose.
"""

from __future__ import annotations

#: The job's outputs an event can feed (the report's tables are read from them).
OUTPUTS = frozenset(
    {"messages", "rooms", "faults", "waits", "operator_actions", "room_faults", "sequence_gaps", "preparations", "rescues"}
)

#: event -> (the outputs it feeds, what it means there).
EVENT_MEANINGS: dict[str, tuple[frozenset[str], str]] = {
    "enqueued": (frozenset({"messages", "rooms", "waits"}), "the message entered its room: its life starts; ends a held or scheduled wait"),
    "duplicate_ignored": (frozenset({"faults"}), "a push redelivery, counted by cause"),
    "rejected": (frozenset({"faults"}), "a push that can never be valid, counted by reason"),
    "sent": (frozenset({"messages", "rooms", "waits"}), "an attempt accepted: in flight from the first; later ones are duplicates sent"),
    "send_failed": (frozenset({"messages", "faults"}), "a refused send call: counted per message and by cause"),
    "acked": (frozenset({"messages", "rooms"}), "terminal: the life ends acked, with its send-to-ack latency"),
    "failed": (frozenset({"messages", "rooms", "faults"}), "terminal: the platform reported the message failed"),
    "timed_out": (frozenset({"messages", "rooms"}), "terminal: no ack within the ack timeout"),
    "dead_lettered": (frozenset({"messages", "rooms", "faults"}), "terminal: baton gave up; dead letters by reason"),
    "status_ignored": (frozenset({"messages", "faults"}), "a status changing nothing, by reason; `late_ack` gives the late ack's latency"),
    "status_unknown": (frozenset({"faults"}), "a status for a delivery baton does not know, by reason"),
    "paused": (frozenset({"waits", "operator_actions", "faults"}), "an operator paused the room: a wait until the resume"),
    "resumed": (frozenset({"waits", "operator_actions", "faults"}), "ends the room's pause"),
    "status_dead_lettered": (frozenset({"faults"}), "a status-queue message moved to the error queue"),
    "timeout_ignored": (frozenset({"faults"}), "a stale timer or a sweep of a room not overdue, by reason"),
    "send_unknown": (frozenset({"messages", "rooms", "faults", "room_faults"}), "an attempt possibly sent: in flight from then on"),
    "timer_rearmed": (frozenset({"faults"}), "a timer came early and was armed again, by phase"),
    "timer_arm_failed": (frozenset({"faults", "room_faults"}), "a timer Cloud Tasks refused"),
    "resent": (frozenset({"faults", "room_faults"}), "a resend, by cause (unknown outcome, crash, retry after a refusal)"),
    "scheduled": (frozenset({"waits", "faults"}), "a scheduled message waits outside its room: lateness against its time"),
    "preparing": (frozenset({"waits", "faults"}), "the head of line waits for its preparation"),
    "prepared": (frozenset({"preparations", "faults"}), "a preparation finished: how long it took"),
    "prepare_failed": (frozenset({"faults", "room_faults"}), "a preparation attempt failed, by class"),
    "prepare_ignored": (frozenset({"faults"}), "a preparation result changing nothing, by reason"),
    "prepare_request_failed": (frozenset({"faults"}), "a prepare task Cloud Tasks refused"),
    "sequence_held": (frozenset({"waits", "faults"}), "a message waits for its producer's earlier sequence numbers"),
    "sequence_gap": (frozenset({"sequence_gaps", "room_faults", "faults"}), "missing producer sequence numbers given up"),
    "paced": (frozenset({"waits", "faults"}), "the head waits for a pair-rate token or a sender slot"),
    "backpressure": (frozenset({"faults", "room_faults"}), "a push refused because its room is full"),
    "parked": (frozenset({"messages", "rooms", "waits", "faults"}), "the message entered parked: blocks its room until redriven or skipped"),
    "blocked": (frozenset({"faults", "room_faults"}), "the room's head is parked: nothing is sent"),
    "redriven": (frozenset({"messages", "waits", "operator_actions", "faults"}), "released by an operator: a parked message's wait ends, a dead letter lives again"),
    "skipped": (frozenset({"messages", "rooms", "waits", "operator_actions", "faults"}), "terminal: an operator ended the message (or cancelled a scheduled one)"),
    "watchdog_rescued": (frozenset({"faults", "room_faults", "rescues"}), "the sweep re-drove an overdue room: by phase, and how overdue"),
    "operator_ignored": (frozenset({"operator_actions", "faults"}), "an operator action that changed nothing"),
    "statuses_replayed": (frozenset({"operator_actions", "faults"}), "an operator replayed a room's statuses from the status error queue"),
}  # fmt: skip
