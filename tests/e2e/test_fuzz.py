"""Bad input, fuzzed, against the running functions (the issue "make chaos").

Hypothesis generates webhook bodies and headers, Pub/Sub push envelopes and
Cloud Tasks timer bodies (valid and broken JSON, wrong types in every field,
huge and empty fields, non-ASCII, lone surrogates, wrong signatures) and posts
them to `webhook`, `enqueue`, `deadletter` and `timeout` on the local stack.
What must hold:

- bad input never gets a 5xx (a 503 only for a full room, which these sizes
  never reach);
- nothing changes without a valid signature: a sentinel room with a message
  in flight (made through `RoomStore.apply`, so no send or timer touches it)
  is byte-for-byte the same document, same update time, after every unsigned
  or badly signed status and every timer that is not its own;
- with a valid signature, a body that is not a webhook is a 400;
- every invalid push envelope is answered 200 `rejected`; every valid one is
  answered 200 `ok` and never lost: each ends (acked, failed, timed out, dead-
  lettered) exactly once, a repeated message id included (de-duplicated);
- a timer body that is not a timer is answered 200 `dropped` (not 400: since
  d6d6232 a task that can never be a timer is dropped rather than retried
  forever by the queue); a well-formed timer for an unknown room answers 200 and
  creates nothing.

Runs derandomized (the same inputs in CI every time) with no example database.
The seven bugs this fuzzing found are listed in `KNOWN_BUGS`, all fixed: each
has its own one-request regression test below, and a fuzz input that hits one
again fails with its description.
`pytest -s` prints how many inputs each target got.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import re
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
from google.cloud import firestore
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shared.events import TERMINAL_EVENTS, utc_iso
from shared.providers.whatsapp import sign
from shared.push import Rejected, _parse_time_us, parse_push
from shared.room import Enqueue, Policy, decide, make_delivery_id
from shared.store import RoomStore
from tests.conftest import wait_for
from tools.local.audit import read_events
from tools.local.stack import PROJECT

SECRET = "local-app-secret"
RUN = uuid.uuid4().hex[:6]
PREFIX = f"fz-{RUN}"
N_WEBHOOK, N_PUSH, N_DEADLETTER, N_TIMER = 300, 250, 150, 200
# The fuzz test of a target fails if fewer inputs than this were tried.
MIN_TRIED = 100


def fuzz_settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None, print_blob=False,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large])


TRIED: Counter[str] = Counter()  # inputs posted, per target
TAKEN: Counter[str] = Counter()  # distinct messages a push target took (answered ok / parked)
KNOWN_HITS: Counter[str] = Counter()  # inputs that hit a bug in KNOWN_BUGS
RESPONSES: dict[str, Counter[int]] = defaultdict(Counter)  # HTTP statuses seen, per target

# Bugs this fuzzing found (all fixed since), with what triggered them: each has
# a one-request regression test below, and a fuzz input that hits one again
# fails with its description.
KNOWN_BUGS = {
    "timer-infinity": (
        "timeout: a timer field that is JSON `Infinity` makes int() raise OverflowError, which handle_timer does "
        "not catch (it catches ValueError, KeyError, TypeError, AttributeError): HTTP 500, and the timer queue, "
        "which retries without limit, retries it forever"),
    "dot-room-id": (
        "ROOM_ID accepts '.' and '..', which Firestore refuses as document ids: a push, a dead-letter copy, a timer "
        "or a signed status naming such a room is answered 503 (InvalidArgument), so Pub/Sub, Cloud Tasks or Meta "
        "redeliver it forever (and an ordered push blocks its key) instead of it being rejected"),
    "unstorable-rejected-record": (
        "enqueue/deadletter: keep_rejected stores the envelope's raw fields (attributes, messageId, publishTime) "
        "unsanitised, so a rejected push whose fields Firestore cannot store is answered 500 (ValueError: an "
        "integer beyond int64 or an empty map key; UnicodeEncodeError: a lone surrogate) or 503 (InvalidArgument: "
        "'invalid nested entity' for an array in an array or maps nested over 20 deep, a __reserved__ or over "
        "1,500-byte map key, attributes over 1 MiB, a messageId over 1,500 bytes as the document id) instead of "
        "200 `rejected`; Pub/Sub redelivers it forever"),
    "non-string-callback": (
        "webhook: a signed status whose `biz_opaque_callback_data` is a truthy non-string (a number, a list, an "
        "object) passes parse_statuses and reaches parse_delivery_id, whose .split raises AttributeError: 500, "
        "and Meta retries it for 7 days"),
    "lone-surrogate": (
        "a lone surrogate (a JSON escape such as \\ud800) in a signed status's strings or in a push's text is "
        "accepted, then cannot be encoded as UTF-8 when the event line is written or the room is stored: "
        "UnicodeEncodeError, 500; a valid-looking push with such a text is never stored (and never ends)"),
    "publish-time-year-9999": (
        "enqueue: a publishTime in the last microseconds of 9999-12-31 is parsed, then utc_iso's float "
        "conversion rounds it past datetime.max: ValueError 'year 10000 is out of range', 500"),
    "trailing-newline": (
        "ROOM_ID, MESSAGE_ID and RECIPIENT are checked with re.match and `$`, which also matches before a final "
        "newline: a room 'r\\n', a message id 'm\\n' or a recipient '15550001\\n' is accepted (200 ok, and sent) "
        "instead of rejected"),
}


def known(bug: str | None) -> str | None:
    """Every bug in KNOWN_BUGS is fixed: an input that hits one again is a
    regression, and fails with that bug's description."""
    if bug is not None:
        KNOWN_HITS[bug] += 1
        pytest.fail(f"regression of a bug the fuzzing found and that was fixed: {KNOWN_BUGS[bug]}")
    return bug


