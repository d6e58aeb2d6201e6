"""Wait until the fake platform has made `--expect` sends, or time is up.
Reads `GET /_fake/stats` with the fake's control token, read from stdin
(the service is public; its controls need the token). Exit 0 when
drained, 1 on timeout."""

from __future__ import annotations

import argparse
import sys
import time

import requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--fake-url", required=True)
    parser.add_argument("--expect", type=int, required=True)
    parser.add_argument("--timeout-s", type=int, default=1800)
    args = parser.parse_args(argv)
    token = sys.stdin.read().strip()
    if not token:
        parser.error("the fake's control token is read from stdin")
    deadline = time.monotonic() + args.timeout_s
    while time.monotonic() < deadline:
        stats = requests.get(f"{args.fake_url}/_fake/stats", headers={"Authorization": f"Bearer {token}"},
                             timeout=60).json()
        sends = len(stats["sends"])
        print(f"{sends:,} of {args.expect:,} sends", flush=True)
        if sends >= args.expect:
            return 0
        time.sleep(10)
    return 1


if __name__ == "__main__":
    sys.exit(main())
