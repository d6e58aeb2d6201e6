"""The console's pages over a recorded admin API (shared/console/app.py):
identity first, CSRF on every POST, a dry run before each action, and
nothing but what the actions answer, escaped."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.admin.identity import Caller, Unauthenticated
from shared.admin.timeline import LocalEventLog, timeline
from shared.console.app import Console
from shared.console.csrf import Csrf, CsrfRefused
from shared.service import Reply

ROOM = {"room_id": "r<1>", "state": "paused", "in_flight": None, "queued": 2, "overdue_ms": None,
        "head_age_ms": 1200.0, "paused": "by alice: deploy", "blocked": None, "incarnation": 1, "next_seq": 3,
        "in_flight_detail": None, "next_ids": ["1 m-1", "2 m-2"], "awaiting": [], "paused_since": "t",
        "counts": {"acked": 4}, "expire_at": None, "events": []}


class FakeAdmin:
    """AdminService's `verify` and `run`, recording each action run."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any], str]] = []

    def verify(self, authorization: str | None, own_url: str) -> Caller:
        if authorization != "Bearer good":
            raise Unauthenticated("no bearer token")
        return Caller("alice@example.com", "google")

    def run(self, action: str, args: dict[str, Any], caller: Caller) -> Reply:
        self.calls.append((action, args, caller.identity))
        if action == "rooms.show":
            return Reply(200, {"result": ROOM}) if args["room"] == "r<1>" else Reply(404, {"error": "no room"})
        if action == "rooms.find":
            return Reply(200, {"result": {"message_id": args["message_id"], "rooms": ["r<1>"]}})
        if action == "rooms.timeline":
            return Reply(200, {"result": {"events": [], "messages": []}})
        if action == "dead_letters.list":
            return Reply(200, {"result": []})
        if action == "rooms.list":
            return Reply(200, {"result": {"rooms": [ROOM], "next": "5:r<1>"}})
        if action == "rooms.pause":
            if args.get("dry_run"):
                return Reply(200, {"result": {"dry_run": True, "rooms": 1, "messages": 2}})
            return Reply(200, {"result": [{"room_id": args["room"]}]})
        return Reply(400, {"error": f"unexpected {action}"})


def page(console: Console, method: str, path: str, query: dict[str, str] | None = None,
         form: dict[str, str] | None = None, auth: str | None = "Bearer good") -> Any:
    return console.handle(method, path, query or {}, form or {}, auth, "http://x/")


def csrf_of(body: str) -> str:
    return body.split('name="csrf" value="', 1)[1].split('"', 1)[0]


def test_no_identity_no_page_and_no_action_runs():
    admin = FakeAdmin()
    console = Console(admin)
    for method, path in (("GET", "/console/"), ("GET", "/console/room"), ("POST", "/console/act")):
        assert page(console, method, path, auth=None).status == 401
    assert admin.calls == []


def test_a_post_without_the_callers_csrf_token_is_refused_and_changes_nothing():
    admin = FakeAdmin()
    console = Console(admin)
    form = {"action": "pause", "room": "r<1>", "reason": "r", "step": "confirm"}
    assert page(console, "POST", "/console/act", form=form).status == 403
    other = Csrf().token("alice@example.com")  # another instance's key
    assert page(console, "POST", "/console/act", form={**form, "csrf": other}).status == 403
    assert admin.calls == []


def test_an_action_shows_its_dry_run_then_runs_once_confirmed_as_the_verified_caller():
    admin = FakeAdmin()
    console = Console(admin)
    room_page = page(console, "GET", "/console/room", {"id": "r<1>"})
    token = csrf_of(room_page.body)
    form = {"action": "pause", "room": "r<1>", "reason": "noisy room", "csrf": token, "step": "preview"}
    preview = page(console, "POST", "/console/act", form=form)
    assert preview.status == 200 and "2 message(s) in 1 room(s)" in preview.body
    assert admin.calls[-1] == ("rooms.pause", {"dry_run": True, "reason": "noisy room", "room": "r<1>"},
                               "alice@example.com")
    done = page(console, "POST", "/console/act", form={**form, "csrf": csrf_of(preview.body), "step": "confirm"})
    assert done.status == 303 and done.headers["Location"] == "/console/room?id=r%3C1%3E&done=pause"
    assert admin.calls[-1] == ("rooms.pause", {"reason": "noisy room", "room": "r<1>"}, "alice@example.com")


