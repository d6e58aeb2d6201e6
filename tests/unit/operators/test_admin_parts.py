"""The admin function's parts without I/O: the caller's identity check, the
incident switch (its cache and its hook in the send path), the request
trace on event lines (issue 44, items 1-3 and 6)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from shared.admin import identity
from shared.admin.identity import Forbidden, Unauthenticated, allowed, local_token, verify_caller
from shared.admin.incident import CACHE_US, HOLD_JITTER_US, HOLD_RECHECK_US, IncidentSwitch
from shared.config import AdminSettings
from shared.events import (
    SPAN_KEY,
    TRACE_KEY,
    DeliveryEvent,
    EventLog,
    reset_request_trace,
    set_request_trace,
    trace_fields,
)
from shared.room import Phase
from shared.service import DeliveryService, ServiceCore
from tests.unit.service.test_faults import Knobs, World, push_body, seams

LOCAL = AdminSettings("local", (), (), "the-key")
GOOGLE = AdminSettings("google", (), ("gcloud-client-id",), "")
URL = "http://baton-admin-1.europe-west1.run.app/"


# ---------------------------------------------------------------- identity


def test_a_local_stand_in_token_verifies_only_with_its_key_and_before_its_expiry():
    token = local_token("the-key", "alice@example.com", now_s=1000)
    assert verify_caller(f"Bearer {token}", URL, LOCAL, now_s=1100).identity == "alice@example.com"
    with pytest.raises(Unauthenticated, match="signature"):
        verify_caller(f"Bearer {local_token('another-key', 'alice@example.com', now_s=1000)}", URL, LOCAL, now_s=1100)
    with pytest.raises(Unauthenticated, match="expired"):
        verify_caller(f"Bearer {token}", URL, LOCAL, now_s=1000 + identity.LOCAL_TOKEN_TTL_S + 1)
    forged = token.replace(token.split(".")[1], "bWFsbG9yeQ")  # another name, the same signature
    with pytest.raises(Unauthenticated):
        verify_caller(f"Bearer {forged}", URL, LOCAL, now_s=1100)
    for header in (None, "", "Basic abc", "Bearer ", "Bearer not-a-token"):
        with pytest.raises(Unauthenticated):
            verify_caller(header, URL, LOCAL, now_s=1100)


def test_operators_list_by_address_or_domain_and_an_empty_list_leaves_it_to_iam():
    ops = ("user:Alice@example.com", "domain:oncall.example.org", "bot@p.iam.gserviceaccount.com")
    assert allowed("alice@example.com", ops) and allowed("bob@oncall.example.org", ops)
    assert allowed("bot@p.iam.gserviceaccount.com", ops)
    assert not allowed("mallory@example.com", ops) and not allowed("alice@example.com.evil", ops)
    assert allowed("anyone@anywhere", ())
    token = local_token("the-key", "mallory@example.com")
    with pytest.raises(Forbidden):
        verify_caller(f"Bearer {token}", URL, dataclasses.replace(LOCAL, operators=ops))


def test_a_google_token_needs_google_as_issuer_an_accepted_audience_and_a_verified_address(monkeypatch):
    claims: dict[str, Any] = {}
    monkeypatch.setattr("google.oauth2.id_token.verify_token", lambda token, request, audience=None: dict(claims))
    good = {"iss": "https://accounts.google.com", "aud": "https://baton-admin-1.europe-west1.run.app",
            "email": "alice@example.com", "email_verified": True}
    for aud in ("https://baton-admin-1.europe-west1.run.app", "gcloud-client-id"):
        claims.update(good, aud=aud)
        caller = verify_caller("Bearer x", URL, GOOGLE)
        assert (caller.identity, caller.verified_by) == ("alice@example.com", "google")
    for bad in ({"iss": "https://evil.example"}, {"aud": "https://another-service.run.app"},
                {"email_verified": False}, {"email": None}):
        claims.clear()
        claims.update(good, **bad)
        with pytest.raises(Unauthenticated):
            verify_caller("Bearer x", URL, GOOGLE)


def test_a_google_token_that_does_not_verify_is_unauthenticated(monkeypatch):
    def refuse(token: str, request: Any, audience: Any = None) -> dict:
        raise ValueError("Could not verify token signature.")

    monkeypatch.setattr("google.oauth2.id_token.verify_token", refuse)
    with pytest.raises(Unauthenticated, match="signature"):
        verify_caller("Bearer x", URL, GOOGLE)


# ---------------------------------------------------------------- the incident switch


class FakeDoc:
    def __init__(self) -> None:
        self.data: dict | None = None
        self.reads = 0
        self.fail = False

    def get(self) -> Any:
        self.reads += 1
        if self.fail:
            raise ConnectionError("firestore down")
        return type("Snap", (), {"exists": self.data is not None, "to_dict": lambda s: dict(self.data or {})})()

    def set(self, data: dict) -> None:
        self.data = dict(data)


class FakeClient:
    def __init__(self) -> None:
        self.doc = FakeDoc()

    def collection(self, name: str) -> Any:
        return type("Col", (), {"document": lambda s, d: self.doc})()


def test_the_switch_holds_sends_once_read_re_reads_at_most_every_cache_period_and_keeps_its_value_on_failure():
    client, now = FakeClient(), [10_000_000]
    switch = IncidentSwitch(client, clock_us=lambda: now[0])
    assert switch.hold_until(now[0]) is None
    other = IncidentSwitch(client, clock_us=lambda: now[0])  # another instance turns it on
    assert other.set(True, "alice@example.com", "meta down")[1]
    assert not other.set(True, "bob@example.com", "again")[1]  # already on: nothing changes
    assert client.doc.data["actor"] == "alice@example.com"
    reads = client.doc.reads
    assert switch.hold_until(now[0] + CACHE_US - 1) is None  # still the cached value
    assert client.doc.reads == reads
    held = switch.hold_until(now[0] + CACHE_US)
    assert now[0] + CACHE_US + HOLD_RECHECK_US <= held < now[0] + CACHE_US + HOLD_RECHECK_US + HOLD_JITTER_US
    client.doc.fail = True
    assert switch.hold_until(now[0] + 3 * CACHE_US) is not None  # unreadable: the last value read stands
    client.doc.fail = False
    other.set(False, "alice@example.com", "meta back")
    assert switch.hold_until(now[0] + 5 * CACHE_US) is None


class StubSwitch:
    def __init__(self) -> None:
        self.on = True

    def hold_until(self, now_us: int) -> int | None:
        return now_us + 15_000_000 if self.on else None


def test_with_the_switch_on_a_push_is_stored_and_its_send_waits_as_the_same_attempt_with_no_call():
    world = World(Knobs())
    switch = StubSwitch()
    service = DeliveryService(ServiceCore(world.settings, world.policy, world.store, world.timers,
                                          {"whatsapp": world.platform}, world.events, incident=switch, **seams(world)))  # type: ignore[arg-type]
    for i in (1, 2):
        assert service.handle_push(push_body("room-i", f"m{i}", "15550001", "hi", f"p{i}",
                                             world.clock.now_us())).status == 200
    state = world.store.load_room("room-i")
    assert world.platform.calls == []
    assert state.in_flight.phase is Phase.PACED and state.in_flight.attempt == 1
    assert state.in_flight.due_at_us >= world.clock.now_us() + 14_000_000
    assert [m.message_id for m in state.pending] == ["m2"]


# ---------------------------------------------------------------- one request, one trace


def test_trace_fields_come_from_the_cloud_trace_header_or_else_traceparent():
    cloud = trace_fields("105445aa7843bc8bf206b12000100000/1;o=1", None, "p")
    assert cloud == {TRACE_KEY: "projects/p/traces/105445aa7843bc8bf206b12000100000", SPAN_KEY: f"{1:016x}"}
    w3c = trace_fields(None, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "p")
    assert w3c == {TRACE_KEY: "projects/p/traces/4bf92f3577b34da6a3ce929d0e0e4736", SPAN_KEY: "00f067aa0ba902b7"}
    assert trace_fields("nonsense", "also-nonsense", "p") == {}
    assert trace_fields(None, None, "p") == {}


def test_an_event_line_carries_the_trace_of_its_request_and_only_while_it_runs(tmp_path, capsys):
    log = EventLog(str(tmp_path / "events.jsonl"))
    event = DeliveryEvent("enqueued", "2026-11-27T00:00:00.000000Z", "enqueue", "room-t", seq=1)  # type: ignore[arg-type]
    token = set_request_trace(trace_fields("105445aa7843bc8bf206b12000100000/7", None, "p"))
    try:
        log.emit(event)
    finally:
        reset_request_trace(token)
    log.emit(event)
    import json

    first, second = (json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines())
    assert first[TRACE_KEY] == "projects/p/traces/105445aa7843bc8bf206b12000100000"
    assert TRACE_KEY not in second


def test_the_admin_settings_refuse_an_unknown_auth_mode_and_a_local_mode_without_its_key(monkeypatch):
    from shared.config import load_admin

    monkeypatch.setenv("ADMIN_AUTH", "none")
    with pytest.raises(ValueError, match="ADMIN_AUTH"):
        load_admin()
    monkeypatch.setenv("ADMIN_AUTH", "local")
    monkeypatch.delenv("ADMIN_LOCAL_KEY", raising=False)
    with pytest.raises(ValueError, match="ADMIN_LOCAL_KEY"):
        load_admin()
    monkeypatch.setenv("ADMIN_LOCAL_KEY", "k")
    monkeypatch.setenv("ADMIN_OPERATORS", " a@x.org, domain:y.org ,")
    assert load_admin() == AdminSettings("local", ("a@x.org", "domain:y.org"), (), "k")


# ---------------------------------------------------------------- bulk actions, recipients


class BulkOperators:
    """`Operators` as the bulk actions use it: rooms' `describe` rows, and each action recorded with its actor."""

    def __init__(self) -> None:
        base = {"queued": 1, "in_flight": None, "state": "holding", "next_ids": ["4 m-4"]}
        self.rooms: dict[str, dict[str, Any]] = {
            "a": {**base, "paused": None, "in_flight_detail": {"seq": 3}},
            "b": {**base, "paused": "by bob: x", "in_flight_detail": None},
        }
        self.done: list[tuple[Any, ...]] = []
        self.store = self

    def describe(self, room_id: str, n_events: int = 10) -> dict[str, Any] | None:
        return self.rooms.get(room_id)

    def _result(self, *call: Any) -> Any:
        from types import SimpleNamespace

        self.done.append(call)
        return SimpleNamespace(changed=True)

    def pause(self, room: str, actor: str, reason: str) -> Any:
        return self._result("pause", room, actor, reason)

    def resume(self, room: str, actor: str, reason: str) -> Any:
        return self._result("resume", room, actor, reason)

    def skip(self, room: str, seq: int, actor: str, reason: str) -> Any:
        return self._result("skip", room, seq, actor, reason)

    def dead_letters(self, room: str, limit: int) -> list[Any]:
        from types import SimpleNamespace

        return [SimpleNamespace(status="waiting", room_id=room, id=f"{room}:1:2")] if room == "b" else []

    def redrive_many(self, items: list[Any], actor: str, reason: str) -> list[Any]:
        return [self._result("redrive", d.id, actor, reason) for d in items]

    def list_rooms(self, kind: str, limit: int, cursor: str | None, older_than_ms: int) -> tuple[list[Any], Any]:
        names = sorted(self.rooms)
        start = int(cursor or 0)
        return [{"room_id": r} for r in names[start:start + limit]], (
            str(start + limit) if start + limit < len(names) else None)

    def rooms_sending_to(self, key: str) -> list[str]:
        return ["a"] if key == "whatsapp:15550001" else []


