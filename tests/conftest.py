"""Fixtures shared by the integration and end-to-end tests.

One local stack per test session (`tools.local.stack.Stack`): the real Firestore,
Pub/Sub and Cloud Tasks emulators, the three functions under
functions-framework and the fake WhatsApp platform, on free ports, stopped by
process group at the end. Tests isolate themselves with unique room ids.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

# Short timeouts keep the suite fast; SEND_TIMEOUT_MS must stay below ACK_TIMEOUT_MS.
TEST_ENV = {"ACK_TIMEOUT_MS": "1500", "SEND_TIMEOUT_MS": "1000", "SEND_START_DEADLINE_MS": "1000",
            "SEND_RETRY_BASE_MS": "300", "WATCHDOG_GRACE_MS": "5000",
            # The stack's own webhook only logs `sent`, whatever the shell has: the fake platform
            # posts `sent` 5 ms after taking a message, and the tests of a resend after an unknown
            # send outcome need it to change nothing. tests/integration/test_sent_proof.py and
            # tests/unit/service/test_sent_proof_service.py test the default, `on`.
            "WHATSAPP_SENT_PROOF": "off",
            # Pacing that a test can see in seconds, on Messenger rooms only (no other test sends
            # more than 5 messages to one Messenger recipient).
            "PACE_INTERVAL_MS_MESSENGER": "150", "PACE_BURST_MESSENGER": "5",
            # Preparation and producer sequence on a scale of seconds (tests/integration/test_prepare.py).
            "PREPARE_TIMEOUT_MS": "4000", "PREPARE_RETRY_BASE_MS": "200", "MAX_PREPARE_ATTEMPTS": "3",
            "MEDIA_TIMEOUT_MS": "3500", "SEQUENCE_GAP_TIMEOUT_MS": "2000"}


# What a client of a stack needs in this process (tools.local.stack.Stack.client_env):
# where the emulators are. Never a setting: a setting in this process's
# environment would reach every stack started later in the session (each
# child starts from os.environ), and those that test the deployed defaults
# (chaos, senders, operator day) would run another configuration.
CLIENT_KEYS = frozenset({"GOOGLE_CLOUD_PROJECT", "FIRESTORE_EMULATOR_HOST", "PUBSUB_EMULATOR_HOST",
                         "CLOUD_TASKS_EMULATOR_HOST", "PUBSUB_TOPIC"})


def inherited_settings(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The baton settings (shared/config.py's ENV_VARS, other than where the
    emulators are) that `environ` (default: this process's) sets: what a
    stack started now would inherit instead of its own defaults."""
    from shared.config import ENV_VARS

    env = os.environ if environ is None else environ
    return {k: env[k] for k in ENV_VARS if k in env and k not in CLIENT_KEYS}


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in os.environ for the block only; the environment as it was after."""
    saved = dict(os.environ)
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def stack_settings(**overrides: Any) -> Any:
    """The settings the session's stack runs with (TEST_ENV over the
    defaults), for a service built in this process; `overrides` replace
    fields. TEST_ENV is applied for the load only, never left in os.environ."""
    import dataclasses

    from shared import config

    with environment(TEST_ENV):
        settings = config.load()
    return dataclasses.replace(settings, **overrides)


@contextmanager
def session_stack(start: Callable[[], Any]) -> Iterator[Any]:
    """Start a stack with `start()` and yield it with only its client
    environment in os.environ (its `start` may write more there: restored
    first); the environment as it was, and the stack stopped, after."""
    with environment({}):
        s = start()
    try:
        with environment(s.client_env()):
            yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from tools.local.stack import Stack

    run_dir = Path(tmp_path_factory.mktemp("stack"))
    # Deterministic platform: no random losses; tests ask for what they need.
    fake = {"ack_prob": 1.0, "fail_prob": 0.0, "duplicate_prob": 0.0, "reorder_prob": 0.0,
            "read_without_delivered_prob": 0.0, "ack_median_ms": 40.0, "ack_sigma": 0.3}
    # TEST_ENV goes to the stack's functions (its `env`), not into this process's environment.
    with session_stack(lambda: Stack(run_dir, env=TEST_ENV, fake_config=fake, sweep_interval_s=1.0,
                                     other_webhook_mode="queued").start()) as s:
        yield s


@pytest.fixture(autouse=True)
def _own_stacks_run_the_defaults(request: pytest.FixtureRequest) -> Iterator[None]:
    """An end-to-end test that starts a stack of its own (chaos, senders,
    operator day) tests the deployed defaults plus its own settings: it
    fails if this process's environment would hand its stack another
    test's settings (issue 43). What its stack writes into os.environ (its
    client environment) is undone after it, so the session's stack stays
    the one the later tests' clients reach."""
    if "e2e" not in request.node.path.parts or "stack" in request.fixturenames:
        yield
        return
    leaked = inherited_settings()
    assert not leaked, (f"this process's environment sets {sorted(leaked)}: a stack started now would inherit "
                        f"them instead of the deployed defaults")
    with environment({}):
        yield


@pytest.fixture
def room_id() -> str:
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def fake_config(stack: Any) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Change the fake platform's behaviour for one test; restored after."""
    original = requests.post(f"{stack.fake_url}/_fake/config", json={}, timeout=5).json()

    def change(values: dict[str, Any]) -> None:
        r = requests.post(f"{stack.fake_url}/_fake/config", json=values, timeout=5)
        r.raise_for_status()

    yield change
    requests.post(f"{stack.fake_url}/_fake/config", json=original, timeout=5).raise_for_status()


def wait_for(predicate: Callable[[], Any], timeout_s: float = 20.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail after `timeout_s` s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def room_events(stack: Any, room: str) -> list[dict[str, Any]]:
    from tools.local.audit import read_events

    return [e for e in read_events(stack.event_log) if e["room_id"] == room]


@contextmanager
def fake_platform_process(log_dir: Path, access_token: str, config: dict[str, Any]) -> Iterator[int]:
    """Run the fake platform (tools/sim/fake_platform/) alone on a free port,
    its webhooks aimed at a closed port; yields the port. Stopped by its
    process group at the end, and its port checked free."""
    from tools.local.stack import ROOT, free_port, port_open

    port, nobody = free_port(), free_port()
    with open(log_dir / "fake.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tools.sim.fake_platform", "--port", str(port), "--webhook-url",
             f"http://127.0.0.1:{nobody}/", "--access-token", access_token, "--config", json.dumps(config)],
            cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 15
            while not port_open(port):
                assert proc.poll() is None, f"the fake platform exited with {proc.returncode}"
                assert time.monotonic() < deadline, "the fake platform did not open its port"
                time.sleep(0.05)
            yield port
        finally:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        assert not port_open(port), f"port {port} still open after the fake platform stopped"
