"""The README documents every setting and every event type the code has."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import ENV_VARS, load
from shared.events import EVENT_FIELDS, EventType

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.mark.parametrize("name", sorted(ENV_VARS))
def test_every_environment_variable_is_in_the_readme(name):
    assert f"`{name}`" in README


@pytest.mark.parametrize("event", [str(e) for e in EventType])
def test_every_event_type_is_in_the_readme(event):
    assert f"`{event}`" in README


@pytest.mark.parametrize("field", sorted(EVENT_FIELDS))
def test_every_event_field_is_in_the_readme(field):
    assert f"`{field}`" in README


def test_config_rejects_a_send_timeout_not_below_the_ack_timeout(monkeypatch):
    monkeypatch.setenv("ACK_TIMEOUT_MS", "1000")
    monkeypatch.setenv("SEND_TIMEOUT_MS", "1000")
    with pytest.raises(ValueError, match="SEND_TIMEOUT_MS"):
        load()
    monkeypatch.setenv("SEND_TIMEOUT_MS", "abc")
    with pytest.raises(ValueError, match="not a whole number"):
        load()
