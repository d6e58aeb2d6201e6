"""`make package`: the functions' source archive, built reproducibly.

`dist/baton-functions.zip` holds what Cloud Functions builds the six
functions from (enqueue, deadletter, webhook, status, timeout, sweep: one
archive, six entry points, infra/functions.tf):

    main.py            functions/main.py, at the root (the entry points)
    requirements.txt   the runtime dependencies, installed by the build
    shared/...         the package main.py imports (no __pycache__, no .pyc)

Entries are sorted and carry a fixed timestamp, mode and creator system, so
the same sources give the same bytes on any machine, and so the same sha256,
which Terraform puts in the archive's object name (infra/functions.tf): an
unchanged build does not redeploy. Prints the archive's path and sha256.

Usage: python tools/cloud/package.py [OUTPUT.zip]
"""

from __future__ import annotations

import hashlib
import os
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "dist" / "baton-functions.zip"
# The earliest time a zip entry can hold; any fixed value would do.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FILE_MODE = 0o644
UNIX = 3  # zip "version made by" host system; the default depends on the OS


def sources(root: Path = ROOT) -> list[tuple[str, Path]]:
    """(name in the archive, file) for every deployed file, sorted by name."""
    files = [("main.py", root / "functions" / "main.py"), ("requirements.txt", root / "requirements.txt")]
    for path in (root / "shared").rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in {".pyc", ".pyo"}:
            files.append((path.relative_to(root).as_posix(), path))
    return sorted(files)


def build(out: Path = OUT, root: Path = ROOT) -> str:
    """Write the archive to `out` and return its sha256 (hex)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w") as archive:
        for name, path in sources(root):
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.create_system = UNIX
            info.external_attr = FILE_MODE << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes(), compresslevel=9)
    # Never leave a half-written archive where Terraform would upload it.
    os.replace(partial, out)
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main(argv: list[str]) -> None:
    out = Path(argv[1]).resolve() if len(argv) > 1 else OUT
    digest = build(out)
    shown = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    print(f"{shown} sha256={digest}")


if __name__ == "__main__":
    main(sys.argv)