def test_an_action_without_a_reason_is_refused_before_the_api():
    admin = FakeAdmin()
    console = Console(admin)
    token = csrf_of(page(console, "GET", "/console/room", {"id": "r<1>"}).body)
    before = len(admin.calls)
    r = page(console, "POST", "/console/act", form={"action": "pause", "room": "r<1>", "reason": " ", "csrf": token})
    assert r.status == 400 and len(admin.calls) == before


def test_pages_escape_what_they_show_and_search_finds_a_room_by_message_id():
    console = Console(FakeAdmin())
    room_page = page(console, "GET", "/console/room", {"id": "r<1>"})
    assert room_page.status == 200 and "r<1>" not in room_page.body and "r&lt;1&gt;" in room_page.body
    assert "default-src 'none'" in room_page.headers["Content-Security-Policy"]
    found = page(console, "GET", "/console/rooms", {"q": "m-1"})
    assert found.status == 303 and found.headers["Location"] == "/console/room?id=r%3C1%3E"
    listing = page(console, "GET", "/console/rooms", {"kind": "paused"})
    assert 'href="/console/rooms?kind=paused&amp;cursor=5%3Ar%3C1%3E"' in listing.body


def test_csrf_tokens_expire_and_belong_to_one_identity():
    csrf = Csrf(b"k" * 32)
    token = csrf.token("alice", now_s=1000)
    csrf.check(token, "alice", now_s=1000 + 60)
    with pytest.raises(CsrfRefused):
        csrf.check(token, "bob", now_s=1000 + 60)
    with pytest.raises(CsrfRefused):
        csrf.check(token, "alice", now_s=1000 + 3 * 3600)


def test_the_local_event_log_index_follows_the_file_as_it_grows_and_when_rewritten(tmp_path):
    path = tmp_path / "events.jsonl"

    def write(mode: str, *events: dict[str, Any]) -> None:
        with path.open(mode) as fh:
            for e in events:
                fh.write(json.dumps(e) + "\n")

    log = LocalEventLog(path)
    assert log.last_events("a", 10) == [] and log.rooms_with_message("m1", 5) == []
    write("w", {"room_id": "a", "event": "enqueued", "seq": 1, "message_id": "m1", "ts": "1"},
          {"room_id": "b", "event": "enqueued", "seq": 1, "message_id": "m1", "ts": "2"})
    assert log.rooms_with_message("m1", 5) == ["b", "a"]
    write("a", {"room_id": "a", "event": "acked", "seq": 1, "message_id": "m1", "ts": "3", "send_to_ack_ms": 40.0})
    assert [e["event"] for e in log.last_events("a", 10)] == ["enqueued", "acked"]
    assert log.rooms_with_message("m1", 1) == ["a"]
    write("w", {"room_id": "c", "event": "enqueued", "seq": 1, "message_id": "m9", "ts": "4"})
    assert log.last_events("a", 10) == [] and log.rooms_with_message("m9", 5) == ["c"]


def test_the_timeline_gives_each_message_its_outcome_and_latencies_and_keeps_operator_lines():
    t = timeline([
        {"ts": "3", "event": "acked", "seq": 1, "attempt": 1, "message_id": "m1", "send_to_ack_ms": 40.0},
        {"ts": "1", "event": "enqueued", "seq": 1, "message_id": "m1", "published_at": "0"},
        {"ts": "2", "event": "sent", "seq": 1, "attempt": 1, "message_id": "m1", "publish_to_send_ms": 12.0},
        {"ts": "4", "event": "paused", "actor": "alice", "reason": "deploy"},
    ])
    assert [e["event"] for e in t["events"]] == ["enqueued", "sent", "acked", "paused"]
    assert t["events"][-1]["actor"] == "alice"
    assert t["messages"] == [{"seq": 1, "message_id": "m1", "published": "0", "first_sent": "2", "outcome": "acked",
                              "ended": "3", "publish_to_send_ms": 12.0, "send_to_ack_ms": 40.0}]


