"""Preparation in parallel, sending in order, and the producer sequence, on
the emulators: the `prepare` function behind its Cloud Tasks queues, the fake
platform's media endpoint, the real Firestore and Pub/Sub emulators."""

from __future__ import annotations

import json
import time
from datetime import datetime

import requests
from google.cloud import pubsub_v1

from tests.conftest import room_events, wait_for
from tools.local.stack import PROJECT, TOPIC

RECIPIENT = "15557770002"


def publish(room: str, mid: str, data: dict, ordered: bool = True, **attrs: str) -> None:
    """Publish one message to the outbound topic (with the room as ordering key, or none)."""
    client = pubsub_v1.PublisherClient(publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
    extra = {"ordering_key": room} if ordered else {}
    client.publish(client.topic_path(PROJECT, TOPIC), json.dumps(data).encode(), room_id=room, provider="whatsapp",
                   recipient=RECIPIENT, message_id=mid, **extra, **attrs).result(timeout=30)


def image(stack, name: str, delay_ms: int = 0) -> dict:
    """An image message whose file the fake platform serves after `delay_ms` ms."""
    return {"type": "image", "link": f"{stack.fake_url}/assets/{name}.png?delay_ms={delay_ms}", "caption": name}


def epoch_s(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def media_stats(stack) -> dict:
    return requests.get(f"{stack.fake_url}/_fake/stats", timeout=5).json()["media"]


def ended(stack, room: str, n: int) -> list[dict]:
    """The room's end events once there are at least `n`, else [] (for wait_for)."""
    ends = [e for e in room_events(stack, room) if e["event"] in ("acked", "timed_out", "dead_lettered", "failed")]
    return ends if len(ends) >= n else []


def test_preparations_finishing_in_reverse_order_still_send_in_publish_order(stack, room_id, fake_config):
    fake_config({"media_latency_ms": 100})
    for i, delay in enumerate((1500, 800, 0), start=1):  # the first takes longest
        publish(room_id, f"p{i}", image(stack, f"p{i}", delay), prepare="media")
    wait_for(lambda: ended(stack, room_id, 3), timeout_s=45, what="three prepared messages to end")
    events = room_events(stack, room_id)
    prepared = of(events, "prepared")
    assert [e["message_id"] for e in sorted(prepared, key=lambda e: e["ts"])] == ["p3", "p2", "p1"]
    sent = of(events, "sent")
    assert [e["seq"] for e in sent] == [1, 2, 3]  # each once, in publish order
    assert [e["message_id"] for e in of(events, "acked")] == ["p1", "p2", "p3"]
    # p1 went as soon as it was prepared, p2 and p3 as soon as the one before them was acked
    by_mid = {e["message_id"]: e for e in prepared}
    assert sent[0]["trigger"] == "prepared" and epoch_s(sent[0]["ts"]) >= epoch_s(by_mid["p1"]["ts"])
    assert [e["trigger"] for e in sent[1:]] == ["ack", "ack"]
    assert all(e["provider_message_id"] for e in prepared)  # the media id


def test_a_prepare_function_killed_mid_upload_is_run_again_and_the_room_sends_once_in_order(stack, room_id,
                                                                                          fake_config):
    fake_config({"media_latency_ms": 2500})
    before = media_stats(stack)["uploads"]
    publish(room_id, "k1", image(stack, "k1"), prepare="media")
    publish(room_id, "k2", {"type": "text", "text": "after the image"})
    wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "preparing"], what="the preparation")
    time.sleep(1.0)  # the upload is under way (it takes 2.5 s)
    stack.kill("prepare")
    time.sleep(0.5)
    fake_config({"media_latency_ms": 100})
    stack.restart("prepare")
    wait_for(lambda: ended(stack, room_id, 2), timeout_s=60, what="both messages to end")
    events = room_events(stack, room_id)
    assert [e["message_id"] for e in of(events, "sent")] == ["k1", "k2"]
    assert [e["message_id"] for e in of(events, "acked")] == ["k1", "k2"]
    assert len(of(events, "prepared")) == 1
    assert media_stats(stack)["uploads"] - before >= 1


def test_a_preparation_that_keeps_failing_is_retried_then_dead_lettered_and_the_room_moves_on(stack, room_id,
                                                                                            fake_config):
    fake_config({"media_latency_ms": 50, "upload_http_5xx": 3})  # MAX_PREPARE_ATTEMPTS=3 in TEST_ENV
    publish(room_id, "f1", image(stack, "f1"), prepare="media")
    publish(room_id, "f2", image(stack, "missing-f2"), prepare="media")  # 404: permanent
    publish(room_id, "f3", {"type": "text", "text": "still goes"})
    wait_for(lambda: ended(stack, room_id, 3), timeout_s=60, what="three messages to end")
    events = room_events(stack, room_id)
    failures = [e for e in of(events, "prepare_failed") if e["message_id"] == "f1"]
    assert [e["attempt"] for e in failures] == [1, 2, 3] and "given up" in failures[-1]["reason"]
    ends = [(e["message_id"], e["event"]) for e in events if e["event"] in ("acked", "dead_lettered")]
    assert ends == [("f1", "dead_lettered"), ("f2", "dead_lettered"), ("f3", "acked")]
    assert [e["message_id"] for e in of(events, "sent")] == ["f3"]


def test_a_producer_sequence_is_restored_and_a_gap_is_given_up_after_its_timeout(stack, room_id):
    publish(room_id, "s3", {"type": "text", "text": "three"}, ordered=False, sequence="3")
    publish(room_id, "s1", {"type": "text", "text": "one"}, ordered=False, sequence="1")
    wait_for(lambda: [e for e in room_events(stack, room_id) if e["event"] == "sequence_gap"], timeout_s=30,
             what="the gap to be given up")  # SEQUENCE_GAP_TIMEOUT_MS=2000 in TEST_ENV
    publish(room_id, "s2", {"type": "text", "text": "two, late"}, ordered=False, sequence="2")
    wait_for(lambda: ended(stack, room_id, 3), timeout_s=30, what="three messages to end")
    events = room_events(stack, room_id)
    assert of(events, "sequence_held")[0]["message_id"] == "s3"
    assert "producer sequence 2 missing" in of(events, "sequence_gap")[0]["reason"]
    assert [e["message_id"] for e in of(events, "sent")] == ["s1", "s3", "s2"]
    late = [e for e in of(events, "enqueued") if e["message_id"] == "s2"]
    assert "after its gap was given up" in late[0]["reason"]
