"""baton-client without a network: messages checked before publishing, per-room
order kept through a failed publish, scheduling attributes, cancel, outcomes.

`FakePubSub` behaves as google-cloud-pubsub's publisher does with message
ordering on: after a failed publish of a key, every later publish of that
key fails at once until `resume_publish(topic, key)`.
"""

from __future__ import annotations

import json
from concurrent import futures
from datetime import UTC, datetime, timedelta, timezone

import pytest
from baton_client import (
    Document,
    InvalidBatch,
    InvalidMessage,
    Message,
    OutcomesUnavailable,
    Publisher,
    Template,
    Text,
    subscribe_outcomes,
)
from google.api_core import exceptions as gexc


class FakePubSub:
    def __init__(self, fail: set[str] = frozenset()) -> None:
        self.published: list[tuple[str, bytes, dict[str, str]]] = []
        self.fail_next = set(fail)  # message ids whose publish fails
        self.paused: set[str] = set()
        self.resumed: list[str] = []

    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish(self, topic: str, data: bytes, ordering_key: str = "", **attrs: str) -> futures.Future:
        fut: futures.Future = futures.Future()
        if ordering_key in self.paused:
            fut.set_exception(RuntimeError(f"ordering key {ordering_key} is paused"))
        elif attrs["message_id"] in self.fail_next:  # fails once
            self.fail_next.discard(attrs["message_id"])
            self.paused.add(ordering_key)
            fut.set_exception(gexc.ServiceUnavailable("publish failed"))
        else:
            self.published.append((ordering_key, data, attrs))
            fut.set_result(str(len(self.published)))
        return fut

    def resume_publish(self, topic: str, ordering_key: str) -> None:
        self.paused.discard(ordering_key)
        self.resumed.append(ordering_key)


def msg(room: str, n: int, content=None, **kw) -> Message:
    return Message(room, "whatsapp", "15551234567", f"{room}-{n}", content or Text(f"hello {n}"), **kw)


def test_publish_sends_the_checked_data_with_the_room_as_ordering_key():
    fake = FakePubSub()
    Publisher("p", "t", client=fake).publish(msg("room-1", 1, Template("order_update", "en", body=["Ada"])))
    key, data, attrs = fake.published[0]
    assert key == "room-1" and attrs == {"room_id": "room-1", "provider": "whatsapp", "recipient": "15551234567",
                                         "message_id": "room-1-1"}
    assert json.loads(data)["template"]["components"] == [{"type": "body", "parameters": [{"type": "text",
                                                                                           "text": "Ada"}]}]


def test_an_invalid_message_is_refused_with_every_error_and_nothing_is_published():
    fake = FakePubSub()
    bad = Message("room-1", "whatsapp", "15551234567", "m-1", Document(caption="c" * 2000))
    with pytest.raises(InvalidMessage) as refused:
        Publisher("p", "t", client=fake).publish(bad)
    assert refused.value.errors == ["data: needs exactly one of `link` (an http(s) URL) or `id` (an uploaded media id)",
                                    "data.caption: longer than 1024 characters"]
    assert fake.published == []


def test_publish_many_checks_the_whole_batch_first():
    fake = FakePubSub()
    batch = [msg("room-1", 1), msg("room-1", 2, Text("")), msg("room-2", 1, Text("x" * 4097))]
    with pytest.raises(InvalidBatch) as refused:
        Publisher("p", "t", client=fake).publish_many(batch)
    assert [i for i, _ in refused.value.invalid] == [1, 2]
    assert fake.published == []


def test_a_failed_publish_holds_its_room_back_and_the_report_lets_it_go_on_in_order():
    fake = FakePubSub(fail={"room-1-2"})
    pub = Publisher("p", "t", client=fake)
    batch = [msg("room-1", 1), msg("room-2", 1), msg("room-1", 2), msg("room-1", 3), msg("room-2", 2)]
    report = pub.publish_many(batch)
    # room-1's third message did not overtake its second; room-2 went on.
    assert [a["message_id"] for _, _, a in fake.published] == ["room-1-1", "room-2-1", "room-2-2"]
    assert [m.message_id for m, _ in report.failed] == ["room-1-2", "room-1-3"] and not report.ok
    assert fake.resumed == ["room-1"]
    again = pub.publish_many([m for m, _ in report.failed])
    assert again.ok and [a["message_id"] for _, _, a in fake.published][-2:] == ["room-1-2", "room-1-3"]