def _bulk_admin() -> Any:
    from types import SimpleNamespace

    ops = BulkOperators()
    return ops, SimpleNamespace(operators=ops, settings=SimpleNamespace(enabled_providers={"whatsapp", "messenger"}))


def test_a_bulk_dry_run_says_what_each_room_would_see_and_changes_nothing():
    from shared.admin.actions import ACTIONS, Args

    ops, admin = _bulk_admin()
    preview = ACTIONS["rooms.bulk"](admin, Args({"action": "pause", "rooms": ["a", "b", "gone"], "reason": "deploy",
                                                 "dry_run": True}), "alice")
    assert (preview["rooms"], preview["messages"]) == (1, 2)  # a: its queued message and the one in flight
    rows = {r["room_id"]: r for r in preview["per_room"]}
    assert rows["a"]["changes"] and not rows["b"]["changes"]  # b is paused already
    assert "no document" in rows["gone"]["error"] and ops.done == []
    skip = ACTIONS["rooms.bulk"](admin, Args({"action": "skip", "kind": "lag", "reason": "r", "dry_run": True}), "a")
    assert [(r["room_id"], r["seq"]) for r in skip["per_room"]] == [("a", 3), ("b", 4)] and ops.done == []


def test_a_bulk_action_acts_room_by_room_as_the_caller_and_skips_the_seqs_the_operator_saw():
    from shared.admin.actions import ACTIONS, CHANGING, Args

    ops, admin = _bulk_admin()
    assert "rooms.bulk" in CHANGING
    done = ACTIONS["rooms.bulk"](admin, Args({"action": "pause", "rooms": ["a", "b"], "reason": "deploy"}), "alice")
    assert done["rooms"] == 1 and done["actor"] == "alice" and ops.done == [("pause", "a", "alice", "deploy")]
    ops.done.clear()
    ACTIONS["rooms.bulk"](admin, Args({"action": "skip", "rooms": ["a"], "reason": "stuck", "seqs": {"a": 4}}), "al")
    assert ops.done == [("skip", "a", 4, "al", "stuck")]  # not the head now (3): what the preview showed
    ops.done.clear()
    redriven = ACTIONS["rooms.bulk"](admin, Args({"action": "redrive", "rooms": ["a", "b"], "reason": "fixed"}), "al")
    assert (redriven["rooms"], redriven["messages"]) == (1, 1) and ops.done == [("redrive", "b:1:2", "al", "fixed")]


