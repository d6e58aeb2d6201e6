"""Firestore calls, counted where they leave baton.

`FirestoreCalls` makes the Firestore calls of the store and its parts
(shared/store.py's room transaction and blind writes, shared/records.py,
shared/room_queries.py), of the sender window (shared/sender_window.py) and
of the status queue's failure counts (shared/status_queue.py), with the
caller's retry and timeout, and counts each in the request's operation
counts (shared/opcounts.py) as Firestore bills it
(https://cloud.google.com/firestore/pricing): a document read one read, a
query one read per document found and one at least, a count aggregation one
read (per 1,000 index entries counted:
https://cloud.google.com/firestore/pricing#aggregation_queries), a write
one write, a batch's commit one write per document it writes, and a call
that fails nothing (a refused precondition, a document missing or present:
nothing billed was done, the caller reads again or gives up), unless the
calls are built with `writes_tried` (each write counted whatever its answer:
the sender window's counts). A commit whose answer was lost but which
landed (a later read shows its write id: shared/store.py) is counted by
`landed` once the caller knows. Inside `opcounts.counted_as(tag)` every
read and write also counts as that tag's share (`window_*`, `proof_*`).

The counts of calls run in parallel (`stream_all`, `count_all`) are taken
in the caller's thread: a worker thread does not see the request's counters.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from google.cloud import firestore
from google.cloud.firestore_v1.base_document import DocumentSnapshot

from shared.opcounts import current_tag, op_counts

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
# Calls one `stream_all` or `count_all` makes at a time (threads of one call).
PARALLEL_CALLS = 16


class FirestoreCalls:
    """Counted Firestore calls on one client (module docstring).

    Args:
        client: a `google.cloud.firestore.Client`.
        call: the retry and timeout of each call (`retry`, `timeout`: the
            store's, within its deadline; `{}`: the client's defaults).
        writes_tried: count every write tried, refused or failed too (the
            sender window's counts); else only the writes that were made.
    """

    def __init__(self, client: firestore.Client, call: dict[str, Any], writes_tried: bool = False) -> None:
        self.client = client
        self.call = call
        self.writes_tried = writes_tried

    @staticmethod
    def _reads(n: int) -> None:
        counts, tag = op_counts(), current_tag()
        counts.firestore_reads += n
        if tag == "window":
            counts.window_reads += n
        elif tag == "proof":
            counts.proof_reads += n

    @staticmethod
    def _writes(n: int) -> None:
        counts, tag = op_counts(), current_tag()
        counts.firestore_writes += n
        if tag == "window":
            counts.window_writes += n
        elif tag == "proof":
            counts.proof_writes += n

    def _write(self, n: int, write: Callable[[], T]) -> T:
        """Make `write` (`n` documents written), counting it as made or, with
        `writes_tried`, as tried."""
        try:
            result = write()
        except BaseException:
            if self.writes_tried:
                self._writes(n)
            raise
        self._writes(n)
        return result

    # -- reads

    def get(self, ref: firestore.DocumentReference, call: dict[str, Any] | None = None) -> DocumentSnapshot[Any]:
        """Read one document (it may not exist): one read. `call`: another
        retry and timeout for this call."""
        snap = ref.get(**(self.call if call is None else call))
        self._reads(1)
        return snap

    def stream(self, query: Any) -> list[DocumentSnapshot[Any]]:
        """Every document `query` finds: one read each, one at least."""
        rows = list(query.stream(**self.call))
        self._reads(max(1, len(rows)))
        return rows

    def stream_all(self, queries: Mapping[K, Any]) -> dict[K, list[DocumentSnapshot[Any]]]:
        """Every document each of `queries` finds, the queries asked in
        parallel (one at a time when there is one): per query one read each,
        one at least, counted here once all have answered."""
        if not queries:
            return {}

        def ask(key: K) -> list[DocumentSnapshot[Any]]:
            return list(queries[key].stream(**self.call))

        keys = list(queries)
        if len(keys) == 1:
            pages = {keys[0]: ask(keys[0])}
        else:
            with ThreadPoolExecutor(max_workers=min(len(keys), PARALLEL_CALLS)) as pool:
                pages = dict(zip(keys, pool.map(ask, keys), strict=True))
        self._reads(sum(max(1, len(page)) for page in pages.values()))
        return pages

    def count(self, query: Any, timeout_s: float) -> int:
        """How many documents `query` matches, by a count aggregation of at
        most `timeout_s` (s): one read."""
        return self.count_all([query], timeout_s)[0]

    def count_all(self, queries: list[Any], timeout_s: float) -> list[int]:
        """`count` of each of `queries`, asked in parallel (one at a time when
        there is one): one read each, counted here once all have answered."""
        call = {**self.call, "timeout": timeout_s}

        def ask(query: Any) -> int:
            return int(query.count(alias="n").get(**call)[0][0].value)

        if len(queries) <= 1:
            counted = [ask(q) for q in queries]
        else:
            with ThreadPoolExecutor(max_workers=min(len(queries), PARALLEL_CALLS)) as pool:
                counted = list(pool.map(ask, queries))
        self._reads(len(counted))
        return counted

    # -- writes

    def set(self, ref: firestore.DocumentReference, fields: dict[str, Any], merge: bool = False) -> Any:
        """Write a document (merged into what is there with `merge`): one write."""
        return self._write(1, lambda: ref.set(fields, merge=merge, **self.call))

    def create(self, ref: firestore.DocumentReference, fields: dict[str, Any]) -> Any:
        """Create a document; returns the write's result (its `update_time`).

        Raises:
            google.api_core.exceptions.AlreadyExists: it exists (not counted).
        """
        return self._write(1, lambda: ref.create(fields, **self.call))

    def update(self, ref: firestore.DocumentReference, fields: dict[str, Any],
               since: DocumentSnapshot[Any] | None = None, call: dict[str, Any] | None = None, *,
               last_update_time: Any = None) -> Any:
        """Update fields of an existing document, only if it has not changed
        since the read `since` (or since `last_update_time`, an earlier
        write's `update_time`) when given: one write. Returns the write's
        result (its `update_time`).

        Raises:
            google.api_core.exceptions.NotFound: no such document (not counted).
            google.api_core.exceptions.FailedPrecondition: it changed since
                `since` (not counted).
        """
        if since is not None:
            last_update_time = since.update_time
        option = None if last_update_time is None else self.client.write_option(last_update_time=last_update_time)
        return self._write(1, lambda: ref.update(fields, option=option, **(self.call if call is None else call)))

    def commit(self, batch: Any, writes: int) -> Any:
        """Commit `batch` (a `WriteBatch` of `writes` documents written): that
        many writes once it is committed.

        Raises:
            google.api_core.exceptions.GoogleAPICallError: refused (a
                precondition), or its answer lost (not counted: `landed`
                counts it when a later read shows it landed).
        """
        return self._write(writes, lambda: batch.commit(**self.call))

    def landed(self, writes: int) -> None:
        """A commit of `writes` documents whose answer was lost (an error)
        landed, as a later read showed: its writes, billed all the same."""
        self._writes(writes)
