"""Offline checks of infra/operations.tf: every log-based metric's filter and
extractors, evaluated against delivery event lines the code itself produces
(a `DeliveryService` over the in-memory fakes, driven through a room's life:
sent, acked, timed out, failed, dead-lettered, skipped, parked, rescued by
the watchdog, paused, rejected), never against hand-typed copies.

The filters are evaluated by a small interpreter of the subset of the
Logging query language they use
(https://cloud.google.com/logging/docs/view/logging-query-language):
comparisons `=`, `!=`, `>=`, `<=`, `>`, `<` on `jsonPayload.*` paths, value
lists `field=("a" OR "b")`, `AND`, `OR`, `NOT` and parentheses, with the
documented precedence (OR binds tighter than AND). A filter using anything
else fails the test, so the interpreter cannot silently disagree.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from shared import config
from shared.events import LOG_TYPE, METRICS_LOG_TYPE, TERMINAL_EVENTS, DeliveryEvent
from shared.room import Pause, Skip, StatusUpdate, TimerFired, WatchdogSweep, policy_from_settings
from shared.service import DeliveryService, ServiceCore
from tests.fakes import FakePlatform, FakeRoomStore, FakeTimers, SimClock

ROOT = Path(__file__).resolve().parents[3]
TF = ROOT / "infra" / "operations.tf"


# ------------------------------------------------------------------ real event lines


class Lines:
    """An event log that keeps the records exactly as the service writes them."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def emit(self, event: DeliveryEvent) -> None:
        self.records.append(json.loads(json.dumps(event.to_record())))


def _push(room: str, mid: str, attrs: dict[str, str] | None = None) -> bytes:
    attributes = {"room_id": room, "provider": "whatsapp", "recipient": "15550001", "message_id": mid}
    attributes.update(attrs or {})
    return json.dumps({"message": {"data": base64.b64encode(b'{"type":"text","text":"hi"}').decode(),
                                   "attributes": attributes, "messageId": f"p-{mid}",
                                   "publishTime": "2026-11-22T10:00:00.123456789Z"}}).encode()


@pytest.fixture(scope="module")
def lines() -> list[dict[str, Any]]:
    clock = SimClock()
    settings = dataclasses.replace(config.load(), max_send_attempts=1, event_log_path="", metrics_log_path="",
                                   webhook_mode="direct")
    store, platform, log = FakeRoomStore(clock), FakePlatform(clock, settings.send_timeout_ms), Lines()
    timers = FakeTimers(clock)
    svc = DeliveryService(ServiceCore(settings, policy_from_settings(settings), store, timers,
                                      {"whatsapp": platform}, log))  # type: ignore[arg-type]

    def flight(room: str) -> Any:
        return store.load_room(room).in_flight

    far = time.time_ns() // 1000 + 86_400 * 10**6  # a day ahead: every wait is over
    # acked, then timed out (room a).
    svc.handle_push(_push("a", "m1"))
    svc.handle_push(_push("a", "m2"))
    f = flight("a")
    svc.apply("a", StatusUpdate(store.load_room("a").incarnation, 1, 1, "delivered", f.started_at_us,
                                f.started_at_us + 80_000, "wamid.1"), "webhook")
    # m2's timer carries its acceptance (issue 46): fired early, it records it (sent, re-armed).
    t = next(a.timer for a in timers.tasks if (a.timer.room_id, a.timer.seq) == ("a", 2))
    svc.apply("a", TimerFired(t.incarnation, 2, 1, t.due_at_us, flight("a").started_at_us, t.accepted_deadline_us),
              "timeout")
    svc.apply("a", WatchdogSweep(far), "sweep")  # overdue: rescued, then timed out
    # failed (room b): a permanent refusal.
    platform.fail_next_send("permanent")
    svc.handle_push(_push("b", "m1"))
    # dead-lettered (room c): one transient refusal with MAX_SEND_ATTEMPTS=1.
    platform.fail_next_send("transient")
    svc.handle_push(_push("c", "m1"))
    # skipped and paused (room d).
    svc.handle_push(_push("d", "m1"))
    svc.apply("d", Pause("alice", "complaint", far), "operator")
    f = flight("d")
    svc.apply("d", Skip(1, "alice", "wrong", f.started_at_us + 10**8), "operator")
    svc.apply("d", TimerFired(store.load_room("d").incarnation, 1, 1, far, far), "timeout")
    # parked (room e), rejected (no room).
    svc.handle_dead_letter(_push("e", "m1"))
    svc.handle_push(_push("f", "m1", {"provider": "carrier-pigeon"}))
    records = log.records
    records.append({"log_type": METRICS_LOG_TYPE, "function": "enqueue", "event": "acked"})  # another log type
    return records


