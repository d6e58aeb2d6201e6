"""`baton statuses replay` logs `statuses_replayed` for what it published,
also when the replay fails half-way, and the failure still ends the command
(the queue and the event log are stand-ins; the integration tests in
tests/integration/test_status_queue.py run it on the emulators)."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from baton_cli import statuses
from baton_cli.main import Env, cli


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


@pytest.fixture
def run(monkeypatch):
    def invoke(log: LoggedReplays) -> Any:
        monkeypatch.setattr(statuses, "_queue", lambda env: HalfWayQueue())
        monkeypatch.setattr(Env, "operators", property(lambda self: log))
        if "statuses" not in cli.commands:
            cli.add_command(statuses.statuses)
        return CliRunner().invoke(cli, ["--actor", "alice", "statuses", "replay"])

    return invoke


def test_what_was_published_before_a_failure_is_logged_and_the_failure_still_fails(run):
    log = LoggedReplays()
    result = run(log)
    assert isinstance(result.exception, RuntimeError) and result.exit_code != 0
    assert log.lines == [("room-a", 2, "alice"), ("room-b", 1, "alice")]


def test_a_line_that_cannot_be_logged_does_not_hide_the_others_or_the_failure(run):
    log = LoggedReplays(fail_for="room-a")
    result = run(log)
    assert isinstance(result.exception, RuntimeError)  # the publish failure, not the logging one
    assert log.lines == [("room-b", 1, "alice")]
