"""`python -m tools.cloud.loadtest --project P [--dry-run]` (`make
loadtest-cloud PROJECT=P`): the cloud load test (see the package's
docstring and docs/loadtest.md). `--dry-run` prints every step, the
resources it creates and the calls it makes, and touches nothing."""

from __future__ import annotations

import argparse
import secrets
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from tools.cloud.loadtest.plan import LoadTest, Step, build, render

ROOT = Path(__file__).resolve().parents[3]


def parse(argv: list[str] | None) -> tuple[LoadTest, bool, Path]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--project", required=True, help="the GCP project to load (billing on)")
    parser.add_argument("--region", default="europe-west1")
    parser.add_argument("--name-prefix", default="baton-lt", help="the load test's own deployment (never `baton`)")
    parser.add_argument("--rooms", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=10, help="messages per room")
    parser.add_argument("--rate", type=float, default=100.0, help="messages/s published, all rooms together")
    parser.add_argument("--ack-timeout-ms", type=int, default=3000, help="the deployment's ACK_TIMEOUT_MS")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "loadtest", help="where the records are saved")
    parser.add_argument("--dry-run", action="store_true", help="print the plan; run nothing")
    args = parser.parse_args(argv)
    test = LoadTest(args.project, args.region, args.name_prefix, args.rooms, args.messages, args.rate,
                    args.ack_timeout_ms)
    try:
        test.validate()
    except ValueError as exc:
        parser.error(str(exc))
    return test, args.dry_run, args.out


def run(steps: list[Step], out: Path) -> int:
    """Run the steps in order, filling placeholders from earlier steps. The
    teardown steps run even when an earlier step failed."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    token = secrets.token_hex(24)
    values = {"token": token, "control_header": f"Authorization: Bearer {token}", "started_at": now, "ended_at": now,
              "fake_url": "", "webhook_url": "", "token_of_gcloud": "", "out": str(out.resolve()), "root": str(ROOT)}
    status = 0
    for step in steps:
        if status and step.phase != "teardown":
            continue
        if step.phase in ("verdict", "monitoring"):
            values["ended_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            values["token_of_gcloud"] = _gcloud("auth", "print-access-token")
        argv = [a.format(**values) for a in step.argv]
        print(f"[{step.phase}] {step.what}", flush=True)
        done = subprocess.run(argv, input=values[step.stdin] if step.stdin else None, text=True,
                              capture_output=bool(step.capture or step.save), cwd=ROOT, check=False)
        if step.capture:
            values[step.capture] = done.stdout.strip()
        if step.save:
            (out / step.save).write_text(done.stdout)
        if done.returncode != 0 and step.phase != "monitoring":
            print(f"failed ({done.returncode}): {' '.join(step.argv[:4])} ...; tearing down", file=sys.stderr)
            status = status or done.returncode
    return status


def _gcloud(*args: str) -> str:
    return subprocess.run(["gcloud", *args], check=True, capture_output=True, text=True).stdout.strip()


def main(argv: list[str] | None = None) -> int:
    test, dry_run, out = parse(argv)
    steps = build(test, ".")  # commands run in the repository's root
    if dry_run:
        print(f"load test plan: {test.rooms:,} rooms x {test.messages:,} messages at {test.rate:g} messages/s "
              f"in {test.project} ({test.region}), deployment `{test.name_prefix}`; nothing is run (--dry-run)")
        print(render(steps))
        return 0
    return run(steps, out)


if __name__ == "__main__":
    sys.exit(main())
