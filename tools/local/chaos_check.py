"""The chaos run's checker: judges a run from outside, from the fake platform's
record (what it received and what each device got, with times) and the
delivery event log, never from baton's own view of itself.

Violations (each a list of human-readable strings):
- `lost`, judged from the platform's record (DESIGN.md invariant 13): a
  published message (not rejected as malformed) that did not end `failed`,
  `skipped` or `dead_lettered` (by its terminal event, or its room's record
  of its end) and of which the platform accepted no send; a `timed_out` or
  `acked` in baton's log proves nothing the platform did not receive. Also
  lost: a message with no end at all (no terminal event, not among its
  room's ended messages in Firestore);
- `ended_twice`: a message with more than one terminal event;
- `stuck`: a room that still holds a message at the end (from Firestore);
- `device_out_of_order`: two acked messages of one room that reached the
  device in the wrong order, each judged by its first copy there;
- `early_handover`: a room's message n+1 reached the platform while message n
  was within its ack window: before n reached the device, and less than the
  ack timeout after n's last send reached the platform, and n did not fail.

Not violations, but counted:
- `unlogged_ends`, messages their room records as ended whose terminal event
  line is missing: the process died after the commit and before it wrote the
  line (the lines are written after the commit, so that a decision that does
  not commit is never logged);
- `late_copies`, second copies of a message that reached the device after a
  later message of its room: a send whose outcome was unknown is held until
  its ack deadline and then resent, and when the platform delivers the first
  send after that deadline the user gets the message twice, the second time
  late. The duplicate is counted in `duplicates_sent`; the order the user
  reads the conversation in is that of the first copies.
- `resent_after_a_status`, duplicates sent although a status (`sent`,
  `delivered`, `read`) of an earlier attempt of the message that reached the
  platform had come before the resend was decided: with WHATSAPP_SENT_PROOF
  on, a resend should follow only when no status came within the ack window
  (issue 31, item 2). A status that came after the resend is the webhook's
  lateness, not this.

Pure: `check()` takes plain data, so tests/unit/tools/test_chaos_check.py can feed it
hand-made records with each violation.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from shared.events import TERMINAL_EVENTS
from shared.room import parse_delivery_id

# The fake platform stamps a send when it has read the request, and baton
# stamps its return after that; a few ms of slack absorb the clock reads.
TOLERANCE_S = 0.005


def epoch_s(ts: str) -> float:
    """Epoch seconds of an event's RFC 3339 `ts`."""
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass
class Verdict:
    """What the checker found. `ok` when every violation list is empty."""

    lost: list[str] = field(default_factory=list)
    ended_twice: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    device_out_of_order: list[str] = field(default_factory=list)
    early_handover: list[str] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    unlogged_ends: list[str] = field(default_factory=list)
    late_copies: list[str] = field(default_factory=list)
    resent_after_a_status: list[str] = field(default_factory=list)
    send_calls: int = 0
    duplicates_sent: int = 0
    max_sends_per_message: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.ended_twice or self.stuck or self.device_out_of_order or self.early_handover)

    def violations(self) -> dict[str, list[str]]:
        return {"lost": self.lost, "ended_twice": self.ended_twice, "stuck": self.stuck,
                "device_out_of_order": self.device_out_of_order, "early_handover": self.early_handover}


def _key(callback: str) -> tuple[str, int, int] | None:
    """(room, incarnation, seq) of a delivery id, or None if it is not one."""
    try:
        room, incarnation, seq, _, _ = parse_delivery_id(callback)
    except ValueError:
        return None
    return room, incarnation, seq


def _resent_after_a_status(events: list[dict[str, Any]], sends: list[dict[str, Any]]) -> list[str]:
    """Duplicates whose resend (attempt k, which reached the platform) was
    decided after a status of attempt k - 1 had been logged: "room#seq
    attempt k". Only the attempt in flight can be proven, so only k - 1
    counts; statuses from another number, or naming no room's attempt
    (`status_unknown`), prove nothing and are left out. Keys are (room,
    seq, attempt): a chaos run never re-creates a room, so the incarnation
    is the same. Event times are the log's `ts` (ISO 8601 UTC, fixed width,
    so they compare as strings)."""
    reached: set[tuple[str, int, int]] = set()  # (room, seq, attempt) the platform received
    for s in sends:
        try:
            room, _, seq, attempt, _ = parse_delivery_id(s["callback"])
        except ValueError:
            continue
        reached.add((room, seq, attempt))
    first_status: dict[tuple[str, int, int], str] = {}
    for e in events:
        if e.get("status") not in ("sent", "delivered", "read") or e.get("attempt") is None \
                or e["event"] == "status_unknown" or str(e.get("reason") or "").startswith(PROVES_NOTHING):
            continue
        key = (e["room_id"], e["seq"], e["attempt"])
        first_status[key] = min(first_status.get(key, e["ts"]), e["ts"])
    found = []
    for e in events:
        if e["event"] != "resent" or (e["room_id"], e["seq"], e["attempt"]) not in reached:
            continue
        before = first_status.get((e["room_id"], e["seq"], e["attempt"] - 1))
        if before is not None and before < e["ts"]:
            found.append(f"{e['room_id']}#{e['seq']} attempt {e['attempt']}")
    return sorted(found)


