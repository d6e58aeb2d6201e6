"""`make bench-publish`: baton-client's publishing rate against the raw
google-cloud-pubsub publisher with ordering keys, side by side in one run on
the Pub/Sub emulator, and the median cost of checking one message against
the contract.

Both publish the same workload (by default 100,000 messages over 25,000
rooms, ordering key = room, a mix of kinds: texts, templates, documents,
reply buttons) with the same batch settings (500 messages or 10 ms) to a
topic of their own on one emulator, in alternating order over `--rounds`
rounds; the raw publisher gets bytes and attributes made beforehand, the
client gets `Message`s and checks, encodes and publishes each
(`Publisher.publish_many`). A rate is messages / wall time from the first
publish to the last future resolved.

    python -m tools.bench.publish --messages 100000 --rooms 25000
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import requests
from baton_client import Button, Buttons, Document, Message, Publisher, Template, Text
from baton_client.contract import errors
from google.cloud import pubsub_v1

from tools.local.stack import ROOT, free_port, port_open, wait_until

PROJECT = "bench-publish"


def workload(messages: int, rooms: int) -> list[Message]:
    """`messages` messages over `rooms` rooms, rooms interleaved, a mix of kinds."""
    out = []
    for i in range(messages):
        r, k = i % rooms, i // rooms + 1
        room = f"room-{r:05d}"
        kind = i % 10
        if kind < 6:
            content = Text(f"message {k} of {room}")
        elif kind < 8:
            content = Template("order_update", "en_US", body=[room, f"#{k}"], buttons={0: "stop"})
        elif kind == 8:
            content = Document(link=f"https://example.com/invoices/{room}-{k}.pdf", filename=f"invoice-{k}.pdf")
        else:
            content = Buttons(f"Message {k}: helpful?", [Button("yes", "Yes"), Button("no", "No")])
        out.append(Message(room, "whatsapp", f"1555{r:07d}", f"{room}-m{k}", content))
    return out


def _client() -> pubsub_v1.PublisherClient:
    return pubsub_v1.PublisherClient(
        publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
        batch_settings=pubsub_v1.types.BatchSettings(max_messages=500, max_latency=0.01))


def raw_pass(topic: str, encoded: list[tuple[str, bytes, dict[str, str]]]) -> float:
    """Messages/s of the raw publisher (ordering key = room), data made beforehand."""
    client = _client()
    path = client.topic_path(PROJECT, topic)
    started = time.perf_counter()
    pending = [client.publish(path, data, ordering_key=room, **attrs) for room, data, attrs in encoded]
    futures.wait(pending)
    elapsed = time.perf_counter() - started
    failed = sum(1 for f in pending if f.exception() is not None)
    if failed:
        raise RuntimeError(f"raw publisher: {failed} publishes failed")
    return len(encoded) / elapsed


def client_pass(topic: str, messages: list[Message]) -> float:
    """Messages/s of baton-client (check, encode, publish, wait)."""
    publisher = Publisher(PROJECT, topic, client=_client())
    started = time.perf_counter()
    report = publisher.publish_many(messages)
    elapsed = time.perf_counter() - started
    if not report.ok:
        raise RuntimeError(f"baton-client: {len(report.failed)} publishes failed")
    return len(messages) / elapsed


def validation_us(messages: list[Message], sample: int) -> dict[str, float]:
    """Median us of one contract check (`errors`), over all and by kind."""
    by_kind: dict[str, list[float]] = {}
    for m in messages[:sample]:
        attrs, data = m.attributes(), m.content.to_data()
        t0 = time.perf_counter_ns()
        found = errors(attrs, data)
        took = (time.perf_counter_ns() - t0) / 1000
        if found:
            raise RuntimeError(f"the workload breaks the contract: {found}")
        by_kind.setdefault(data["type"], []).append(took)
    every = [t for ts in by_kind.values() for t in ts]
    return {"all": statistics.median(every), **{k: statistics.median(v) for k, v in sorted(by_kind.items())}}


def start_emulator(run_dir: Path) -> tuple[int, int]:
    """Start a Pub/Sub emulator in its own process group; (port, pgid)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with open(run_dir / "pubsub.log", "wb") as log:
        proc = subprocess.Popen(["gcloud", "beta", "emulators", "pubsub", "start", f"--host-port=127.0.0.1:{port}",
                                 f"--project={PROJECT}", "--quiet"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/", timeout=1).ok, 90, "Pub/Sub emulator")
    except BaseException:
        stop_emulator(proc.pid, port)
        raise
    return port, proc.pid


def stop_emulator(pgid: int, port: int) -> None:
    """Stop the emulator's whole process group (the java child too) and check its port is free."""
    for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.waitpid(pgid, os.WNOHANG)
            except ChildProcessError:
                pass
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            continue
        break
    if port_open(port):
        print(f"warning: port {port} still open after the emulator stopped", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--rooms", type=int, default=25_000)
    parser.add_argument("--rounds", type=int, default=2, help="raw and client passes each, alternating")
    parser.add_argument("--sample", type=int, default=20_000, help="messages whose check is timed one by one")
    args = parser.parse_args()
    messages = workload(args.messages, args.rooms)
    encoded = [(m.room_id, *m.encode()) for m in messages]
    checks = validation_us(messages, args.sample)
    port, pgid = start_emulator(ROOT / "run" / "bench-publish")
    os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{port}"
    raw_rates: list[float] = []
    client_rates: list[float] = []
    try:
        admin = pubsub_v1.PublisherClient()
        for r in range(args.rounds):
            for name in ("raw", "client") if r % 2 == 0 else ("client", "raw"):
                topic = f"bench-{name}-{r}"
                admin.create_topic(request={"name": admin.topic_path(PROJECT, topic)})
                if name == "raw":
                    raw_rates.append(raw_pass(topic, encoded))
                else:
                    client_rates.append(client_pass(topic, messages))
                print(f"round {r + 1} {name:>6}: {(raw_rates if name == 'raw' else client_rates)[-1]:,.0f} msg/s",
                      flush=True)
    finally:
        stop_emulator(pgid, port)
    raw, client = statistics.median(raw_rates), statistics.median(client_rates)
    result = {"messages": args.messages, "rooms": args.rooms, "rounds": args.rounds,
              "raw_msg_per_s": round(raw), "client_msg_per_s": round(client), "client_over_raw": round(client / raw, 3),
              "validation_median_us": {k: round(v, 1) for k, v in checks.items()}, "validation_sample": args.sample}
    print(f"{args.messages:,} messages over {args.rooms:,} rooms, {args.rounds} rounds (median of the passes)")
    print(f"raw google-cloud-pubsub, ordering keys: {raw:,.0f} msg/s")
    print(f"baton-client (check + encode + publish): {client:,.0f} msg/s = {client / raw:.2f} of raw")
    print("contract check, median us per message: " + ", ".join(f"{k} {v:.1f}" for k, v in checks.items()))
    out = ROOT / "out" / "bench-publish.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