def test_a_room_actions_dry_run_says_what_it_would_touch_and_changes_nothing():
    from types import SimpleNamespace

    from shared.admin.actions import Args, NotFound, rooms_pause, rooms_resume, rooms_skip

    class Operators:
        def __init__(self, info: dict[str, Any] | None) -> None:
            self.info, self.acted = info, []

        def describe(self, room_id: str, n_events: int = 10) -> dict[str, Any] | None:
            return self.info

        def pause(self, *a: Any) -> Any:
            self.acted.append(a)

    busy = {**ROOM, "paused": None, "in_flight": "1.2", "in_flight_detail": {"seq": 1}, "queued": 2,
            "next_ids": ["2 m-2", "3 m-3"]}
    ops = Operators(busy)
    admin = SimpleNamespace(operators=ops)
    preview = rooms_pause(admin, Args({"room": "r", "reason": "x", "dry_run": True}), "alice")
    assert (preview["rooms"], preview["messages"], preview["changes"]) == (1, 3, True) and ops.acted == []
    assert rooms_resume(admin, Args({"room": "r", "dry_run": True}), "alice")["rooms"] == 0  # not paused
    assert rooms_skip(admin, Args({"room": "r", "reason": "x", "seq": 3, "dry_run": True}), "a")["messages"] == 1
    assert rooms_skip(admin, Args({"room": "r", "reason": "x", "seq": 9, "dry_run": True}), "a")["messages"] == 0
    ops.info = ROOM  # paused already
    assert rooms_pause(admin, Args({"room": "r", "reason": "x", "dry_run": True}), "alice")["rooms"] == 0
    ops.info = None
    with pytest.raises(NotFound):
        rooms_pause(admin, Args({"room": "r", "reason": "x", "dry_run": True}), "alice")


# ---------------------------------------------------------------- the overview's last hour


def _ts(epoch_s: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_s)) + f".{int(epoch_s % 1 * 1e6):06d}Z"


def test_the_last_hour_counts_outcomes_per_bucket_and_provider_and_forgets_what_is_older():
    from shared.admin.recent import RecentActivity

    now = 1_800_000_000  # epoch s, on a 5-minute boundary
    recent = RecentActivity(window_s=3600, bucket_s=300)
    events = [{"event": "acked", "ts": _ts(now - 10), "provider": "whatsapp", "room_id": "a", "seq": 1},
              {"event": "acked", "ts": _ts(now - 20), "provider": "whatsapp", "room_id": "b", "seq": 1},
              {"event": "timed_out", "ts": _ts(now - 400), "provider": "messenger", "room_id": "c", "seq": 2},
              {"event": "failed", "ts": _ts(now - 3 * 3600), "provider": "whatsapp", "room_id": "old", "seq": 1},
              {"event": "sent", "ts": _ts(now - 30), "trigger_to_send_ms": 12.0},
              {"event": "sent", "ts": _ts(now - 30), "trigger_to_send_ms": 900.0},
              {"event": "sent", "ts": _ts(now - 30)},  # no hand-over latency: not counted
              {"event": "enqueued", "ts": _ts(now - 5)},  # neither an ending nor a hand-over
              {"event": "acked", "ts": "not a time"}]
    for e in events:
        recent.add(e)
    s = recent.summary(now * 1_000_000 - 1)  # the last bucket: the 5 minutes before `now`
    assert len(s["buckets"]) == 12
    t = s["totals"]
    assert (t["ended"], t["acked"], t["timed_out"], t["failed"]) == (3, 2, 1, 0)  # three hours ago: outside
    assert t["acked_share"] == pytest.approx(2 / 3) and t["handovers"] == 2
    assert 12.0 <= t["handover_p50_ms"] <= 12.0 * 1.5 and 900.0 <= t["handover_p95_ms"] <= 900.0 * 1.5
    assert s["by_provider"]["messenger"]["timed_out"] == 1 and s["by_provider"]["whatsapp"]["acked"] == 2
    assert [b["acked"] for b in s["buckets"]][-1] == 2 and [b["timed_out"] for b in s["buckets"]][-2] == 1
    assert [m["room_id"] for m in recent.latest("acked", now * 1_000_000 + 1)] == ["b", "a"]  # newest added last
    assert recent.latest("acked", now * 1_000_000, provider="messenger") == []
    recent.add({"event": "acked", "ts": _ts(now + 2 * 3600), "provider": "whatsapp"})  # two hours on
    assert recent.summary((now + 2 * 3600) * 1_000_000)["totals"]["ended"] == 1  # the older buckets dropped
    assert RecentActivity().summary(now * 1_000_000)["totals"]["acked_share"] is None  # nothing ended


