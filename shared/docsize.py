"""Firestore's storage size of a document, computed by its documented rules.

Source: "Storage size calculations",
https://cloud.google.com/firestore/docs/storage-size :

- a string (collection id, document id, field name, string value) is its
  UTF-8 bytes + 1;
- integer, floating-point number, timestamp: 8 bytes; boolean and null: 1;
  bytes: their length; array: the sum of its values; map: like a document's
  fields (names + values);
- a document name: the size of every collection id and document id in its
  path + 16;
- a document: its name + the size of every field (name + value) + 32.

A document may be at most 1 MiB = 1,048,576 bytes by that measure
(https://cloud.google.com/firestore/quotas#collections_documents_and_fields).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

MAX_DOCUMENT_BYTES = 1_048_576


def string_size(s: str) -> int:
    """Bytes of a stored string: UTF-8 length + 1."""
    return (len(s) if s.isascii() else len(s.encode("utf-8"))) + 1


def value_size(value: Any) -> int:
    """Bytes of one field value (see the module docstring for the rules).

    Raises:
        TypeError: a type Firestore does not store.
    """
    t = type(value)  # the exact types first: the room's write measures every value of it
    if t is str:
        return string_size(value)
    if t is int or t is float:
        return 8
    if t is dict:
        return fields_size(value)
    if t is list or t is tuple:
        return sum(map(value_size, value))
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float | datetime):
        return 8
    if isinstance(value, str):
        return string_size(value)
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, dict):
        return fields_size(value)
    if isinstance(value, list | tuple):
        return sum(value_size(v) for v in value)
    raise TypeError(f"no Firestore size for {type(value).__name__}")


def fields_size(fields: dict[str, Any]) -> int:
    """Bytes of a map's (or a document's) fields: names + values."""
    return sum(string_size(name) + value_size(v) for name, v in fields.items())


def document_size(path: str, fields: dict[str, Any]) -> int:
    """Bytes of the document at `path` (e.g. `rooms/r-1`) holding `fields`."""
    name = sum(string_size(part) for part in path.split("/")) + 16
    return name + fields_size(fields) + 32