@pytest.fixture(scope="module", autouse=True)
def fuzz_summary() -> Iterator[None]:
    yield
    hits = ", ".join(f"{k} x{v}" for k, v in sorted(KNOWN_HITS.items())) or "none"
    print(f"\nfuzz: {TRIED['webhook']} webhook, {TRIED['enqueue']} push, {TRIED['deadletter']} dead-letter push, "
          f"{TRIED['timeout']} timer inputs ({sum(TRIED.values())} in all); messages taken: {TAKEN['enqueue']} "
          f"enqueued, {TAKEN['deadletter']} parked; known bugs hit: {hits}; "
          f"statuses: " + "; ".join(f"{t} {dict(sorted(c.items()))}" for t, c in sorted(RESPONSES.items())))


@pytest.fixture(scope="module")
def store(stack: Any) -> RoomStore:
    return RoomStore(firestore.Client(project=PROJECT), retention_hours=1)


@dataclass(frozen=True)
class Sentinel:
    room: str
    incarnation: int
    delivery_id: str  # the exact delivery id a `delivered` status would ack it with
    doc: dict[str, Any]
    update_time: Any


@pytest.fixture(scope="module")
def sentinel(store: RoomStore) -> Sentinel:
    """A room with a message in flight, made through the store alone: no timer
    and no send. Its ack timeout is a day, so the watchdog never wakes it: only
    a request reaching the room can change it."""
    room = f"{PREFIX}-sentinel"
    now = time.time_ns() // 1000
    enqueue = Enqueue("m1", "whatsapp", "15550001", "hi", now, now)
    store.apply(room, lambda s: decide(s, enqueue, Policy(ack_timeout_ms=86_400_000), "test"))
    snap = store.room_ref(room).get()
    doc = snap.to_dict()
    delivery_id = make_delivery_id(room, doc["incarnation"], 1, 1, doc["in_flight"]["started_at_us"])
    return Sentinel(room, doc["incarnation"], delivery_id, doc, snap.update_time)


def assert_unchanged(store: RoomStore, s: Sentinel) -> None:
    snap = store.room_ref(s.room).get()
    assert snap.to_dict() == s.doc, "the sentinel room changed"
    assert snap.update_time == s.update_time, "the sentinel room was written"


def post(stack: Any, target: str, body: bytes, headers: dict[str, Any] | None = None) -> requests.Response:
    TRIED[target] += 1
    r = requests.post(stack.url(target), data=body, headers=headers or {}, timeout=30)
    RESPONSES[target][r.status_code] += 1
    return r


def answer(r: requests.Response) -> dict[str, Any]:
    try:
        value = r.json()
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def clip(value: Any, limit: int = 600) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


def describe(body: bytes, headers: Any, r: requests.Response) -> str:
    return f"input {clip(body)} headers {clip(headers, 300)} -> HTTP {r.status_code} {r.text[:400]!r}"


class ShortRepr:
    """Keeps hypothesis's report of a failing case readable (bodies reach 1 MB)."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={clip(v, 300)}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


# ---------------------------------------------------------------- generic strategies

SURROGATES = st.characters(categories=["Cs"])
WEIRD_CHARS = st.one_of(st.characters(), st.sampled_from("\x00\n\r\t \u00a0\u202e\ufeff\u00e9\u4e2d/._\\\"'"),
                        SURROGATES)
WEIRD_TEXT = st.text(WEIRD_CHARS, max_size=30)
HUGE_TEXT = st.one_of(st.builds(lambda c, n: c * n, st.sampled_from(["a", "\u00e9", "\U0001F600", "\x00", "7"]),
                                st.sampled_from([300, 5_000, 70_000])),
                      st.just("a" * 1_100_000))  # over Firestore's 1 MiB
JSON_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), WEIRD_TEXT,
                         st.sampled_from([2**63, -(2**63) - 1, 2**70, "", " ", "0", "-1", "1e999", "null"]))


def _deep(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


JSON_VALUES = st.one_of(
    st.recursive(JSON_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(WEIRD_TEXT, inner, max_size=4)),
                 max_leaves=10),
    HUGE_TEXT,
    st.integers(25, 40).map(_deep),
)


def has_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, list):
        return any(has_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    return False


def to_json(value: Any, ascii_only: bool) -> bytes:
    """JSON bytes; non-ASCII as escapes or as UTF-8 (a lone surrogate written
    raw gives bytes that are not UTF-8 at all)."""
    return json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", errors="surrogatepass")


def parses(body: bytes) -> tuple[bool, Any]:
    try:
        return True, json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return False, None


@st.composite
def broken_json(draw: Any, valid: bytes) -> bytes:
    """Bytes that are not JSON: a cut-off, padded or spliced valid body, random
    bytes, or nothing."""
    kind = draw(st.integers(0, 4))
    if kind == 0:
        body = valid[:draw(st.integers(0, max(0, len(valid) - 1)))]
    elif kind == 1:
        body = valid + draw(st.sampled_from([b"}", b",", b"x", b"\x00", b"\xff"]))
    elif kind == 2 and valid:
        at = draw(st.integers(0, len(valid) - 1))
        body = valid[:at] + draw(st.binary(min_size=1, max_size=8)) + valid[at + 1:]
    elif kind == 3:
        body = draw(st.binary(max_size=300))
    else:
        body = draw(st.sampled_from([b"", b" ", b"\xef\xbb\xbf", b"{", b"[", b"nul", b"{'a': 1}", b"\xff\xfe{}"]))
    ok, _ = parses(body)
    return body + b"}}" if ok else body  # valid JSON plus "}}" never is


# ---------------------------------------------------------------- webhook

STATUS_NAMES = st.one_of(st.sampled_from(["sent", "delivered", "read", "failed"]), WEIRD_TEXT)
INT_TEXT = st.one_of(st.integers(0, 10**15).map(str), st.sampled_from(["0", "-1", "9" * 40, "\u0661\u0662", "1e3", ""]))


@st.composite
def callbacks(draw: Any, room: str, exact: str | None) -> str:
    """`biz_opaque_callback_data` values naming `room` (or garbage)."""
    kind = draw(st.integers(0, 5))
    if kind == 0 and exact is not None:
        return exact
    if kind <= 2:
        return make_delivery_id(room, draw(st.integers(1, 2**62)), draw(st.integers(1, 2**40)),
                                draw(st.integers(1, 2**40)), draw(st.integers(0, 2**62)))
    if kind == 3:
        parts = [draw(INT_TEXT) for _ in range(3)] + [draw(st.text("0123456789abcxyz", max_size=14))]
        return ".".join([*parts, room])
    return draw(st.one_of(WEIRD_TEXT, HUGE_TEXT))


@st.composite
def status_payloads(draw: Any, room: str, exact: str | None) -> tuple[dict[str, Any], int]:
    """A well-formed WhatsApp status webhook payload, and its status count."""
    def one_status() -> dict[str, Any]:
        s: dict[str, Any] = {"id": draw(st.one_of(st.just("wamid.T"), WEIRD_TEXT, HUGE_TEXT)),
                             "status": draw(STATUS_NAMES), "timestamp": "1700000000",
                             "recipient_id": draw(st.one_of(st.just("15550001"), WEIRD_TEXT)),
                             "biz_opaque_callback_data": draw(callbacks(room, exact))}
        if draw(st.booleans()):
            s["errors"] = [{"code": draw(st.integers(-(2**31), 2**31)), "title": draw(WEIRD_TEXT)}]
        return s

    entries = []
    count = 0
    for _ in range(draw(st.integers(1, 2))):
        changes = []
        for _ in range(draw(st.integers(0, 2))):
            statuses = [one_status() for _ in range(draw(st.integers(0, 3)))]
            count += len(statuses)
            changes.append({"field": "messages", "value": {"messaging_product": "whatsapp", "statuses": statuses}})
        entries.append({"id": "1", "changes": changes})
    return {"object": "whatsapp_business_account", "entry": entries}, count


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw: Any, payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` with one to three fields given a value of another type, or removed."""
    payload = json.loads(json.dumps(payload))  # a deep copy
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(payload))
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = payload
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.integers(0, 3)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(JSON_VALUES)
    return payload


