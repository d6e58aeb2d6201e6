"""The `baton` CLI on the emulators, through its entry point (`.venv/bin/baton`,
declared in pyproject.toml): pause mid-flow, resume, skip, redrive to the
head, and the stuck and lag listings on a few hundred rooms."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from google.cloud import firestore

from shared.room import InFlight, Phase, QueuedMessage, RoomState
from shared.room_document import room_to_doc
from shared.shards import SHARD_FIELD, index_shard
from shared.store import DEFAULT_INDEX_SHARDS, RoomStore
from tests.conftest import room_events, wait_for
from tests.integration.test_functions import post_push
from tests.integration.test_guarantees import platform_sends, service
from tools.local.stack import PROJECT, free_port

BATON = Path(sys.executable).parent / "baton"
SILENT = "15552220000"  # the fake platform never acks this recipient


@pytest.fixture(scope="module")
def store(stack) -> RoomStore:
    return RoomStore(firestore.Client(project=PROJECT), retention_hours=1)


@pytest.fixture
def silent(fake_config):
    fake_config({"silent_recipients": [SILENT]})
    return SILENT


def baton_run(stack, *args: str) -> subprocess.CompletedProcess:
    """Run `baton --stack RUN_DIR --actor tester ARGS --json` (no terminal: stdin is not a tty)."""
    assert BATON.exists(), "the `baton` entry point is missing: make venv installs it (pip install -e .)"
    return subprocess.run([str(BATON), "--stack", str(stack.run_dir), "--actor", "tester", *args, "--json"],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "BATON_ACTOR": ""},
                          stdin=subprocess.DEVNULL)


def baton(stack, *args: str, check: bool = True) -> object:
    """Run `baton --stack RUN_DIR --actor tester ARGS --json`; its JSON output."""
    proc = baton_run(stack, *args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout) if proc.stdout.strip() else None


def sent_seqs(stack, room: str) -> list[int]:
    return [e["seq"] for e in room_events(stack, room) if e["event"] == "sent"]


def ended(stack, room: str, seq: int) -> list[str]:
    return [e["event"] for e in room_events(stack, room)
            if e["seq"] == seq and e["event"] in ("acked", "timed_out", "skipped", "dead_lettered", "failed")]


def test_pause_mid_flow_keeps_messages_sends_nothing_and_resume_goes_on_in_order(stack, room_id, silent):
    assert post_push(stack, room_id, "m1", silent).status_code == 200
    wait_for(lambda: sent_seqs(stack, room_id) == [1], what="m1 sent")
    [paused] = baton(stack, "rooms", "pause", room_id, "--reason", "customer complaint")
    assert paused["changed"] and paused["outcome"] == "paused"
    assert paused["events"][0]["actor"] == "tester" and paused["events"][0]["reason"] == "customer complaint"
    [again] = baton(stack, "rooms", "pause", room_id, "--reason", "customer complaint")
    assert not again["changed"] and again["outcome"] == "operator_ignored (already_paused)"
    for mid in ("m2", "m3"):
        assert post_push(stack, room_id, mid, silent).status_code == 200  # accepted while paused
    # The in-flight message ends normally (no ack: timed out) and nothing starts.
    wait_for(lambda: ended(stack, room_id, 1) == ["timed_out"], what="m1 timed out")
    shown = baton(stack, "rooms", "show", room_id)
    assert shown["state"] == "paused" and shown["in_flight"] is None and shown["queued"] == 2
    assert shown["next_ids"] == ["2 m2", "3 m3"] and shown["paused"] == "by tester: customer complaint"
    assert "paused" in [e["event"] for e in shown["events"]]
    assert sent_seqs(stack, room_id) == [1] and len(platform_sends(stack, room_id)) == 1
    assert any(r["room_id"] == room_id for r in baton(stack, "rooms", "list", "--paused", "--limit", "1000")["rooms"])
    [resumed] = baton(stack, "rooms", "resume", room_id, "--reason", "fixed")
    assert resumed["changed"] and [e["event"] for e in resumed["events"]][:2] == ["resumed", "sent"]
    wait_for(lambda: ended(stack, room_id, 3), timeout_s=20, what="m3 ended")
    assert sent_seqs(stack, room_id) == [1, 2, 3]
    [noop] = baton(stack, "rooms", "resume", room_id)
    assert not noop["changed"] and noop["outcome"] == "operator_ignored (not_paused)"


def test_skip_ends_the_in_flight_message_once_and_the_room_moves_on(stack, room_id, silent):
    for mid in ("m1", "m2"):
        assert post_push(stack, room_id, mid, silent).status_code == 200
    wait_for(lambda: sent_seqs(stack, room_id) == [1], what="m1 sent")
    # Past m1's send window (SEND_START_DEADLINE_MS + SEND_TIMEOUT_MS = 2 s here) the baton passes at once;
    # inside it the rulebook waits for the window (tests/unit/room/test_room.py).
    [skipped] = baton(stack, "rooms", "skip", room_id, "--seq", "1", "--reason", "wrong text")
    assert skipped["changed"] and skipped["outcome"] == "skipped"
    assert skipped["events"][0]["actor"] == "tester"
    wait_for(lambda: sent_seqs(stack, room_id) == [1, 2], what="m2 sent after the skip")
    [again] = baton(stack, "rooms", "skip", room_id, "--seq", "1", "--reason", "wrong text")
    assert not again["changed"] and "operator_ignored" in again["outcome"]
    assert ended(stack, room_id, 1) == ["skipped"]


def test_a_redriven_dead_letter_goes_back_to_the_head_ahead_of_later_messages(stack, store, room_id, silent,
                                                                               fake_config):
    refusing = "15552220001"
    fake_config({"silent_recipients": [silent], "send_errors": {refusing: [130429]}})
    # One refused send dead-letters m1 (MAX_SEND_ATTEMPTS=1 here); the room moves on.
    svc = service(stack, store, max_send_attempts=1)
    svc.handle_push(_push(room_id, "m1", refusing))
    assert [e.event for e in svc.events.events][-1] == "dead_lettered"
    # Paused before the later messages come, so the queue shown below does not
    # depend on how long the CLI takes against an ack timeout (1.5 s here) on
    # a loaded machine: nothing starts meanwhile.
    baton(stack, "rooms", "pause", room_id, "--reason", "hold while redriving")
    for mid in ("m2", "m3"):
        assert post_push(stack, room_id, mid, silent).status_code == 200
    wait_for(lambda: baton(stack, "rooms", "show", room_id)["next_ids"] == ["2 m2", "3 m3"], what="m2, m3 queued")
    [dl] = baton(stack, "dead-letters", "list", "--room", room_id)
    assert dl["kind"] == "kept" and dl["seq"] == 1 and dl["message_id"] == "m1" and dl["status"] == "waiting"
    # A bulk redrive says what it would touch, and changes nothing on a dry run or without a confirmation.
    preview = baton(stack, "dead-letters", "redrive", "--room", room_id, "--reason", "platform back", "--dry-run")
    assert (preview["dry_run"], preview["rooms"], preview["messages"], preview["ids"]) == (True, 1, 1, [dl["id"]])
    unconfirmed = baton_run(stack, "dead-letters", "redrive", "--room", room_id, "--reason", "platform back")
    assert unconfirmed.returncode == 2 and "1 message(s) in 1 room(s)" in unconfirmed.stderr
    assert "--yes" in unconfirmed.stderr
    assert baton(stack, "dead-letters", "list", "--room", room_id)[0]["status"] == "waiting"
    assert baton(stack, "rooms", "show", room_id)["next_ids"] == ["2 m2", "3 m3"]
    [redriven] = baton(stack, "dead-letters", "redrive", dl["id"], "--reason", "platform back")
    assert redriven["changed"] and redriven["outcome"] == "redriven"
    assert baton(stack, "rooms", "show", room_id)["next_ids"] == ["1 m1", "2 m2", "3 m3"]  # ahead of both
    baton(stack, "rooms", "resume", room_id)
    again = baton(stack, "dead-letters", "redrive", "--room", room_id, "--reason", "platform back", "--yes")
    assert again["messages"] == 0  # nothing waiting any more: not redriven twice
    wait_for(lambda: ended(stack, room_id, 3), timeout_s=20, what="m3 ended")
    assert sent_seqs(stack, room_id) == [1, 2, 3]  # the redriven m1 first, then the later ones in order
    # Its `dead_lettered` line was logged by svc, in its own log, and left in the
    # room's outbox (shared/outbox.py): the pause's transaction, in the stack's
    # admin function, found it there and logged it to the stack's log too.
    assert ended(stack, room_id, 1) == ["dead_lettered", "acked"]
    [dl] = baton(stack, "dead-letters", "list", "--room", room_id)
    assert dl["status"] == "redriven: acked"


def _push(room: str, mid: str, recipient: str) -> bytes:
    from tests.integration.test_functions import push_body

    return push_body({"room_id": room, "provider": "whatsapp", "recipient": recipient, "message_id": mid},
                     b'{"type":"text","text":"hi"}', uuid.uuid4().hex[:8])


def _room(room_id: str, now: int, head_age_us: int, wake_us: int) -> dict:
    msg = QueuedMessage(1, "m1", "whatsapp", SILENT, "hi", now - head_age_us, now - head_age_us)
    flight = InFlight(msg, 1, now - head_age_us, Phase.SENT, wake_us, "push:m1", deadline_us=wake_us)
    later = replace(msg, seq=2, message_id="m2")
    return room_to_doc(RoomState(room_id, incarnation=now - 10**9, next_seq=3, in_flight=flight, pending=(later,)))


def test_stuck_and_lag_listings_page_through_a_few_hundred_rooms_in_order(stack):
    """300 rooms written as the rulebook stores them: 150 overdue by under
    WATCHDOG_GRACE_MS (5 s here, so the running watchdog leaves them), 150
    waiting on a wake-up an hour ahead; listed a page at a time by a query."""
    from baton_cli import GROUPS
    from baton_cli.main import cli

    for group in GROUPS():
        cli.add_command(group)
    prefix = f"ls-{uuid.uuid4().hex[:6]}-"
    db = firestore.Client(project=PROJECT)
    now = time.time_ns() // 1000
    stuck = {f"{prefix}s{i:03d}": now - 400_000 - i * 4000 for i in range(150)}
    waiting = {f"{prefix}w{i:03d}": now + 3600 * 10**6 for i in range(150)}
    head_age = {r: (i + 1) * 10**6 for i, r in enumerate([*stuck, *waiting])}
    batch = db.batch()
    for r, wake in {**stuck, **waiting}.items():
        # Stored as RoomStore stores a room: with its index shard (shared/shards.py).
        batch.set(db.collection("rooms").document(r), {**_room(r, now, head_age[r], wake), "expire_at": None,
                                                       SHARD_FIELD: index_shard(r, DEFAULT_INDEX_SHARDS)})
    batch.commit()
    runner = CliRunner()
    saved = dict(os.environ)  # the CLI loads the stack's environment into its process

    def pages(*args: str) -> list[dict]:
        rows, cursor, n = [], None, 0
        while True:
            out = runner.invoke(cli, ["--stack", str(stack.run_dir), "rooms", "list", *args, "--limit", "60",
                                      "--json", *(["--cursor", cursor] if cursor else [])])
            assert out.exit_code == 0, out.output
            page = json.loads(out.output)
            rows += page["rooms"]
            cursor, n = page["next"], n + 1
            if cursor is None:
                return rows

    try:
        listed = [r for r in pages("--stuck") if r["room_id"].startswith(prefix)]
        before = time.time_ns() // 1000
        older = [r for r in pages("--stuck", "--older-than", "500ms") if r["room_id"].startswith(prefix)]
        after = time.time_ns() // 1000
        lagging = [r for r in pages("--lag") if r["room_id"].startswith(prefix)]
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert [r["room_id"] for r in listed] == sorted(stuck, key=lambda r: stuck[r])  # all, once, most overdue first
    assert all(r["overdue_ms"] >= 400 and r["overdue_ms"] < 5000 and r["in_flight"] == "1.1" and r["queued"] == 1 for r in listed)
    # Overdue by more than 500 ms at the query's time (between `before` and `after`).
    assert {r for r, w in stuck.items() if w < before - 500_000} <= {r["room_id"] for r in older}
    assert {r["room_id"] for r in older} <= {r for r, w in stuck.items() if w < after - 500_000}
    assert [r["room_id"] for r in lagging] == sorted(head_age, key=lambda r: -head_age[r])  # oldest head first
    # The entry point itself, one page.
    top = baton(stack, "rooms", "list", "--lag", "--limit", "5")
    assert len(top["rooms"]) == 5 and top["next"]
    ages = [r["head_age_ms"] for r in top["rooms"]]
    assert ages == sorted(ages, reverse=True)
    batch = db.batch()
    for r in [*stuck, *waiting]:
        batch.delete(db.collection("rooms").document(r))
    batch.commit()


def test_bad_input_gets_a_clear_error(stack):
    proc = subprocess.run([str(BATON), "--stack", str(stack.run_dir), "dead-letters", "redrive", "nonsense",
                           "--reason", "x"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a dead letter id" in proc.stderr
    proc = subprocess.run([str(BATON), "--stack", str(stack.run_dir), "rooms", "list", "--stuck", "--older-than",
                           "5 minutes"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "not a duration" in proc.stderr


def test_version_and_where_to_act_are_one_line_answers_with_their_exit_codes(stack, tmp_path):
    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        clean = {k: v for k, v in os.environ.items() if k not in ("GOOGLE_CLOUD_PROJECT", "BATON_STACK")}
        return subprocess.run([str(BATON), *args], capture_output=True, text=True, timeout=120,
                              env={**clean, **env}, stdin=subprocess.DEVNULL)

    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("baton, version ")
    nowhere = run("status")
    assert nowhere.returncode == 2 and "--project" in nowhere.stderr
    # No Google credentials at all (no key file, no gcloud login, no metadata server).
    no_credentials = run("--project", "p-none", "status", GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "none.json"),
                         CLOUDSDK_CONFIG=str(tmp_path / "gcloud"), GCE_METADATA_HOST="127.0.0.1:9",
                         GCE_METADATA_IP="127.0.0.1:9")
    assert no_credentials.returncode == 4, no_credentials.stderr
    assert "Traceback" not in no_credentials.stderr and len(no_credentials.stderr.strip().splitlines()) == 1
    assert "gcloud auth" in no_credentials.stderr
    # A stack whose admin function does not answer: exit 5, one line.
    closed = f"http://127.0.0.1:{free_port()}/"
    no_admin = run("--stack", str(stack.run_dir), "--admin-url", closed, "status")
    assert no_admin.returncode == 5 and "no admin function" in no_admin.stderr and "Traceback" not in no_admin.stderr
    missing = run("--stack", str(stack.run_dir), "rooms", "show", f"none-{uuid.uuid4().hex[:6]}")
    assert missing.returncode == 3 and "no document" in missing.stderr
    unconfirmed = run("--stack", str(stack.run_dir), "statuses", "replay", "--json")
    assert unconfirmed.returncode == 0 and json.loads(unconfirmed.stdout)["messages"] == 0  # nothing to replay
