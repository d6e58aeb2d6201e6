"""The load test's verdict: tools/local/chaos_check.py on the fake's record
(`--stats`, the JSON of `GET /_fake/stats`) and the delivery events
(`--events`, the JSON of `gcloud logging read`: each entry's `jsonPayload`).
Exit 0 when no message is lost, none out of order, none handed over early."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.cloud.loadtest.publish import published_ids
from tools.local.chaos_check import check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--stats", type=Path, required=True)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--published-rooms", type=int, required=True)
    parser.add_argument("--published-messages", type=int, required=True)
    parser.add_argument("--ack-timeout-ms", type=int, required=True)
    args = parser.parse_args(argv)
    stats = json.loads(args.stats.read_text())
    events = [entry["jsonPayload"] for entry in json.loads(args.events.read_text()) if "jsonPayload" in entry]
    verdict = check(published_ids(args.run_id, args.published_rooms, args.published_messages), events,
                    stats["sends"], stats["device"], [], args.ack_timeout_ms)
    print(json.dumps({"ok": verdict.ok, "outcomes": dict(verdict.outcomes), "send_calls": verdict.send_calls,
                      "duplicates_sent": verdict.duplicates_sent, "violations": verdict.violations()}, indent=2))
    return 0 if verdict.ok else 1


if __name__ == "__main__":
    sys.exit(main())