@dataclass(repr=False)
class WebhookCase(ShortRepr):
    body: bytes
    headers: dict[str, Any]
    signed: bool  # the header carries the right signature of exactly this body
    shape: str  # "webhook" (200), "not_webhook" (400) or "mutated" (200 or 400)
    statuses: int = 0


@st.composite
def webhook_bodies(draw: Any, room: str, exact: str | None) -> tuple[bytes, str, int]:
    kind = draw(st.integers(0, 9))
    ascii_only = draw(st.booleans())
    payload, count = draw(status_payloads(room, exact))
    if kind <= 3:
        body = to_json(payload, ascii_only)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return body, "not_webhook", 0  # a raw lone surrogate: not UTF-8, so not JSON
        return body, "webhook", count
    if kind <= 5:
        return to_json(draw(mutated(payload)), ascii_only), "mutated", 0
    if kind == 6:
        # One field of one status given another type: every field in turn.
        statuses = statuses_of(payload)
        if statuses:
            status = draw(st.sampled_from(statuses))
            status[draw(st.sampled_from(sorted(status)))] = draw(JSON_VALUES)
        return to_json(payload, ascii_only), "mutated", 0
    if kind == 7:
        return draw(broken_json(to_json(payload, ascii_only))), "not_webhook", 0
    value = draw(JSON_VALUES)
    return to_json(value, ascii_only), "not_webhook", 0


HEADER_TEXT = st.text(st.characters(exclude_categories=["Cc", "Cs", "Zl", "Zp"]), max_size=80).map(str.lstrip)


def header_value(text: str) -> bytes:
    try:
        return text.encode("latin-1")
    except UnicodeEncodeError:
        return text.encode("utf-8")


@st.composite
def webhook_cases(draw: Any, sentinel: Sentinel, signed_rooms: list[str]) -> WebhookCase:
    """A header kind, then a body: unsigned and badly signed requests name the
    sentinel room (with its exact delivery id now and then); validly signed
    ones name rooms that do not exist."""
    kind = draw(st.sampled_from(["none", "empty", "random_hex", "wrong_secret", "other_body", "cut", "upper",
                                 "no_prefix", "other_scheme", "suffix", "text", "valid", "valid", "valid",
                                 "valid_lowercase_name"]))
    if kind.startswith("valid"):
        room = draw(st.sampled_from([*signed_rooms, ".", "..", "a/b", "", "\u00e9t\u00e9"]))
        body, shape, count = draw(webhook_bodies(room, None))
    else:
        body, shape, count = draw(webhook_bodies(sentinel.room, sentinel.delivery_id))
    good = sign(body, SECRET)
    value: str | bytes | None
    if kind == "none":
        value = None
    elif kind == "empty":
        value = ""
    elif kind == "random_hex":
        value = "sha256=" + draw(st.text("0123456789abcdef", min_size=64, max_size=64))
    elif kind == "wrong_secret":
        value = sign(body, draw(st.text(max_size=20).filter(lambda s: s != SECRET)))
    elif kind == "other_body":
        value = sign(body + draw(st.binary(min_size=1, max_size=4)), SECRET)
    elif kind == "cut":
        value = good[:draw(st.integers(0, len(good) - 1))]
    elif kind == "upper":
        value = "sha256=" + (good[7:].upper() if good[7:] != good[7:].upper() else "F" * 64)
    elif kind == "no_prefix":
        value = good[7:]
    elif kind == "other_scheme":
        value = draw(st.sampled_from(["sha1=", "SHA256=", "sha256:", "sha256 =", "sha512="])) + good[7:]
    elif kind == "suffix":
        value = good + draw(st.text(st.characters(exclude_categories=["Cc", "Cs", "Zs", "Zl", "Zp"]), min_size=1,
                                    max_size=5))
    elif kind == "text":
        value = draw(st.one_of(HEADER_TEXT, HEADER_TEXT.map(lambda t: "sha256=" + t)))
    else:
        value = good
    headers: dict[str, Any] = {}
    if value is not None:
        name = "x-hub-signature-256" if kind == "valid_lowercase_name" else "X-Hub-Signature-256"
        headers[name] = header_value(value) if isinstance(value, str) else value
    # What the function sees: the header decoded as latin-1 (WSGI), stripped.
    seen = headers.get("X-Hub-Signature-256", headers.get("x-hub-signature-256"))
    signed = seen is not None and seen.decode("latin-1").strip() == good
    assert signed == kind.startswith("valid"), kind
    if shape == "not_webhook":
        ok, value = parses(body)
        if ok and isinstance(value, dict) and isinstance(value.get("entry"), list):
            shape = "mutated"  # random JSON that happens to have the webhook's shape
    return WebhookCase(body, headers, signed, shape, count)


