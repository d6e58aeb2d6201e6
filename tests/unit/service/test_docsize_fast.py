"""Firestore's storage size (shared/docsize.py), measured on every room write,
takes its exact types first: it gives the sizes the documented rules give, as
the rules' plain reading below does, for any value Firestore stores."""

from __future__ import annotations

import enum
import random
from datetime import UTC, datetime
from typing import Any

import pytest

from shared import docsize


def rules_size(value: Any) -> int:
    """The module docstring's rules, read plainly (the code before the fast path)."""
    if value is None or isinstance(value, bool):
        return 1
    if isinstance(value, int | float | datetime):
        return 8
    if isinstance(value, str):
        return len(value.encode("utf-8")) + 1
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, dict):
        return sum(len(k.encode("utf-8")) + 1 + rules_size(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return sum(rules_size(v) for v in value)
    raise TypeError(type(value).__name__)


class Kind(enum.StrEnum):
    SENT = "sent"


class Level(enum.IntEnum):
    HIGH = 3


class Box(dict):  # type: ignore[type-arg]
    pass


def random_value(rng: random.Random, depth: int = 0) -> Any:
    leaves = [None, True, False, 0, -(2**63), 2**63 - 1, 1.5, "", "ascii", "é ü", "🙂x", b"\x00\x01\x02",
              datetime(2026, 11, 28, tzinfo=UTC), Kind.SENT, Level.HIGH]
    if depth < 3 and rng.random() < 0.4:
        if rng.random() < 0.5:
            d = {rng.choice(["a", "ñame", "k_1", "🙂", "x" * rng.randrange(1, 40)]) + str(i): random_value(rng, depth + 1)
                 for i in range(rng.randrange(0, 5))}
            return Box(d) if rng.random() < 0.2 else d
        items = [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 5))]
        return tuple(items) if rng.random() < 0.3 else items
    return rng.choice(leaves)


def test_sizes_are_the_rules_sizes():
    rng = random.Random(3)
    for _ in range(2000):
        fields = {f"f{i}": random_value(rng) for i in range(rng.randrange(1, 8))}
        assert docsize.fields_size(fields) == rules_size(fields)
        assert docsize.document_size("rooms/r-é", fields) == rules_size(fields) + 6 + 5 + 16 + 32
        for v in fields.values():
            assert docsize.value_size(v) == rules_size(v)


def test_what_firestore_does_not_store_is_still_refused():
    for bad in ({1, 2}, object(), {"a": [1, {"b": object()}]}):
        with pytest.raises(TypeError):
            docsize.value_size(bad)
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate has no UTF-8 bytes, as before
        docsize.string_size("\ud800")
