"""The watchdog's second query: the rooms recent sweeps left idle.

A sweep is not redelivered: when its process dies after committing a
room's last end (the room idle, nothing to wake it), no request reads the
room again and the end's outbox line (shared/outbox.py) would stay unlogged
until TTL deletes the document. Such a write stores `outbox.SWEPT` (epoch
us); each sweep asks for the rooms whose `SWEPT` is recent (within
SWEEP_REREAD_S) and reads them, which logs that write's entry
(`outbox.of_sweep`). Composed into `shared.store.RoomStore` (its
`recently_swept`), beside `RoomQueries`.
"""

from __future__ import annotations

from google.cloud.firestore_v1.base_query import FieldFilter

from shared import outbox
from shared.firestore_calls import FirestoreCalls
from shared.room_document import ROOMS


class SweptRooms:
    """The rooms a sweep's write left idle (`outbox.SWEPT`)."""

    def __init__(self, calls: FirestoreCalls) -> None:
        """The store's counted calls (its client, retry and timeout)."""
        self._fs = calls

    def recently_swept(self, since_us: int, limit: int) -> list[str]:
        """Ids of at most `limit` rooms whose last write a sweep made at or
        after `since_us` (epoch us) and left idle, oldest first (ties by
        id): one range query (`swept_at_us >= since_us`) on Firestore's
        automatic single-field index of `outbox.SWEPT` (not exempt in
        infra/firestore.tf; absent from every other write, so only these
        rooms are in it), ids only. Billed one read at least (a query that
        finds nothing is billed one read,
        https://cloud.google.com/firestore/pricing#minimum-charge), and one
        per room found."""
        query = (self._fs.client.collection(ROOMS).where(filter=FieldFilter(outbox.SWEPT, ">=", since_us))
                 .order_by(outbox.SWEPT).order_by("__name__").limit(limit))
        return [snap.id for snap in self._fs.stream(query.select([]))]