def statuses_of(payload: Any) -> list[dict[str, Any]]:
    """The status objects of a payload, as far as it has the webhook's shape."""
    out: list[dict[str, Any]] = []
    if not isinstance(payload, dict) or not isinstance(payload.get("entry"), list):
        return out
    for entry in payload["entry"]:
        changes = entry.get("changes", []) if isinstance(entry, dict) else None
        for change in changes if isinstance(changes, list) else []:
            value = change.get("value") if isinstance(change, dict) else None
            statuses = value.get("statuses", []) if isinstance(value, dict) else None
            out += [s for s in (statuses if isinstance(statuses, list) else []) if isinstance(s, dict)]
    return out


def webhook_known_bug(case: WebhookCase, r: requests.Response) -> str | None:
    if r.status_code < 500 or not case.signed:
        return None
    ok, payload = parses(case.body)
    if not ok:
        return None
    statuses = statuses_of(payload)
    if any(s.get("biz_opaque_callback_data") and not isinstance(s.get("biz_opaque_callback_data"), str)
           for s in statuses):
        return "non-string-callback"
    if has_surrogate(payload):
        return "lone-surrogate"
    for s in statuses:
        cb = s.get("biz_opaque_callback_data")
        if r.status_code == 503 and isinstance(cb, str) and cb.count(".") >= 4 and cb.split(".", 4)[4] in (".", ".."):
            return "dot-room-id"
    return None


def test_webhook_fuzz_never_5xx_and_nothing_changes_without_a_valid_signature(stack, store, sentinel,
                                                                              record_property):
    signed_rooms = [f"{PREFIX}-w{i}" for i in range(4)]
    start = TRIED["webhook"]

    @fuzz_settings(N_WEBHOOK)
    @given(case=webhook_cases(sentinel, signed_rooms))
    def run(case: WebhookCase) -> None:
        r = post(stack, "webhook", case.body, case.headers)
        what = describe(case.body, case.headers, r)
        if known(webhook_known_bug(case, r)):
            return
        assert r.status_code < 500, what
        if not case.signed:
            assert r.status_code == 401, what
        elif case.shape == "webhook":
            assert r.status_code == 200 and answer(r).get("statuses") == case.statuses, what
        elif case.shape == "not_webhook":
            assert r.status_code == 400, what
        else:
            assert r.status_code in (200, 400), what

    run()
    tried = TRIED["webhook"] - start
    record_property("fuzz_webhook_inputs", tried)
    assert tried >= MIN_TRIED
    assert_unchanged(store, sentinel)
    # A status never creates a room, signed or not.
    assert [room for room in signed_rooms if store.room_ref(room).get().exists] == []


# ---------------------------------------------------------------- push envelopes

_ids = itertools.count(1)
VALID_ROOM = re.compile(r"[A-Za-z0-9_.:@+=-]{1,256}")
VALID_MESSAGE_ID = re.compile(r"[\x21-\x7e]{1,256}")
VALID_RECIPIENT = re.compile(r"\+?[0-9]{5,20}")
WHITESPACE = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2028\u3000"


def valid_room(s: Any) -> bool:
    """The producer contract's room id, and one Firestore can store as a document id."""
    return (isinstance(s, str) and VALID_ROOM.fullmatch(s) is not None and s not in (".", "..")
            and not re.fullmatch(r"__.*__", s, re.S))


def valid_data(raw: Any) -> bool:
    if not isinstance(raw, str):
        return False
    try:
        data = json.loads(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return False
    # The contract (shared/contract): a text has `text` and maybe `type` and `preview_url`, no other field.
    return (isinstance(data, dict) and data.get("type", "text") == "text" and isinstance(data.get("text"), str)
            and bool(data["text"].strip()) and len(data["text"]) <= 4096
            and set(data) <= {"type", "text", "preview_url"} and isinstance(data.get("preview_url", False), bool))


NORMAL_TEXT = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=120).filter(str.strip)
VALID_TEXT = st.one_of(NORMAL_TEXT, st.sampled_from(["a" * 4096, "\U0001F600" * 4096, "\u00e9" * 4096, " x ",
                                                     "\x00x", "<b>hi</b> {{name}} \u202eevil"]))
RECIPIENTS = st.one_of(st.just("15550001"), st.from_regex(r"\+?[0-9]{5,20}", fullmatch=True).filter(
    lambda s: VALID_RECIPIENT.fullmatch(s) is not None))