def test_the_local_event_log_answers_the_last_hour_from_its_index(tmp_path):
    import time

    path = tmp_path / "events.jsonl"
    now = time.time()
    lines = [{"room_id": "a", "event": "acked", "seq": 1, "message_id": "m1", "ts": _ts(now - 60),
              "provider": "whatsapp"},
             {"room_id": "b", "event": "failed", "seq": 1, "message_id": "m2", "ts": _ts(now - 30),
              "provider": "whatsapp", "reason": "send_refused"}]
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))
    log = LocalEventLog(path)
    assert log.recent(time.time_ns() // 1000)["totals"]["ended"] == 2
    assert [m["room_id"] for m in log.ended("failed", time.time_ns() // 1000)] == ["b"]
    with path.open("a") as fh:
        fh.write(json.dumps({**lines[0], "room_id": "c", "ts": _ts(now - 1)}) + "\n")
    assert log.recent(time.time_ns() // 1000)["totals"]["acked"] == 2  # the new line indexed


class OverviewAdmin(FakeAdmin):
    """A FakeAdmin whose `status` counts `self.counts` up each call and can be held by `self.hold`."""

    def __init__(self) -> None:
        import threading

        super().__init__()
        self.counted = 0
        self.hold = threading.Event()
        self.hold.set()

    def run(self, action: str, args: dict[str, Any], caller: Caller) -> Reply:
        if action == "status":
            self.hold.wait(10)
            self.counted += 1
            return Reply(200, {"result": {"rooms": {"holding": self.counted, "in_flight": 0, "paused": 0,
                                                    "with_parked": 0, "overdue": 0},
                                          "in_flight_by_provider": {"whatsapp": 0}, "dead_letters_kept": 0,
                                          "rejected_pushes_kept": 0, "scheduled": {"count": 0, "at_least": False},
                                          "incident": {"on": False},
                                          "deployment": {"project": "p", "index_shards": 16,
                                                         "providers": ["whatsapp"], "webhook_mode": "direct",
                                                         "watchdog_grace_ms": 1}}})
        if action == "activity.recent":
            from shared.admin.recent import RecentActivity

            recent = RecentActivity()
            import time

            recent.add({"event": "acked", "ts": _ts(time.time() - 5), "provider": "whatsapp"})
            recent.add({"event": "sent", "ts": _ts(time.time() - 5), "trigger_to_send_ms": 30.0})
            return Reply(200, {"result": {"available": True, **recent.summary(time.time_ns() // 1000),
                                          "sampled": False}})
        return super().run(action, args, caller)


def test_the_overview_charts_the_last_hour_and_links_each_count_to_its_list():
    console = Console(OverviewAdmin())
    body = page(console, "GET", "/console/").body
    assert '<svg id="chart"' in body and "<rect " in body and "<polyline " in body and "<script" not in body
    assert 'id="acked-share">100.0 %' in body
    assert 'href="/console/ended?outcome=timed_out"' in body
    assert 'href="/console/ended?outcome=acked&amp;provider=whatsapp"' in body


def test_a_stale_overview_answers_at_once_and_counts_again_in_the_background():
    import time

    admin = OverviewAdmin()
    console = Console(admin)
    assert page(console, "GET", "/console/").status == 200 and admin.counted == 1  # the first view waits
    page(console, "GET", "/console/")
    assert admin.counted == 1  # kept
    console._overviews.ttl_s = 0.0  # noqa: SLF001 - every view is stale from now on
    admin.hold.clear()  # counting now takes until released
    started = time.monotonic()
    stale = page(console, "GET", "/console/")
    assert time.monotonic() - started < 5 and stale.status == 200 and "counting again in the background" in stale.body
    page(console, "GET", "/console/")  # one recount at a time
    admin.hold.set()
    deadline = time.monotonic() + 10
    while admin.counted < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert admin.counted == 2
    page(console, "GET", "/console/", {"fresh": "1"})
    assert admin.counted == 3  # "count again" waits for new counts


def test_a_room_list_page_is_kept_and_asked_again_on_request():
    admin = FakeAdmin()
    console = Console(admin)
    for _ in range(3):
        assert "As of " in page(console, "GET", "/console/rooms", {"kind": "paused"}).body
    assert [a for a, _, _ in admin.calls].count("rooms.list") == 1
    page(console, "GET", "/console/rooms", {"kind": "paused", "cursor": "5:r<1>"})  # another page: its own
    page(console, "GET", "/console/rooms", {"kind": "paused", "fresh": "1"})
    assert [a for a, _, _ in admin.calls].count("rooms.list") == 3


class BulkAdmin(FakeAdmin):
    """A FakeAdmin that answers `rooms.bulk` (the skip of each room's seq 7) and `rooms.to`."""

    def run(self, action: str, args: dict[str, Any], caller: Caller) -> Reply:
        if action == "rooms.bulk":
            self.calls.append((action, args, caller.identity))
            rooms = args.get("rooms") or ["k1", "k2"]
            rows = [{"room_id": r, "changes": True, "messages": 1, "seq": 7} for r in rooms]
            return Reply(200, {"result": {"dry_run": args.get("dry_run", False), "action": args["action"],
                                          "rooms": len(rows), "messages": len(rows), "per_room": rows,
                                          "actor": caller.identity}})
        if action == "rooms.to":
            self.calls.append((action, args, caller.identity))
            return Reply(200, {"result": {"rooms": ["r<1>"] if args["recipient"] == "15550001" else []}})
        return super().run(action, args, caller)


def test_a_bulk_action_previews_each_room_then_runs_on_what_the_preview_showed():
    import html

    admin = BulkAdmin()
    console = Console(admin)
    listing = page(console, "GET", "/console/rooms", {"kind": "lag"})
    assert 'name="pick.1" value="r&lt;1&gt;"' in listing.body
    form = {"csrf": csrf_of(listing.body), "bulk_action": "skip", "reason": "stuck", "step": "preview",
            "pick.1": "r<1>", "rooms": "r2\n\nr<1>\n"}
    preview = page(console, "POST", "/console/bulk", form=form)
    assert preview.status == 200 and "2 message(s) in 2 room(s)" in preview.body
    assert admin.calls[-1][1] == {"dry_run": True, "action": "skip", "reason": "stuck", "rooms": ["r<1>", "r2"]}
    confirm_form = {"csrf": csrf_of(preview.body), "bulk_action": "skip", "reason": "stuck", "step": "confirm",
                    "rooms": html.unescape(preview.body.split('name="rooms" hidden>', 1)[1].split("</textarea>")[0]),
                    "seqs": html.unescape(preview.body.split('name="seqs" hidden>', 1)[1].split("</textarea>")[0])}
    done = page(console, "POST", "/console/bulk", form=confirm_form)
    assert done.status == 200 and "as <strong>alice@example.com</strong>" in done.body
    assert admin.calls[-1] == ("rooms.bulk", {"dry_run": False, "action": "skip", "reason": "stuck",
                                              "rooms": ["r<1>", "r2"], "seqs": {"r<1>": 7, "r2": 7}},
                               "alice@example.com")
    whole = page(console, "POST", "/console/bulk", form={"csrf": form["csrf"], "bulk_action": "pause", "reason": "x",
                                                          "kind": "lag", "limit": "30", "step": "preview"})
    assert whole.status == 200 and admin.calls[-1][1]["kind"] == "lag" and admin.calls[-1][1]["limit"] == 30


def test_a_bulk_form_without_csrf_a_reason_or_rooms_is_refused_before_the_api():
    admin = BulkAdmin()
    console = Console(admin)
    token = csrf_of(page(console, "GET", "/console/rooms", {"kind": "lag"}).body)
    before = len(admin.calls)
    good = {"csrf": token, "bulk_action": "pause", "reason": "r", "rooms": "a", "step": "confirm"}
    assert page(console, "POST", "/console/bulk", form={**good, "csrf": "forged"}).status == 403
    for bad in ({"reason": " "}, {"rooms": ""}, {"bulk_action": "delete"}, {"kind": "lag"}, {"rooms": "", "kind": "x"},
                {"rooms": "", "kind": "lag", "limit": "9999"}):
        assert page(console, "POST", "/console/bulk", form={**good, **bad}).status == 400, bad
    assert len(admin.calls) == before


def test_a_room_is_found_by_its_recipient_by_a_post_that_keeps_the_number_out_of_urls():
    admin = BulkAdmin()
    console = Console(admin)
    token = csrf_of(page(console, "GET", "/console/rooms", {"kind": "lag"}).body)
    assert page(console, "POST", "/console/find", form={"recipient": "15550001"}).status == 403  # no CSRF token
    found = page(console, "POST", "/console/find", form={"csrf": token, "recipient": " 15550001 "})
    assert found.status == 303 and found.headers["Location"] == "/console/room?id=r%3C1%3E"
    none = page(console, "POST", "/console/find", form={"csrf": token, "recipient": "999"})
    assert none.status == 200 and "No room has a message in flight to that recipient" in none.body
    # The number is not echoed back (the page's CSRF token, random hex, may hold "999" by chance).
    assert "999" not in none.body.replace(csrf_of(none.body), "")


def test_a_kept_answer_outlives_a_failed_background_ask_and_a_failed_first_ask_is_not_kept(capsys):
    import time

    from shared.console.kept import KeptAnswers

    kept = KeptAnswers(ttl_s=0.0, size=2)
    answers = iter([(200, "first"), RuntimeError("firestore down"), (503, "busy"), (200, "second")])

    def ask() -> tuple[int, Any]:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert kept.get("k", ask)[1].answer == "first"
    assert kept.get("k", ask)[1].answer == "first"  # stale: served, asked again in the background, which fails
    deadline = time.monotonic() + 5
    while kept.asking("k") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert "asking 'k' again failed" in capsys.readouterr().out
    assert kept.get("other", ask) == (503, "busy")  # an error is answered, never kept
    assert kept.get("other", ask)[1].answer == "second"
    kept.get("third", lambda: (200, "x"))
    assert not kept.asking("k") and len(kept._kept) == 2  # noqa: SLF001 - the oldest dropped past `size`


def test_a_rejected_push_and_the_status_error_queue_are_replayed_from_their_lists_after_a_dry_run():
    class ReplayAdmin(FakeAdmin):
        def run(self, action: str, args: dict[str, Any], caller: Caller) -> Reply:
            if action in ("rejects.list", "statuses.list"):
                return Reply(200, {"result": [{"id": "rj-1", "reason": "no room_id", "data": "c2VjcmV0"}]})
            if action in ("rejects.replay", "statuses.replay"):
                self.calls.append((action, args, caller.identity))
                return Reply(200, {"result": {"dry_run": True, "rooms": 1, "messages": 1}})
            return super().run(action, args, caller)

    admin = ReplayAdmin()
    console = Console(admin)
    rejects = page(console, "GET", "/console/list/rejects")
    assert 'value="replay-reject"' in rejects.body and "c2VjcmV0" not in rejects.body  # the payload stays hidden
    preview = page(console, "POST", "/console/act", form={"csrf": csrf_of(rejects.body), "action": "replay-reject",
                                                           "id": "rj-1", "reason": "fixed", "step": "preview"})
    assert preview.status == 200 and admin.calls[-1] == ("rejects.replay", {"dry_run": True, "reason": "fixed",
                                                                            "id": "rj-1"}, "alice@example.com")
    queue = page(console, "GET", "/console/list/error-queue")
    assert 'id="act-replay-all-statuses"' in queue.body
    page(console, "POST", "/console/act", form={"csrf": csrf_of(queue.body), "action": "replay-all-statuses",
                                                 "reason": "fixed", "step": "preview"})
    assert admin.calls[-1] == ("statuses.replay", {"dry_run": True, "reason": "fixed"}, "alice@example.com")


def test_a_count_aggregation_gets_firestores_own_60_s_not_the_stores_10_s_deadline():
    from types import SimpleNamespace

    from shared.firestore_calls import FirestoreCalls
    from shared.room_queries import COUNT_DEADLINE_S, RoomQueries

    asked: dict[str, Any] = {}

    class Query:
        def count(self, alias: str) -> Query:
            return self

        def get(self, **options: Any) -> list[list[Any]]:
            asked.update(options)
            return [[SimpleNamespace(value=3)]]

    # The store's counted calls, with its call options (as RoomStore sets them).
    queries = RoomQueries(FirestoreCalls(None, {"retry": "the store's", "timeout": 10.0}), 1)  # type: ignore[arg-type]
    assert queries._count(Query()) == 3  # noqa: SLF001
    assert asked == {"retry": "the store's", "timeout": COUNT_DEADLINE_S} and COUNT_DEADLINE_S == 60.0


class NumbersAdmin(OverviewAdmin):
    """An OverviewAdmin with two WhatsApp numbers, and their rooms (`rooms.from`)."""

    def run(self, action: str, args: dict[str, Any], caller: Caller) -> Reply:
        if action == "status":
            reply = super().run(action, args, caller)
            return Reply(200, {"result": {**reply.body["result"], "in_flight_by_number": {"111": 2, "222": 0}}})
        if action == "rooms.from":
            self.calls.append((action, args, caller.identity))
            rows = [ROOM] if not args.get("cursor") else []
            return Reply(200, {"result": {"number": args["number"], "rooms": rows,
                                          "next": "r<1>" if not args.get("cursor") else None}})
        return super().run(action, args, caller)


def test_the_overview_counts_each_sending_number_and_links_it_to_its_rooms():
    admin = NumbersAdmin()
    console = Console(admin)
    body = page(console, "GET", "/console/").body
    assert "in flight from WhatsApp number 111</td><td class=\"n\">2<" in body
    assert 'href="/console/rooms?number=111"' in body and 'href="/console/rooms?number=222"' in body
    listed = page(console, "GET", "/console/rooms", {"number": "111"})
    assert listed.status == 200 and "Rooms sending from WhatsApp number 111" in listed.body
    assert admin.calls[-1] == ("rooms.from", {"number": "111", "limit": 50}, "alice@example.com")
    assert "r&lt;1&gt;" in listed.body and 'href="/console/rooms?number=111&amp;cursor=r%3C1%3E"' in listed.body
    assert 'id="bulk-list"' not in listed.body  # the whole-list bulk form takes a listing kind only
    page(console, "GET", "/console/rooms", {"number": "111", "cursor": "r<1>"})
    assert admin.calls[-1][1] == {"number": "111", "limit": 50, "cursor": "r<1>"}
