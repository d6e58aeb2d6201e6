"""Every event type of shared/events.py has a meaning in the job, read from the code, not a copy."""

from __future__ import annotations

from pipeline.meanings import EVENT_MEANINGS, OUTPUTS
from shared.events import EventType


def test_every_event_type_has_a_meaning_in_the_job():
    declared = {str(e) for e in EventType}
    missing = declared - set(EVENT_MEANINGS)
    assert not missing, f"event types with no meaning in pipeline/meanings.py: {sorted(missing)}"
    assert not set(EVENT_MEANINGS) - declared, "pipeline/meanings.py names an event shared/events.py does not have"


def test_each_meaning_names_outputs_the_job_writes_and_says_what_it_means():
    for event, (outputs, meaning) in EVENT_MEANINGS.items():
        assert outputs and outputs <= OUTPUTS, event
        assert len(meaning) > 10, event


def test_the_analytics_page_lists_every_event_type():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "analytics.md").read_text()
    section = page.split("## Every event, and where it goes", 1)[1].split("\n## ", 1)[0]
    assert [e for e in EVENT_MEANINGS if f"`{e}`" not in section] == []