def test_the_life_above_produced_every_event_the_metrics_count(lines):
    events = {r.get("event") for r in lines if r.get("log_type") == LOG_TYPE}
    assert {str(e) for e in TERMINAL_EVENTS} | {"sent", "watchdog_rescued", "parked", "rejected", "paused"} <= events


# ------------------------------------------------------------------ the filter interpreter


_TOKEN = re.compile(r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<op>>=|<=|!=|=|>|<|:)|(?P<paren>[()])'
                    r'|(?P<word>[A-Za-z_][A-Za-z0-9_.]*|-?\d+(?:\.\d+)?))')


def tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        assert m and m.end() > pos, f"filter syntax this test does not know at {text[pos:]!r}"
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class Filter:
    """A parsed Logging filter: `matches(entry)`."""

    def __init__(self, text: str) -> None:
        self.toks = tokens(text)
        self.i = 0
        self.tree = self.conj()
        assert self.i == len(self.toks), f"trailing tokens in {text!r}"

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def conj(self) -> Any:  # AND binds loosest
        parts = [self.disj()]
        while self.peek() == ("word", "AND"):
            self.take()
            parts.append(self.disj())
        return ("and", parts)

    def disj(self) -> Any:  # OR binds tighter than AND
        parts = [self.unary()]
        while self.peek() == ("word", "OR"):
            self.take()
            parts.append(self.unary())
        return ("or", parts)

    def unary(self) -> Any:
        if self.peek() == ("word", "NOT"):
            self.take()
            return ("not", self.unary())
        if self.peek() == ("paren", "("):
            self.take()
            inner = self.conj()
            assert self.take() == ("paren", ")")
            return inner
        kind, field = self.take()
        assert kind == "word" and field.startswith("jsonPayload."), f"unsupported term {field!r}"
        _, op = self.take()
        assert op in {"=", "!=", ">=", "<=", ">", "<"}, f"unsupported operator {op!r}"
        if self.peek() == ("paren", "("):
            self.take()
            values = [self.value()]
            while self.peek() == ("word", "OR"):
                self.take()
                values.append(self.value())
            assert self.take() == ("paren", ")")
            return ("cmp", field, op, values)
        return ("cmp", field, op, [self.value()])

    def value(self) -> Any:
        kind, text = self.take()
        if kind == "str":
            return json.loads(text)
        if kind == "word" and text in ("true", "false"):
            return text == "true"  # a boolean field (`relogged`): compared as a boolean
        assert kind == "word" and re.fullmatch(r"-?\d+(?:\.\d+)?", text), f"unsupported value {text!r}"
        return float(text)

    def matches(self, entry: dict[str, Any]) -> bool:
        return self._eval(self.tree, entry)

    def _eval(self, node: Any, entry: dict[str, Any]) -> bool:
        kind = node[0]
        if kind == "and":
            return all(self._eval(n, entry) for n in node[1])
        if kind == "or":
            return any(self._eval(n, entry) for n in node[1])
        if kind == "not":
            return not self._eval(node[1], entry)
        _, field, op, values = node
        actual = lookup(entry, field)
        return any(compare(actual, op, v) for v in values)


def lookup(entry: dict[str, Any], path: str) -> Any:
    value: Any = entry
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def compare(actual: Any, op: str, wanted: Any) -> bool:
    if actual is None:
        return op == "!="
    if isinstance(wanted, bool):
        assert op in {"=", "!="}, f"ordering of booleans: {op}"
        return (actual is wanted) == (op == "=")
    if isinstance(wanted, float):
        if isinstance(actual, bool) or not isinstance(actual, int | float):
            return False
        return {"=": actual == wanted, "!=": actual != wanted, ">=": actual >= wanted, "<=": actual <= wanted,
                ">": actual > wanted, "<": actual < wanted}[op]
    assert op in {"=", "!="}, f"ordering of strings is not used here: {op}"
    return (str(actual) == wanted) == (op == "=")


