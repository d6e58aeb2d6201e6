"""End to end through the whole local stack: publish to Pub/Sub, ordered push
to `enqueue`, sends to the fake platform, signed webhooks to `webhook`, Cloud
Tasks timers to `timeout`."""

from __future__ import annotations

import base64
import json
import re
import statistics
import uuid

import requests
from google.cloud import pubsub_v1

from shared.room import parse_delivery_id
from tests.conftest import room_events, wait_for
from tools.local.audit import epoch_s, make_workload, read_events, summarize
from tools.local.demo import deliver, fake_stats
from tools.local.publisher import OutboundMessage, Publisher
from tools.local.stack import PROJECT, TOPIC


def msg(room: str, k: int, recipient: str) -> OutboundMessage:
    return OutboundMessage(room, "whatsapp", recipient, f"{room}-m{k}", f"message {k}")


def terminal(stack, room: str) -> list[dict]:
    return [e for e in room_events(stack, room) if e["event"] in ("acked", "failed", "timed_out", "dead_lettered")]


def first_sends(stack, room: str) -> list[int]:
    """Seqs in the order their first send call started (`ts`; lines are
    written when a call returns, and the next send may start before that)."""
    seen: list[int] = []
    for e in sorted(room_events(stack, room), key=lambda e: e["ts"]):
        if e["event"] == "sent" and e["seq"] not in seen:
            seen.append(e["seq"])
    return seen


def test_a_small_workload_is_delivered_in_order_and_nothing_is_lost(stack, fake_config):
    # Realistic platform: lost acks, duplicated and reordered webhooks, failures.
    fake_config({"ack_prob": 0.87, "duplicate_prob": 0.2, "reorder_prob": 0.2, "fail_prob": 0.03,
                 "read_without_delivered_prob": 0.05})
    prefix = f"e2e-{uuid.uuid4().hex[:6]}"
    messages = make_workload(rooms=15, per_room=4, seed=3, prefix=prefix)
    deliver(stack, messages, stall_s=30)
    events = [e for e in read_events(stack.event_log) if (e["room_id"] or "").startswith(prefix)]
    summary = summarize(messages, events, fake_stats(stack), 0.0)
    assert summary.lost == [] and summary.ended_twice == []
    assert summary.send_calls >= len(messages) and summary.duplicates_sent == 0  # no send faults here
    assert summary.acked_out_of_order == []
    assert summary.enqueued == len(messages)
    assert summary.acked + summary.timed_out + summary.failed + summary.dead_lettered == len(messages)
    assert summary.timed_out > 0 and summary.acked > 0  # the mix really happened
    # Per room, first sends follow publish order, and the seqs follow the publish order too.
    for room in {m.room_id for m in messages}:
        published = [m.message_id for m in messages if m.room_id == room]
        sent_ids = []
        # By call start (`ts`): a `sent` line is written when its call returns,
        # and an ack may come (and the next send start) before that.
        for e in sorted(room_events(stack, room), key=lambda e: e["ts"]):
            if e["event"] == "sent" and e["message_id"] not in sent_ids:
                sent_ids.append(e["message_id"])
        assert sent_ids == published, room
        # Never two in flight: each send of a new seq comes after the previous seq ended.
        ended_at = {e["seq"]: e["ts"] for e in terminal(stack, room)}
        for e in room_events(stack, room):
            if e["event"] == "sent" and e["seq"] > 1:
                assert ended_at[e["seq"] - 1] <= e["ts"], (room, e["seq"])


def test_a_silent_room_does_not_delay_other_rooms(stack, fake_config):
    """Room S never gets an ack, so each of its messages waits the whole ack
    timeout; rooms published after it are delivered meanwhile, at full speed."""
    slow_recipient = "15559990000"
    fake_config({"silent_recipients": [slow_recipient]})
    slow_room = f"slow-{uuid.uuid4().hex[:6]}"
    others = [f"fast-{uuid.uuid4().hex[:6]}-{i}" for i in range(8)]
    batch = [msg(slow_room, k, slow_recipient) for k in range(1, 5)]
    batch += [msg(room, k, f"1555888{i:04d}") for k in (1, 2) for i, room in enumerate(others)]
    Publisher(PROJECT, TOPIC).publish_all(batch)
    for room in others:
        wait_for(lambda r=room: len(terminal(stack, r)) == 2, 15, f"{room} delivered")
    # The slow room is still working through its queue (1.5 s per message).
    assert len(terminal(stack, slow_room)) < 4
    fast_latency = [e["publish_to_send_ms"] for r in others for e in room_events(stack, r) if e["event"] == "sent"]
    assert statistics.median(fast_latency) < 1500
    assert all(e["event"] == "acked" for r in others for e in terminal(stack, r))
    wait_for(lambda: len(terminal(stack, slow_room)) == 4, 20, "slow room drained")
    assert [e["event"] for e in terminal(stack, slow_room)] == ["timed_out"] * 4
    assert first_sends(stack, slow_room) == [1, 2, 3, 4]


