"""`statuses.replay` (the admin function's side of `baton statuses replay`)
logs `statuses_replayed` for what it published, also when the replay fails
half-way, and the failure still ends the request (the queue and the event
log are stand-ins; the integration tests in tests/integration/test_status_queue.py
run the queue on the emulators)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.admin.actions import Admin, Args, statuses_replay


class LoggedReplays:
    def __init__(self, fail_for: str | None = None) -> None:
        self.lines: list[tuple[str, int, str]] = []
        self.fail_for = fail_for

    def log_statuses_replayed(self, target: str, count: int, actor: str) -> None:
        if target == self.fail_for:
            raise OSError("event log unwritable")
        self.lines.append((target, count, actor))


class HalfWayQueue:
    """Publishes two of room-a's messages and one of room-b's, then a publish fails."""

    def replay(self, room: str | None, limit: int, on_replayed: Any) -> dict[str, int]:
        for target in ("room-a", "room-a", "room-b"):
            on_replayed(target)
        raise RuntimeError("publish failed")


def run(log: LoggedReplays) -> None:
    admin = Admin(log, None, None, HalfWayQueue, None, None)  # type: ignore[arg-type]
    statuses_replay(admin, Args({}), "alice@example.com")


def test_what_was_published_before_a_failure_is_logged_and_the_failure_still_fails():
    log = LoggedReplays()
    with pytest.raises(RuntimeError, match="publish failed"):
        run(log)
    assert log.lines == [("room-a", 2, "alice@example.com"), ("room-b", 1, "alice@example.com")]


def test_a_line_that_cannot_be_logged_does_not_hide_the_others_or_the_failure():
    log = LoggedReplays(fail_for="room-a")
    with pytest.raises(RuntimeError, match="publish failed"):  # the publish failure, not the logging one
        run(log)
    assert log.lines == [("room-b", 1, "alice@example.com")]