def as_entry(record: dict[str, Any]) -> dict[str, Any]:
    """The LogEntry Cloud Logging makes of one stdout line: `severity` moves
    to the entry, everything else stays in `jsonPayload`
    (https://cloud.google.com/functions/docs/monitoring/logging#writing_structured_logs)."""
    return {"severity": record.get("severity", "DEFAULT"),
            "jsonPayload": {k: v for k, v in record.items() if k != "severity"}}


def extract(expr: str, entry: dict[str, Any]) -> Any:
    m = re.fullmatch(r"EXTRACT\((jsonPayload\.[A-Za-z0-9_.]+)\)", expr)
    assert m, f"unsupported extractor {expr!r}"
    return lookup(entry, m.group(1))


# ------------------------------------------------------------------ the metrics, read from the file
#
# No HCL library: the main virtualenv has none (tests/infra parses infra/ in
# .venv-infra), and this test needs the service's fakes. The file is read
# with the few patterns it is written in; a pattern that finds nothing fails.

_HCL_STRING = r'"(?:[^"\\]|\\.)*"'


def hcl_string(literal: str) -> str:
    """An HCL quoted string's value (its escapes are JSON's for \\" and \\\\)."""
    return json.loads(literal)


def pairs(text: str) -> dict[str, str]:
    """`key = "string"` pairs of an HCL object or block body."""
    return {k: hcl_string(v) for k, v in re.findall(rf"\b([a-z_]+)\s*=\s*({_HCL_STRING})", text)}


def block(text: str, rtype: str, name: str) -> str:
    m = re.search(rf'^resource "{rtype}" "{name}" \{{\n(.*?)^\}}', text, re.M | re.S)
    assert m, f"no resource {rtype}.{name} in {TF}"
    return m.group(1)


def local_map(text: str, name: str) -> dict[str, dict[str, str]]:
    """A `name = { key = { ... } ... }` map of objects written one per line."""
    m = re.search(rf"^  {name} = \{{\n(.*?)^  \}}", text, re.M | re.S)
    assert m, f"no local {name}"
    return {k: pairs(body) for k, body in re.findall(r"^    ([a-z_]+)\s*=\s*\{(.*)\}$", m.group(1), re.M)}


@pytest.fixture(scope="module")
def tf() -> dict[str, Any]:
    text = TF.read_text()
    delivery_log = hcl_string(re.search(rf"^  delivery_log\s*=\s*({_HCL_STRING})$", text, re.M).group(1))
    outcomes = re.findall(_HCL_STRING, re.search(r"^  outcomes\s*=\s*\[(.*)\]$", text, re.M).group(1))
    return {"text": text, "delivery_log": delivery_log, "outcomes": [hcl_string(o) for o in outcomes],
            "counters": local_map(text, "delivery_counters"), "latencies": local_map(text, "delivery_latencies")}


def render(expr: str, tf: dict[str, Any], each: tuple[str, dict[str, str]] | None = None) -> str:
    """Interpolate the few references the metric filters use: local.delivery_log,
    each.key and each.value.* (and nothing else: anything left fails)."""

    def sub(m: re.Match[str]) -> str:
        ref = m.group(1)
        if ref == "local.delivery_log":
            return tf["delivery_log"]
        if each and ref == "each.key":
            return each[0]
        if each and ref.startswith("each.value."):
            return each[1][ref.removeprefix("each.value.")]
        raise AssertionError(f"unknown reference {ref}")

    text = re.sub(r"\$\{([a-z_.]+)\}", sub, expr)
    assert "${" not in text, text
    return text


