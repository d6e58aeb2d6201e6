"""The local stand-in for Cloud Scheduler's watchdog job: POST the `sweep`
function every `--interval-s` seconds until stopped (SIGTERM/SIGINT).

`python -m tools.local.sweeper --url http://127.0.0.1:PORT/ --interval-s 10`;
tools/local/stack.py starts and stops it with the rest of the local stack.
"""

from __future__ import annotations

import argparse
import signal
import threading

import requests


def main() -> None:
    parser = argparse.ArgumentParser(description="Call the watchdog sweep on a fixed interval.")
    parser.add_argument("--url", required=True, help="the sweep function's URL")
    parser.add_argument("--interval-s", type=float, default=60.0, help="seconds between two sweeps")
    args = parser.parse_args()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    while not stop.wait(args.interval_s):
        try:
            r = requests.post(args.url, timeout=max(30.0, args.interval_s))
            print(f"sweep: {r.status_code} {r.text.strip()}", flush=True)
        except requests.RequestException as exc:
            print(f"sweep: {exc!r}", flush=True)


if __name__ == "__main__":
    main()