MID_STEM = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=20)
ATTR_TEXT = st.one_of(WEIRD_TEXT.filter(lambda s: not has_surrogate(s)), st.sampled_from(["x" * 70_000]))


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@dataclass(repr=False)
class PushCase(ShortRepr):
    body: bytes
    valid: bool
    room: Any  # the room the service should put it in (attribute, else ordering key)
    mid: Any
    text: Any
    breakers: tuple[str, ...]
    publish_time: Any = None
    repeat: bool = False


BREAKERS = ("not_json", "not_object", "no_message", "attributes", "room", "ordering_key", "message_id", "provider",
            "recipient", "data", "text", "room_nl", "message_id_nl", "recipient_nl")
NEWLINE_BREAKERS = {"room_nl", "message_id_nl", "recipient_nl"}
# Breakers of one field overwrite each other: at most one of each group is drawn.
FIELD_OF = {"room_nl": "room", "ordering_key": "room", "message_id_nl": "message_id", "recipient_nl": "recipient"}
BAD_ROOMS = st.one_of(st.sampled_from(["", ".", "..", "__x__", "__", "a/b", "a b", "r\u00e9", "x" * 257, "\x00",
                                       "r\t"]),
                      WEIRD_TEXT.filter(lambda s: not valid_room(s)), JSON_SCALARS.filter(lambda v: not valid_room(v)))


def _not(pattern: re.Pattern[str]) -> Callable[[Any], bool]:
    return lambda v: not (isinstance(v, str) and pattern.fullmatch(v) is not None)


@st.composite
def push_cases(draw: Any, rooms: list[str], history: dict[str, set[str]]) -> PushCase:
    room = draw(st.sampled_from(rooms))
    # Drawn whatever the history holds: hypothesis needs the same draws for the same choices.
    pick, which, stem, pad = (draw(st.integers(0, 7)), draw(st.integers(0, 2**16)), draw(MID_STEM),
                              draw(st.integers(0, 15)) == 0)
    repeat = pick == 0 and bool(history[room])
    if repeat:
        earlier = sorted(history[room])
        mid = earlier[which % len(earlier)]  # a redelivery: must be de-duplicated
    else:
        mid = f"{stem}-{next(_ids)}"
        if pad:
            mid = mid.rjust(256, "#")
    text = draw(VALID_TEXT)
    if draw(st.integers(0, 23)) == 11:  # now and then (hypothesis favours the ends of a range)
        text = text[:4095] + "\ud800"  # valid JSON (an escape), a str in Python, not storable as UTF-8
    data_obj: dict[str, Any] = {"type": "text", "text": text} if draw(st.booleans()) else {"text": text}
    if draw(st.integers(0, 3)) == 0:
        data_obj.update(draw(st.dictionaries(WEIRD_TEXT.filter(lambda k: k not in ("type", "text")), JSON_SCALARS,
                                             max_size=3)))
    attrs: dict[str, Any] = {"room_id": room, "provider": "whatsapp", "recipient": draw(RECIPIENTS),
                             "message_id": mid}
    extra = draw(st.dictionaries(ATTR_TEXT.filter(lambda k: k not in attrs), ATTR_TEXT, max_size=3))
    attrs.update(extra)
    message: dict[str, Any] = {"data": b64(to_json(data_obj, ascii_only=True)), "attributes": attrs}
    ordering = draw(st.integers(0, 3))
    if ordering == 1:
        message["orderingKey"] = room
    elif ordering == 2:
        message["orderingKey"] = ""
    elif ordering == 3:
        del attrs["room_id"]  # the room comes from the ordering key alone
        message["orderingKey"] = room
    pubsub_id = draw(st.integers(0, 5))
    if pubsub_id <= 2:
        message["messageId"] = str(draw(st.integers(0, 10**18)))
    elif pubsub_id == 3:
        message["messageId"] = draw(st.one_of(WEIRD_TEXT, JSON_SCALARS, st.just("a" * 2000)))
    publish = draw(st.integers(0, 5))
    if publish <= 2:
        dt = draw(st.datetimes())
        message["publishTime"] = f"{dt:%Y-%m-%dT%H:%M:%S}.{dt.microsecond:06d}{draw(st.integers(0, 999)):03d}Z"
    elif publish == 3:
        message["publishTime"] = draw(JSON_SCALARS)
    elif publish == 4:
        message["publishTime"] = draw(st.sampled_from([
            "9999-12-31T23:59:59.999999999Z", "0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "2026-02-30T00:00:00Z",
            "2026-11-22T10:00:00.1234567891234Z", "2026-11-22T10:00:00+05:00", "2026-11-22", "2026-11-22T10:00:00.xZ",
            "\u0662\u0660\u0662\u0666-11-22T10:00:00Z"]))
    envelope: dict[str, Any] = {"message": message}
    if draw(st.booleans()):
        envelope["subscription"] = draw(st.one_of(st.just("projects/baton-local/subscriptions/x"), JSON_SCALARS))
    effective_room = attrs.get("room_id") or message.get("orderingKey")

    breakers: tuple[str, ...] = ()
    if draw(st.integers(0, 9)) >= 4:
        breakers = tuple(draw(st.lists(st.sampled_from(BREAKERS), min_size=1, max_size=2,
                                       unique_by=lambda b: FIELD_OF.get(b, b))))
    body: bytes | None = None
    for b in breakers:
        if b == "not_json":
            body = draw(broken_json(to_json(envelope, ascii_only=True)))
        elif b == "not_object":
            body = to_json(draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict))), ascii_only=True)
        elif b == "no_message":
            if draw(st.booleans()):
                del envelope["message"]
            else:
                envelope["message"] = draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict)))
        elif b == "attributes":
            message["attributes"] = draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict)))
        elif b in ("room", "room_nl"):
            message.pop("orderingKey", None)
            attrs["room_id"] = f"{room}\n" if b == "room_nl" else draw(BAD_ROOMS)
            effective_room = attrs["room_id"]
        elif b == "ordering_key":
            attrs["room_id"] = effective_room = room
            message["orderingKey"] = draw(st.one_of(
                WEIRD_TEXT.filter(lambda s: s not in ("", room)), st.just(room + "x"),
                JSON_VALUES.filter(lambda v: v is not None and not isinstance(v, str))))
        elif b in ("message_id", "message_id_nl"):
            if b == "message_id_nl":
                attrs["message_id"] = f"{mid}\n"
            elif draw(st.integers(0, 4)) == 0:
                attrs.pop("message_id")
            else:
                attrs["message_id"] = draw(st.one_of(
                    st.sampled_from(["", "a b", "m\u00e9", "x" * 257, "\x7f", "m\t1"]),
                    WEIRD_TEXT.filter(_not(VALID_MESSAGE_ID)), JSON_SCALARS.filter(_not(VALID_MESSAGE_ID))))
        elif b == "provider":
            if draw(st.integers(0, 4)) == 0:
                attrs.pop("provider")
            else:
                attrs["provider"] = draw(st.one_of(st.sampled_from(["WhatsApp", "whatsapp ", "twilio", ""]),
                                                   JSON_SCALARS.filter(lambda v: v != "whatsapp")))
        elif b in ("recipient", "recipient_nl"):
            if b == "recipient_nl":
                attrs["recipient"] = f"{attrs['recipient']}\n"
            elif draw(st.integers(0, 4)) == 0:
                attrs.pop("recipient")
            else:
                attrs["recipient"] = draw(st.one_of(
                    st.sampled_from(["1234", "1" * 21, "+", "++15550001", "1555-0001", "\u0661\u0662\u0663\u0664\u0665",
                                     "15550001 ", "phone"]),
                    WEIRD_TEXT.filter(_not(VALID_RECIPIENT)), JSON_SCALARS.filter(_not(VALID_RECIPIENT))))
        elif b == "data":
            kind = draw(st.integers(0, 3))
            if kind == 0:
                message["data"] = draw(JSON_VALUES.filter(lambda v: not isinstance(v, str)))
            elif kind == 1:
                message["data"] = draw(st.one_of(WEIRD_TEXT, st.sampled_from(["====", "aGk", "aGk=\n", "!!"])))
            elif kind == 2:
                message["data"] = b64(draw(st.binary(max_size=60)))
            else:
                message["data"] = b64(to_json(draw(JSON_VALUES.filter(lambda v: not isinstance(v, dict))), True))
            if valid_data(message["data"]):
                message["data"] += "!"
        elif b == "text":
            bad = draw(st.one_of(st.text(st.sampled_from(WHITESPACE), max_size=6),
                                 st.sampled_from(["a" * 4097, "\U0001F600" * 4097, "x" * 100_000]),
                                 JSON_VALUES.filter(lambda v: not isinstance(v, str))))
            obj = {"type": draw(JSON_VALUES.filter(lambda v: v != "text")), "text": text} \
                if draw(st.integers(0, 3)) == 0 else {"type": "text", "text": bad}
            message["data"] = b64(to_json(obj, ascii_only=True))
    if body is None:
        body = to_json(envelope, ascii_only=draw(st.booleans()))
    # A text with a lone surrogate cannot be stored or logged: rejected. A field the
    # contract does not know (shared/contract) is refused too.
    known_fields = set(data_obj) <= {"type", "text", "preview_url"} \
        and isinstance(data_obj.get("preview_url", False), bool)
    return PushCase(body, not breakers and not has_surrogate(text) and known_fields, effective_room,
                    attrs.get("message_id"), text,
                    breakers,
                    message.get("publishTime"), repeat)


