"""The local stack: emulators, the three functions and the fake platform.

`python -m tools.local.stack up [--run-dir run/local]` starts, in their own process
groups, on free ports chosen at start (so parallel runs never collide):

- the Firestore emulator and the Pub/Sub emulator (gcloud, Java 17);
- gcloud-tasks-emulator, from its own virtualenv `.venv-tasks` (it pins
  protobuf<5, which the current Google clients cannot share), with the
  DeleteTask it lacks added (tools/local/tasks_emulator.py), so acked
  attempts' timers are deleted as in the cloud;
- the fake platform (tools/sim/fake_platform/: the WhatsApp, Messenger and
  Instagram wire formats, with injected faults);
- `enqueue`, `deadletter`, `webhook`, `status`, `timeout`, `sweep`,
  `prepare` and `admin` under functions-framework (`admin` with
  ADMIN_AUTH=local: it verifies the stand-in tokens the `baton` CLI signs
  with the stack's random ADMIN_LOCAL_KEY, kept in stack.json;
  shared/admin/identity.py);
- the sweeper (tools/local/sweeper.py), which calls `sweep` every
  `sweep_interval_s` seconds, as Cloud Scheduler does every minute in the cloud;
- the operators' console (docs/console.md): `baton console`, the local
  authenticating proxy to the admin function's /console/ pages, on its own
  port (`console_url`, printed by `up`);

then creates the topic, the ordered push subscription to `enqueue` (with a
dead-letter policy where the emulator keeps one), the dead-letter topic with
its ordered push subscription to `deadletter`, and the Cloud Tasks queues (timers,
scheduled messages, preparation), and writes `RUN_DIR/stack.json` (ports, process group ids,
the environment for clients). `python -m tools.local.stack down` stops every group
by its id and checks that each port is free again. Logs: `RUN_DIR/*.log`.

The same `Stack` class is what the tests, the demo and the benchmark use.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "baton-local"
TOPIC = "baton-outbound"
SUBSCRIPTION = "baton-enqueue-push"
DEAD_LETTER_TOPIC = "baton-outbound-dead-letter"
DEAD_LETTER_SUBSCRIPTION = "baton-deadletter-push"
STATUS_TOPIC = "baton-statuses"
STATUS_SUBSCRIPTION = "baton-status-push"
STATUS_ERROR_TOPIC = f"{STATUS_TOPIC}-dead-letter"
STATUS_ERROR_SUBSCRIPTION = "baton-statuses-error-queue"
# What baton tells others (shared/service/inbound.py, shared/outcomes.py), each
# with an ordered pull subscription the demo and the tests read.
INBOUND_TOPIC = "baton-inbound"
INBOUND_SUBSCRIPTION = "baton-inbound-sub"
OUTCOMES_TOPIC = "baton-outcomes"
OUTCOMES_SUBSCRIPTION = "baton-outcomes-sub"
FUNCTIONS = ("enqueue", "deadletter", "webhook", "status", "timeout", "sweep", "prepare")
# The operators' function (shared/admin/): served beside FUNCTIONS, which are the delivery path.
ADMIN_FUNCTION = "admin"
# The operators' console proxy (baton_cli/console.py), a process of the stack.
CONSOLE = "console"


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


_taken: set[int] = set()


def free_port() -> int:
    """A free TCP port on 127.0.0.1 below the kernel's ephemeral range.

    Why not the kernel's pick (bind to port 0): that port comes from the
    ephemeral range, and once released the kernel may hand it to the next
    process that binds port 0 -- the Firestore emulator binds its WebSocket
    server that way just before its API port, and then dies with "Address
    already in use" when the two coincide. Ports below the range are never
    handed out by the kernel; a random pick keeps parallel runs apart.
    """
    low = max(1024, min(20000, _ephemeral_range()[0] - 12000))
    high = _ephemeral_range()[0]
    for _ in range(200):
        port = random.randrange(low, high)
        if port in _taken:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _taken.add(port)
        return port
    raise RuntimeError(f"no free port found in {low}-{high}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, requests.RequestException):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{what} not ready after {timeout_s:.0f} s")


@dataclass
class Stack:
    """One local stack in `run_dir`.

    Args:
        run_dir: where logs, the event log and stack.json go.
        env: extra environment for the functions (e.g. ACK_TIMEOUT_MS).
        fake_config: FakeConfig overrides for the fake platform (any field,
            e.g. `media_latency_ms`, the media upload's answer time in ms).
        event_log: path of the delivery event log (default RUN_DIR/events.jsonl).
        sweep_interval_s: seconds between two watchdog sweeps (0: no sweeper).
        dead_letter_attempts: the enqueue subscription's max delivery attempts.
        status_max_backoff_s: the status subscription's longest retry backoff, s.
        other_webhook_mode: also serve a `webhook-MODE` function with
            WEBHOOK_MODE=MODE beside the default one (tests of both modes).
    """

    run_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    fake_config: dict[str, Any] = field(default_factory=dict)
    event_log: Path | None = None
    sweep_interval_s: float = 60.0
    dead_letter_attempts: int = 100
    status_max_backoff_s: int = 4
    other_webhook_mode: str | None = None
    admin_operators: tuple[str, ...] = ()
    admin_key: str = field(default_factory=lambda: secrets.token_hex(16))
    ports: dict[str, int] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    _commands: dict[str, tuple[list[str], dict[str, str] | None]] = field(default_factory=dict, repr=False)

    # ------------------------------------------------------------ lifecycle

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self._commands[name] = (argv, env)
        log = open(self.run_dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, cwd=ROOT, start_new_session=True)
        log.close()
        self.pids[name] = proc.pid
        self._save()

    def kill(self, name: str) -> None:
        """SIGKILL one part's whole process group at once (a crash, not a
        shutdown), and reap it. `restart` brings it back on the same port."""
        pgid = self.pids.pop(name)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for _ in range(50):
            _reap(pgid)
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.05)
        self._save()

    def restart(self, name: str, timeout_s: float = 60.0) -> None:
        """Start a part again with the command it was first started with, and
        wait until its port answers (parts without a port: at once). The
        Cloud Tasks emulator gets its queues again.

        Raises:
            TimeoutError: the port did not open in `timeout_s` s.
        """
        argv, env = self._commands[name]
        self._spawn(name, argv, env)
        if name in self.ports:
            wait_until(lambda: port_open(self.ports[name]), timeout_s, name)
        if name == "tasks":
            # A restarted emulator has lost its queues and every task in them:
            # the rooms' stored wake-ups and the watchdog are what remain.
            self._provision_queues()

    def _save(self) -> None:
        path = self.run_dir / "stack.json"
        path.touch(mode=0o600)  # it holds the admin function's local key
        path.write_text(json.dumps(
            {"ports": self.ports, "pids": self.pids, "client_env": self.client_env(),
             "function_env": self.function_env(), "event_log": str(self.event_log),
             "admin": {"url": self.url("admin") if "admin" in self.ports else None, "local_key": self.admin_key},
             "console_url": self.console_url},
            indent=2))

    def start(self) -> Stack:
        """Start everything; on any failure, stop what was started and raise."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.event_log is None:
            self.event_log = self.run_dir / "events.jsonl"
        self.event_log.parent.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "invocations.jsonl").unlink(missing_ok=True)
        for name in ("firestore", "pubsub", "tasks", "fake", *self.functions, CONSOLE):
            if name not in self.ports:
                self.ports[name] = free_port()
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_all(self) -> None:
        p = self.ports
        self._spawn("firestore", ["gcloud", "emulators", "firestore", "start", f"--host-port=127.0.0.1:{p['firestore']}",
                                  f"--project={PROJECT}", "--quiet"])
        self._spawn("pubsub", ["gcloud", "beta", "emulators", "pubsub", "start", f"--host-port=127.0.0.1:{p['pubsub']}",
                               f"--project={PROJECT}", "--quiet"])
        # gcloud-tasks-emulator with the DeleteTask it lacks (tools/local/tasks_emulator.py).
        tasks_python = ROOT / ".venv-tasks" / "bin" / "python"
        self._spawn("tasks", [str(tasks_python), str(ROOT / "tools" / "local" / "tasks_emulator.py"), "start",
                              "-p", str(p["tasks"]), "-q"])
        py = sys.executable
        self._spawn("fake", [py, "-m", "tools.sim.fake_platform", "--port", str(p["fake"]),
                             "--webhook-url", f"http://127.0.0.1:{p['webhook']}/",
                             "--config", json.dumps(self.fake_config)])
        ff = str(Path(py).parent / "functions-framework")
        for fn in self.functions:
            target, _, mode = fn.partition("-")
            env = {**self.function_env(), **({"WEBHOOK_MODE": mode} if mode else {}),
                   **(self.admin_env() if target == ADMIN_FUNCTION else {})}
            self._spawn(fn, [ff, "--source", "functions/main.py", "--target", target, "--host", "127.0.0.1",
                             "--port", str(p[fn])], env=env)
        # The console proxy: the same `baton console` an operator runs against a project.
        self._spawn(CONSOLE, [py, "-c", "from baton_cli.main import main; main()", "--stack", str(self.run_dir),
                              "console", "--port", str(p[CONSOLE])])
        if self.sweep_interval_s > 0:
            self._spawn("sweeper", [py, "-m", "tools.local.sweeper", "--url", self.url("sweep"),
                                    "--interval-s", str(self.sweep_interval_s)])
        wait_until(lambda: requests.get(f"http://127.0.0.1:{p['firestore']}/", timeout=1).ok, 60, "Firestore emulator")
        wait_until(lambda: requests.get(f"http://127.0.0.1:{p['pubsub']}/", timeout=1).ok, 60, "Pub/Sub emulator")
        for name in ("tasks", "fake", *self.functions, CONSOLE):
            wait_until(lambda n=name: port_open(p[n]), 60, name)
        self._provision()

    @property
    def functions(self) -> tuple[str, ...]:
        """The function processes: FUNCTIONS and the admin function, plus `webhook-MODE` when asked."""
        return FUNCTIONS + (ADMIN_FUNCTION,) + ((f"webhook-{self.other_webhook_mode}",) if self.other_webhook_mode else ())

    def _provision(self) -> None:
        """Topics, ordered push subscriptions with their dead-letter topics,
        the status error queue's pull subscription, Cloud Tasks queues (as
        infra/ does in the cloud)."""
        os.environ.update(self.client_env())
        from google.api_core import exceptions as gexc
        from google.cloud import pubsub_v1

        publisher = pubsub_v1.PublisherClient()
        topic = publisher.topic_path(PROJECT, TOPIC)
        try:
            publisher.create_topic(name=topic)
        except gexc.AlreadyExists:
            pass
        dead_letter_topic = publisher.topic_path(PROJECT, DEAD_LETTER_TOPIC)
        status_topic = publisher.topic_path(PROJECT, STATUS_TOPIC)
        status_error_topic = publisher.topic_path(PROJECT, STATUS_ERROR_TOPIC)
        inbound_topic = publisher.topic_path(PROJECT, INBOUND_TOPIC)
        outcomes_topic = publisher.topic_path(PROJECT, OUTCOMES_TOPIC)
        for extra in (dead_letter_topic, status_topic, status_error_topic, inbound_topic, outcomes_topic):
            try:
                publisher.create_topic(name=extra)
            except gexc.AlreadyExists:
                pass
        subscriber = pubsub_v1.SubscriberClient()
        subscriptions = {
            SUBSCRIPTION: {"topic": topic, "push_endpoint": self.url("enqueue"),
                           "dead_letter_policy": {"dead_letter_topic": dead_letter_topic,
                                                  "max_delivery_attempts": self.dead_letter_attempts}},
            DEAD_LETTER_SUBSCRIPTION: {"topic": dead_letter_topic, "push_endpoint": self.url("deadletter")},
            # No dead-letter policy here, unlike the cloud's (infra/): the
            # emulator's ordered push loop throws a NullPointerException when
            # it dead-letters and the message is lost (measured: Pub/Sub
            # emulator 0.8.20). The `status` function moves a failing message
            # to the error queue itself (shared/service/statuses.py, handle_status_push).
            STATUS_SUBSCRIPTION: {"topic": status_topic, "push_endpoint": self.url("status"),
                                  "max_backoff_s": self.status_max_backoff_s},
            # The error queue: a pull subscription that keeps what it holds
            # for 7 days (`baton statuses list|replay`).
            STATUS_ERROR_SUBSCRIPTION: {"topic": status_error_topic},
            INBOUND_SUBSCRIPTION: {"topic": inbound_topic, "ordered": True},
            OUTCOMES_SUBSCRIPTION: {"topic": outcomes_topic, "ordered": True},
        }
        for name, spec in subscriptions.items():
            request: dict[str, Any] = {
                "name": subscriber.subscription_path(PROJECT, name), "topic": spec["topic"],
                "ack_deadline_seconds": 30,
            }
            if "push_endpoint" in spec:
                request["enable_message_ordering"] = True
                request["push_config"] = {"push_endpoint": spec["push_endpoint"]}
                request["retry_policy"] = {"minimum_backoff": {"seconds": 1},
                                           "maximum_backoff": {"seconds": spec.get("max_backoff_s", 600)}}
            else:
                request["message_retention_duration"] = {"seconds": 7 * 24 * 3600}
                request["enable_message_ordering"] = bool(spec.get("ordered"))
            if "dead_letter_policy" in spec:
                request["dead_letter_policy"] = spec["dead_letter_policy"]
            try:
                subscriber.create_subscription(request=request)
            except gexc.AlreadyExists:
                pass
        self._provision_queues()

    def _provision_queues(self) -> None:
        """The Cloud Tasks queues (the emulator keeps them, and their tasks,
        in memory only)."""
        from shared import config
        from shared.prepare import PrepareScheduler
        from shared.scheduled import ScheduledHold
        from shared.tasks import TimerScheduler, make_client

        settings = _settings_from(self.function_env(), config)
        client = make_client(settings)
        TimerScheduler(client, settings).ensure_queues()
        ScheduledHold(client, settings).ensure_queue()
        PrepareScheduler(client, settings).ensure_queues()

    def stop(self) -> None:
        """Stop every process group by its id, then check the ports are free."""
        for name, pid in list(self.pids.items()):
            _kill_group(pid)
            self.pids.pop(name)
        self._save()
        busy = [n for n, port in self.ports.items() if port_open(port)]
        for _ in range(50):
            if not busy:
                break
            time.sleep(0.1)
            busy = [n for n, port in self.ports.items() if port_open(port)]
        if busy:
            raise RuntimeError(f"ports still in use after stop: {busy}")

    # ------------------------------------------------------------ environment

    def function_env(self) -> dict[str, str]:
        p = self.ports
        if not p:
            return {}
        return {
            "PYTHONPATH": str(ROOT),
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{p['firestore']}",
            "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{p['pubsub']}",
            "CLOUD_TASKS_EMULATOR_HOST": f"127.0.0.1:{p['tasks']}",
            # The emulator dispatches a queue's tasks one at a time: spread them.
            "TASKS_QUEUE_COUNT": "4",
            "TIMEOUT_URL": f"http://127.0.0.1:{p['timeout']}/",
            "ENQUEUE_URL": f"http://127.0.0.1:{p['enqueue']}/",
            "PREPARE_URL": f"http://127.0.0.1:{p['prepare']}/",
            # Likewise for the prepare tasks: a room's consecutive messages go
            # to consecutive queues, so this many of its preparations run at once.
            "PREPARE_QUEUE_COUNT": "4",
            "WHATSAPP_API_BASE": f"http://127.0.0.1:{p['fake']}",
            "EVENT_LOG_PATH": str(self.event_log),
            "METRICS_LOG_PATH": str(self.run_dir / "invocations.jsonl"),
            **self.env,
        }

    def admin_env(self) -> dict[str, str]:
        """The admin function's own settings on the stack: the stand-in identity check."""
        return {"ADMIN_AUTH": "local", "ADMIN_LOCAL_KEY": self.admin_key,
                "ADMIN_OPERATORS": ",".join(self.admin_operators)}

    def client_env(self) -> dict[str, str]:
        """Environment a client process (publisher, tests) needs."""
        p = self.ports
        if not p:
            return {}
        return {
            "GOOGLE_CLOUD_PROJECT": PROJECT,
            "FIRESTORE_EMULATOR_HOST": f"127.0.0.1:{p['firestore']}",
            "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{p['pubsub']}",
            "CLOUD_TASKS_EMULATOR_HOST": f"127.0.0.1:{p['tasks']}",
            "PUBSUB_TOPIC": TOPIC,
        }

    @property
    def console_url(self) -> str | None:
        """The console's address (through the stack's `baton console` proxy), or None."""
        return f"http://127.0.0.1:{self.ports[CONSOLE]}/console/" if CONSOLE in self.ports else None

    @property
    def fake_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['fake']}"

    def url(self, function: str) -> str:
        return f"http://127.0.0.1:{self.ports[function]}/"

    @classmethod
    def load(cls, run_dir: Path) -> Stack:
        data = json.loads((run_dir / "stack.json").read_text())
        return cls(run_dir=run_dir, ports=data["ports"], pids=data["pids"], event_log=Path(data["event_log"]),
                   admin_key=(data.get("admin") or {}).get("local_key") or "")