def test_a_late_ack_after_the_timeout_skips_nothing(stack, fake_config):
    recipient = "15557770000"
    # Acks come after the 1.5 s timeout; no `read`, so one late ack per message.
    fake_config({"slow_recipients": {recipient: 2500.0}, "read_prob": 0.0})
    room = f"late-{uuid.uuid4().hex[:6]}"
    Publisher(PROJECT, TOPIC).publish_all([msg(room, k, recipient) for k in (1, 2)])
    wait_for(lambda: len([e for e in room_events(stack, room) if e["reason"] == "late_ack"]) == 2, 20, "late acks")
    assert [e["event"] for e in terminal(stack, room)] == ["timed_out", "timed_out"]
    late = [e for e in room_events(stack, room) if e["reason"] == "late_ack"]
    assert all(e["send_to_ack_ms"] >= 2400 for e in late)
    assert first_sends(stack, room) == [1, 2]


def test_a_duplicate_publish_is_delivered_once(stack):
    room = f"dup-{uuid.uuid4().hex[:6]}"
    m = msg(room, 1, "15556660000")
    Publisher(PROJECT, TOPIC).publish_all([m, m, msg(room, 2, "15556660000")])
    wait_for(lambda: len(terminal(stack, room)) == 2, 15, "two messages ended")
    kinds = [e["event"] for e in room_events(stack, room)]
    assert kinds.count("enqueued") == 2 and kinds.count("duplicate_ignored") == 1
    sends = [s for s in fake_stats(stack)["sends"] if s["callback"].endswith(room)]
    assert sorted(parse_delivery_id(s["callback"])[2] for s in sends) == [1, 2]


def test_send_errors_retry_or_fail_and_the_room_moves_on(stack, fake_config):
    transient_to, permanent_to = "15554440001", "15554440002"
    fake_config({"send_errors": {transient_to: [130429], permanent_to: [131026]}})
    r1, r2 = f"err-t-{uuid.uuid4().hex[:6]}", f"err-p-{uuid.uuid4().hex[:6]}"
    Publisher(PROJECT, TOPIC).publish_all([msg(r1, 1, transient_to), msg(r2, 1, permanent_to), msg(r2, 2, permanent_to)])
    wait_for(lambda: len(terminal(stack, r1)) == 1 and len(terminal(stack, r2)) == 2, 20, "all ended")
    # Transient: failed once, resent as attempt 2 after the backoff, then acked.
    e1 = room_events(stack, r1)
    assert [e["event"] for e in e1 if e["event"] in ("send_failed", "sent", "acked")] == ["send_failed", "sent", "acked"]
    assert [e["attempt"] for e in e1 if e["event"] == "sent"] == [2]
    # Permanent: the first message failed with the platform's code; the second went on.
    t2 = terminal(stack, r2)
    assert [e["event"] for e in t2] == ["failed", "acked"]
    assert t2[0]["error_code"] == 131026