def storable(value: Any, depth: int = 0) -> bool:
    """Whether Firestore can store `value` as a field (documented limits:
    64-bit integers, UTF-8 strings, map keys non-empty, at most 1,500 bytes
    and not of the form __x__, no array directly in an array, at most 20
    levels of nesting)."""
    if depth > 20:
        return False
    if value is None or isinstance(value, bool | float):
        return True
    if isinstance(value, int):
        return -(2**63) <= value < 2**63
    if isinstance(value, str):
        return not has_surrogate(value)
    if isinstance(value, list):
        return all(not isinstance(v, list) and storable(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and k != "" and not has_surrogate(k) and len(k.encode()) <= 1500
                   and not re.fullmatch(r"__.*__", k, re.S) and storable(v, depth + 1) for k, v in value.items())
    return False


def push_known_bug(case: PushCase, r: requests.Response) -> str | None:
    result = answer(r).get("result")
    if r.status_code == 200 and result in ("ok", "parked") and not case.valid:
        return "trailing-newline" if set(case.breakers) <= NEWLINE_BREAKERS else None
    if r.status_code < 500:
        return None
    parsed = parse_push(case.body, time.time_ns() // 1000)
    if isinstance(parsed, Rejected):
        record_size = len(json.dumps(parsed.record, ensure_ascii=False).encode("utf-8", errors="surrogatepass"))
        if (not storable(parsed.record) or record_size > 1_000_000
                or len(parsed.key.encode("utf-8", errors="surrogatepass")) > 1500):
            return "unstorable-rejected-record"
        return None
    if r.status_code == 503 and parsed.room_id in (".", ".."):
        return "dot-room-id"
    if has_surrogate(parsed.event.text):
        return "lone-surrogate"
    published = _parse_time_us(case.publish_time)
    if published is not None:
        try:
            utc_iso(published)
        except (ValueError, OverflowError):
            return "publish-time-year-9999"
    return None


def fuzz_pushes(stack: Any, target: str, rooms: list[str], n: int) -> dict[tuple[str, str], str]:
    """Post `n` generated envelopes to `target`; returns (room, message id) ->
    result of every envelope the service took (answered 200 and not rejected)."""
    history: dict[str, set[str]] = defaultdict(set)
    taken: dict[tuple[str, str], str] = {}
    expected = "ok" if target == "enqueue" else "parked"

    @fuzz_settings(n)
    @given(case=push_cases(rooms, history))
    def run(case: PushCase) -> None:
        r = post(stack, target, case.body)
        what = f"{describe(case.body, None, r)} breakers {case.breakers}"
        bug = known(push_known_bug(case, r))
        result = answer(r).get("result")
        if r.status_code == 200 and result == expected:
            taken[(str(case.room), str(case.mid))] = result  # a known bug's acceptance too: it must not be lost either
            if case.valid:
                history[case.room].add(case.mid)
        if bug:
            return
        assert r.status_code < 500, what  # a 503 here would be back-pressure: these rooms are never full
        assert r.status_code == 200, what
        if case.valid:
            assert result == expected, what
        else:
            assert result == "rejected", what

    run()
    TAKEN[target] += len(taken)
    return taken


def test_push_fuzz_never_5xx_invalid_rejected_and_no_valid_message_lost(stack, record_property):
    rooms = [f"{PREFIX}-e{i}" for i in range(10)]  # a room sends one message at a time: spread them
    start = TRIED["enqueue"]
    taken = fuzz_pushes(stack, "enqueue", rooms, N_PUSH)
    tried = TRIED["enqueue"] - start
    record_property("fuzz_push_inputs", tried)
    assert tried >= MIN_TRIED and len(taken) >= 30, (tried, len(taken))

    def ends() -> tuple[Counter[tuple[str, str]], Counter[tuple[str, str]]]:
        events = [e for e in read_events(stack.event_log) if (e.get("room_id") or "").startswith(PREFIX)]
        ended = Counter((e["room_id"], e["message_id"]) for e in events if e["event"] in TERMINAL_EVENTS)
        enqueued = Counter((e["room_id"], e["message_id"]) for e in events if e["event"] == "enqueued")
        return ended, enqueued

    try:
        wait_for(lambda: set(taken) <= set(ends()[0]), timeout_s=30, what="every taken message to end")
    except AssertionError:
        pass  # reported precisely below
    ended, enqueued = ends()
    lost = sorted(key for key in taken if key not in ended)
    assert lost == [], f"{len(lost)} of {len(taken)} messages answered 200 ok never ended: {lost[:10]}"
    assert [k for k in taken if ended[k] != 1] == [], "a message ended more than once"
    assert [k for k in taken if enqueued[k] != 1] == [], "a repeated message id was enqueued twice"


def test_deadletter_fuzz_never_5xx_invalid_rejected_and_valid_ones_parked(stack, store, record_property):
    rooms = [f"{PREFIX}-d{i}" for i in range(4)]
    start = TRIED["deadletter"]
    taken = fuzz_pushes(stack, "deadletter", rooms, N_DEADLETTER)
    tried = TRIED["deadletter"] - start
    record_property("fuzz_deadletter_inputs", tried)
    assert tried >= MIN_TRIED and len(taken) >= 20, (tried, len(taken))
    # Each dead-letter copy taken is held, parked, in its room.
    rooms_now = {room: store.load_room(room) for room in {room for room, _ in taken}}
    held = {room: state.message_ids() if state is not None else set() for room, state in rooms_now.items()}
    assert sorted(key for key in taken if key[1] not in held[key[0]]) == []


# ---------------------------------------------------------------- timers

TIMER_FIELDS = ("incarnation", "seq", "attempt", "due_at_us")
TIMER_NUMBERS = st.one_of(
    st.integers(), st.integers(), st.integers(), st.integers(0, 2**62), st.floats(), JSON_VALUES,
    st.sampled_from(["12", " 7 ", "1e3", "\u0661", "", "0x10", 2**64, -1, 0, True, 1.5, float("inf"), float("nan")]))


def as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (ValueError, TypeError, OverflowError):
        return None


@dataclass(repr=False)
class TimerCase(ShortRepr):
    body: bytes
    shape: str  # "not_timer" (200 dropped), "unknown_room", "sentinel" (200 ok) or "any" (200 ok or dropped)
    room: Any = None
    fields: dict[str, Any] = field(default_factory=dict)


@st.composite
def timer_cases(draw: Any, sentinel: Sentinel, unknown_rooms: list[str]) -> TimerCase:
    kind = draw(st.integers(0, 9))
    if kind <= 2:
        template = to_json({"room_id": unknown_rooms[0], "incarnation": 1, "seq": 1, "attempt": 1, "due_at_us": 1},
                           True)
        body = draw(st.one_of(broken_json(template), st.binary(max_size=200),
                              JSON_VALUES.map(lambda v: to_json(v, True))))
        ok, value = parses(body)
        shape = "not_timer" if not ok or not isinstance(value, dict) or not all(
            k in value for k in ("room_id", *TIMER_FIELDS)) else "any"
        return TimerCase(body, shape)
    which = draw(st.integers(0, 5))
    room: Any
    if which <= 2:
        room, shape = draw(st.sampled_from(unknown_rooms)), "unknown_room"
    elif which == 3:
        room, shape = sentinel.room, "sentinel"
    else:
        room, shape = draw(st.one_of(BAD_ROOMS, JSON_VALUES)), "any"
    fields = {}
    extremes = draw(st.integers(0, 4)) == 2
    for name in TIMER_FIELDS:
        if extremes:
            fields[name] = draw(st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308, -0.0, 2**63,
                                                 -(2**64), 10**30, True, None, "9" * 5000]))
        elif shape != "any" and draw(st.integers(0, 3)) > 0:
            fields[name] = draw(st.integers(-(2**80), 2**80))
        else:
            fields[name] = draw(TIMER_NUMBERS)
    if room == sentinel.room and (as_int(fields["incarnation"]), as_int(fields["seq"]),
                                  as_int(fields["attempt"])) == (sentinel.incarnation, 1, 1):
        fields["attempt"] = 2  # the sentinel's own timer would legitimately wake it
    if any(as_int(v) is None or isinstance(v, bool) for v in fields.values()):
        shape = "any"  # int() may or may not take it
    timer: dict[str, Any] = {"room_id": room, **fields}
    if draw(st.integers(0, 4)) == 0:
        timer.update(draw(st.dictionaries(WEIRD_TEXT.filter(lambda k: k not in timer), JSON_SCALARS, max_size=3)))
    if draw(st.integers(0, 6)) == 0 and shape != "sentinel":
        missing = draw(st.sampled_from(["room_id", *TIMER_FIELDS]))
        del timer[missing]
        shape = "not_timer"
    return TimerCase(to_json(timer, draw(st.booleans())), shape, room, fields)


