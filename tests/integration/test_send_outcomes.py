"""The WhatsApp adapter's send outcomes against the fake platform's faults.

The fake platform (tools/sim/fake_platform/) runs as a subprocess on a free
port, in its own process group, with a webhook URL nobody listens on (its
webhooks fail and are retried in the background; nothing here reads them).
Each test uses its own recipients, so per-recipient faults never leak.

Must hold: a send is repeated inside the call only when it provably never
reached the platform; the whole call stays within its budget; an unknown
outcome is reported as such (possibly sent), never as refused.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError, ProtocolError

from shared.providers import SendOutcome, SendResult
from shared.providers.whatsapp import WhatsAppClient
from tests.conftest import fake_platform_process
from tools.local.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "test-access-token"
BUDGET_MS = 800
# Scheduling slack allowed past the budget (the call itself keeps to the budget).
MARGIN_S = 0.3
QUIET = {"ack_prob": 1.0, "fail_prob": 0.0, "duplicate_prob": 0.0, "reorder_prob": 0.0}
_numbers = itertools.count(15550000001)


def recipient() -> str:
    return str(next(_numbers))


class FakePlatform:
    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"

    def configure(self, values: dict[str, Any]) -> None:
        requests.post(f"{self.url}/_fake/config", json=values, timeout=5).raise_for_status()

    def stats(self) -> dict[str, Any]:
        return requests.get(f"{self.url}/_fake/stats", timeout=5).json()

    def sends_to(self, to: str) -> list[dict[str, Any]]:
        return [s for s in self.stats()["sends"] if s["recipient"] == to]

    def client(self, budget_ms: int = BUDGET_MS) -> WhatsAppClient:
        return WhatsAppClient(self.url, "v21.0", "100000000000001", TOKEN, budget_ms)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakePlatform]:
    with fake_platform_process(tmp_path_factory.mktemp("fake"), TOKEN, QUIET) as port:
        yield FakePlatform(port)


def timed_send(client: WhatsAppClient, to: str) -> tuple[SendResult, float]:
    started = time.monotonic()
    result = client.send(to, "hello", f"room-1:1:{to}")
    return result, time.monotonic() - started


def test_a_send_the_platform_takes_is_accepted_with_its_wamid(fake):
    to = recipient()
    result, _ = timed_send(fake.client(), to)
    sends = fake.sends_to(to)
    assert result.outcome is SendOutcome.ACCEPTED and result.ok
    assert len(sends) == 1
    assert result.provider_message_id == sends[0]["wamid"]
    assert sends[0]["callback"] == f"room-1:1:{to}"


def test_a_connection_dropped_after_the_request_was_read_is_unknown_and_not_resent(fake):
    to = recipient()
    fake.configure({"drop_after_read": {to: 1}})
    before = fake.stats()["faults"]["drop_after_read"]
    result, _ = timed_send(fake.client(), to)
    assert result.outcome is SendOutcome.UNKNOWN and not result.ok
    assert result.provider_message_id is None
    assert "possibly sent" in (result.error_title or "")
    assert len(fake.sends_to(to)) == 1  # the platform got it once, not three times
    assert fake.stats()["faults"]["drop_after_read"] == before + 1
    # The fault was for one send only: the next one is answered.
    assert fake.client().send(to, "again", "d-2").outcome is SendOutcome.ACCEPTED


def test_a_refused_connection_is_refused_transient_within_the_budget():
    port = free_port()  # nobody listens there
    client = WhatsAppClient(f"http://127.0.0.1:{port}", "v21.0", "1", TOKEN, BUDGET_MS)
    result, elapsed = timed_send(client, recipient())
    assert result.outcome is SendOutcome.REFUSED
    assert not result.permanent and not result.rate_limited
    assert elapsed < BUDGET_MS / 1000 + MARGIN_S


def test_a_connect_timeout_is_refused_and_the_retries_keep_to_the_budget():
    # A listener whose accept queue is full: the kernel drops further SYNs, so
    # connecting times out (Linux).
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        fillers = []
        try:
            for _ in range(8):
                s = socket.socket()
                fillers.append(s)
                s.settimeout(0.3)
                try:
                    s.connect(("127.0.0.1", port))
                except TimeoutError:
                    break
            else:
                pytest.skip("this kernel does not make a full accept queue time out")
            client = WhatsAppClient(f"http://127.0.0.1:{port}", "v21.0", "1", TOKEN, BUDGET_MS)
            result, elapsed = timed_send(client, recipient())
        finally:
            for s in fillers:
                s.close()
    assert result.outcome is SendOutcome.REFUSED and not result.permanent
    assert elapsed < BUDGET_MS / 1000 + MARGIN_S


def test_a_send_answered_after_the_budget_is_unknown_and_the_call_keeps_to_the_budget(fake):
    to = recipient()
    fake.configure({"slow_send_ms": {to: [3000]}})
    result, elapsed = timed_send(fake.client(), to)
    assert result.outcome is SendOutcome.UNKNOWN
    assert elapsed < BUDGET_MS / 1000 + MARGIN_S
    assert len(fake.sends_to(to)) == 1  # it did go out, once
    assert fake.stats()["faults"]["slow_send"] >= 1


@pytest.mark.parametrize("status", [500, 503])
def test_a_server_error_is_unknown(fake, status):
    to = recipient()
    fake.configure({"http_5xx": {to: [status]}})
    result, _ = timed_send(fake.client(), to)
    assert result.outcome is SendOutcome.UNKNOWN and not result.permanent
    assert len(fake.sends_to(to)) == 0  # the fake sent nothing; the sender cannot know that


@pytest.mark.parametrize(
    ("code", "permanent", "rate_limited"),
    [(131026, True, False), (131047, True, False), (131056, False, True), (130429, False, False)],
)
def test_a_graph_error_is_refused_with_its_code(fake, code, permanent, rate_limited):
    to = recipient()
    fake.configure({"send_errors": {to: [code]}})
    result, _ = timed_send(fake.client(), to)
    assert result.outcome is SendOutcome.REFUSED and not result.ok
    assert (result.permanent, result.rate_limited, result.error_code) == (permanent, rate_limited, code)
    assert len(fake.sends_to(to)) == 0


def test_random_rate_limit_errors_are_counted_by_kind(fake):
    to = recipient()
    fake.configure({"pair_rate_limit_prob": 1.0})
    try:
        result, _ = timed_send(fake.client(), to)
    finally:
        fake.configure({"pair_rate_limit_prob": 0.0})
    assert result.outcome is SendOutcome.REFUSED and result.rate_limited and result.error_code == 131056
    assert fake.stats()["faults"]["pair_rate_limit"] >= 1


def test_the_fake_refuses_a_config_of_the_wrong_type(fake):
    r = requests.post(f"{fake.url}/_fake/config", json={"drop_after_read": ["15550000000"]}, timeout=5)
    assert r.status_code == 400


# ---------------------------------------------------------------- tries inside one call
# A stand-in session raising exactly what requests raises, to count tries.


class ScriptedSession:
    def __init__(self, failures: list[Exception], client: WhatsAppClient) -> None:
        self.failures = failures
        self.real = client._session
        self.tries = 0

    def post(self, url: str, **kwargs: Any) -> requests.Response:
        self.tries += 1
        if self.failures:
            raise self.failures.pop(0)
        return self.real.post(url, **kwargs)


def refused() -> requests.ConnectionError:
    cause = NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused")
    return requests.ConnectionError(MaxRetryError(None, "/v21.0/1/messages", cause))


def dropped() -> requests.ConnectionError:
    return requests.ConnectionError(ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")))


def test_a_send_that_never_connected_is_tried_again_and_can_then_be_accepted(fake):
    client = fake.client()
    session = ScriptedSession([refused(), refused()], client)
    client._session = session
    result, _ = timed_send(client, recipient())
    assert session.tries == 3
    assert result.outcome is SendOutcome.ACCEPTED


def test_a_send_that_never_connected_gives_up_after_a_few_tries(fake):
    client = fake.client()
    session = ScriptedSession([refused() for _ in range(10)], client)
    client._session = session
    result, elapsed = timed_send(client, recipient())
    assert 2 <= session.tries <= 4
    assert result.outcome is SendOutcome.REFUSED and not result.permanent
    assert elapsed < BUDGET_MS / 1000 + MARGIN_S


def test_a_connection_reset_after_connecting_is_tried_once(fake):
    client = fake.client()
    session = ScriptedSession([dropped(), dropped()], client)
    client._session = session
    result, _ = timed_send(client, recipient())
    assert session.tries == 1
    assert result.outcome is SendOutcome.UNKNOWN


def test_a_2xx_without_a_message_id_is_unknown(fake):
    to = recipient()
    fake.configure({"answer_without_id": {to: 1}})
    result = fake.client().send(to, "hi", "d-1")
    assert result.outcome is SendOutcome.UNKNOWN and result.provider_message_id is None


def test_an_answer_trickled_byte_by_byte_is_cut_at_the_budget(fake):
    to = recipient()
    fake.configure({"trickle_answer_ms": {to: [200.0]}})  # each read well inside the read timeout
    result, elapsed = timed_send(fake.client(), to)
    assert result.outcome is SendOutcome.UNKNOWN
    # The body is read in chunks with the deadline checked in between; one
    # read (0.2 s here) may run past it.
    assert elapsed < BUDGET_MS / 1000 + 0.2 + MARGIN_S
