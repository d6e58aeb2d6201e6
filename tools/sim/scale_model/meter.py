"""Counting what the rooms ask of each component, per second of virtual time.

`Meter.count(component, key, n, at_us)` adds `n` to one key of a component
(an index range, a queue, a document, a function) in the second of `at_us`.
`Meter.rates(component, window_s, scale)` turns the counts into per-second
rates over windows of `window_s` s, multiplied by `scale` (the inverse of the
room sample) unless the component is per document.

`IndexLayout` reads infra/firestore.tf: which room fields keep a single-field
index, which are indexed behind the shard, and so which index range a write
of a field lands in.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DAY_US = 86_400 * 10**6


class Meter:
    """Counts per (component, key, second)."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[tuple[str, int], float]] = defaultdict(lambda: defaultdict(float))

    def count(self, component: str, key: str, n: float, at_us: int) -> None:
        self._counts[component][(key, at_us // 1_000_000)] += n

    def components(self) -> list[str]:
        return sorted(self._counts)

    def total(self, component: str) -> float:
        return sum(self._counts[component].values())

    def rates(self, component: str, window_s: int, scale: float,
              key_scale: dict[str, float] | None = None) -> list[float]:
        """Every (key, window) rate of the component, per second, scaled by
        `key_scale[key]` where given, else by `scale`."""
        windows: dict[tuple[str, int], float] = defaultdict(float)
        for (key, second), n in self._counts[component].items():
            windows[(key, second // window_s)] += n
        return [n * (key_scale or {}).get(key, scale) / window_s for (key, _), n in windows.items()]


    def busiest(self, component: str, window_s: int, scale: float, key_scale: dict[str, float] | None = None) -> str:
        """The key with the highest rate in any window ('' when none)."""
        windows: dict[tuple[str, int], float] = defaultdict(float)
        for (key, second), n in self._counts[component].items():
            windows[(key, second // window_s)] += n * (key_scale or {}).get(key, scale)
        return max(windows, key=windows.__getitem__)[0] if windows else ""

    def rates_of(self, component: str, key: str, window_s: int, scale: float) -> list[float]:
        """The per-second rates of one key of a component over `window_s` windows, scaled."""
        windows: dict[int, float] = defaultdict(float)
        for (k, second), n in self._counts[component].items():
            if k == key:
                windows[second // window_s] += n
        return [n * scale / window_s for n in windows.values()]


def peak_and_p99(rates: list[float]) -> tuple[float, float]:
    """(max, 99th percentile) of a list of rates; (0, 0) when empty."""
    if not rates:
        return 0.0, 0.0
    ordered = sorted(rates)
    return ordered[-1], ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


@dataclass(frozen=True)
class IndexLayout:
    """The room collection's indexes as infra/firestore.tf declares them.

    `exempt`: top-level fields whose single-field indexes are off (their
    subfields too); `sharded`: fields indexed behind (`shard`, field).
    """

    exempt: frozenset[str]
    sharded: frozenset[str]

    @classmethod
    def from_terraform(cls, path: Path) -> IndexLayout:
        """Parse the `room_unindexed` exemptions and the `room_sharded`
        composite indexes of firestore.tf (absent: none)."""
        text = path.read_text()

        def for_each(resource: str) -> frozenset[str]:
            found = re.search(rf'resource "[a-z_]+" "{resource}" \{{\s*for_each\s*=\s*toset\(\[(.*?)\]\)', text, re.S)
            return frozenset(re.findall(r'"([^"]+)"', found.group(1))) if found else frozenset()

        return cls(for_each("room_unindexed"), for_each("room_sharded"))

    def ranges(self, old: dict[str, Any] | None, new: dict[str, Any], now_us: int) -> list[tuple[str, bool]]:
        """The index ranges one room write inserts an entry into:
        [(range name, sequential)], one per indexed value that changed.
        A time value (within a day of now) is sequential: every room writes
        it at the head of its range. Behind a shard, the range is the
        shard's; unsharded, it is the field's whole index."""
        found: list[tuple[str, bool]] = []
        for path, value in _flatten(new):
            top = path.split(".")[0]
            if old is not None and _get(old, path) == value:
                continue
            if value is None:
                continue
            sequential = isinstance(value, int) and not isinstance(value, bool) and abs(value - now_us) < DAY_US
            if top in self.sharded:
                found.append((f"{path}@shard{new.get('shard')}", sequential))
            elif top not in self.exempt:
                found.append((path if sequential else f"{path}@spread", sequential))
        return found


def _flatten(doc: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in doc.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict):
            out.extend(_flatten(value, path + "."))
        elif isinstance(value, list):
            out.extend((path, item) for item in value if not isinstance(item, dict))
        else:
            out.append((path, value))
    return out


def _get(doc: dict[str, Any], path: str) -> Any:
    value: Any = doc
    for part in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value
