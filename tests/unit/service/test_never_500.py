"""No 5xx for any bad input (issue 28, item 1): every push, webhook body and
task body, whatever its attributes and shapes, ends as accepted, held, or
kept as rejected with its reason, or (webhook) a 4xx that changes nothing.
Only a transient store or queue error answers 5xx (a `TRANSIENT_ERRORS`
exception the entry point turns into 503; a full room's 503).

Driven in-process through `DeliveryService` over the in-memory fakes
(tests/fakes.py): a handler that raises anything but a transient error is
what the functions framework would answer 500. The emulator-level fuzzing of
the same entry points is tests/e2e/test_fuzz.py."""

from __future__ import annotations

import base64
import dataclasses
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.providers.whatsapp import sign
from shared.push import Rejected, parse_push
from shared.service import TRANSIENT_ERRORS, DeliveryService, Reply
from shared.status_queue import KIND_RECIPIENT_RECEIPTS, KIND_ROOM_STATUSES
from tests.unit.service.test_faults import SECRET, Knobs, World, build_service

SETTINGS = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# ---------------------------------------------------------------- strategies of plausible extremes

offsets = st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(lambda m: timezone(timedelta(minutes=m)))
any_datetime = st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59),
                            timezones=offsets)
# The ends of datetime's range, where converting to UTC overflows.
edge_datetime = st.builds(lambda y, m, off: datetime(y, m, 1 if y == 1 else 31, 0 if y == 1 else 23, 30, tzinfo=off),
                          st.sampled_from([1, 9999]), st.sampled_from([1, 12]), offsets)
