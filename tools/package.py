"""`make package`: the functions' source archive, built reproducibly.

`dist/baton-functions.zip` holds `main.py` (from functions/) at its root, the
`shared/` package and `requirements.txt`: what Cloud Functions builds each of
`enqueue`, `webhook` and `timeout` from. Entries are sorted and carry a fixed
timestamp and mode, so the same sources give the same bytes (and the same
sha256, which Terraform puts in the object name). Prints the path and sha256.
"""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "dist" / "baton-functions.zip"
FIXED_TIME = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can hold


def sources() -> list[tuple[str, Path]]:
    """(name in the archive, file) for every file that is deployed, sorted."""
    files = [("main.py", ROOT / "functions" / "main.py"), ("requirements.txt", ROOT / "requirements.txt")]
    for path in sorted((ROOT / "shared").rglob("*.py")):
        if "__pycache__" not in path.parts:
            files.append((path.relative_to(ROOT).as_posix(), path))
    return sorted(files)


def build(out: Path = OUT) -> str:
    """Write the archive; returns its sha256 (hex)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as zf:
        for name, path in sources():
            info = zipfile.ZipInfo(name, date_time=FIXED_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    return hashlib.sha256(out.read_bytes()).hexdigest()


def main() -> None:
    digest = build(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
    print(f"{OUT.relative_to(ROOT)} sha256={digest}")


if __name__ == "__main__":
    main()
