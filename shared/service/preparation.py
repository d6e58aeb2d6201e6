"""Preparation handler: a prepare task uploads a message's media and stores the
result in its room.

Prepares; the room's rules decide when (shared/room/preparation.py).
"""

from __future__ import annotations

import json

from shared.prepare import tag_media
from shared.providers.registry import has_numbers
from shared.push import ROOM_ID
from shared.room import (
    Prepared,
    PrepareFailed,
    RoomEvent,
)
from shared.service.core import Reply, ServiceCore


class PreparationHandlers:
    """The `prepare` function.

    Args:
        core: applies each event to its room (shared/service/core.py).
    """

    def __init__(self, core: ServiceCore) -> None:
        self.core = core

    def handle_prepare(self, body: bytes) -> Reply:
        """A prepare task (shared/prepare.py): prepare message `seq` of a room
        (upload its media), then store the result in the room (`Prepared`, or
        `PrepareFailed`, which the room retries with its own backoff).

        - A message that no longer needs it (ended, already prepared, another
          incarnation) is answered 200 at once: nothing to do.
        - A transient failure (TRANSIENT_ERRORS: Firestore unreachable)
          raises: 503, Cloud Tasks retries the task, which may upload again;
          the room keeps the first result.
        - A body that is not a prepare task is answered 200 (`dropped`) and
          logged as an error: retrying cannot mend it, and the head's
          PREPARE_TIMEOUT_MS asks again for any preparation it was meant for.
        """
        arrived = self.core.now_us()
        try:
            t = json.loads(body)
            room_id = str(t["room_id"])
            incarnation, seq, attempt = int(t["incarnation"]), int(t["seq"]), int(t["attempt"])
            if not ROOM_ID.fullmatch(room_id):
                raise ValueError(f"bad room id {room_id[:80]!r}")
        except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
            reason = f"not a prepare task: {type(exc).__name__}: {exc}"[:300]
            print(json.dumps({"severity": "ERROR", "message": f"prepare: dropped a task: {reason}"}), flush=True)
            return Reply(200, {"result": "dropped", "error": reason})
        state = self.core.store.load_room(room_id)
        found = state.message(seq) if state is not None and state.incarnation == incarnation else None
        msg = found[0] if found is not None else None
        if msg is None or not msg.needs_preparation or msg.prep_failed is not None:
            return Reply(200, {"result": "nothing to prepare"})
        # Media uploaded with one number can be sent by that number only.
        own = f"{msg.provider}:{msg.sender}" in self.core.preparers
        preparer = self.core.preparers.get(f"{msg.provider}:{msg.sender}") or self.core.preparers.get(msg.provider)
        if preparer is None or msg.media_kind is None or msg.media_link is None:
            event: RoomEvent = PrepareFailed(incarnation, seq, attempt,
                                             f"no way to prepare a {msg.media_kind} message for {msg.provider}",
                                             True, self.core.now_us())
        else:
            result = preparer.prepare_media(msg.media_kind, msg.media_link)
            done = self.core.now_us()
            if result.media_id is not None:
                # Kept with the number that uploaded it (plain `whatsapp` is the first number): the send
                # uses the id only from that number (core._send).
                number = msg.sender if own else \
                    self.core.settings.whatsapp_sender_specs[0].phone_number_id if has_numbers(msg.provider) else None
                event = Prepared(incarnation, seq, attempt, tag_media(number, result.media_id),
                                 (done - arrived) / 1000, done)
            else:
                event = PrepareFailed(incarnation, seq, attempt, result.error or "preparation failed",
                                      result.permanent, done)
        self.core.apply(room_id, event, "prepare")
        return Reply(200, {"result": "prepared" if isinstance(event, Prepared) else "failed"})