rfc3339 = st.one_of(
    edge_datetime.map(lambda d: d.isoformat()),
    any_datetime.map(lambda d: d.isoformat()),
    any_datetime.map(lambda d: d.isoformat().replace("+00:00", "Z")),
    st.sampled_from(["9999-12-31T23:30:00-01:00", "0001-01-01T00:30:00+01:00", "2026-12-31T23:59:60Z",
                     "2026-11-24T10:00:00", "2026-11-24", "T", "", "9999-12-31T23:59:59.999999999Z",
                     "2026-11-24T10:00:00+25:00", "+002026-11-24T10:00:00Z", "2026-13-01T00:00:00Z"]),
)
numbers = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True))
number_text = st.one_of(numbers.map(str), st.sampled_from(["NaN", "inf", "-inf", "1e400", "-0", "0x10", " 5 ", ""]))
junk = st.one_of(st.none(), st.booleans(), numbers, st.lists(st.text(max_size=5), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
text = st.text(max_size=40)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The attribute as a plausible string, junk of any JSON type, or absent (None: left out)."""
    return st.one_of(st.none(), strategy, junk, text)


VALID_ATTRS = {"room_id": "room-1", "message_id": "m-1", "provider": "whatsapp", "recipient": "15550001"}
OPTIONAL_ATTRS = {"deliver_at": rfc3339, "delay_s": number_text, "sequence": number_text,
                  "prepare": st.just("media")}


@st.composite
def push_envelopes(draw: st.DrawFn) -> bytes:
    """A push that is valid but for at most two fields, so every check of the
    parser is reached; optional attributes drawn from their extremes."""
    attrs: dict[str, Any] = dict(VALID_ATTRS)
    for name in draw(st.lists(st.sampled_from(sorted(OPTIONAL_ATTRS)), max_size=2, unique=True)):
        attrs[name] = draw(OPTIONAL_ATTRS[name])
    for name in draw(st.lists(st.sampled_from(sorted(attrs)), max_size=2, unique=True)):
        value = draw(maybe(st.just(attrs[name])))
        if value is None:
            del attrs[name]
        else:
            attrs[name] = value
    data = draw(st.one_of(
        st.just({"type": "text", "text": "hi"}),
        st.just({"type": "image", "link": "https://media.test/a.png", "caption": "c"}),
        junk))
    message: dict[str, Any] = {
        "data": base64.b64encode(json.dumps(data).encode()).decode(),
        "attributes": attrs if draw(st.integers(0, 9)) else draw(junk),
        "messageId": draw(st.one_of(st.just("101"), junk, text)),
        "publishTime": draw(st.one_of(rfc3339, junk)),
    }
    if draw(st.booleans()):
        message["orderingKey"] = draw(st.one_of(st.just("room-1"), junk, text))
    return json.dumps({"message": message, "subscription": "s"}).encode()


@st.composite
def webhook_bodies(draw: st.DrawFn) -> bytes:
    objects = st.one_of(st.sampled_from(["whatsapp_business_account", "page", "instagram"]), junk, text)
    status = st.fixed_dictionaries({"id": st.one_of(st.just("wamid.1"), junk), "status": st.one_of(
        st.sampled_from(["sent", "delivered", "read", "failed"]), junk),
        "timestamp": st.one_of(number_text, junk), "biz_opaque_callback_data": st.one_of(text, junk),
        "errors": st.one_of(junk, st.lists(st.dictionaries(st.sampled_from(["code", "title"]), junk), max_size=2))})
    messaging = st.fixed_dictionaries({"sender": st.one_of(st.just({"id": "2400001"}), junk),
                                       "recipient": st.one_of(st.just({"id": "PAGE"}), junk),
                                       "timestamp": st.one_of(numbers, junk)},
                                      optional={"delivery": st.one_of(junk, st.fixed_dictionaries(
                                          {"watermark": st.one_of(numbers, junk)},
                                          optional={"mids": st.one_of(junk, st.lists(text, max_size=2))})),
                                          "read": st.one_of(junk, st.fixed_dictionaries(
                                              {"watermark": st.one_of(numbers, junk)})),
                                          "message": st.one_of(junk, st.fixed_dictionaries(
                                              {"mid": st.one_of(text, junk), "is_echo": st.one_of(junk, st.just(True)),
                                               "metadata": st.one_of(text, junk)}))})
    entry = st.one_of(junk, st.fixed_dictionaries({}, optional={
        "changes": st.one_of(junk, st.lists(st.fixed_dictionaries({"value": st.one_of(junk, st.fixed_dictionaries(
            {}, optional={"statuses": st.one_of(junk, st.lists(status, max_size=2))}))}), max_size=2)),
        "messaging": st.one_of(junk, st.lists(st.one_of(messaging, junk), max_size=2))}))
    payload = draw(st.one_of(junk, st.fixed_dictionaries({"object": objects},
                                                        optional={"entry": st.one_of(junk, st.lists(entry,
                                                                                                    max_size=2))})))
    return json.dumps(payload).encode() if draw(st.integers(0, 9)) else draw(st.binary(max_size=30))


task_bodies = st.one_of(
    st.binary(max_size=40),
    st.fixed_dictionaries({}, optional={k: st.one_of(junk, text, st.integers(-(2**70), 2**70)) for k in
                                        ("room_id", "incarnation", "seq", "attempt", "due_at_us")}).map(
        lambda d: json.dumps(d).encode()),
    junk.map(lambda v: json.dumps(v).encode()),
)


# ---------------------------------------------------------------- the property


def answered(world: World, call) -> Reply | None:
    """The handler's reply, or None when it raised a transient error (the
    entry point's 503). Any other exception is a 500 and fails the test."""
    try:
        return call()
    except TRANSIENT_ERRORS:
        return None


def assert_never_500(reply: Reply | None, what: str) -> None:
    assert reply is None or reply.status < 500 or (reply.status == 503 and reply.body.get("result") == "backpressure"), \
        (what, reply)


def world_and_service(**changes: Any) -> tuple[World, DeliveryService]:
    world = World(Knobs())
    world.settings = dataclasses.replace(world.settings, **changes)
    return world, build_service(world)


@SETTINGS
@given(body=push_envelopes())
def test_parse_push_never_raises_for_any_envelope(body):
    parsed = parse_push(body, 1_700_000_000_000_000)
    assert isinstance(parsed, Rejected) or parsed.event.message_id == "m-1"


@SETTINGS
@given(body=push_envelopes())
def test_no_push_and_no_dead_letter_copy_is_ever_answered_500(body):
    world, service = world_and_service()
    assert_never_500(answered(world, lambda: service.handle_push(body)), "enqueue")
    assert_never_500(answered(world, lambda: service.handle_push(body, scheduled_entry=True)), "scheduled entry")
    assert_never_500(answered(world, lambda: service.handle_dead_letter(body)), "deadletter")


@SETTINGS
@given(raw=webhook_bodies(), signed=st.booleans(), mode=st.sampled_from(["direct", "queued"]))
def test_no_webhook_body_is_answered_500_and_a_refused_one_changes_nothing(raw, signed, mode):
    world, service = world_and_service(webhook_mode=mode, messenger_app_secret=SECRET, instagram_app_secret=SECRET)
    service.core._status_queue_factory = lambda: world_queue(world)
    before = dict(world.store.docs)
    reply = answered(world, lambda: service.handle_status_webhook(raw, sign(raw, SECRET) if signed else "sha256=0"))
    assert_never_500(reply, "webhook")
    if reply is not None and reply.status >= 400:
        assert world.store.docs == before
    if not signed:
        assert reply is not None and reply.status == 401


@SETTINGS
@given(body=task_bodies)
def test_no_timer_or_prepare_task_body_is_answered_500(body):
    world, service = world_and_service()
    assert_never_500(answered(world, lambda: service.handle_timer(body)), "timeout")
    assert_never_500(answered(world, lambda: service.handle_prepare(body)), "prepare")


@SETTINGS
@given(data=st.one_of(st.binary(max_size=60), task_bodies), kind=st.sampled_from(
    [KIND_ROOM_STATUSES, KIND_RECIPIENT_RECEIPTS, None]), received=st.one_of(junk, st.integers(-(2**70), 2**70)))
def test_no_status_queue_push_is_answered_500(data, kind, received):
    world, service = world_and_service(webhook_mode="queued")
    queue = world_queue(world)
    service.core._status_queue_factory = lambda: queue
    try:
        decoded = json.loads(data)
        if isinstance(decoded, dict):
            decoded["received_at_us"] = received
            data = json.dumps(decoded).encode()
    except ValueError:
        pass
    attrs = {"kind": kind} if kind else {}
    body = json.dumps({"message": {"data": base64.b64encode(data).decode(), "attributes": attrs,
                                   "messageId": "9"}}).encode()
    assert_never_500(answered(world, lambda: service.handle_status_push(body)), "status")


def world_queue(world: World):
    from tests.fakes import FakeStatusQueue

    if not hasattr(world, "_queue"):
        world._queue = FakeStatusQueue()  # type: ignore[attr-defined]
    return world._queue  # type: ignore[attr-defined]


# ---------------------------------------------------------------- the cases the issue names


def test_a_deliver_at_that_overflows_in_utc_is_kept_as_rejected_not_a_500():
    attrs = {"room_id": "room-1", "message_id": "m-1", "provider": "whatsapp", "recipient": "15550001",
             "deliver_at": "9999-12-31T23:30:00-01:00"}
    body = json.dumps({"message": {"data": base64.b64encode(b'{"type":"text","text":"hi"}').decode(),
                                   "attributes": attrs, "messageId": "101",
                                   "publishTime": datetime.now(UTC).isoformat()}}).encode()
    world, service = world_and_service()
    for reply in (service.handle_push(body), service.handle_dead_letter(body)):
        assert reply.status == 200 and reply.body["result"] == "rejected", reply
    assert all("attributes.deliver_at: must be a time from 1970 to 9998" in r["reason"] for r in world.store.rejected.values()) and world.store.rejected


def test_a_signed_webhook_whose_object_is_a_list_is_a_400():
    raw = json.dumps({"object": ["page"], "entry": []}).encode()
    world, service = world_and_service()
    assert service.handle_status_webhook(raw, sign(raw, SECRET)).status == 400

