"""An in-memory stand-in for the part of `google.cloud.firestore.Client` the
send window uses (shared/sender_window.py): documents by collection and id,
`get`, `create` and `update` (each returning the new `update_time`, as
Firestore's `WriteResult` does) on a `last_update_time` precondition, with
Firestore's errors (AlreadyExists, FailedPrecondition, NotFound).

So `make scale-model` runs the real `SenderWindow`, which counts its own
reads and writes (shared/opcounts.py): a change to the window shows in the
model's per-message counts without a change here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from google.api_core import exceptions as gexc


@dataclass(frozen=True)
class _Precondition:
    last_update_time: int


@dataclass(frozen=True)
class WriteResult:
    """What `create` and `update` return: the document's new `update_time`."""

    update_time: int


@dataclass(frozen=True)
class Snapshot:
    """What `DocumentReference.get` returns: `exists`, `to_dict()`, `update_time`."""

    exists: bool
    data: dict[str, Any] | None
    update_time: int | None

    def to_dict(self) -> dict[str, Any] | None:
        return copy.deepcopy(self.data)


class MemFirestore:
    """The client: `collection(name).document(id)`, `write_option(...)`."""

    def __init__(self) -> None:
        self.docs: dict[tuple[str, str], tuple[dict[str, Any], int]] = {}
        self._versions = 0

    def collection(self, name: str) -> _Collection:
        return _Collection(self, name)

    def write_option(self, last_update_time: int) -> _Precondition:
        return _Precondition(last_update_time)

    def _stamp(self) -> int:
        self._versions += 1
        return self._versions


class _Collection:
    def __init__(self, db: MemFirestore, name: str) -> None:
        self._db, self._name = db, name

    def document(self, doc_id: str) -> _Document:
        return _Document(self._db, (self._name, doc_id))


class _Document:
    def __init__(self, db: MemFirestore, key: tuple[str, str]) -> None:
        self._db, self._key = db, key

    def get(self, **_: Any) -> Snapshot:
        stored = self._db.docs.get(self._key)
        return Snapshot(False, None, None) if stored is None else Snapshot(True, copy.deepcopy(stored[0]), stored[1])

    def create(self, fields: dict[str, Any], **_: Any) -> WriteResult:
        if self._key in self._db.docs:
            raise gexc.AlreadyExists(f"{self._key} exists")
        stamp = self._db._stamp()
        self._db.docs[self._key] = (copy.deepcopy(fields), stamp)
        return WriteResult(stamp)

    def update(self, fields: dict[str, Any], option: _Precondition | None = None, **_: Any) -> WriteResult:
        stored = self._db.docs.get(self._key)
        if stored is None:
            raise gexc.NotFound(f"{self._key} does not exist")
        if option is not None and option.last_update_time != stored[1]:
            raise gexc.FailedPrecondition(f"{self._key} changed since it was read")
        stamp = self._db._stamp()
        self._db.docs[self._key] = ({**stored[0], **copy.deepcopy(fields)}, stamp)
        return WriteResult(stamp)
