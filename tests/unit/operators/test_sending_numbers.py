"""The rooms per WhatsApp sending number (issue 48: the overview's counts "per
provider and per sending number"): the room document's indexed
`in_flight_from`, the overview's count per configured number, the admin
API's `rooms.from` listing, and the console's rows and list page."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from shared.admin.actions import ACTIONS, Args, BadRequest
from shared.room import InFlight, Phase, QueuedMessage, RoomState
from shared.room_document import room_to_doc
from shared.senders import SenderSpec


def _room(number: str | None, provider: str = "whatsapp") -> RoomState:
    msg = QueuedMessage(1, "m1", provider, "15550001", "hi", 1, 1)
    flight = InFlight(msg, 1, 1, Phase.SENT, 2, "push:m1", deadline_us=3, number=number)
    return RoomState("r1", incarnation=1, next_seq=2, in_flight=flight)


def test_the_room_document_names_the_number_its_message_in_flight_goes_out_from():
    assert room_to_doc(_room("111"))["in_flight_from"] == "111"
    assert room_to_doc(_room(None, "messenger"))["in_flight_from"] is None  # other platforms: no number
    assert room_to_doc(RoomState("r1", incarnation=1, next_seq=1))["in_flight_from"] is None  # nothing in flight


class CountingStore:
    """The counts the overview asks, and the number listing (`SendingNumberQueries`)."""

    def __init__(self) -> None:
        self.asked: list[list[str]] = []
        self.sending = {"111": ["a", "b", "c"], "222": []}

    def count_rooms(self, kind: str, before_us: int | None = None) -> int:
        return 0

    def count_in_flight(self, provider: str) -> int:
        return 3 if provider == "whatsapp" else 0

    def count_collection(self, name: str) -> int:
        return 0

    def count_sending_from(self, numbers: list[str]) -> dict[str, int]:
        self.asked.append(numbers)
        return {n: len(self.sending.get(n, [])) for n in numbers}

    def list_sending_from(self, number: str, limit: int, cursor: str | None) -> tuple[list[Any], str | None]:
        rooms = self.sending[number]
        start = rooms.index(cursor) + 1 if cursor else 0
        page = rooms[start:start + limit]
        docs = [(r, room_to_doc(RoomState(r, incarnation=1, next_seq=1))) for r in page]
        return docs, (page[-1] if len(page) == limit else None)


def _admin(providers: set[str]) -> tuple[CountingStore, Any]:
    store = CountingStore()
    settings = SimpleNamespace(enabled_providers=providers, whatsapp_sender_specs=(SenderSpec("111", 80),
                                                                                   SenderSpec("222", 80)),
                               project="p", index_shards=16, webhook_mode="direct", watchdog_grace_ms=1000)
    incident = SimpleNamespace(read=lambda: SimpleNamespace(to_json=lambda: {"on": False}))
    room_store = SimpleNamespace(numbers=store, count_rooms=store.count_rooms, count_in_flight=store.count_in_flight,
                                 count_collection=store.count_collection)  # RoomStore's parts, as it holds them
    admin = SimpleNamespace(operators=SimpleNamespace(store=room_store), settings=settings, incident=incident,
                            scheduled_factory=lambda: SimpleNamespace(list=lambda room, cap: []))
    return store, admin


def test_the_overview_counts_the_rooms_in_flight_from_each_configured_number_in_one_ask():
    from shared.admin.overview import overview

    store, admin = _admin({"whatsapp", "messenger"})
    got = overview(admin, with_error_queue=False)
    assert got["in_flight_by_number"] == {"111": 3, "222": 0}
    assert store.asked == [["111", "222"]]  # every number at once, in WHATSAPP_SENDERS order
    store, admin = _admin({"messenger"})
    assert overview(admin, with_error_queue=False)["in_flight_by_number"] == {} and store.asked == []


def test_rooms_from_lists_one_number_s_rooms_page_by_page_and_refuses_a_number_not_configured():
    _, admin = _admin({"whatsapp"})
    first = ACTIONS["rooms.from"](admin, Args({"number": "111", "limit": 2}), "alice")
    assert [r["room_id"] for r in first["rooms"]] == ["a", "b"] and first["next"] == "b"
    rest = ACTIONS["rooms.from"](admin, Args({"number": "111", "limit": 2, "cursor": first["next"]}), "alice")
    assert [r["room_id"] for r in rest["rooms"]] == ["c"] and rest["next"] is None
    for args in ({}, {"number": "999"}, {"number": "111", "limit": 0}):
        with pytest.raises(BadRequest):
            ACTIONS["rooms.from"](admin, Args(args), "alice")
    _, messenger_only = _admin({"messenger"})
    with pytest.raises(BadRequest):
        ACTIONS["rooms.from"](messenger_only, Args({"number": "111"}), "alice")
