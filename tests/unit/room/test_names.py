"""One word, one meaning inside shared/room/ (issue 45, leftovers): "held"
meant five things (the messages waiting for a sequence gap, every message
id of the room, a count, a sender, an ignore reason), `next_seq` stood
beside `next_sequence`, `preparation_failed` beside the `prepare_failed`
rule, and the module re-exported two event types under aliases. What the
room document stores and the event log says keeps its old spelling (the
codec maps `next_sequence` and `held`; the logged reasons `not_held` and
`already_held` are values the pipeline reads)."""

from __future__ import annotations

import re
import tokenize
from pathlib import Path

import shared.room
from shared.events import EventType
from shared.room import IgnoreReason, RoomState
from shared.room.state import QueuedMessage
from shared.room_document import room_as_read, room_to_doc

ROOM = Path(shared.room.__file__).resolve().parent
# "held" survives only as the messages held for their producer sequence
# (logged `sequence_held`) and the two functions that put them there and out.
HELD_NAMES = {"sequence_held", "admit_sequence_held", "_held_for_sequence"}
RETIRED = re.compile(r"^(next_sequence|preparation_failed|held_ids|admit_held|NOT_HELD|ALREADY_HELD|held)$")


def names_in_room_code() -> set[str]:
    """Every identifier (not string, not comment) of shared/room/*.py."""
    names = set()
    for path in ROOM.glob("*.py"):
        with path.open("rb") as f:
            names |= {t.string for t in tokenize.tokenize(f.readline) if t.type == tokenize.NAME}
    return names


def test_held_has_one_meaning_and_the_retired_names_are_gone():
    names = names_in_room_code()
    assert {n for n in names if "held" in n.lower()} <= HELD_NAMES | {"SEQUENCE_HELD"}
    assert not {n for n in names if RETIRED.match(n)}


def test_the_room_exports_no_alias_of_an_event_type():
    aliases = {name for name in shared.room.__all__ if isinstance(getattr(shared.room, name), EventType)}
    assert not aliases


def test_the_document_and_the_log_keep_their_spelling():
    msg = QueuedMessage(0, "m5", "whatsapp", "15550001", "later", 1, 1, sequence=5)
    doc = room_to_doc(RoomState("r", expected_sequence=3, sequence_held=(msg,)))
    assert doc["next_sequence"] == 3 and [m["id"] for m in doc["held"]] == ["m5"]
    back = room_as_read("r", doc, 0)
    assert back.expected_sequence == 3 and back.sequence_held == (msg,)
    assert (IgnoreReason.NOT_IN_ROOM.value, IgnoreReason.ALREADY_IN_ROOM.value) == ("not_held", "already_held")
