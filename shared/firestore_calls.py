"""The store's Firestore calls, counted where they leave baton.

`FirestoreCalls` makes the document reads and writes of the store's parts
(shared/records.py; shared/store.py's blind writes and reads) with the
store's retry and timeout, and counts each in the request's operation counts
(shared/opcounts.py) as Firestore bills it
(https://cloud.google.com/firestore/pricing): a document read one read, a
query one read per document found and one at least, a write one write, and
a call that fails nothing (a refused precondition, a document missing or
present: nothing billed was done, the caller reads again or gives up).
"""

from __future__ import annotations

from typing import Any

from google.cloud import firestore
from google.cloud.firestore_v1.base_document import DocumentSnapshot

from shared.opcounts import op_counts


class FirestoreCalls:
    """Counted Firestore calls on one client (module docstring).

    Args:
        client: a `google.cloud.firestore.Client`.
        call: the retry and timeout of each call (`retry`, `timeout`: the
            store's, within its deadline).
    """

    def __init__(self, client: firestore.Client, call: dict[str, Any]) -> None:
        self.client = client
        self.call = call

    def get(self, ref: firestore.DocumentReference, call: dict[str, Any] | None = None) -> DocumentSnapshot[Any]:
        """Read one document (it may not exist): one read. `call`: another
        retry and timeout for this call."""
        snap = ref.get(**(self.call if call is None else call))
        op_counts().firestore_reads += 1
        return snap

    def stream(self, query: Any) -> list[DocumentSnapshot[Any]]:
        """Every document `query` finds: one read each, one at least."""
        rows = list(query.stream(**self.call))
        op_counts().firestore_reads += max(1, len(rows))
        return rows

    def set(self, ref: firestore.DocumentReference, fields: dict[str, Any], merge: bool = False) -> None:
        """Write a document (merged into what is there with `merge`): one write."""
        ref.set(fields, merge=merge, **self.call)
        op_counts().firestore_writes += 1

    def create(self, ref: firestore.DocumentReference, fields: dict[str, Any]) -> None:
        """Create a document.

        Raises:
            google.api_core.exceptions.AlreadyExists: it exists (not counted).
        """
        ref.create(fields, **self.call)
        op_counts().firestore_writes += 1

    def update(self, ref: firestore.DocumentReference, fields: dict[str, Any],
               since: DocumentSnapshot[Any] | None = None, call: dict[str, Any] | None = None) -> None:
        """Update fields of an existing document, only if it has not changed
        since the read `since` when given: one write.

        Raises:
            google.api_core.exceptions.NotFound: no such document (not counted).
            google.api_core.exceptions.FailedPrecondition: it changed since
                `since` (not counted).
        """
        option = None if since is None else self.client.write_option(last_update_time=since.update_time)
        ref.update(fields, option=option, **(self.call if call is None else call))
        op_counts().firestore_writes += 1
