"""The rooms per WhatsApp sending number: the overview's counts and the
admin API's `rooms.from` listing (the console's overview links each count
to it; `baton rooms from NUMBER`).

A room's document holds `in_flight_from`, the phone-number id its attempt
in flight goes out from (shared/room_document.py; None while nothing is in
flight, and for other platforms), on Firestore's automatic single-field
index: a count aggregation per configured number (`WHATSAPP_SENDERS`,
`Settings.whatsapp_sender_specs`), all asked at once, and a listing by
room id that reads the rooms it shows (the store's `numbers`, a
`SendingNumberQueries` of shared/room_queries.py).
"""

from __future__ import annotations

import time
from typing import Any

from shared.admin.actions import Admin, Args, BadRequest
from shared.operators import room_row
from shared.providers.registry import has_numbers
from shared.room_document import room_as_read


def sending_numbers(settings: Any) -> list[str]:
    """The deployment's WhatsApp phone-number ids, in `WHATSAPP_SENDERS`
    order; none when no enabled provider sends from numbers (`has_numbers`)."""
    if not any(has_numbers(p) for p in settings.enabled_providers):
        return []
    return [spec.phone_number_id for spec in settings.whatsapp_sender_specs]


def rooms_from(admin: Admin, args: Args, actor: str) -> dict[str, Any]:
    """`rooms.from`: one page (`limit`, default 50) of the rooms with an
    attempt in flight from WhatsApp number `number`, by room id, from
    `cursor` (an earlier page's `next`); rows as `rooms.list`'s.

    Raises:
        BadRequest: `number` missing or not one of the deployment's numbers.
    """
    number = (args.text("number", required=True) or "").strip()
    numbers = sending_numbers(admin.settings)
    if number not in numbers:
        raise BadRequest(f"`number` must be one of the deployment's WhatsApp numbers: {', '.join(numbers) or 'none'}")
    rows, cursor = admin.operators.store.numbers.list_sending_from(number, args.number("limit", 50, 1, 1000),
                                                                   args.text("cursor"))
    now = time.time_ns() // 1000
    return {"number": number, "rooms": [room_row(room_as_read(r, d, now), d, now) for r, d in rows], "next": cursor}