def test_a_bulk_action_refuses_what_it_cannot_do():
    from shared.admin.actions import ACTIONS, Args, BadRequest
    from shared.admin.bulk import BULK_MAX

    _, admin = _bulk_admin()
    for args in ({"action": "delete", "rooms": ["a"], "reason": "r"}, {"action": "pause", "rooms": ["a"]},
                 {"action": "pause", "reason": "r"}, {"action": "pause", "reason": "r", "rooms": ["a"], "kind": "lag"},
                 {"action": "pause", "reason": "r", "rooms": ["x"] * (BULK_MAX + 1)},
                 {"action": "skip", "reason": "r", "rooms": ["a"], "seqs": {"a": "3"}}):
        with pytest.raises(BadRequest):
            ACTIONS["rooms.bulk"](admin, Args(args), "alice")


def test_rooms_are_found_by_the_recipient_of_their_message_in_flight_on_every_provider():
    from shared.admin.actions import ACTIONS, Args

    _, admin = _bulk_admin()
    assert ACTIONS["rooms.to"](admin, Args({"recipient": " 15550001 "}), "a") == {
        "rooms": ["a"], "by_provider": {"whatsapp": ["a"]}}
    assert ACTIONS["rooms.to"](admin, Args({"recipient": "15550001", "provider": "messenger"}), "a")["rooms"] == []
