"""No text in the repository names a path it does not have, or anything
outside it (issue 45, item 7: 14 references to the room and service
modules the split deleted, 12 to a design file beside the checkout).

What counts as a reference: in every text file git tracks (code, docs,
Terraform, make files, .ci/run, requirements, HTML), a relative path that
starts at one of the repository's top-level folders (`shared/room/entry.py`,
`tools/sim/fake_platform/`, `docs/cost.md`, ...) and a module run or imported
by its dotted name (`-m tools.local.stack`, `from tools.sim import ...`).
Both must exist in the checkout; the few that need not are in ALLOWED,
each with why. Anything that walks out of the repository by `../` is
refused whether it exists on this machine or not.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
THIS = Path(__file__).resolve()
TOP = ("shared", "tools", "functions", "pipeline", "baton_cli", "tests", "client", "infra", "docs", "mk", ".ci")
# Paths named on purpose that a checkout does not hold: each with its reason.
ALLOWED = {
    "infra/backend.tf",  # the user's, from infra/examples/backend.tf.example (docs/deploy.md)
    "infra/terraform.tfvars",  # the user's settings, from infra/examples/terraform.tfvars.example
    "infra/terraform.tfstate",  # Terraform's local state, before a backend is configured
    "infra/.terraform",  # what `terraform init` writes into the user's infra/
    "infra/.terraform.lock.hcl",
    "shared/MODULE.py",  # a placeholder in a how-to
}
# Generated at run time under these folders (the build, the runs, the reports); never in git.
GENERATED = ("dist/", "run/", "out/", ".venv", "tests/infra/.cache")

# A relative path: a top-level folder, then at least one more part; it ends at
# the first character a path in this repository never has (space, quote,
# backtick, bracket, comma, colon, ...). A trailing dot is a full stop.
PATH = re.compile(r"(?<![\w./-])(?:" + "|".join(re.escape(t) for t in TOP) + r")/[A-Za-z0-9_./*{}-]*[A-Za-z0-9_/]")
# A module of the repository's own packages named by its dotted path.
MODULE = re.compile(r"(?:-m |\"-m\",\s*\"|^\s*from |^\s*import )((?:shared|tools|functions|pipeline|baton_cli|tests)(?:\.\w+)+)",
                    re.MULTILINE)
OUTSIDE = re.compile(r"(?<![\w./])\.\./[\w./-]*\w")


@cache
def tracked_text_files() -> tuple[str, ...]:
    names = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split("\n")
    keep = []
    for name in filter(None, names):
        path = ROOT / name
        # This file names missing paths on purpose (the patterns' own test).
        if path.suffix in {".png", ".jpg", ".ico", ".woff2", ".zip"} or not path.is_file() or path.resolve() == THIS:
            continue
        keep.append(name)
    return tuple(keep)


def read(name: str) -> str:
    return (ROOT / name).read_text(errors="replace")


def exists(ref: str) -> bool:
    """Whether the path `ref` (a glob or `{a,b}` pattern matches if anything
    does) is in the checkout."""
    ref = ref.rstrip("/.")
    if ref in ALLOWED or ref.startswith(GENERATED) or "{" in ref:
        return True
    if any(ch in ref for ch in "*?["):
        return any(ROOT.glob(ref))
    return (ROOT / ref).exists()


def module_exists(dotted: str) -> bool:
    """Whether `a.b.c` is a module or a package here."""
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def test_every_path_the_repository_names_exists_in_it():
    missing = set()
    for name in tracked_text_files():
        for ref in PATH.findall(read(name)):
            if not exists(ref):
                missing.add((name, ref))
    assert not missing, sorted(missing)


def test_every_module_the_repository_runs_or_imports_exists_in_it():
    missing = {(name, m) for name in tracked_text_files() for m in MODULE.findall(read(name))
               if not module_exists(m)}
    assert not missing, sorted(missing)


def test_nothing_points_outside_the_repository():
    """A `../` that leaves the repository (the design notes' folder beside a
    checkout) names what a reader of the repository does not have; one that
    stays inside must exist."""
    outside = set()
    for name in tracked_text_files():
        for ref in OUTSIDE.findall(read(name)):
            target = ((ROOT / name).parent / ref).resolve()
            if not target.is_relative_to(ROOT):
                outside.add((name, ref))
            elif not target.exists() and not str(target.relative_to(ROOT)).startswith(GENERATED):
                outside.add((name, ref))
    assert not outside, sorted(outside)


def test_the_checks_see_a_missing_path_a_missing_module_and_one_outside():
    """The patterns themselves: each case the repository once had is caught."""
    # Built from parts, so that this file names no such path itself.
    gone, outside = "shared/" + "room.py", "../elsewhere/NOTES.md"
    text = (f"see {gone} and `tools/nowhere/` (python -m tools.nowhere); {outside} says so.\n"
            'spawn([py, "-m", "tools.gone"])')
    assert [r for r in PATH.findall(text) if not exists(r)] == [gone, "tools/nowhere/"]
    assert [m for m in MODULE.findall(text) if not module_exists(m)] == ["tools.nowhere", "tools.gone"]
    assert OUTSIDE.findall(text) == [outside]
    assert exists("shared/room/entry.py") and exists("tools/") and module_exists("shared.room.entry")
