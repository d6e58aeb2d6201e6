"""`baton rooms to|from|bulk` (issue 48: the CLI gains what the console
has): each calls its admin action as the other commands do; a bulk action
is a dry run unless `--yes`, and then acts on what the dry run showed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from baton_cli import GROUPS
from baton_cli.main import Env, cli

PREVIEW = {"dry_run": True, "action": "skip", "rooms": 1, "messages": 1,
           "per_room": [{"room_id": "a", "changes": True, "messages": 1, "seq": 3},
                        {"room_id": "b", "changes": False, "messages": 0, "seq": None},
                        {"room_id": "gone", "changes": False, "messages": 0, "error": "room 'gone': no document"}]}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any]]]:
    """The admin actions the commands call (`Env.call`), with canned answers."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def call(self: Env, action: str, /, **args: Any) -> Any:
        seen.append((action, {k: v for k, v in args.items() if v is not None}))
        if action == "rooms.to":
            return {"rooms": ["a"], "by_provider": {"whatsapp": ["a"]}}
        if action == "rooms.from":
            return {"number": args["number"], "next": "r1" if not args.get("cursor") else None,
                    "rooms": [{"room_id": "r1", "state": "sending", "in_flight": "1.1", "queued": 0,
                               "head_age_ms": 10.0, "paused": None, "blocked": None}]}
        if action == "rooms.bulk" and args.get("dry_run"):
            return {**PREVIEW, "action": args["action"]}
        return {"dry_run": False, "action": args["action"], "rooms": 1, "messages": 1, "actor": "alice",
                "per_room": [{"room_id": r, "changes": True, "messages": 1, "seq": args.get("seqs", {}).get(r)}
                             for r in args["rooms"]]}

    monkeypatch.setattr(Env, "call", call)
    for group in GROUPS():
        cli.add_command(group)
    return seen


def baton(*args: str) -> Any:
    return CliRunner().invoke(cli, ["--stack", "run/local", *args], catch_exceptions=False)


def test_rooms_to_finds_the_rooms_sending_to_a_recipient(calls):
    out = baton("rooms", "to", "15550001", "--provider", "whatsapp")
    assert out.exit_code == 0 and "a" in out.output and "whatsapp" in out.output
    assert calls == [("rooms.to", {"recipient": "15550001", "provider": "whatsapp"})]


def test_rooms_from_lists_a_number_s_rooms_a_page_at_a_time(calls):
    out = baton("rooms", "from", "111", "--limit", "1")
    assert out.exit_code == 0 and "r1" in out.output and "--cursor 'r1'" in out.output
    assert json.loads(baton("rooms", "from", "111", "--cursor", "r1", "--json").output)["next"] is None
    assert calls == [("rooms.from", {"number": "111", "limit": 1}),
                     ("rooms.from", {"number": "111", "limit": 50, "cursor": "r1"})]


def test_a_bulk_action_is_a_dry_run_without_yes(calls):
    out = baton("rooms", "bulk", "skip", "a", "b", "gone", "--reason", "stuck")
    assert out.exit_code == 0 and "dry run of skip, nothing changed" in out.output and "no document" in out.output
    assert calls == [("rooms.bulk", {"dry_run": True, "action": "skip", "reason": "stuck", "rooms": ["a", "b", "gone"]})]


def test_a_bulk_action_with_yes_acts_on_the_rooms_and_seqs_its_dry_run_showed(calls):
    out = baton("rooms", "bulk", "skip", "--list", "lag", "--limit", "3", "--reason", "stuck", "--yes")
    assert out.exit_code == 0 and "skip by alice" in out.output
    assert calls == [("rooms.bulk", {"dry_run": True, "action": "skip", "reason": "stuck", "kind": "lag", "limit": 3,
                                     "older_than_ms": 0}),
                     ("rooms.bulk", {"action": "skip", "reason": "stuck", "rooms": ["a"], "seqs": {"a": 3}})]


def test_a_bulk_action_needs_rooms_or_a_list_and_a_reason(calls):
    assert baton("rooms", "bulk", "pause", "--reason", "r").exit_code == 2
    assert baton("rooms", "bulk", "pause", "a", "--list", "lag", "--reason", "r").exit_code == 2
    assert baton("rooms", "bulk", "pause", "a").exit_code == 2
    assert baton("rooms", "bulk", "delete", "a", "--reason", "r").exit_code == 2
    assert calls == []


def test_an_action_s_own_action_argument_reaches_the_admin_function(monkeypatch):
    import requests

    sent: list[Any] = []

    class Answer:
        status_code = 200

        def json(self) -> Any:
            return {"result": {"ok": True}}

    monkeypatch.setattr(requests, "post", lambda url, json, headers, timeout: sent.append(json) or Answer())
    env = Env(admin_url="http://admin.invalid/")
    env.__dict__["endpoint"] = ("http://admin.invalid/", lambda: "t")  # the cached property, set
    assert env.call("rooms.bulk", action="pause", rooms=["a"], reason="r", dry_run=True) == {"ok": True}
    assert sent == [{"action": "rooms.bulk", "args": {"action": "pause", "rooms": ["a"], "reason": "r",
                                                      "dry_run": True}}]


def test_status_shows_the_rooms_in_flight_from_each_sending_number(monkeypatch):
    overview = {"incident": {"on": False}, "rooms": {"holding": 3, "in_flight": 3},
                "in_flight_by_provider": {"whatsapp": 3}, "in_flight_by_number": {"111": 2, "222": 1},
                "dead_letters_kept": 0, "rejected_pushes_kept": 0, "scheduled": {"count": 0, "at_least": False},
                "deployment": {"project": "p", "index_shards": 16, "providers": ["whatsapp"],
                               "webhook_mode": "direct", "watchdog_grace_ms": 1}}
    monkeypatch.setattr(Env, "call", lambda self, action, /, **args: overview)
    for group in GROUPS():
        cli.add_command(group)
    out = baton("status")
    assert out.exit_code == 0 and "in flight from WhatsApp number 111" in out.output, out.output
