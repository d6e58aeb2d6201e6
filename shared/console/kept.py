"""Answers the console keeps a few seconds per instance, served stale while
one thread asks again (shared/console/app.py: the overview's counts, the
room lists' pages).

On the local stack's emulator every Firestore query scans the whole room
collection (about 0.2-0.6 s at 10,000 rooms on two busy cores, 5 s for the
room list's `shard in [...]` query), and in the cloud the overview's counts
are aggregations over every index shard: an operator reloading a page, or
several operators on one page, should not ask again each time. An answer
younger than its `ttl_s` is served as kept; an older one is served at once
with its time while one background thread asks again (stale while
revalidating); a request with `fresh` (a "count again" link, the page after
an action) waits for a new answer. A failed background ask keeps the older
answer (logged); the next stale view tries again. At most `size` answers
are kept (the oldest asked dropped first).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Kept:
    """One kept answer: when it was asked (monotonic s), the answer, its UTC time (HH:MM:SS)."""

    asked: float
    answer: Any
    as_of: str


class KeptAnswers:
    """Answers by key, each kept `ttl_s` (module docstring)."""

    def __init__(self, ttl_s: float, size: int = 64) -> None:
        self.ttl_s = ttl_s
        self.size = size
        self._kept: dict[Hashable, Kept] = {}
        self._asking: set[Hashable] = set()
        self._lock = threading.Lock()

    def get(self, key: Hashable, ask: Callable[[], tuple[int, Any]], fresh: bool = False
            ) -> tuple[int, Kept | Any]:
        """(200, the `Kept` answer) for `key`, asking `ask()` (which returns
        (HTTP status, answer)) when none is kept or `fresh`; else (the
        status, the error) of a failed ask. Raises what `ask` raises then."""
        kept = self._kept.get(key)
        if kept is None or fresh:
            return self._ask(key, ask)
        if time.monotonic() - kept.asked > self.ttl_s:
            self._ask_in_background(key, ask)
        return 200, kept

    def asking(self, key: Hashable) -> bool:
        """Whether a background ask of `key` is under way."""
        return key in self._asking

    def _ask(self, key: Hashable, ask: Callable[[], tuple[int, Any]]) -> tuple[int, Kept | Any]:
        asked = time.monotonic()
        status, answer = ask()
        if status != 200:
            return status, answer
        kept = Kept(asked, answer, time.strftime("%H:%M:%S", time.gmtime()))
        with self._lock:
            if key not in self._kept or self._kept[key].asked <= asked:
                self._kept[key] = kept
            while len(self._kept) > self.size:
                del self._kept[min(self._kept, key=lambda k: self._kept[k].asked)]
        return 200, kept

    def _ask_in_background(self, key: Hashable, ask: Callable[[], tuple[int, Any]]) -> None:
        with self._lock:
            if key in self._asking:
                return
            self._asking.add(key)

        def again() -> None:
            try:
                self._ask(key, ask)
            except Exception as exc:  # noqa: BLE001 - a transient failure: the page keeps the older answer
                print(json.dumps({"severity": "WARNING", "message": f"console: asking {key!r} again failed: {exc!r}"}),
                      flush=True)
            finally:
                with self._lock:
                    self._asking.discard(key)

        threading.Thread(target=again, name="console-kept", daemon=True).start()