def timer_known_bug(case: TimerCase, r: requests.Response) -> str | None:
    if r.status_code < 500:
        return None
    ok, value = parses(case.body)
    if not ok or not isinstance(value, dict):
        return None
    if r.status_code == 500 and any(isinstance(value.get(k), float) and value[k] in (float("inf"), float("-inf"))
                                    for k in TIMER_FIELDS):
        return "timer-infinity"
    if r.status_code == 503 and str(value.get("room_id")) in (".", ".."):
        return "dot-room-id"
    return None


def test_timer_fuzz_never_5xx_and_an_unknown_room_is_left_alone(stack, store, sentinel, record_property):
    unknown_rooms = [f"{PREFIX}-t{i}" for i in range(6)]
    start = TRIED["timeout"]

    @fuzz_settings(N_TIMER)
    @given(case=timer_cases(sentinel, unknown_rooms))
    def run(case: TimerCase) -> None:
        r = post(stack, "timeout", case.body)
        what = describe(case.body, None, r)
        if known(timer_known_bug(case, r)):
            return
        assert r.status_code < 500, what
        assert r.status_code == 200, what
        result = answer(r).get("result")
        if case.shape == "not_timer":
            assert result == "dropped" and "not a baton timer" in answer(r).get("error", ""), what
        elif case.shape in ("unknown_room", "sentinel"):
            assert result == "ok", what
        else:
            assert result in ("ok", "dropped"), what

    run()
    tried = TRIED["timeout"] - start
    record_property("fuzz_timer_inputs", tried)
    assert tried >= MIN_TRIED
    assert_unchanged(store, sentinel)
    assert [room for room in unknown_rooms if store.room_ref(room).get().exists] == []