def test_a_malformed_message_is_kept_and_does_not_block_its_room(stack):
    room = f"bad-{uuid.uuid4().hex[:6]}"
    client = pubsub_v1.PublisherClient(publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
    topic = client.topic_path(PROJECT, TOPIC)
    attrs = {"room_id": room, "provider": "whatsapp", "recipient": "15553330000"}
    client.publish(topic, b"\xff not json", ordering_key=room, message_id=f"{room}-m1", **attrs).result()
    client.publish(topic, json.dumps({"type": "text", "text": "fine"}).encode(), ordering_key=room,
                   message_id=f"{room}-m2", **attrs).result()
    wait_for(lambda: len(terminal(stack, room)) == 1, 15, "the valid message ended")
    kinds = [e["event"] for e in room_events(stack, room)]
    assert kinds[0] == "rejected" and "acked" in kinds
    rejected = next(e for e in room_events(stack, room) if e["event"] == "rejected")
    assert rejected["message_id"] == f"{room}-m1" and "JSON" in rejected["reason"]
    # The raw message is kept in Firestore with its reason.
    from google.cloud import firestore

    kept = [d.to_dict() for d in firestore.Client(project=PROJECT).collection("rejected_messages").stream()
            if (d.to_dict().get("attributes") or {}).get("room_id") == room]
    assert len(kept) == 1 and base64.b64decode(kept[0]["data"]).startswith(b"\xff")
    assert requests.get(f"{stack.fake_url}/_fake/health", timeout=5).ok


def test_messenger_and_instagram_rooms_are_delivered_in_order_by_their_own_receipts(stack, fake_config):
    """Messenger rooms ack on delivery receipts (some without `mids`: the
    watermark then decides), Instagram rooms on `messaging_seen`, beside
    WhatsApp rooms; nothing is lost and no acked pair is out of order."""
    fake_config({"messenger_mids_prob": 0.5, "read_prob": 1.0})
    prefix = f"meta-{uuid.uuid4().hex[:6]}"
    messages = make_workload(rooms=9, per_room=3, seed=5, prefix=prefix,
                             providers=("whatsapp", "messenger", "instagram"))
    deliver(stack, messages, stall_s=30)
    events = [e for e in read_events(stack.event_log) if (e["room_id"] or "").startswith(prefix)]
    summary = summarize(messages, events, fake_stats(stack), 0.0)
    assert summary.lost == [] and summary.ended_twice == [] and summary.acked_out_of_order == []
    acks = {(e["provider"], e["status"]) for e in events if e["event"] == "acked"}
    # Every provider acked by its own kind of receipt (the fake acks every message here).
    assert {p for p, _ in acks} == {"whatsapp", "messenger", "instagram"}
    assert ("instagram", "delivered") not in acks  # Instagram has no delivery receipt
    assert summary.by_provider["instagram"]["acked"] == 9 and summary.by_provider["messenger"]["acked"] == 9


def test_a_messenger_receipt_signed_with_another_apps_secret_is_refused(stack):
    from shared.providers.whatsapp import sign

    raw = json.dumps({"object": "page", "entry": [{"id": "200000000000002", "time": 1, "messaging": [
        {"sender": {"id": "6000001"}, "recipient": {"id": "200000000000002"},
         "delivery": {"watermark": 4_102_444_800_000}}]}]}).encode()
    # The payload names Messenger (`page`): only Messenger's app secret is tried, so WhatsApp's is as good as none.
    for secret, status in (("not-a-secret", 401), ("local-app-secret", 401), ("local-messenger-secret", 200)):
        r = requests.post(stack.url("webhook"), data=raw, timeout=10,
                          headers={"X-Hub-Signature-256": sign(raw, secret), "Content-Type": "application/json"})
        assert r.status_code == status, (secret, r.text)


def test_a_burst_of_100_messages_to_one_recipient_is_paced_below_the_platforms_pair_rate(stack, fake_config):
    """The fake platform refuses (131056) a send to a person whose pair-rate
    bucket is empty; the room's own bucket (150 ms per token, burst 5 here,
    tests/conftest.py) keeps every send within it: no 131056, all 100
    delivered in order, and the sends spaced as the bucket allows."""
    # The platform's limit is looser than the room's: its clock starts at the send's
    # arrival, which lags the room's token by the commit and the HTTP call. With 120 ms
    # (30 ms of slack per token) a CI run on a loaded 2-core machine saw one 131056
    # once the burst was spent; 100 ms leaves 50 ms.
    fake_config({"pair_rate_interval_ms": 100.0, "pair_rate_burst": 5, "ack_median_ms": 20.0})
    room = f"pace-{uuid.uuid4().hex[:6]}"
    refusals_before = fake_stats(stack)["faults"]["pair_rate_limit"]
    messages = [OutboundMessage(room, "messenger", "6100000000000001", f"{room}-m{k}", f"message {k}")
                for k in range(1, 101)]
    deliver(stack, messages, stall_s=60)
    events = [e for e in read_events(stack.event_log) if e["room_id"] == room]
    stats = fake_stats(stack)
    summary = summarize(messages, events, stats, 0.0)
    assert summary.lost == [] and summary.acked_out_of_order == [] and summary.ended_twice == []
    # No 131056: nothing was sent into the pair limit. (A send the loaded
    # machine could not start in time is refused by baton itself, not the platform.)
    assert stats["faults"]["pair_rate_limit"] == refusals_before
    assert [e for e in events if e["event"] == "send_failed" and e["error_code"] == 131056] == []
    sends = sorted(s["at"] for s in stats["sends"] if s["recipient"] == "6100000000000001")
    assert len(sends) == 100
    # The bucket really held the room back, and each paced message waited for
    # its token. (How many are paced depends on the machine's load: a hand-over
    # slower than 150 ms finds a token waiting. A fixed count failed on CI.)
    # Every call's start, by (seq, attempt), from its delivery id: a `sent`, or a
    # `send_failed` / `send_unknown` (on a loaded machine a send may miss its
    # start deadline and go again as the next attempt).
    started_ms = {(e["seq"], e["attempt"]): parse_delivery_id(e["delivery_id"])[4] / 1000 for e in events
                  if e["event"] in ("sent", "send_failed", "send_unknown") and e.get("delivery_id")}
    paced = [e for e in events if e["event"] == "paced"]
    assert paced
    for e in paced:
        wait_ms = int(re.search(r"next token in (\d+) ms", e["reason"]).group(1))
        assert started_ms[(e["seq"], e["attempt"])] >= epoch_s(e["ts"]) * 1000 + wait_ms - 5, e
    # Token bucket bound on the room's own send starts, over every window: at
    # most burst + window / interval (the platform's arrival times lag them by
    # the commit and the HTTP call, so only this bound is exact).
    starts = sorted(started_ms.values())
    assert len({seq for seq, _ in started_ms}) == 100
    for i in range(len(starts)):
        for j in range(i + 1, len(starts)):
            assert j - i + 1 <= 5 + (starts[j] - starts[i]) / 150 + 1, (i, j)