def _settings_from(env: dict[str, str], config_module: Any) -> Any:
    saved = dict(os.environ)
    try:
        os.environ.update(env)
        return config_module.load()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _kill_group(pgid: int, grace_s: float = 10.0) -> None:
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        _reap(pgid)
        time.sleep(0.1)
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _reap(pgid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description="Start or stop the local baton stack.")
    parser.add_argument("action", choices=["up", "down", "env"])
    parser.add_argument("--run-dir", default=str(ROOT / "run" / "local"))
    args = parser.parse_args()
    run_dir = Path(args.run_dir)
    if args.action == "up":
        if (run_dir / "stack.json").exists() and Stack.load(run_dir).pids:
            sys.exit(f"a stack is already up in {run_dir}; run `make down` first")
        stack = Stack(run_dir).start()
        print(json.dumps({"ports": stack.ports, "run_dir": str(run_dir)}, indent=2))
        # The admin function builds its clients on its first page (seconds on a loaded machine,
        # past a Firestore deadline): ask it once here, so the address printed answers at once.
        for _ in range(3):
            try:
                if requests.get(stack.console_url, timeout=60).status_code == 200:
                    break
            except requests.RequestException:
                pass
        print(f"console: {stack.console_url}")
        print("export " + " ".join(f"{k}={v}" for k, v in stack.client_env().items()))
    elif args.action == "down":
        if not (run_dir / "stack.json").exists():
            print(f"no stack in {run_dir}")
            return
        Stack.load(run_dir).stop()
        print(f"stopped the stack in {run_dir}")
    else:
        print("export " + " ".join(f"{k}={v}" for k, v in Stack.load(run_dir).client_env().items()))


if __name__ == "__main__":
    main()
