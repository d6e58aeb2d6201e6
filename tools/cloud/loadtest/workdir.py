"""`python -m tools.cloud.loadtest.workdir --to DIR`: a copy of infra/ for the
load test's own deployment, without anything of the production one.

Terraform reads `terraform.tfvars` and `*.auto.tfvars(.json)` of the
directory it runs in by itself, and `backend.tf` names the production
state: run in infra/, the load test would inherit the production settings
and share its backend. The copy leaves them out (and `.terraform`, local
state), so every variable of the load test is the one its plan passes
(tools/cloud/loadtest/plan.py), and its state stays in the copy.
"""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# What a user's infra/ may hold that belongs to the production deployment.
LEFT_OUT = ("terraform.tfvars", "terraform.tfvars.json", "*.auto.tfvars", "*.auto.tfvars.json", "backend.tf",
            ".terraform", "terraform.tfstate", "terraform.tfstate.*", "terraform.tfstate.d")


def copy_infra(source: Path, target: Path) -> list[str]:
    """Copy `source` (infra/) to `target` without LEFT_OUT; returns the
    names left out that were there. An existing `target`'s Terraform files
    are replaced, its state and `.terraform` kept (a second run reuses them).
    """
    skipped = sorted(p.name for p in source.iterdir() if any(fnmatch.fnmatch(p.name, pat) for pat in LEFT_OUT))
    target.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*LEFT_OUT))
    return skipped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--to", type=Path, required=True, help="the copy's directory")
    args = parser.parse_args(argv)
    skipped = copy_infra(ROOT / "infra", args.to)
    print(f"infra/ copied to {args.to}" + (f", without {', '.join(skipped)}" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