def metrics(tf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """metric short name -> {filter, value (extractor), labels (extractors)}, rendered."""
    text = tf["text"]
    ended = pairs(block(text, "google_logging_metric", "messages_ended"))
    out: dict[str, dict[str, Any]] = {"messages_ended": {"filter": render(ended["filter"], tf),
                                                          "labels": {"outcome": ended["outcome"]}}}
    counter = pairs(block(text, "google_logging_metric", "delivery_counter"))
    for key, spec in tf["counters"].items():
        out[key] = {"filter": render(counter["filter"], tf, (key, spec))}
    latency = pairs(block(text, "google_logging_metric", "delivery_latency"))
    for key, spec in tf["latencies"].items():
        out[key] = {"filter": render(latency["filter"], tf, (key, spec)),
                    "value": render(latency["value_extractor"], tf, (key, spec))}
    return out


# ------------------------------------------------------------------ the checks


def matched(filter_text: str, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    f = Filter(filter_text)
    return [as_entry(r) for r in lines if f.matches(as_entry(r))]


def test_messages_ended_counts_exactly_the_terminal_events_labelled_by_outcome(tf, lines):
    m = metrics(tf)["messages_ended"]
    hits = matched(m["filter"], lines)
    want = [r for r in lines if r.get("log_type") == LOG_TYPE and r["event"] in TERMINAL_EVENTS
            and not r.get("relogged")]
    assert len(hits) == len(want) and len(want) >= 5
    # Each end once: the copy the outbox logs again (`relogged`) is not counted.
    assert matched(m["filter"], [want[0]]) and not matched(m["filter"], [{**want[0], "relogged": True}])
    outcomes = {extract(m["labels"]["outcome"], e) for e in hits}
    assert outcomes == {str(e) for e in TERMINAL_EVENTS} == set(tf["outcomes"])


@pytest.mark.parametrize("name,event", [("watchdog_rescues", "watchdog_rescued"), ("rejected_pushes", "rejected"),
                                        ("parked_messages", "parked")])
def test_each_counter_counts_exactly_its_event(tf, lines, name, event):
    hits = matched(metrics(tf)[name]["filter"], lines)
    want = [r for r in lines if r.get("log_type") == LOG_TYPE and r["event"] == event]
    assert want and len(hits) == len(want)
    assert {e["jsonPayload"]["event"] for e in hits} == {event}


@pytest.mark.parametrize("name,event", [("send_to_ack_latency", "acked"), ("head_of_line_wait", "sent")])
def test_each_distribution_extracts_a_number_of_ms_from_every_line_it_matches(tf, lines, name, event):
    m = metrics(tf)[name]
    hits = matched(m["filter"], lines)
    assert hits and {e["jsonPayload"]["event"] for e in hits} == {event}
    values = [extract(m["value"], e) for e in hits]
    assert all(isinstance(v, int | float) and v >= 0 for v in values), values
    # No line of that event with a number in the field is left out.
    field = m["value"].removeprefix("EXTRACT(jsonPayload.").rstrip(")")
    eligible = [r for r in lines if r.get("log_type") == LOG_TYPE and r["event"] == event
                and isinstance(r.get(field), int | float) and (event != "sent" or r["attempt"] == 1)]
    assert len(hits) == len(eligible)


def test_no_metric_counts_a_line_of_another_log_type(tf, lines):
    other = [r for r in lines if r.get("log_type") != LOG_TYPE]
    assert other
    for name, m in metrics(tf).items():
        assert matched(m["filter"], other) == [], name


def test_alerts_and_dashboard_use_only_metrics_defined_here_or_by_google(tf):
    text = tf["text"]
    defined = {"messages_ended", *tf["counters"], *tf["latencies"]}
    used = set(re.findall(r"\$\{local\.metric_type\}/([a-z_]+)", text))
    assert used and used <= defined, used - defined
    google = set(re.findall(r'metric\.type=\\"([a-z]+\.googleapis\.com/[a-z_/]+)\\"', text))
    assert google == {"pubsub.googleapis.com/subscription/num_undelivered_messages",
                      "pubsub.googleapis.com/subscription/oldest_unacked_message_age",
                      "cloudtasks.googleapis.com/queue/depth", "run.googleapis.com/request_count"}


def test_every_alert_notifies_the_channel_variable(tf):
    text = tf["text"]
    policies = set(re.findall(r'^resource "google_monitoring_alert_policy" "([a-z_0-9]+)"', text, re.M))
    assert policies == {"needs_operator", "watchdog_rescues", "timed_out_share", "oldest_unacked", "function_5xx"}
    for name in policies:
        body = block(text, "google_monitoring_alert_policy", name)
        assert re.search(r"notification_channels\s*=\s*var\.alert_notification_channels$", body, re.M), name
        assert "documentation {" in body, name
    ratio = block(text, "google_monitoring_alert_policy", "timed_out_share")
    assert "denominator_filter" in ratio and 'alignment_period     = "900s"' in ratio