# ---------------------------------------------------------------- the bugs found, one reproduction each


def _push_envelope(attrs: dict[str, Any], text: str = "hi", **message: Any) -> bytes:
    return json.dumps({"message": {"data": b64(json.dumps({"type": "text", "text": text}).encode()),
                                   "attributes": attrs, "messageId": "424242", **message}}).encode()


def _attrs(room: str, mid: str, **more: Any) -> dict[str, Any]:
    return {"room_id": room, "provider": "whatsapp", "recipient": "15550001", "message_id": mid, **more}


def _signed(payload_status: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    body = json.dumps({"entry": [{"changes": [{"value": {"statuses": [payload_status]}}]}]}).encode()
    return body, {"X-Hub-Signature-256": sign(body, SECRET)}


def _repro(stack: Any, bug: str) -> None:
    room = f"{PREFIX}-bug-{bug}"
    if bug == "timer-infinity":
        body = b'{"room_id": "%s", "incarnation": Infinity, "seq": 1, "attempt": 1, "due_at_us": 1}' % room.encode()
        r = requests.post(stack.url("timeout"), data=body, timeout=10)
        assert r.status_code == 200 and answer(r)["result"] == "dropped", r.text
    elif bug == "dot-room-id":
        r = requests.post(stack.url("enqueue"), data=_push_envelope(_attrs(".", "m1")), timeout=10)
        assert r.status_code == 200 and answer(r)["result"] == "rejected", r.text
    elif bug == "unstorable-rejected-record":
        # Invalid (no provider), with an attribute Firestore cannot store.
        attrs = {"room_id": room, "message_id": "m1", "n": 2**70}
        r = requests.post(stack.url("enqueue"), data=_push_envelope(attrs), timeout=10)
        assert r.status_code == 200 and answer(r)["result"] == "rejected", r.text
    elif bug == "non-string-callback":
        body, headers = _signed({"id": "wamid.X", "status": "delivered", "biz_opaque_callback_data": 5})
        r = requests.post(stack.url("webhook"), data=body, headers=headers, timeout=10)
        assert r.status_code == 200, r.text
    elif bug == "lone-surrogate":
        r = requests.post(stack.url("enqueue"), data=_push_envelope(_attrs(room, "m1"), text="hi \ud800"), timeout=10)
        assert r.status_code == 200 and answer(r)["result"] in ("ok", "rejected"), r.text
    elif bug == "publish-time-year-9999":
        r = requests.post(stack.url("enqueue"), data=_push_envelope(
            _attrs(room, "m1"), publishTime="9999-12-31T23:59:59.999999999Z"), timeout=10)
        assert r.status_code == 200, r.text
    elif bug == "trailing-newline":
        r = requests.post(stack.url("enqueue"), data=_push_envelope(_attrs(room, "m1\n")), timeout=10)
        assert r.status_code == 200 and answer(r)["result"] == "rejected", r.text
    else:
        raise AssertionError(bug)


@pytest.mark.parametrize("bug", list(KNOWN_BUGS))
def test_known_bug(stack, bug):
    """Each bug the fuzzing found, reduced to one request, stays fixed."""
    _repro(stack, bug)