# Ends that need no send the platform accepted: the platform refused it, an
# operator skipped it, or baton gave up on it and kept it (a dead letter).
ENDS_WITHOUT_A_SEND = frozenset({"failed", "skipped", "dead_lettered"})


def _never_received(candidates: set[str], events: list[dict[str, Any]], terminal: list[dict[str, Any]],
                    sends: list[dict[str, Any]], ended_in_rooms: Mapping[str, str] | set[str] | frozenset[str],
                    ) -> list[str]:
    """Of `candidates` (published, not rejected message ids) those that
    ended, not in `ENDS_WITHOUT_A_SEND`, with no send the platform accepted
    (`sends`: its record, by delivery id -> room and seq -> the message id
    its room logged for that seq)."""
    mid_of = {(e["room_id"], e["seq"]): e["message_id"] for e in events
              if e.get("seq") is not None and e.get("message_id") is not None and e.get("room_id") is not None}
    received = set()
    for s in sends:
        key = _key(s["callback"])
        if key is not None and (key[0], key[2]) in mid_of:
            received.add(mid_of[(key[0], key[2])])
    last_end = {e["message_id"]: e["event"] for e in terminal}
    recorded = ended_in_rooms if isinstance(ended_in_rooms, Mapping) else {}
    found = []
    for m in sorted(candidates):
        end = last_end.get(m) or recorded.get(m)
        if end is None and m not in ended_in_rooms:
            continue  # no end at all: lost for that reason (the caller's)
        if end not in ENDS_WITHOUT_A_SEND and m not in received:
            found.append(m)
    return found


# Reasons of statuses that are not about the attempt they name.
PROVES_NOTHING = ("wrong_sender", "other_sender")


def check(published_ids: set[str], events: list[dict[str, Any]], sends: list[dict[str, Any]],
          device: dict[str, list[dict[str, Any]]], rooms_holding: list[str], ack_timeout_ms: int,
          ended_in_rooms: Mapping[str, str] | set[str] | frozenset[str] = frozenset()) -> Verdict:
    """Judge one run.

    Args:
        published_ids: message ids the producer published.
        events: the delivery event log's records (dicts as written).
        sends: the fake platform's send records: `callback` (delivery id), `at` (epoch s).
        device: recipient -> what its device received, in order: `callback`, `at` (epoch s).
        rooms_holding: rooms whose document still holds a message at the end.
        ack_timeout_ms: the run's ACK_TIMEOUT_MS.
        ended_in_rooms: message ids the rooms' documents record as ended,
            or message id -> the outcome recorded (an end whose log line is
            missing is then judged by it; with ids only, such an end must
            have a send the platform accepted).
    """
    v = Verdict(stuck=sorted(rooms_holding))
    terminal = [e for e in events if e["event"] in TERMINAL_EVENTS]
    ends = Counter(e["message_id"] for e in terminal)
    v.outcomes = Counter(e["event"] for e in terminal)
    rejected = {e["message_id"] for e in events if e["event"] == "rejected"}
    unlogged = sorted(m for m in published_ids if not ends[m] and m not in rejected)
    v.unlogged_ends = [m for m in unlogged if m in ended_in_rooms]
    v.lost = sorted({m for m in unlogged if m not in ended_in_rooms}
                    | set(_never_received(published_ids - rejected, events, terminal, sends, ended_in_rooms)))
    v.ended_twice = sorted(m for m, n in ends.items() if n > 1)
    outcome_of = {(e["room_id"], e["seq"]): e["event"] for e in terminal}

    send_times: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for s in sends:
        key = _key(s["callback"])
        if key is not None:
            send_times[key].append(s["at"])
    v.send_calls = sum(len(t) for t in send_times.values())
    v.duplicates_sent = sum(len(t) - 1 for t in send_times.values())
    v.max_sends_per_message = max((len(t) for t in send_times.values()), default=0)
    v.resent_after_a_status = _resent_after_a_status(events, sends)

    received: dict[tuple[str, int, int], float] = {}
    acked = {(e["room_id"], e["seq"]) for e in terminal if e["event"] == "acked"}
    for items in device.values():
        last_acked: dict[tuple[str, int], int] = {}
        for item in items:
            key = _key(item["callback"])
            if key is None:
                continue
            room, incarnation, seq = key
            if key in received:
                # a second copy (of another attempt): a duplicate, not a reordering
                if seq < last_acked.get((room, incarnation), 0):
                    v.late_copies.append(f"{room}#{seq} again after #{last_acked[(room, incarnation)]}")
                continue
            received[key] = item["at"]
            if (room, seq) in acked:
                if seq < last_acked.get((room, incarnation), 0):
                    v.device_out_of_order.append(f"{room}#{seq} reached the device after #{last_acked[(room, incarnation)]}")
                last_acked[(room, incarnation)] = max(last_acked.get((room, incarnation), 0), seq)

    window_s = ack_timeout_ms / 1000
    for (room, incarnation, seq), times in sorted(send_times.items()):
        previous = send_times.get((room, incarnation, seq - 1))
        if not previous or outcome_of.get((room, seq - 1)) in ("failed", "skipped", "dead_lettered"):
            continue
        first_next = min(times)
        free_at = min(received.get((room, incarnation, seq - 1), float("inf")), max(previous) + window_s)
        if first_next < free_at - TOLERANCE_S:
            v.early_handover.append(f"{room}#{seq} sent {(free_at - first_next) * 1000:.0f} ms inside #{seq - 1}'s window")
    return v