def test_scheduling_attributes_are_written_as_the_contract_reads_them():
    at = datetime(2026, 11, 28, 9, 0, tzinfo=timezone(timedelta(hours=1)))
    assert msg("r", 1, deliver_at=at).attributes()["deliver_at"] == "2026-11-28T08:00:00.000000Z"
    assert msg("r", 1, delay_s=90).attributes()["delay_s"] == "90"
    assert msg("r", 1, delay_s=2.5).attributes()["delay_s"] == "2.5"
    assert msg("r", 1, delay_s=-1).errors() == ["attributes.delay_s: must be a number of seconds, e.g. 90 or 2.5"]
    assert "give `deliver_at` or `delay_s`, not both" in msg("r", 1, deliver_at=at, delay_s=5).errors()[0]
    with pytest.raises(ValueError, match="time zone"):
        msg("r", 1, deliver_at=datetime(2026, 11, 28, 9, 0)).attributes()


class FakeDoc:
    def __init__(self, store: dict, key: str) -> None:
        self.store, self.key = store, key

    def get(self):
        data = self.store.get(self.key)
        return type("Snap", (), {"exists": data is not None, "to_dict": lambda _s: dict(data or {})})()

    def set(self, fields: dict, merge: bool = False) -> None:
        self.store[self.key] = {**(self.store.get(self.key) or {}), **fields} if merge else fields


class FakeFirestore:
    def __init__(self) -> None:
        self.docs: dict[str, dict] = {}

    def collection(self, name: str):
        docs = self.docs
        return type("Col", (), {"document": lambda _s, key: FakeDoc(docs, f"{name}/{key}")})()


def test_cancel_keeps_the_record_until_the_message_came_and_says_whether_it_was_waiting():
    db = FakeFirestore()
    pub = Publisher("p", "t", client=FakePubSub())
    assert pub.cancel("room-1", "m-1", "wrong price", firestore_client=db) is False
    (key, doc), = db.docs.items()
    assert key.startswith("scheduled_cancels/") and doc["reason"] == "wrong price" and doc["expire_at"] is None
    assert doc["room_id"] == "room-1"
    db.docs[key] = {"message_id": "m-1", "expire_at": datetime.now(UTC)}
    assert pub.cancel("room-1", "m-1", "again", firestore_client=db) is True
    assert db.docs[key]["expire_at"] is not None  # a recorded expiry stays


def test_outcomes_without_an_outcomes_topic_say_so():
    class NoTopic:
        def topic_path(self, project, topic):
            return f"projects/{project}/topics/{topic}"

        def get_topic(self, request):
            raise gexc.NotFound("no topic")

    with pytest.raises(OutcomesUnavailable, match="baton-outcomes"):
        subscribe_outcomes("p", "s", print, publisher=NoTopic(), subscriber=object())


def test_outcomes_come_to_the_callback_as_dicts_from_an_ordered_subscription_and_are_acked():
    class Topic:
        def topic_path(self, project, topic):
            return f"projects/{project}/topics/{topic}"

        def get_topic(self, request):
            return request

    class Sub:
        created: list = []

        def subscription_path(self, project, sub):
            return f"projects/{project}/subscriptions/{sub}"

        def create_subscription(self, request):
            self.created.append(request)

        def subscribe(self, path, callback):
            self.callback = callback
            return "future"

    class Msg:
        def __init__(self, data):
            self.data, self.acked, self.nacked = data, False, False

        def ack(self):
            self.acked = True

        def nack(self):
            self.nacked = True

    got = []
    sub = Sub()
    assert subscribe_outcomes("p", "s", got.append, publisher=Topic(), subscriber=sub) == "future"
    assert sub.created[0]["enable_message_ordering"] is True
    assert sub.created[0]["topic"] == "projects/p/topics/baton-outcomes"
    msg = Msg(b'{"outcome": "acked", "room_id": "r-1", "message_id": "m-1"}')
    sub.callback(msg)
    assert got == [{"outcome": "acked", "room_id": "r-1", "message_id": "m-1"}] and msg.acked

    def refuse(outcome):
        raise RuntimeError("not now")

    subscribe_outcomes("p", "s", refuse, publisher=Topic(), subscriber=sub)
    failing = Msg(b"{}")
    with pytest.raises(RuntimeError):
        sub.callback(failing)
    assert failing.nacked and not failing.acked
